// wgmma wrappers: fences, group commit/wait, and m64nNk16 (16-bit) / m64nNk32 (fp8) with both
// operands in shared memory.
// PTX ISA: https://docs.nvidia.com/cuda/parallel-thread-execution/#asynchronous-warpgroup-level-matrix-instructions
// Only the shapes the GEMM instantiates are spelled out (CUTLASS lists every N; we do not).
#pragma once

#include <cstdint>

#include "jax_hopper_constants.h"

namespace jax_hopper::ptx {

// Orders register/shared accesses before the first wgmma of a batch (and after the registers
// that feed it change).
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit_group() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

// Wait until at most N committed wgmma groups are pending.
template <int N>
__device__ __forceinline__ void wgmma_wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Keeps the compiler from moving accumulator reads/writes across an in-flight wgmma.
__device__ __forceinline__ void wgmma_fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// D(64xN, f32) (+)= A(64xK) * B(KxN), K = 32 bytes of the input types (k16 for 16-bit, k32 for
// 8-bit). TRANS_A/TRANS_B: 1 when that operand is MN-major in shared memory (the transpose bits
// exist only for 16-bit inputs: fp8 operands must be K-major). scale_d == 0 overwrites D.
template <int N, DType TA, DType TB, int TRANS_A, int TRANS_B>
struct WgmmaSS;

// The accumulators' asm placeholders and operands in blocks of 32 fp32 registers; an
// m64nN wgmma takes N/2 of them, the first blocks in order (JH_DEFINE_WGMMA_SS below).
#define JH_WGMMA_REGS_0_31 \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define JH_WGMMA_OPERANDS_0_31 \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define JH_WGMMA_REGS_32_63 \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define JH_WGMMA_OPERANDS_32_63 \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define JH_WGMMA_REGS_64_95 \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define JH_WGMMA_OPERANDS_64_95 \
    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
    "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
    "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
    "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define JH_WGMMA_REGS_96_127 \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define JH_WGMMA_OPERANDS_96_127 \
    "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
    "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
    "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
    "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

// The small N of the swap-AB kernels (tokens as wgmma's N): 8 and 16 registers.
#define JH_WGMMA_N16_REGS "%0, %1, %2, %3, %4, %5, %6, %7"
#define JH_WGMMA_N16_OPERANDS \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define JH_WGMMA_N32_REGS JH_WGMMA_N16_REGS ", %8, %9, %10, %11, %12, %13, %14, %15"
#define JH_WGMMA_N32_OPERANDS JH_WGMMA_N16_OPERANDS, \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define JH_WGMMA_N64_REGS JH_WGMMA_REGS_0_31
#define JH_WGMMA_N64_OPERANDS JH_WGMMA_OPERANDS_0_31
// The swap-AB kernels' 96-token tile (16-bit and fp8): 48 registers.
#define JH_WGMMA_N96_REGS JH_WGMMA_REGS_0_31 ", %32, %33, %34, %35, %36, %37, %38, %39, " \
    "%40, %41, %42, %43, %44, %45, %46, %47"
#define JH_WGMMA_N96_OPERANDS JH_WGMMA_OPERANDS_0_31, \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
#define JH_WGMMA_N128_REGS JH_WGMMA_REGS_0_31 ", " JH_WGMMA_REGS_32_63
#define JH_WGMMA_N128_OPERANDS JH_WGMMA_OPERANDS_0_31, JH_WGMMA_OPERANDS_32_63
// The swap-AB kernels' 160-token tile: 80 registers.
#define JH_WGMMA_N160_REGS JH_WGMMA_N128_REGS ", %64, %65, %66, %67, %68, %69, %70, %71, " \
    "%72, %73, %74, %75, %76, %77, %78, %79"
#define JH_WGMMA_N160_OPERANDS JH_WGMMA_N128_OPERANDS, \
    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
    "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79])
#define JH_WGMMA_N192_REGS JH_WGMMA_N128_REGS ", " JH_WGMMA_REGS_64_95
#define JH_WGMMA_N192_OPERANDS JH_WGMMA_N128_OPERANDS, JH_WGMMA_OPERANDS_64_95
#define JH_WGMMA_N256_REGS JH_WGMMA_N192_REGS ", " JH_WGMMA_REGS_96_127
#define JH_WGMMA_N256_OPERANDS JH_WGMMA_N192_OPERANDS, JH_WGMMA_OPERANDS_96_127

// One specialisation per (N, input types); the asm strings differ only in the shape and types.
// DA, DB, SCALE, TA, TB: the asm operand numbers following the N/2 accumulators.
#define JH_DEFINE_WGMMA_SS16(N, DTYPE, PTX_TYPE, DA, DB, SCALE, TA, TB)                     \
  template <int TRANS_A, int TRANS_B>                                                      \
  struct WgmmaSS<N, DTYPE, DTYPE, TRANS_A, TRANS_B> {                                      \
    static constexpr int kRegs = N / 2;                                                    \
    static constexpr int kK = 16;                                                          \
    __device__ __forceinline__ static void mma(uint64_t desc_a, uint64_t desc_b, float* d, \
                                               uint32_t scale_d) {                         \
      asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %" SCALE ", 0;\n\t"                \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX_TYPE "." PTX_TYPE \
                   " {" JH_WGMMA_N##N##_REGS "}, %" DA ", %" DB ", p, 1, 1, %" TA ", %" TB  \
                   ";\n\t}"                                                                \
                   : JH_WGMMA_N##N##_OPERANDS                                              \
                   : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));  \
    }                                                                                      \
  };

#define JH_DEFINE_WGMMA_SS16_ALL_TYPES(N, DA, DB, SCALE, TA, TB)             \
  JH_DEFINE_WGMMA_SS16(N, DType::kBF16, "bf16", DA, DB, SCALE, TA, TB)       \
  JH_DEFINE_WGMMA_SS16(N, DType::kF16, "f16", DA, DB, SCALE, TA, TB)

JH_DEFINE_WGMMA_SS16_ALL_TYPES(16, "8", "9", "10", "11", "12")
JH_DEFINE_WGMMA_SS16_ALL_TYPES(32, "16", "17", "18", "19", "20")
JH_DEFINE_WGMMA_SS16_ALL_TYPES(64, "32", "33", "34", "35", "36")
JH_DEFINE_WGMMA_SS16_ALL_TYPES(96, "48", "49", "50", "51", "52")
JH_DEFINE_WGMMA_SS16_ALL_TYPES(128, "64", "65", "66", "67", "68")
JH_DEFINE_WGMMA_SS16_ALL_TYPES(160, "80", "81", "82", "83", "84")
JH_DEFINE_WGMMA_SS16_ALL_TYPES(192, "96", "97", "98", "99", "100")
JH_DEFINE_WGMMA_SS16_ALL_TYPES(256, "128", "129", "130", "131", "132")

// fp8 (e4m3, e5m2, mixed): k32, no transpose operands (K-major only).
#define JH_DEFINE_WGMMA_SS8(N, DTA, DTB, PTX_TA, PTX_TB, DA, DB, SCALE)                      \
  template <>                                                                              \
  struct WgmmaSS<N, DTA, DTB, 0, 0> {                                                      \
    static constexpr int kRegs = N / 2;                                                    \
    static constexpr int kK = 32;                                                          \
    __device__ __forceinline__ static void mma(uint64_t desc_a, uint64_t desc_b, float* d, \
                                               uint32_t scale_d) {                         \
      asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %" SCALE ", 0;\n\t"                \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32." PTX_TA "." PTX_TB     \
                   " {" JH_WGMMA_N##N##_REGS "}, %" DA ", %" DB ", p, 1, 1;\n\t}"           \
                   : JH_WGMMA_N##N##_OPERANDS                                              \
                   : "l"(desc_a), "l"(desc_b), "r"(scale_d));                              \
    }                                                                                      \
  };
#define JH_DEFINE_WGMMA_SS8_ALL_N(DTA, DTB, PTX_TA, PTX_TB)                                 \
  JH_DEFINE_WGMMA_SS8(16, DTA, DTB, PTX_TA, PTX_TB, "8", "9", "10")                          \
  JH_DEFINE_WGMMA_SS8(32, DTA, DTB, PTX_TA, PTX_TB, "16", "17", "18")                        \
  JH_DEFINE_WGMMA_SS8(64, DTA, DTB, PTX_TA, PTX_TB, "32", "33", "34")                        \
  JH_DEFINE_WGMMA_SS8(96, DTA, DTB, PTX_TA, PTX_TB, "48", "49", "50")                        \
  JH_DEFINE_WGMMA_SS8(128, DTA, DTB, PTX_TA, PTX_TB, "64", "65", "66")                     \
  JH_DEFINE_WGMMA_SS8(192, DTA, DTB, PTX_TA, PTX_TB, "96", "97", "98")                     \
  JH_DEFINE_WGMMA_SS8(256, DTA, DTB, PTX_TA, PTX_TB, "128", "129", "130")

JH_DEFINE_WGMMA_SS8_ALL_N(DType::kE4M3, DType::kE4M3, "e4m3", "e4m3")
JH_DEFINE_WGMMA_SS8_ALL_N(DType::kE5M2, DType::kE4M3, "e5m2", "e4m3")
JH_DEFINE_WGMMA_SS8_ALL_N(DType::kE4M3, DType::kE5M2, "e4m3", "e5m2")

#undef JH_DEFINE_WGMMA_SS8_ALL_N
#undef JH_DEFINE_WGMMA_SS16_ALL_TYPES
#undef JH_DEFINE_WGMMA_SS8
#undef JH_DEFINE_WGMMA_SS16

}  // namespace jax_hopper::ptx
