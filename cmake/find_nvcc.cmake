# Decides whether the kernels are built, and with which nvcc. The choice is the cache variable
# (or environment variable) JAX_HOPPER_KERNELS: AUTO (default: when an nvcc is found), ON (an
# nvcc is required) or OFF (a pure-JAX package whose ops run their XLA reference).
# nvcc is looked for in the order a user expects: CMAKE_CUDA_COMPILER, CUDACXX, CUDA_HOME /
# CUDA_PATH, PATH, /usr/local/cuda. A variable that is set must point at an nvcc: a typo there
# is an error naming the variable, never a silent pure-JAX build.
# Sets JAX_HOPPER_BUILD_KERNELS (ON/OFF) and JAX_HOPPER_NO_KERNELS_REASON in the caller.
function(jax_hopper_find_nvcc)
  set(_mode "AUTO")
  if(DEFINED JAX_HOPPER_KERNELS)
    set(_mode "${JAX_HOPPER_KERNELS}")
  elseif(DEFINED ENV{JAX_HOPPER_KERNELS})
    set(_mode "$ENV{JAX_HOPPER_KERNELS}")
  endif()
  string(TOUPPER "${_mode}" _mode)
  if(NOT _mode MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "jax-hopper: JAX_HOPPER_KERNELS=${_mode} must be AUTO, ON or OFF")
  endif()
  if(_mode STREQUAL "OFF")
    set(JAX_HOPPER_BUILD_KERNELS OFF PARENT_SCOPE)
    set(JAX_HOPPER_NO_KERNELS_REASON "built with JAX_HOPPER_KERNELS=OFF" PARENT_SCOPE)
    return()
  endif()

  set(_nvcc "")
  if(DEFINED CMAKE_CUDA_COMPILER)
    if(NOT EXISTS "${CMAKE_CUDA_COMPILER}")
      message(FATAL_ERROR "jax-hopper: CMAKE_CUDA_COMPILER=${CMAKE_CUDA_COMPILER} does not exist")
    endif()
    set(_nvcc "${CMAKE_CUDA_COMPILER}")
  elseif(DEFINED ENV{CUDACXX})
    if(NOT EXISTS "$ENV{CUDACXX}")
      message(FATAL_ERROR "jax-hopper: CUDACXX=$ENV{CUDACXX} does not exist: point it at nvcc, "
                          "or unset it (and set JAX_HOPPER_KERNELS=OFF to build without kernels)")
    endif()
    set(_nvcc "$ENV{CUDACXX}")
  else()
    foreach(_var CUDA_HOME CUDA_PATH)
      if(DEFINED ENV{${_var}} AND NOT _nvcc)
        if(NOT EXISTS "$ENV{${_var}}/bin/nvcc")
          message(FATAL_ERROR "jax-hopper: ${_var}=$ENV{${_var}} has no bin/nvcc: point it at a "
                              "CUDA toolkit >= ${JAX_HOPPER_MIN_CUDA}, or unset it")
        endif()
        set(_nvcc "$ENV{${_var}}/bin/nvcc")
      endif()
    endforeach()
  endif()
  if(NOT _nvcc)
    find_program(_found nvcc PATHS /usr/local/cuda/bin NO_CACHE)
    if(_found)
      set(_nvcc "${_found}")
    endif()
  endif()

  if(NOT _nvcc)
    string(CONCAT _why "nvcc not found (looked at CMAKE_CUDA_COMPILER, CUDACXX, CUDA_HOME, "
                       "CUDA_PATH, PATH, /usr/local/cuda)")
    if(_mode STREQUAL "ON")
      message(FATAL_ERROR "jax-hopper: JAX_HOPPER_KERNELS=ON but ${_why}: install the CUDA toolkit "
                          ">= ${JAX_HOPPER_MIN_CUDA} or set CUDACXX=/path/to/nvcc.")
    endif()
    set(JAX_HOPPER_BUILD_KERNELS OFF PARENT_SCOPE)
    set(JAX_HOPPER_NO_KERNELS_REASON "${_why}" PARENT_SCOPE)
    return()
  endif()
  set(CMAKE_CUDA_COMPILER "${_nvcc}" CACHE FILEPATH "CUDA compiler" FORCE)
  set(JAX_HOPPER_BUILD_KERNELS ON PARENT_SCOPE)
  set(JAX_HOPPER_NO_KERNELS_REASON "" PARENT_SCOPE)
endfunction()
