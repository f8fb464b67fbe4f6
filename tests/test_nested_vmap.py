"""vmap of vmap around the grouped, fp8 and quantize ops: each entry of the nested result is
the op on that entry alone. On the CPU (reference lowering, always) and on an sm_90 GPU (the
kernels, marker `gpu`). The grouped products' vmap rule folds each level's entries into one
launch (ragged_primitive.fold_entries) where it can, else launches once per entry (lax.map,
whose body an outer vmap maps again); the fp8 product's per-tensor scales become one per entry
of the merged batch at each level."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemm_helpers import count_eqns, rel_frob, to64
from jax_hopper import (_ffi, fp8_matmul, fp8_ragged_dot, hopper_fp8_matmul, hopper_glu,
                        hopper_ragged_contract, hopper_ragged_dot, hopper_ragged_fp8_dot,
                        hopper_ragged_glu, quantize_experts, quantize_fp8, ragged_dot,
                        transpose_fp8)

PLATFORMS = ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)]
V, B, M, K, N, G = 2, 3, 40, 64, 48, 3
E4M3 = jnp.float8_e4m3fn
F32 = jnp.float32


def _device(platform):
    return jax.devices("cpu")[0] if platform == "cpu" else _ffi.hopper_devices()[0]


def _normal(rng, shape, dtype=jnp.bfloat16):
    return jnp.asarray(rng.standard_normal(shape, dtype=np.float32)).astype(dtype)


def _entrywise(f, *args):
    """f on each (v, b) entry of the (V, B, ...) args, stacked as nested vmaps stack them."""
    return jax.tree.map(lambda *xs: jnp.stack(xs).reshape(V, B, *xs[0].shape),
                        *[f(*[a[v, b] for a in args]) for v in range(V) for b in range(B)])


def _same(got, want, bound):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        assert rel_frob(g.astype(F32), to64(w.astype(F32))) < bound


def _cases(rng):
    """name: (f of one entry, its (V, B, ...) arguments)."""
    gs = jnp.asarray([13, 0, 20], jnp.int32)  # 7 rows past every group
    w = _normal(rng, (G, K, N)) * 0.2
    w_glu = _normal(rng, (G, K, 2, N)) * 0.2
    x = _normal(rng, (V, B, M, K))
    w8 = quantize_experts(w)
    # Per-entry scales 1..6 apart: an entry scaled by another's shows.
    scales = jnp.arange(1, V * B + 1, dtype=F32).reshape(V, B)
    x8 = _normal(rng, (V, B, M, K), E4M3)
    b8 = _normal(rng, (N, K), E4M3)
    return {
        "hopper_ragged_dot": (lambda x: hopper_ragged_dot(x, w, gs), (x,)),
        "ragged_dot": (lambda x: ragged_dot(x, w, gs), (x,)),
        "hopper_ragged_glu": (lambda x: hopper_ragged_glu(x, w_glu, gs), (x,)),
        "hopper_ragged_contract": (lambda x: hopper_ragged_contract(x, x, gs, out_dtype=F32),
                                   (x,)),
        "hopper_ragged_glu_grad": (jax.grad(lambda x, w: hopper_ragged_glu(x, w, gs).astype(
            F32).sum(), (0, 1)), (x, jnp.broadcast_to(w_glu, (V, B, *w_glu.shape)))),
        "hopper_glu_grad": (jax.grad(lambda x, w: hopper_glu(x, w).astype(F32).sum(), (0, 1)),
                            (x, jnp.broadcast_to(w_glu[0], (V, B, *w_glu.shape[1:])))),
        "fp8_ragged_dot": (lambda x: fp8_ragged_dot(x, w, gs), (x,)),
        "fp8_ragged_dot_grad": (jax.grad(lambda x: fp8_ragged_dot(x, w, gs).astype(F32).sum()),
                                (x,)),
        "hopper_ragged_fp8_dot": (lambda q, s: hopper_ragged_fp8_dot(q, w8.q, gs, s, w8.scale),
                                  (x8, scales)),
        "hopper_fp8_matmul": (lambda q, s: hopper_fp8_matmul(q, b8, s, jnp.float32(0.5)),
                              (x8, scales)),
        "fp8_matmul_grad": (jax.grad(lambda x: fp8_matmul(x, w[0], recipe="tensor")
                                     .astype(F32).sum()), (x,)),
        "quantize_fp8_block": (lambda x: quantize_fp8(x, scaling="block", transpose=True),
                               (x,)),
        "transpose_fp8": (transpose_fp8, (x8,)),
    }


CASES = list(_cases(np.random.default_rng(0)))


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("case", CASES)
def test_nested_vmap_is_the_op_on_each_entry(rng, platform, case):
    with jax.default_device(_device(platform)):
        f, args = _cases(rng)[case]
        got = jax.jit(jax.vmap(jax.vmap(f)))(*args)
        _same(got, _entrywise(f, *args), 1e-2)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("case", CASES)
def test_vmap_over_no_entries(rng, platform, case):
    """vmap over an axis of size 0, outermost or nested inside another: the op's result for
    none (a launch of no rows would be no problem at all), shaped as one entry's."""
    with jax.default_device(_device(platform)):
        f, args = _cases(rng)[case]
        one = jax.eval_shape(f, *[a[0, 0] for a in args])
        for fn, entries, lead in ((jax.vmap(f), [a[0, :0] for a in args], (0,)),
                                  (jax.vmap(jax.vmap(f)), [a[:, :0] for a in args], (V, 0))):
            got = jax.jit(fn)(*entries)
            assert [g.shape for g in jax.tree.leaves(got)] == \
                [(*lead, *o.shape) for o in jax.tree.leaves(one)]


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("glu", [hopper_ragged_glu, hopper_glu], ids=["grouped", "dense"])
def test_nested_vmap_of_the_glu_gradients_is_one_launch_each(rng, platform, glu):
    """vmap of vmap of the gated unit's gradients against a shared weight: the inner vmap's
    entries and the outer one's joined (gated_product._vmappable), so the product, d x and
    d w are one launch each, no loop; each entry as computed alone."""
    gs = jnp.asarray([13, 0, 20], jnp.int32)
    w = _normal(rng, (G, K, 2, N) if glu is hopper_ragged_glu else (K, 2, N)) * 0.2
    x = _normal(rng, (V, B, M, K))

    def grads(x):
        def loss(x, w):
            y = glu(x, w, gs) if glu is hopper_ragged_glu else glu(x, w)
            return y.astype(F32).sum()
        return jax.grad(loss, (0, 1))(x, w)

    nested = jax.vmap(jax.vmap(grads))
    with jax.default_device(_device(platform)):
        assert count_eqns(jax.make_jaxpr(nested)(x).jaxpr, ("scan", "while")) == 0
        _same(jax.jit(nested)(x), _entrywise(grads, x), 1e-2)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_nested_vmap_of_fp8_scales_mapped_at_one_level(rng, platform):
    """A per-tensor scale mapped by the inner vmap only (one per b, the same for every v), and
    by the outer only (one per v): each entry of the merged batch takes its own."""
    with jax.default_device(_device(platform)):
        x8, b8 = _normal(rng, (V, B, M, K), E4M3), _normal(rng, (N, K), E4M3)
        per_b, per_v = jnp.arange(1, B + 1, dtype=F32), jnp.arange(1, V + 1, dtype=F32) * 10

        def f(q, s):
            return hopper_fp8_matmul(q, b8, s, jnp.float32(0.5))

        inner = jax.jit(jax.vmap(jax.vmap(f), in_axes=(0, None)))(x8, per_b)
        outer = jax.jit(jax.vmap(jax.vmap(f, in_axes=(0, None))))(x8, per_v)
        _same(inner, _entrywise(f, x8, jnp.broadcast_to(per_b, (V, B))), 1e-2)
        _same(outer, _entrywise(f, x8, jnp.broadcast_to(per_v[:, None], (V, B))), 1e-2)
