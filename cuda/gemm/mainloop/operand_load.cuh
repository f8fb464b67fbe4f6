// How the mainloop's producer brings one operand tile (`rows` x one k-block of 128 bytes) into
// shared memory, and the tensor map that makes it possible (host side). Tiles are stored as
// boxes of 8 KB (64 rows x 128 bytes, 128B swizzle); a k-block is 64 16-bit or 128 8-bit
// elements:
//   K-major  (A as (M,K), B as (N,K)):  box j holds rows 64j..64j+63 of the tile, the whole
//                                       k-block; the boxes stack into one K-major SW128 layout.
//   MN-major (A as (K,M), B as (K,N)):  box j holds columns 64j..64j+63, all 64 k rows;
//                                       wgmma reads it with the transpose bit set (16-bit only:
//                                       fp8 wgmma has no transpose).
// With a cluster sharing the operand, CTA `rank` loads 1/share of the tile and multicasts it
// to the whole cluster.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>

#include "cuda/gemm/gemm.h"
#include "cuda/ptx/tma.cuh"
#include "cuda/tma/tensor_map.h"

namespace jax_hopper {

constexpr int kBoxElems = 64;        // 64 x 16-bit = 128 bytes: one 128B swizzle row
constexpr int kBoxBytes = 64 * 128;  // one box: 64 rows of one 128-byte swizzle row

// The elements of one 128-byte swizzle row (a k-block) of `bytes`-wide elements.
constexpr int k_block_elems(int bytes) { return 128 / bytes; }

// 3-D tensor map over a row-major (batch, rows, cols) array of `bytes`-wide elements (TMA only
// moves them: an unsigned type of that width).
inline std::string map_sw128(const Array3& x, int bytes, uint32_t box_cols, uint32_t box_rows,
                             CUtensorMap* out) {
  return encode_sw128_3d(bytes == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                    : CU_TENSOR_MAP_DATA_TYPE_UINT16,
                         x.data, x.cols, x.rows, x.batch, x.cols * bytes,
                         x.rows * x.cols * bytes, box_cols, box_rows, out);
}

__device__ __forceinline__ void tma_load_shared(const CUtensorMap* map, uint64_t* bar, void* dst,
                                                int32_t c0, int32_t c1, int32_t c2,
                                                uint32_t share) {
  if (share > 1)
    ptx::tma_load_3d_multicast(map, bar, dst, c0, c1, c2, static_cast<uint16_t>((1u << share) - 1));
  else
    ptx::tma_load_3d(map, bar, dst, c0, c1, c2);
}

// A plain operand of the product, as stored (batch, mn, k) or, MN_MAJOR, (batch, k, mn), of
// BYTES-wide elements.
template <bool MN_MAJOR, int BYTES>
struct OperandLoad {
  static constexpr bool kMnMajor = MN_MAJOR;
  static constexpr int kBytes = BYTES;
  static_assert(BYTES == 2 || (BYTES == 1 && !MN_MAJOR),
                "16-bit operands either way; 8-bit ones K-major (wgmma has no fp8 transpose)");

  // First mn coordinate of tile `block` of `rows` rows.
  __device__ static int32_t origin(int32_t block, int rows) { return block * rows; }

  // One operand per batch entry, or one shared by the batch.
  static bool batched(const GemmArgs& args, const Array3& x) {
    return x.batch == args.batch && args.batch > 1;
  }

  // `rows_per_cta`: the tile's rows over the CTAs that share it (K-major: one box of them).
  static std::string make_map(const GemmArgs&, const Array3& x, uint32_t rows_per_cta,
                              CUtensorMap* out) {
    return MN_MAJOR ? map_sw128(x, BYTES, kBoxElems, kBoxElems, out)
                    : map_sw128(x, BYTES, k_block_elems(BYTES), rows_per_cta, out);
  }

  __device__ static void load(const CUtensorMap* map, uint64_t* bar, uint8_t* dst, int rows,
                              int32_t mn0, int32_t k0, int32_t batch, uint32_t share,
                              uint32_t rank) {
    const uint32_t part_id = share > 1 ? rank : 0;  // a cluster along the other dim shares nothing
    if constexpr (!MN_MAJOR) {
      // NOTES: a part need not be whole 8-row swizzle atoms: TMA swizzles by the shared-memory
      // address, so 72 rows in two 36-row halves (the second 4608 bytes in) read right through
      // wgmma descriptors at the tile's base (a scratch 256 x 72 tile, H200, 2026-12-02).
      const int part = rows / share;
      tma_load_shared(map, bar, dst + part_id * part * 128, k0, mn0 + part_id * part, batch,
                      share);
    } else {
      for (int j = part_id; j < rows / kBoxElems; j += share)
        tma_load_shared(map, bar, dst + j * kBoxBytes, mn0 + j * kBoxElems, k0, batch, share);
    }
  }
};

// The gated weight (gate, then up), MN-major: hopper_glu's (K, 2, n), or the grouped GLU's
// (G K, 2, n), one (K, 2, n) per expert (its batch entry). A tile's first rows/2 rows are gate
// columns mn0.. and the next rows/2 the up columns with the same indices, so one tile holds both
// factors of rows/2 output columns (the gated epilogue pairs them). The map views the weight as
// (n, K, half, expert), so a k-block past K is zeros, never the next expert's rows.
struct GatedWeightLoad {
  static constexpr bool kMnMajor = true;
  static constexpr int kBytes = 2;

  __device__ static int32_t origin(int32_t block, int rows) { return block * (rows / 2); }

  // One weight per batch entry (the grouped GLU's experts) or one shared (hopper_glu's).
  static bool batched(const GemmArgs& args, const Array3& w) { return w.batch > args.k; }

  static std::string make_map(const GemmArgs& args, const Array3& w, uint32_t, CUtensorMap* out) {
    // (The handlers checked that w is (E K, 2, N) with N a multiple of 8.)
    const uint64_t n = args.n, k = args.k;
    const uint64_t dims[4] = {n, k, 2, static_cast<uint64_t>(w.batch) / k};
    const uint64_t strides[3] = {2 * n * 2, n * 2, k * 2 * n * 2};
    return encode_sw128(CU_TENSOR_MAP_DATA_TYPE_UINT16, w.data, 4, dims, strides, kBoxElems,
                        kBoxElems, out);
  }

  __device__ static void load(const CUtensorMap* map, uint64_t* bar, uint8_t* dst, int rows,
                              int32_t mn0, int32_t k0, int32_t expert, uint32_t share,
                              uint32_t rank) {
    const int half_boxes = rows / kBoxElems / 2;
    for (int j = share > 1 ? rank : 0; j < 2 * half_boxes; j += share) {
      const int32_t col = mn0 + (j % half_boxes) * kBoxElems, half = j / half_boxes;
      uint8_t* box = dst + j * kBoxBytes;
      if (share > 1)
        ptx::tma_load_4d_multicast(map, bar, box, col, k0, half, expert,
                                   static_cast<uint16_t>((1u << share) - 1));
      else
        ptx::tma_load_4d(map, bar, box, col, k0, half, expert);
    }
  }
};

}  // namespace jax_hopper
