"""CPU tests of scripts/sass.py's reading of `cuobjdump -sass` text (tests/test_sass.py reads a
real build with it): functions split by name, opcodes counted past predicate guards, two builds
paired by kernel, anonymous namespaces' per-build hashes ignored."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import sass  # noqa: E402

# Two functions as cuobjdump -sass prints them: each instruction, then its encoding's second
# half on a line of its own.
DUMP = """
\tcode for sm_90a
\t.target\tsm_90a

\t\tFunction : _ZN10jax_hopper16sm90_gemm_kernelIiEEvv
\t.headerflags\t@"EF_CUDA_ACCELERATORS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                 /* 0x00000a00ff017b82 */
                                                                          /* 0x000ff00000000800 */
        /*0010*/                   R2UR UR6, R2 ;                         /* 0x00000000020672ca */
                                                                          /* 0x000fe20000000000 */
        /*0020*/                   ELECT P0, URZ, PT ;                    /* 0x0000000000007802 */
                                                                          /* 0x000fe20000000000 */
        /*0030*/               @P0 UTMALDG.3D [UR8], [UR4] ;              /* 0x00000008040075b4 */
                                                                          /* 0x000fe20008011000 */
        /*0040*/              @!P0 BRA.U.ANY 0x20 ;                       /* 0x0000000000007947 */
                                                                          /* 0x000fea000383ffff */
        /*0050*/                   HGMMA.64x160x16.F32.BF16 R24, gdesc[UR4].tnspA, R24 ;
                                                                          /* 0x000fe20000000000 */
        /*0060*/              @!UPT UTMASTG.3D [UR4], [UR6] ;             /* 0x0000000004007b5b */
                                                                          /* 0x000fe20008000000 */
        /*0070*/                   BRA 0x70 ;                             /* 0xfffffff000fc7947 */
                                                                          /* 0x000fc0000383ffff */
\t\t..........

\t\tFunction : _ZN10jax_hopper46_GLOBAL__N__ddb6461e_13_tile_table_cu_d07b055a6kernelEv
\t.headerflags\t@"EF_CUDA_ACCELERATORS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   STL [R1], R2 ;                         /* 0x0000000201007387 */
                                                                          /* 0x000fe20000100800 */
        /*0010*/                   EXIT ;                                 /* 0x000000000000794d */
                                                                          /* 0x000fea0003800000 */
"""
GEMM = "_ZN10jax_hopper16sm90_gemm_kernelIiEEvv"
TABLE = "_ZN10jax_hopper46_GLOBAL__N__ddb6461e_13_tile_table_cu_d07b055a6kernelEv"


def test_split_functions_by_name():
    functions = sass.split_functions(DUMP)
    assert list(functions) == [GEMM, TABLE]
    assert "EXIT" in functions[TABLE] and "EXIT" not in functions[GEMM]


def test_opcodes_are_counted_past_predicate_guards():
    functions = sass.split_functions(DUMP)
    gemm = sass.opcode_counts(functions[GEMM])
    assert gemm["instructions"] == 8
    assert {k: gemm[k] for k in sass.OPCODES if gemm[k]} == {
        "HGMMA": 1, "UTMALDG": 1, "UTMASTG": 1, "R2UR": 1, "ELECT": 1, "BRA.U.ANY": 1}
    table = sass.opcode_counts(functions[TABLE])
    assert table["instructions"] == 2 and table["STL"] == 1 and table["LDL"] == 0


def test_compare_pairs_kernels_across_builds_whatever_their_namespace_hashes():
    new = sass.split_functions(DUMP)
    rehashed = TABLE.replace("ddb6461e", "5a44dcde").replace("d07b055a", "ec6bad43")
    base = {GEMM: new[GEMM].replace("BRA.U.ANY", "BRA"), rehashed: new[TABLE]}
    lines = sass.compare(new, base)
    gemm_line = next(line for line in lines if line.endswith(GEMM))
    assert "BRA.U.ANY=1/0" in gemm_line and "HGMMA=1/1" in gemm_line
    assert not any("only in base" in line or "not in base" in line for line in lines)
    assert lines[-2].startswith("total new  instructions=10 ")
    assert lines[-1].startswith("total base instructions=10 ")


def test_compare_keeps_the_kernels_a_pattern_names_and_says_which_one_build_lacks():
    new = sass.split_functions(DUMP)
    lines = sass.compare(new, {TABLE: new[TABLE]}, pattern="sm90_gemm")
    assert len(lines) == 3 and lines[0].endswith("(not in base)  " + GEMM)
    lines = sass.compare({}, new, pattern="sm90_gemm")
    assert lines[0] == "(only in base)  " + GEMM
