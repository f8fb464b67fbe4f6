"""fp8_matmul and fp8_dot_general through the references (no kernel): the product and both
gradients against float64 within each recipe's fp8 bound, shapes that need padding, leading
dimensions, jit, bad arguments, and flax's Dense / nnx Linear training with it; serving on
quantize_weight's weight (the training call's forward exactly, forward-only, its own bad
arguments)."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gemm_helpers import FP8_MATMUL_BOUND as BOUND, amax_of, check_fp8_matmul, rel_frob

from jax_hopper import (Fp8Array, Fp8Meta, fp8_dot_general, fp8_matmul, fp8_meta, quantize_fp8,
                        quantize_weight)
from jax_hopper.gemm.fp8_meta import read_histories
from jax_hopper.gemm.fp8 import hopper_fp8_matmul
from jax_hopper.gemm import dot_general as dg

@pytest.fixture(autouse=True)
def _on_cpu():
    with jax.default_device(jax.devices("cpu")[0]):
        yield


@pytest.mark.parametrize("recipe", ["tensor", "delayed", "block"])
@pytest.mark.parametrize("lead,k,n", [((64,), 256, 128), ((2, 50), 300, 200), ((7,), 40, 24)])
def test_product_and_gradients(rng, recipe, lead, k, n):
    check_fp8_matmul(rng, lead, k, n, recipe)


def test_float32_and_jit(rng):
    check_fp8_matmul(rng, (96,), 160, 144, "block", dtype=jnp.float32, jit=True)


@pytest.mark.parametrize("recipe", ["tensor", "delayed", "block"])
def test_bias_and_residual_in_the_epilogue(rng, recipe):
    # Odd sizes: the padded M and N carry the bias and residual too (sliced off after).
    check_fp8_matmul(rng, (3, 50), 200, 100, recipe, epilogue=True)
    check_fp8_matmul(rng, (64,), 256, 128, recipe, jit=True, epilogue=True)


def test_a_broadcast_residual_gets_its_gradient_summed(rng):
    x = jnp.asarray(rng.standard_normal((4, 32, 64)), jnp.bfloat16)
    w = jnp.asarray(rng.standard_normal((64, 48)), jnp.bfloat16)
    res = jnp.asarray(rng.standard_normal((32, 48)), jnp.float32)  # shared by the batch of 4
    g = jnp.asarray(rng.standard_normal((4, 32, 48)), jnp.bfloat16)
    _, vjp = jax.vjp(lambda r: fp8_matmul(x, w, residual=r), res)
    (dres,) = vjp(g)
    assert dres.shape == res.shape and dres.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(dres), np.asarray(g, np.float32).sum(0), rtol=1e-6)


def test_out_dtype(rng):
    x = jnp.asarray(rng.standard_normal((32, 64)), jnp.bfloat16)
    w = jnp.asarray(rng.standard_normal((64, 48)), jnp.bfloat16)
    assert fp8_matmul(x, w, out_dtype=jnp.float32).dtype == jnp.float32


def test_empty():
    y = fp8_matmul(jnp.zeros((0, 64), jnp.bfloat16), jnp.ones((64, 32), jnp.bfloat16))
    assert y.shape == (0, 32)


@pytest.mark.parametrize("x,w,kwargs,match", [
    (jnp.ones((4, 8), jnp.int8), jnp.ones((8, 4)), {}, "x.dtype"),
    (jnp.ones((4, 8)), jnp.ones((8, 4), jnp.float8_e4m3fn), {}, "w.dtype"),
    (jnp.ones((4, 8)), jnp.ones((2, 8, 4)), {}, r"w \(K, N\)"),
    (jnp.ones((4, 8)), jnp.ones((6, 4)), {}, "last dimension 8"),
    (jnp.ones((4, 8)), jnp.ones((8, 4)), dict(recipe="delayed"), "recipe='delayed' needs meta"),
    (jnp.ones((4, 8)), jnp.ones((8, 4)), dict(recipe="tensor", meta=fp8_meta()), "takes none"),
    (jnp.ones((4, 8)), jnp.ones((8, 4)), dict(recipe="delayed", meta=(1, 2, 3)),
     "got tuple"),
    (jnp.ones((4, 8)), jnp.ones((8, 4)),
     dict(recipe="delayed", meta=Fp8Meta(jnp.zeros(4), jnp.zeros(4), jnp.zeros(3))),
     "one length"),
    (jnp.ones((4, 8)), jnp.ones((8, 4)),
     dict(recipe="delayed", meta=Fp8Meta(*[jnp.zeros(4, jnp.int32)] * 3)), "float32"),
    (jnp.ones((4, 8)), jnp.ones((8, 4)),
     dict(recipe="delayed", meta=Fp8Meta(*[jnp.zeros(4)] * 3)), r"meta.uses .* got None"),
    (jnp.ones((4, 8)), jnp.ones((8, 4)),
     dict(recipe="delayed", meta=Fp8Meta(*[jnp.zeros(4)] * 3, jnp.ones(2))),
     r"meta.uses must be a float32 scalar"),
    (jnp.ones((4, 8)), jnp.ones((8, 4)), dict(out_dtype=jnp.int32), "out_dtype"),
    (jnp.ones((4, 8)), jnp.ones((8, 4)), dict(bias=jnp.ones(8)), r"bias must be .* \(4,\)"),
    (jnp.ones((4, 8)), jnp.ones((8, 4)), dict(bias=jnp.ones(4, jnp.int32)), "bias must be"),
    (jnp.ones((4, 8)), jnp.ones((8, 4)), dict(residual=jnp.ones((3, 4))),
     r"residual must .* broadcast to the result's shape \(4, 4\)"),
])
def test_bad_arguments(x, w, kwargs, match):
    with pytest.raises(ValueError, match=match):
        fp8_matmul(x, w, **kwargs)


def test_dot_general_takes_dense_and_falls_back_otherwise(rng):
    f = fp8_dot_general("block")
    x = jnp.asarray(rng.standard_normal((4, 8, 64)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((64, 2, 16)) / 8, jnp.float32)
    y = f(x, w, (((2,), (0,)), ((), ())))
    assert y.shape == (4, 8, 2, 16)
    assert rel_frob(y, np.einsum("abk,kcd->abcd", np.asarray(x, np.float64),
                                 np.asarray(w, np.float64))) < BOUND["block"]["y"]
    before = sum(dg.FALLBACKS.values())
    batched = f(x, x, (((2,), (2,)), ((0,), (0,))))  # attention-like: batch dims, not a dense
    assert sum(dg.FALLBACKS.values()) == before + 1
    np.testing.assert_allclose(batched, jnp.einsum("abk,ack->abc", x, x), rtol=1e-5)
    with pytest.raises(ValueError, match="recipe"):
        fp8_dot_general("int8")
    with pytest.raises(ValueError, match="call fp8_matmul"):
        fp8_dot_general("delayed")


@pytest.mark.parametrize("recipe", ["tensor", "block"])
def test_flax_dense_trains_in_fp8(rng, recipe):
    flax = pytest.importorskip("flax")  # in the test extras; absent only in a bare install
    from flax import linen as nn
    from flax import nnx

    x = jnp.asarray(rng.standard_normal((64, 32)), jnp.float32)
    target = jnp.asarray(rng.standard_normal((64, 16)), jnp.float32)
    dense = nn.Dense(16, dot_general=fp8_dot_general(recipe))
    ref = nn.Dense(16)
    params = ref.init(jax.random.key(0), x)

    def loss(model, p):
        return jnp.mean((model.apply(p, x) - target) ** 2)

    l8, g8 = jax.value_and_grad(lambda p: loss(dense, p))(params)
    l32, g32 = jax.value_and_grad(lambda p: loss(ref, p))(params)
    assert abs(float(l8) - float(l32)) < 0.05 * float(l32)
    assert rel_frob(g8["params"]["kernel"], g32["params"]["kernel"]) < 0.1
    # Plain SGD on the fp8 layer lowers the loss as the float32 one does.
    p = params
    for _ in range(20):
        p = jax.tree.map(lambda a, g: a - 0.1 * g, p, jax.grad(lambda p: loss(dense, p))(p))
    assert float(loss(dense, p)) < 0.8 * float(l8)

    # nnx: gradients as the float32 layer's with the same initial parameters, and SGD trains.
    layer = nnx.Linear(32, 16, dot_general=fp8_dot_general(recipe), rngs=nnx.Rngs(0))
    ref_layer = nnx.Linear(32, 16, rngs=nnx.Rngs(0))
    assert layer(x).shape == (64, 16)

    def nnx_loss(model):
        return jnp.mean((model(x) - target) ** 2)

    for g8, g32 in zip(jax.tree.leaves(nnx.grad(nnx_loss)(layer)),
                       jax.tree.leaves(nnx.grad(nnx_loss)(ref_layer)), strict=True):
        assert rel_frob(g8, np.asarray(g32, np.float64)) < 0.1
    first = float(nnx_loss(layer))
    for _ in range(20):
        step = jax.tree.map(lambda p, g: p - 0.1 * g, nnx.state(layer, nnx.Param),
                            nnx.grad(nnx_loss)(layer))
        nnx.update(layer, step)
    assert float(nnx_loss(layer)) < 0.8 * first
    del flax


def test_inference_skips_the_transposed_copy_of_x():
    # Only dw needs x^T: a call that is not differentiated quantizes x without it; under vjp
    # both operands come with their transposed copies (the residuals).
    x, w = jnp.ones((32, 64), jnp.bfloat16), jnp.ones((64, 48), jnp.bfloat16)

    def quantizations(f):
        text = " ".join(str(jax.make_jaxpr(f)(x, w)).split())
        return re.findall(r"hopper_quantize_fp8\[[^\]]*transpose=(\w+)", text)

    assert quantizations(lambda x, w: fp8_matmul(x, w, recipe="block")) == ["False", "True"]
    assert quantizations(lambda x, w: jax.vjp(
        lambda x, w: fp8_matmul(x, w, recipe="block"), x, w)[0]) == ["True", "True"]


def _operands(rng, m=64, k=256, n=96):
    x = jnp.asarray(rng.standard_normal((m, k)), jnp.bfloat16)
    w = jnp.asarray(rng.standard_normal((k, n)) / 16, jnp.bfloat16)
    g = jnp.asarray(rng.standard_normal((m, n)) / 1000, jnp.bfloat16)
    return x, w, g


def test_delayed_with_current_amaxes_is_the_tensor_recipe(rng):
    # Histories whose largest entries are this step's amaxes scale as "tensor" does: the same
    # bits forward and backward.
    x, w, g = _operands(rng)
    meta = Fp8Meta(*(jnp.asarray([amax_of(a) / 3, amax_of(a), 0.0]) for a in (x, w, g)),
                   uses=jnp.float32(1))
    y_d, vjp_d = jax.vjp(lambda x, w: fp8_matmul(x, w, recipe="delayed", meta=meta), x, w)
    y_t, vjp_t = jax.vjp(lambda x, w: fp8_matmul(x, w, recipe="tensor"), x, w)
    for got, want in zip((y_d, *vjp_d(g)), (y_t, *vjp_t(g))):
        np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))


def test_delayed_fresh_meta_scales_by_one(rng):
    x, w, _ = _operands(rng)
    y = fp8_matmul(x, w, recipe="delayed", meta=fp8_meta(4))
    e4m3_max = 448.0  # an amax of fp8 max: a scale of 1
    xq, wq = quantize_fp8(x, amax=e4m3_max), quantize_fp8(w, amax=e4m3_max, transpose=True)
    assert float(xq.scale) == 1.0
    want = hopper_fp8_matmul(xq.q, wq.q_t, xq.scale, wq.scale_t, out_dtype=jnp.bfloat16)
    np.testing.assert_array_equal(np.asarray(y, np.float32), np.asarray(want, np.float32))


def test_delayed_training_fills_the_histories(rng):
    # Each step's meta gradient is the histories pushed on by the amaxes that step saw; after
    # the first step the scales come from them, and the loss falls as in float32.
    x, w, _ = _operands(rng)
    target = jnp.asarray(rng.standard_normal((64, 96)), jnp.float32)

    def loss(w, meta):
        y = fp8_matmul(x, w, recipe="delayed", meta=meta).astype(jnp.float32)
        return jnp.mean((y - target) ** 2)

    step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
    meta, seen = fp8_meta(3), []
    losses = []
    for _ in range(4):
        l, (gw, meta) = step(w, meta)
        seen.append(amax_of(w))
        w = (w.astype(jnp.float32) - 0.5 * gw.astype(jnp.float32)).astype(jnp.bfloat16)
        losses.append(float(l))
    np.testing.assert_array_equal(meta.w, np.asarray(seen[::-1][:3], np.float32))
    np.testing.assert_array_equal(meta.x, np.full(3, amax_of(x), np.float32))
    assert np.all(np.asarray(meta.grad) > 0)
    assert losses[-1] < losses[1] < losses[0] * 1.01


def test_delayed_stale_history_saturates(rng):
    # An amax history far below the data: every value saturates to fp8 max, finite.
    x, w, _ = _operands(rng)
    meta = Fp8Meta(*(jnp.full((2,), 1e-3, jnp.float32),) * 3, uses=jnp.float32(1))
    y = np.asarray(fp8_matmul(x, w, recipe="delayed", meta=meta), np.float32)
    assert np.all(np.isfinite(y))


def test_delayed_inf_stays_non_finite_and_does_not_poison_later_steps(rng):
    # An Inf in x under its history's amax: that step's product is not finite where the exact
    # one is not (quantize_fp8 keeps an Inf NaN), the Inf is recorded, and the next step,
    # whose history holds it, scales by the finite entries: finite again, as the float one.
    x, w, _ = _operands(rng)
    meta = Fp8Meta(*(jnp.full((3,), 4.0, jnp.float32),) * 3, uses=jnp.float32(1))
    step = jax.jit(jax.value_and_grad(
        lambda x, w, m: fp8_matmul(x, w, recipe="delayed", meta=m).astype(jnp.float32).sum(),
        argnums=(1, 2)))
    bad = x.at[5, 7].set(jnp.inf)
    y = np.asarray(fp8_matmul(bad, w, recipe="delayed", meta=meta), np.float32)
    assert not np.all(np.isfinite(y[5])) and np.all(np.isfinite(np.delete(y, 5, axis=0)))
    _, (dw, meta) = step(bad, w, meta)
    assert float(meta.x[0]) == np.inf and not np.all(np.isfinite(np.asarray(dw, np.float32)))
    y = np.asarray(fp8_matmul(x, w, recipe="delayed", meta=meta), np.float32)
    assert np.all(np.isfinite(y))


def test_delayed_step_has_no_amax_pass_over_a_tensor():
    # The amaxes come from histories (rank 1) and the kernel's records: no reduction over a
    # whole operand (all its dimensions), which "tensor" has for x, w and dy.
    x, w, g = (jnp.ones(s, jnp.bfloat16) for s in ((256, 512), (512, 384), (256, 384)))

    def whole_reductions(recipe, meta):
        def step(x, w, g):
            y, vjp = jax.vjp(lambda x, w: fp8_matmul(x, w, recipe=recipe, meta=meta), x, w)
            return y, vjp(g)
        return len(re.findall(r"across dimensions = \[0, 1\]",
                              jax.jit(step).lower(x, w, g).as_text()))

    assert whole_reductions("tensor", None) == 3
    assert whole_reductions("delayed", fp8_meta()) == 0


def _scan_loss(x, target):
    """The loss of a lax.scan over x's micro-batches (leading axis), every step reading one
    meta (and w): autodiff adds the steps' pushed histories up as meta's gradient."""
    def loss(w, meta):
        def body(total, batch):
            xb, tb = batch
            y = fp8_matmul(xb, w, recipe="delayed", meta=meta).astype(jnp.float32)
            return total + jnp.mean((y - tb) ** 2), None
        return jax.lax.scan(body, jnp.float32(0), (x, target))[0]
    return loss


def test_delayed_meta_read_by_several_calls_in_one_gradient(rng):
    # Four micro-batches reading one meta, step after step: its gradient counts 4 uses, each
    # call reads the histories as they were (the older entries exact), the newest entry is the
    # sum of the 4 amaxes (an upper bound on their largest), and the gradients stay within the
    # recipe's bound. Without the count the summed histories grew 4x a step (L = 16) and the
    # weight gradient was exactly 0 from step 11.
    scales = np.asarray([1.0, 2.0, 3.0, 0.5])
    x = jnp.asarray(rng.standard_normal((4, 32, 64)) * scales[:, None, None], jnp.bfloat16)
    w = jnp.asarray(rng.standard_normal((64, 48)) / 8, jnp.float32)
    target = jnp.asarray(rng.standard_normal((4, 32, 48)), jnp.float32)
    step = jax.jit(jax.grad(_scan_loss(x, target), argnums=(0, 1)))
    want = jax.grad(lambda w: sum(jnp.mean((x[i].astype(jnp.float32) @ w - target[i]) ** 2)
                                  for i in range(4)))(w)
    meta = fp8_meta()
    for i in range(14):
        gw, new = step(w, meta)
        read, before = read_histories(new), read_histories(meta)
        assert float(new.uses) == 4.0
        for got, old in zip(read[:3], before[:3]):
            np.testing.assert_allclose(got[1:], old[:-1], rtol=1e-6)
        np.testing.assert_allclose(read.x[0], sum(amax_of(x[i]) for i in range(4)), rtol=1e-6)
        np.testing.assert_allclose(read.w[0], 4 * amax_of(w), rtol=1e-6)
        if i > 0:  # the first step's fresh histories scale by 1 (module docstring)
            assert rel_frob(gw, want) < BOUND["delayed"]["dw"], i
        meta = new


def test_delayed_meta_of_a_layer_applied_twice_and_of_summed_gradients(rng):
    # One call site applied twice counts two uses (x's newest entry: both inputs' amaxes
    # summed); two gradients added up, as a training loop accumulating them does, count as
    # many as their calls: read, their older entries are the history either call read.
    x, w, _ = _operands(rng, k=96)
    w = w[:, :96]
    meta = _calibrated(x, w)

    def twice(x, w, meta):
        h = fp8_matmul(x, w, recipe="delayed", meta=meta)
        return fp8_matmul(h, w, recipe="delayed", meta=meta).astype(jnp.float32).sum()
    h = fp8_matmul(x, w, recipe="delayed", meta=meta)
    dmeta = jax.grad(twice, argnums=2)(x, w, meta)
    assert float(dmeta.uses) == 2.0
    np.testing.assert_allclose(read_histories(dmeta).x, [amax_of(x) + amax_of(h), amax_of(x)],
                               rtol=1e-6)

    once = jax.grad(lambda x, meta: fp8_matmul(x, w, recipe="delayed", meta=meta)
                    .astype(jnp.float32).sum(), argnums=1)
    summed = jax.tree.map(jnp.add, once(x, meta), once(2 * x, meta))
    assert float(summed.uses) == 2.0
    np.testing.assert_allclose(read_histories(summed).x, [3 * amax_of(x), amax_of(x)], rtol=1e-6)
    np.testing.assert_array_equal(read_histories(summed).w[1:], meta.w[:1])


def test_delayed_meta_no_call_reached_is_fresh(rng):
    # A meta whose call does not reach the loss gets a zero gradient (uses 0): read, a fresh
    # history, scaling by 1.
    x, w, _ = _operands(rng)
    dmeta = jax.grad(lambda meta: jnp.sum(x.astype(jnp.float32)) +
                     0 * jnp.sum(meta.x), allow_int=True)(fp8_meta(2))
    assert float(dmeta.uses) == 0.0
    y = fp8_matmul(x, w, recipe="delayed", meta=dmeta)
    np.testing.assert_array_equal(np.asarray(y, np.float32), np.asarray(
        fp8_matmul(x, w, recipe="delayed", meta=fp8_meta(2)), np.float32))


def test_fp8_meta_length():
    assert fp8_meta(5).x.shape == (5,)
    with pytest.raises(ValueError, match="length=0"):
        fp8_meta(0)



def _vmapped_step(meta_axis, w_axis=None):
    """value, (dx, dw, dmeta) of sum(vmap(fp8_matmul delayed) ** 2) over x's leading axis."""
    def loss(x, w, meta):
        f = lambda x, w, meta: fp8_matmul(x, w, recipe="delayed", meta=meta)  # noqa: E731
        return jnp.sum(jax.vmap(f, in_axes=(0, w_axis, meta_axis))(x, w, meta)
                       .astype(jnp.float32) ** 2)
    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))


