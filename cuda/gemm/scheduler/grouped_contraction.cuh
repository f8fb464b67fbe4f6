// Tile scheduler policy of the grouped contraction (hopper_ragged_contract, the weight gradient
// of hopper_ragged_dot): out[g] = A_g B_g, where the groups split the contracted dimension:
// A is (K, M) and B (K, N), MN-major, K their shared rows sorted by group, and group g owns rows
// [ends[g - 1], ends[g]) (ends: (G,) int32 device array, prefix sums of the group sizes that the
// wrapper computes on the device before the launch). The output is (G, M, N).
//
// Tiles are PersistentScheduler's over G batch entries (a group's tiles run together, sharing
// its rows of A and B in L2); the unit of tile (g, ...) covers the group's rows, so its k-blocks
// start at the group's first row (k_offset: TMA boxes start at any row) and its last block's
// rows past the group are zeroed in shared memory (k_tail_rows, MainloopSS::clear_k_tail).
// An empty group has no k-blocks: its tiles store zeros. Ends are clamped to [0, K] and made
// non-decreasing here, so whatever the array holds no access leaves the operands.
#pragma once

#include <cstdint>
#include <string>

#include "cuda/gemm/gemm.h"
#include "cuda/gemm/scheduler/persistent.cuh"
#include "cuda/gemm/scheduler/stream_k_plan.h"
#include "cuda/gemm/scheduler/tile_order.cuh"

namespace jax_hopper {

template <int BM, int BN, int BK>
struct GroupedContractionScheduler : PersistentScheduler<BM, BN> {
  using Base = PersistentScheduler<BM, BN>;
  static constexpr bool kRaggedK = true;

  struct Params : Base::Params {
    const int32_t* ends;
    int32_t rows;  // K: the contracted rows of A and B
  };

  static std::string host_params(const GemmArgs& g, int64_t product_cols, int block_k,
                                 Params* p) {
    if (g.group_ends == nullptr) return "the grouped contraction needs the group ends";
    p->ends = g.group_ends;
    p->rows = g.k;
    return Base::host_params(g, product_cols, block_k, p);
  }

  struct Work {
    WorkList list;
    __device__ Work(const Params& p, int32_t cluster) : list(p.plan, cluster) {}
    __device__ bool next(const Params& p, WorkUnit* u) {
      if (!list.next(p.plan, u)) return false;
      const int32_t g = u->tile / (p.order.ctiles_m * p.order.ctiles_n);
      const int32_t first = g > 0 ? min(max(__ldg(p.ends + g - 1), 0), p.rows) : 0;
      const int32_t rows = min(max(__ldg(p.ends + g), first), p.rows) - first;
      u->k_offset = first;
      u->k_begin = 0;
      u->k_end = (rows + BK - 1) / BK;
      u->k_tail_rows = rows % BK;
      return true;
    }
  };
};

}  // namespace jax_hopper
