"""hopper_ragged_glu without a GPU: the reference lowering against float64 (every activation,
bias, residual, adversarial sizes), gradients against jax.grad of the same unit in jnp, vmap,
empty problems, the config choice and the argument errors."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemm_helpers import (REL_FROB_BOUND, check_ragged_glu_entry_grads, count_eqns,
                          emulate_contraction_kernel, emulate_grouped_kernel,
                          ragged_glu_reference64, random_operand, rel_frob, to64)
from jax_hopper import GemmConfig, hopper_ragged_glu
from jax_hopper.gemm.heuristics import choose_grouped_glu_config
from jax_hopper.kernels import catalog


@pytest.mark.parametrize("activation", [a for a, _ in catalog.ACTIVATIONS])
@pytest.mark.parametrize("sizes", [[30, 0, -2, 50], [2**31 - 1, 5, 0, 0], [0, 0, 0, 0]], ids=str)
def test_reference_against_float64(rng, activation, sizes):
    x = random_operand(rng, (100, 32), "bfloat16")
    w = random_operand(rng, (4, 32, 2, 24), "bfloat16")
    bias = jnp.asarray(rng.standard_normal((4, 2, 24)), jnp.float32)
    res = random_operand(rng, (100, 24), "float32")
    got = jax.jit(lambda *a: hopper_ragged_glu(*a[:3], bias=a[3], residual=a[4], alpha=0.5,
                                               beta=-1.0, activation=activation,
                                               out_dtype=jnp.float32))(
        x, w, jnp.asarray(sizes, jnp.int32), bias, res)
    want = ragged_glu_reference64(x, w, sizes, activation=activation, bias=bias, residual=res,
                                  alpha=0.5, beta=-1.0)
    assert got.shape == (100, 24) and rel_frob(got, want) < REL_FROB_BOUND["float32"]


def test_any_pitch_runs_on_the_kernel(rng):
    """K = 37 and F = 45 (no whole 16-byte rows): x and the weights padded along K to 40, the
    weights (and bias, residual) along F to 48; the kernel's primitive bound on those, the
    result sliced, no fallback."""
    x = random_operand(rng, (100, 37), "bfloat16")
    w = random_operand(rng, (3, 37, 2, 45), "bfloat16")
    bias = jnp.asarray(rng.standard_normal((3, 2, 45)), jnp.float32)
    res = random_operand(rng, (100, 45), "bfloat16")
    sizes = jnp.asarray([30, 0, 50], jnp.int32)

    def f(*a):
        return hopper_ragged_glu(*a[:3], bias=a[3], residual=a[4], activation="gelu_tanh")

    binds = [line for line in str(jax.make_jaxpr(f)(x, w, sizes, bias, res)).splitlines()
             if "= hopper_ragged_dot[" in line]
    assert binds and all("[1,100,48]" in line for line in binds), binds
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = f(x, w, sizes, bias, res)
    want = ragged_glu_reference64(x, w, [30, 0, 50], activation="gelu_tanh", bias=bias,
                                  residual=res)
    assert got.shape == (100, 45) and rel_frob(got, want) < REL_FROB_BOUND["bfloat16"]


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_grads_equal_the_jnp_unit(rng, alpha):
    m, k, f, g = 90, 16, 8, 3
    x, w = random_operand(rng, (m, k), "float16"), random_operand(rng, (g, k, 2, f), "float16")
    bias = jnp.asarray(rng.standard_normal((g, 2, f)), jnp.float32)
    sizes = jnp.asarray([30, 0, 40], jnp.int32)  # 20 rows past every group
    dy = random_operand(rng, (m, f), "float32")

    def jnp_unit(x, w, bias):
        rows = jnp.repeat(jnp.arange(g + 1), np.array([30, 0, 40, 20]), total_repeat_length=m)
        wp = jnp.concatenate([w, jnp.zeros((1, k, 2, f), w.dtype)])[rows].astype(jnp.float32)
        bp = jnp.concatenate([bias, jnp.zeros((1, 2, f))])[rows]
        valid = (rows < g)[:, None]
        xf = alpha * x.astype(jnp.float32)
        gate = jnp.einsum("mk,mkf->mf", xf, wp[:, :, 0]) + bp[:, 0] * valid
        up = jnp.einsum("mk,mkf->mf", xf, wp[:, :, 1]) + bp[:, 1] * valid
        return jax.nn.silu(gate) * up

    got = jax.grad(lambda *a: jnp.sum(hopper_ragged_glu(
        *a[:2], sizes, bias=a[2], alpha=alpha, out_dtype=jnp.float32) * dy),
        (0, 1, 2))(x, w, bias)
    want = jax.grad(lambda *a: jnp.sum(jnp_unit(*a) * dy), (0, 1, 2))(x, w, bias)
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert rel_frob(a, to64(b)) < 1e-2


@pytest.mark.parametrize("mapped_w", [False, True], ids=["shared_w", "w_per_entry"])
def test_vmap_over_tokens(rng, mapped_w):
    """One launch over every entry (ragged_primitive.fold_entries), no loop; the weights
    shared or one per entry."""
    x = random_operand(rng, (2, 60, 16), "bfloat16")
    w = random_operand(rng, (2, 3, 16, 2, 8) if mapped_w else (3, 16, 2, 8), "bfloat16")
    sizes = np.array([[20, 20, 20], [0, 60, 0]])
    fn = jax.vmap(lambda x, w, s: hopper_ragged_glu(x, w, s, out_dtype=jnp.float32),
                  in_axes=(0, 0 if mapped_w else None, 0))
    jaxpr = jax.make_jaxpr(fn)(x, w, jnp.asarray(sizes, jnp.int32)).jaxpr
    assert count_eqns(jaxpr, ("hopper_ragged_dot", "scan", "while")) == 1
    out = fn(x, w, jnp.asarray(sizes, jnp.int32))
    for i in range(2):
        assert rel_frob(out[i], ragged_glu_reference64(x[i], w[i] if mapped_w else w,
                                                       sizes[i])) < 1e-4


@pytest.mark.parametrize("mapped_w", [False, True], ids=["shared_w", "w_per_entry"])
def test_vmap_feeds_the_kernel_each_entrys_tiles(rng, kernel_emulation, mapped_w):
    """The folded launch's operands and table as the gated grouped kernel reads them
    (gemm_helpers.emulate_grouped_kernel): the weights stacked per entry ((E G K, 2, F) as
    the kernel's view) or shared, each entry's unit against float64."""
    emulate_grouped_kernel(kernel_emulation)
    sizes = np.array([[-3, 40, 2**31 - 1], [0, 0, 0], [10, 20, 30]])
    e, m, k, f, g = 3, 60, 32, 16, 3
    x = random_operand(rng, (e, m, k), "bfloat16")
    w = random_operand(rng, (e, g, k, 2, f) if mapped_w else (g, k, 2, f), "bfloat16")
    bias = random_operand(rng, (g, 2, f), "float32")
    fn = jax.vmap(lambda x, w, s: hopper_ragged_glu(x, w, s, bias=bias, activation="silu",
                                                    out_dtype=jnp.float32),
                  in_axes=(0, 0 if mapped_w else None, 0))
    out = jax.jit(fn)(x, w, jnp.asarray(sizes, jnp.int32))
    for i in range(e):
        want = ragged_glu_reference64(x[i], w[i] if mapped_w else w, sizes[i], bias=bias)
        assert rel_frob(out[i], want) < 1e-6, f"entry {i}"


def test_vmap_of_the_gradients_folds_the_products(rng):
    """vmap of jax.grad, the weights shared: the gated product, d x and d w one launch each
    over every entry, no loop (the reference lowering)."""
    check_ragged_glu_entry_grads(rng, 70, 32, 24, 1e-2)


def test_vmap_of_the_gradients_feeds_the_kernels_each_entrys_rows(rng, kernel_emulation):
    """The same, the folded launches' operands, tile tables and bounds read as the grouped
    and contraction kernels read them (gemm_helpers' emulations)."""
    emulate_grouped_kernel(kernel_emulation)
    emulate_contraction_kernel(kernel_emulation)
    check_ragged_glu_entry_grads(rng, 70, 32, 24, 1e-2, launches={"pure_callback": 3})


@pytest.mark.parametrize("emulated", [False, True])
def test_grad_of_the_sum_over_entries_is_one_weight_gradient(rng, kernel_emulation, emulated):
    """jax.grad of the sum over vmapped calls sharing the experts (a model's step over a
    vmapped layer): the weights' gradient one contraction over every entry's rows, shaped as
    the weights (gated_product's dw_summed), not E of them summed; also with the folded
    launches read as the kernels read them."""
    if emulated:
        emulate_grouped_kernel(kernel_emulation)
        emulate_contraction_kernel(kernel_emulation)
    check_ragged_glu_entry_grads(rng, 70, 32, 24, 1e-2, summed=True,
                                 launches={"pure_callback": 3} if emulated else None)


@pytest.mark.parametrize("m,k,f,groups", [(0, 8, 8, 2), (8, 0, 8, 2), (8, 8, 0, 2), (8, 8, 8, 0)])
def test_empty_problems(rng, m, k, f, groups):
    out = hopper_ragged_glu(random_operand(rng, (m, k), "bfloat16"),
                            random_operand(rng, (groups, k, 2, f), "bfloat16"),
                            jnp.full((groups,), 4, jnp.int32))
    assert out.shape == (m, f) and not np.any(np.asarray(out, np.float32))


def test_config_choice():
    decode = choose_grouped_glu_config(256, 2048, 64)
    assert (decode.block_m, decode.schedule, decode.cluster_n) == (64, "pingpong", 2)
    prefill = choose_grouped_glu_config(16384, 14336, 8)
    # The 128-row tile runs without a cluster (heuristics.choose_grouped_config's NOTES).
    assert (prefill.block_m, prefill.schedule, prefill.cluster_n) == (128, "cooperative", 1)
    for cfg in (decode, prefill):
        cfg.validate("bfloat16", False, True, family="grouped_glu")


@pytest.mark.parametrize("call,match", [
    (lambda x, w, g: hopper_ragged_glu(x[0], w, g), r"x.shape=\(16,\) must be \(M, K\)"),
    (lambda x, w, g: hopper_ragged_glu(x, w[:, :, 0], g), r"must be \(G, K, 2, F\)"),
    (lambda x, w, g: hopper_ragged_glu(x, w[:, :8], g), r"must be \(G, K, 2, F\)"),
    (lambda x, w, g: hopper_ragged_glu(x, w, g[:2]), r"\(G,\) = \(3,\)"),
    (lambda x, w, g: hopper_ragged_glu(x, w.astype(jnp.float16), g), "differ"),
    (lambda x, w, g: hopper_ragged_glu(x, w, g, bias=jnp.ones((3, 24))),
     r"bias.shape=.* \(G, 2, F\)"),
    (lambda x, w, g: hopper_ragged_glu(x, w, g, residual=jnp.ones((3, 24))), "residual"),
    (lambda x, w, g: hopper_ragged_glu(x, w, g, activation="tanh"), "activation"),
    (lambda x, w, g: hopper_ragged_glu(
        x, w, g, config=GemmConfig(block_n=128, stream_k=False)),
     "not compiled for the grouped GLU"),
])
def test_errors_name_the_argument(rng, call, match):
    x = random_operand(rng, (64, 16), "bfloat16")
    w = random_operand(rng, (3, 16, 2, 24), "bfloat16")
    with pytest.raises(ValueError, match=match):
        call(x, w, jnp.asarray([20, 20, 24], jnp.int32))


def test_forward_mode_with_a_bias_tangent(rng):
    """jax.jvp of hopper_ragged_glu in x, w and the bias at once (the bias's per-row gather a
    linear primitive, group_rows.per_row; as a custom VJP it had raised), some rows past every
    group, against the float64 reference's central difference."""
    m, k, f = 48, 32, 16
    x, t_x = (random_operand(rng, (m, k), "bfloat16") for _ in range(2))
    w, t_w = ((random_operand(rng, (2, k, 2, f), "float32") / np.sqrt(k)).astype(jnp.bfloat16)
              for _ in range(2))
    bias, t_bias = (random_operand(rng, (2, 2, f), "float32") for _ in range(2))
    gs = jnp.asarray([20, 21], jnp.int32)
    _, tangent = jax.jvp(
        lambda x, w, b: hopper_ragged_glu(x, w, gs, bias=b, out_dtype=jnp.float32),
        (x, w, bias), (t_x, t_w, t_bias))
    eps = 1e-4
    dx, dw, db = (eps * np.asarray(t, np.float64) for t in (t_x, t_w, t_bias))
    x_, w_, b_ = (np.asarray(v, np.float64) for v in (x, w, bias))
    plus, minus = (ragged_glu_reference64(x_ + s * dx, w_ + s * dw, gs, bias=b_ + s * db)
                   for s in (1, -1))
    want = (plus - minus) / (2 * eps)
    assert np.abs(np.asarray(tangent)[41:]).max() == 0  # past every group: act(0) * 0
    # Differentiated, the unit runs unfused: gate and up rounded to x's dtype (glu.py NOTES).
    assert rel_frob(tangent, want) < REL_FROB_BOUND["bfloat16"]
