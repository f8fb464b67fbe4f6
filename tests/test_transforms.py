"""jax.vmap, jax.grad and jax.jit around hopper_matmul: the same cases on CPU (reference
lowering, always) and on an sm_90 GPU (the kernel, marker `gpu`), against float64 / jnp-written
references. A vmapped call must stay one batched kernel call, never a loop."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from gemm_helpers import (REL_FROB_BOUND, check_summed_weight_grad, count_eqns, random_operand,
                          reference64, rel_frob, run_in_command_buffer, saved_per_element, to64)
from jax_hopper import _ffi, hopper_glu, hopper_matmul

ON_GPU = pytest.param("gpu", marks=pytest.mark.gpu)
PLATFORMS = ["cpu", ON_GPU]
LAYOUTS = list(itertools.product((False, True), repeat=2))  # (transpose_a, transpose_b)
ACTIVATIONS = [None, "relu", "gelu_tanh", "gelu", "silu"]
# Gradients: dz = dy * act'(z) is rounded to bf16 to feed the kernel (as XLA rounds a bf16
# dot's operands), so the bound is bf16 rounding of the cotangent, not fp32 accumulation.
GRAD_BOUND = 1.5e-2
LOOPS = ("scan", "while")  # a vmap answered one entry at a time


def _device(platform):
    return jax.devices("cpu")[0] if platform == "cpu" else _ffi.hopper_devices()[0]


def _put(platform, *xs):
    return [jax.device_put(x, _device(platform)) for x in xs]


# ---------------------------------------------------------------- vmap

VMAPS = {
    # name: (in_axes per vmap level, outermost first; a shape, b shape of one call)
    "a_only": ([(0, None)], (5, 40, 24), (24, 32)),
    "b_only": ([(None, 0)], (40, 24), (5, 24, 32)),
    "both": ([(0, 0)], (5, 40, 24), (5, 24, 32)),
    "axis_1": ([(1, None)], (40, 5, 24), (24, 32)),
    "nested_outer_product": ([(None, 0), (0, None)], (3, 40, 24), (4, 24, 32)),
    "nested_both": ([(0, 0), (0, None)], (2, 3, 40, 24), (2, 24, 32)),
    "a_only_against_batched_b": ([(0, None)], (3, 40, 24), (2, 24, 32)),
}


def _vmapped(fn, levels):
    for axes in reversed(levels):
        fn = jax.vmap(fn, in_axes=axes)
    return fn


def _vmap_reference(a, b, levels):
    """float64 product of each mapped slice, stacked as vmap stacks them (outermost first)."""
    if not levels:
        return reference64(a, b)
    (ax_a, ax_b), rest = levels[0], levels[1:]
    size = a.shape[ax_a] if ax_a is not None else b.shape[ax_b]
    take = lambda x, ax, i: x if ax is None else np.take(x, i, axis=ax)  # noqa: E731
    return np.stack([_vmap_reference(take(a, ax_a, i), take(b, ax_b, i), rest)
                     for i in range(size)])


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("case", list(VMAPS))
def test_vmap_is_one_batched_kernel_call(rng, platform, case):
    levels, a_shape, b_shape = VMAPS[case]
    a, b = _put(platform, random_operand(rng, a_shape, "bfloat16"),
                random_operand(rng, b_shape, "bfloat16"))
    f = _vmapped(lambda a, b: hopper_matmul(a, b, out_dtype=jnp.float32), levels)
    assert count_eqns(jax.make_jaxpr(f)(a, b).jaxpr, ("hopper_gemm",)) == 1
    got = jax.jit(f)(a, b)
    want = _vmap_reference(to64(a), to64(b), levels)
    assert rel_frob(got, want) < REL_FROB_BOUND["float32"]


@pytest.mark.parametrize("platform", PLATFORMS)
def test_vmap_with_epilogue_operands(rng, platform):
    """A vmapped bias/residual: the kernel computes the product once, jnp the epilogue."""
    a = random_operand(rng, (40, 24), "bfloat16")
    b = random_operand(rng, (24, 32), "bfloat16")
    bias = random_operand(rng, (3, 32), "float32")
    res = random_operand(rng, (3, 40, 32), "float32")
    a, b, bias, res = _put(platform, a, b, bias, res)
    f = jax.vmap(lambda bias, res: hopper_matmul(a, b, bias=bias, residual=res, activation="silu",
                                                 beta=0.5, out_dtype=jnp.float32))
    got = jax.jit(f)(bias, res)
    for i in range(3):
        want = reference64(a, b, bias=bias[i], residual=res[i], activation="silu", beta=0.5)
        assert rel_frob(got[i], want) < REL_FROB_BOUND["float32"]


# ---------------------------------------------------------------- grad

def _loss_pair(transpose_a, transpose_b, activation, alpha=1.0, beta=1.0):
    """The same loss through hopper_matmul and through jnp (float32 math on the same inputs)."""
    def ours(a, b, bias, res, w):
        y = hopper_matmul(a, b, bias=bias, residual=res, activation=activation, alpha=alpha,
                          beta=beta, transpose_a=transpose_a, transpose_b=transpose_b,
                          out_dtype=jnp.float32)
        return jnp.sum(y * w)

    def theirs(a, b, bias, res, w):
        a32, b32 = a.astype(jnp.float32), b.astype(jnp.float32)
        a32 = a32.swapaxes(-1, -2) if transpose_a else a32
        b32 = b32.swapaxes(-1, -2) if transpose_b else b32
        z = alpha * jnp.matmul(a32, b32, precision="highest") + bias
        act = {None: lambda x: x, "relu": jax.nn.relu,
               "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True),
               "gelu": lambda x: jax.nn.gelu(x, approximate=False), "silu": jax.nn.silu}
        return jnp.sum((act[activation](z) + beta * res) * w)
    return ours, theirs


def _grad_operands(rng, m, n, k, transpose_a, transpose_b, batch=()):
    a = random_operand(rng, (*batch, k, m) if transpose_a else (*batch, m, k), "bfloat16")
    b = random_operand(rng, (n, k) if transpose_b else (k, n), "bfloat16")
    bias = random_operand(rng, (n,), "float32")
    res = random_operand(rng, (*batch, m, n), "float32")
    w = random_operand(rng, (*batch, m, n), "float32")
    return a, b, bias, res, w


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("transpose_a,transpose_b", LAYOUTS)
def test_grad_matches_jnp(rng, platform, activation, transpose_a, transpose_b):
    args = _put(platform, *_grad_operands(rng, 136, 200, 72, transpose_a, transpose_b))
    ours, theirs = _loss_pair(transpose_a, transpose_b, activation, alpha=0.75, beta=-2.0)
    got = jax.jit(jax.grad(ours, argnums=(0, 1, 2, 3)))(*args)
    want = jax.jit(jax.grad(theirs, argnums=(0, 1, 2, 3)))(*args)
    for name, g, w in zip(("a", "b", "bias", "residual"), got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, name
        err = rel_frob(g, to64(w))
        assert err < GRAD_BOUND, (name, err)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_grad_of_batched_call_against_shared_weight_under_vmap(rng, platform):
    """jit(vmap(grad)): per-example gradients; the weight is shared by the inner batch, and
    its per-example gradients are one launch (no loop over the examples)."""
    a, b, bias, res, w = _put(platform, *_grad_operands(rng, 40, 64, 48, False, False,
                                                        batch=(3, 2)))
    ours, theirs = _loss_pair(False, False, "gelu_tanh")
    per_example = jax.vmap(jax.grad(ours, argnums=(0, 1)), in_axes=(0, None, None, 0, 0))
    assert count_eqns(jax.make_jaxpr(per_example)(a, b, bias, res, w).jaxpr, LOOPS) == 0
    got = jax.jit(per_example)(a, b, bias, res, w)
    want = jax.jit(jax.vmap(jax.grad(theirs, argnums=(0, 1)), in_axes=(0, None, None, 0, 0)))(
        a, b, bias, res, w)
    for g, ref in zip(got, want):
        assert g.shape == ref.shape
        assert rel_frob(g, to64(ref)) < GRAD_BOUND


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("transpose_b", [False, True])
def test_grad_of_the_sum_over_vmapped_calls_is_one_weight_gradient(rng, platform, transpose_b):
    """jax.grad of the sum over vmapped plain hopper_matmul calls sharing the weight (a
    per-example model vmapped over its batch): the weight's gradient one GEMM over every
    entry's rows, in its stored layout (dense_product's transpose), not a (K, N) per entry
    summed; against float64."""
    with jax.default_device(_device(platform)):
        check_summed_weight_grad(rng, 3, 40, 64, 48, 1e-2, transpose_b=transpose_b)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("transpose_b", [False, True])
def test_fused_epilogue_keeps_one_weight_gradient_under_vmap(rng, platform, transpose_b):
    """The same with a fused epilogue (bias, GELU, a shared residual): its custom JVP's
    tangent is the plain product's primitive, so the weight's gradient is still one GEMM over
    every entry's rows, and z is the forward's own launch for all entries; every gradient
    (bias and residual too) against float64."""
    with jax.default_device(_device(platform)):
        check_summed_weight_grad(rng, 3, 40, 64, 48, 1e-2, transpose_b=transpose_b,
                                 epilogue=True)


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("activation", ["gelu_tanh", "silu"])
def test_a_fused_activation_keeps_one_product_for_the_backward_pass(rng, activation, out_dtype):
    """Differentiated, a fused activation's forward is the product, kept in the output's dtype
    for act'(z + bias) (as XLA keeps its dot's output): one M x N residual, no float32 act'
    beside it, and so no product recomputed in the backward pass (autodiff.py's NOTES). A trace
    property: on the default device."""
    m, k, n = 40, 64, 48
    a, res = random_operand(rng, (m, k), "bfloat16"), random_operand(rng, (m, n), "float32")
    b = random_operand(rng, (k, n), "bfloat16")
    bias = random_operand(rng, (n,), "float32")

    def unit(a, b, bias, res):
        return hopper_matmul(a, b, bias=bias, activation=activation, residual=res, alpha=0.5,
                             beta=2.0, out_dtype=out_dtype)

    assert saved_per_element(unit, (a, b, bias, res), m * n) == [jnp.dtype(out_dtype)]


@pytest.mark.parametrize("platform", PLATFORMS)
def test_forward_mode_of_a_fused_epilogue(rng, platform):
    """jax.jvp of hopper_matmul with a bias, tanh-GELU and a residual fused (its custom JVP,
    the custom VJP before it had none), every operand with a tangent, against float64:
    act'(z) * (alpha (t_a @ b + a @ t_b) + t_bias) + beta t_res."""
    m, k, n = 40, 64, 48
    a, t_a = (random_operand(rng, (m, k), "bfloat16") for _ in range(2))
    b, t_b = ((random_operand(rng, (k, n), "float32") / np.sqrt(k)).astype(jnp.bfloat16)
              for _ in range(2))
    bias, t_bias = (random_operand(rng, (n,), "float32") for _ in range(2))
    res, t_res = (random_operand(rng, (m, n), "float32") for _ in range(2))
    args, tangents = _put(platform, a, b, bias, res), _put(platform, t_a, t_b, t_bias, t_res)
    with jax.default_device(_device(platform)):
        _, tangent = jax.jit(lambda *p: jax.jvp(
            lambda a, b, bias, res: hopper_matmul(
                a, b, bias=bias, activation="gelu_tanh", residual=res, alpha=0.5, beta=2.0,
                out_dtype=jnp.float32), p[:4], p[4:]))(*args, *tangents)
    z = 0.5 * to64(a) @ to64(b) + to64(bias)
    inner = np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)
    d_gelu = 0.5 * (1 + np.tanh(inner)) + 0.5 * z * (1 - np.tanh(inner) ** 2) * np.sqrt(
        2 / np.pi) * (1 + 3 * 0.044715 * z ** 2)
    dz = 0.5 * (to64(t_a) @ to64(b) + to64(a) @ to64(t_b)) + to64(t_bias)
    want = d_gelu * dz + 2.0 * to64(t_res)
    assert rel_frob(tangent, want) < REL_FROB_BOUND["float32"]


