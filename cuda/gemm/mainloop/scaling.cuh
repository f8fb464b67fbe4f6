// How fp8 operands' scales reach the product. A scaled operand is a = scale * A_fp8.
//  - NoScaling: the 16-bit families.
//  - TensorScaling: one float32 per tensor (or per batch entry), so the product is (a_scale *
//    b_scale) * (A_fp8 B_fp8): MainloopSS multiplies its fp32 accumulators once, after the
//    k-loop, before the epilogue (alpha, bias, activation) and before a stream-K fix-up sums the
//    pieces (each piece is scaled alike).
//  - BlockScaling (DeepSeek-V3's fine-grained recipe): one float32 per row of A and 128-wide
//    k-block, one per 128 x 128 block of B (128 of its N rows by a k-block). The scale then
//    varies inside the product, so each k-block's wgmma result is scaled on its own and added
//    into the accumulators in fp32 (MainloopSSPromoted, cuda/gemm/mainloop/ss_promoted.cuh).
//  - SwappedBlockScaling: the same recipe for the swap-AB kernels (out^T = b a^T), whose A is
//    the weight (one scale per 128 x 128 block) and whose B the tokens (one per row and
//    k-block): BlockScaling with the operands' roles exchanged.
// The scales are device arrays, read by the kernel: traced values, never compiled into the call.
#pragma once

#include <cstdint>
#include <string>

#include "cuda/gemm/gemm.h"

namespace jax_hopper {

struct NoScaling {
  struct Params {};
  struct Value {};
  static std::string host_params(const GemmArgs&, Params*) { return {}; }
  template <class CoordFn>
  __device__ static Value load(const Params&, const CoordFn&) { return {}; }
  template <int kRegs>
  __device__ static void apply(Value, float*) {}
};

struct TensorScaling {
  struct Params {
    const float* a;
    const float* b;
    // 1: one scale per batch entry (the tile's TileCoord::batch indexes it; in the grouped
    // GEMM that is the group, so b_scale is per expert); 0: one scale for every entry.
    int32_t a_per_entry, b_per_entry;
  };
  using Value = float;
  static std::string host_params(const GemmArgs& g, Params* p) {
    const Array3 &sa = g.a_scale, &sb = g.b_scale;
    if (sa.data == nullptr || sb.data == nullptr)
      return "per-tensor scaled operands need a_scale and b_scale";
    const int64_t na = sa.batch * sa.rows * sa.cols, nb = sb.batch * sb.rows * sb.cols;
    if ((na != 1 && na != g.batch) || (nb != 1 && nb != g.batch))
      return "per-tensor scales must be one float32, or one per batch entry";
    *p = Params{static_cast<const float*>(sa.data), static_cast<const float*>(sb.data),
                na == 1 ? 0 : 1, nb == 1 ? 0 : 1};
    return {};
  }
  // Issued before the mainloop waits on its first stage, so the loads' latency is hidden; the
  // tile's coordinates are computed for it only where a scale differs per entry.
  template <class CoordFn>
  __device__ static Value load(const Params& p, const CoordFn& coord) {
    if ((p.a_per_entry | p.b_per_entry) == 0) return __ldg(p.a) * __ldg(p.b);
    // The grouped GEMM's rows past every group have batch -1: never stored, any scale serves.
    const int32_t batch = max(coord().batch, 0);
    return __ldg(p.a + batch * p.a_per_entry) * __ldg(p.b + batch * p.b_per_entry);
  }
  template <int kRegs>
  __device__ static void apply(Value s, float* acc) {
#pragma unroll
    for (int i = 0; i < kRegs; ++i) acc[i] *= s;
  }
};

// The two float32 scale arrays of a block-scaled product, (Ba or 1, a_rows, k_blocks) and
// (Bb or 1, b_rows, k_blocks): a row of either, over the k-blocks, is a_at / b_at(batch, row)
// (index it with the k-block; the mainloop takes it once per work unit, so each unit's loads
// are a pointer plus the k-block index). Past the last row it is the last one's: rows and
// columns past the problem are computed but never stored, so any scale serves them, and the
// loads need no predicate. In the grouped GEMM the batch entry is the tile's group (B's scales
// per expert, A's one array for every row); a tile slot past every group has batch -1 and no
// k-blocks: its pointers are never read, and are clamped into the arrays all the same.
struct ScaleArrays {
  const float* a;
  const float* b;
  int64_t a_batch_stride, b_batch_stride;  // 0 when one scale array serves every batch entry
  int32_t a_rows, b_rows, k_blocks;