def _calibrated(x, w):
    return Fp8Meta(*(jnp.asarray([amax_of(a), 0.0], jnp.float32) for a in (x, w, x)),
                   uses=jnp.float32(1))


def _entries(rng, scales=(1.0, 4.0, 0.5)):
    x = jnp.asarray(rng.standard_normal((len(scales), 32, 64)) *
                    np.asarray(scales)[:, None, None], jnp.bfloat16)
    w = jnp.asarray(rng.standard_normal((64, 48)) / 8, jnp.bfloat16)
    return x, w


def test_delayed_vmap_shares_an_unmapped_meta(rng):
    # x mapped, w and meta shared: every entry scales by the same histories, so y has the bits
    # of the entries stacked into one call's leading dimension, and meta's gradient pushes the
    # largest amax over the entries (vmap alone would add the entries' pushed histories up).
    x, w = _entries(rng)
    meta = _calibrated(x, w)
    (l, (dx, dw, dmeta)) = _vmapped_step(None)(x, w, meta)

    def stacked(x, w, meta):
        return jnp.sum(fp8_matmul(x, w, recipe="delayed", meta=meta).astype(jnp.float32) ** 2)
    l_s, (dx_s, dw_s, dmeta_s) = jax.jit(jax.value_and_grad(stacked, argnums=(0, 1, 2)))(
        x, w, meta)
    assert float(l) == float(l_s)
    np.testing.assert_array_equal(np.asarray(dx, np.float32), np.asarray(dx_s, np.float32))
    # dw: vmap adds the entries' bf16 products, the stacked call one fp32-accumulated product.
    assert rel_frob(dw, dw_s) < 1e-2
    for got, want in zip(dmeta, dmeta_s):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert float(dmeta.x[0]) == amax_of(x) == amax_of(x[1])
    assert float(dmeta.w[0]) == amax_of(w) and float(dmeta.x[1]) == amax_of(x)


