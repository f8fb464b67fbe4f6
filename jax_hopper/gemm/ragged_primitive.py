"""The grouped GEMM's JAX primitive (the grouped and grouped_glu kernel families): abstract
eval, the CUDA lowering to the FFI custom call, the reference lowering, and `launch`, one
device's call.

Operands, as stored: lhs (1, M, K); rhs (G, K, N) (b_mn_major, the layout of
jax.lax.ragged_dot) or (G, N, K), or for family "grouped_glu" the experts' gated weights
(G, K, 2, N) as the primitive's (G K, 2, N) (launch reshapes them; the handler's rank-3 view);
group_sizes (G,) int32; the tile table (ragged_tiles.py's layout, in tiles of the config's
block_m; built on the device by build_tile_table; the reference ignores it, and XLA then drops
it); bias (G, N) ((G, 2, N) gated)
float32 or (0,); residual (1, M, N) in the out dtype or (0, 0, 0). The result is (1, M, N):
rows of group g are act(alpha * lhs_rows @ rhs[g] + bias[g]) + beta * residual (gated:
act(gate) * up of the two halves), rows past every group the same of a zero product. Group
sizes are made valid as ragged_tiles.py says.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_batching import custom_vmap
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir
from jax.sharding import PartitionSpec

from jax_hopper import _ffi, manual_axes
from jax_hopper.gemm import ragged_tiles
from jax_hopper.gemm.epilogue import apply_activation, apply_gated
from jax_hopper.gemm.group_rows import per_row
from jax_hopper.gemm.tuned import grouped_config
from jax_hopper.gemm.pitch import pitch_granule, pitch_pad
from jax_hopper.gemm.primitive import (_KERNELS, _pad_columns, call_attrs, cuda_reference,
                                       explicit_placement, freeze, gemm_target)
from jax_hopper.gemm.typed_reshape import explicitly_sharded, reshape, resharded

hopper_ragged_p = Primitive("hopper_ragged_dot")
_F32 = jnp.dtype(jnp.float32)


def out_cols(rhs_shape, b_mn_major: bool, family: str) -> int:
    """The output's columns N for rhs of `rhs_shape`."""
    return rhs_shape[-1] if family == "grouped_glu" or b_mn_major else rhs_shape[1]


def holds_entries(family: str, operand: str, ndim: int) -> bool:
    """Whether an `operand` ("rhs" or "bias") of `ndim` dimensions holds one set per entry of
    launch's entries ((E, G, ...)) rather than the (G, ...) they share: one more dimension
    than the family's (G, K, N) / (G, N) weights, gated (G, K, 2, N) / (G, 2, N)."""
    own = {"rhs": 3, "bias": 2}[operand] + (family == "grouped_glu")
    return ndim == own + 1


def _abstract_eval(lhs, rhs, group_sizes, tiles, bias, residual, *, b_mn_major, out_dtype,
                   family, **_):
    # Typed as placed under explicit sharding: rows as lhs's, columns as rhs's (the gated
    # family's weight as the dense GLU's (K, 2, F), here (G K, 2, F)).
    placed = (explicit_placement(lhs, rhs, False, True, "glu", 1) if family == "grouped_glu"
              else explicit_placement(lhs, rhs, False, b_mn_major, "matmul", 1))
    return jax.core.ShapedArray((1, lhs.shape[1], out_cols(rhs.shape, b_mn_major, family)),
                                out_dtype, sharding=placed)


def reference(lhs, rhs, group_sizes, tiles, bias, residual, *, b_mn_major, out_dtype,
              activation, alpha, beta, family="grouped", config=None):
    """What the kernel computes, in jnp: fp32 accumulation, epilogue in fp32, one rounding.
    Entries (group_sizes (E, G), launch's stacked operands): each entry's product."""
    del tiles, config
    if group_sizes.ndim == 2:
        return _entries_reference(lhs, rhs, group_sizes, bias, residual, b_mn_major=b_mn_major,
                                  out_dtype=out_dtype, activation=activation, alpha=alpha,
                                  beta=beta, family=family)
    groups, k = group_sizes.shape[0], lhs.shape[2]
    rhs_kn = (rhs.reshape(groups, k, -1) if family == "grouped_glu" else
              rhs if b_mn_major else jnp.swapaxes(rhs, 1, 2))
    sizes = ragged_tiles.valid_sizes(group_sizes, lhs.shape[1])
    x = jax.lax.ragged_dot(lhs[0], rhs_kn, sizes, preferred_element_type=_F32)
    return epilogue(alpha * x, group_sizes, bias, residual, activation=activation, beta=beta,
                    out_dtype=out_dtype, family=family)


