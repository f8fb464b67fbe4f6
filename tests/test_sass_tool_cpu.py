"""CPU tests of scripts/sass.py's reading of `cuobjdump -sass` text (tests/test_sass.py reads a
real build with it): functions split by name, opcodes counted past predicate guards, two builds
paired by kernel, anonymous namespaces' per-build hashes ignored."""

import os
import sys

import pytest

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


# A kernel's wgmma loop as nvcc lays it out: the inner k-block loop (its full-barrier wait, a
# forward branch to an out-of-line spin, two wgmmas), inside an outer loop over tiles; a loop
# without wgmmas; the kernel's EXIT, its trap, and the out-of-line spin that jumps back into
# the k-block loop from past the EXIT.
LOOPS = """
\t\tFunction : _Z5loopsv
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   UMOV UR4, 0x0 ;
        /*0020*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R4 ;
        /*0030*/              @!P0 BRA 0x100 ;
        /*0040*/                   WARPGROUP.ARRIVE ;
        /*0050*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24 ;
        /*0060*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24, gsb0 ;
        /*0070*/                   UIADD3 UR4, UR4, 0x1, URZ ;
        /*0080*/               @P1 BRA 0x20 ;
        /*0090*/               @P2 BRA 0x10 ;
        /*00a0*/                   IADD3 R2, R2, 0x1, RZ ;
        /*00b0*/               @P3 BRA 0xa0 ;
        /*00c0*/                   EXIT ;
        /*00d0*/                   BRA 0xd0 ;
        /*0100*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R4 ;
        /*0110*/              @!P0 BRA 0x100 ;
        /*0120*/                   BRA 0x40 ;
"""


def test_mma_loops_finds_the_innermost_wgmma_loop_only():
    (body,) = sass.split_functions(LOOPS).values()
    assert sass.mma_loops(body) == [{"first": 0x20, "last": 0x80, "instructions": 7, "mma": 2,
                                     "sync": 2, "branch": 2, "uniform": 1}]


def test_loop_lines_compare_builds_per_wgmma():
    new = sass.split_functions(LOOPS)
    # The base build's loop: the same but for one more uniform instruction before the branch.
    base = {name: body.replace("        /*0080*/               @P1 BRA 0x20 ;",
                               "        /*0078*/                   UMOV UR5, UR4 ;\n"
                               "        /*0080*/               @P1 BRA 0x20 ;")
            for name, body in new.items()}
    lines = sass.loop_lines(new, base)
    assert lines[0] == ("loop 0 instructions=7/8 mma=2/2 sync=2/2 branch=2/2 uniform=1/2 "
                        "per_mma=3.5/4.0  _Z5loopsv")
    assert lines[-1] == "total loop instructions new 7 (2 wgmmas) base 8 (2 wgmmas)"
    assert sass.loop_lines({}, None) == ["total loop instructions new 0 (0 wgmmas)"]


def test_kernel_sass_reads_every_cubin_of_a_directory(tmp_path, monkeypatch):
    (tmp_path / "a.cubin").write_text(DUMP)
    (tmp_path / "b.cubin").write_text(LOOPS)
    (tmp_path / "notes.txt").write_text("not a cubin")

    class Done:
        def __init__(self, path):
            self.stdout = open(path).read()

    monkeypatch.setattr(sass.subprocess, "run", lambda cmd, **kw: Done(cmd[-1]))
    assert sorted(sass.kernel_sass(str(tmp_path), "cuobjdump")) == sorted([GEMM, TABLE,
                                                                             "_Z5loopsv"])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(RuntimeError, match="no .cubin"):
        sass.kernel_sass(str(empty), "cuobjdump")
