// How the clusters of the persistent grid share the output tiles (plain C++, host and device:
// gemm_plan (cuda/gemm/gemm.h) plans once while the call is lowered, the kernel walks the plan,
// and the nanobind module exposes both to tests).
//
// With T tiles on C resident clusters, whole tiles alone leave the last wave T mod C tiles
// long: at 8192^3 with 2 x (128 x 256) cluster tiles, 34 of 66 clusters work in the 16th wave
// and the rest idle, 3% of the run. So the first floor(T / C) waves are whole tiles, handed out
// round robin in the grouped order (concurrent tiles stay neighbours in L2), and, where that
// measured faster (plan_stream_k says when), the k-blocks of the remaining tiles, laid end to
// end, are cut into equal contiguous ranges, one per cluster (stream-K). With fewer tiles
// than clusters (small M) there is no whole wave, and the same cut gives every tile the same
// number of pieces (split-K). A tile cut between clusters is a piece per cluster: the piece
// holding k-block 0 (computed last by its cluster) waits for the others' fp32 partials and
// runs the epilogue; every other piece is the first unit of its cluster's range and only
// publishes its partial.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define JH_HOST_DEVICE __host__ __device__
#else
#define JH_HOST_DEVICE
#endif

namespace jax_hopper {

struct StreamKPlan {
  int32_t grid_clusters;  // clusters launched
  int32_t dp_tiles;       // tiles [0, dp_tiles) are whole units, tile t on cluster t mod grid
  int32_t sk_clusters;    // clusters [0, sk_clusters) also take a stream-K range
  int32_t k_blocks;       // k-blocks per tile
  // The k-blocks of the split tiles [dp_tiles, total), end to end, are sk_clusters ranges of
  // sk_quota k-blocks, one more for the first sk_extra: no division in the kernel.
  int32_t sk_quota, sk_extra;
};

// A stream-K range is at least 1/kMaxSplit of a tile, so a finishing piece waits for at most
// kMaxSplit others; more, smaller pieces would cost more in fp32 traffic than they balance.
constexpr int64_t kMaxSplit = 4;
// The shortest piece a small-M split (below) makes, unless the kernel's family names its own
// (catalog.Family.min_piece_blocks: the swap-AB tiles, whose k-blocks are weight reads from
// HBM, each several times longer than a 128 x 128 tile's). NOTES: those weight streams share
// nothing with other tiles, yet stream-K ranges over their partial waves (112 tiles on 132
// SMs, or 224 = 1.7 waves) measured 3-13% slower than whole tiles (H100, 2026-11-24,
// ab_h100_20261124_swap_split.json): HBM, not the idle SMs, limits them, and the fix-up only
// adds; they keep the rules below. The fix-up (then a flag memset launch, now gone,
// and one fp32 round trip through L2) cost about 3 us: pieces of 16 k-blocks made
// 256 x 4096 x 2048 11% slower, while 32 and more gained (H100, 2026-11-22,
// gemm_h100_20261122_splitk_configs.log). With the memset gone (fixup.cuh), 16 was tried again
// against 32 on 13 shapes of M = 128-4000: 256 / 512 / 768 x 4096 x 4096 and 128 x 14336 x 4096
// gained 4-7% (more pieces fill more SMs), 256 x 4096 x 2048 and 128 x 4096 x 4096 lost 10% and
// 7% (pieces of 16 k-blocks: a pipeline fill and a fix-up per 16), geomean 1.003 (H100,
// 2026-11-24, ab_h100_20261124_piece16.json): kept at 32.
constexpr int32_t kMinPieceBlocks = 32;

// The shortest tile whose last wave is split (plan_stream_k). NOTES: H100, 2026-11-27, whole
// tiles against ranges of a quarter tile, one process (ab_h100_20261127_pairing_tail.json):
// 12 and 8 k-blocks, whole 1.11-1.20x faster (5588 x 2048 x 768, 627 x 11008 x 768,
// 3319 x 2048 x 512; 128 x 256 tiles): a range's pipeline fill and fix-up do not shrink with
// it. At 24-32 k-blocks even (1912 x 7096 x 1536 0.99x whole, 2500 x 14336 x 2048 0.99x), from
// 40 up split gained 2-10% (2804 x 8192 x 3072 1.067, 7000 x 3072 x 3584 1.098, 5000 x 5120 x
// 2560 1.074). One exception, not a rule yet: 4557 x 1024 x 2560 (128 x 192, 40 k-blocks, one
// whole wave before the tail) ran 1.15x faster whole (tune_h100_20261127_random.json).
// Raised from 16 to 24 (H200, 2026-12-02): the tuner found 2969 x 5120 x 1024 (16 k-blocks)
// 1.08x faster whole (tune_h200_20261202_random_worst.json); against 16, one process, 3 reps,
// device time (ab_h200_20261202_tile_cost.json, beside a tile rule not kept, which left
// these four alone): 16-23 k-blocks whole 1.01-1.07x (2969 x 5120 x 1024 1.074, 5588 x 2048 x
// 1472 1.070, 4072 x 6600 x 1024 1.033, 2500 x 14336 x 1024 1.013).
constexpr int32_t kMinTailSplitBlocks = 24;

// `tiles` in cluster units; `max_sk_clusters`: clusters with a workspace slot per CTA.
// `max_split`: the most pieces of a small-M split (plan_last_arrival_split's are more).
// `pad_k_blocks`: the kernel's mainloop reads a k-block past K as zeros (MainloopSS::
// kPadsKBlocks), so a small-M split may round the k-blocks up to a multiple of its pieces
// (below); the plan's k_blocks is then the padded count.
JH_HOST_DEVICE inline StreamKPlan plan_stream_k(int64_t tiles, int32_t k_blocks,
                                                int32_t resident_clusters,
                                                int32_t max_sk_clusters,
                                                int32_t min_piece_blocks = kMinPieceBlocks,
                                                int32_t max_split = kMaxSplit,
                                                bool pad_k_blocks = false) {
  StreamKPlan s = {};
  s.k_blocks = k_blocks;
  const int64_t waves = tiles / resident_clusters;
  const int64_t rest = tiles - waves * resident_clusters;
  int64_t sk = 0;
  // Split only after at least one whole wave, for tiles of kMinTailSplitBlocks or more, and
  // when the last wave is at most 2/3 full. A split tail saves (1 - rest / C) of a tile's time
  // and its fix-up (workspace round trip, flag memset) measured about a third of a tile: with
  // the last wave 52% or 27% full (8192^3, 8192 x 12288 x 4096) splitting gained 2.7% and 1.1%;
  // 76-91% full (4096^3, 8192 x 4096 x 14336, 4000 x 3000 x 2056) it lost 3-8%; and with fewer
  // tiles than clusters (256 x 4096 x 4096) this tail split lost 13% (its ranges, cut for all
  // 132 clusters, gave each tile uneven pieces on 2-3 clusters). Below 2^31 k-blocks the
  // kernel's range arithmetic stays in 32 bits.
  const bool ranges_fit_i32 = rest * k_blocks < (int64_t(1) << 31);
  if (waves > 0 && rest > 0 && 3 * rest <= 2 * resident_clusters &&
      k_blocks >= kMinTailSplitBlocks && ranges_fit_i32) {
    const int64_t min_iters = (k_blocks + kMaxSplit - 1) / kMaxSplit;
    sk = rest * k_blocks / min_iters;
    if (sk > resident_clusters) sk = resident_clusters;
    if (sk > max_sk_clusters) sk = max_sk_clusters;
    if (sk <= rest) sk = 0;  // no more clusters than tiles: splitting cannot shorten the tail
  } else if (waves == 0 && tiles > 0 && ranges_fit_i32) {
    // Fewer tiles than clusters (small M): split K, every tile in the same number of equal
    // pieces (at most max_split, a divisor of the k-blocks so no piece crosses a tile, and
    // min_piece_blocks k-blocks each at least, so the fix-up stays small next to a piece);
    // each cluster gets one piece and otherwise idle SMs join in.
    const int64_t clusters =
        resident_clusters < max_sk_clusters ? resident_clusters : max_sk_clusters;
    int64_t split = clusters / tiles;
    if (split > max_split) split = max_split;
    if (split > k_blocks / min_piece_blocks) split = k_blocks / min_piece_blocks;
    if (pad_k_blocks && split > 1) {
      // Pieces of ceil(k_blocks / split) k-blocks, as few as give that length: where a divisor
      // does, no padding; otherwise the last piece reads up to split - 1 k-blocks of zeros.
      // NOTES: without it a prime count of k-blocks left every tile whole: 54 x 1024 x 10000
      // (157 k-blocks, 8 tiles) ran on 8 of 132 SMs. Padded against that, one process, 7 reps:
      // 2.14x there (17.4 -> 37.1 TFLOP/s; XLA 29.4), 3 x 1024 x 10000 2.48x, 64 x 2048 x 4500
      // 1.42x, 1000 x 1024 x 10000 1.14x, 128 x 4096 x 5000 1.17x; 200 x 2048 x 7000 0.98x (3
      // pieces of 37 for 2 of 55) (H100, 2026-11-27, ab_h100_20261127_padded_k.json).
      const int64_t piece = (k_blocks + split - 1) / split;
      split = (k_blocks + piece - 1) / piece;
      if (tiles * split * piece >= (int64_t(1) << 31)) split = 1;
      if (split > 1) s.k_blocks = static_cast<int32_t>(split * piece);
    }
    while (split > 1 && s.k_blocks % split != 0) --split;
    // NOTES: with more than half a wave of tiles (no equal split fits), one stream-K range per
    // cluster ran 1.3-1.8x slower than whole tiles (768 x 4096 x 4096: 87 vs 57 us;
    // 1024 x 4096 x 14336: 320 vs 180 us; H100, 2026-11-22, A/B logs in commit 4320d24): ranges
    // start at a different k on every cluster, so the CTAs that share an operand tile no longer
    // read it at the same time. If L2 then stops serving them, B comes from HBM once per M
    // tile: 8 x 117 MB there, ~310 us at 3 TB/s, close to what was measured (not profiled).
    // Equal pieces keep concurrently running clusters at the same k.
    // NOTES: equal pieces in rounds were tried for that case (more pieces than clusters, every
    // tile's later pieces first and the collecting ones last, so no cycle of waits; each
    // cluster's longest work at most 3/4 of a tile): correct on the GPU, but 0.78-0.94x
    // against whole tiles on the 8 default-plan shapes it applied to, e.g. 640 x 2048 x 8192
    // 349 -> 273 TFLOP/s, 1280 x 1024 x 8192 381 -> 308 (40-48 cluster tiles of 128 x 128 or
    // 128 x 192 on 66 clusters, pieces of 32 k-blocks in 2-3 rounds; H100, 2026-11-24,
    // ab_h100_20261124_rounds.json; code: commit 9e53146 on the local branch
    // experiment/split-rounds, which may not outlive that session). Each piece pays a
    // pipeline fill and a fix-up; not profiled yet.
    // NOTES: the collector waits ~2.1 us for a publisher's partial
    // (trace_h100_20261125_fixup.txt), so the later pieces were made shorter, each leaving
    // quota/16, /8 or /4 k-blocks to the collecting piece (a lead in the plan). Against equal
    // pieces, one process, 7 reps, on the 7 shapes where it split: the best lead per shape
    // 0.97-1.04x (128 x 4096 x 4096 1.039 at /8, 384 x 2048 x 8192 1.025 at /16), and /8 itself
    // 0.93-1.04x (256 x 2048 x 8192 0.93, 256 x 4096 x 14336 0.94; /4 down to 0.84) (H100,
    // 2026-11-25; a session sweep, not kept). Not kept: the longer piece's own weight stream
    // seems to cost more than the wait it hides (not profiled).
    if (split > 1) sk = split * tiles;
  }
  if (sk == 0) {
    s.grid_clusters = static_cast<int32_t>(tiles < resident_clusters ? tiles : resident_clusters);
    s.dp_tiles = static_cast<int32_t>(tiles);
    return s;
  }
  s.grid_clusters = static_cast<int32_t>(waves > 0 ? resident_clusters : sk);
  s.dp_tiles = static_cast<int32_t>(waves * resident_clusters);
  s.sk_clusters = static_cast<int32_t>(sk);
  s.sk_quota = static_cast<int32_t>(rest * s.k_blocks / sk);
  s.sk_extra = static_cast<int32_t>(rest * s.k_blocks % sk);
  return s;
}

// The last-arrival split (LastArrivalSplitScheduler, last_arrival_split.cuh): with fewer tiles
// than resident CTAs, every tile cut into `pieces` equal k-ranges, one per CTA, as many as fit
// in one wave (a divisor of the k-blocks, at least min_piece_blocks long, at most
// kMaxArrivalPieces); otherwise whole tiles on a persistent grid (plan_stream_k without a
// split), and in the kernels that take it the last partial wave's tiles in pieces
// (plan_split_tail). Nothing waits: the last piece of a tile to finish sums the others.
// NOTES: more pieces than one wave holds measured slower, each CTA paying its own start and
// pipeline fill: against the collector split below (H100, 2026-11-24, forced plans, 7 reps, us):
// 1 x 4096 x 4096 (32 tiles) 2 / 4 / 8 pieces 22.5 / 22.9 / 26.9 (collector, 4 pieces: 25.1);
// 16 x 4096 x 14336 4 / 7 / 14 pieces 50.6 / 55.1 / 59.7 (51.0); 16 x 14336 x 4096 (112
// tiles) 2 / 4 pieces 55.1 / 58.7 against whole tiles 48.2, a CTA each (persistent 48.7);
// 1 x 28672 x 4096 (224 tiles) whole 90.8, a CTA each, 2 pieces 100.8 (persistent 90.4).
// NOTES: more pieces than CTAs handed out at run time (a per-CTA queue fed by a global counter,
// up to 4 pieces per CTA, so faster SMs take more) measured slower on all 6 decode shapes
// tried, 0.78-0.90x this plan (H100, 2026-11-25, ab_h100_20261125_decode_queue*.json; the code,
// on a local branch, did not outlive that session): SM busy rose where this plan leaves SMs
// idle (64 x 12288 x 4096: 0.60 -> 0.89) but each extra piece's fix-up waits on its arrival
// atomic in a saturated L2 (17% of the consumers' warp samples) and pieces at different k read
// the weight's rows scattered (DRAM 67% vs 78% of peak on the same bytes;
// ncu_h100_20261125_decode_queue.txt).
// Untried: the fix-up off the consumers' path (the producer warpgroup's three idle warps).
constexpr int32_t kMaxArrivalPieces = 16;

// What one more piece of a split tail tile costs its last arrival (the piece's fp32 partial
// stored, then read back and summed), in k-blocks of the tile's mainloop (plan_split_tail).
constexpr int32_t kArrivalPieceBlocks = 2;

// The tail split of plan_last_arrival_split, for the kernels that take it (GemmKernelInfo::
// split_tail): past whole waves of `waves` x `resident_clusters` tiles, the `rest` tiles of the
// last partial wave each cut into the same number of equal pieces, one per CTA after its whole
// tiles, so that the CTAs the tail would leave idle share it. Of the splits that fit (rest x
// pieces CTAs, pieces of at least min_piece_blocks, at most kMaxArrivalPieces, tiles of
// kMinTailSplitBlocks or more), the one whose busiest CTA has the fewest k-blocks (its whole
// tiles, padded where the split pads, plus a piece) with kArrivalPieceBlocks per piece past
// the first; none (a plan without sk_clusters) where no split beats whole tiles. A padding
// split pads every tile's k-blocks, the whole ones' too (the plan has one count).
// NOTES: the odd-weight tiles (matmul_swap_odd) take it: their k-blocks are paced by the
// consumers' shift and wgmmas, not by the weight's HBM stream (the swap-AB tiles' tail splits,
// collector ranges on HBM-bound decode streams, lost 3-13%: plan_stream_k's NOTES). Against
// whole tiles, one process, 5 reps, device time (H200, 2026-12-03,
// ab_h200_20261203_split_tail.json): 1.095-1.335x on the 11 odd-weight shapes whose plan or
// token tile it changes (300 x 8996 x 5408 130.7 -> 102.8 us: 142 tiles of 192 tokens, the
// last 10 in 5 pieces of 17; 64 x 33997 x 8032 1.335x, 16 x 39337 x 7880 1.143x), the
// unchanged ones 0.99-1.00x. kArrivalPieceBlocks is a guess (a 192-token tile's partial is
// 96 KB, read back at roughly a k-block's time), not fitted.
JH_HOST_DEVICE inline StreamKPlan plan_split_tail(int64_t waves, int64_t rest, int32_t k_blocks,
                                                  int32_t resident_clusters,
                                                  int32_t min_piece_blocks, bool pad_k_blocks) {
  StreamKPlan s = {};
  int64_t best_cost = (waves + 1) * k_blocks, best_split = 1, best_padded = k_blocks;
  int64_t most = resident_clusters / rest;
  if (most > kMaxArrivalPieces) most = kMaxArrivalPieces;
  if (k_blocks < kMinTailSplitBlocks || rest * k_blocks >= (int64_t(1) << 31)) most = 1;
  for (int64_t split = 2; split <= most; ++split) {
    const int64_t piece = (k_blocks + split - 1) / split;
    const int64_t padded = split * piece;
    // (A padded split adds fewer than `split` k-blocks of zeros: within kMaxPadKBlocks.)
    if (piece < min_piece_blocks || (padded != k_blocks && !pad_k_blocks)) continue;
    const int64_t cost = waves * padded + piece + kArrivalPieceBlocks * (split - 1);
    if (cost < best_cost) best_cost = cost, best_split = split, best_padded = padded;
  }
  if (best_split == 1) return s;
  s.k_blocks = static_cast<int32_t>(best_padded);
  s.grid_clusters = resident_clusters;
  s.dp_tiles = static_cast<int32_t>(waves * resident_clusters);
  s.sk_clusters = static_cast<int32_t>(rest * best_split);
  s.sk_quota = static_cast<int32_t>(best_padded / best_split);
  return s;
}

JH_HOST_DEVICE inline StreamKPlan plan_last_arrival_split(int64_t tiles, int32_t k_blocks,
                                                          int32_t resident_clusters,
                                                          int32_t min_piece_blocks,
                                                          bool pad_k_blocks = false,
                                                          bool split_tail = false) {
  // Past one wave: the tail split where the kernel takes it and one pays, else whole tiles.
  if (split_tail && tiles > resident_clusters && tiles % resident_clusters != 0) {
    const StreamKPlan s =
        plan_split_tail(tiles / resident_clusters, tiles % resident_clusters, k_blocks,
                        resident_clusters, min_piece_blocks, pad_k_blocks);
    if (s.sk_clusters > 0) return s;
  }
  // plan_stream_k's small-M split with more pieces (plan_stream_k's own tail split, ranges end
  // to end across tiles, is not one the scheduler takes).
  return plan_stream_k(tiles, k_blocks, resident_clusters,
                       tiles < resident_clusters ? resident_clusters : 0, min_piece_blocks,
                       kMaxArrivalPieces, pad_k_blocks);
}

// The most k-blocks of zeros a padded plan adds to the problem's (plan_stream_k): fewer than
// the most pieces of a split.
constexpr int32_t kMaxPadKBlocks = kMaxArrivalPieces - 1;

// The ready flags a plan needs: one per consumer warpgroup (two) of every CTA of the clusters
// that take a stream-K range (cuda/gemm/scheduler/fixup.cuh).
JH_HOST_DEVICE inline int64_t split_flag_count(const StreamKPlan& s, int32_t cluster_size) {
  return int64_t(s.sk_clusters) * cluster_size * 2;
}

// First stream-K k-block (end to end over the split tiles) of cluster c; c = sk_clusters gives
// the end.
JH_HOST_DEVICE inline int32_t sk_range_begin(const StreamKPlan& s, int32_t c) {
  return c * s.sk_quota + (c < s.sk_extra ? c : s.sk_extra);
}

// One unit of a cluster's work: k-blocks [k_begin, k_end) of tile `tile` (cluster units).
// k-block j covers k elements k_offset + j * BK onwards; k_head_rows != 0: the first block's
// first that many k rows do not count, k_tail_rows != 0: only that many k rows of the last
// block count (the mainloop zeroes the rest). All 0 except in the grouped contraction, whose
// tiles contract a group's rows (cuda/gemm/scheduler/grouped_contraction.cuh).
struct WorkUnit {
  int32_t tile, k_begin, k_end;
  int32_t k_offset = 0, k_head_rows = 0, k_tail_rows = 0;
};

// k_begin > 0: a later piece of a split tile; it publishes its partial and stores nothing.
JH_HOST_DEVICE inline bool publishes_partial(const WorkUnit& u) { return u.k_begin > 0; }

// The piece with k-block 0 of a split tile: it adds the partials of clusters
// [cluster + 1, partials_end(...)) in that order (a fixed order: results are bitwise
// reproducible) before the epilogue.
JH_HOST_DEVICE inline bool collects_partials(const StreamKPlan& s, const WorkUnit& u) {
  return u.k_begin == 0 && u.k_end < s.k_blocks;
}

JH_HOST_DEVICE inline int32_t partials_end(const StreamKPlan& s, int32_t cluster,
                                           const WorkUnit& u) {
  const int32_t tile_end = (u.tile - s.dp_tiles + 1) * s.k_blocks;
  int32_t c = cluster + 1;
  while (c < s.sk_clusters && sk_range_begin(s, c) < tile_end) ++c;
  return c;
}

// A cluster's units in order: its whole tiles, then the pieces of its stream-K range. The plan
// is an argument of each call rather than a member: in the kernel it stays in the parameter
// bank instead of taking registers next to the accumulators.
class WorkList {
 public:
  JH_HOST_DEVICE WorkList(const StreamKPlan& s, int32_t cluster)
      : next_tile_(cluster), pos_(0), end_(0) {
    if (cluster < s.sk_clusters) {
      pos_ = sk_range_begin(s, cluster);
      end_ = sk_range_begin(s, cluster + 1);
    }
  }

  JH_HOST_DEVICE bool next(const StreamKPlan& s, WorkUnit* u) {
    if (next_tile_ < s.dp_tiles) {
      *u = WorkUnit{next_tile_, 0, s.k_blocks};
      next_tile_ += s.grid_clusters;
      return true;
    }
    if (pos_ >= end_) return false;
    const int32_t t = pos_ / s.k_blocks;
    u->tile = s.dp_tiles + t;
    u->k_begin = pos_ - t * s.k_blocks;
    const int32_t left = end_ - pos_;
    u->k_end = left < s.k_blocks - u->k_begin ? u->k_begin + left : s.k_blocks;
    pos_ += u->k_end - u->k_begin;
    return true;
  }

 private:
  int32_t next_tile_, pos_, end_;
};

}  // namespace jax_hopper
