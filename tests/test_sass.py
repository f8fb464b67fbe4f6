"""The built extension's machine code: every GEMM instance's mainloop uses wgmma (HGMMA; QGMMA for
fp8) fed by TMA loads (UTMALDG), stores through TMA (UTMASTG), and uses no local memory (no
spills).

Needs cuobjdump (the CUDA toolkit's, or the nvidia-cuda-cuobjdump wheel of the test extras),
not a GPU; the build already treats ptxas warnings (spills) and
"wgmma serialized" (cmake/ptxas_guard.py) as errors, this reads the result back."""

import concurrent.futures
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile

import pytest

from jax_hopper import _ffi
from jax_hopper.kernels import catalog


def _cuobjdump():
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


CUOBJDUMP = _cuobjdump()
pytestmark = [pytest.mark.extension, pytest.mark.skipif(
    CUOBJDUMP is None,
    reason="cuobjdump not found (neither the CUDA toolkit's nor the test extras' "
           "nvidia-cuda-cuobjdump wheel; the GPU suite has it)")]


@pytest.fixture(scope="module")
def functions() -> dict[str, str]:
    """{mangled kernel name: its SASS} of the extension, shared by the tests: its cubins (one
    per translation unit) extracted with `cuobjdump -xelf` and disassembled on every
    core at once (one `cuobjdump -sass` of the whole extension took 2 minutes of one core on
    CI's machine)."""
    # cuobjdump runs the nvdisasm on PATH (the wheels put both in one bin directory)
    env = dict(os.environ, PATH=os.pathsep.join([os.path.dirname(CUOBJDUMP),
                                                 os.environ.get("PATH", "")]))

    def sass(path):
        return subprocess.run([CUOBJDUMP, "-sass", path], check=True, capture_output=True,
                              text=True, env=env).stdout

    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([CUOBJDUMP, "-xelf", "all", _ffi.extension().__file__], check=True,
                       capture_output=True, cwd=tmp, env=env)
        cubins = sorted(glob.glob(os.path.join(tmp, "*.cubin")))
        assert cubins, "cuobjdump -xelf extracted no cubin"
        with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
            text = "".join(pool.map(sass, cubins))
    parts = re.split(r"^\s*Function : (\S+)\s*$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_every_gemm_instance_uses_hgmma_and_tma(functions):
    gemm = {name: body for name, body in functions.items() if "sm90_gemm_kernel" in name}
    assert len(gemm) == len(catalog.compiled_instances())
    for name, body in gemm.items():
        # wgmma is HGMMA for 16-bit inputs, QGMMA for fp8.
        for opcode in ("GMMA", "UTMALDG", "UTMASTG", "SYNCS"):
            assert opcode in body, f"{opcode} missing from {name}"
    fp8 = [i for i in catalog.compiled_instances() if i.dtype in catalog.FP8_DTYPES]
    assert sum("QGMMA" in body for body in gemm.values()) == len(fp8)
    assert sum("HGMMA" in body for body in gemm.values()) == len(gemm) - len(fp8)
    tma_ops = {n: b for n, b in functions.items() if re.search(r"tma_\w+_kernel", n)}
    assert tma_ops and all("UTMALDG" in b for b in tma_ops.values())


def test_no_kernel_uses_local_memory():
    usage = subprocess.run([CUOBJDUMP, "-res-usage", _ffi.extension().__file__], check=True,
                           capture_output=True, text=True).stdout
    rows = re.findall(r"Function (\S+):\s*\n\s*(REG:\d+ STACK:(\d+) SHARED:\d+ LOCAL:(\d+)[^\n]*)",
                      usage)
    assert rows, usage[:2000]
    for name, line, stack, local in rows:
        assert int(stack) == 0 and int(local) == 0, f"{name}: {line}"


def test_quantize_kernels_use_tma_and_fp8_converts(functions):
    quant = {n: b for n, b in functions.items() if "quantize_fp8_kernel" in n}
    assert len(quant) == 3 * 2  # bf16 / f16 / f32 in, e4m3 / e5m2 out (cuda/quantize/quantize.cu)
    for name, body in quant.items():
        for opcode in ("UTMALDG", "UTMASTG", "F2FP.SATFINITE"):
            assert opcode in body, f"{opcode} missing from {name}"


def test_transpose_kernel_uses_tma(functions):
    kernels = {n: b for n, b in functions.items() if "transpose_fp8_kernel" in n}
    assert len(kernels) == 1  # one instance: the bytes, whatever fp8 type (transpose.cu)
    for name, body in kernels.items():
        for opcode in ("UTMALDG", "UTMASTG"):
            assert opcode in body, f"{opcode} missing from {name}"
