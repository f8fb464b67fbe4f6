"""hopper_ragged_dot (the grouped GEMM of MoE layers) against jax.lax.ragged_dot, Pallas Mosaic
GPU's ragged_dot and a dense hopper_matmul of the same FLOPs, timed interleaved in one process.

    python benchmarks/bench_grouped.py [--cases mixtral_up ...] [--shape MxGxKxN]
                                       [--routing uniform skewed] [--sweep] [--pallas]
                                       [--train] [--fp8] [--reps 7] [--out-dir D] [--tag T]

Cases (rows M sorted by expert, G experts, K -> N per expert, bf16 in and out): the issue's
Mixtral-8x7B up and down, DeepSeek-V3 routed-expert up and down, two decodes, and two models
of many small experts no issue lists (Qwen3-30B-A3B and gpt-oss-120b, up and down). Routing:
"uniform" draws each row's expert uniformly, "skewed" from Dirichlet(0.3) expert weights (a few
experts take most rows); the sizes are drawn once per case (seeded) and passed as a device
array. TFLOP/s count useful work (2 M N K); the floor is max(FLOPs at 989 TFLOP/s, bytes of lhs,
the weights of every expert that has rows and the output at 3.0 TB/s), H100 SXM. Every variant's
output is checked against the float32 product of its operands (references(); relative
Frobenius error, "err"; above ERR_LIMIT it is marked wrong and never the best Pallas config).
The tile table hopper builds before each launch is timed with it (on the GPU by
scripts/ncu_tile_table.py: a few us, below what a host clock resolves). --shape adds a case of
your own. With --sweep, every compiled grouped tile in every cluster shape it runs (2-CTA along
N or M) is timed too ("hopper" is the default config). With --pallas, Pallas Mosaic GPU's
ragged_dot in PALLAS_CONFIGS (block_m x block_n x pipeline steps x grid_block_n, 36 configs as
the issue swept them; the best is reported). With
--train, the training step's products (jax.grad of sum(out * dy) with respect to lhs and rhs:
forward, d lhs and d rhs, three times the forward's FLOPs and floor) for XLA and hopper, with
the bytes of temporaries each compiled step allocates beyond its inputs and outputs (XLA's
memory analysis), and the weight gradient alone (d rhs: XLA's transpose of jax.lax.ragged_dot
against hopper_ragged_contract; with --sweep every compiled contraction tile and cluster too);
with --fp8 too, the same step on fp8_ragged_dot (recipes "tensor" and "block": all three
products in fp8, per tensor or with block scales), whose TFLOP/s and floor are counted as the
bf16 step's, and the fp8 weight gradient alone (hopper_ragged_fp8_contract on e4m3 x^T and e5m2
dy^T copies made once, the fp8 floor; with --sweep every compiled fp8 contraction tile and
cluster too).
With --fp8, hopper_ragged_fp8_dot on e4m3 copies of the operands (rhs stored (G, N, K), one
scale per expert) against jax.lax.ragged_dot on the same fp8 operands (rhs (G, K, N)), both
with bf16 out; and with block scales (per row and 128 of K, per expert's 128 x 128 block)
against the operands dequantised to bf16 and lax.ragged_dot on them (the recipe written in
JAX). Their floor is the fp8 one (1979 TFLOP/s, one byte per operand element).
A timed sample is three runs back to back (timing.time_interleaved), except for the training
steps and weight gradients: one run each (their gradients, and XLA's temporaries, would be
held three times over; since 2026-11-27, when DeepSeek up's --train --fp8 ran out of memory).
Writes grouped_<tag>.json.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

import timing

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import jax_hopper  # noqa: E402
from jax_hopper.kernels import catalog  # noqa: E402

# name: (rows M, experts G, K, N)
CASES = {
    "mixtral_up": (16384, 8, 4096, 14336),
    "mixtral_down": (16384, 8, 14336, 4096),
    "deepseek_up": (32768, 32, 7168, 4096),
    "deepseek_down": (32768, 32, 2048, 7168),
    "decode_1024x32": (1024, 32, 7168, 4096),
    "decode_256x64": (256, 64, 7168, 4096),
    # Many small experts: Qwen3-30B-A3B (4096 tokens, top-8 of 128 experts, 2048 -> 2 x 768
    # gated, 768 -> 2048; 256 rows per expert, down's K only 12 k-blocks) and gpt-oss-120b
    # (4096 tokens, top-4 of 128, 2880 -> 2 x 2880, 2880 -> 2880: N not whole 256-column tiles).
    "qwen3_up": (32768, 128, 2048, 1536),
    "qwen3_down": (32768, 128, 768, 2048),
    "gptoss_up": (16384, 128, 2880, 5760),
    "gptoss_down": (16384, 128, 2880, 2880),
}
PEAK_FLOPS, HBM_BYTES_PER_S = 989e12, 3.0e12
# The largest relative Frobenius error against the float32 product of a variant's operands
# (bf16 outputs: ~2e-3); a variant above it is marked wrong and never the best Pallas config.
ERR_LIMIT = 1e-2
FP8_PEAK_FLOPS = 1979e12
# Pallas ragged_dot configs (block_k 64): block_m, block_n, max_concurrent_steps, grid_block_n.
PALLAS_CONFIGS = [(bm, bn, steps, gbn) for bm in (64, 128) for bn in (128, 192, 256)
                  for steps in (2, 3, 4) for gbn in (1, 4)]


def group_sizes(rng, m: int, groups: int, routing: str) -> np.ndarray:
    probs = (np.ones(groups) / groups if routing == "uniform"
             else rng.dirichlet(np.full(groups, 0.3)))
    return rng.multinomial(m, probs).astype(np.int32)


def floor_s(m: int, active: int, k: int, n: int, fp8: bool = False) -> float:
    """The roofline floor with `active` experts' weights read (those with rows); fp8: one-byte
    operands on the fp8 tensor cores (a bf16 output)."""
    flops = 2.0 * m * n * k
    operand_bytes = 1.0 if fp8 else 2.0
    bytes_ = operand_bytes * (m * k + active * k * n) + 2.0 * m * n
    return max(flops / (FP8_PEAK_FLOPS if fp8 else PEAK_FLOPS), bytes_ / HBM_BYTES_PER_S)


def family_configs(family: str, prefix: str = "") -> dict:
    """name -> GemmConfig: every compiled tile of `family` in every cluster shape it runs."""
    fam = catalog.FAMILIES[family]
    return {f"{prefix}{t.tag}_c{cm}x{cn}": jax_hopper.GemmConfig.for_tile(
        t, stream_k=False, cluster_m=cm, cluster_n=cn)
        for t in fam.tiles for cm, cn in fam.clusters}


def sweep_configs() -> dict:
    """The grouped GEMM's sweep: every compiled grouped tile and cluster."""
    return family_configs("grouped")


