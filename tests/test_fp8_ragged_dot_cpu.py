"""fp8_ragged_dot through the references (no kernel): the product and both gradients against
float64 within each recipe's fp8 bound (delayed: its histories pushed on), group sizes of every
kind (empty groups, sums below and above M, negative), shapes that need padding, float32
inputs, jit and vmap, delayed training steps, bad arguments; serving on quantize_experts'
weights (the training call's forward exactly, forward-only, its own bad arguments)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gemm_helpers import check_fp8_ragged_dot

from jax_hopper import (Fp8Array, fp8_meta, fp8_ragged_dot, hopper_ragged_fp8_dot,
                        quantize_experts, quantize_fp8)
from jax_hopper.gemm.fp8_meta import read_histories


@pytest.fixture(autouse=True)
def _on_cpu():
    with jax.default_device(jax.devices("cpu")[0]):
        yield


@pytest.mark.parametrize("recipe", ["tensor", "delayed", "block"])
@pytest.mark.parametrize("m,k,n,sizes", [(300, 256, 200, [100, 0, 150, 30]),
                                         (130, 200, 136, [-4, 60, 2**20]),
                                         (64, 40, 24, [64]),
                                         (96, 128, 128, [0, 0])])
def test_product_and_gradients(rng, recipe, m, k, n, sizes):
    check_fp8_ragged_dot(rng, m, k, n, sizes, recipe)


def test_float32_and_jit(rng):
    check_fp8_ragged_dot(rng, 160, 256, 144, [50, 60, 40], "block", dtype=jnp.float32, jit=True)


def test_forward_is_the_fp8_grouped_gemm_on_quantize_fp8s_copies(rng):
    """The tensor recipe's operands: x one scale, each expert its own (vmap), w transposed."""
    x = jnp.asarray(rng.standard_normal((64, 128)), jnp.bfloat16)
    w = jnp.asarray(rng.standard_normal((3, 128, 96)) * np.asarray([[[1.0]], [[8.0]], [[0.1]]]),
                    jnp.bfloat16)
    gs = jnp.asarray([20, 30, 14], jnp.int32)
    xq = quantize_fp8(x)
    wq = jax.vmap(lambda e: quantize_fp8(e, transpose=True))(w)
    assert wq.scale.shape == (3,) and len(set(np.asarray(wq.scale).tolist())) == 3
    want = hopper_ragged_fp8_dot(xq.q, wq.q_t, gs, xq.scale, wq.scale_t)
    np.testing.assert_array_equal(np.asarray(fp8_ragged_dot(x, w, gs)), np.asarray(want))


@pytest.mark.parametrize("recipe", ["tensor", "block"])
def test_vmap_matches_the_loop(rng, recipe):
    """Gradients under vmap, the experts' weights shared by the entries and mapped with them."""
    x = jnp.asarray(rng.standard_normal((2, 48, 64)), jnp.bfloat16)
    w = jnp.asarray(rng.standard_normal((2, 3, 64, 40)), jnp.bfloat16)
    gs = jnp.asarray([[10, 20, 18], [0, 48, 0]], jnp.int32)

    def loss(x, w, g):
        return fp8_ragged_dot(x, w, g, recipe=recipe).astype(jnp.float32).sum()

    grads = jax.grad(loss, (0, 1))
    shared = jax.jit(jax.vmap(grads, (0, None, 0)))(x, w[0], gs)
    mapped = jax.jit(jax.vmap(grads))(x, w, gs)
    for i in range(2):  # each entry's (d lhs, d rhs), shared weights or not
        for got, want in [*zip(shared, grads(x[i], w[0], gs[i])),
                          *zip(mapped, grads(x[i], w[i], gs[i]))]:
            np.testing.assert_array_equal(np.asarray(got[i]), np.asarray(want))


def test_out_dtype_and_empty():
    x, w = jnp.ones((32, 64), jnp.bfloat16), jnp.ones((2, 64, 48), jnp.bfloat16)
    gs = jnp.asarray([16, 16], jnp.int32)
    assert fp8_ragged_dot(x, w, gs, out_dtype=jnp.float32).dtype == jnp.float32
    empty = fp8_ragged_dot(jnp.zeros((0, 64), jnp.bfloat16), w, jnp.zeros((2,), jnp.int32))
    assert empty.shape == (0, 48) and empty.dtype == jnp.bfloat16