def test_delayed_vmap_with_a_mapped_meta_keeps_one_per_entry(rng):
    x, w = _entries(rng, (1.0, 4.0))
    metas = jax.tree.map(lambda *h: jnp.stack(h), _calibrated(x[0], w), _calibrated(x[1], w))
    _, (_, _, dmeta) = _vmapped_step(0)(x, w, metas)

    def one(x, meta):
        return jnp.sum(fp8_matmul(x, w, recipe="delayed", meta=meta).astype(jnp.float32) ** 2)
    for i in range(2):
        want = jax.grad(one, argnums=1)(x[i], jax.tree.map(lambda h: h[i], metas))
        for got, w_i in zip(jax.tree.map(lambda h: h[i], dmeta), want):
            np.testing.assert_array_equal(np.asarray(got), np.asarray(w_i))
    assert float(dmeta.x[0, 0]) == amax_of(x[0]) and float(dmeta.x[1, 0]) == amax_of(x[1])


def test_delayed_vmap_over_w_and_a_partly_mapped_meta(rng):
    # Entries with their own weights and one w history: it records the largest weight's amax;
    # x's history mapped (one per entry), the others shared.
    x, _ = _entries(rng, (1.0, 3.0))
    ws = jnp.asarray(rng.standard_normal((2, 64, 48)) * np.asarray([0.1, 0.2])[:, None, None],
                     jnp.bfloat16)
    meta = Fp8Meta(jnp.stack([_calibrated(x[i], ws[i]).x for i in range(2)]),
                   _calibrated(x, ws).w, _calibrated(x, ws).grad, jnp.float32(1))
    step = _vmapped_step(Fp8Meta(0, None, None), w_axis=0)
    _, (_, _, dmeta) = step(x, ws, meta)
    assert dmeta.x.shape == (2, 2) and dmeta.w.shape == (2,)
    assert [float(dmeta.x[i, 0]) for i in range(2)] == [amax_of(x[0]), amax_of(x[1])]
    assert float(dmeta.w[0]) == amax_of(ws) == amax_of(ws[1])
    assert np.all(np.isfinite(np.asarray(dmeta.grad))) and float(dmeta.grad[0]) > 0