def contraction_configs() -> dict:
    """The weight gradient's sweep: every compiled grouped_contraction tile and cluster."""
    return family_configs("grouped_contraction", "wgrad_")


def fp8_contraction_configs() -> dict:
    """The fp8 weight gradient's sweep: every compiled grouped_contraction_fp8 tile and
    cluster."""
    return family_configs("grouped_contraction_fp8", "fp8_wgrad_")


def operand_sets(key, m: int, groups: int, k: int, n: int, sizes, n_sets: int = 2) -> list:
    """n_sets of ((lhs (M, K), sizes), rhs (G, K, N)), bf16 random-normal, rhs scaled by
    1/sqrt(K). Two sets: every expert's weights are far larger than L2 in every case."""
    sets = []
    for kk in jax.random.split(key, n_sets):
        k1, k2 = jax.random.split(kk)
        lhs = jax.random.normal(k1, (m, k), jnp.float32).astype(jnp.bfloat16)
        rhs = (jax.random.normal(k2, (groups, k, n), jnp.float32) / np.sqrt(k)
               ).astype(jnp.bfloat16)
        sets.append(((lhs, jnp.asarray(sizes)), rhs))
    return sets


def pallas_variants() -> tuple[dict, str | None]:
    """name -> f(a, rhs) for every PALLAS_CONFIGS entry, or ({}, why Pallas cannot run here)."""
    if jax.default_backend() != "gpu":
        return {}, "Pallas Mosaic GPU needs a GPU"
    try:
        from jax.experimental.pallas.ops.gpu import ragged_dot_mgpu  # noqa: PLC0415
    except ImportError as e:
        return {}, f"ragged_dot_mgpu unusable: {e!r}"

    def variant(bm, bn, steps, gbn):
        return lambda a, r: ragged_dot_mgpu.ragged_dot(
            a[0], r, group_sizes=a[1], block_m=bm, block_n=bn, block_k=64,
            max_concurrent_steps=steps, grid_block_n=gbn)
    return {f"pallas_{bm}x{bn}_s{steps}_g{gbn}": variant(bm, bn, steps, gbn)
            for bm, bn, steps, gbn in PALLAS_CONFIGS}, None