@pytest.mark.parametrize("kwargs,match", [
    (dict(recipe="amax"), r"recipe='amax' must be one of \('tensor', 'delayed', 'block'\)"),
    (dict(recipe="delayed"), r"recipe='delayed' needs meta=jax_hopper.fp8_meta\(length, "
                             r"experts=G\)"),
    (dict(recipe="delayed", meta=fp8_meta(4)),
     r"meta's histories must be float32 x \(L,\), w \(G, L\) = \(2, L\) and grad"),
    (dict(meta=fp8_meta(4, experts=2)), r"recipe 'tensor' takes none"),
    (dict(x_dtype=jnp.float8_e4m3fn), r"lhs.dtype=float8_e4m3fn must be one of"),
    (dict(k=24), r"lhs must be \(M, K\) and rhs \(G, K, N\) with the same K"),
    (dict(group_sizes=jnp.ones((3,), jnp.int32)), r"group_sizes must be an integer array"),
    (dict(out_dtype=jnp.int8), r"out_dtype=int8 must be one of"),
])
def test_bad_arguments_name_the_rule(kwargs, match):
    x = jnp.zeros((16, kwargs.pop("k", 32)), kwargs.pop("x_dtype", jnp.bfloat16))
    w = jnp.zeros((2, 32, 24), jnp.bfloat16)
    gs = kwargs.pop("group_sizes", jnp.asarray([8, 8], jnp.int32))
    with pytest.raises(ValueError, match=match):
        fp8_ragged_dot(x, w, gs, **kwargs)


def test_delayed_training_steps_replace_meta_by_its_gradient(rng):
    """Three steps from a fresh meta: each step's histories hold the amaxes seen so far, one
    per expert for w, newest first; the scales they give keep the product within bounds."""
    x = jnp.asarray(rng.standard_normal((96, 64)), jnp.bfloat16)
    spread = np.asarray([1.0, 4.0, 0.25])[:, None, None]  # experts of different magnitudes
    w = jnp.asarray(rng.standard_normal((3, 64, 32)) * spread, jnp.bfloat16)
    gs = jnp.asarray([30, 40, 26], jnp.int32)
    meta = fp8_meta(4, experts=3)

    @jax.jit
    def step(w, meta):
        def loss(w, meta):
            return fp8_ragged_dot(x, w, gs, recipe="delayed", meta=meta).astype(
                jnp.float32).sum()
        dw, new_meta = jax.grad(loss, (0, 1))(w, meta)
        return w - 1e-3 * dw.astype(w.dtype), new_meta

    for i in range(3):
        seen = np.abs(np.asarray(w, np.float32)).max(axis=(1, 2))
        w, meta = step(w, meta)
        np.testing.assert_array_equal(np.asarray(meta.w)[:, 0], seen)
        assert np.count_nonzero(np.asarray(meta.x)) == i + 1
    assert meta.w.shape == (3, 4) and meta.grad.shape == (4,)


def test_delayed_meta_read_by_two_calls(rng):
    """Two calls reading one meta in one gradient (two micro-batches): it counts two uses, and
    read, each history is as those calls read it but for the newest entry, the sum of their
    amaxes (w's, per expert, twice its own)."""
    x = jnp.asarray(rng.standard_normal((2, 96, 64)) * np.asarray([1.0, 3.0])[:, None, None],
                    jnp.bfloat16)
    w = jnp.asarray(rng.standard_normal((3, 64, 32)) * np.asarray([1.0, 4.0, 0.25])[:, None, None],
                    jnp.bfloat16)
    gs = jnp.asarray([30, 40, 26], jnp.int32)
    meta = fp8_meta(3, experts=3)

    def loss(w, meta):
        return sum(fp8_ragged_dot(x[i], w, gs, recipe="delayed", meta=meta).astype(
            jnp.float32).sum() for i in range(2))
    for _ in range(2):
        before = read_histories(meta)
        meta = jax.jit(jax.grad(loss, argnums=1))(w, meta)
        read = read_histories(meta)
        assert float(meta.uses) == 2.0
        for got, old in zip(read[:3], before[:3]):
            np.testing.assert_allclose(np.asarray(got)[..., 1:], np.asarray(old)[..., :-1],
                                       rtol=1e-6)
        np.testing.assert_allclose(read.w[:, 0], 2 * np.abs(np.asarray(w, np.float32)).max(
            axis=(1, 2)), rtol=1e-6)
        np.testing.assert_allclose(read.x[0], float(np.abs(np.asarray(x[0], np.float32)).max() +
                                                    np.abs(np.asarray(x[1], np.float32)).max()),
                                   rtol=1e-6)


