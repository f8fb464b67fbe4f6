"""An MoE training step's peak device memory and time: jax.value_and_grad of
sum(ragged_dot(lhs, rhs, sizes) * dy) for lhs and rhs, on jax_hopper.ragged_dot and on
jax.lax.ragged_dot, each in a fresh process (the peak is the process's), so one running out of
memory cannot touch the other.

    python benchmarks/bench_grouped_memory.py [--shape MxGxKxN ...] [--reps 3] [--out-dir D]
                                              [--tag T]

Per shape and implementation: the step's median time, the device's peak bytes in use
(memory_stats()["peak_bytes_in_use"]) and what the arrays themselves take (lhs, rhs, dy, both
gradients), or the error (out of memory). Uniform routing, bf16, dy float32. Writes
grouped_memory_<tag>.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys

IMPLS = ("jax_hopper", "lax")
# DeepSeek-V3's routed experts (7168 -> 2048) at 128 and 256 experts, 32768 rows.
DEFAULT_SHAPES = ("32768x128x7168x2048", "32768x256x7168x2048")

_CHILD = r"""
import json, sys, time
import jax, jax.numpy as jnp, numpy as np
import jax_hopper
m, g, k, n = {shape}
ragged = jax_hopper.ragged_dot if {impl!r} == "jax_hopper" else jax.lax.ragged_dot
sizes = jnp.asarray(np.random.default_rng(0).multinomial(m, np.ones(g) / g), jnp.int32)
k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
lhs = jax.random.normal(k1, (m, k), jnp.bfloat16)
# Drawn in bf16: a float32 draw would put 4 G K N transient bytes into the peak.
rhs = jax.random.normal(k2, (g, k, n), jnp.bfloat16) / np.sqrt(k).astype(jnp.bfloat16)
dy = jax.random.normal(k3, (m, n), jnp.float32)
step = jax.jit(jax.value_and_grad(
    lambda x, w: jnp.sum(ragged(x, w, sizes).astype(jnp.float32) * dy), (0, 1)))
arrays = lhs.nbytes + 2 * rhs.nbytes + dy.nbytes + lhs.nbytes
# The backend too: a child whose GPU plugin failed to start runs on the CPU, and says so.
out = dict(arrays_bytes=int(arrays), backend=jax.default_backend())
try:
    jax.block_until_ready(step(lhs, rhs))
    times = []
    for _ in range({reps}):
        t = time.perf_counter(); jax.block_until_ready(step(lhs, rhs))
        times.append(time.perf_counter() - t)
    out.update(ms=1e3 * float(np.median(times)))
except Exception as e:
    out.update(error=f"{{type(e).__name__}}: {{str(e).splitlines()[0][:200]}}")
out["peak_bytes"] = int((jax.devices()[0].memory_stats() or {{}}).get("peak_bytes_in_use", -1))
print("RESULT", json.dumps(out))
"""


# Each child allocates on demand (its peak is then what it used) from the whole card: with
# preallocation off, JAX's BFC allocator otherwise keeps its default limit of 75% of the
# device's memory (JAX's "GPU memory allocation" page), so a peer that needs 61-80 GB of an
# 80 GB H100 would be reported out of memory. The 2026-11-23 run had that 75% limit.
# jax 0.11 refuses XLA_PYTHON_CLIENT_MEM_FRACTION next to XLA_CLIENT_MEM_FRACTION (deprecated
# name), so run_one drops an inherited one.
CHILD_ENV = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "XLA_CLIENT_MEM_FRACTION": "0.95",
             "TF_CPP_MIN_LOG_LEVEL": "3"}


def run_one(shape: tuple, impl: str, reps: int, timeout: float) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "XLA_PYTHON_CLIENT_MEM_FRACTION"}
    env.update(CHILD_ENV)
    try:
        proc = subprocess.run([sys.executable, "-c", _CHILD.format(shape=shape, impl=impl,
                                                                    reps=reps)],
                              env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict(error=f"no result within {timeout:.0f} s")
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return dict(error=f"process exited {proc.returncode}: {proc.stderr.strip()[-300:]}")


# The parent imports neither jax_hopper nor bench_grouped (whose parse_case this repeats):
# importing jax_hopper starts the GPU backend, and its preallocation would starve the children.
def parse_shape(text: str) -> tuple:
    dims = tuple(int(d) for d in text.lower().split("x"))
    if len(dims) != 4 or min(dims) <= 0:
        raise argparse.ArgumentTypeError(f"shape {text!r}: want MxGxKxN")
    return dims


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", nargs="+", type=parse_shape,
                        default=[parse_shape(s) for s in DEFAULT_SHAPES])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300, help="seconds per process")
    parser.add_argument("--out-dir", default=".")
    parser.add_argument("--tag", default=datetime.date.today().strftime("%Y%m%d"))
    args = parser.parse_args(argv)
    rows = []
    print(f"{'shape (M x G x K x N)':24} {'impl':>10} {'backend':>7} {'step ms':>9} "
          f"{'peak GB':>8} {'arrays GB':>9}  error")
    for shape in args.shape:
        for impl in IMPLS:
            r = dict(shape=list(shape), impl=impl, **run_one(shape, impl, args.reps, args.timeout))
            rows.append(r)
            print(f"{'x'.join(map(str, shape)):24} {impl:>10} {r.get('backend', '?'):>7} "
                  f"{r.get('ms', float('nan')):9.2f} "
                  f"{r.get('peak_bytes', -1) / 1e9:8.2f} {r.get('arrays_bytes', 0) / 1e9:9.2f}  "
                  f"{r.get('error', '')[:90]}", flush=True)
    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, f"grouped_memory_{args.tag}.json")
    with open(path, "w") as f:
        json.dump(dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(),
                       argv=sys.argv[1:], rows=rows), f, indent=1)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
