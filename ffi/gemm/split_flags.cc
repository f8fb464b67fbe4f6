#include "ffi/gemm/split_flags.h"

#include "ffi/gemm/gemm_call.h"
#include "ffi/handlers.h"

namespace jax_hopper {

ffi::TypeId SplitFlags::id = XLA_FFI_UNKNOWN_TYPE_ID;

const XLA_FFI_TypeInfo* SplitFlags::type_info() {
  static const XLA_FFI_TypeInfo info = ffi::MakeTypeInfo<SplitFlags>();
  return &info;
}

SplitFlags::~SplitFlags() {
  // The executable is being destroyed: no launch of this call is pending. Errors are ignored
  // (at process exit the CUDA context may already be gone).
  int current = 0;
  const bool restore = cudaGetDevice(&current) == cudaSuccess;
  for (const auto& [device, flags] : flags_) {
    if (cudaSetDevice(device) == cudaSuccess) cudaFree(flags);
  }
  if (restore) cudaSetDevice(current);
}

ffi::Error SplitFlags::prepare(cudaStream_t stream) {
  if (count_ == 0) return ffi::Error::Success();
  int device = 0;
  JH_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mu_);
  if (flags_.count(device) != 0) return ffi::Error::Success();
  void* flags = nullptr;
  const size_t bytes = static_cast<size_t>(count_) * sizeof(int32_t);
  JH_CUDA_RETURN_IF_ERROR(cudaMalloc(&flags, bytes));
  const cudaError_t err = cudaMemsetAsync(flags, 0, bytes, stream);
  if (err != cudaSuccess) {
    cudaFree(flags);
    JH_CUDA_RETURN_IF_ERROR(err);
  }
  flags_[device] = static_cast<int32_t*>(flags);
  return ffi::Error::Success();
}

int32_t* SplitFlags::on_device(int device) {
  if (count_ == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = flags_.find(device);
  return it == flags_.end() ? nullptr : it->second;
}

namespace {

// The call's plan is in its attributes: the flags it needs (no CUDA work here: this stage runs
// while XLA compiles, with no device context).
ffi::ErrorOr<std::unique_ptr<SplitFlags>> instantiate(GemmAttrs attrs) {
  if (ffi::Error err = check_attrs("GEMM custom call", attrs); err.failure())
    return ffi::Unexpected(std::move(err));
  StreamKPlan plan = {};
  plan.sk_clusters = static_cast<int32_t>(attrs.sk_clusters);
  return std::make_unique<SplitFlags>(
      split_flag_count(plan, static_cast<int32_t>(attrs.cluster_m * attrs.cluster_n)));
}

ffi::Error initialize(cudaStream_t stream, SplitFlags* flags) { return flags->prepare(stream); }

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(GemmInstantiate, instantiate,
                              ffi::Ffi::BindInstantiate().Attrs<GemmAttrs>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(GemmInitialize, initialize,
                              ffi::Ffi::Bind<ffi::ExecutionStage::kInitialize>()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::State<SplitFlags>>());

}  // namespace jax_hopper