@pytest.mark.parametrize("platform", PLATFORMS)
def test_glu_gradients_under_vmap_fold_the_entries(rng, platform):
    """vmap(grad) and grad(vmap) of hopper_glu against a shared weight: the gated products
    fold the entries into one launch each (the product and d x into the batch, d w as the
    kernel's batch: no loop over entries), and equal the jnp unit's gradients; a mapped
    weight still launches per entry."""
    x = random_operand(rng, (3, 2, 40, 48), "bfloat16")
    w = random_operand(rng, (48, 2, 64), "bfloat16")
    x, w = _put(platform, x, w)

    def ours(x, w):
        return jnp.sum(hopper_glu(x, w, activation="silu").astype(jnp.float32) ** 2)

    def theirs(x, w):
        x32, w32 = x.astype(jnp.float32), w.astype(jnp.float32)
        g, u = (jnp.einsum("bmk,kf->bmf", x32, w32[:, i], precision="highest") for i in (0, 1))
        return jnp.sum((jax.nn.silu(g) * u) ** 2)

    for f in (lambda loss: jax.vmap(jax.grad(loss, (0, 1)), in_axes=(0, None)),
              lambda loss: jax.grad(lambda x, w: jax.vmap(loss, (0, None))(x, w).sum(), (0, 1))):
        assert count_eqns(jax.make_jaxpr(f(ours))(x, w).jaxpr, LOOPS) == 0
        got, want = jax.jit(f(ours))(x, w), jax.jit(f(theirs))(x, w)
        for g, ref in zip(got, want):
            assert g.shape == ref.shape and rel_frob(g, to64(ref)) < GRAD_BOUND
    ws = jnp.stack([w, 2 * w, -w])
    mapped = jax.vmap(jax.grad(ours, (0, 1)))
    got, want = jax.jit(mapped)(x, ws), jax.jit(jax.vmap(jax.grad(theirs, (0, 1))))(x, ws)
    for g, ref in zip(got, want):
        assert rel_frob(g, to64(ref)) < GRAD_BOUND


