#include "cuda/tma/tensor_map.h"

#include <cuda_runtime.h>

#include <cudaTypedefs.h>

#include <mutex>
#include <string>
#include <type_traits>

namespace jax_hopper {
namespace {

struct DriverFns {
  PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  PFN_cuGetErrorString_v6000 error_string = nullptr;
  std::string load_error;
};

const DriverFns& driver() {
  static DriverFns fns;
  static std::once_flag once;
  std::call_once(once, [] {
    cudaDriverEntryPointQueryResult q;
    void* p = nullptr;
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                     cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || p == nullptr) {
      fns.load_error = std::string("cuTensorMapEncodeTiled not available from the driver: ") +
                       cudaGetErrorString(e);
      return;
    }
    fns.encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    if (cudaGetDriverEntryPointByVersion("cuGetErrorString", &p, 6000, cudaEnableDefault, &q) ==
            cudaSuccess &&
        q == cudaDriverEntryPointSuccess) {
      fns.error_string = reinterpret_cast<PFN_cuGetErrorString_v6000>(p);
    }
  });
  return fns;
}

int swizzle_span(CUtensorMapSwizzle s) {
  switch (s) {
    case CU_TENSOR_MAP_SWIZZLE_32B: return 32;
    case CU_TENSOR_MAP_SWIZZLE_64B: return 64;
    case CU_TENSOR_MAP_SWIZZLE_128B: return 128;
    default: return 0;
  }
}

size_t elem_bytes(CUtensorMapDataType t) {
  switch (t) {
    case CU_TENSOR_MAP_DATA_TYPE_UINT8: return 1;
    case CU_TENSOR_MAP_DATA_TYPE_UINT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16: return 2;
    case CU_TENSOR_MAP_DATA_TYPE_UINT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32: return 4;
    case CU_TENSOR_MAP_DATA_TYPE_UINT64: return 8;
    default: return 0;
  }
}

// Appends each part (text or a number) to `out`: the message of a broken rule.
void append(std::string&) {}
template <class T, class... Rest>
void append(std::string& out, const T& part, const Rest&... rest) {
  if constexpr (std::is_arithmetic_v<T>) out += std::to_string(part);
  else out += part;
  append(out, rest...);
}

}  // namespace

std::string encode_tensor_map(const TensorMapSpec& s, CUtensorMap* out) {
  // NOTES: these mirror jax_hopper/layout/validate.py, which rejects the same inputs in Python
  // before launch; this is the last line of defence for callers that bypass the wrapper. The
  // message is a plain std::string, composed only where a rule is broken: a std::ostringstream
  // made on every call cost ~0.23 us, and a GEMM call encodes three or four maps.
  std::string why;
  const size_t eb = elem_bytes(s.dtype);
  if (s.rank < 1 || s.rank > 5) append(why, "rank ", s.rank, " outside 1..5; ");
  if (reinterpret_cast<uintptr_t>(s.base) % 16 != 0)
    append(why, "global address not 16-byte aligned; ");
  for (int i = 0; i < s.rank && i < 5; ++i) {
    if (s.box[i] < 1 || s.box[i] > 256)
      append(why, "box[", i, "]=", s.box[i], " outside 1..256; ");
    if (s.dims[i] < 1 || s.dims[i] > (uint64_t(1) << 32)) append(why, "dims[", i, "] out of range; ");
    if (i > 0 && (s.strides_bytes[i] % 16 != 0 || s.strides_bytes[i] >= (uint64_t(1) << 40)))
      append(why, "stride of dim ", i, " (", s.strides_bytes[i],
             " bytes) not a multiple of 16 below 2^40; ");
  }
  const size_t inner_bytes = s.box[0] * eb;
  if (inner_bytes % 16 != 0) append(why, "inner box bytes ", inner_bytes, " not a multiple of 16; ");
  const int span = swizzle_span(s.swizzle);
  if (span && inner_bytes > static_cast<size_t>(span))
    append(why, "inner box bytes ", inner_bytes, " exceed the swizzle span ", span, "; ");
  if (!why.empty()) return "tensor map rejected: " + why;

  const DriverFns& d = driver();
  if (!d.encode) return d.load_error;
  cuuint32_t elem_strides[5] = {1, 1, 1, 1, 1};
  // No L2 promotion: a box row that starts off a 256-byte boundary (a row pitch such as 6000
  // bytes) would also fetch lines no box asked for, and a mid-M GEMM's pace is the L2's reads.
  // NOTES (H200, 2026-12-02, ab_h200_20261202_l2_promotion.json, against 256-byte promotion,
  // device time): 792 x 3000 x 14336 1.18x, 1500 x 2744 x 5000 1.12x, 2000 x 3000 x 4104 1.08x,
  // 1.02-1.06x on six more (decode, fp8, grouped, glu), 0.96-1.00x on the aligned squares,
  // where 256 bytes kept only for pitches on the block measured no better (0.986 geomean:
  // ab_h200_20261202_promotion_by_pitch.json; a 3-rep median there spreads ~3% between runs).
  CUresult r = d.encode(out, s.dtype, s.rank, s.base, s.dims, s.strides_bytes + 1, s.box,
                        elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, s.swizzle,
                        CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    const char* msg = "unknown error";
    if (d.error_string) d.error_string(r, &msg);
    return std::string("cuTensorMapEncodeTiled failed: ") + msg;
  }
  return "";
}

}  // namespace jax_hopper
