"""The benchmarks' timing: jax_hopper.timing (shared with `python -m jax_hopper.tune`), and the
check that the kernels, not their XLA reference, are what gets timed."""

from __future__ import annotations

import os
import sys

# An installed jax_hopper first; the source tree (pure Python) where none is installed.
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402

import jax  # noqa: E402

from jax_hopper.timing import (RUN_GAP_NS, call_plan, calls_for, chained,  # noqa: E402
                               device_time, device_times, geomean, n_sets_for, parse_shape,
                               rel_fro_error, rotating_sets, rotation, run_spans, tflops,
                               time_chained, time_interleaved)

__all__ = ["RUN_GAP_NS", "add_output_args", "call_plan", "calls_for", "chained", "device_name",
           "device_time", "device_times", "dims_parser", "expand_tag", "geomean", "run_spans",
           "n_sets_for", "parse_shape", "pool_limit_warning", "rel_fro_error", "require_kernels",
           "rotating_sets", "rotation", "tflops", "time_chained", "time_interleaved",
           "RANDOM_M_CLASSES", "RANDOM_DIMS", "RANDOM_ODD_DIMS", "random_shapes", "class_summary",
           "write_run_json"]


def dims_parser(names: str):
    """An argparse type for 'AxBx...' with one positive int per letter of `names` (e.g. "MxGxKxN":
    rows, experts, K, N), naming the form in its error."""
    def parse(text: str) -> tuple[int, ...]:
        try:
            dims = tuple(int(d) for d in text.lower().split("x"))
        except ValueError:
            dims = ()
        if len(dims) != len(names.split("x")) or min(dims) <= 0:
            raise argparse.ArgumentTypeError(f"{text!r}: want {names}")
        return dims
    return parse


def device_name(devices=None) -> str:
    """The results' name for the machine (benchmarks/results/README.md): h100 / h200 from the
    first device's kind, "x<count>" after it for several (h200x2), cpu without a GPU."""
    devices = jax.devices() if devices is None else devices
    if devices[0].platform != "gpu":
        return "cpu"
    kind = devices[0].device_kind.lower()
    model = re.search(r"\b[a-z]\d{2,3}\b", kind)
    name = model.group(0) if model else re.sub(r"[^a-z0-9]", "", kind.replace("nvidia", ""))
    return name if len(devices) == 1 else f"{name}x{len(devices)}"


def expand_tag(tag: str) -> str:
    """An argparse type: `tag` with "{gpu}" replaced by device_name(), so that a tag written
    before the machine is known (the device tool may lend an H200 for an H100) names the one
    that ran."""
    return tag.replace("{gpu}", device_name()) if "{gpu}" in tag else tag


def add_output_args(parser, reps: int = 7) -> None:
    """--out-dir (default benchmarks/results), --tag (default <gpu>_<today>; "{gpu}" in a tag
    is the machine's name, expand_tag) and --reps (timed runs per variant, median): the
    options of every benchmark that writes one results file."""
    parser.add_argument("--out-dir", default=os.path.join(os.path.dirname(__file__), "results"))
    parser.add_argument("--tag", type=expand_tag,
                        default="{gpu}_" + datetime.date.today().strftime("%Y%m%d"))
    parser.add_argument("--reps", type=int, default=reps)


def require_kernels(*modules) -> None:
    """Exits unless each jax_hopper build in `modules` runs its kernels on this machine: without
    them every op lowers to its XLA reference, and a table of it would pass for the kernels."""
    for mod in modules:
        # (hopper_devices and register_targets: a baseline build may predate kernels_available)
        if not (mod._ffi.hopper_devices() and mod._ffi.register_targets()):
            sys.exit(f"{mod.__name__}: no Hopper GPU, or the extension is not built; "
                     "refusing to time the XLA reference as the kernels")
    warning = pool_limit_warning(os.environ)
    if warning:
        print(warning, file=sys.stderr)


def pool_limit_warning(env) -> str | None:
    """What to say where `env` turns JAX's preallocation off without a memory fraction: the
    allocator then keeps its default limit of 75% of the device (JAX's "GPU memory allocation"
    page), so a variant that needs more runs out of memory on a device that holds it (a
    DeepSeek-sized XLA ragged_dot step on an 80 GB H100, 2026-11-27)."""
    fractions = ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION")
    if env.get("XLA_PYTHON_CLIENT_PREALLOCATE", "").lower() != "false" or any(
            f in env for f in fractions):
        return None
    return ("note: XLA_PYTHON_CLIENT_PREALLOCATE=false without XLA_CLIENT_MEM_FRACTION keeps "
            "JAX's pool at 75% of the device: out-of-memory rows then understate what it holds "
            "(set XLA_CLIENT_MEM_FRACTION=0.95, or leave preallocation on)")


# Random shapes (--random): M drawn in four classes, in these proportions; N and K from common
# model widths, one in four of them from widths that are not multiples of 64 (rows off the
# 128-byte L2 line in bf16); products above 8192 x 16384 x 8192 in the largest class get K 4096.
RANDOM_M_CLASSES = (("M 1-64", 1, 64, 14), ("M 65-256", 65, 256, 12),
                    ("M 257-2048", 257, 2048, 16), ("M 2049-8192", 2049, 8192, 10))
RANDOM_DIMS = (768, 1024, 1536, 2048, 2560, 3072, 4096, 5120, 6144, 7168, 8192, 11008, 12288,
               14336, 16384, 28672)
RANDOM_ODD_DIMS = (1000, 1400, 3000, 3080, 5000, 6000, 6600, 10000)


def random_shapes(count: int, seed: int) -> list[tuple[int, int, int]]:
    """About `count` shapes drawn with `seed` over RANDOM_M_CLASSES (each class's share of
    count, rounded); the same count and seed give the same shapes."""
    rng = random.Random(seed)
    total = sum(weight for *_, weight in RANDOM_M_CLASSES)
    shapes = []
    for _, lo, hi, weight in RANDOM_M_CLASSES:
        for i in range(round(count * weight / total)):
            m = rng.randint(lo, hi)
            n = rng.choice(RANDOM_ODD_DIMS if i % 4 == 3 else RANDOM_DIMS)
            k = rng.choice(RANDOM_ODD_DIMS if i % 4 == 2 else RANDOM_DIMS)
            if lo > 2048 and n * k > 16384 * 8192:
                k = 4096
            shapes.append((m, n, k))
    return shapes


def class_summary(rows, ratio) -> dict:
    """ratio(row) (ours over the peer; None where either failed) of rows with a "shape" [M, N,
    K], by RANDOM_M_CLASSES: {class: {geomean, min, max, n_shapes}}."""
    out = {}
    for name, lo, hi, _ in RANDOM_M_CLASSES:
        ratios = [x for r in rows if lo <= r["shape"][0] <= hi and (x := ratio(r))]
        if ratios:
            out[name] = dict(geomean=geomean(ratios), min=min(ratios), max=max(ratios),
                             n_shapes=len(ratios))
    return out


def write_run_json(path: str, *, complete: bool, **fields) -> None:
    """A benchmark's JSON, rewritten after every shape or case: "complete" is false until the
    last, so a run cut short (a time limit) keeps what it timed and says so."""
    with open(path, "w") as f:
        json.dump(dict(complete=complete, **fields), f, indent=1)