def _entries_reference(lhs, rhs, group_sizes, bias, residual, **params):
    """reference over the entries of launch's stacked operands (lhs (1, E M, K), rhs and bias
    stacked (E G, ...) or shared, residual (1, E M, N) or empty), as (1, E M, N)."""
    entries, groups = group_sizes.shape
    k = lhs.shape[2]
    per_entry = rhs.shape[0] != groups * (k if params["family"] == "grouped_glu" else 1)
    return map_entries(
        lambda lhs, rhs, gs, bias, res: reference(lhs, rhs, gs, None, bias, res, **params),
        entries, (lhs, rhs, group_sizes, bias, residual),
        ("rows", "groups" if per_entry else None, "entry",
         "groups" if per_entry and bias.size else None, "rows" if residual.size else None))


def map_entries(fn, entries: int, operands, stacked):
    """fn over launch's E entries of its stacked operands, a loop (lax.map: jax.lax.ragged_dot,
    the references' product, has no batching rule over a shared rhs). Each operand is stacked
    as `stacked` says: "rows" ((1, E X, ...): fn gets the entry's (1, X, ...)), "groups"
    ((E G, ...): (G, ...)), "entry" ((E, ...): its row), None (shared: whole). fn returns an
    entry's (1, X, N); the result is (1, E X, N)."""
    def split(x, how):  # the entries leading
        if how == "rows":
            return jnp.moveaxis(x.reshape(1, entries, -1, *x.shape[2:]), 1, 0)
        return x.reshape(entries, -1, *x.shape[1:]) if how == "groups" else x

    mapped = [i for i, how in enumerate(stacked) if how]

    def one(xs):
        args = list(operands)
        for i, x in zip(mapped, xs):
            args[i] = x
        return fn(*args)[0]

    out = jax.lax.map(one, [split(operands[i], stacked[i]) for i in mapped])
    return out.reshape(1, -1, out.shape[-1])


def epilogue(x, group_sizes, bias, residual, *, activation, beta, out_dtype, family="grouped"):
    """act(x + bias[group of the row]) + beta * residual on an fp32 (M, N) x (gated: (M, 2N)
    [gate | up] and act(gate) * up), one rounding to out_dtype; rows past every group get no
    bias. Returns (1, M, N). Entries (group_sizes (E, G), launch's): x (E, M, N), bias shared
    or one per entry (E, G, ...), residual (E, M, N) or empty; returns (E, M, N)."""
    if group_sizes.ndim == 2:
        def one(x, gs, b, r):
            return epilogue(x, gs, b, r[None] if r.ndim == 2 else r, activation=activation,
                            beta=beta, out_dtype=out_dtype, family=family)[0]
        bias_axis = 0 if holds_entries(family, "bias", bias.ndim) else None
        return jax.vmap(one, in_axes=(0, 0, bias_axis, 0 if residual.size else None))(
            x, group_sizes, bias, residual)
    if bias.size:
        x = x + per_row(bias.reshape(bias.shape[0], -1), group_sizes, x)
    x = (apply_gated(x, activation) if family == "grouped_glu"
         else apply_activation(x, activation))
    if residual.size:
        x = x + beta * residual[0].astype(_F32)
    return x.astype(out_dtype)[None]


