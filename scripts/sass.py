"""The machine code of a built jax_hopper extension, per kernel, and a comparison of two builds.

    python3 scripts/sass.py NEW.so|NEW.cubin [BASE.so|BASE.cubin] [--kernels REGEX]
        per kernel (mangled names matched by REGEX, default every one): its instruction count and
        the opcodes that matter when reading a GEMM's SASS, NEW's and, given BASE, BASE's beside
        them (kernels paired by name), then the totals

Used by tests/test_sass.py (what every build must show) and by hand on an A/B of a kernel change
(e.g. beside scripts/install_baseline.sh: the base build's extension is under DIR/jax_hopper_base).
Needs cuobjdump: the CUDA toolkit's, or the nvidia-cuda-cuobjdump wheel of the test extras.
"""

from __future__ import annotations

import argparse
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

_INSTRUCTION = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T\d]+\s+)?([A-Z][A-Z0-9_.]*)", re.M)


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
    sm90_gemm_*.cu: seconds, no build of the package)."""
    # cuobjdump runs the nvdisasm on PATH (the wheels put both in one bin directory)
    env = dict(os.environ, PATH=os.pathsep.join([os.path.dirname(cuobjdump),
                                                 os.environ.get("PATH", "")]))

    def sass(path):
        return subprocess.run([cuobjdump, "-sass", path], check=True, capture_output=True,
                              text=True, env=env).stdout

    if library.endswith(".cubin"):
        return split_functions(sass(library))
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([cuobjdump, "-xelf", "all", os.path.abspath(library)], check=True,
                       capture_output=True, cwd=tmp, env=env)
        cubins = sorted(glob.glob(os.path.join(tmp, "*.cubin")))
        if not cubins:
            raise RuntimeError(f"cuobjdump -xelf extracted no cubin from {library}")
        with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
            text = "".join(pool.map(sass, cubins))
    return split_functions(text)


def split_functions(text: str) -> dict[str, str]:
    """`cuobjdump -sass` output as {mangled function name: its SASS}."""
    parts = re.split(r"^\s*Function : (\S+)\s*$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def opcode_counts(body: str) -> collections.Counter:
    """A function's instruction count ("instructions") and how many of its instructions start
    with each of OPCODES (a predicate guard is not part of the opcode)."""
    counts = collections.Counter()
    for opcode in _INSTRUCTION.findall(body):
        counts["instructions"] += 1
        for prefix in OPCODES:
            if opcode == prefix or opcode.startswith(prefix + "."):
                counts[prefix] += 1
    return counts


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
    parser.add_argument("new", help="a built extension (.so, e.g. jax_hopper/_jax_hopper*.so) "
                        "or one compiled translation unit (.cubin)")
    parser.add_argument("base", nargs="?", help="another build's, to compare with")
    parser.add_argument("--kernels", default="", help="regex over the mangled kernel names")
    args = parser.parse_args(argv)
    cuobjdump = find_cuobjdump()
    if cuobjdump is None:
        parser.error("cuobjdump not found (the CUDA toolkit's, or pip's nvidia-cuda-cuobjdump)")
    new = kernel_sass(args.new, cuobjdump)
    base = kernel_sass(args.base, cuobjdump) if args.base else None
    print("\n".join(compare(new, base, args.kernels)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
