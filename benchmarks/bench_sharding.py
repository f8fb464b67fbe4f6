"""hopper_matmul against jnp.dot with sharded operands on the GPUs of one machine: the same input
and output shardings for both, timed interleaved in one process.

    python benchmarks/bench_sharding.py [--shape 16384x8192x8192] [--reps 7] [--out-dir D]

Cases (a 1-D mesh "x" over every device; A is (M, K), B (K, N), bf16 in, bf16 out):
  data             A split along M, B replicated         -> out split along M (no collective)
  tensor           A replicated, B split along N         -> out split along N (no collective)
  k_split_rows     A and B split along K                  -> out split along M (reduce-scatter)
  k_split_replica  A and B split along K                  -> out replicated (all-reduce)
Prints median ms and TFLOP/s of the global product for each, the ratio hopper/XLA and the
collectives in each compiled program; checks hopper's result against XLA's; writes
sharding_<tag>.json. On one device (or a CPU) it runs, but says the numbers mean nothing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import timing

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import jax_hopper  # noqa: E402

# name: (A spec, B spec, out spec)
CASES = {
    "data": (P("x", None), P(None, None), P("x", None)),
    "tensor": (P(None, None), P(None, "x"), P(None, "x")),
    "k_split_rows": (P(None, "x"), P("x", None), P("x", None)),
    "k_split_replica": (P(None, "x"), P("x", None), P(None, None)),
}
COLLECTIVES = ("all-reduce", "reduce-scatter", "all-gather", "all-to-all", "collective-permute")


def collectives(compiled_text: str) -> dict:
    return {c: n for c in COLLECTIVES if (n := len(re.findall(rf"\b{c}(?:-start)?\(",
                                                              compiled_text)))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", type=timing.parse_shape, default=(16384, 8192, 8192),
                        help="MxNxK of the global product")
    parser.add_argument("--calls", type=int, default=10, help="calls per timed run")
    timing.add_output_args(parser)
    args = parser.parse_args(argv)
    m, n, k = args.shape
    devices = jax.devices()
    mesh = jax.make_mesh((len(devices),), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    kernels = jax_hopper.kernels_available()
    print(f"{len(devices)} x {devices[0].device_kind}, jax {jax.__version__}; {kernels.reason}")
    if len(devices) < 2 or not kernels:
        print("(one device, or no kernels: the numbers below mean nothing)")
    rows, wrong = [], False
    for i, (name, (sa, sb, so)) in enumerate(CASES.items()):
        sets = timing.rotating_sets(jax.random.key(i), m, n, k, 2)
        sets = [(jax.device_put(a, NamedSharding(mesh, sa)),
                 jax.device_put(b, NamedSharding(mesh, sb))) for a, b in sets]
        pairs = timing.rotation(sets, args.calls)
        out_sh = NamedSharding(mesh, so)
        variants = {"xla": lambda a, b: jnp.dot(a, b), "hopper": jax_hopper.hopper_matmul}
        runs, hlo = {}, {}
        for v, f in variants.items():
            inner = jax.jit(f, out_shardings=out_sh)
            hlo[v] = collectives(inner.lower(*sets[0]).compile().as_text())
            runs[v] = (jax.jit(lambda ps, g=inner: [g(a, b) for a, b in ps]), pairs)
        timed = timing.time_interleaved(runs, args.reps)
        row = dict(case=name, a_spec=str(sa), b_spec=str(sb), out_spec=str(so))
        for v, r in timed.items():
            if isinstance(r, Exception):
                raise r
            row[v] = dict(ms=r["median_s"] * 1e3, tflops=timing.tflops(m, n, k, r["median_s"]),
                          times_ms=[t * 1e3 for t in r["times_s"]], collectives=hlo[v])
        err = float(timing.rel_fro_error(timed["hopper"]["out"], timed["xla"]["out"]))
        wrong |= not err <= 1e-2
        row["hopper_over_xla"] = row["xla"]["ms"] / row["hopper"]["ms"]
        row["rel_err"] = err
        rows.append(row)
        print(f"{name:16s} xla {row['xla']['tflops']:7.1f} {hlo['xla']}  hopper "
              f"{row['hopper']['tflops']:7.1f} {hlo['hopper']}  hopper/xla "
              f"{row['hopper_over_xla']:.3f}  err {err:.1e}", flush=True)
    env = dict(devices=[d.device_kind for d in devices], jax=jax.__version__,
               date=datetime.date.today().isoformat(), kernels=kernels.reason, argv=sys.argv,
               shape=[m, n, k])
    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, f"sharding_{args.tag}.json")
    with open(path, "w") as f:
        json.dump(dict(environment=env, results=rows), f, indent=1)
    print(f"wrote {path}; results {'WRONG' if wrong else 'ok'}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
