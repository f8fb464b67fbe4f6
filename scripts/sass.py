"""The machine code of a built jax_hopper extension, per kernel, and a comparison of two builds.

    python3 scripts/sass.py NEW.so|NEW.cubin [BASE.so|BASE.cubin] [--kernels REGEX]
        per kernel (mangled names matched by REGEX, default every one): its instruction count and
        the opcodes that matter when reading a GEMM's SASS, NEW's and, given BASE, BASE's beside
        them (kernels paired by name), then the totals
    python3 scripts/sass.py NEW [BASE] --loops [--kernels REGEX]
        per kernel its innermost wgmma loops (mma_loops): static instructions, wgmmas,
        instructions per wgmma, barrier operations, branches, uniform instructions; a
        consumer's per-k-block overhead compared between builds without a GPU

Used by tests/test_sass.py (what every build must show) and by hand on an A/B of a kernel change
(e.g. beside scripts/install_baseline.sh: the base build's extension is under DIR/jax_hopper_base).
Needs cuobjdump: the CUDA toolkit's, or the nvidia-cuda-cuobjdump wheel of the test extras.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import concurrent.futures
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile

# What a count line shows, as opcode prefixes: wgmma (HGMMA 16-bit, QGMMA fp8), TMA loads and
# stores, local memory (spills), and the compiler's loops over a warp's lanes around an
# instruction that takes uniform registers (R2UR, ELECT, BRA.U.ANY: a TMA issued from one
# thread of an unconverged warp).
OPCODES = ("HGMMA", "QGMMA", "UTMALDG", "UTMASTG", "LDL", "STL", "R2UR", "ELECT", "BRA.U.ANY")

# One instruction: its address, its opcode (past any predicate guard) and its operands.
_INSTRUCTION = re.compile(
    r"^\s+/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T\d]+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);", re.M)


def find_cuobjdump() -> str | None:
    """The CUDA toolkit's cuobjdump, else the one of the nvidia-cuda-cuobjdump wheel (the test
    extras) beside the nvidia-cuda-nvdisasm wheel's nvdisasm, which it runs."""
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.path.exists(os.path.join(root, "bin", "cuobjdump")):
            return os.path.join(root, "bin", "cuobjdump")
    on_path = shutil.which("cuobjdump")
    if on_path:
        return on_path
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        found = sorted(glob.glob(os.path.join(root, "*", "bin", "cuobjdump")))
        if found:
            return found[-1]
    return None


def kernel_sass(library: str, cuobjdump: str) -> dict[str, str]:
    """{mangled kernel name: its SASS} of a shared library: its cubins (one per translation
    unit) extracted with `cuobjdump -xelf` and disassembled on every core at once (one
    `cuobjdump -sass` of the whole extension took 2 minutes of one core on CI's machine); or of
    one .cubin (a translation unit compiled alone, e.g. `nvcc -cubin` of a generated
    sm90_gemm_*.cu: seconds, no build of the package), or of a directory of such .cubin files
    (every generated translation unit: python jax_hopper/kernels/codegen.py DIR, then nvcc
    -cubin per file)."""
    # cuobjdump runs the nvdisasm on PATH (the wheels put both in one bin directory)
    env = dict(os.environ, PATH=os.pathsep.join([os.path.dirname(cuobjdump),
                                                 os.environ.get("PATH", "")]))

    def sass(path):
        return subprocess.run([cuobjdump, "-sass", path], check=True, capture_output=True,
                              text=True, env=env).stdout

    def disassemble(directory, why_none):
        cubins = sorted(glob.glob(os.path.join(directory, "*.cubin")))
        if not cubins:
            raise RuntimeError(why_none)
        with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
            return split_functions("".join(pool.map(sass, cubins)))

    if library.endswith(".cubin"):
        return split_functions(sass(library))
    if os.path.isdir(library):  # every translation unit compiled alone, as above
        return disassemble(library, f"no .cubin in {library}")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([cuobjdump, "-xelf", "all", os.path.abspath(library)], check=True,
                       capture_output=True, cwd=tmp, env=env)
        return disassemble(tmp, f"cuobjdump -xelf extracted no cubin from {library}")


