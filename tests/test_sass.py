"""The built extension's machine code: every GEMM instance's mainloop uses wgmma (HGMMA; QGMMA for
fp8) fed by TMA loads (UTMALDG), stores through TMA (UTMASTG) from a staging buffer written with
STS (no generic stores), and uses no local memory (no spills).

Needs cuobjdump (the CUDA toolkit's, or the nvidia-cuda-cuobjdump wheel of the test extras),
not a GPU; the build already treats ptxas warnings (spills) and
"wgmma serialized" (cmake/ptxas_guard.py) as errors, this reads the result back."""

import os
import re
import subprocess
import sys

import pytest

from jax_hopper import _ffi
from jax_hopper.kernels import catalog

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "scripts"))
import sass  # noqa: E402

CUOBJDUMP = sass.find_cuobjdump()
pytestmark = [pytest.mark.extension, pytest.mark.skipif(
    CUOBJDUMP is None,
    reason="cuobjdump not found (neither the CUDA toolkit's nor the test extras' "
           "nvidia-cuda-cuobjdump wheel; the GPU suite has it)")]


@pytest.fixture(scope="module")
def functions() -> dict[str, str]:
    """{mangled kernel name: its SASS} of the extension, shared by the tests (scripts/sass.py)."""
    return sass.kernel_sass(_ffi.extension().__file__, CUOBJDUMP)


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


def test_every_gemm_instance_has_a_wgmma_loop(functions):
    """scripts/sass.py --loops finds each GEMM instance's k-block loop in the real SASS (a
    backward branch around its wgmmas), so that its per-wgmma counts compare builds."""
    gemm = {name: body for name, body in functions.items() if "sm90_gemm_kernel" in name}
    assert gemm
    for name, body in gemm.items():
        loops = sass.mma_loops(body)
        assert loops, f"no wgmma loop found in {name}"
        assert all(row["instructions"] > row["mma"] >= 1 and row["sync"] >= 1 for row in loops)


def test_gemm_staging_uses_shared_stores(functions):
    """The epilogue writes its staging buffer (and reads a residual there) with STS / LDS: a
    generic ST / LD (a 64-bit address per access) in a GEMM instance means a pointer into shared
    memory lost its address space (ptx::in_shared_window)."""
    gemm = {name: body for name, body in functions.items() if "sm90_gemm_kernel" in name}
    assert gemm
    for name, body in gemm.items():
        assert re.search(r"\bSTS(\.\w+)* ", body), f"no STS in {name}"
        generic = re.findall(r"\b(?:ST|LD)\.E(?:\.\w+)* [^;]*;", body)
        assert not generic, f"{name}: generic accesses {generic[:3]}"


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
