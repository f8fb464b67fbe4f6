// The stream-K ready flags of one GEMM custom call, kept across its executions as XLA FFI
// state: the instantiate stage makes one SplitFlags per call from its plan (attributes), the
// initialize stage (run before every execution with the device's context current, and before a
// command buffer records the call) allocates and zeroes the flags on that device the first
// time, and the execute stage hands the device's flags to the kernel, which leaves them zero
// (cuda/gemm/scheduler/fixup.cuh). One XLA executable serves every local GPU with the same
// state, hence one allocation per device.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "ffi/common.h"

namespace jax_hopper {

class SplitFlags {
 public:
  static ffi::TypeId id;  // assigned when jax_hopper registers the type (jax_hopper/_ffi.py)
  static const XLA_FFI_TypeInfo* type_info();

  explicit SplitFlags(int64_t count) : count_(count) {}
  ~SplitFlags();
  SplitFlags(const SplitFlags&) = delete;
  SplitFlags& operator=(const SplitFlags&) = delete;

  int64_t count() const { return count_; }
  // Allocates and zeroes the current device's flags, once; ordered before later work on `stream`.
  ffi::Error prepare(cudaStream_t stream);
  // CUDA device `device`'s flags, or nullptr if prepare has not run there (or none are needed).
  int32_t* on_device(int device);

 private:
  const int64_t count_;
  std::mutex mu_;
  std::unordered_map<int, int32_t*> flags_;  // by CUDA device ordinal
};

}  // namespace jax_hopper
