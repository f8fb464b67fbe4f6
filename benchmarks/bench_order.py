"""Does the order of interleaved timings bias them? One grouped kernel under two names (A: the
default, B: the same config passed explicitly), timed with XLA's low-power ragged_dot in fixed
rounds "xla A B" (A always right after XLA), then "xla B A", then shuffled
(timing.time_interleaved). Order matters if A/B > 1 in the first and < 1 in the second.

    python benchmarks/bench_order.py [--cases deepseek_up mixtral_up] [--reps 9] [--out-dir D]
                                     [--tag T]     # writes order_<tag>.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time

import jax
import numpy as np

import bench_grouped
import timing

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import jax_hopper  # noqa: E402
from jax_hopper.gemm.heuristics import grouped_heuristic_config  # noqa: E402

CALLS = 5  # calls per run, as bench_ab's grouped cases


def fixed_rounds(runs: dict, pairs, order: list, reps: int) -> dict:
    """Median seconds per call of each run, timed in `reps` rounds of the same `order` (a
    sample: three runs issued back to back, as timing.time_interleaved)."""
    times = {v: [] for v in order}
    for _ in range(reps):
        for v in order:
            t0 = time.perf_counter()
            jax.block_until_ready([runs[v](pairs) for _ in range(3)])
            times[v].append((time.perf_counter() - t0) / (3 * CALLS))
    return {v: statistics.median(t) for v, t in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    timing.add_output_args(parser, reps=9)
    parser.add_argument("--cases", nargs="+", default=["deepseek_up", "mixtral_up"],
                        choices=list(bench_grouped.CASES))
    args = parser.parse_args()
    timing.require_kernels(jax_hopper)
    out = {}
    for name in args.cases:
        m, groups, k, n = bench_grouped.CASES[name]
        sizes = bench_grouped.group_sizes(np.random.default_rng(0), m, groups, "uniform")
        pairs = timing.rotation(
            bench_grouped.operand_sets(jax.random.key(0), m, groups, k, n, sizes), CALLS)
        cfg = grouped_heuristic_config("grouped", groups, m, n, k)
        runs = {"xla": timing.chained(lambda a, r: jax.lax.ragged_dot(a[0], r, a[1])),
                "A": timing.chained(lambda a, r: jax_hopper.hopper_ragged_dot(a[0], r, a[1])),
                "B": timing.chained(lambda a, r: jax_hopper.hopper_ragged_dot(
                    a[0], r, a[1], config=cfg))}
        for run in runs.values():  # compile and warm up
            jax.block_until_ready(run(pairs))
            jax.block_until_ready(run(pairs))
        res = {}
        for order in (["xla", "A", "B"], ["xla", "B", "A"]):
            med = fixed_rounds(runs, pairs, order, args.reps)
            res[" ".join(order)] = dict(A_over_B_speed=med["B"] / med["A"],
                                        **{f"{v}_us": t * 1e6 for v, t in med.items()})
        shuffled = timing.time_interleaved({v: (run, pairs) for v, run in runs.items()},
                                           args.reps)
        res["shuffled"] = dict(A_over_B_speed=shuffled["B"]["median_s"]
                               / shuffled["A"]["median_s"])
        out[name] = res
        print(name, {label: round(r["A_over_B_speed"], 3) for label, r in res.items()},
              flush=True)
    env = dict(device=jax.devices()[0].device_kind, jax=jax.__version__,
               date=datetime.date.today().isoformat(), argv=sys.argv)
    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, f"order_{args.tag}.json")
    with open(path, "w") as f:
        json.dump(dict(environment=env, cases=out), f, indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
