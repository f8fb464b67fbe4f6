"""hopper_matmul against jnp.dot under sustained load: each variant runs its chain of products
back to back for --seconds (as a training loop keeps the GPU busy), long enough for the power
cap to set the clock, while NVML samples the SM clock, the board power and the clock-event
reasons every 10 ms. Short timed bursts (bench_gemm, bench_ab) start near the boost clock; here
every kernel runs at the clock its own power draw leaves it, so a kernel that spends more energy
per product is slower here than in a burst.

Time per call is taken over the second half of each run only (between two synchronisations),
and the samples over the same span. Variants alternate, --rounds times, a second's idle before
each; the medians are reported.

    python benchmarks/bench_sustained.py --shapes 4096 792x3072x14336 [--seconds 3] [--rounds 2]
        [--configs '[{"block_m": 128, "block_n": 256, "stages": 4}]'] [--out-dir D] [--tag T]
        # writes sustained_<tag>.json
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import os
import statistics
import sys
import threading
import time

import jax
import jax.numpy as jnp

import bench_gemm
import timing

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import jax_hopper  # noqa: E402

CALLS = 20           # products per chained run (as bench_ab)
SYNC_EVERY = 10      # chained runs between synchronisations
SAMPLE_PERIOD_S = 0.01
NVML_CLOCK_SM = 1    # nvmlClockType_t
NVML_TEMPERATURE_GPU = 0
# nvmlClocksEventReasons bits (nvml.h) named in the output
CLOCK_EVENT_REASONS = {0x1: "gpu_idle", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
                       0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake"}


def visible_gpu(env) -> int | bytes:
    """The NVML handle key of the GPU that JAX's first device is: NVML counts every GPU of the
    machine and ignores CUDA_VISIBLE_DEVICES, so its first entry (an index or a "GPU-..." UUID)
    names it; without the variable, GPU 0."""
    first = env.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if first.startswith(("GPU-", "MIG-")):
        return first.encode()
    return int(first) if first.isdigit() else 0


class NvmlSampler:
    """A thread sampling (time, SM MHz, watts, reason bits, deg C) of the GPU JAX runs on
    (visible_gpu) through NVML.

    Without NVML (no driver, or a machine without a GPU) `available` is False and no samples are
    taken: the timings are still reported, without clocks."""

    def __init__(self, period_s: float = SAMPLE_PERIOD_S, library: str = "libnvidia-ml.so.1"):
        self.period_s = period_s
        self.samples: list[tuple[float, int, float, int, int]] = []
        self._stop = threading.Event()
        self._thread = None
        try:
            self._nvml = ctypes.CDLL(library)
            handle = ctypes.c_void_p()
            gpu = visible_gpu(os.environ)
            get = (self._nvml.nvmlDeviceGetHandleByUUID if isinstance(gpu, bytes)
                   else self._nvml.nvmlDeviceGetHandleByIndex_v2)
            if self._nvml.nvmlInit_v2() != 0 or get(gpu, ctypes.byref(handle)) != 0:
                raise OSError(f"NVML: no handle for GPU {gpu!r}")
            self._handle = handle
            self.available = True
        except (OSError, AttributeError):
            self.available = False

    def _sample(self):
        clock, milliwatts = ctypes.c_uint(), ctypes.c_uint()
        reasons, temp = ctypes.c_ulonglong(), ctypes.c_uint()
        while not self._stop.is_set():
            self._nvml.nvmlDeviceGetClockInfo(self._handle, NVML_CLOCK_SM, ctypes.byref(clock))
            self._nvml.nvmlDeviceGetPowerUsage(self._handle, ctypes.byref(milliwatts))
            self._nvml.nvmlDeviceGetCurrentClocksThrottleReasons(self._handle,
                                                                 ctypes.byref(reasons))
            self._nvml.nvmlDeviceGetTemperature(self._handle, NVML_TEMPERATURE_GPU,
                                                ctypes.byref(temp))
            self.samples.append((time.time(), clock.value, milliwatts.value / 1000,
                                 reasons.value, temp.value))
            self._stop.wait(self.period_s)

    def __enter__(self):
        if self.available:
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def window_summary(samples, t0: float, t1: float) -> dict | None:
    """Medians of SM clock and power, the hottest temperature and the clock-event reasons seen
    over the samples taken in [t0, t1]; None where there are none."""
    inside = [s for s in samples if t0 <= s[0] <= t1]
    if not inside:
        return None
    bits = 0
    for s in inside:
        bits |= s[3]
    return dict(sm_mhz=statistics.median(s[1] for s in inside),
                watts=statistics.median(s[2] for s in inside),
                max_temp_c=max(s[4] for s in inside), n_samples=len(inside),
                reasons=[name for bit, name in CLOCK_EVENT_REASONS.items() if bits & bit])


def sustained_run(run, pairs, seconds: float) -> tuple[float, float, float]:
    """Calls `run(pairs)` back to back for `seconds`; returns (seconds per product over the
    second half, that half's start, its end), both ends at synchronisations. Each
    synchronisation waits for the batch before the one just queued, so the GPU never runs dry."""
    start = time.time()
    marks = []  # (time, products done) at each synchronisation

    def queue_batch():
        for _ in range(SYNC_EVERY):
            out = run(pairs)  # the run before's outputs are freed once computed
        return out

    done, batch = 0, SYNC_EVERY * len(pairs)
    queued = queue_batch()
    while True:
        ahead = queue_batch()
        jax.block_until_ready(queued)
        done += batch
        now = time.time()
        marks.append((now, done))
        queued = ahead
        if now - start >= seconds:
            break
    jax.block_until_ready(queued)
    half = next(m for m in marks if m[0] - start >= seconds / 2)
    if half is marks[-1]:
        half = marks[-2] if len(marks) > 1 else (start, 0)
    return (now - half[0]) / (done - half[1]), half[0], now


def variants(configs: list[dict]) -> tuple[dict, dict]:
    """(name -> the product each variant chains, name -> why it was skipped): XLA, then
    bench_gemm's hopper variants (the default config and one per forced config)."""
    hopper, skipped = bench_gemm.hopper_variants(configs)
    return {"xla": lambda a, b: jnp.dot(a, b), **hopper}, skipped


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    timing.add_output_args(parser)
    parser.add_argument("--shapes", nargs="+", type=timing.parse_shape, required=True)
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each run")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--configs", type=json.loads, default=[],
                        help="JSON list of GemmConfig fields, each a forced variant")
    args = parser.parse_args()
    timing.require_kernels(jax_hopper)
    path = os.path.join(args.out_dir, f"sustained_{args.tag}.json")
    os.makedirs(args.out_dir, exist_ok=True)
    env = dict(device=jax.devices()[0].device_kind, jax=jax.__version__,
               date=datetime.date.today().isoformat(), argv=sys.argv)
    rows = []
    with NvmlSampler() as sampler:
        if not sampler.available:
            print("NVML unavailable: times only, no clocks", file=sys.stderr)
        for m, n, k in args.shapes:
            sets = timing.rotating_sets(jax.random.key(0), m, n, k,
                                        timing.n_sets_for(2 * (m * k + k * n + m * n)))
            pairs = timing.rotation(sets, CALLS)
            products, skipped = variants(args.configs)
            for name, why in skipped.items():
                print(f"{name} skipped: {why}", file=sys.stderr)
            runs = {name: timing.chained(f) for name, f in products.items()}
            for run in runs.values():  # compile and warm up
                jax.block_until_ready(run(pairs))
            per = {name: [] for name in runs}
            for _ in range(args.rounds):
                for name, run in runs.items():
                    time.sleep(1.0)
                    per_call, t0, t1 = sustained_run(run, pairs, args.seconds)
                    per[name].append(dict(us=per_call * 1e6,
                                          **(window_summary(sampler.samples, t0, t1) or {})))
            row = dict(shape=[m, n, k], variants={}, skipped=skipped)
            xla_us = statistics.median(r["us"] for r in per["xla"])
            for name, rs in per.items():
                us = statistics.median(r["us"] for r in rs)
                row["variants"][name] = dict(
                    us=us, tflops=timing.tflops(m, n, k, us * 1e-6), runs=rs,
                    xla_over_this_time=xla_us / us,
                    **{key: statistics.median(r[key] for r in rs)
                       for key in ("sm_mhz", "watts") if all(key in r for r in rs)})
            rows.append(row)
            print(f"{m}x{n}x{k}: " + "  ".join(
                f"{name} {v['us']:.1f} us ({v['xla_over_this_time']:.3f}x xla"
                + (f", {v['sm_mhz']:.0f} MHz, {v['watts']:.0f} W)" if "sm_mhz" in v else ")")
                for name, v in row["variants"].items()), flush=True)
            timing.write_run_json(path, complete=False, environment=env, rows=rows)
    timing.write_run_json(path, complete=True, environment=env, rows=rows)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
