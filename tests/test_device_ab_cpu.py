"""CPU checks of scripts/device_ab.sh, the one-call A/B of a kernel change on a Hopper machine
(its builds and timings need the GPU): the script parses, and without a baseline it says how
to call it and fails before building anything; and of its Python-only path:
scripts/kernel_inputs_match.sh tells a baseline that compiles the same extension, over which
scripts/install_baseline.sh then puts the baseline's Python without building."""

import os
import shutil
import subprocess

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts",
                      "device_ab.sh")


def test_the_script_parses():
    subprocess.run(["bash", "-n", SCRIPT], check=True)


def test_without_a_baseline_it_prints_its_usage_and_exits_2(tmp_path):
    run = subprocess.run(["bash", SCRIPT], capture_output=True, text=True,
                         env=dict(os.environ, OUT=str(tmp_path / "logs")))
    assert run.returncode == 2
    assert "usage: bash scripts/device_ab.sh BASE" in run.stderr
    assert not (tmp_path / "logs").exists()  # nothing built, nothing written


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNEL_INPUTS = ("cuda", "ffi", "cmake", "CMakeLists.txt", "pyproject.toml", "jax_hopper")


def _base_tree(dest):
    """A source tree of this checkout's kernel inputs and Python package, as a `git archive`
    of it would hold them."""
    for p in KERNEL_INPUTS:
        src = os.path.join(ROOT, p)
        if os.path.isdir(src):
            shutil.copytree(src, dest / p, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        else:
            shutil.copy(src, dest / p)
    return dest


def _match(base):
    return subprocess.run(["bash", os.path.join(ROOT, "scripts", "kernel_inputs_match.sh"),
                           str(base)], capture_output=True, text=True).returncode


def test_kernel_inputs_match_only_where_the_extension_is_the_same(tmp_path):
    base = _base_tree(tmp_path / "base")
    assert _match(base) == 0
    # a heuristic's change: the same extension
    with open(base / "jax_hopper" / "gemm" / "heuristics" / "swap.py", "a") as f:
        f.write("\n# changed\n")
    assert _match(base) == 0
    # a kernel source, or the catalog of compiled kernels: another extension
    for changed in ("cuda/gemm/kernel.cuh", "jax_hopper/kernels/catalog.py"):
        other = _base_tree(tmp_path / changed.replace("/", "_"))
        with open(other / changed, "a") as f:
            f.write("\n// changed\n")
        assert _match(other) == 1, changed
    # a kernel source only the baseline has
    extra = _base_tree(tmp_path / "extra")
    (extra / "cuda" / "new_kernel.cuh").write_text("// new\n")
    assert _match(extra) == 1


def test_install_baseline_puts_the_baselines_python_over_a_matching_build(tmp_path):
    """With PKG (an installed build of this checkout) and a baseline of the same kernel
    inputs, install_baseline.sh copies PKG's extension and takes every Python file from the
    baseline, renamed to jax_hopper_base, without building (pip is not called)."""
    base = _base_tree(tmp_path / "base")
    marker = "# the baseline's own heuristics\n"
    with open(base / "jax_hopper" / "gemm" / "heuristics" / "swap.py", "a") as f:
        f.write(marker)
    pkg = tmp_path / "site" / "jax_hopper"
    shutil.copytree(ROOT + "/jax_hopper", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    (pkg / "_jax_hopper.cpython-312-x86_64-linux-gnu.so").write_bytes(b"\x7fELF built")
    (pkg / "_build_info.py").write_text("KERNELS = True\n")
    (pkg / "stale_only_in_this_build.py").write_text("import jax_hopper\n")
    # a python3 that refuses pip: a build would fail the script
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text('#!/bin/sh\necho "no build expected: $*" >&2\nexit 1\n')
    (bin_dir / "python3").chmod(0o755)
    dest = tmp_path / "ab_base"
    run = subprocess.run(["bash", os.path.join(ROOT, "scripts", "install_baseline.sh"),
                          str(base), str(dest), str(pkg)], capture_output=True, text=True,
                         env=dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}"))
    assert run.returncode == 0, run.stderr
    assert "its Python over the extension of" in run.stdout
    out = dest / "jax_hopper_base"
    assert (out / "_jax_hopper.cpython-312-x86_64-linux-gnu.so").read_bytes() == b"\x7fELF built"
    assert (out / "_build_info.py").exists()
    assert not (out / "stale_only_in_this_build.py").exists()
    swap = (out / "gemm" / "heuristics" / "swap.py").read_text()
    assert swap.endswith(marker)
    assert "from jax_hopper.kernels import" not in swap
    assert "from jax_hopper_base.kernels import catalog" in swap


def test_other_candidates_are_built_and_timed_against_this_tree(tmp_path):
    """AB_OTHERS: each tree built as a baseline of its own beside the two, and bench_ab run once
    more per tree, with it as the base and the tag + _vs_<name>; builds, SASS and timing
    stubbed (they need the device)."""
    fake = tmp_path / "repo"
    (fake / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, fake / "scripts" / "device_ab.sh")
    (fake / "scripts" / "kernel_inputs_match.sh").write_text("exit 1\n")
    (fake / "scripts" / "install_baseline.sh").write_text(
        'mkdir -p "$2/jax_hopper_base" && touch "$2/jax_hopper_base/_jax_hopper.so"\n'
        'echo "installed $1 as jax_hopper_base in $2 (stub)"\n')
    calls = tmp_path / "calls.txt"
    python = tmp_path / "python"
    python.write_text(
        "#!/bin/bash\n"
        f'echo "PYTHONPATH=${{PYTHONPATH:-}} $*" >> {calls}\n'
        'case "$*" in *"-c "*) echo /stub/_jax_hopper.so ;; esac\n')
    python.chmod(0o755)
    for tree in ("base", "cand_a", "cand_b"):
        (tmp_path / tree).mkdir()
    run = subprocess.run(
        ["bash", str(fake / "scripts" / "device_ab.sh"), str(tmp_path / "base"), "--reps", "3",
         "--tag", "t1"], capture_output=True, text=True,
        env=dict(os.environ, PYTHON=str(python), OUT=str(tmp_path / "logs"),
                 AB_BASE_DIR=str(tmp_path / "ab_base"),
                 AB_OTHERS=f"{tmp_path / 'cand_a'} {tmp_path / 'cand_b'}"))
    assert run.returncode == 0, run.stdout + run.stderr
    benches = [line for line in calls.read_text().splitlines() if "bench_ab.py" in line]
    assert len(benches) == 3
    assert benches[0].startswith(f"PYTHONPATH={tmp_path / 'ab_base'} ")
    assert benches[0].endswith("--reps 3 --tag t1")
    for i, name in enumerate(("cand_a", "cand_b")):
        assert benches[i + 1].startswith(f"PYTHONPATH={tmp_path / 'ab_base'}_{i} ")
        assert benches[i + 1].endswith(f"--reps 3 --tag t1 --tag t1_vs_{name}")
        assert (tmp_path / "logs" / f"build_{name}.log").exists()
        assert (tmp_path / "logs" / f"ab_vs_{name}.log").exists()
        assert f"against {name} (base): bench_ab rc=0" in run.stdout
