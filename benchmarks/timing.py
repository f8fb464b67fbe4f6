"""The benchmarks' timing: jax_hopper.timing (shared with `python -m jax_hopper.tune`), and the
check that the kernels, not their XLA reference, are what gets timed."""

from __future__ import annotations

import os
import sys

# An installed jax_hopper first; the source tree (pure Python) where none is installed.
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import argparse  # noqa: E402
import datetime  # noqa: E402

from jax_hopper.timing import (call_plan, calls_for, chained, geomean,  # noqa: E402
                               n_sets_for, parse_shape, rel_fro_error, rotating_sets, rotation,
                               tflops, time_chained, time_interleaved)

__all__ = ["add_output_args", "call_plan", "calls_for", "chained", "dims_parser", "geomean",
           "n_sets_for", "parse_shape", "rel_fro_error", "require_kernels", "rotating_sets",
           "rotation", "tflops", "time_chained", "time_interleaved"]


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


def add_output_args(parser, reps: int = 7) -> None:
    """--out-dir (default benchmarks/results), --tag (default today) and --reps (timed runs
    per variant, median): the options of every benchmark that writes one results file."""
    parser.add_argument("--out-dir", default=os.path.join(os.path.dirname(__file__), "results"))
    parser.add_argument("--tag", default=datetime.date.today().strftime("%Y%m%d"))
    parser.add_argument("--reps", type=int, default=reps)


def require_kernels(*modules) -> None:
    """Exits unless each jax_hopper build in `modules` runs its kernels on this machine: without
    them every op lowers to its XLA reference, and a table of it would pass for the kernels."""
    for mod in modules:
        # (hopper_devices and register_targets: a baseline build may predate kernels_available)
        if not (mod._ffi.hopper_devices() and mod._ffi.register_targets()):
            sys.exit(f"{mod.__name__}: no Hopper GPU, or the extension is not built; "
                     "refusing to time the XLA reference as the kernels")
