"""One dense product's GEMM kernel under ncu, XLA's jnp.dot and hopper_matmul side by side.

    python3 scripts/ncu_gemm.py 8192x4096x1024 [--config '{"schedule": "pingpong", ...}']
        [--bias] [--activation gelu_tanh] [--section WarpStateStats ...] [--out FILE]
    python3 scripts/ncu_gemm.py run xla|ours 8192x4096x1024 [...]   # the product ncu watches

The first form runs ncu twice (jnp.dot, then hopper_matmul), each on the third of four calls of
the jitted product, at the GPU's free clocks (--clock-control none: the clocks a benchmark
sees), and prints one table: each metric (ncu's raw name, or section / name) with XLA's value,
ours and ours / XLA. XLA's autotuning launches many candidate kernels, so it is run once first
with a per-fusion autotune cache, which the profiled process then reads: the profiled kernel is
the one XLA picks in that run, with no tuning launches to count past. Another process (a
benchmark's) may pick another kernel for the same product: at 8192 x 4096 x 512 this one got a
Triton fusion where the benchmark's processes ran cuBLAS's nvjet ping-pong 128x160 (H100,
2026-12-07, timeline_h100_20261207_short_k_gaps.txt), so the table names both kernels. With
--bias / --activation the product is followed by act(y + bias) (a (N,) bias), fused into our
kernel; XLA's GEMM kernel is profiled alone (a fused cuBLAS epilogue comes with it, a separate
fusion kernel does not).
The metrics are those the profiles in benchmarks/results/ncu_* kept coming back to.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
import tempfile

import jax
import jax.numpy as jnp

import jax_hopper
from jax_hopper.gemm import epilogue
from jax_hopper.timing import parse_shape

# Our kernels' SASS name (cuda/gemm/kernel.cuh); XLA's GEMM is cuBLAS's (nvjet, cutlass, xmma,
# gemv) or a Triton fusion ("gemm_fusion", "triton").
OURS_KERNELS = "regex:sm90_gemm_kernel"
XLA_KERNELS = "regex:nvjet|gemm|gemv|cutlass|xmma|triton"
METRICS = (
    "gpu__time_duration.sum",
    "sm__cycles_elapsed.avg.per_second",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "lts__t_requests_srcunit_tex.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
    "smsp__inst_executed.sum",
    "launch__grid_size",
    "launch__cluster_dim_x",
    "launch__cluster_dim_y",
    "launch__block_size",
    "launch__registers_per_thread",
)
CALLS, SKIP = 4, 2
ACTIVATIONS = [name for name in epilogue.ACTIVATIONS if name is not None]


def run(variant: str, shape, config: dict | None, bias: bool, activation: str | None) -> None:
    """The product, CALLS times, each waited for."""
    m, n, k = shape
    ka, kb, kc = jax.random.split(jax.random.key(0), 3)
    a = jax.random.normal(ka, (m, k), jnp.bfloat16)
    b = jax.random.normal(kb, (k, n), jnp.bfloat16)
    bias_v = jax.random.normal(kc, (n,), jnp.float32) if bias else None
    if variant == "ours":
        cfg = jax_hopper.GemmConfig(**config) if config else None
        f = jax.jit(lambda a, b, c: jax_hopper.hopper_matmul(a, b, bias=c, activation=activation,
                                                             config=cfg))
    else:
        code = epilogue.activation_code(activation)

        def xla(a, b, c):
            if c is None and activation is None:
                # The plain product as bench_gemm.py times it: bf16 out of the dot itself.
                # NOTES: as float32 out, then converted, XLA with its Triton GEMM off ran
                # cuBLAS writing float32 (twice the output bytes; no F2FP in its SASS) and a
                # separate convert (H100, 2026-12-07, ncu_h100_20261207_nvjet_source.txt).
                return jnp.dot(a, b)
            y = jnp.dot(a, b, preferred_element_type=jnp.float32)
            return epilogue.apply_activation(y if c is None else y + c, code).astype(a.dtype)
        f = jax.jit(xla)
    for _ in range(CALLS):
        jax.block_until_ready(f(a, b, bias_v))


def _csv_rows(text: str) -> list[dict[str, str]]:
    """The rows of the table in `ncu --csv` output (past the program's own output); [] when
    there is none."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if '"Metric Name"' in line), None)
    return [] if start is None else list(csv.DictReader(io.StringIO("".join(lines[start:]))))


def parse_csv(text: str) -> dict[str, tuple[str, str]]:
    """{metric: (unit, value)} of the one profiled kernel in `ncu --csv` output (a raw metric
    under its own name, a section's under "Section / Name"); {} when there is no table."""
    rows = {}
    for row in _csv_rows(text):
        name, section = row.get("Metric Name"), row.get("Section Name", "")
        if not name:
            continue
        if section and section != "Command line profiler metrics":
            name = f"{section} / {name}"
        rows[name] = (row.get("Metric Unit", ""), row.get("Metric Value", ""))
    return rows


def kernel_name(text: str) -> str:
    """The profiled kernel's name in `ncu --csv` output (its first row's), "-" when none."""
    rows = _csv_rows(text)
    return (rows[0].get("Kernel Name") if rows else None) or "-"


def _number(value: str) -> float | None:
    try:
        return float(value.replace(",", ""))
    except ValueError:
        return None


def table(xla: dict, ours: dict) -> str:
    """The two profiles' metrics in rows: name, unit, XLA, ours, ours / XLA."""
    names = list(dict.fromkeys([*xla, *ours]))
    width = max([len(n) for n in names] + [6])
    lines = [f"{'metric':<{width}}  {'unit':<10} {'xla':>14} {'ours':>14}  ours/xla"]
    for name in names:
        unit = (xla.get(name) or ours.get(name))[0]
        x, o = xla.get(name, ("", "-"))[1], ours.get(name, ("", "-"))[1]
        xn, on = _number(x), _number(o)
        ratio = f"{on / xn:.3f}" if xn and on is not None else ""
        lines.append(f"{name:<{width}}  {unit:<10} {x:>14} {o:>14}  {ratio}")
    return "\n".join(lines)


def _run_args(variant: str, args) -> list[str]:
    out = [sys.executable, os.path.abspath(__file__), "run", variant,
           "x".join(map(str, args.shape))]
    if args.config:
        out += ["--config", json.dumps(args.config)]
    if args.bias:
        out.append("--bias")
    if args.activation:
        out += ["--activation", args.activation]
    return out


def autotune_cache_env(env: dict, cache_dir: str) -> dict:
    """`env` with XLA's per-fusion autotune cache in `cache_dir`: the first process tunes and
    fills it, a later one finds every fusion's choice there (ncu_h100_20261124_midm.txt's
    method). jax aborts at start on a flag its XLA does not know."""
    flags = f"{env.get('XLA_FLAGS', '')} --xla_gpu_per_fusion_autotune_cache_dir={cache_dir}"
    return dict(env, XLA_FLAGS=flags.strip())


def profile(variant: str, args, env: dict) -> tuple[dict, str]:
    """ncu's metrics for `variant`'s third call, and its raw output."""
    cmd = ["ncu", "--csv", "--clock-control", "none", "--kernel-name",
           OURS_KERNELS if variant == "ours" else XLA_KERNELS,
           "--launch-skip", str(SKIP), "--launch-count", "1", "--metrics", ",".join(METRICS)]
    for section in args.section:
        cmd += ["--section", section]
    done = subprocess.run(cmd + _run_args(variant, args), env=env, capture_output=True,
                          text=True, timeout=args.timeout)
    return parse_csv(done.stdout), done.stdout + done.stderr


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "run":
        parser = argparse.ArgumentParser(prog="ncu_gemm.py run")
        parser.add_argument("variant", choices=("xla", "ours"))
        parser.add_argument("shape", type=parse_shape)
        parser.add_argument("--config", type=json.loads)
        parser.add_argument("--bias", action="store_true")
        parser.add_argument("--activation", choices=ACTIVATIONS)
        args = parser.parse_args(sys.argv[2:])
        run(args.variant, args.shape, args.config, args.bias, args.activation)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("shape", type=parse_shape, help="MxNxK, bf16, a (M, K) @ b (K, N)")
    parser.add_argument("--config", type=json.loads, help="GemmConfig fields for ours (JSON)")
    parser.add_argument("--bias", action="store_true")
    parser.add_argument("--activation", choices=ACTIVATIONS)
    parser.add_argument("--section", nargs="*", default=[], help="ncu sections to add")
    parser.add_argument("--timeout", type=float, default=180, help="seconds per ncu run")
    parser.add_argument("--out", help="also write the table (and the raw output) here")
    args = parser.parse_args()

    # With preallocation, ncu's backup of device memory between passes outlasted 60 s (H200).
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    with tempfile.TemporaryDirectory() as cache:
        xla_env = autotune_cache_env(env, cache)
        subprocess.run(_run_args("xla", args), check=True, timeout=args.timeout, env=xla_env)
        xla, xla_raw = profile("xla", args, xla_env)
    ours, ours_raw = profile("ours", args, env)
    m, n, k = args.shape
    head = (f"# ncu, {m} x {n} x {k} bf16, a (M, K) @ b (K, N)"
            f"{', bias' if args.bias else ''}{', ' + args.activation if args.activation else ''}"
            f"; ours {args.config or 'default config'}; call {SKIP + 1} of {CALLS}, free clocks")
    kernels = f"# kernels: xla {kernel_name(xla_raw)[:100]}; ours {kernel_name(ours_raw)[:100]}"
    text = f"{head}\n{kernels}\n{table(xla, ours)}\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n## raw ncu output, xla\n" + xla_raw + "\n## raw ncu output, ours\n"
                    + ours_raw)
    missing = [(v, raw) for v, got, raw in (("xla", xla, xla_raw), ("ours", ours, ours_raw))
               if not got]
    for variant, raw in missing:
        print(f"ncu returned no metrics for {variant}; the end of its output:\n{raw[-3000:]}",
              file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
