"""The heuristic scored offline against the tuner's reports (`python -m jax_hopper.tune
--report PATH`, every compiled config of each problem timed on the device): for each problem,
the time of the config the heuristic picks now, looked up among the report's candidates,
against the fastest, beside the heuristic's own time when the report was made. No GPU is
needed (the rules that read a plan need the built extension), so a rule change can be weighed
on every problem a report holds before an A/B. A report speaks only for the tree that made it
(its kernels and plans), and a rule fit to its problems is then checked on shapes drawn after.
Each row names the rule that picks today's config (heuristics.heuristic_choice), and the
summary scores each rule over its problems: where the time left on the table is.

    python benchmarks/heuristic_regret.py benchmarks/results/tune_h200_20261202_random_worst.json
    python benchmarks/heuristic_regret.py REPORT... --set SPLIT_PIECE_KBLOCKS=3 LONG_K_BLOCKS=96

--set scores the rules with some of their constants changed (set_constant): a refit weighed
on every problem the reports hold, before the A/B that decides it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from jax_hopper import tune
from jax_hopper.gemm import tuned
from jax_hopper.gemm.config import GemmConfig
from jax_hopper.gemm.heuristics import dense, grouped, plan, swap

# The modules whose rules read the constants set_constant sets (each reads its own globals).
_RULE_MODULES = (dense, swap, grouped, plan)


def set_constant(assignment: str) -> None:
    """'NAME=VALUE': the heuristics' constant NAME (a module-level int or float of the rules'
    modules) set to VALUE for this process, in every rule module that binds it: a constant
    one module imports from another (swap.py's LONG_K_BLOCKS, plan.py's SPLIT_PIECE_KBLOCKS,
    from dense.py) is the importer's own name, which the rules there read. ValueError naming
    the rule for anything else."""
    name, sep, text = assignment.partition("=")
    modules = [mod for mod in _RULE_MODULES
               if name.isupper() and type(getattr(mod, name, None)) in (int, float)]
    if not sep or not modules:
        raise ValueError(f"--set {assignment!r}: want NAME=VALUE, NAME an int or float "
                         "constant of jax_hopper.gemm.heuristics' rules (e.g. "
                         "SPLIT_PIECE_KBLOCKS=3)")
    kind = type(getattr(modules[0], name))
    try:
        value = kind(text)
    except ValueError:
        raise ValueError(f"--set {assignment!r}: {name} is {kind.__name__}") from None
    for module in modules:
        setattr(module, name, value)


def score(report: dict) -> list[dict]:
    """One row per problem of `report` (tune._report's JSON): its best time, the heuristic's
    then (the report's) and now (None where the report did not time that launch), in us,
    whether the choice changed, and the rule that picks it now. Configs match by their launch
    (tune.launch_key): a split that splits nothing is the whole config's launch."""
    rows = []
    for key, entry in report["problems"].items():
        p = tune.Problem(*tuned.parse_problem_key(key))
        times = {}  # a launch that older reports timed twice: its faster median
        for c in entry["candidates"]:
            launch = tune.launch_key(p, GemmConfig(**c["config"]))
            times[launch] = min(c["us"], times.get(launch, c["us"]))
        then = next((tune.launch_key(p, GemmConfig(**c["config"]))
                     for c in entry["candidates"] if c.get("heuristic")), None)
        now, rule = tune.heuristic_choice_for(p)
        now_launch = tune.launch_key(p, now)
        rows.append(dict(problem=key, best_us=min(times.values()),
                         then_us=entry["heuristic_us"], now_us=times.get(now_launch),
                         changed=then is not None and then != now_launch,
                         now=tuned.config_fields(now), rule=rule))
    return rows


def by_rule(rows: list[dict]) -> dict[str, dict]:
    """score's rows timed now, by the rule that picks them: {rule: {problems, geomean and
    worst of now over best, the worst's problem}}, the rule of most time lost first."""
    out = {}
    for r in rows:
        if r["now_us"]:
            out.setdefault(r["rule"], []).append((r["now_us"] / r["best_us"], r["problem"]))
    summary = {rule: dict(problems=len(xs), geomean=_geomean([x for x, _ in xs]),
                          worst=max(xs)[0], worst_problem=max(xs)[1])
               for rule, xs in out.items()}
    return dict(sorted(summary.items(),
                       key=lambda kv: -kv[1]["problems"] * math.log(kv[1]["geomean"])))


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reports", nargs="+", help="JSON files of python -m jax_hopper.tune --report")
    parser.add_argument("--set", nargs="+", default=[], metavar="NAME=VALUE",
                        help="score with these constants of the rules changed")
    args = parser.parse_args(argv)
    for assignment in args.set:
        try:
            set_constant(assignment)
        except ValueError as e:
            parser.error(str(e))
    rows = []
    for path in args.reports:
        with open(path) as f:
            report = json.load(f)
        # benchmarks/results/tune_*.json holds other tuner outputs too (caches, hand-written
        # sweeps): a file without the report's problems is named and passed over.
        if not isinstance(report, dict) or not isinstance(report.get("problems"), dict):
            print(f"{path}: not a tuner report (no 'problems'), skipped", file=sys.stderr)
            continue
        rows += score(report)
    print(f"{'problem':44s} {'best us':>8s} {'then x':>7s} {'now x':>7s} {'changed':7s}  rule")
    for r in rows:
        now = f"{r['now_us'] / r['best_us']:7.3f}" if r["now_us"] else "  -    "
        then = f"{r['then_us'] / r['best_us']:7.3f}" if r["then_us"] else "  -    "
        print(f"{r['problem']:44s} {r['best_us']:8.1f} {then} {now} "
              f"{'yes' if r['changed'] else '':7s}  {r['rule']}")
    both = [r for r in rows if r["now_us"] and r["then_us"]]
    print(f"time over the best, geomean over the {len(both)} problems timed both ways: then "
          f"{_geomean([r['then_us'] / r['best_us'] for r in both]):.3f}, now "
          f"{_geomean([r['now_us'] / r['best_us'] for r in both]):.3f}; "
          f"{sum(not r['now_us'] for r in rows)} whose choice now the reports did not time")
    print("by rule (time over the best now; most time lost first):")
    for rule, s in by_rule(rows).items():
        print(f"  {rule:26s} {s['problems']:3d} problems  geomean {s['geomean']:.3f}  "
              f"worst {s['worst']:.3f} ({s['worst_problem']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
