"""CPU tests of scripts/ncu_gemm.py: its reading of `ncu --csv` output, the side-by-side table,
the shape argument, the product it hands ncu (run on the CPU reference lowering here), and its
whole profile against a stand-in ncu: what it asks ncu for, with which XLA flags, and what it
writes and returns."""

import argparse
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import ncu_gemm  # noqa: E402

# ncu --csv's details page: the program's own output first, then one row per metric.
HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
          '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
          '"Metric Value"\n')


def row(section, name, unit, value):
    return (f'"0","77","python3","host","void jax_hopper::sm90_gemm_kernel<K>(P)","1","7",'
            f'"(384, 1, 1)","(132, 1, 1)","0","9.0","{section}","{name}","{unit}","{value}"\n')


OURS = ("==PROF== Connected to process 77\n" + HEADER
        + row("Command line profiler metrics", "gpu__time_duration.sum", "usecond", "101.22")
        + row("Command line profiler metrics", "smsp__inst_executed.sum", "inst", "1,234,567")
        + row("Warp State Statistics", "Warp Cycles Per Issued Instruction", "cycle", "9.5"))
XLA = (HEADER + row("Command line profiler metrics", "gpu__time_duration.sum", "usecond", "94.6")
       + row("Command line profiler metrics", "smsp__inst_executed.sum", "inst", "617,000"))


def test_parse_csv_reads_metrics_and_sections_past_the_programs_output():
    got = ncu_gemm.parse_csv(OURS)
    assert got == {"gpu__time_duration.sum": ("usecond", "101.22"),
                   "smsp__inst_executed.sum": ("inst", "1,234,567"),
                   "Warp State Statistics / Warp Cycles Per Issued Instruction": ("cycle", "9.5")}
    assert ncu_gemm.parse_csv("==PROF== no kernels were profiled\n") == {}


def test_kernel_name_is_the_profiled_kernels():
    """Which kernel XLA ran can differ between processes: the table names both."""
    assert ncu_gemm.kernel_name(OURS) == "void jax_hopper::sm90_gemm_kernel<K>(P)"
    assert ncu_gemm.kernel_name("==PROF== no kernels were profiled\n") == "-"


def test_table_gives_ours_over_xla_and_marks_what_one_side_lacks():
    lines = ncu_gemm.table(ncu_gemm.parse_csv(XLA), ncu_gemm.parse_csv(OURS)).splitlines()
    by_name = {line.split()[0]: line for line in lines[1:]}
    assert by_name["gpu__time_duration.sum"].split()[-1] == f"{101.22 / 94.6:.3f}"
    assert by_name["smsp__inst_executed.sum"].split()[-1] == f"{1234567 / 617000:.3f}"
    warp = next(line for line in lines if line.startswith("Warp State"))
    assert " - " in warp and warp.split()[-1] == "9.5"  # XLA's column empty, no ratio


@pytest.mark.parametrize("text", ["8192x4096", "8x0x8", "axbxc", "8x8x8x8"])
def test_shape_must_be_three_positive_integers(text):
    with pytest.raises(argparse.ArgumentTypeError, match="MxNxK"):
        ncu_gemm.parse_shape(text)
    assert ncu_gemm.parse_shape("8192X4096x1024") == (8192, 4096, 1024)


@pytest.mark.parametrize("variant, extra", [
    ("ours", []),
    ("xla", []),
    ("xla", ["--bias", "--activation", "gelu_tanh"]),
    ("ours", ["--bias", "--activation", "silu", "--config", '{"block_n": 128, "stages": 6}']),
])
def test_run_is_the_product_ncu_watches(variant, extra, tmp_path):
    # With the XLA flags the tool passes: jax aborts at start on a flag its XLA does not know.
    env = ncu_gemm.autotune_cache_env(dict(os.environ, JAX_PLATFORMS="cpu"), str(tmp_path))
    done = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "ncu_gemm.py"), "run",
                           variant, "64x32x16", *extra], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_autotune_cache_env_keeps_the_callers_xla_flags():
    env = ncu_gemm.autotune_cache_env({"XLA_FLAGS": "--xla_dump_to=/d", "A": "1"}, "/c")
    assert env == {"A": "1", "XLA_FLAGS":
                   "--xla_dump_to=/d --xla_gpu_per_fusion_autotune_cache_dir=/c"}