def launch(lhs, rhs, group_sizes, bias, res, **params):
    """One device's grouped GEMM on operands as they lie on it, padded with zeros where TMA
    cannot address a row pitch (pitch.py), so every shape runs on the kernel:
    - K not whole 16-byte rows (lhs's pitch; rhs's too when stored (G, N, K)): lhs and rhs
      padded along K (copies of both; zero columns add nothing to any product);
    - N not whole 16-byte rows of the output, or of rhs stored (G, K, N) or gated (G, K, 2, N):
      rhs padded with zero columns (a copy), bias and residual too, and the padded columns
      sliced off the result.
    config None (none asked for) is chosen here for the problem the kernel runs, K and N as
    padded (tuned.grouped_config: the config tuned for its rows, product columns, K and groups,
    else the heuristic's; tune.problems_of reads the same shapes off the bound operands).
    Entries (vmap's fold, ragged_sharding): lhs (E, M, K) with group_sizes (E, G) are E
    products in one launch, rhs and bias shared ((G, ...)) or one per entry ((E, G, ...)),
    the residual (E, M, N) or empty; the result (E, M, N). Their rows are stacked (E M) and
    each entry's groups are tiled apart (ragged_tiles.entry_sizes, entry_groups), or, where
    entries sharing the experts route few rows to each (runs_expert_major), placed expert by
    expert as one product's (in_expert_order)."""
    b_mn_major, family = params["b_mn_major"], params["family"]
    gated = family == "grouped_glu"
    entries, rows = (group_sizes.shape[0], lhs.shape[1]) if group_sizes.ndim == 2 else (0, 0)
    per_entry = entries and holds_entries(family, "rhs", rhs.ndim)
    if entries > 1 and not per_entry and runs_expert_major(rows, group_sizes, lhs):
        return in_expert_order(group_sizes, (lhs, res), lambda totals, lhs, res: launch(
            lhs, rhs, totals, bias, res, **params))
    if entries:
        lhs, rhs, bias, res = _stacked(lhs, rhs, bias, res, per_entry)
        group_sizes = entries_sizes(group_sizes)
    if k_pad := pitch_pad(lhs.shape[2], lhs.dtype):
        k_axis = 1 if gated or b_mn_major else 2  # (G, K, [2,] N) or (G, N, K)
        lhs = jnp.pad(lhs, ((0, 0), (0, 0), (0, k_pad)))
        rhs = jnp.pad(rhs, [(0, k_pad if i == k_axis else 0) for i in range(rhs.ndim)])
    n = out_cols(rhs.shape, b_mn_major, family)
    # Granules are powers of two elements: the largest is a multiple of the other.
    step = max(pitch_granule(params["out_dtype"]),
               pitch_granule(rhs.dtype) if gated or b_mn_major else 1)
    if pad := -n % step:
        rhs, bias, res = _pad_columns(rhs, bias, res, rhs.ndim - 1 if b_mn_major else 1, pad)
    if params["config"] is None:
        cols = (n + pad) * (2 if gated else 1)  # product columns
        params = {**params, "config": grouped_config(family, lhs.dtype.name, False, b_mn_major,
                                                     group_sizes.size, lhs.shape[1], cols,
                                                     lhs.shape[2])}
    if gated:  # (G, K, 2, N) -> (G K, 2, N), whatever a sharding typed on rhs splits: typed
        # operands reach here only in ragged_sharding's trace for the result type, whose
        # partitioner keeps a split of K (no warning of a gather that does not happen)
        rhs = reshape(rhs, (rhs.shape[0] * rhs.shape[1], 2, rhs.shape[-1]), warn=False)
    tiles = launch_tiles(group_sizes, lhs.shape[1], params["config"], per_entry)
    out = hopper_ragged_p.bind(lhs, rhs, group_sizes, tiles, bias, res, **params)
    out = out[..., :n] if pad else out
    return reshape(out, (entries, rows, n), warn=False) if entries else out


# The most rows an entry routes to each expert it shares with the others (rows / G, on
# average) for which launch places their rows expert by expert (runs_expert_major). H100,
# 2026-12-06, against the entries apart (device time): 2-48 rows an expert 1.06-3.37x, 64
# rows 0.97x (ab_h100_20261206_expert_major*.json): the two row gathers outweigh the tiles
# saved once an entry's rows of an expert fill half a 128-row tile.
EXPERT_MAJOR_MAX_ROWS_PER_GROUP = 48


def runs_expert_major(rows: int, group_sizes, lhs) -> bool:
    """Whether launch runs entries of `rows` rows that share the experts (group_sizes (E, G))
    as one product over their rows placed expert by expert (in_expert_order): where an entry
    routes EXPERT_MAJOR_MAX_ROWS_PER_GROUP rows or fewer to an expert on average. Apart, each
    entry's rows of an expert take tiles of their own (ragged_tiles.entry_sizes), so a few
    rows a tile cost the tiles' whole work (16 rows of a 128-row tile: 1/8 of its MMAs used)
    and every entry reads every expert's weights once more; together, an expert's rows of
    every entry fill its tiles, for two row gathers (lhs in, the result out). Not for
    operands typed by an explicit sharding: they reach launch only in its partitioner's trace
    for the result type, which is the same either way."""
    groups = group_sizes.shape[1]
    return (rows <= EXPERT_MAJOR_MAX_ROWS_PER_GROUP * groups
            and not explicitly_sharded(lhs) and not explicitly_sharded(group_sizes))