@pytest.mark.parametrize("recipe", ["tensor", "block"])
@pytest.mark.parametrize("lead,k,n", [((64,), 256, 128), ((2, 50), 300, 200), ((7,), 40, 24)])
def test_serving_on_a_quantized_weight_is_the_training_calls_forward(rng, recipe, lead, k, n):
    """quantize_weight's copy gives exactly the training call's y, with the epilogue, where
    K and N need padding too (the quantized w^T is padded with zeros at the call), under jit
    and vmap; "delayed" serves as "tensor" (no histories)."""
    x = jnp.asarray(rng.standard_normal((2, *lead, k)), jnp.bfloat16)
    w = jnp.asarray(rng.standard_normal((k, n)) / np.sqrt(k), jnp.bfloat16)
    bias = jnp.asarray(rng.standard_normal(n), jnp.float32)
    wq = quantize_weight(w, recipe=recipe)
    assert wq.q.shape == (n, k) and wq.q.dtype == jnp.float8_e4m3fn
    def call(weight, recipe=recipe):  # both under the same jit and vmap: one summation order
        return jax.jit(jax.vmap(lambda x: fp8_matmul(x, weight, recipe=recipe, bias=bias,
                                                     residual=x[..., :1])))(x)
    served = call(wq)
    np.testing.assert_array_equal(np.asarray(served), np.asarray(call(w)))
    if recipe == "tensor":
        delayed = call(quantize_weight(w, recipe="delayed"), recipe="delayed")
        np.testing.assert_array_equal(np.asarray(delayed), np.asarray(served))