@pytest.mark.parametrize("recipe", ["tensor", "block"])
def test_serving_on_quantized_experts_is_the_training_calls_forward(rng, recipe):
    """quantize_experts' weights give exactly the training call's y (the same quantization,
    done once), under jit and vmap; "delayed" serves as "tensor" (no histories)."""
    x = jnp.asarray(rng.standard_normal((2, 300, 200)), jnp.bfloat16)
    w = jnp.asarray(rng.standard_normal((4, 200, 136)) / 14, jnp.bfloat16)
    gs = jnp.asarray([100, 0, 150, 30], jnp.int32)
    wq = quantize_experts(w, recipe=recipe)
    assert wq.q.shape == (4, 136, 200) and wq.q.dtype == jnp.float8_e4m3fn
    served = jax.jit(jax.vmap(lambda x: fp8_ragged_dot(x, wq, gs, recipe=recipe)))(x)
    for i in range(2):
        want = fp8_ragged_dot(x[i], w, gs, recipe=recipe)
        np.testing.assert_array_equal(np.asarray(served[i]), np.asarray(want))
    if recipe == "tensor":
        delayed = fp8_ragged_dot(x[0], quantize_experts(w, recipe="delayed"), gs,
                                 recipe="delayed")
        np.testing.assert_array_equal(np.asarray(delayed), np.asarray(served[0]))


def test_serving_is_forward_only():
    x, w = jnp.ones((32, 64), jnp.bfloat16), jnp.ones((2, 64, 48), jnp.bfloat16)
    wq, gs = quantize_experts(w), jnp.asarray([16, 16], jnp.int32)
    with pytest.raises(TypeError, match=r"forward-only, for serving"):
        jax.grad(lambda x: fp8_ragged_dot(x, wq, gs).astype(jnp.float32).sum())(x)
    empty = fp8_ragged_dot(jnp.zeros((0, 64), jnp.bfloat16), wq, gs, out_dtype=jnp.float32)
    assert empty.shape == (0, 48) and empty.dtype == jnp.float32


_WQ = quantize_experts(jnp.ones((2, 32, 24), jnp.bfloat16))


@pytest.mark.parametrize("rhs,kwargs,match", [
    (_WQ, dict(recipe="block"), r"rhs.scale is float32\[2\], but quantize_experts\("
                                r"recipe='block'\) makes float32\[2, 1, 1\]"),
    (_WQ._replace(q=_WQ.q.astype(jnp.float8_e5m2)), {}, r"rhs.q is float8_e5m2"),
    (_WQ, dict(meta=fp8_meta(4, experts=2)), r"meta is for training"),
    (Fp8Array(_WQ.q[0], _WQ.scale), {}, r"holds w\^T \(G, N, K\) from quantize_experts"),
    (_WQ, dict(k=24), r"lhs must be \(M, K\) and rhs \(G, K, N\) with the same K"),
])
def test_serving_bad_arguments_name_the_rule(rhs, kwargs, match):
    x = jnp.zeros((16, kwargs.pop("k", 32)), jnp.bfloat16)
    with pytest.raises(ValueError, match=match):
        fp8_ragged_dot(x, rhs, jnp.asarray([8, 8], jnp.int32), **kwargs)


@pytest.mark.parametrize("rhs,recipe,match", [
    (jnp.ones((32, 24), jnp.bfloat16), "tensor", r"rhs must be \(G, K, N\)"),
    (jnp.ones((2, 32, 24), jnp.float8_e4m3fn), "tensor", r"float8_e4m3fn"),
    (jnp.ones((2, 32, 24), jnp.bfloat16), "amax", r"recipe='amax' must be one of"),
])
def test_quantize_experts_bad_arguments(rhs, recipe, match):
    with pytest.raises(ValueError, match=match):
        quantize_experts(rhs, recipe=recipe)