def expert_major(group_sizes, rows: int):
    """(place, order, totals) for launch's entries of `rows` rows placed expert by expert
    (ragged_tiles.expert_major_rows): each stacked row's place, the stacked row at each place
    (its inverse, one int32 scatter) and the experts' rows over the entries (the product's
    group sizes)."""
    place, totals = ragged_tiles.expert_major_rows(group_sizes, rows)
    order = jnp.zeros_like(place).at[place].set(jnp.arange(place.shape[0], dtype=jnp.int32))
    return place, order, totals


def rows_in(x, order):
    """The rows of launch's entries x (E, M, ...), stacked (1, E M, ...), in `order`."""
    return stacked_rows(x)[:, order]


def in_expert_order(group_sizes, rowed, product):
    """A launch's entries (sizes (E, G), sharing the experts) as one product over their rows
    placed expert by expert (expert_major): product(totals, *rowed) on the `rowed` operands
    (E, M, ...; lhs, a residual, block lhs scales; an empty one passed as it is) gathered into
    that order, its rows (1, E M, N) gathered back as the entries' (E, M, N)."""
    entries, rows = group_sizes.shape[0], rowed[0].shape[1]
    place, order, totals = expert_major(group_sizes, rows)
    out = product(totals, *(rows_in(x, order) if x.size else x for x in rowed))
    return reshape(out[:, place], (entries, rows, out.shape[-1]), warn=False)


def _stacked(lhs, rhs, bias, res, per_entry: bool):
    """launch's entries as one product's operands: the rows stacked (stacked_rows), and a
    per-entry rhs and bias stacked along the groups ((E, G, ...) -> (E G, ...)); a bias is per
    entry where rhs is."""
    def groups(x):
        return reshape(x, (x.shape[0] * x.shape[1], *x.shape[2:]), warn=False)

    return (stacked_rows(lhs), groups(rhs) if per_entry else rhs,
            groups(bias) if per_entry and bias.size else bias,
            stacked_rows(res) if res.size else res)


def stacked_rows(x):
    """The rows of launch's entries as one launch's: (E, M, ...) -> (1, E M, ...)."""
    return reshape(x, (1, x.shape[0] * x.shape[1], *x.shape[2:]), warn=False)


def entries_sizes(group_sizes):
    """launch's entries' group sizes (E, G) as the launch reads them. Typed operands (explicit
    sharding) reach a launch only in its partitioner's trace for the result type, never run
    (each device's launch has its own entries' sizes): there a split typed on them is dropped,
    the tile table and bounds being built from all of them."""
    return resharded(group_sizes, PartitionSpec()) if explicitly_sharded(group_sizes) \
        else group_sizes


