"""Autotuning: time the compiled configs of each GEMM problem on this GPU and cache the fastest.

    python -m jax_hopper.tune --shapes 8192x8192x8192 256x4096x4096 [--layout nn] [--batch 1]
                              [--family matmul] [--dtype bfloat16] [--reps 5] [--cache PATH]
                              [--report PATH]   (every candidate's time, as JSON)
    python -m jax_hopper.tune --family fp8 --shapes 64x4096x4096 [--dtype float8_e4m3fn]
                              [--b-dtype float8_e5m2]         (fp8_block: block scales)
    python -m jax_hopper.tune --family grouped --groups 128 --shapes 32768x1536x2048
                              (M rows in all; grouped_glu, grouped_fp8, grouped_fp8_block and
                               the contractions likewise: tune_grouped.py)

or from Python, with the problems a jitted function runs (forward and, under jax.grad,
backward GEMMs alike):

    problems = jax_hopper.tune.problems_of(train_step, params, batch)
    jax_hopper.tune.tune(problems)

Every candidate (each compiled tile of the family, each cluster shape, stream-K on and off
where the schedule allows and the plan differs: launch_key) and the heuristic's own choice are
timed interleaved on random-normal
inputs rotated past L2 (jax_hopper.timing), by their device time per call where a profiler
trace gives it (timing.device_times), else by the host clock; a candidate enters the cache
only if its result agrees with the heuristic config's (MAX_DISAGREEMENT) and it beats the
heuristic by more than `min_gain` (2%: less is within the run-to-run noise of one shape), first
among all candidates and again with the two timed alone (CONFIRM_REPS: the fastest of thirty
noisy medians is fast partly by luck). Calls without an explicit config then use the cached
one for this GPU and problem (jax_hopper/gemm/tuned.py says where the cache lives and what it
holds). Tuning needs the kernels (kernels_available()): on anything else it times XLA's
reference and refuses.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import sys

import jax
import jax.numpy as jnp

from jax_hopper import _ffi, timing, tune_grouped
from jax_hopper.gemm import heuristics, pitch, tuned
from jax_hopper.gemm.api import hopper_matmul
from jax_hopper.gemm.config import GemmConfig
from jax_hopper.gemm.fp8 import hopper_fp8_gemm_p, hopper_fp8_matmul
from jax_hopper.gemm.glu import hopper_glu
from jax_hopper.gemm.heuristics import SWAP_MAX_M, Choice, grouped_heuristic_config
from jax_hopper.gemm.primitive import hopper_gemm_p
from jax_hopper.gemm.ragged_contract import hopper_ragged_contract_p
from jax_hopper.gemm.ragged_fp8 import hopper_ragged_fp8_p
from jax_hopper.gemm.ragged_fp8_contract import hopper_ragged_fp8_contract_p
from jax_hopper.gemm.ragged_primitive import hopper_ragged_p
from jax_hopper.gemm.traced_primitive import inner_jaxprs
from jax_hopper.kernels import catalog


# The fp8 families and the scaling of their hopper_fp8_matmul calls.
FP8_SCALING = {"fp8": "tensor", "fp8_block": "block"}
# The primitives whose equations are GEMM problems (_problem_of).
_GEMM_PRIMITIVES = (hopper_gemm_p, hopper_fp8_gemm_p, hopper_ragged_p, hopper_ragged_fp8_p,
                    hopper_ragged_contract_p, hopper_ragged_fp8_contract_p)
# The families the command line tunes: the dense ones' calls (their swap-AB kernels are
# candidates of matmul and fp8) and every grouped one.
_CLI_FAMILIES = ("matmul", "glu", *FP8_SCALING, *catalog.GROUPED_FAMILIES,
                 *catalog.CONTRACTION_FAMILIES)


@dataclasses.dataclass(frozen=True)
class Problem:
    """One GEMM as the kernel sees it: n counts product columns (2F for the gated unit); dtype
    is a's, b_dtype b's where it differs (the fp8 pairs). For the grouped families batch is
    the group count G (tune_grouped.py)."""
    family: str
    dtype: str
    a_mn: bool
    b_mn: bool
    batch: int
    m: int
    n: int
    k: int
    b_dtype: str | None = None

    @property
    def key(self) -> str:
        return tuned.problem_key(self.family, self.dtype, self.a_mn, self.b_mn, self.batch,
                                 self.m, self.n, self.k, self.b_dtype)


def launch_key(p: Problem, config: GemmConfig) -> str:
    """What a call of p with `config` launches, as a string: the config's fields, with
    stream_k=True taken as False where the two plans agree (heuristics.plan_of on this GPU's SM
    count: the plan splits nothing), so that one launch is timed once; where the planner is
    not here (heuristics.can_plan), the fields as they are. A swapped tile on a weight that the
    matmul_swap_odd kernels read in place (pitch.shifted_weight_tile: every unclustered swapped
    tile of a token width launches the same odd tile, one CTA to an SM) counts as the one
    pitch.shifted_config_tile names."""
    weight = jax.ShapeDtypeStruct((p.batch, p.k, p.n), p.dtype)
    odd = pitch.shifted_weight_tile(weight, p.b_mn, config, p.family)
    if odd is not None:
        config = GemmConfig.for_tile(pitch.shifted_config_tile(p.family, odd), swap_ab=True,
                                     stream_k=config.stream_k)
    fields = tuned.config_fields(config)
    if config.stream_k and heuristics.can_plan():  # the grouped families never split
        sms = tuned.device_sms()
        if odd is not None:  # the odd tile's plans (its family splits a last wave too)
            plans = [heuristics.odd_plan_of(odd, p.batch, p.m, p.n, p.k, sms, stream_k=s)
                     for s in (True, False)]
        else:
            plans = [heuristics.plan_of(dataclasses.replace(config, stream_k=s), p.batch, p.m,
                                        p.n, p.k, sms, p.family) for s in (True, False)]
        if plans[0] == plans[1]:
            fields["stream_k"] = False
    return json.dumps(fields, sort_keys=True)


def _launches(p: Problem, configs) -> dict:
    """{launch_key: config} of `configs`, the first config of each launch."""
    out = {}
    for c in configs:
        out.setdefault(launch_key(p, c), c)
    return out


def candidates(p: Problem) -> list[GemmConfig]:
    """Every compiled config worth timing for p, one per launch (_candidate_launches)."""
    return list(_candidate_launches(p).values())


def _candidate_launches(p: Problem) -> dict:
    """_launches of every compiled config of p: tile x cluster shape x stream-K, and the
    swap-AB tiles (swap_ab) where p's family has them and its a is stored (M, K).
    NOTES: the tuner's reports of 2026-12-02 timed stream_k=True beside stream_k=False on
    every tile, where most plans split nothing: the same launch timed twice (153.2 and 153.8
    us for one launch at 7311 x 1000 x 7168), which cost device time and let noise rank."""
    out = []
    swaps = (False, True) if p.family in catalog.SWAP_FAMILIES and not p.a_mn else (False,)
    for swap in swaps:
        fam = catalog.FAMILIES[catalog.SWAP_FAMILIES[p.family] if swap else p.family]
        for tile in fam.tiles:
            splits = ((True, False) if fam.stream_k and catalog.SCHEDULES[tile.schedule].stream_k
                      else (False,))
            for cm, cn in fam.tile_clusters(tile):
                for stream_k in splits:
                    out.append(GemmConfig.for_tile(tile, cluster_m=cm, cluster_n=cn,
                                                   stream_k=stream_k, swap_ab=swap))
    return _launches(p, out)


def _operands(p: Problem, key):
    """Rotating sets of (a, b) stored as p's majors say; for fp8, ((a, a_scale), (b, b_scale))
    with unit scales of the family's shapes."""
    n_calls, n_sets = timing.call_plan(p.m * p.batch, p.n, p.k)
    sets = []
    for kk in jax.random.split(key, n_sets):
        ka, kb = jax.random.split(kk)
        a = jax.random.normal(ka, (p.batch, p.k, p.m) if p.a_mn else (p.batch, p.m, p.k))
        if p.family == "glu":
            b = jax.random.normal(kb, (p.k, 2, p.n // 2))
        else:
            b = jax.random.normal(kb, (p.batch, p.k, p.n) if p.b_mn else (p.batch, p.n, p.k))
        a, b = a.astype(p.dtype), b.astype(p.b_dtype or p.dtype)
        if p.family in FP8_SCALING:
            block = catalog.FP8_SCALE_BLOCK  # a: a scale per row, b: per 128 rows
            a, b = (a, _unit_scale(p, p.m, 1)), (b, _unit_scale(p, p.n, block))
        sets.append((a, b))
    jax.block_until_ready(sets)
    return timing.rotation(sets, n_calls)


def _unit_scale(p: Problem, rows: int, rows_per_scale: int):
    """Ones in hopper_fp8_matmul's scale shape: per tensor a scalar, per block
    (batch, ceil(rows / rows_per_scale), ceil(K / 128))."""
    if FP8_SCALING[p.family] == "tensor":
        return jnp.float32(1.0)
    return jnp.ones((p.batch, -(-rows // rows_per_scale), -(-p.k // catalog.FP8_SCALE_BLOCK)),
                    jnp.float32)


def _call(p: Problem, config: GemmConfig):
    if p.family == "glu":
        return lambda x, w: hopper_glu(x, w, config=config)
    if p.family in FP8_SCALING:
        return lambda a, b: hopper_fp8_matmul(a[0], b[0], a[1], b[1], config=config)
    return lambda a, b: hopper_matmul(a, b, config=config, transpose_a=p.a_mn,
                                      transpose_b=not p.b_mn)


def heuristic_for(p: Problem) -> GemmConfig:
    """The config a call of problem p takes where nothing is tuned (the heuristic's)."""
    return heuristic_choice_for(p).config


def heuristic_choice_for(p: Problem) -> Choice:
    """heuristic_for's config and the rule that picked it (heuristics.heuristic_choice; the
    grouped families' one rule: grouped_heuristic_config)."""
    if tune_grouped.is_grouped(p.family):
        return Choice(grouped_heuristic_config(p.family, p.batch, p.m, p.n, p.k),
                      "grouped_heuristic_config")
    return tuned.heuristic_default_choice(p.family, p.dtype, p.a_mn, p.b_mn, p.batch, p.m,
                                          p.n, p.k, p.b_dtype)


# Two configs of one product differ only in the order of the fp32 sums and where the output is
# rounded (~1e-3 relative for bf16 outputs); more means one of them computes something else.
MAX_DISAGREEMENT = 1e-2


def tune_problem(p: Problem, reps: int = 5, key=None, only: GemmConfig | None = None) -> dict:
    """{label: median seconds per call} of every candidate (or of `only`) and the heuristic's
    choice ("heuristic"), on the device where a trace gives it (clock "device"), else by the
    host clock ("host"); the fastest candidate other than the heuristic's config (best; None
    where none ran), {label: error} of the candidates that failed: raised, or returned a result
    further than MAX_DISAGREEMENT from the heuristic config's, and {label: config} of them
    all."""
    grouped = tune_grouped.is_grouped(p.family)
    key = key if key is not None else jax.random.key(0)
    pairs = tune_grouped.operands(p, key) if grouped else _operands(p, key)
    call = tune_grouped.call if grouped else _call
    heuristic = heuristic_for(p)
    configs = {"heuristic": heuristic}
    # The candidate that is the heuristic's own config is timed once, as "heuristic": timed
    # twice, one of its two medians could beat the other by the noise (5% was seen on a
    # decode shape, H100, 2026-11-24) and be cached as a "winner" that changes nothing.
    launches = _candidate_launches(p) if only is None else _launches(p, [only])
    launches.pop(launch_key(p, heuristic), None)
    configs.update({f"c{i}": c for i, c in enumerate(launches.values())})
    runs = {label: (timing.chained(call(p, c)), pairs) for label, c in configs.items()}
    reference = {}

    def check(label, out):
        # Each candidate's result against the heuristic config's (warmed up first: the runs
        # keep their order), so that a config computing something else is never cached,
        # however fast. Raised here, the error is the candidate's failure.
        if label == "heuristic":
            reference["out"] = out
            return 0.0
        if not reference:
            raise RuntimeError("the heuristic config failed: no result to check this one by")
        return float(timing.rel_fro_error(out, reference["out"]))

    # Compiled, warmed up and checked (one timed round), then timed over `reps` rounds: by
    # their device time where a trace has it, else by the host clock. A chained call shorter
    # than the host's ~20-27 us to enqueue it is timed by the host (timing.device_time's
    # NOTES), which ranked short problems' candidates by noise (up to 16% between configs with
    # the same kernel and plan, CONFIRM_REPS's NOTES).
    timed = timing.time_interleaved(runs, 1, check=check)
    for label, r in timed.items():
        if not isinstance(r, Exception) and not r["err"] <= MAX_DISAGREEMENT:
            timed[label] = ValueError(
                f"its result differs from the heuristic config's by {r['err']:.2e} (relative "
                f"Frobenius error; at most {MAX_DISAGREEMENT} is the same product)")
    failed = {label: r for label, r in timed.items() if isinstance(r, Exception)}
    ok = {label: runs[label] for label in timed if label not in failed}
    times = timing.device_times(ok, reps) if ok else None
    clock = "device" if times else "host"
    if not times:
        host = timing.time_interleaved(ok, reps, warmup=1) if ok else {}
        failed.update({label: r for label, r in host.items() if isinstance(r, Exception)})
        times = {label: r["median_s"] for label, r in host.items()
                 if not isinstance(r, Exception)}
    best = min((label for label in times if label != "heuristic"), key=times.get, default=None)
    return dict(times=times, clock=clock, best=configs[best] if best else None,
                best_s=times[best] if best else None, heuristic_s=times.get("heuristic"),
                failed=failed, configs=configs)


# The confirmation round's reps, as a multiple of the search's: the winner and the heuristic's
# config timed alone, interleaved. NOTES: on 25-35 us calls the search's 5-rep medians differed
# by up to 16% between two configs with the same kernel and plan (H100, 2026-11-27,
# tune_h100_20261127_narrow.json); the least of ~35 such medians is an optimist's estimate.
CONFIRM_REPS = 3


def tune(problems, reps: int = 5, cache: str | None = None, allow_reference: bool = False,
         min_gain: float = 0.02, log=print, report: str | None = None) -> dict:
    """Tunes each problem and stores every winner that beats the heuristic by more than
    min_gain, in the search and again when the two are timed alone (CONFIRM_REPS times the
    reps); returns {problem key: entry written (or None)}. report: a JSON file to write every
    problem's candidates to (_report), fastest first: where the heuristic loses, and to what;
    rewritten after each problem."""
    kernels = _ffi.kernels_available()
    if not kernels and not allow_reference:
        raise RuntimeError(f"jax_hopper.tune needs the kernels ({kernels.reason})")
    gpu = tuned.gpu_key()
    written, results, timings = {}, {}, {}
    # Each problem once, in order; a grouped one as its kernel runs it (its K or N padded where
    # the call pads them), which is what its launches look up.
    problems = [tune_grouped.kernel_problem(p) if tune_grouped.is_grouped(p.family) else p
                for p in problems]
    for p in dict.fromkeys(problems):
        if p.family == "glu" and p.batch * p.m <= SWAP_MAX_M:
            log(f"{p.key}: a gated unit of {p.batch * p.m} rows runs as the swap-AB product "
                f"and the unit after it, not on the glu kernels: tune the product "
                f"(matmul {p.dtype} kn 1x{p.batch * p.m}x{p.n}x{p.k}) -> skipped")
            results[p.key] = None
            continue
        r = tune_problem(p, reps)
        r["heuristic_rule"] = heuristic_choice_for(p).rule
        timings[p.key] = r
        if report:  # rewritten after each problem: a run stopped midway keeps what it timed
            _report(report, gpu, timings)
        for label, error in r.get("failed", {}).items():
            log(f"{p.key}: candidate {label} failed ({type(error).__name__}: {error})")
        if r["best"] is None:
            log(f"{p.key}: no candidate ran -> heuristic kept")
            results[p.key] = None
            continue
        wins = r["heuristic_s"] is None or r["best_s"] < r["heuristic_s"] * (1 - min_gain)
        best_s, heuristic_s, verdict = r["best_s"], r["heuristic_s"], ""
        if wins and heuristic_s is not None:
            again = tune_problem(p, CONFIRM_REPS * reps, only=r["best"])
            best_s, heuristic_s = again["best_s"], again["heuristic_s"]
            if best_s is None or heuristic_s is None:
                wins, verdict = False, " (the confirmation round failed)"
            else:
                wins = best_s < heuristic_s * (1 - min_gain)
                verdict = (f"; timed alone {best_s * 1e6:.1f} vs {heuristic_s * 1e6:.1f} us"
                           + ("" if wins else ", within the noise"))
            r["confirmed"] = dict(best_us=best_s and best_s * 1e6,
                                  heuristic_us=heuristic_s and heuristic_s * 1e6, cached=wins)
            if report:
                _report(report, gpu, timings)
        log(f"{p.key}: best {r['best_s'] * 1e6:.1f} us, heuristic "
            f"{(r['heuristic_s'] or float('nan')) * 1e6:.1f} us ({r['heuristic_rule']}; "
            f"{r['clock']} time)"
            f"{verdict}"
            + (f" -> cached {tuned.config_fields(r['best'])}" if wins else " -> heuristic kept"))
        entry = dict(config=tuned.config_fields(r["best"]), us=best_s * 1e6,
                     heuristic_us=(heuristic_s or 0) * 1e6,
                     date=datetime.date.today().isoformat()) if wins else None
        results[p.key] = entry
        if entry:
            written[p.key] = entry
    if written:
        log(f"wrote {len(written)} entries for {gpu} to {tuned.store(gpu, written, cache)}")
    if report:
        log(f"wrote every candidate's time to {report}")
    return results


def _report(path: str, gpu: str, timings: dict) -> None:
    """{"gpu", "date", "problems": {key: {"clock" (tune_problem's: device or host),
    "heuristic_us", "heuristic_rule" (heuristic_choice_for's), "candidates": [{"config", "us",
    "heuristic"}, fastest first, the heuristic's own config among them], "failed": {config
    fields as a string: error}, and where the best beat the heuristic, "confirmed": {"best_us",
    "heuristic_us", "cached"} of the two timed alone}}} as JSON."""
    problems = {}
    for key, r in timings.items():
        configs = r["configs"]
        ranked = sorted((s, label) for label, s in r["times"].items())
        problems[key] = dict(
            clock=r["clock"],
            heuristic_us=None if r["heuristic_s"] is None else r["heuristic_s"] * 1e6,
            heuristic_rule=r.get("heuristic_rule"),
            candidates=[dict(config=tuned.config_fields(configs[label]), us=s * 1e6,
                             heuristic=label == "heuristic") for s, label in ranked],
            failed={str(tuned.config_fields(configs[label])): f"{type(e).__name__}: {e}"
                    for label, e in r["failed"].items()})
        if "confirmed" in r:
            problems[key]["confirmed"] = r["confirmed"]
    with open(path, "w") as f:
        json.dump(dict(gpu=gpu, date=datetime.date.today().isoformat(), problems=problems), f,
                  indent=1)


def problems_of(fn, *args, **kwargs) -> list[Problem]:
    """The GEMM problems `fn(*args, **kwargs)` runs (traced, not run), nested jits, custom_vjp
    and (under jax.grad) backward passes included, fp8 and grouped GEMMs too, in the order they
    appear, with the shapes bound to the kernel: where a call pads K or N (a pitch TMA cannot
    address), the padded size, which is what a grouped launch looks its config up with.

    Where the program is partitioned over several devices (sharded arguments, or a jit with
    shardings), the problems are each device's own: those the launches look configs up for
    while XLA partitions it (compiled here, not run), which is what the cache is read with. A
    program with no such lookups there (one device, or shard_map bodies, whose shapes are local
    already) gives those of its jaxpr; a sharded program mixing both reports the partitioned
    ones only."""
    if jax.device_count() > 1:
        # A fresh function: a jit cache hit would skip the partitioning that is recorded.
        lowered = jax.jit(lambda *a: fn(*a, **kwargs)).lower(*args)
        with tuned.recording() as seen:
            lowered.compile()
        if seen:
            return [Problem(*p) for p in seen]
    return traced_problems(fn, *args, **kwargs)


def traced_problems(fn, *args, **kwargs) -> list[Problem]:
    """problems_of on one device: the GEMM primitives of fn's jaxpr, nested ones included."""
    found = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            problem = _problem_of(eqn)
            if problem is not None:
                found.append(problem)
            for inner in inner_jaxprs(eqn):
                walk(inner)

    walk(jax.make_jaxpr(fn)(*args, **kwargs).jaxpr)
    return found


def _problem_of(eqn) -> Problem | None:
    """The Problem of a GEMM primitive's equation (None for any other), from the operands it
    binds: dense (batch, M, K) / (batch, N, K) or MN-major; grouped lhs (1, M, K) against G
    weights; contractions (G, P, Q) over M rows."""
    prim, prm = eqn.primitive, eqn.params
    if prim not in _GEMM_PRIMITIVES:
        return None
    a, b = (v.aval for v in eqn.invars[:2])
    out = eqn.outvars[0].aval
    b_dtype = None if b.dtype == a.dtype else b.dtype.name
    if prim is hopper_fp8_gemm_p:  # a (B, M, K), b (B, N, K): both K-major
        family = {scaling: family for family, scaling in FP8_SCALING.items()}[prm["scaling"]]
        return Problem(family, a.dtype.name, False, False, *out.shape, a.shape[2], b_dtype)
    if prim is hopper_gemm_p:
        batch, m, n = out.shape
        k = a.shape[1] if prm["a_mn_major"] else a.shape[2]
        return Problem(prm["family"], a.dtype.name, bool(prm["a_mn_major"]),
                       bool(prm["b_mn_major"]), batch, m, 2 * n if prm["family"] == "glu" else n,
                       k)
    if prim in (hopper_ragged_p, hopper_ragged_fp8_p):  # lhs (1, M, K), the sizes (G,)
        # (or (E, G): entries stacked, ragged_primitive.launch, tiled as E G groups)
        groups = math.prod(eqn.invars[2].aval.shape)
        family = prm["family"]
        n = out.shape[2] * (2 if family == "grouped_glu" else 1)
        return Problem(family, a.dtype.name, False, bool(prm.get("b_mn_major", False)), groups,
                       a.shape[1], n, a.shape[2], b_dtype)
    if prim is hopper_ragged_contract_p:  # x (1, M, P), y (1, M, Q): out (G, P, Q)
        return Problem("grouped_contraction", a.dtype.name, True, True, *out.shape, a.shape[1])
    # hopper_ragged_fp8_contract_p: x^T (1, P, M), y^T (1, Q, M)
    return Problem(prm["family"], a.dtype.name, False, False, *out.shape, a.shape[2], b_dtype)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", type=timing.parse_shape, required=True,
                        help="MxNxK of each problem (N: output columns; grouped families: M "
                             "all rows; contractions: PxQxM, out (G, P, Q) over M rows)")
    parser.add_argument("--family", choices=_CLI_FAMILIES, default="matmul",
                        help="hopper_matmul (with its swap-AB kernels), hopper_glu, "
                             "hopper_fp8_matmul per tensor (fp8, with its swap-AB kernels) or "
                             "with block scales (fp8_block, with its swap-AB kernels); the "
                             "grouped products (hopper_ragged_dot: grouped, hopper_ragged_glu: "
                             "grouped_glu, hopper_ragged_fp8_dot: grouped_fp8[_block]) and "
                             "contractions "
                             "(hopper_ragged_contract, hopper_ragged_fp8_contract)")
    parser.add_argument("--dtype", choices=catalog.INPUT_DTYPES + catalog.FP8_DTYPES,
                        help="a's dtype (default the family's first compiled one: bfloat16, "
                             "fp8 families float8_e4m3fn)")
    parser.add_argument("--b-dtype", choices=catalog.FP8_DTYPES,
                        help="fp8 families: b's dtype where it differs from a's")
    parser.add_argument("--layout", default=None,
                        help="two letters, n or t: transpose_a and transpose_b of the call "
                             "(default nn where the family reads it, else the one it reads: "
                             "nt for fp8, tn for the 16-bit contraction)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--groups", type=int, default=None,
                        help="grouped families (required there): the groups G the rows split "
                             "into")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--cache", default=None, help=f"default: {tuned.cache_path()}")
    parser.add_argument("--report", default=None,
                        help="also write every candidate's time per problem to this JSON file")
    parser.add_argument("--allow-reference", action="store_true",
                        help="run without the kernels (times XLA's reference: only to test this "
                             "tool)")
    args = parser.parse_args(argv)
    fam = catalog.FAMILIES[args.family]
    layouts = [("t" if a else "n") + ("n" if b else "t") for a, b in fam.majors]
    layout = args.layout or ("nn" if "nn" in layouts else layouts[0])
    if len(layout) != 2 or set(layout) - {"n", "t"}:
        parser.error(f"--layout {layout!r}: two letters, each n or t")
    if layout not in layouts:
        parser.error(f"--family {args.family} reads --layout {' or '.join(layouts)}")
    a_mn, b_mn = layout[0] == "t", layout[1] == "n"
    pairs = fam.dtypes
    dtype = args.dtype or pairs[0][0]
    if (dtype, args.b_dtype or dtype) not in pairs:
        if pairs[0][0] in catalog.FP8_DTYPES:
            parser.error(f"--family {args.family} compiles the (a, b) dtype pairs {pairs}; "
                         f"got ({dtype}, {args.b_dtype or dtype})")
        parser.error(f"--family {args.family} takes --dtype {' or '.join(catalog.INPUT_DTYPES)} "
                     "for both operands")
    grouped = tune_grouped.is_grouped(args.family)
    if grouped != (args.groups is not None) or (grouped and (args.groups < 1 or args.batch != 1)):
        parser.error("--groups G (>= 1) is for the grouped families and required there (their "
                     "batch is the groups; --batch stays 1)")
    gated = args.family in ("glu", "grouped_glu")
    problems = [Problem(args.family, dtype, a_mn, b_mn, args.groups if grouped else args.batch,
                        m, 2 * n if gated else n, k,
                        None if args.b_dtype in (None, dtype) else args.b_dtype)
                for m, n, k in args.shapes]
    try:
        tune(problems, args.reps, args.cache, args.allow_reference, report=args.report)
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

