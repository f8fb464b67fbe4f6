"""quantize_fp8 against the same quantization written in jnp, side by side in one process.

    python benchmarks/bench_quantize.py [--shapes RxC ...] [--modes MODE ...] [--reps 7]
                                        [--out-dir DIR] [--tag TAG]

Inputs: bf16 (rows, cols), random normal; float8_e4m3fn out. Modes (quantize_fp8's arguments):
    tensor           scaling="tensor"
    tensor+T         scaling="tensor", transpose=True
    row              scaling="block", block="row"                      (1 x 128 scales)
    row+T:row        ... block="row", transpose=True, transpose_block="row"
    row+T:tile       ... block="row", transpose=True, transpose_block="tile"
    tile+T           scaling="block", block="tile", transpose=True    (128 x 128 scales)
Variants:
    hopper           jax_hopper.quantize_fp8 (per tensor, its amax is an XLA reduction before
                     the kernel: x is read twice)
    jnp              the same in plain jnp under jit: amax per block (jnp.max of jnp.abs),
                     scale = amax / 448, x / scale clipped to +-448, astype; the transposed copy
                     the same of jnp.swapaxes(x) with its own blocks
    jnp_tq           where the transposed copy's blocks are q's transposed (tensor+T, tile+T): q
                     and its scales copied with jnp.swapaxes instead (1 byte read, not 2)
The peer is the faster jnp spelling. Bytes moved = the input (2 per element) + 1 per element per
fp8 copy + the scales, the least any implementation reads and writes; GB/s = bytes / time, and %
of 3.0 TB/s, the H100's HBM rate our docs use as the floor (a two-pass per-tensor quantization
reads x twice, so it tops out at 60-67% of it). Rotating input sets larger than L2, medians of
interleaved runs (jax_hopper.timing). Check: each variant's copies, dequantised, against the jnp
variant's (relative Frobenius, 1e-2). Not bit for bit: quantize_fp8 multiplies by 448 * (1 / amax)
where jnp divides by amax / 448, and bf16 data often lands on a midpoint between fp8 values, so
~0.1% of the q differ by one fp8 step (an error of ~3e-3); a scale 5% off gives 5e-2. Writes
quantize_<tag>.json; exit status 1 when a variant is wrong or fails. Without the kernels (CPU)
quantize_fp8 runs its jnp reference: the run checks the plumbing, its times mean nothing and no
ratio is shown.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import sys

import jax
import jax.numpy as jnp

import timing

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import jax_hopper  # noqa: E402
from jax_hopper import dequantize_fp8  # noqa: E402
from jax_hopper.kernels import catalog  # noqa: E402
from jax_hopper.quantize.fp8 import kernel_runs  # noqa: E402

# (rows, cols): a square activation, DeepSeek-V3's hidden size, a long token batch, and Llama-3
# 8B's MLP input (d_ff 14336).
SHAPES = ((8192, 8192), (4096, 7168), (16384, 4096), (4096, 14336))
# The H100's HBM rate that our floors use (docs/benchmarks.md, bench_fp8.py, bench_grouped.py):
# 3.0 TB/s (the spec sheet says 3.35).
HBM = 3.0e12
ERR_LIMIT = 1e-2
E4M3, BF16, F32 = jnp.float8_e4m3fn, jnp.bfloat16, jnp.float32
FP8_MAX = catalog.FP8_MAX["float8_e4m3fn"]
BLOCK = catalog.FP8_SCALE_BLOCK

MODES = {
    "tensor": dict(scaling="tensor"),
    "tensor+T": dict(scaling="tensor", transpose=True),
    "row": dict(scaling="block", block="row"),
    "row+T:row": dict(scaling="block", block="row", transpose=True, transpose_block="row"),
    "row+T:tile": dict(scaling="block", block="row", transpose=True, transpose_block="tile"),
    "tile+T": dict(scaling="block", block="tile", transpose=True),
}


def copy_modes(kwargs) -> tuple[str, str | None]:
    """(q's scaling, q_t's or None): "tensor", "row" or "tile" (quantize_fp8's docstring)."""
    if kwargs["scaling"] == "tensor":
        mode = "tensor"
    else:
        mode = kwargs["block"]
    if not kwargs.get("transpose"):
        return mode, None
    return mode, kwargs.get("transpose_block", mode) if mode != "tensor" else "tensor"


def scale_bytes(mode, r, c) -> int:
    """Bytes of one copy's float32 scales."""
    return 4 * {"tensor": 1, "row": r * -(-c // BLOCK),
                "tile": -(-r // BLOCK) * -(-c // BLOCK)}[mode]


def traffic_bytes(r, c, mode, t_mode) -> int:
    """Input read once (bf16), every fp8 copy and its scales written once."""
    moved = 2 * r * c + r * c + scale_bytes(mode, r, c)
    return moved + (r * c + scale_bytes(t_mode, c, r) if t_mode else 0)


def parse_rc(text: str) -> tuple[int, int]:
    """'RxC' (rows x cols), or one number for a square."""
    try:
        dims = [int(d) for d in text.lower().split("x")]
    except ValueError:
        dims = []
    dims = dims * 2 if len(dims) == 1 else dims
    if len(dims) != 2 or min(dims) <= 0:
        raise argparse.ArgumentTypeError(f"shape {text!r}: want RxC or N")
    return tuple(dims)


def jnp_quantize(x, mode):
    """x (R, C) -> (q, scale) as a user writes it in jnp: the amax of each block (the whole
    array, 1 x 128, or 128 x 128; ragged edges padded with zeros), scale = amax / 448, x / scale
    clipped to the fp8 range (a bare astype would turn overflow into NaN), rounded. The scales
    have quantize_fp8's shapes."""
    r, c = x.shape
    x32 = x.astype(F32)
    if mode == "tensor":
        amax = jnp.max(jnp.abs(x32))
        scale = jnp.where(amax > 0, amax / FP8_MAX, 1.0)
        return jnp.clip(x32 / scale, -FP8_MAX, FP8_MAX).astype(E4M3), scale
    rows = 1 if mode == "row" else BLOCK
    rb, cb = -(-r // rows), -(-c // BLOCK)
    xp = jnp.pad(x32, ((0, rb * rows - r), (0, cb * BLOCK - c))).reshape(rb, rows, cb, BLOCK)
    amax = jnp.max(jnp.abs(xp), axis=(1, 3))
    scale = jnp.where(amax > 0, amax / FP8_MAX, 1.0)
    q = jnp.clip(xp / scale[:, None, :, None], -FP8_MAX, FP8_MAX)
    return q.reshape(rb * rows, cb * BLOCK)[:r, :c].astype(E4M3), scale


def variants(kwargs, package=jax_hopper) -> dict:
    """name -> f(x, _) -> (q, scale[, q_t, scale_t]) for one mode (the module docstring); the
    "hopper" variant is `package`'s quantize_fp8 (benchmarks/bench_ab.py passes another build).
    The unused second argument: timing.chained calls f with a pair."""
    mode, t_mode = copy_modes(kwargs)

    def hopper(x, _):
        out = package.quantize_fp8(x, dtype=E4M3, **kwargs)
        return tuple(out) if t_mode else tuple(out[:2])

    def jnp_peer(x, _):
        out = jnp_quantize(x, mode)
        return out + jnp_quantize(jnp.swapaxes(x, 0, 1), t_mode) if t_mode else out

    def jnp_tq(x, _):
        q, s = jnp_quantize(x, mode)
        return q, s, jnp.swapaxes(q, 0, 1), s if mode == "tensor" else jnp.swapaxes(s, 0, 1)

    out = {"hopper": hopper, "jnp": jnp_peer}
    if t_mode == mode and mode in ("tensor", "tile"):
        out["jnp_tq"] = jnp_tq
    return out


PEERS = ("jnp", "jnp_tq")


@functools.partial(jax.jit, static_argnums=(1, 2))
def _draw(key, r, c):
    return jax.random.normal(key, (r, c), F32).astype(BF16)


@functools.partial(jax.jit, static_argnums=(2, 3))
def copy_errors(out, ref, mode, t_mode):
    """Relative Frobenius errors of out's dequantised copies against ref's (float32)."""
    blocks = [mode] + ([t_mode] if t_mode else [])
    errs = []
    for i, block in enumerate(blocks):
        got = dequantize_fp8(out[2 * i], out[2 * i + 1], block=block)
        want = dequantize_fp8(ref[2 * i], ref[2 * i + 1], block=block)
        errs.append(timing.rel_fro_error(got, want))
    return jnp.stack(errs)


def call_plan(r, c, out_bytes):
    """(calls per timed run, input sets) as timing.call_plan, for a memory-bound pass: ~30 ms
    of calls at 2.5 TB/s on a GPU (every output kept until the run ends, so their total is
    capped too), 3 on a CPU; sets of 2 R C bytes until they exceed 200 MB (four L2s)."""
    est_s = (2 * r * c + out_bytes) / 2.5e12
    n_calls = timing.calls_for(est_s, out_bytes) if jax.default_backend() == "gpu" else 3
    return n_calls, min(n_calls, timing.n_sets_for(2 * r * c))


def case(key, r, c, name):
    """The inputs of mode `name` on (r, c): (pairs, the timed run's calls through rotating input
    sets; bytes moved per call; (q's, q_t's) scaling; input sets; calls per run)."""
    copies = copy_modes(MODES[name])
    moved = traffic_bytes(r, c, *copies)
    n_calls, n_sets = call_plan(r, c, moved - 2 * r * c)
    sets = [(_draw(k, r, c), None) for k in jax.random.split(key, n_sets)]
    jax.block_until_ready(sets)
    return timing.rotation(sets, n_calls), moved, copies, n_sets, n_calls


def bench(key, r, c, name, reps, kernels):
    pairs, moved, (mode, t_mode), n_sets, n_calls = case(key, r, c, name)
    fns = variants(MODES[name])
    timed = timing.time_interleaved({v: (timing.chained(f), pairs) for v, f in fns.items()}, reps)
    if isinstance(timed["jnp"], Exception):
        raise timed["jnp"]  # the reference every other variant is checked against
    ref = timed["jnp"]["out"]
    rows = {}
    for v, t in timed.items():
        if isinstance(t, Exception):
            rows[v] = dict(error=f"{type(t).__name__}: {str(t)[:200]}")
            continue
        errs = [float(e) for e in copy_errors(t["out"], ref, mode, t_mode)]
        s = t["median_s"]
        rows[v] = dict(us=s * 1e6, gbs=moved / s / 1e9, hbm_pct=100 * moved / s / HBM,
                       times_us=[x * 1e6 for x in t["times_s"]], rel_err=max(errs),
                       wrong=not all(e <= ERR_LIMIT for e in errs))  # NaN is wrong
    ok = {v: x for v, x in rows.items() if "us" in x and not x["wrong"]}
    peer = min((v for v in PEERS if v in ok), key=lambda v: ok[v]["us"], default=None)
    row = dict(shape=[r, c], mode=name, copies=[mode] + ([t_mode] if t_mode else []),
               bytes=moved, n_sets=n_sets, n_calls=n_calls,
               kernel=kernels and kernel_runs((1, r, c)),
               variants=rows, peer_best=peer)
    # Where the kernel does not run (no kernels, or a shape it does not take) both sides are
    # XLA: no ratio to report.
    if row["kernel"] and peer and "hopper" in ok:
        row["peer_over_hopper"] = ok[peer]["us"] / ok["hopper"]["us"]
    return row


def fmt(row, v, field, spec):
    x = row["variants"].get(v, {}).get(field) if v else None
    return format(x, spec) if x is not None else format("-", f">{spec.split('.')[0]}")


def print_table(results, kernels):
    """One line per shape and mode; "reference" where the kernels exist but the shape is not
    one the kernel takes (TMA alignment), so quantize_fp8 ran its jnp reference."""
    print(f"\n{'R x C':>12s} {'mode':>11s} {'MB':>7s} | {'hopper us':>9s} {'GB/s':>6s} "
          f"{'%HBM':>5s} | {'peer':>6s} {'us':>9s} {'GB/s':>6s} {'%HBM':>5s} | "
          f"{'peer/hop':>8s} {'err':>8s}")
    for row in results:
        p = row["peer_best"]
        ratio = row.get("peer_over_hopper")
        r, c = row["shape"]
        err = row["variants"]["hopper"].get("rel_err")
        flag = "  WRONG" if row["variants"]["hopper"].get("wrong") else ""
        flag += "  reference" if kernels and not row["kernel"] else ""
        print(f"{f'{r}x{c}':>12s} {row['mode']:>11s} {row['bytes'] / 1e6:7.1f} | "
              f"{fmt(row, 'hopper', 'us', '9.1f')} {fmt(row, 'hopper', 'gbs', '6.0f')} "
              f"{fmt(row, 'hopper', 'hbm_pct', '5.0f')} | {p or '-':>6s} "
              f"{fmt(row, p, 'us', '9.1f')} {fmt(row, p, 'gbs', '6.0f')} "
              f"{fmt(row, p, 'hbm_pct', '5.0f')} | "
              + (f"{ratio:7.2f}x" if ratio is not None else f"{'-':>8s}")
              + (f" {err:8.1e}" if err is not None else f" {'-':>8s}") + flag)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    timing.add_output_args(parser)
    parser.add_argument("--shapes", nargs="*", type=parse_rc, default=list(SHAPES),
                        help="RxC (rows x cols) of the bf16 input")
    parser.add_argument("--modes", nargs="*", choices=list(MODES), default=list(MODES))
    args = parser.parse_args(argv)
    if jax.default_backend() == "gpu":
        timing.require_kernels(jax_hopper)  # a GPU without them would time the jnp reference
    kernels = bool(jax_hopper.kernels_available())
    print(f"{jax.devices()[0].device_kind}, jax {jax.__version__}, bf16 -> e4m3, "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC", flush=True)
    if not kernels:
        print("no Hopper kernels: quantize_fp8 runs its jnp reference, so this times XLA "
              "against XLA (no ratio shown, times meaningless; the check still holds)")
    key = jax.random.key(0)
    results = []
    for i, (r, c) in enumerate(args.shapes):
        for j, name in enumerate(args.modes):
            row = bench(jax.random.fold_in(key, i * len(MODES) + j), r, c, name, args.reps,
                        kernels)
            results.append(row)
            v = row["variants"]
            print(f"{r}x{c} {name}: {row['n_sets']} sets, {row['n_calls']} calls per run; " +
                  ", ".join(f"{n} {x['us']:.1f} us" if "us" in x else f"{n} {x['error']}"
                            for n, x in v.items())
                  + ("" if row["kernel"] or not kernels else "  (reference: shape not aligned)"),
                  flush=True)
    print_table(results, kernels)
    env = dict(device=jax.devices()[0].device_kind, jax=jax.__version__, kernels=kernels,
               date=datetime.datetime.now(datetime.timezone.utc).isoformat(),
               argv=sys.argv[1:] if argv is None else argv, hbm_bytes_per_s=HBM)
    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, f"quantize_{args.tag}.json")
    with open(path, "w") as f:
        json.dump(dict(environment=env, results=results), f, indent=1)
    print(f"wrote {path}")
    wrong = [(r["shape"], r["mode"], n) for r in results for n, v in r["variants"].items()
             if v.get("wrong") or "error" in v]
    for shape, mode, name in wrong:
        print(f"WRONG RESULT OR ERROR: {name} at {shape} {mode}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
