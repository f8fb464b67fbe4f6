"""Calls every jax_hopper kernel on small and edge shapes, for compute-sanitizer.

scripts/sanitize.sh runs this once per tool (memcheck, racecheck, synccheck, initcheck). One
process covers: every compiled GEMM instance (jax_hopper.kernels.catalog: input dtype x tile shape x
operand majors), every cluster shape and raster with every tile and layout (bfloat16), every
activation and output dtype with bias/residual/alpha/beta, a batched and a shared-operand
problem, the grouped GEMM, the grouped GLU and the grouped contraction (the weight gradient;
every tile, both rhs layouts, every cluster, adversarial device-side group sizes:
negative, 2^31 - 1, sums above and below M), the four TMA ops in every swizzle mode
(multicast with clusters of 2 and 4) and quantize_fp8 (every input and fp8 type, scaling mode and
transposed-copy mode, partial tiles; checked bit for bit against its reference on the CPU).

The cases are in scripts/sanitize_cases.py. Inputs are made on the host and copied in (cudaMemcpy,
which initcheck tracks as initialising), every result is blocked on and copied back, and checked on
the host against float64 (GEMM) or bit for bit (TMA): a wrong answer fails the run even when the
sanitizer reports nothing.

    python3 scripts/sanitize_driver.py            # full list (a few hundred launches)
    python3 scripts/sanitize_driver.py --quick    # ~25 launches, every kernel family once
                                                  # (racecheck)
    python3 scripts/sanitize_driver.py --list     # print the cases, run nothing
    python3 scripts/sanitize_driver.py --plant-fault  # one out-of-bounds store: the self-test

Exit status 0 when every case ran and matched, 1 otherwise, 2 when there is no Hopper GPU.
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # gemm_helpers: error bounds and activations in float64

from sanitize_cases import (gemm_call, gemm_check, gemm_groups, gemm_inputs,  # noqa: E402
                            quant_call, quant_check, quant_groups, quant_inputs, ragged_call,
                            ragged_check, ragged_groups, ragged_inputs, tma_call, tma_check,
                            tma_groups, tma_inputs, transpose_call, transpose_check,
                            transpose_groups, transpose_inputs)

# ------------------------------------------------------------------------------- the self-test

# One thread stores 4 bytes at element n of an n-element int32 buffer: one past the end. The name
# contains "sm90_gemm_kernel" so that sanitize.sh's kernel-name filter checks it.
_PLANTED_PTX = b"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry sm90_gemm_kernel_planted_oob(.param .u64 p, .param .u32 n)
{
  .reg .b64 %rd<4>;
  .reg .b32 %r<2>;
  ld.param.u64 %rd1, [p];
  ld.param.u32 %r1, [n];
  cvta.to.global.u64 %rd2, %rd1;
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd2, %rd2, %rd3;
  st.global.u32 [%rd2], %r1;
  ret;
}
"""