def wgrad_xla(a, rhs):
    """d rhs of sum(ragged_dot(lhs, rhs) * dy) through XLA (jax.lax.ragged_dot's transpose)."""
    lhs, sizes, dy = a
    return jax.vjp(lambda w: jax.lax.ragged_dot(lhs, w, sizes), rhs)[1](dy.astype(rhs.dtype))[0]


def wgrad_hopper(a, rhs, config=None):
    """The same on the grouped contraction kernel: lhs_g^T dy_g."""
    lhs, sizes, dy = a
    return jax_hopper.hopper_ragged_contract(lhs, dy.astype(rhs.dtype), sizes, config=config)


def wgrad_hopper_fp8(a, rhs, config=None):
    """The weight gradient on fp8 transposed copies (fp8_ragged_dot's per-tensor d rhs): x^T
    e4m3 and dy^T e5m2, unit scales, bf16 out."""
    del rhs
    xt, sizes, dyt = a
    return jax_hopper.hopper_ragged_fp8_contract(xt, dyt, sizes, 1.0, 1.0, config=config)


def train_step(ragged):
    """(a, rhs) -> (loss, (d lhs, d rhs)) of loss = sum(ragged(lhs, rhs, sizes) * dy), a =
    (lhs, sizes, dy): the forward and both backward products (the loss is returned, so the
    forward is not dropped as dead code)."""
    def step(a, rhs):
        lhs, sizes, dy = a
        return jax.value_and_grad(
            lambda x, w: jnp.sum(ragged(x, w, sizes).astype(jnp.float32) * dy), (0, 1))(lhs, rhs)
    return step


def _window(sizes) -> int:
    """The row window of the per-group references: the largest group (at least 1 row)."""
    return max(1, int(np.max(np.asarray(sizes))))


def ragged_groups(x, w, sizes):
    """(M, N) float32: rows of group g times w[g] (G, K, N), rows past every group zero, one
    group at a time over fixed-size row windows masked to the group, so that no temporary is
    larger than one group's window (XLA's ragged_dot pads; its transpose took 30 GB of
    temporaries at DeepSeek up's size)."""
    return _ragged_groups(x, w, jnp.asarray(sizes), _window(sizes))


def contract_groups(x, y, sizes):
    """(G, K, N) float32: x_g^T y_g for the consecutive row groups of x (M, K) and y (M, N),
    group by group as ragged_groups."""
    return _contract_groups(x, y, jnp.asarray(sizes), _window(sizes))


def _group_windows(sizes, window, *arrays):
    """Offsets of the groups, and each array as float32 padded with `window` zero rows."""
    sizes = jnp.maximum(sizes, 0)
    return (jnp.cumsum(sizes) - sizes, sizes,
            [jnp.pad(a.astype(jnp.float32), ((0, window), (0, 0))) for a in arrays])


@functools.partial(jax.jit, static_argnums=3)
def _ragged_groups(x, w, sizes, window):
    offsets, sizes, (xp,) = _group_windows(sizes, window, x)

    def add_group(g, out):
        keep = (jnp.arange(window) < sizes[g])[:, None]
        xs = jax.lax.dynamic_slice_in_dim(xp, offsets[g], window) * keep
        part = jnp.dot(xs, w[g].astype(jnp.float32))
        rows = jax.lax.dynamic_slice_in_dim(out, offsets[g], window)
        return jax.lax.dynamic_update_slice_in_dim(out, rows + part, offsets[g], 0)
    out = jnp.zeros((xp.shape[0], w.shape[2]), jnp.float32)
    out = jax.lax.fori_loop(0, sizes.shape[0], add_group, out)
    return out[:x.shape[0]]


