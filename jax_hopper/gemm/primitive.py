"""The `hopper_gemm` JAX primitive: abstract eval, the CUDA lowering to the FFI custom call, the
CPU (reference) lowering, and `launch`, one device's call of it.

Operands are always 3-D as stored in memory: a (Ba, M, K) or, MN-major, (Ba, K, M); b (Bb, N, K)
or, MN-major, (Bb, K, N); Ba and Bb are 1 (shared) or the batch. bias is (N,) float32 or (0,);
residual is (1 or batch, M, N) in the out dtype or (0, 0, 0). The result is (batch, M, N).
Every call names its kernel family (catalog.FAMILIES): "matmul", or "glu" (hopper_glu,
jax_hopper/gemm/glu.py), where b is the (K, 2, F) weight itself, shared
by the batch (gate and up halves, 2F product columns), bias (2, F) or (0,), and the result and
residual have F columns.

Both public ops (hopper_matmul, hopper_glu) reach the primitive through the same layers, each
adding one transformation: autodiff.gemm (jax.grad) -> batching.gemm (jax.vmap) ->
sharding.partitioned (sharded jit) -> launch -> hopper_gemm_p. A layer branches on `family` only
where the gated unit's math differs from the GEMM's.
"""

from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import mlir

from jax_hopper import _ffi, manual_axes
from jax_hopper.gemm import pitch
from jax_hopper.gemm.epilogue import apply_activation, apply_gated
from jax_hopper.gemm.heuristics import SWAP_MAX_M
from jax_hopper.gemm.shared_batch import fold, folds
from jax_hopper.gemm.typed_reshape import explicitly_sharded, reshape
from jax_hopper.gemm.tuned import default_config

hopper_gemm_p = Primitive("hopper_gemm")


def broadcast_batch(ba: int, bb: int) -> int:
    """The batch of operands of batches ba and bb (equal, or one of them 1, shared): not their
    max, which an empty batch (0) against a shared operand (1) would make 1."""
    return bb if ba == 1 else ba


def problem_shape(a_shape, b_shape, a_mn_major: bool, b_mn_major: bool):
    """(batch, M, N, K) of stored 3-D operand shapes."""
    ba, ar, ac = a_shape
    bb, br, bc = b_shape
    m, ka = (ac, ar) if a_mn_major else (ar, ac)
    n, kb = (bc, br) if b_mn_major else (br, bc)
    assert ka == kb, (a_shape, b_shape)
    return broadcast_batch(ba, bb), m, n, ka


def freeze(params: dict) -> tuple:
    """Primitive params as a hashable, ordered key (static arguments, caches)."""
    return tuple(sorted(params.items()))


def product_shape(b_shape, family: str) -> tuple:
    """b's shape as the kernel's product sees it: glu's (K, 2, F) weight is (1, K, 2F)."""
    return (1, b_shape[0], 2 * b_shape[2]) if family == "glu" else tuple(b_shape)


def product_operand(b, family: str):
    """b as the kernel's product sees it: glu's weight [gate | up] (product_shape)."""
    return b.reshape(product_shape(b.shape, family)) if family == "glu" else b


