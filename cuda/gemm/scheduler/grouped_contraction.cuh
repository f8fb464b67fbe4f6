// Tile scheduler policy of the grouped contraction (hopper_ragged_contract, the weight gradient
// of hopper_ragged_dot): out[g] = A_g B_g, where the groups split the contracted dimension:
// A is (K, M) and B (K, N), MN-major, K their shared rows sorted by group, and group g owns rows
// [ends[g - 1], ends[g]) (ends: (G,) int32 device array, prefix sums of the group sizes that the
// wrapper computes on the device before the launch), or [starts[g], ends[g]) where the wrapper
// passes the starts too: vmap's entries stacked in one launch, whose rows past an entry's
// groups belong to no group (hopper_ragged_contract's launch). The output is (G, M, N).
//
// Tiles are PersistentScheduler's over G batch entries (a group's tiles run together, sharing
// its rows of A and B in L2); the unit of tile (g, ...) covers the group's rows, so its k-blocks
// start at the group's first row rounded down to K_ALIGN (k_offset), and the rows of the first
// block before the group (k_head_rows) and of the last past it (k_tail_rows) are zeroed in
// shared memory (MainloopSS::clear_k_outside). K_ALIGN: where a TMA box may start along K.
// With the k rows as the outer coordinate (16-bit operands, MN-major) that is any row (1);
// with them innermost (fp8, K-major) only whole 16 bytes (16 one-byte elements: an
// unaligned innermost coordinate is an illegal instruction on sm_90).
// An empty group has no k-blocks: its tiles store zeros. Starts and ends are clamped to [0, K],
// and each end to at least its start, here, so whatever the arrays hold no access leaves the
// operands.
#pragma once

#include <cstdint>
#include <string>

#include "cuda/gemm/gemm.h"
#include "cuda/gemm/scheduler/persistent.cuh"
#include "cuda/gemm/scheduler/stream_k_plan.h"
#include "cuda/gemm/scheduler/tile_order.cuh"

namespace jax_hopper {

template <int BM, int BN, int BK, int K_ALIGN = 1>
struct GroupedContractionScheduler : PersistentScheduler<BM, BN> {
  static_assert(K_ALIGN >= 1 && BK % K_ALIGN == 0, "k-blocks start at whole K_ALIGN rows");
  using Base = PersistentScheduler<BM, BN>;
  static constexpr bool kRaggedK = true;

  struct Params : Base::Params {
    const int32_t* ends;
    const int32_t* starts;  // nullptr: each group starts where the one before it ends
    int32_t rows;           // K: the contracted rows of A and B
  };

  static std::string host_params(const GemmArgs& g, int64_t product_cols, int block_k,
                                 Params* p) {
    if (g.group_ends == nullptr) return "the grouped contraction needs the group ends";
    p->ends = g.group_ends;
    p->starts = g.group_starts;
    p->rows = g.k;
    return Base::host_params(g, product_cols, block_k, p);
  }

  struct Work {
    WorkList list;
    __device__ Work(const Params& p, int32_t cluster) : list(p.plan, cluster) {}
    __device__ bool next(const Params& p, WorkUnit* u) {
      if (!list.next(p.plan, u)) return false;
      const int32_t g = u->tile / (p.order.ctiles_m * p.order.ctiles_n);
      const int32_t after = p.starts ? __ldg(p.starts + g) : g > 0 ? __ldg(p.ends + g - 1) : 0;
      const int32_t first = min(max(after, 0), p.rows);
      const int32_t rows = min(max(__ldg(p.ends + g), first), p.rows) - first;
      const int32_t start = first / K_ALIGN * K_ALIGN, span = first - start + rows;
      u->k_offset = start;
      u->k_begin = 0;
      u->k_end = rows > 0 ? (span + BK - 1) / BK : 0;
      u->k_head_rows = first - start;
      u->k_tail_rows = span % BK;
      return true;
    }
  };
};

}  // namespace jax_hopper
