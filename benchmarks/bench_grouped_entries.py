"""The grouped GEMM under vmap over entries, each routing its own rows to experts the entries
share: one launch over every entry (hopper_ragged_dot under vmap: ragged_primitive.fold_entries)
against one launch per entry (lax.map over hopper_ragged_dot, what vmap ran before 2026-12-06)
and XLA (lax.map over jax.lax.ragged_dot, which vmap refuses with a shared rhs), forward, bf16, uniform routing, side by side in one
process (time_interleaved's shuffled rounds, and each variant's device time from one trace).

    python benchmarks/bench_grouped_entries.py [--shape ExMxGxKxN ...] [--reps 7]
                                               [--out-dir D] [--tag T]

E entries of M rows each over G experts of K -> N. Writes grouped_entries_<tag>.json; TFLOP/s
count the useful work (2 E M K N: every row is routed).
"""

from __future__ import annotations

import argparse
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

from timing import (add_output_args, chained, device_times, dims_parser, geomean,
                    rel_fro_error, require_kernels, rotation, time_interleaved, write_run_json)

import jax_hopper

# Decode batches over small experts, a few long sequences over Mixtral's experts, many short
# entries over few experts (launch-bound per entry).
DEFAULT_SHAPES = ("8x256x16x2048x1408", "4x2048x8x4096x14336", "32x64x8x1024x1024")


def variants(rhs) -> dict:
    """{name: f(lhs (E, M, K), sizes (E, G))} of the three ways to run the entries."""
    def one(x, s):
        return jax_hopper.hopper_ragged_dot(x, rhs, s)

    def xla(x, s):
        return jax.lax.ragged_dot(x, rhs, s)

    # jax.lax.ragged_dot has no batching rule for a shared rhs (NotImplementedError, jax
    # 0.11.2): XLA's entries run in a loop too.
    return {"folded": jax.vmap(one),
            "per_entry": lambda x, s: jax.lax.map(lambda xs: one(*xs), (x, s)),
            "xla": lambda x, s: jax.lax.map(lambda xs: xla(*xs), (x, s))}


def run_case(shape, reps: int, rng) -> dict:
    e, m, g, k, n = shape
    keys = jax.random.split(jax.random.key(int(rng.integers(1 << 31))), 4)
    rhs = (jax.random.normal(keys[0], (g, k, n), jnp.float32) / np.sqrt(k)).astype(jnp.bfloat16)
    set_bytes = 2 * e * m * (k + n)
    n_sets = max(2, min(8, int(200e6 // set_bytes) + 1))  # rotated past the 50 MB L2
    sets = [(jax.random.normal(jax.random.fold_in(keys[1], i), (e, m, k), jnp.bfloat16),
             jnp.asarray(np.stack([rng.multinomial(m, np.ones(g) / g) for _ in range(e)]),
                         jnp.int32)) for i in range(n_sets)]
    fns = variants(rhs)
    pairs = rotation(sets, max(n_sets, 8))
    runs = {name: (chained(f), pairs) for name, f in fns.items()}
    want = jax.jit(fns["xla"])(*sets[0]).astype(jnp.float32)
    timed = time_interleaved(runs, reps, check=lambda name, out: float(rel_fro_error(out, want)))
    device = device_times(runs) or {}
    flops = 2 * e * m * k * n
    row = dict(shape=list(shape), flops=flops, variants={})
    for name, r in timed.items():
        if isinstance(r, Exception):
            row["variants"][name] = dict(error=str(r)[:300])
            continue
        dev = device.get(name)
        row["variants"][name] = dict(us=r["median_s"] * 1e6, tflops=flops / r["median_s"] / 1e12,
                                     device_us=dev and dev * 1e6, rel_err=r["err"])
    return row


def ratio(row, a: str, b: str, key: str) -> float | None:
    va, vb = row["variants"].get(a, {}), row["variants"].get(b, {})
    return vb[key] / va[key] if va.get(key) and vb.get(key) else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", nargs="+", type=dims_parser("ExMxGxKxN"),
                        default=[dims_parser("ExMxGxKxN")(s) for s in DEFAULT_SHAPES])
    add_output_args(parser)
    args = parser.parse_args(argv)
    require_kernels(jax_hopper)
    rng = np.random.default_rng(0)
    env = dict(device=jax.devices()[0].device_kind, jax=jax.__version__)
    path = os.path.join(args.out_dir, f"grouped_entries_{args.tag}.json")
    rows = []
    print(f"{env['device']}, jax {env['jax']}")
    print(f"{'E x M x G x K x N':>26} {'folded':>16} {'per entry':>16} {'XLA':>16}"
          f"  {'fold/entry':>10} {'fold/XLA':>8}  (us chained | on the device)")
    for shape in args.shape:
        row = run_case(shape, args.reps, rng)
        rows.append(row)
        cells = []
        for name in ("folded", "per_entry", "xla"):
            v = row["variants"][name]
            cells.append(f"{v['us']:7.1f} | {v['device_us'] or 0:6.1f}" if "us" in v
                         else f"{'failed':>16}")
        print(f"{'x'.join(map(str, shape)):>26} {cells[0]:>16} {cells[1]:>16} {cells[2]:>16}  "
              f"{ratio(row, 'folded', 'per_entry', 'device_us') or 0:10.2f} "
              f"{ratio(row, 'folded', 'xla', 'device_us') or 0:8.2f}")
        write_run_json(path, complete=False, environment=env, cases=rows)
    summary = {peer: geomean(xs) if (xs := [x for r in rows
                                            if (x := ratio(r, "folded", peer, "device_us"))])
               else None for peer in ("per_entry", "xla")}
    write_run_json(path, complete=True, environment=env, cases=rows, device_geomean=summary)
    print(f"device-time geomean over the per-entry launches, over XLA: {summary}; wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
