"""A weight of odd width stored (K, N) in a decode loop, side by side with XLA and a padded copy.

    python benchmarks/bench_odd_weight.py [--cases 768x50257 4096x32001] [--rows 1 8 64]

TMA addresses a (K, N) weight only when N is a multiple of 8 (bf16 rows 16 bytes apart). Up
to 384 tokens (heuristics.ODD_WEIGHT_MAX_M) hopper_matmul reads any other in place
(matmul_swap_odd: staged from 16-byte boundaries, shifted in shared memory); past that it
copies it into a padded pitch at every call (jax_hopper/gemm/pitch.py), and XLA does not hoist
that copy out of a lax.scan. A vocabulary of 50257 (GPT-2's LM head) is such a weight. Per
case and token count, a lax.scan of --steps decode steps (x <- x + 1e-3 y[:, :K], y = x @ w)
timed interleaved in one process, microseconds per step:
  xla          jnp.dot on the odd weight
  hopper       hopper_matmul on the odd weight (read in place at these token counts)
  hopper_pad   hopper_matmul on the weight padded once outside the loop (jnp.pad), the output
               sliced to N (what docs/usage.md recommends)
  xla_pad      jnp.dot on that padded weight
with the HBM floor (the weight's bytes at 3.0 TB/s). Writes odd_weight_<tag>.json.
"""

from __future__ import annotations

import argparse
import json
import os

import jax
import jax.numpy as jnp

import timing

import jax_hopper

HBM = 3.0e12


def decode_loop(product, steps: int):
    """jit((x, w) -> x after `steps` steps of x + 1e-3 * product(x, w)[:, :K])."""
    def run(x, w):
        k = x.shape[1]

        def body(c, _):
            return c + 1e-3 * product(c, w)[:, :k].astype(c.dtype), None
        return jax.lax.scan(body, x, None, length=steps)[0]
    return jax.jit(run)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", type=timing.dims_parser("KxN"),
                        default=[(768, 50257), (4096, 32001)])
    parser.add_argument("--rows", nargs="+", type=int, default=[1, 8, 64])
    parser.add_argument("--steps", type=int, default=64)
    timing.add_output_args(parser)
    args = parser.parse_args(argv)
    timing.require_kernels(jax_hopper)
    key = jax.random.PRNGKey(0)
    rows = []
    for k, n in args.cases:
        w = jax.random.normal(key, (k, n), jnp.bfloat16)
        w_pad = jnp.pad(w, ((0, 0), (0, -n % 8)))
        variants = {
            "xla": (decode_loop(jnp.dot, args.steps), w),
            "hopper": (decode_loop(jax_hopper.hopper_matmul, args.steps), w),
            "hopper_pad": (decode_loop(lambda x, w: jax_hopper.hopper_matmul(x, w)[:, :n],
                                       args.steps), w_pad),
            "xla_pad": (decode_loop(lambda x, w: jnp.dot(x, w)[:, :n], args.steps), w_pad),
        }
        floor_us = k * n * 2 / HBM * 1e6
        for m in args.rows:
            x = jax.random.normal(key, (m, k), jnp.bfloat16)
            runs = {name: ((lambda pairs, f=f: [f(*p) for p in pairs]), [(x, wt)])
                    for name, (f, wt) in variants.items()}
            res = timing.time_interleaved(runs, reps=args.reps)
            us = {name: r["median_s"] / args.steps * 1e6 for name, r in res.items()}
            row = dict(m=m, k=k, n=n, floor_us=floor_us, us_per_step=us,
                       hopper_vs_xla=us["xla"] / us["hopper"],
                       hopper_pad_vs_xla=us["xla"] / us["hopper_pad"])
            rows.append(row)
            print(f"{m:4d} x {n} x {k}: " + "  ".join(f"{name} {t:7.1f}" for name, t in us.items())
                  + f" us/step (floor {floor_us:.1f}); hopper/xla {row['hopper_vs_xla']:.2f}x, "
                  f"hopper_pad/xla {row['hopper_pad_vs_xla']:.2f}x", flush=True)
    path = os.path.join(args.out_dir, f"odd_weight_{args.tag}.json")
    with open(path, "w") as f:
        json.dump(dict(device=jax.devices()[0].device_kind, steps=args.steps, rows=rows), f,
                  indent=1)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