def _time_row(us):
    return row("Command line profiler metrics", "gpu__time_duration.sum", "usecond", us)


# A stand-in for ncu on PATH: records its arguments and the XLA flags it was given, one line a
# call, and prints a table for the kernels it was told to watch, or nothing for ours when
# STAND_IN_FAIL_OURS is set (as ncu does when no kernel matched).
STAND_IN = f'''#!{sys.executable}
import json, os, sys
with open(os.environ["STAND_IN_LOG"], "a") as f:
    f.write(json.dumps({{"argv": sys.argv[1:], "xla_flags": os.environ.get("XLA_FLAGS", ""),
                        "prealloc": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE")}}) + "\\n")
ours = "regex:sm90_gemm_kernel" in sys.argv
if not (ours and os.environ.get("STAND_IN_FAIL_OURS")):
    sys.stdout.write({HEADER!r} + ({_time_row("101.2")!r} if ours else {_time_row("94.6")!r}))
'''


def _profile(tmp_path, *extra, fail_ours=False):
    ncu = tmp_path / "bin" / "ncu"
    ncu.parent.mkdir()
    ncu.write_text(STAND_IN)
    ncu.chmod(0o755)
    env = dict(os.environ, JAX_PLATFORMS="cpu", STAND_IN_LOG=str(tmp_path / "calls.jsonl"),
               PATH=f"{ncu.parent}{os.pathsep}{os.environ['PATH']}")
    if fail_ours:
        env["STAND_IN_FAIL_OURS"] = "1"
    done = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "ncu_gemm.py"),
                           "64x32x16", *extra], capture_output=True, text=True, env=env,
                          timeout=300)
    with open(tmp_path / "calls.jsonl") as f:
        return done, [json.loads(line) for line in f]


def test_profile_runs_ncu_on_xlas_kernel_then_ours_and_writes_one_table(tmp_path):
    out = tmp_path / "table.txt"
    done, calls = _profile(tmp_path, "--bias", "--activation", "gelu_tanh", "--section",
                           "WarpStateStats", "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    xla, ours = calls
    for call, kernels, variant in ((xla, ncu_gemm.XLA_KERNELS, "xla"),
                                   (ours, ncu_gemm.OURS_KERNELS, "ours")):
        argv = call["argv"]
        assert argv[argv.index("--kernel-name") + 1] == kernels
        assert argv[argv.index("--launch-skip") + 1] == "2"
        assert argv[argv.index("--launch-count") + 1] == "1"
        assert argv[argv.index("--clock-control") + 1] == "none"
        assert argv[argv.index("--section") + 1] == "WarpStateStats"
        assert argv[-6:] == ["run", variant, "64x32x16", "--bias", "--activation", "gelu_tanh"]
        assert call["prealloc"] == "false"
    # XLA's profiled process reads the autotune cache its warm-up run filled; ours needs none.
    assert "--xla_gpu_per_fusion_autotune_cache_dir=" in xla["xla_flags"]
    assert "autotune" not in ours["xla_flags"]
    line = next(x for x in out.read_text().splitlines() if x.startswith("gpu__time"))
    assert line.split()[-3:] == ["94.6", "101.2", f"{101.2 / 94.6:.3f}"]
    assert "## raw ncu output, ours" in out.read_text()
    assert "# kernels: xla void jax_hopper::sm90_gemm_kernel<K>(P); ours " in out.read_text()


def test_profile_fails_and_shows_ncus_output_when_a_kernel_was_not_profiled(tmp_path):
    done, calls = _profile(tmp_path, fail_ours=True)
    assert len(calls) == 2
    assert done.returncode == 1
    assert "ncu returned no metrics for ours" in done.stderr
