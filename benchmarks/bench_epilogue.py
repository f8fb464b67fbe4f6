"""Fused vs unfused epilogues on the MLP shapes, side by side in one process (bf16 in/out):

    hopper fused     hopper_matmul(a, b, bias=..., activation=..., residual=...), or
                     hopper_glu(a, b as (K, 2, F)) for the gated unit
    hopper unfused   hopper_matmul(a, b) followed by the same epilogue in jnp
    xla              jnp.dot(a, b) followed by the same epilogue (XLA fuses what it can)

    python benchmarks/bench_epilogue.py [--out-dir DIR] [--tag TAG] [--reps 7]

Cases: MLP up 8192x28672x4096 with bias + GELU (tanh), the same product as a SwiGLU unit
(silu(gate) * up, 14336 output columns; with a (2, F) bias too), MLP down 8192x4096x14336
with bias + residual. Rotating input sets larger than L2, medians (benchmarks/timing.py).
Writes epilogue_<tag>.json; exit status 1 when a variant's result is wrong.
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
from jax_hopper import hopper_matmul  # noqa: E402

ERR_LIMIT = 1e-2
BF16 = jnp.bfloat16


def gelu_bias(x, bias):
    return jax.nn.gelu(x + bias, approximate=True)


def swiglu(y, e):
    del e
    gate, up = jnp.split(y, 2, axis=-1)
    return (jax.nn.silu(gate.astype(jnp.float32)) * up.astype(jnp.float32)).astype(y.dtype)


CASES = {
    # name: (shape of the product, epilogue in jnp on the bf16 product, the fused call through
    # package jh: jax_hopper, or another build of it in benchmarks/bench_ab.py)
    "mlp_up_bias_gelu": ((8192, 28672, 4096), lambda y, e: gelu_bias(y, e["bias"]),
                         lambda jh, a, b, e: jh.hopper_matmul(a, b, bias=e["bias"],
                                                              activation="gelu_tanh")),
    # BERT-large's feed-forward up-projection (1024 -> 4096): a short K, where the epilogue is
    # a fifth of the fused call's time (H100, 2026-12-07).
    "ffn_up_bias_gelu_k1024": ((8192, 4096, 1024), lambda y, e: gelu_bias(y, e["bias"]),
                               lambda jh, a, b, e: jh.hopper_matmul(a, b, bias=e["bias"],
                                                                    activation="gelu_tanh")),
    # The same with the erf GELU (jax.nn.gelu(approximate=False): BERT's own, in HF's models).
    "ffn_up_bias_gelu_erf_k1024": ((8192, 4096, 1024),
                                   lambda y, e: jax.nn.gelu(y + e["bias"], approximate=False),
                                   lambda jh, a, b, e: jh.hopper_matmul(a, b, bias=e["bias"],
                                                                        activation="gelu")),
    "mlp_up_swiglu": ((8192, 28672, 4096), swiglu,
                      lambda jh, a, b, e: jh.hopper_glu(a, b.reshape(b.shape[0], 2, -1))),
    "mlp_up_swiglu_bias": ((8192, 28672, 4096), lambda y, e: swiglu(y + e["bias"], e),
                           lambda jh, a, b, e: jh.hopper_glu(a, b.reshape(b.shape[0], 2, -1),
                                                             bias=e["bias"].reshape(2, -1))),
    "mlp_down_bias_residual": ((8192, 4096, 14336), lambda y, e: y + e["bias"] + e["residual"],
                               lambda jh, a, b, e: jh.hopper_matmul(a, b, bias=e["bias"],
                                                                    residual=e["residual"])),
}


def case_extra(name, key, m, n):
    """The epilogue's operands: a bias, and a residual where the case has one."""
    kb, kr = jax.random.split(key)
    extra = {"bias": jax.random.normal(kb, (n,), jnp.float32).astype(BF16)}
    if "residual" in name:
        extra["residual"] = jax.random.normal(kr, (m, n), jnp.float32).astype(BF16)
    return extra


def variants(epilogue, fused, extra):
    return {
        "hopper_fused": lambda a, b: fused(jax_hopper, a, b, extra),
        "hopper_unfused": lambda a, b: epilogue(hopper_matmul(a, b), extra),
        "xla": lambda a, b: epilogue(jnp.dot(a, b), extra),
    }


def reference(a, b, epilogue, extra):
    y = jnp.dot(a, b, preferred_element_type=jnp.float32)
    return epilogue(y, {k: v.astype(jnp.float32) for k, v in extra.items()})


def bench_case(name, key, reps):
    (m, n, k), epilogue, fused = CASES[name]
    ke, ks = jax.random.split(key)
    extra = case_extra(name, ke, m, n)
    n_calls, n_sets = timing.call_plan(m, n, k)
    sets = timing.rotating_sets(ks, m, n, k, n_sets)
    pairs = timing.rotation(sets, n_calls)
    ref = jax.jit(reference, static_argnums=2)(*sets[0], epilogue, extra)
    print(f"{name} {m}x{n}x{k}: {n_sets} sets, {n_calls} calls per run", flush=True)
    rows = {}
    timed = timing.time_interleaved({vname: (timing.chained(f), pairs) for vname, f in
                                     variants(epilogue, fused, extra).items()}, reps)
    for vname, r in timed.items():
        if isinstance(r, Exception):
            raise r
        err = float(timing.rel_fro_error(r["out"], ref))
        rows[vname] = dict(ms=r["median_s"] * 1e3, tflops=timing.tflops(m, n, k, r["median_s"]),
                           times_ms=[t * 1e3 for t in r["times_s"]], rel_err=err,
                           wrong=not err <= ERR_LIMIT)
        print(f"  {vname:16s} {rows[vname]['ms']:8.3f} ms {rows[vname]['tflops']:7.1f} TFLOP/s "
              f" err {err:.1e}", flush=True)
    return dict(case=name, shape=[m, n, k], variants=rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    timing.add_output_args(parser)
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    args = parser.parse_args()
    timing.require_kernels(jax_hopper)
    key = jax.random.key(0)
    results = [bench_case(c, jax.random.fold_in(key, i), args.reps)
               for i, c in enumerate(args.cases)]
    print(f"\n{'case':26s} {'fused ms':>9s} {'unfused':>9s} {'xla':>9s} {'fused/xla':>10s} "
          f"{'fused/unfused':>14s}")
    for r in results:
        v = r["variants"]
        print(f"{r['case']:26s} {v['hopper_fused']['ms']:9.3f} {v['hopper_unfused']['ms']:9.3f} "
              f"{v['xla']['ms']:9.3f} {v['xla']['ms'] / v['hopper_fused']['ms']:9.2f}x "
              f"{v['hopper_unfused']['ms'] / v['hopper_fused']['ms']:13.2f}x")
    env = dict(device=jax.devices()[0].device_kind, jax=jax.__version__,
               date=datetime.date.today().isoformat())
    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, f"epilogue_{args.tag}.json")
    with open(path, "w") as f:
        json.dump(dict(environment=env, results=results), f, indent=1)
    print(f"wrote {path}")
    return 1 if any(v["wrong"] for r in results for v in r["variants"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
