"""Timing of GEMM calls on the device: rotating input sets larger than L2, chained calls,
interleaved variants, host-clock medians, and device time from a profiler trace. Used by
`python -m jax_hopper.tune` and the benchmarks (benchmarks/timing.py).

Any f(a, b) -> array works (jnp.dot, a Pallas kernel, jax_hopper.hopper_matmul), so these are
testable on CPU with plain jnp functions.
"""

from __future__ import annotations

import argparse
import functools
import glob
import math
import statistics
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np


def parse_shape(text: str) -> tuple[int, int, int]:
    """'MxNxK', or one number for a cube (command-line shapes of the tuner and benchmarks)."""
    parts = text.lower().split("x")
    if len(parts) not in (1, 3) or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"shape {text!r}: want MxNxK or N")
    return tuple(int(p) for p in parts * (3 // len(parts)))


def n_sets_for(set_bytes: int, min_total_bytes: float = 200e6) -> int:
    """Sets needed so that together they exceed min_total_bytes (at least 2).

    200 MB is four times the H100's 50 MB L2: rotating through that many bytes means every call
    reads its operands from HBM, as a call inside a real model does.
    """
    return max(2, math.floor(min_total_bytes / set_bytes) + 1)


def rotating_sets(key, m: int, n: int, k: int, n_sets: int, dtype=jnp.bfloat16):
    """n_sets (a (m, k), b (k, n)) pairs of random-normal data, generated on the device.

    Drawn in float32, then cast to dtype. Never zeros: they can run faster than real data and
    hide unwritten outputs.
    """
    sets = [_draw(kk, m, n, k, dtype) for kk in jax.random.split(key, n_sets)]
    jax.block_until_ready(sets)
    return sets


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4))
def _draw(key, m, n, k, dtype):
    ka, kb = jax.random.split(key)
    return (jax.random.normal(ka, (m, k), jnp.float32).astype(dtype),
            jax.random.normal(kb, (k, n), jnp.float32).astype(dtype))