def test_serving_is_forward_only():
    x, wq = jnp.ones((32, 64), jnp.bfloat16), quantize_weight(jnp.ones((64, 48), jnp.bfloat16))
    with pytest.raises(TypeError, match=r"forward-only, for serving"):
        jax.grad(lambda x: fp8_matmul(x, wq).astype(jnp.float32).sum())(x)
    empty = fp8_matmul(jnp.zeros((0, 64), jnp.bfloat16), wq, bias=jnp.ones(48))
    assert empty.shape == (0, 48)


_WQ = quantize_weight(jnp.ones((32, 24), jnp.bfloat16))


@pytest.mark.parametrize("wq,kwargs,match", [
    (_WQ, dict(recipe="block"), r"w.scale is float32\[\], but quantize_weight\("
                                r"recipe='block'\) makes float32\[1, 1\]"),
    (_WQ._replace(q=_WQ.q.astype(jnp.float8_e5m2)), {}, r"w.q is float8_e5m2"),
    (_WQ, dict(recipe="delayed", meta=fp8_meta()), r"meta is for training"),
    (Fp8Array(_WQ.q[None], _WQ.scale), {}, r"holds w\^T \(N, K\) from quantize_weight"),
    (_WQ, dict(k=24), r"last dimension 24 != w's first 32"),
])
def test_serving_bad_arguments_name_the_rule(wq, kwargs, match):
    x = jnp.zeros((16, kwargs.pop("k", 32)), jnp.bfloat16)
    with pytest.raises(ValueError, match=match):
        fp8_matmul(x, wq, **kwargs)


