# Locate nvcc in the order a user expects: CUDACXX, CMAKE_CUDA_COMPILER, CUDA_HOME / CUDA_PATH,
# PATH, /usr/local/cuda. Stops with one line saying what to install when none is there.
function(jax_hopper_find_nvcc)
  if(DEFINED CMAKE_CUDA_COMPILER OR DEFINED ENV{CUDACXX})
    return()
  endif()
  set(_hints)
  foreach(_var CUDA_HOME CUDA_PATH)
    if(DEFINED ENV{${_var}})
      list(APPEND _hints "$ENV{${_var}}/bin")
    endif()
  endforeach()
  find_program(_nvcc nvcc HINTS ${_hints} PATHS /usr/local/cuda/bin NO_CACHE)
  if(NOT _nvcc)
    message(FATAL_ERROR
      "jax-hopper: nvcc not found (looked at CUDACXX, CUDA_HOME, CUDA_PATH, PATH, /usr/local/cuda): "
      "install the CUDA toolkit >= ${JAX_HOPPER_MIN_CUDA} or set CUDACXX=/path/to/nvcc.")
  endif()
  set(CMAKE_CUDA_COMPILER "${_nvcc}" CACHE FILEPATH "CUDA compiler" FORCE)
endfunction()
