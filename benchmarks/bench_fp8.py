"""fp8 GEMMs side by side in one process: hopper_fp8_matmul against XLA's fp8 dot.

    python benchmarks/bench_fp8.py [--shapes MxNxK ...] [--sweep] [--out-dir DIR] [--tag TAG]

Operands are random-normal, quantized once to float8_e4m3fn with per-tensor scales, a as
(M, K) and b as (N, K) (both K-major, the layout fp8 wgmma reads); bf16 output. Variants:
    hopper       hopper_fp8_matmul(a, b, a_scale, b_scale), the default config
    hopper_best  the fastest compiled fp8 config (--sweep: every tile x cluster)
    xla_fp8      XLA at its best of two spellings: lax.dot_general on the fp8 operands with a
                 bf16 result, scaled after; and the dequantize-then-dot pattern XLA's GEMM
                 rewriter turns into cuBLASLt's scaled fp8 GEMM
Rotating input sets larger than L2, medians of interleaved runs (jax_hopper.timing). The
floor is max(FLOPs at the H100's dense fp8 peak, 1979 TFLOP/s; operand and output bytes at
3.0 TB/s). Writes fp8_<tag>.json; exit status 1 when a variant's result is wrong.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

import jax
import jax.numpy as jnp

import timing

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import jax_hopper  # noqa: E402
from jax_hopper import GemmConfig, hopper_fp8_matmul  # noqa: E402
from jax_hopper.kernels import catalog  # noqa: E402

SHAPES = ((8192, 8192, 8192), (4096, 7168, 2048), (4096, 4096, 7168), (4096, 7168, 16384),
          (256, 4096, 4096), (64, 12288, 4096))
FP8_PEAK = 1979e12
HBM = 3.0e12
ERR_LIMIT = 2e-2  # bf16 output of an fp8 product against float32 of the same fp8 values
E4M3, BF16 = jnp.float8_e4m3fn, jnp.bfloat16
NT = (((1,), (1,)), ((), ()))  # a (M, K) . b (N, K) over K


def floor_s(m, n, k):
    return max(2 * m * n * k / FP8_PEAK, (m * k + n * k + 2 * m * n) / HBM)


@jax.jit
def _quantize(x):
    scale = jnp.max(jnp.abs(x)) / catalog.FP8_MAX["float8_e4m3fn"]
    return (x / scale).astype(E4M3), scale.astype(jnp.float32)


def fp8_sets(key, m, n, k, n_sets):
    """n_sets ((a, b), scales): a (M, K), b (N, K) e4m3 quantized per tensor."""
    sets = []
    for kk in jax.random.split(key, n_sets):
        ka, kb = jax.random.split(kk)
        a, sa = _quantize(jax.random.normal(ka, (m, k), jnp.float32))
        b, sb = _quantize(jax.random.normal(kb, (n, k), jnp.float32))
        sets.append(((a, b), (sa, sb)))
    jax.block_until_ready(sets)
    return sets


def variants(scales, configs):
    sa, sb = scales

    def xla_fp8_dot(a, b):
        return (jax.lax.dot_general(a, b, NT, preferred_element_type=BF16) * (sa * sb)).astype(BF16)

    def xla_fp8_dequant(a, b):
        return jax.lax.dot_general(a.astype(BF16) * sa.astype(BF16), b.astype(BF16) *
                                   sb.astype(BF16), NT, preferred_element_type=BF16)

    out = {"xla_fp8_dot": xla_fp8_dot, "xla_fp8_dequant": xla_fp8_dequant,
           "hopper": lambda a, b: hopper_fp8_matmul(a, b, sa, sb)}
    for name, config in configs.items():
        out[name] = lambda a, b, c=config: hopper_fp8_matmul(a, b, sa, sb, config=c)
    return out


def sweep_configs():
    fam = catalog.FAMILIES["fp8"]
    return {f"cfg {t.tag} c{cm}x{cn}": GemmConfig.for_tile(t, cluster_m=cm, cluster_n=cn)
            for t in fam.tiles for cm, cn in fam.clusters}


def bench_shape(key, m, n, k, reps, configs):
    n_calls, _ = timing.call_plan(m, n, k)
    n_sets = min(n_calls, timing.n_sets_for(m * k + n * k))
    sets = fp8_sets(key, m, n, k, n_sets)
    (a0, b0), (sa, sb) = sets[0]
    ref = jax.jit(lambda a, b: jax.lax.dot_general(a.astype(jnp.float32), b.astype(jnp.float32),
                                                   NT) * (sa * sb))(a0, b0)
    # Every variant closes over set 0's scales: the rotation's other sets differ only in data.
    pairs = timing.rotation([p for p, _ in sets], n_calls)
    runs = {name: (timing.chained(f), pairs) for name, f in variants((sa, sb), configs).items()}
    timed = timing.time_interleaved(runs, reps)
    rows = {}
    for name, r in timed.items():
        if isinstance(r, Exception):
            rows[name] = dict(error=f"{type(r).__name__}: {str(r)[:200]}")
            continue
        err = float(timing.rel_fro_error(r["out"], ref))
        rows[name] = dict(us=r["median_s"] * 1e6, tflops=timing.tflops(m, n, k, r["median_s"]),
                          floor_pct=100 * floor_s(m, n, k) / r["median_s"], rel_err=err,
                          wrong=not err <= ERR_LIMIT)
    ok = {n: r for n, r in rows.items() if "us" in r and not r["wrong"]}
    best_cfg = min((n for n in ok if n.startswith("cfg ")), key=lambda n: ok[n]["us"],
                   default=None)
    xla_best = min((n for n in ("xla_fp8_dot", "xla_fp8_dequant") if n in ok),
                   key=lambda n: ok[n]["us"], default=None)
    return dict(shape=[m, n, k], floor_us=floor_s(m, n, k) * 1e6, variants=rows,
                best_config=best_cfg, xla_fp8_best=xla_best)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    timing.add_output_args(parser)
    parser.add_argument("--shapes", nargs="*", type=timing.parse_shape, default=list(SHAPES))
    parser.add_argument("--sweep", action="store_true", help="time every compiled fp8 config")
    args = parser.parse_args()
    timing.require_kernels(jax_hopper)
    configs = sweep_configs() if args.sweep else {}
    results = []
    key = jax.random.key(0)
    hdr = (f"{'M x N x K':>20s} {'floor us':>9s} {'hopper':>8s} {'best cfg':>9s} {'xla fp8':>8s} "
           f"{'hop/xla8':>9s} {'hop %floor':>10s}  (TFLOP/s)")
    print(hdr, flush=True)
    for i, (m, n, k) in enumerate(args.shapes):
        r = bench_shape(jax.random.fold_in(key, i), m, n, k, args.reps, configs)
        results.append(r)
        v = r["variants"]

        def tf(name):
            return v[name]["tflops"] if name and "tflops" in v.get(name, {}) else float("nan")

        hop, xla8 = tf("hopper"), tf(r["xla_fp8_best"])
        print(f"{f'{m}x{n}x{k}':>20s} {r['floor_us']:9.1f} {hop:8.0f} {tf(r['best_config']):9.0f} "
              f"{xla8:8.0f} {hop / xla8:8.2f}x "
              f"{v['hopper'].get('floor_pct', float('nan')):9.0f}%", flush=True)
    env = dict(device=jax.devices()[0].device_kind, jax=jax.__version__,
               date=datetime.date.today().isoformat(), argv=sys.argv[1:])
    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, f"fp8_{args.tag}.json")
    with open(path, "w") as f:
        json.dump(dict(environment=env, results=results), f, indent=1)
    print(f"wrote {path}")
    wrong = [(r["shape"], n) for r in results for n, v in r["variants"].items() if v.get("wrong")]
    for shape, name in wrong:
        print(f"WRONG RESULT: {name} at {shape}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