def split_functions(text: str) -> dict[str, str]:
    """`cuobjdump -sass` output as {mangled function name: its SASS}."""
    parts = re.split(r"^\s*Function : (\S+)\s*$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def opcode_counts(body: str) -> collections.Counter:
    """A function's instruction count ("instructions") and how many of its instructions start
    with each of OPCODES (a predicate guard is not part of the opcode)."""
    counts = collections.Counter()
    for _, opcode, _ in _INSTRUCTION.findall(body):
        counts["instructions"] += 1
        for prefix in OPCODES:
            if opcode == prefix or opcode.startswith(prefix + "."):
                counts[prefix] += 1
    return counts


_TARGET = re.compile(r"\b0x([0-9a-f]+)\b")
_MMA = ("HGMMA", "QGMMA")
# What a loop's line shows beside its size: the barrier operations (mbarrier waits and arrives,
# named barriers, wgmma's fence and wait), branches, and the uniform datapath's instructions
# (descriptor and stage arithmetic on Hopper).
LOOP_GROUPS = {"sync": ("SYNCS", "BAR", "WARPGROUP"), "branch": ("BRA", "BSSY", "BSYNC"),
               "uniform": ("U",)}


def mma_loops(body: str) -> list[dict]:
    """The innermost loops of a function that issue wgmmas, in address order: each backward
    branch spans a loop from its target to itself; those that hold an HGMMA / QGMMA and no EXIT
    (an out-of-line spin, placed after the kernel's end, jumps back into the loop from past its
    EXIT) and no other such loop. For each: its first and last address, its static instruction
    count, its MMAs, and its instructions in LOOP_GROUPS. Static counts: a loop body's
    instructions per k-block that every warp issues, except what a branch inside skips (a
    release by one thread, a clear of a partial k-block). The consumer's per-k-block cost
    beside its wgmmas, readable without a GPU."""
    code = [(int(a, 16), op, rest) for a, op, rest in _INSTRUCTION.findall(body)]
    addresses = [a for a, _, _ in code]

    def ops(lo, hi):  # the opcodes from address lo to hi, both included (code is in order)
        return [op for _, op, _ in code[bisect.bisect_left(addresses, lo):
                                        bisect.bisect_right(addresses, hi)]]

    loops = []
    for address, op, rest in code:
        target = _TARGET.search(rest) if op.startswith("BRA") else None
        if target and int(target.group(1), 16) < address:
            inside = ops(int(target.group(1), 16), address)
            if any(o.startswith(_MMA) for o in inside) and "EXIT" not in inside:
                loops.append((int(target.group(1), 16), address, inside))
    rows = []
    for lo, hi, inside in loops:
        if any((l2, h2) != (lo, hi) and lo <= l2 and h2 <= hi for l2, h2, _ in loops):
            continue  # not innermost
        row = {"first": lo, "last": hi, "instructions": len(inside),
               "mma": sum(o.startswith(_MMA) for o in inside)}
        for group, prefixes in LOOP_GROUPS.items():
            row[group] = sum(o.startswith(prefixes) for o in inside)
        rows.append(row)
    return rows


def loop_lines(new: dict[str, str], base: dict[str, str] | None = None,
               pattern: str = "") -> list[str]:
    """Per kernel matching `pattern`, its wgmma loops (mma_loops) as lines: NEW's counts, or
    NEW/BASE where BASE has the kernel (its loops paired in address order); then the total
    instructions of every such loop in each build."""
    new = {_pairing_name(n): body for n, body in new.items()}
    base = None if base is None else {_pairing_name(n): body for n, body in base.items()}
    lines, totals = [], collections.Counter()
    keys = ("instructions", "mma") + tuple(LOOP_GROUPS)
    for name in sorted(n for n in new if re.search(pattern, n)):
        mine = mma_loops(new[name])
        theirs = mma_loops(base[name]) if base is not None and name in base else None
        totals["new"] += sum(r["instructions"] for r in mine)
        totals["new mma"] += sum(r["mma"] for r in mine)
        if theirs is not None:
            totals["base"] += sum(r["instructions"] for r in theirs)
            totals["base mma"] += sum(r["mma"] for r in theirs)
        for i, row in enumerate(mine):
            other = theirs[i] if theirs is not None and i < len(theirs) else None
            cells = [f"{k}={row[k]}" + (f"/{other[k]}" if other else "") for k in keys]
            # nvcc unrolls some loops and not others: per wgmma is what compares across builds
            cells.append(f"per_mma={row['instructions'] / row['mma']:.1f}"
                         + (f"/{other['instructions'] / other['mma']:.1f}" if other else ""))
            lines.append(f"loop {i} " + " ".join(cells) + "  " + name)
    lines.append(f"total loop instructions new {totals['new']} ({totals['new mma']} wgmmas)"
                 + (f" base {totals['base']} ({totals['base mma']} wgmmas)"
                    if base is not None else ""))
    return lines


def _pairing_name(name: str) -> str:
    """A kernel's name with its anonymous namespace's per-build hashes taken out (a kernel in
    an unnamed namespace is _GLOBAL__N__<hash>_<n>_<file>_cu_<hash>...), so that two builds'
    instances pair up."""
    return re.sub(r"_GLOBAL__N__[0-9a-f]{8}_\d+_(\w+?)_[0-9a-f]{8}", r"_GLOBAL__N__\1", name)


def compare(new: dict[str, str], base: dict[str, str] | None, pattern: str = "") -> list[str]:
    """Lines of per-kernel counts (NEW, or NEW/BASE where a base build is given and has the
    kernel), the kernels whose names match `pattern`, then the totals over them."""
    keys = ("instructions",) + OPCODES
    new = {_pairing_name(n): body for n, body in new.items()}
    base = None if base is None else {_pairing_name(n): body for n, body in base.items()}
    lines, total_new, total_base = [], collections.Counter(), collections.Counter()
    for name in sorted(n for n in new if re.search(pattern, n)):
        c = opcode_counts(new[name])
        total_new.update(c)
        if base is not None and name in base:
            b = opcode_counts(base[name])
            total_base.update(b)
            cells = [f"{k}={c[k]}/{b[k]}" for k in keys if c[k] or b[k]]
        else:
            cells = [f"{k}={c[k]}" for k in keys if c[k]]
            if base is not None:
                cells.append("(not in base)")
        lines.append(" ".join(cells) + "  " + name)
    if base is not None:
        missing = sorted(n for n in base if re.search(pattern, n) and n not in new)
        lines += [f"(only in base)  {n}" for n in missing]
    lines.append("total new  " + " ".join(f"{k}={total_new[k]}" for k in keys))
    if base is not None:
        lines.append("total base " + " ".join(f"{k}={total_base[k]}" for k in keys))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("new", help="a built extension (.so, e.g. jax_hopper/_jax_hopper*.so), "
                        "one compiled translation unit (.cubin) or a directory of them")
    parser.add_argument("base", nargs="?", help="another build's, to compare with")
    parser.add_argument("--kernels", default="", help="regex over the mangled kernel names")
    parser.add_argument("--loops", action="store_true",
                        help="each kernel's innermost wgmma loops instead (mma_loops): their "
                        "static instructions per k-block, MMAs, barrier operations, branches "
                        "and uniform instructions")
    args = parser.parse_args(argv)
    cuobjdump = find_cuobjdump()
    if cuobjdump is None:
        parser.error("cuobjdump not found (the CUDA toolkit's, or pip's nvidia-cuda-cuobjdump)")
    new = kernel_sass(args.new, cuobjdump)
    base = kernel_sass(args.base, cuobjdump) if args.base else None
    report = loop_lines if args.loops else compare
    print("\n".join(report(new, base, args.kernels)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