@functools.partial(jax.jit, static_argnums=3)
def _contract_groups(x, y, sizes, window):
    offsets, sizes, (xp, yp) = _group_windows(sizes, window, x, y)

    def one(g):
        keep = (jnp.arange(window) < sizes[g])[:, None]
        xs = jax.lax.dynamic_slice_in_dim(xp, offsets[g], window) * keep
        ys = jax.lax.dynamic_slice_in_dim(yp, offsets[g], window)
        return jnp.dot(xs.T, ys)
    return jax.lax.map(one, jnp.arange(sizes.shape[0]))


def references(sets, dense_sets, train_sets, f8, f8_wgrad_sets) -> dict:
    """kind -> f() computing the float32 product that kind of variant is checked against, on
    the operand set its last call reads (set 0): "fwd" (every bf16 ragged_dot: XLA's, ours,
    the sweep's, Pallas's), "dense", "train" (d lhs and d rhs; the weight gradients are
    checked against its d rhs), "fp8" and "fp8_block" (the products of the fp8 operands as
    given, and dequantised by their block scales), "fp8_wgrad" (the contraction of the fp8
    copies x^T and dy^T). Every product group by group in float32 at the default precision,
    TF32 products on an H100 (up to 494 TFLOP/s against full float32's 67): they err by under
    1e-3 relative, which adds little to the bf16 outputs' ~2e-3 against ERR_LIMIT's 1e-2."""
    f32 = jnp.float32

    def fwd():
        (lhs, sizes), rhs = sets[0]
        return ragged_groups(lhs, rhs, sizes)

    def train():
        (lhs, sizes, dy), rhs = train_sets[0]
        return (ragged_groups(dy, jnp.swapaxes(rhs, 1, 2), sizes),
                contract_groups(lhs, dy, sizes))

    def fp8():
        (lhs, sizes, _), (_, w, scales, _) = f8[0]
        return ragged_groups(lhs, w, sizes) * scales[0]

    def fp8_block():
        (lhs, sizes, lhs_blocks), (w, _, _, w_blocks) = f8[0]
        return ragged_groups(_dequantized(lhs, lhs_blocks, (1,), f32),
                             jnp.swapaxes(_dequantized(w, w_blocks, (1, 2), f32), 1, 2), sizes)

    def fp8_wgrad():
        (xt, sizes, dyt), _ = f8_wgrad_sets[0]
        return contract_groups(xt.T, dyt.T, sizes)

    def dense():
        return jnp.dot(*dense_sets[0], preferred_element_type=f32)

    return dict(fwd=fwd, dense=dense, train=train, fp8=fp8, fp8_block=fp8_block,
                fp8_wgrad=fp8_wgrad)


def rel_error(out, ref) -> float:
    """timing.rel_fro_error, the largest over the arrays of a tuple."""
    if isinstance(ref, tuple):
        return max(rel_error(o, r) for o, r in zip(out, ref))
    return float(timing.rel_fro_error(out, ref))


def temp_bytes(f, a, rhs) -> int | None:
    """Bytes of temporaries XLA allocates for one call of f beyond its inputs and outputs."""
    try:
        return int(jax.jit(f).lower(a, rhs).compile().memory_analysis().temp_size_in_bytes)
    except Exception:  # noqa: BLE001 (not every backend reports it)
        return None