def test_check_grads_numerically():
    """Finite differences of the reference lowering (fp16 inputs, fp32 out): the VJP rule's
    algebra, independent of any hand-written jnp gradient."""
    rng = np.random.default_rng(0)
    for (ta, tb), act in zip(LAYOUTS, ("gelu", "silu", None, "gelu_tanh")):
        a = random_operand(rng, (8, 16) if ta else (16, 8), "float16")
        b = random_operand(rng, (24, 8) if tb else (8, 24), "float16")
        bias = random_operand(rng, (24,), "float32")

        def f(a, b, bias, ta=ta, tb=tb, act=act):
            return hopper_matmul(a, b, bias=bias, activation=act, transpose_a=ta,
                                 transpose_b=tb, out_dtype=jnp.float32)
        check_grads(f, (a, b, bias), order=1, modes=("rev",), eps=2e-2, atol=5e-2, rtol=5e-2)


# ---------------------------------------------------------------- CUDA graphs

_GRAPH_CHILD = r"""
import jax, jax.numpy as jnp, numpy as np, sys
sys.path.insert(0, {tests!r})
from gemm_helpers import reference64, rel_frob
from jax_hopper import hopper_matmul
a = jax.random.normal(jax.random.key(0), (512, 256), jnp.float32).astype(jnp.bfloat16)
b = jax.random.normal(jax.random.key(1), (256, 384), jnp.float32).astype(jnp.bfloat16)
f = jax.jit(lambda a, b: jnp.tanh(hopper_matmul(jnp.sin(a), b, activation="relu")) * 2)
want = 2 * np.tanh(reference64(jnp.sin(a), b, activation="relu"))
for _ in range(3):
    print("ERR", rel_frob(f(a, b).astype(jnp.float32), want), flush=True)
"""


@pytest.mark.gpu
def test_gemm_runs_inside_an_xla_command_buffer():
    """The handler is marked command-buffer compatible: with custom calls enabled for command
    buffers, XLA's thunk-level conversion pass puts the GEMM into a CUDA-graph command buffer
    (its log names the thunks it captures; the conversion happens after HLO, so the compiled
    HLO text does not show it) and the replays compute the right thing."""
    errors = run_in_command_buffer(_GRAPH_CHILD, "hopper_gemm")
    assert len(errors) == 3 and max(errors) < REL_FROB_BOUND["bfloat16"], errors