def launch_tiles(group_sizes, rows: int, config, rhs_per_entry: bool = False):
    """The tile table of a grouped launch over `rows` rows in config's block_m tiles (paired
    for 2-CTA clusters along M): of group_sizes (G,), or of launch's entries' (E, G), rows / E
    rows each, every entry's groups tiled apart and named as the kernel reads rhs
    (ragged_tiles.entry_sizes, entry_groups; rhs stacked per entry or shared)."""
    paired = config.cluster_m == 2
    if group_sizes.ndim == 1:
        return build_tile_table(group_sizes, rows, config.block_m, paired=paired)
    entries, groups = group_sizes.shape
    return ragged_tiles.entry_groups(
        build_tile_table(ragged_tiles.entry_sizes(group_sizes, rows // entries), rows,
                         config.block_m, paired=paired), groups, rhs_per_entry)


def _cuda_lowering(ctx, lhs, rhs, group_sizes, tiles, bias, residual, *, b_mn_major, out_dtype,
                   activation, alpha, beta, config, family):
    # As the dense GEMM's lowering (primitive.py), with the tile table as the call's fifth
    # input: the plan covers every slot of the table (a static bound of the tiles in use).
    del group_sizes
    lhs_aval, tiles_aval = ctx.avals_in[0], ctx.avals_in[3]
    kernel = config.kernel(family, lhs_aval.dtype.name, False, b_mn_major)
    _, m, n = ctx.avals_out[0].shape
    k = lhs_aval.shape[2]
    slots = (tiles_aval.shape[0] - 1) // ragged_tiles.GROUP_TILE_FIELDS
    resident = _ffi.resident_clusters(kernel, config.cluster_m * config.cluster_n)
    plan = config.plan(kernel, 1, slots * config.block_m, n, k, resident)
    workspace = jax.core.ShapedArray((plan.pop("workspace_bytes"),), np.uint8)
    out, _ = jax.ffi.ffi_lowering(gemm_target(family, plan))(
        ctx.replace(avals_in=[ctx.avals_in[i] for i in (0, 1, 4, 5, 3)],
                    avals_out=[*ctx.avals_out, workspace]),
        lhs, rhs, bias, residual, tiles,
        **call_attrs(kernel, config, plan, activation, alpha, beta))
    return [out]


def per_entry(fn, batched, args):
    """vmap as one launch per entry: fn over the leading axis of the batched args (lax.map);
    an operand not batched, typically the experts' weights, is shared by every entry, never
    copied."""
    xs = [a for a, is_batched in zip(args, batched) if is_batched]

    def one(x):
        entry = iter(x)
        return fn(*[next(entry) if is_batched else a for a, is_batched in zip(args, batched)])

    return jax.lax.map(one, xs)


def fold_entries(family: str, axis_size: int, batched, lhs, rhs, gs, bias, res):
    """launch's operands under vmap (a leading axis of axis_size V on the `batched` ones) as
    one launch of V E entries (E: the call's own, launch's entries; 1 without them), each
    entry's rows, group sizes and residual its own and the weights shared or one per entry as
    they are mapped. None where that would copy a weight: a mapped rhs shared by E > 1
    entries, a per-entry rhs shared by the V mapped ones, or a bias mapped over a shared rhs
    (per_entry then launches once per entry instead). Activations, sizes, residuals and a
    bias beside a per-entry rhs are broadcast where not mapped."""
    lhs_b, rhs_b, gs_b, bias_b, res_b = batched
    entries = lhs.shape[1] if lhs_b else lhs.shape[0]
    rhs_entries = holds_entries(family, "rhs", rhs.ndim - rhs_b)
    bias_entries = holds_entries(family, "bias", bias.ndim - bias_b)
    if (rhs_b and not rhs_entries and entries != 1) or (rhs_entries and not rhs_b):
        return None
    per_entry_rhs = rhs_b or rhs_entries

    def folded(x, is_batched, has_entries=True):
        return entries_operand(x, is_batched, axis_size, None if has_entries else entries)

    if per_entry_rhs:
        rhs = folded(rhs, rhs_b, rhs_entries)
        if bias.size:
            bias = folded(bias, bias_b, bias_entries)
    elif bias.size and (bias_b or bias_entries):
        return None
    if not bias.size:
        bias = jnp.zeros((0,), bias.dtype)
    res = folded(res, res_b) if res.size else jnp.zeros((0, 0, 0), res.dtype)
    gs = folded(gs, gs_b, gs.ndim - gs_b == 2)
    return folded(lhs, lhs_b), rhs, gs, bias, res


def entries_operand(x, is_batched: bool, axis_size: int, entries: int | None = None):
    """An operand of a launch's entries under vmap, as the V E entries of one launch: x leads
    with the V mapped entries where is_batched (else is broadcast to them), then with the
    call's own E entries, or, where `entries` gives E, has none of its own and is broadcast to
    them; (V, E, ...) -> (V E, ...)."""
    x = x if is_batched else jnp.broadcast_to(x, (axis_size, *x.shape))
    if entries is not None:
        x = jnp.broadcast_to(x[:, None], (x.shape[0], entries, *x.shape[1:]))
    return reshape(x, (x.shape[0] * x.shape[1], *x.shape[2:]))


def folded_vmap(one, fold):
    """`one` (a function of arrays, launch's operands) with a vmap rule of one launch over
    every entry: fold(axis_size, in_batched, *args) gives the operands of V E entries (V
    mapped, E the call's own) or None, where per_entry runs instead; the result (V E, ...) is
    split back into (V, E, ...). For functions wrapped in custom_partitioning, which has no
    batching rule of its own."""
    fn = custom_vmap(one)

    def rule(axis_size, in_batched, *args):
        # No entries: per_entry's loop of none (a launch of none would have no rows)
        folded = fold(axis_size, in_batched, *args) if axis_size else None
        if folded is None:
            return per_entry(fn, in_batched, args), True
        out = fn(*folded)
        return reshape(out, (axis_size, out.shape[0] // axis_size, *out.shape[1:])), True

    fn.def_vmap(rule)
    return fn


def vmapped_per_entry(one):
    """`one` (a function of arrays) with per_entry as its vmap rule: for functions wrapped in
    custom_partitioning, which has no batching rule of its own. Each entry calls the rule's
    function again, so a vmap nested outside maps the entries in turn."""
    fn = custom_vmap(one)
    fn.def_vmap(lambda axis_size, in_batched, *args: (per_entry(fn, in_batched, args), True))
    return fn


def forward_only(fn, name: str, instead: str):
    """fn (a function of arrays) whose differentiation is a TypeError naming the op `name` and
    what to use `instead`, where jax would stop at custom_partitioning's missing rule. Inside
    fp8_matmul's and fp8_ragged_dot's custom VJPs nothing differentiates it; a gradient of
    their gradients does."""
    f = jax.custom_jvp(fn)

    @f.defjvp
    def _refused(primals, tangents):
        del primals, tangents
        raise TypeError(f"{name} has no derivative: {instead}")
    return f


# What the fp8 products' refusal (forward_only) points to.
FP8_DIFFERENTIABLE = ("fp8_matmul and fp8_ragged_dot are the differentiable fp8 products "
                      "(first order: the gradient of a gradient of an fp8 product is not "
                      "defined)")


def register(primitive, abstract_eval, reference_fn, cuda_lowering, batch_rule=None) -> None:
    """A grouped, fp8 or quantize primitive's rules: eager binds through a cached jit (lowered
    once per parameter set), vmap by `batch_rule` (default: one launch per entry, per_entry), the
    reference lowering on the CPU and, where the kernels are built, the custom call on CUDA."""
    @functools.lru_cache(maxsize=None)
    def jitted_bind(params: tuple):
        return jax.jit(lambda *args: primitive.bind(*args, **dict(params)))

    def per_entry_rule(args, dims, **params):
        batched = [d is not None for d in dims]  # None: not mapped
        moved = [jnp.moveaxis(a, d, 0) if b else a for a, d, b in zip(args, dims, batched)]
        return per_entry(lambda *a: primitive.bind(*a, **params), batched, moved), 0

    primitive.def_impl(lambda *args, **params: jitted_bind(freeze(params))(*args))
    primitive.def_abstract_eval(manual_axes.typed_outputs(abstract_eval))
    batching.primitive_batchers[primitive] = batch_rule or per_entry_rule
    reference_lowering = mlir.lower_fun(reference_fn,
                                        multiple_results=primitive.multiple_results)
    mlir.register_lowering(primitive, reference_lowering, platform="cpu")
    mlir.register_lowering(primitive,
                           cuda_lowering if _KERNELS else cuda_reference(reference_lowering),
                           platform="cuda")


register(hopper_ragged_p, _abstract_eval, reference, _cuda_lowering)


# The tile table, built on the device by one small kernel (cuda/gemm/scheduler/tile_table.cu):
# 4.3 us of GPU time per call on the H100, where the XLA ops of ragged_tiles.tile_table (now
# the reference lowering) took 14 us in three fusions (ncu_h100_20261124_tile_table.txt).
tile_table_p = Primitive("hopper_grouped_tile_table")


def build_tile_table(group_sizes, m: int, block: int, paired: bool = False):
    """The grouped kernels' tile table (ragged_tiles.py's layout) for `group_sizes` over m rows
    in tiles of `block` rows; paired for 2-CTA clusters along M."""
    return tile_table_p.bind(group_sizes.astype(jnp.int32), m=m, block=block, paired=paired)


def _tile_table_abstract(group_sizes, *, m, block, paired):
    slots = ragged_tiles.tile_slots(m, group_sizes.shape[0], block, paired)
    return jax.core.ShapedArray((1 + ragged_tiles.GROUP_TILE_FIELDS * slots,), jnp.int32)


def _tile_table_lowering(ctx, group_sizes, *, m, block, paired):
    return jax.ffi.ffi_lowering("jax_hopper_grouped_tile_table")(
        ctx, group_sizes, m=np.int64(m), block=np.int64(block), paired=bool(paired))


register(tile_table_p, _tile_table_abstract,
         lambda group_sizes, *, m, block, paired: ragged_tiles.tile_table(group_sizes, m, block,
                                                                          paired),
         _tile_table_lowering)