def fp8_sets(sets, k: int) -> list:
    """e4m3 copies of operand_sets' operands: ((lhs, sizes, lhs block scales), (rhs (G, N, K),
    rhs (G, K, N), per-expert scales, rhs block scales)); rhs quantized as rhs * sqrt(K)
    (values near 1) with scale 1/sqrt(K), the same value in each of its blocks' scales (the
    kernels' time does not depend on the values)."""
    e4m3, blk = jnp.float8_e4m3fn, catalog.FP8_SCALE_BLOCK
    out = []
    for (lhs, sizes), rhs in sets:
        (groups, k_, n), m = rhs.shape, lhs.shape[0]
        w8 = (rhs.astype(jnp.float32) * np.sqrt(k)).astype(e4m3)
        scales = jnp.full((groups,), 1 / np.sqrt(k), jnp.float32)
        lhs_blocks = jnp.ones((m, -(-k_ // blk)), jnp.float32)
        rhs_blocks = jnp.full((groups, -(-n // blk), -(-k_ // blk)), 1 / np.sqrt(k), jnp.float32)
        out.append(((lhs.astype(e4m3), sizes, lhs_blocks),
                    (jnp.swapaxes(w8, 1, 2), w8, scales, rhs_blocks)))
    return out


def _dequantized(x8, scales, axes, dtype=jnp.bfloat16):
    """x8 times its block scales repeated over the blocks along `axes`, in `dtype` (bfloat16:
    the dequantise-then-bf16 recipe a JAX program writes for block scales)."""
    s = scales
    for axis, extent in zip(axes, (x8.shape[a] for a in axes)):
        s = jnp.repeat(s, catalog.FP8_SCALE_BLOCK, axis=axis)[
            (slice(None),) * axis + (slice(0, extent),)]
    return (x8.astype(jnp.float32) * s).astype(dtype)


def fp8_variants() -> dict:
    """Per tensor: ours against lax.ragged_dot on the same e4m3 operands. Block scales: ours
    against the operands dequantised to bf16 and lax.ragged_dot on them."""
    one = jnp.float32(1)
    return {
        "hopper_fp8": lambda a, r: jax_hopper.hopper_ragged_fp8_dot(a[0], r[0], a[1], one, r[2]),
        "xla_fp8": lambda a, r: (jax.lax.ragged_dot(a[0], r[1], a[1],
                                                    preferred_element_type=jnp.float32)
                                 * r[2][0]).astype(jnp.bfloat16),
        "hopper_fp8_block": lambda a, r: jax_hopper.hopper_ragged_fp8_dot(a[0], r[0], a[1], a[2],
                                                                          r[3]),
        "xla_fp8_block": lambda a, r: jax.lax.ragged_dot(
            _dequantized(a[0], a[2], (1,)),
            jnp.swapaxes(_dequantized(r[0], r[3], (1, 2)), 1, 2), a[1]),
    }


def run_case(name: str, routing: str, reps: int, rng, sweep: bool, pallas: bool,
             train: bool, fp8: bool = False) -> dict:
    m, groups, k, n = CASES[name]
    sizes = group_sizes(rng, m, groups, routing)
    active = int(np.count_nonzero(sizes))
    sets = operand_sets(jax.random.key(0), m, groups, k, n, sizes)
    dense_sets = [(lhs, rhs[0]) for (lhs, _), rhs in sets]
    dy = jax.random.normal(jax.random.key(1), (m, n), jnp.float32)
    train_sets = [((lhs, s, dy), rhs) for (lhs, s), rhs in sets]
    floor = floor_s(m, active, k, n)
    # Calls per timed run: XLA's ragged_dot (2-10% of the peak) fills tens of ms with 5, and
    # so does a training step (whose (G, K, N) gradients, kept until the run ends, bound the
    # count). The forward kernels get enough to fill ~30 ms at their floor: with 5, a sample
    # of a few ms is mostly clock transients and the host's.
    calls = 5
    fwd_calls = (timing.calls_for(floor, out_bytes=2 * m * n)
                 if jax.default_backend() == "gpu" else calls)
    runs = {
        "xla": (timing.chained(lambda a, r: jax.lax.ragged_dot(a[0], r, a[1])),
                timing.rotation(sets, calls)),
        "hopper": (timing.chained(lambda a, r: jax_hopper.hopper_ragged_dot(a[0], r, a[1])),
                   timing.rotation(sets, fwd_calls)),
        # The same FLOPs as one dense GEMM (M, K) @ (K, N): the practical compute limit.
        "dense": (timing.chained(jax_hopper.hopper_matmul),
                  timing.rotation(dense_sets, fwd_calls)),
    }
    for cname, cfg in (sweep_configs() if sweep else {}).items():
        runs[cname] = (timing.chained(functools.partial(
            lambda a, r, cfg: jax_hopper.hopper_ragged_dot(a[0], r, a[1], config=cfg), cfg=cfg)),
            timing.rotation(sets, fwd_calls))
    pallas_runs, pallas_skip = pallas_variants() if pallas else ({}, None)
    runs.update({pname: (timing.chained(f), timing.rotation(sets, fwd_calls))
                 for pname, f in pallas_runs.items()})
    steps = {"xla_train": train_step(lambda x, w, s: jax.lax.ragged_dot(x, w, s)),
             "hopper_train": train_step(jax_hopper.ragged_dot)} if train else {}
    fp8_steps = {f"hopper_fp8_{recipe}_train": train_step(functools.partial(
        jax_hopper.fp8_ragged_dot, recipe=recipe)) for recipe in ("tensor", "block")
        } if train and fp8 else {}  # the step with fp8_ragged_dot
    steps.update(fp8_steps)
    runs.update({tname: (timing.chained(f), timing.rotation(train_sets, calls))
                 for tname, f in steps.items()})
    # The weight gradient alone (one product of the forward's FLOPs and bytes).
    wgrads = {"xla_wgrad": wgrad_xla, "hopper_wgrad": wgrad_hopper} if train else {}
    if train and sweep:
        wgrads.update({cname: functools.partial(wgrad_hopper, config=cfg)
                       for cname, cfg in contraction_configs().items()})
    runs.update({wname: (timing.chained(f), timing.rotation(train_sets, calls))
                 for wname, f in wgrads.items()})
    fp8_floored = set()  # the runs whose floor is the fp8 one
    fp8_wgrads, f8_wgrad_sets, f8 = {}, None, None
    if train and fp8:
        f8_wgrad_sets = [((lhs.T.astype(jnp.float8_e4m3fn), s, dy.T.astype(jnp.float8_e5m2)), r)
                         for (lhs, s, dy), r in train_sets]
        fp8_wgrads = {"hopper_fp8_wgrad": wgrad_hopper_fp8}
        if sweep:
            fp8_wgrads.update({cname: functools.partial(wgrad_hopper_fp8, config=cfg)
                               for cname, cfg in fp8_contraction_configs().items()})
        runs.update({wname: (timing.chained(f), timing.rotation(f8_wgrad_sets, calls))
                     for wname, f in fp8_wgrads.items()})
        fp8_floored.update(fp8_wgrads)
    fp8_runs = fp8_variants() if fp8 else {}
    fp8_floored.update(fp8_runs)
    if fp8:
        f8 = fp8_sets(sets, k)
        runs.update({fname: (timing.chained(f),
                             timing.rotation(f8, calls if fname.startswith("xla") else fwd_calls))
                     for fname, f in fp8_runs.items()})
    # A training step or weight gradient per sample, not three back to back: each run of five
    # already lasts tens of ms, and three in flight would hold their gigabytes of gradients
    # (and XLA's temporaries, 30 GB a call at DeepSeek up) three times over.
    single = set(steps) | set(wgrads) | set(fp8_wgrads)
    # Every variant's last output (set 0) against the float32 product of its kind, checked as
    # it is warmed up; no output is kept (at DeepSeek's size the steps' gradients alone took
    # ~10 GB, the 36 Pallas configs' outputs ~9 GB).
    refs, computed = references(sets, dense_sets, train_sets, f8, f8_wgrad_sets), {}

    def kind(impl):
        if impl in steps or impl in wgrads:
            return "train"
        if impl in fp8_wgrads:
            return "fp8_wgrad"
        if impl in fp8_runs:
            return "fp8_block" if impl.endswith("_block") else "fp8"
        return "dense" if impl == "dense" else "fwd"

    def check(impl, out):
        ref_kind = kind(impl)
        if ref_kind not in computed:
            computed[ref_kind] = refs[ref_kind]()
        ref = computed[ref_kind]
        if impl in steps:
            return rel_error(out[1], ref)     # (loss, (d lhs, d rhs)): the gradients
        if impl in wgrads:
            return rel_error(out, ref[1])     # d rhs
        return rel_error(out, ref)

    results = timing.time_interleaved(runs, reps=reps, pipelines={r: 1 for r in single},
                                      check=check)
    row = dict(case=name, routing=routing, m=m, groups=groups, active_groups=active, k=k, n=n,
               sizes_max=int(sizes.max()), sizes_min=int(sizes.min()), floor_us=floor * 1e6)
    for impl, r in results.items():
        if isinstance(r, Exception):
            row[impl] = dict(error=f"{type(r).__name__}: {str(r)[:300]}")
            continue
        # A training step is three products of the forward's FLOPs; its floor three times.
        work = 3 if impl in steps else 1
        impl_floor = floor_s(m, active, k, n, fp8=True) if impl in fp8_floored else floor
        row[impl] = dict(us=r["median_s"] * 1e6,
                         tflops=work * timing.tflops(m, n, k, r["median_s"]),
                         floor_pct=100 * work * impl_floor / r["median_s"], err=r["err"])
        # fp8_ragged_dot's steps quantize their operands: their error is the recipe's.
        if impl not in fp8_steps and not r["err"] <= ERR_LIMIT:
            row[impl]["wrong"] = True
        if impl in steps:
            row[impl]["temp_bytes"] = temp_bytes(steps[impl], *train_sets[0])
    if pallas_skip:
        row["pallas_skipped"] = pallas_skip
    pallas_ok = [name for name in pallas_runs if "us" in row[name] and "wrong" not in row[name]]
    row["best_pallas"] = min(pallas_ok, key=lambda name: row[name]["us"]) if pallas_ok else None
    return row


# --shape: 'MxGxKxN' (rows, experts, K, N).
parse_case = timing.dims_parser("MxGxKxN")


def _tf(row, impl):
    return row[impl]["tflops"] if "us" in row.get(impl, {}) else float("nan")


def report(row: dict, sweep: bool) -> None:
    h, x, d = row["hopper"], row["xla"], row["dense"]
    name, routing = row["case"], row["routing"]
    if "us" not in h:
        print(f"{name:16} {routing:8} hopper failed: {h['error']}")
        return
    ratio = x["us"] / h["us"] if "us" in x else float("nan")
    vs_dense = d["us"] / h["us"] if "us" in d else float("nan")
    best = row["best_pallas"]
    vs_pallas = row[best]["us"] / h["us"] if best else float("nan")
    print(f"{name:16} {routing:8} {row['floor_us']:9.0f} {_tf(row, 'xla'):9.1f} "
          f"{_tf(row, best) if best else float('nan'):10.1f} {h['tflops']:11.1f} "
          f"{h['floor_pct']:7.1f}% {ratio:6.2f} {vs_pallas:8.2f} {vs_dense:8.2f} "
          f"{h['err']:8.1e}{' WRONG' if h.get('wrong') else ''}", flush=True)
    for cname in sweep_configs() if sweep else ():
        c = row[cname]
        print(f"{'':25} {cname:28} " + (f"{c['tflops']:7.1f} TF/s {c['floor_pct']:6.1f}%"
                                         if "us" in c else c["error"][:80]))
    if "hopper_train" in row:
        xt, ht = row["xla_train"], row["hopper_train"]
        mb = {k: (v.get("temp_bytes") or 0) / 1e6 for k, v in (("x", xt), ("h", ht))}
        print(f"{'':25} train step: xla " + (f"{xt['us'] / 1e3:.2f} ms" if "us" in xt
                                              else xt["error"][:60])
              + (f", hopper {ht['us'] / 1e3:.2f} ms = {ht['tflops']:.0f} TF/s, "
                 f"{ht['floor_pct']:.0f}% of floor" if "us" in ht else f", {ht['error'][:60]}")
              + (f" ({xt['us'] / ht['us']:.2f}x)" if "us" in xt and "us" in ht else "")
              + f"; temporaries {mb['x']:.0f} vs {mb['h']:.0f} MB", flush=True)
        for recipe in ("tensor", "block"):
            ft = row.get(f"hopper_fp8_{recipe}_train")
            if ft is not None:
                ratios = [f"{peer['us'] / ft['us']:.2f}x {name}" for name, peer in
                          (("our bf16 step", ht), ("xla", xt)) if "us" in peer]
                print(f"{'':25} train step, fp8_ragged_dot {recipe}: "
                      + (f"{ft['us'] / 1e3:.2f} ms" + (f" ({', '.join(ratios)})" if ratios
                                                       else "")
                         if "us" in ft else ft["error"][:60]), flush=True)
    if "hopper_wgrad" in row:
        xw, hw = row["xla_wgrad"], row["hopper_wgrad"]
        print(f"{'':25} weight grad: xla " + (f"{xw['tflops']:.1f}" if "us" in xw
                                               else xw["error"][:60])
              + (f", hopper {hw['tflops']:.1f} TF/s ({hw['floor_pct']:.1f}% of floor)"
                 if "us" in hw else f", {hw['error'][:60]}")
              + (f" ({xw['us'] / hw['us']:.2f}x)" if "us" in xw and "us" in hw else "")
              + f", error {hw.get('err', float('nan')):.1e}", flush=True)
        fw = row.get("hopper_fp8_wgrad")
        if fw is not None:
            print(f"{'':25} fp8 weight grad: hopper " + (
                f"{fw['tflops']:.1f} TF/s ({fw['floor_pct']:.1f}% of the fp8 floor)"
                + (f", {fw['tflops'] / hw['tflops']:.2f}x our bf16 weight grad" if "us" in hw
                   else "") if "us" in fw else fw["error"][:60]), flush=True)
        sweeps = {**contraction_configs(), **(fp8_contraction_configs() if fw else {})}
        for cname in (sweeps if sweep else ()):
            c = row[cname]
            print(f"{'':25} {cname:28} " + (f"{c['tflops']:7.1f} TF/s {c['floor_pct']:6.1f}%"
                                             if "us" in c else c["error"][:80]))
    if "hopper_fp8" in row:
        hf, xf = row["hopper_fp8"], row["xla_fp8"]
        print(f"{'':25} fp8: hopper " + (f"{hf['tflops']:.1f} TF/s ({hf['floor_pct']:.1f}% of "
                                          "the fp8 floor)" if "us" in hf else hf["error"][:60])
              + ", xla " + (f"{xf['tflops']:.1f}" if "us" in xf else xf["error"][:60])
              + (f" ({xf['us'] / hf['us']:.2f}x)" if "us" in xf and "us" in hf else "")
              + (f", {row['hopper']['us'] / hf['us']:.2f}x our bf16"
                 if "us" in hf and "us" in row["hopper"] else "")
              + f", error {hf.get('err', float('nan')):.1e}", flush=True)
        hb, xb = row["hopper_fp8_block"], row["xla_fp8_block"]
        print(f"{'':25} fp8 block scales: hopper "
              + (f"{hb['tflops']:.1f} TF/s ({hb['floor_pct']:.1f}% of the fp8 floor)"
                 if "us" in hb else hb["error"][:60])
              + ", xla dequantised " + (f"{xb['tflops']:.1f}" if "us" in xb else xb["error"][:60])
              + (f" ({xb['us'] / hb['us']:.2f}x)" if "us" in xb and "us" in hb else "")
              + (f", {hb['us'] / hf['us']:.2f}x our per-tensor time" if "us" in hb and "us" in hf
                 else "")
              + f", error {hb.get('err', float('nan')):.1e}",
              flush=True)
    if row.get("pallas_skipped"):
        print(f"{'':25} pallas skipped: {row['pallas_skipped']}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="*", choices=list(CASES), default=None,
                        help="default: every case (none with --shape)")
    parser.add_argument("--shape", nargs="+", type=parse_case, default=[],
                        help="cases of your own, MxGxKxN")
    parser.add_argument("--routing", nargs="+", choices=["uniform", "skewed"],
                        default=["uniform", "skewed"])
    parser.add_argument("--sweep", action="store_true",
                        help="also time every compiled grouped tile and cluster")
    parser.add_argument("--pallas", action="store_true", help="also time Pallas's ragged_dot")
    parser.add_argument("--train", action="store_true", help="also time the training step")
    parser.add_argument("--fp8", action="store_true",
                        help="also time hopper_ragged_fp8_dot against lax.ragged_dot on fp8")
    timing.add_output_args(parser)
    args = parser.parse_args(argv)
    timing.require_kernels(jax_hopper)
    names = args.cases if args.cases is not None else ([] if args.shape else list(CASES))
    for m, g, k, n in args.shape:
        CASES[f"{m}x{g}x{k}x{n}"] = (m, g, k, n)
        names.append(f"{m}x{g}x{k}x{n}")
    rng = np.random.default_rng(0)
    rows = []
    print(f"{jax.devices()[0].device_kind}, jax {jax.__version__}, bf16, "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"{'case':16} {'routing':8} {'floor us':>9} {'xla TF/s':>9} {'pallas':>10} "
          f"{'hopper TF/s':>11} {'% floor':>8} {'x xla':>6} {'x pallas':>8} {'x dense':>8} "
          f"{'err':>8}")
    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, f"grouped_{args.tag}.json")
    env = dict(device=jax.devices()[0].device_kind, jax=jax.__version__,
               date=datetime.datetime.now(datetime.timezone.utc).isoformat(), argv=sys.argv[1:])
    for name in names:
        for routing in args.routing:
            row = run_case(name, routing, args.reps, rng, args.sweep, args.pallas, args.train,
                           args.fp8)
            rows.append(row)
            report(row, args.sweep)
            timing.write_run_json(path, complete=False, rows=rows, **env)
    timing.write_run_json(path, complete=True, rows=rows, **env)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