def plant_fault() -> int:
    """Launches the out-of-bounds store through the CUDA driver API (ctypes, no JAX): memcheck
    must report it, which shows that the tool, the filter and the log parsing see our kernels."""
    import ctypes
    cuda = ctypes.CDLL("libcuda.so.1")

    def ok(result, what):
        if result != 0:
            raise RuntimeError(f"{what} failed with CUresult {result}")

    ok(cuda.cuInit(0), "cuInit")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    ok(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ok(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    ok(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    n = 1000
    buf, module, fn = ctypes.c_uint64(), ctypes.c_void_p(), ctypes.c_void_p()
    ok(cuda.cuMemAlloc_v2(ctypes.byref(buf), ctypes.c_size_t(4 * n)), "cuMemAlloc")
    ok(cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(_PLANTED_PTX)),
       "cuModuleLoadData")
    ok(cuda.cuModuleGetFunction(ctypes.byref(fn), module, b"sm90_gemm_kernel_planted_oob"),
       "cuModuleGetFunction")
    p, count = ctypes.c_uint64(buf.value), ctypes.c_uint32(n)
    params = (ctypes.c_void_p * 2)(ctypes.cast(ctypes.byref(p), ctypes.c_void_p),
                                   ctypes.cast(ctypes.byref(count), ctypes.c_void_p))
    ok(cuda.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, None, params, None), "cuLaunchKernel")
    result = cuda.cuCtxSynchronize()
    print(f"planted out-of-bounds store launched (cuCtxSynchronize -> {result}); "
          "memcheck should report 1 error", flush=True)
    return 0


# ------------------------------------------------------------------------------------- driver

def run_group(group, inputs_fn, call_fn, check_fn, rng) -> list[tuple[str, str]]:
    import jax
    host = [inputs_fn(c, rng) for c in group]
    # Separate device buffers per argument (each its own allocation for memcheck).
    dev = [{k: jax.device_put(v) for k, v in h.items()} for h in host]
    program = jax.jit(lambda dev: [call_fn(c, d) for c, d in zip(group, dev)])
    outs = jax.block_until_ready(program(dev))
    failures = []
    for c, h, o in zip(group, host, outs):
        problem = check_fn(c, h, o)
        if problem:
            failures.append((c.label(), problem))
    return failures


def _group_range(text: str) -> tuple[int, int]:
    first, _, last = text.partition("-")
    return int(first), int(last or first)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="every kernel family once: for racecheck, the slowest tool")
    parser.add_argument("--only", choices=["gemm", "ragged", "tma", "quantize", "transpose"],
                        help="run one family")
    parser.add_argument("--groups", type=_group_range, metavar="FIRST[-LAST]",
                        help="run only these groups of each family, numbered as the log prints "
                             "them (to isolate a failing group)")
    parser.add_argument("--list", action="store_true", help="print the cases and exit")
    parser.add_argument("--plant-fault", action="store_true",
                        help="launch one out-of-bounds store instead (sanitizer self-test)")
    parser.add_argument("--allow-cpu", action="store_true",
                        help="run without a Hopper GPU (reference path; checks the driver itself)")
    args = parser.parse_args(argv)
    if args.plant_fault:
        return plant_fault()

    import jax
    from jax_hopper import _ffi

    families = []
    if args.only in (None, "gemm"):
        families.append(("gemm", gemm_groups(args.quick), gemm_inputs, gemm_call, gemm_check))
    if args.only in (None, "ragged"):
        families.append(("ragged", ragged_groups(args.quick), ragged_inputs, ragged_call,
                         ragged_check))
    if args.only in (None, "tma"):
        families.append(("tma", tma_groups(args.quick), tma_inputs, tma_call, tma_check))
    if args.only in (None, "quantize"):
        families.append(("quantize", quant_groups(args.quick), quant_inputs, quant_call,
                         quant_check))
    if args.only in (None, "transpose"):
        families.append(("transpose", transpose_groups(args.quick), transpose_inputs,
                         transpose_call, transpose_check))
    total = sum(len(g) for _, groups, *_ in families for g in groups)
    if args.list:
        for _, groups, *_ in families:
            for g in groups:
                for c in g:
                    print(c.label())
        print(f"{total} cases")
        return 0

    hopper = _ffi.hopper_devices()
    if not hopper and not args.allow_cpu:
        print(f"sanitize_driver: no Hopper GPU (devices: {jax.devices()}); nothing to sanitize",
              flush=True)
        return 2
    print(f"sanitize_driver: {total} kernel calls on {hopper[0] if hopper else jax.devices()[0]}",
          flush=True)
    rng = np.random.default_rng(0)
    failures, start, done = [], time.time(), 0
    for family, groups, inputs_fn, call_fn, check_fn in families:
        for i, group in enumerate(groups):
            if args.groups and not args.groups[0] <= i + 1 <= args.groups[1]:
                continue
            t0 = time.time()
            try:
                bad = run_group(group, inputs_fn, call_fn, check_fn, rng)
            except Exception as e:  # noqa: BLE001 (report every group, then fail)
                bad = [(f"{family} group {i} ({group[0].label()} ...)",
                        f"{type(e).__name__}: {e}")]
            done += len(group)
            failures += bad
            print(f"[{done}/{total}] {family} group {i + 1}/{len(groups)}: {len(group)} calls, "
                  f"{'ok' if not bad else f'{len(bad)} FAILED'} ({time.time() - t0:.1f} s)",
                  flush=True)
            for label, problem in bad:
                print(f"  FAIL {label}: {problem}", flush=True)
    print(f"sanitize_driver: {total} calls, {len(failures)} failures, "
          f"{time.time() - start:.0f} s", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