@pytest.mark.parametrize("w,recipe,match", [
    (jnp.ones((2, 32, 24), jnp.bfloat16), "tensor", r"w must be \(K, N\)"),
    (jnp.ones((32, 24), jnp.float8_e4m3fn), "tensor", r"float8_e4m3fn"),
    (jnp.ones((32, 24), jnp.bfloat16), "amax", r"recipe='amax' must be one of"),
])
def test_quantize_weight_bad_arguments(w, recipe, match):
    with pytest.raises(ValueError, match=match):
        quantize_weight(w, recipe=recipe)


_E4M3 = jnp.float8_e4m3fn
_F32 = jnp.float32


@pytest.mark.parametrize("case", ["hopper_fp8_matmul", "hopper_ragged_fp8_dot",
                                  "hopper_ragged_fp8_contract", "quantize_fp8",
                                  "transpose_fp8", "fp8_matmul_second_order"])
def test_ops_without_a_derivative_say_so(case):
    """The forward-only fp8 ops (and a gradient of fp8_matmul's gradient) refuse
    differentiation with a TypeError naming the op, not jax's error about custom_partitioning."""
    from jax_hopper import hopper_ragged_fp8_contract, hopper_ragged_fp8_dot, transpose_fp8
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((32, 64)), jnp.bfloat16)
    w = jnp.asarray(rng.standard_normal((64, 48)) * 0.1, jnp.bfloat16)
    x8, w8_t = x.astype(_E4M3), w.T.astype(_E4M3)
    gs = jnp.asarray([20, 12], jnp.int32)
    one = _F32(1.0)
    losses = {
        "hopper_fp8_matmul": (lambda s: hopper_fp8_matmul(x8, w8_t, s, one), one),
        "hopper_ragged_fp8_dot": (lambda s: hopper_ragged_fp8_dot(
            x8, jnp.stack([w8_t, w8_t]), gs, s, one, transpose_rhs=True), one),
        "hopper_ragged_fp8_contract": (lambda s: hopper_ragged_fp8_contract(
            x8.T, w8_t[:, :32], gs, s, one), one),
        "quantize_fp8": (lambda x: quantize_fp8(x).q, x),
        "transpose_fp8": (lambda x: transpose_fp8(x.astype(_E4M3)), x.astype(_F32)),
        "fp8_matmul_second_order": (lambda w: jax.grad(
            lambda x: fp8_matmul(x, w).astype(_F32).sum())(x), w),
    }
    f, arg = losses[case]
    name = "quantize_fp8" if case == "fp8_matmul_second_order" else case
    with pytest.raises(TypeError, match=f"^{name} has no derivative"):
        jax.grad(lambda a: f(a).astype(_F32).sum())(arg)