  __device__ const float* a_at(int32_t batch, int32_t row) const {
    return a + max(batch, 0) * a_batch_stride + int64_t(min(row, a_rows - 1)) * k_blocks;
  }
  __device__ const float* b_at(int32_t batch, int32_t row) const {
    return b + max(batch, 0) * b_batch_stride + int64_t(min(row, b_rows - 1)) * k_blocks;
  }

  // The kernel's scales (g.a_scale, g.b_scale) checked against a_rows and b_rows rows of
  // ceil(K/128) k-blocks each; a_rule / b_rule say what is wrong otherwise.
  static std::string read(const GemmArgs& g, int64_t a_rows, int64_t b_rows, const char* a_rule,
                          const char* b_rule, ScaleArrays* p) {
    const Array3 &sa = g.a_scale, &sb = g.b_scale;
    const int64_t k_blocks = (int64_t(g.k) + kFp8ScaleBlock - 1) / kFp8ScaleBlock;
    if (sa.data == nullptr || sb.data == nullptr)
      return "block-scaled operands need a_scale and b_scale";
    if (sa.rows != a_rows || sa.cols != k_blocks || (sa.batch != 1 && sa.batch != g.batch))
      return a_rule;
    if (sb.rows != b_rows || sb.cols != k_blocks || (sb.batch != 1 && sb.batch != g.batch))
      return b_rule;
    *p = ScaleArrays{static_cast<const float*>(sa.data), static_cast<const float*>(sb.data),
                     sa.batch == 1 ? 0 : sa.rows * sa.cols, sb.batch == 1 ? 0 : sb.rows * sb.cols,
                     static_cast<int32_t>(a_rows), static_cast<int32_t>(b_rows),
                     static_cast<int32_t>(k_blocks)};
    return {};
  }
};

// Block scales on a product whose A is scaled per row and B per 128-row block (kSwapped
// false: BlockScaling), or, for the swap-AB kernels (out^T = b a^T), whose A is the weight
// scaled per 128 x 128 block and B the tokens per row (kSwapped: SwappedBlockScaling). The
// mainloop reads a row of either array through ScaleArrays::a_at / b_at.
template <bool kSwapped>
struct BlockScalingOf {
  static constexpr int kBlock = kFp8ScaleBlock;  // K elements (and rows) one scale covers
  static constexpr bool kPerRowOfA = !kSwapped;  // else A per 128-row block, B per row
  using Params = ScaleArrays;

  // Swapped, the kernel's A is the call's b (N rows: g.m here) and its B the call's a (M rows:
  // g.n), and the handler has exchanged the scales with them, so the messages name the call's
  // arguments either way.
  static std::string host_params(const GemmArgs& g, Params* p) {
    constexpr const char* kARule = "a_scale must be (batch or 1, M, ceil(K/128)) float32";
    constexpr const char* kBRule =
        "b_scale must be (batch or 1, ceil(N/128), ceil(K/128)) float32";
    if constexpr (kSwapped)
      return ScaleArrays::read(g, (int64_t(g.m) + kBlock - 1) / kBlock, g.n, kBRule, kARule, p);
    else
      return ScaleArrays::read(g, g.m, (int64_t(g.n) + kBlock - 1) / kBlock, kARule, kBRule, p);
  }
};

using BlockScaling = BlockScalingOf<false>;
using SwappedBlockScaling = BlockScalingOf<true>;

}  // namespace jax_hopper