def calls_for(est_call_s: float, out_bytes: int, target_s: float = 0.03, lo: int = 10,
              hi: int = 100, max_out_bytes: float = 8e9) -> int:
    """Calls per timed run so that one run lasts about target_s (the host clock and the dispatch
    of one jitted call then cost under 1%). hi bounds the unrolled program's size; every call's
    output is kept until the run ends (see chained), so their total is capped too."""
    calls = max(lo, min(hi, math.ceil(target_s / max(est_call_s, 1e-9))))
    return max(2, min(calls, int(max_out_bytes // out_bytes)))


def call_plan(m: int, n: int, k: int, calls: int = 0, min_set_bytes: float = 200e6,
              set_bytes: float | None = None, out_bytes: float | None = None) -> tuple[int, int]:
    """(calls per timed run, rotating input sets) for a bf16 (m, k) @ (k, n) product, or one
    whose operands take `set_bytes` (a grouped product's: a weight per group) and whose output
    takes `out_bytes` (a grouped contraction's: (G, P, Q), G times the (P, Q) product's).

    The calls fill ~30 ms at a guessed H100 rate (700 TFLOP/s, 2.5 TB/s); on a CPU (smoke runs)
    3 are enough. `calls` overrides the count. Sets beyond the calls would never be read.
    """
    set_bytes = set_bytes or (m * k + k * n) * 2
    out_bytes = out_bytes or 2 * m * n
    est_s = max(2 * m * n * k / 700e12, (set_bytes + out_bytes) / 2.5e12)
    n_calls = calls or (calls_for(est_s, out_bytes=out_bytes)
                        if jax.default_backend() == "gpu" else 3)
    return n_calls, min(n_calls, n_sets_for(set_bytes, min_set_bytes))


def chained(f):
    """jit(pairs -> outputs) calling f once per (a, b) pair, back to back in one program.

    The pairs come from rotation(), which repeats the sets: every call gets its own parameters
    even where two of them are the same buffers, so XLA cannot merge the repeats into one call
    (CSE), and no operand is copied. Every output is returned, else XLA would drop the calls
    (a slice of a dot's output would be rewritten into a smaller dot). f gets its own jit so that
    its lowering (a Pallas kernel's compile) happens once, not once per call.
    """
    inner = jax.jit(f)
    return jax.jit(lambda pairs: [inner(a, b) for a, b in pairs])


def rotation(sets, n_calls: int):
    """The n_calls (a, b) pairs chained() runs: cycling through sets, ending with sets[0] so that
    the last output can be checked against a reference without another compile."""
    return [sets[(i - n_calls + 1) % len(sets)] for i in range(n_calls)]


def time_chained(run, pairs, reps: int = 7, warmup: int = 2) -> dict:
    """Median seconds per call of run(pairs) (from chained), over reps timed runs after warm-up.

    The host clock is read after block_until_ready, so every call has finished on the device.
    The first warm-up run includes the compile; its time is returned as compile_s, and its last
    output (set 0's product) as out.
    """
    result = time_interleaved({"run": (run, pairs)}, reps, warmup)["run"]
    if isinstance(result, Exception):
        raise result
    return result


def shuffled_rounds(names: list, reps: int):
    """`reps` rounds of `names`, each name once a round, in a new random order every round
    (seeded: the same rounds for the same names), so that no variant always runs right after
    the same one (time_interleaved's NOTES)."""
    order = np.random.default_rng(0)
    for _ in range(reps):
        yield [names[i] for i in order.permutation(len(names))]


def time_interleaved(runs: dict, reps: int = 7, warmup: int = 2, pipeline: int = 3,
                     pipelines: dict | None = None, check=None) -> dict:
    """time_chained for several variants at once: {name: (run, pairs)} -> {name: result}, where
    a result is time_chained's dict, or the exception that variant raised (without its
    traceback, whose frames would keep the failed run's device buffers alive). With `check`,
    check(name, out) is called on each variant's last output right after its warm-up and kept
    as the result's "err" instead of the output: a run of many variants with outputs of
    gigabytes then holds none of them.

    Every variant is compiled and warmed up first; then the timed runs go in shuffled_rounds.
    A GPU's clock drifts with its temperature and power draw over seconds, by
    several percent at full load: timed back to back, one variant would get the cool GPU and
    the next the hot one. Interleaved, the drift falls on all of them alike. Shuffled, no
    variant always follows the same one: one timed after a low-power run (XLA's ragged_dot at
    a few % of the peak) may start on boosted clocks. NOTES: with the order only rotated (each
    variant always after the same one), bench_grouped's default ran 7-13% faster than the same
    config under another name in the same run on three compute-bound MoE cases (H100,
    2026-11-27, grouped_h100_20261127_cluster_recheck.json; the default followed XLA's
    ragged_dot). Confirmed with two names for one kernel (2026-11-27,
    order_h100_20261127.json): in rounds "xla A B" A ran 1.13x / 1.12x B's speed
    (DeepSeek up / Mixtral up), in "xla B A" 0.87x / 0.89x; shuffled, 1.04x / 0.93x (nine
    rounds still leave that much). An A/B of two builds is fairest without the slow peer
    between them (benchmarks/bench_ab.py times it apart).
    One timed sample is `pipeline` runs issued back to back, then waited for: the host enqueues
    a run's calls before the device finishes the previous run's, so the device time is what
    is measured wherever it exceeds the host's. NOTES: enqueueing a chained program took 17-27 us
    per call on the H100 (2026-11-24, jnp.dot and hopper_matmul alike), more than a decode
    GEMM's 11-15 us on the device: one run waited for alone measured 28 us per call at
    1 x 4096 x 4096 where three back to back measured 19 (jnp.dot).
    `pipelines` ({name: runs per sample}) overrides `pipeline` per variant: a run whose outputs
    or temporaries take gigabytes (a training step at DeepSeek-V3's size: XLA's takes 30 GB of
    temporaries per call) holds them `pipeline` times over while in flight, and a run that long
    has no host time to hide.
    """
    results = {}
    for name, (run, pairs) in runs.items():
        try:
            t0 = time.perf_counter()
            out = jax.block_until_ready(run(pairs))[-1]
            compile_s = time.perf_counter() - t0
            for _ in range(warmup - 1):
                jax.block_until_ready(run(pairs))
            kept = dict(err=check(name, out)) if check else dict(out=out)
            del out
            results[name] = dict(compile_s=compile_s, times_s=[], **kept)
        except Exception as e:  # noqa: BLE001 -- reported per variant by the caller
            results[name] = e.with_traceback(None)
    names = [n for n, r in results.items() if not isinstance(r, Exception)]
    for round_ in shuffled_rounds(names, reps):
        for name in round_:
            if isinstance(results[name], Exception):
                continue
            run, pairs = runs[name]
            depth = (pipelines or {}).get(name, pipeline)
            try:
                t0 = time.perf_counter()
                jax.block_until_ready([run(pairs) for _ in range(depth)])
                results[name]["times_s"].append((time.perf_counter() - t0) /
                                                (depth * len(pairs)))
            except Exception as e:  # noqa: BLE001
                results[name] = e.with_traceback(None)
    for r in results.values():
        if not isinstance(r, Exception):
            r["median_s"] = statistics.median(r["times_s"])
    return results


# device_time's trace waits for each run and sleeps RUN_PAUSE_S before the next: no gap inside
# a run is that wide, and kernels further apart than RUN_GAP_NS may belong to different runs
# (run_spans).
RUN_GAP_NS = 1_000_000
RUN_PAUSE_S = 0.01


def device_time(run, pairs, reps: int = 3) -> dict | None:
    """Device time per call of run(pairs) (from chained), from a jax.profiler trace of `reps`
    runs, each waited for: a run's span on the GPU (its first kernel's start to its last one's
    end) over len(pairs), the median over the runs, as "median_s"; and each kernel's median
    duration by name ("kernels_us"). None where the trace holds no GPU kernel (a CPU backend).
    Call it after a warm-up: the first run's compile would be in the trace.

    NOTES: chained calls of a short GEMM are bound by the host, not the device: on the H100
    (2026-11-27, timeline_h100_20261127_percall.txt) jax took 20-27 us per call to enqueue a
    chained program of 100 calls while the device ran each call's kernels in 1.2-16.4 us,
    back to back (gaps under 0.2 us; XLA's overlapping by 0.4-1.8 us). time_interleaved then
    measures the host, and this the device: what the same calls cost where a program keeps the
    GPU fed (a CUDA graph, a long step). It needs XLA's command buffers (the default): without
    them the calls reach the GPU one launch at a time and the span counts the host's gaps.
    Dependent calls (each reading the one before's output) measured the same device time as
    these independent ones, XLA's and ours (H100, 2026-11-28, timeline_h100_20261128_
    dependent.txt and _cmdbuf.txt): XLA's lead at small shapes is its kernels'."""
    events = _gpu_kernels([(run, pairs)] * reps)
    if events is None:
        return None
    spans, kernels = run_spans(events, reps)
    return dict(median_s=statistics.median(spans) / 1e9 / len(pairs), runs=len(spans),
                kernels_us={name: statistics.median(d) for name, d in kernels.items()})


def device_times(runs: dict, rounds: int = 3) -> dict | None:
    """{name: device seconds per call} of each of `runs` ({name: (run, pairs)} from chained,
    warmed up), from one trace of `rounds` shuffled rounds (each run once a round, as
    time_interleaved's): the median of its runs' spans (device_time) over their calls. None
    where the trace holds no GPU kernel, or where its runs cannot be told apart (run_spans
    finds another count of them)."""
    order = [name for round_ in shuffled_rounds(list(runs), rounds) for name in round_]
    events = _gpu_kernels([runs[name] for name in order])
    if events is None:
        return None
    spans, _ = run_spans(events, len(order))
    if len(spans) != len(order):
        return None
    per_call = {}
    for name, span in zip(order, spans):
        per_call.setdefault(name, []).append(span / 1e9 / len(runs[name][1]))
    return {name: statistics.median(t) for name, t in per_call.items()}


def _gpu_kernels(runs: list) -> list | None:
    """The GPU kernels, (start_ns, duration_ns, name) sorted by start, of a jax.profiler trace
    over `runs` ((run, pairs) each), run in turn, each waited for and followed by RUN_PAUSE_S;
    None where the trace holds none, or where no trace can start (one is already running: jax
    allows one at a time)."""
    with tempfile.TemporaryDirectory() as trace_dir:
        try:
            jax.profiler.start_trace(trace_dir)
        except RuntimeError:
            return None
        try:
            for run, pairs in runs:
                jax.block_until_ready(run(pairs))
                time.sleep(RUN_PAUSE_S)
        finally:
            jax.profiler.stop_trace()
        files = glob.glob(f"{trace_dir}/**/*.xplane.pb", recursive=True)
        if not files:
            return None
        profile = jax.profiler.ProfileData.from_file(files[0])
        events = sorted((e.start_ns, e.duration_ns, e.name) for plane in profile.planes
                        if plane.name.startswith("/device:GPU:") for line in plane.lines
                        if line.name.startswith("Stream") for e in line.events)
    return events or None


def run_spans(events, count: int | None = None) -> tuple[list[int], dict]:
    """(each run's span in ns, {kernel name: [durations in us]}) of device_time's kernel events
    (start_ns, duration_ns, name), sorted by start; kernels may overlap (programmatic dependent
    launch). The runs are cut at the `count` - 1 widest gaps between kernels where the count of
    runs is known, else at every gap over RUN_GAP_NS. Cut by a threshold alone, a host-paced
    run (a few chained calls, each enqueued after the last one ran) can split where the host
    stalls past it: device_times found another count of spans than the 4 runs of 3 calls it
    traced (H100, 2026-11-27, test_bench_cpu.py on the GPU). The pause between runs is wider
    than such a stall. Fewer gaps over RUN_GAP_NS than count - 1: fewer spans."""
    gaps, last = [], events[0][0] + events[0][1]
    for i, (start, dur, _) in enumerate(events[1:], 1):
        gaps.append((start - last, i))
        last = max(last, start + dur)
    wide = [(g, i) for g, i in gaps if g > RUN_GAP_NS]
    if count is not None:
        wide = sorted(wide, reverse=True)[:max(count - 1, 0)]
    cuts = sorted(i for _, i in wide) + [len(events)]
    spans, kernels, begin = [], {}, 0
    for cut in cuts:
        run = events[begin:cut]
        spans.append(max(s + d for s, d, _ in run) - run[0][0])
        begin = cut
    for _, dur, name in events:
        kernels.setdefault(name, []).append(dur / 1e3)
    return spans, kernels


@jax.jit
def rel_fro_error(out, ref):
    """||out - ref||_F / ||ref||_F in float32 (NaN anywhere in out gives NaN)."""
    out = out.astype(jnp.float32)
    ref = ref.astype(jnp.float32)
    return jnp.linalg.norm(out - ref) / jnp.linalg.norm(ref)


def tflops(m: int, n: int, k: int, seconds: float) -> float:
    return 2.0 * m * n * k / seconds / 1e12


def geomean(xs) -> float:
    xs = list(xs)
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")