def _abstract_eval(a, b, bias, residual, *, a_mn_major, b_mn_major, out_dtype, family,
                   **_):
    batch, m, n, _k = problem_shape(a.shape, product_shape(b.shape, family), a_mn_major,
                                    b_mn_major)
    shape = (batch, m, n // 2 if family == "glu" else n)
    placed = explicit_placement(a, b, a_mn_major, b_mn_major, family, batch)
    if placed is None:
        return jax.core.ShapedArray(shape, out_dtype)
    return jax.core.ShapedArray(shape, out_dtype, sharding=placed)


def explicit_placement(a, b, a_mn_major: bool, b_mn_major: bool, family: str, batch: int):
    """(Of the abstract values of stored 3-D operands a and b; glu's b is (K, 2, F).) Under
    explicit sharding (the operands' types carry their splits), the output's sharding
    where the partitioner (sharding._partition) places it when nothing else is asked: the batch,
    M and N splits of the operands, a mesh axis once (in that order, K's last), so that the
    type needs no reshard after the call. None without one, and with K split (the output then
    goes where it is asked for: sharding.k_scatter_dim's reduce-scatter)."""
    from jax_hopper.gemm.sharding import assign_factors, spec_of  # noqa: PLC0415 (imports us)
    typed = [x for x in (a, b) if explicitly_sharded(x)]
    if not typed:
        return None
    sa, sb = spec_of(a), spec_of(b)
    a_m, a_k = (2, 1) if a_mn_major else (1, 2)
    b_n, b_k = (2, 0) if family == "glu" else (2, 1) if b_mn_major else (1, 2)
    bb = 1 if family == "glu" else b.shape[0]
    candidates = {"b": [sa[0] if a.shape[0] == batch else None,
                        sb[0] if bb == batch else None] if batch > 1 else [],
                  "m": [sa[a_m]], "n": [sb[b_n]], "k": [sa[a_k], sb[b_k]]}
    axes, spec = assign_factors(typed[0].sharding.mesh, candidates, a.shape[a_k])
    if axes["k"]:  # a split K: the partials' sum is placed as the output is asked for (a
        return None  # reduce-scatter), which an untyped result leaves open
    return spec("b", "m", "n")


def apply_epilogue(x, bias, residual, *, activation, beta, out_dtype, family):
    """act(x + bias) + beta * residual on an fp32 x, then the one rounding to out_dtype; gated:
    act(gate) * up of x + bias, whose last axis is [gate | up]."""
    if bias.size:
        x = x + reshape(bias, (-1,)).astype(jnp.float32)
    x = apply_gated(x, activation) if family == "glu" else apply_activation(x, activation)
    if residual.size:
        x = x + beta * residual.astype(jnp.float32)
    return x.astype(out_dtype)


def empty_call(batch, m, n, bias, residual, *, out_dtype, activation, alpha, beta, family,
               scale=1.0):
    """The result of a call with nothing to multiply (batch, M, N or K of 0): the epilogue of a
    zero product (times alpha and `scale`, as the kernel's would be), made without the
    operands, whose shardings an empty contraction need not reconcile. n: product columns
    (the gated unit's 2F)."""
    product = jnp.zeros((batch, m, n), jnp.float32) * (alpha * scale)
    return apply_epilogue(product, bias, residual, activation=activation, beta=beta,
                          out_dtype=out_dtype, family=family)


def reference(a, b, bias, residual, *, a_mn_major, b_mn_major, out_dtype, activation, alpha,
              beta, family, config=None):
    """What the kernel computes, in jnp: fp32 accumulation, epilogue in fp32, one rounding."""
    del config
    b = product_operand(b, family)
    a_mk = jnp.swapaxes(a, 1, 2) if a_mn_major else a
    b_kn = b if b_mn_major else jnp.swapaxes(b, 1, 2)
    x = alpha * jnp.matmul(a_mk, b_kn, preferred_element_type=jnp.float32)
    return apply_epilogue(x, bias, residual, activation=activation, beta=beta,
                          out_dtype=out_dtype, family=family)


def launch(a, b, bias, res, **params):
    """One device's GEMM on operands as they lie on it (whole, or one shard of a sharded call).
    config None (no config asked for) is chosen here, for this problem: a shard's under a
    sharded jit (a data-parallel decode of 64 rows a device takes the swap-AB kernels though the
    whole batch has 512), the merged batch's under vmap.
    A batch against a shared b is one product of its rows (shared_batch.folds). A gated unit
    of at most SWAP_MAX_M rows in all is the swap-AB product and the unit after it
    (swapped_gated_unit). A gated weight's F (whole or per device) is padded: TMA addresses its
    two halves only with F a multiple of 8. Other odd pitches are the CUDA lowering's
    (pitch.py)."""
    if folds(a, product_shape(b.shape, params["family"])[0], res, params["a_mn_major"]):
        # (Typed operands reach here only in the partitioner's trace for the result's type.)
        return reshape(launch(fold(a), b, bias, fold(res), **params), (*a.shape[:2], -1),
                       warn=False)
    if params["config"] is None:
        if takes_swapped_gated_unit(a, b, params):
            return swapped_gated_unit(a, b, bias, res, params)
        params = {**params, "config": local_config(a, b, params)}
    if params["family"] == "glu" and (f := b.shape[2]) % 8:
        return launch(a, *_pad_columns(b, bias, res, 2, -f % 8), **params)[..., :f]
    return hopper_gemm_p.bind(a, b, bias, res, **params)


def local_config(a, b, params: dict):
    """tuned.default_config of the problem of stored operands a and b (N in product columns:
    2F for the gated unit)."""
    batch, m, n, k = problem_shape(a.shape, product_shape(b.shape, params["family"]),
                                   params["a_mn_major"], params["b_mn_major"])
    return default_config(params["family"], a.dtype.name, params["a_mn_major"],
                          params["b_mn_major"], batch, m, n, k)


def takes_swapped_gated_unit(a, b, params: dict) -> bool:
    """Whether a gated unit without a config runs as swapped_gated_unit: at most SWAP_MAX_M
    rows in all (decode; the product's own config is then tuned as a matmul problem) and a
    weight that is not explicitly sharded (its reshape into the product's b would need an
    output sharding).

    NOTES: the fused kernel has no swapped form, and its 128-row tiles spend most of each MMA
    on padding rows at decode; the unit after the swapped product works on a float32 (rows, 2F)
    that is small next to the weight the product reads. The decode loop went from 0.86-0.87x to
    0.89-0.91x jnp at batch 1-32 with this and the last-arrival split together (H100,
    2026-11-24; the two were not timed apart)."""
    return (params["family"] == "glu" and a.shape[0] * a.shape[1] <= SWAP_MAX_M
            and not explicitly_sharded(b))


def swapped_gated_unit(a, b, bias, res, params: dict):
    """The gated unit as hopper_matmul's product (the swap-AB kernels at these rows, float32)
    and act(gate + bias) * (up + bias) + beta * residual in jnp after it."""
    f32 = jnp.dtype(jnp.float32)
    z = launch(a, product_operand(b, "glu"), jnp.zeros((0,), f32), jnp.zeros((0, 0, 0), f32),
               **{**params, "family": "matmul", "activation": 0, "beta": 1.0, "out_dtype": f32})
    return apply_epilogue(z, bias, res, activation=params["activation"], beta=params["beta"],
                          out_dtype=params["out_dtype"], family="glu")


def _pad_columns(b, bias, res, axis, pad):
    """`pad` zero output columns more: b along `axis`, bias and residual along their last axis.
    Costs one copy of b; the caller slices the padded columns off the result."""
    b = jnp.pad(b, [(0, pad if i == axis else 0) for i in range(b.ndim)])
    if bias.size:
        bias = jnp.pad(bias, [(0, 0)] * (bias.ndim - 1) + [(0, pad)])
    if res.size:
        res = jnp.pad(res, ((0, 0), (0, 0), (0, pad)))
    return b, bias, res


def _lowered(ctx, fun, x, aval_in, aval_out):
    """The HLO of jnp function `fun` applied to IR value x (a pad or a slice)."""
    out = mlir.lower_fun(fun, multiple_results=False)(
        ctx.replace(avals_in=[aval_in], avals_out=[aval_out]), x)
    return out[0]


def _cuda_lowering(ctx, a, b, bias, residual, *, a_mn_major, b_mn_major, out_dtype, activation,
                   alpha, beta, config, family):
    # The kernel is named by the catalog (jax_hopper/kernels/catalog.py); its work plan is made
    # here, once, for the GPU's resident clusters, and passed to the custom call with the size
    # of its second result, the stream-K workspace: XLA allocates it like any buffer (no
    # allocation inside the handler, so CUDA graphs can capture the call), and only the product
    # leaves this lowering.
    # Operands and an output whose row pitch TMA cannot address are padded here (pitch.py).
    args, avals = [a, b, bias, residual], list(ctx.avals_in)
    out_aval = ctx.avals_out[0]
    # A decode weight of odd pitch is read in place (matmul_swap_odd), not padded.
    shifted = pitch.shifted_weight_tile(avals[1], b_mn_major, config, family)
    widths, out_pad = pitch.lowering_pads(*avals, out_aval, family=family,
                                          b_in_place=shifted is not None)
    for i, w in enumerate(widths):
        if w is not None:
            padded = avals[i].update(shape=tuple(d + hi for d, (_, hi) in
                                                 zip(avals[i].shape, w)))
            args[i] = _lowered(ctx, functools.partial(jnp.pad, pad_width=w), args[i], avals[i],
                               padded)
            avals[i] = padded
    batch, m, n = out_aval.shape
    call_out = out_aval.update(shape=(batch, m, n + out_pad))
    a_aval, b_aval = avals[0], avals[1]
    if shifted is None:
        kernel_family = config.kernel_family(family)
        kernel = config.kernel(family, a_aval.dtype.name, a_mn_major, b_mn_major)
    else:
        kernel_family = pitch.SHIFTED_FAMILY
        kernel = pitch.shifted_kernel(a_aval.dtype, shifted)
    k = a_aval.shape[1] if a_mn_major else a_aval.shape[2]
    if family != "glu":  # K is the longer operand's (one may be padded along it)
        k = max(k, b_aval.shape[2] if not b_mn_major else b_aval.shape[1])
    resident = _ffi.resident_clusters(kernel, config.cluster_m * config.cluster_n)
    plan = config.plan(kernel, batch, m, n + out_pad, k, resident)
    workspace = jax.core.ShapedArray((plan.pop("workspace_bytes"),), np.uint8)
    out, _ = jax.ffi.ffi_lowering(gemm_target(kernel_family, plan))(
        ctx.replace(avals_in=avals, avals_out=[call_out, workspace]), *args,
        **call_attrs(kernel, config, plan, activation, alpha, beta))
    if out_pad:
        out = _lowered(ctx, lambda x: x[..., :n], out, call_out, out_aval)
    return [out]


def gemm_target(family: str, plan: dict) -> str:
    """The FFI target of a `family` kernel's call with work plan `plan` (ffi/module.cc,
    add_gemm_targets): "jax_hopper_gemm_<family>_split" where the plan splits tiles (its target
    prepares the stream-K ready flags in an initialize stage, which XLA runs before every
    execution), else "jax_hopper_gemm_<family>", without that stage."""
    return f"jax_hopper_gemm_{family}" + ("_split" if plan["sk_clusters"] else "")


def call_attrs(kernel: str, config, plan: dict, activation: int, alpha: float,
               beta: float) -> dict:
    """The custom call's attributes, typed as the handlers decode them (GemmAttrs in
    ffi/gemm/gemm_call.h): the kernel's catalog name, the epilogue, the tile order and the plan."""
    return dict(kernel=kernel, activation=np.int64(activation), alpha=np.float32(alpha),
                beta=np.float32(beta), **config.ffi_attrs(),
                **{name: np.int64(v) for name, v in plan.items()})


@functools.lru_cache(maxsize=None)
def _jitted_bind(params: tuple):
    return jax.jit(lambda *args: hopper_gemm_p.bind(*args, **dict(params)))


# Eager binds run through a cached jit so the custom call is lowered once per parameter set.
hopper_gemm_p.def_impl(lambda *args, **params: _jitted_bind(freeze(params))(*args))
hopper_gemm_p.def_abstract_eval(manual_axes.typed_outputs(_abstract_eval))
_reference_lowering = mlir.lower_fun(reference, multiple_results=False)
mlir.register_lowering(hopper_gemm_p, _reference_lowering, platform="cpu")
# A CUDA machine without a Hopper GPU (or without the built extension) runs the reference too;
# on a Hopper GPU that is a missing build, which must not pass for the kernels unnoticed.
_KERNELS = _ffi.kernels_available()
if _ffi.hopper_devices() and not _KERNELS:
    warnings.warn(f"jax_hopper: a Hopper GPU is present but {_KERNELS.reason}; every op runs "
                  "its XLA reference", stacklevel=2)


def cuda_reference(reference_lowering):
    """The reference lowering as the CUDA one where the kernels are not here. With no GPU
    backend at all, a program lowered for CUDA is bound for another machine (jax.export with
    platforms=["cuda"] on a CPU machine): it then runs the XLA reference there, not the
    kernels, which a warning says."""
    def lower(ctx, *args, **params):
        if not _ffi.gpu_backend():
            warnings.warn("jax_hopper: lowering for CUDA on a machine without a GPU: the "
                          "program runs each op's XLA reference, not the kernels (lower or "
                          "export it on the Hopper machine to get them)", stacklevel=2)
        return reference_lowering(ctx, *args, **params)
    return lower


mlir.register_lowering(hopper_gemm_p,
                       _cuda_lowering if _KERNELS else cuda_reference(_reference_lowering),
                       platform="cuda")
