"""Edge problems and bad input without a GPU: empty and 1x1x1 problems, which path (kernel or
fallback) each layout's pitch selects, extreme shapes, NaN/Inf, and every refusal as a ValueError
that names the argument and the rule before anything runs. On CPU the kernel path is the
reference lowering, so these pin down the wrapper; test_edge_cases_gpu.py runs the same edges on
the kernel."""

import itertools
import warnings
from contextlib import contextmanager
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemm_helpers import REL_FROB_BOUND, random_operand, reference64, rel_frob
from jax_hopper import GemmConfig, hopper_matmul, tma_copy
from jax_hopper.gemm import api
from jax_hopper.kernels import catalog
from jax_hopper.gemm.heuristics import choose_config
from jax_hopper.layout import check_smem_budget

LAYOUTS = list(itertools.product((False, True), repeat=2))  # (transpose_a, transpose_b)
ACTIVATIONS = [None, "relu", "gelu_tanh", "gelu", "silu"]


@contextmanager
def launches():
    """Records each call that takes the kernel path (api.autodiff.gemm), calling through."""
    calls = []
    real = api.autodiff.gemm

    def spy(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)
    with mock.patch.object(api.autodiff, "gemm", spy):
        yield calls


@contextmanager
def nothing_runs():
    def reached(*_, **__):
        raise AssertionError("validation let the call through to the product")
    with mock.patch.object(api.autodiff, "gemm", reached), \
            mock.patch.object(api, "empty_call", reached):
        yield


def operands(rng, m, n, k, transpose_a, transpose_b, dtype="bfloat16", batch=()):
    a = random_operand(rng, (*batch, k, m) if transpose_a else (*batch, m, k), dtype)
    b = random_operand(rng, (*batch, n, k) if transpose_b else (*batch, k, n), dtype)
    return a, b


# ---------------------------------------------------------------- empty problems

@pytest.mark.parametrize("m,n,k", [(0, 24, 16), (24, 0, 16), (24, 16, 0), (0, 0, 0)])
@pytest.mark.parametrize("transpose_a,transpose_b", LAYOUTS)
@pytest.mark.parametrize("jit", [False, True])
def test_empty_problem_is_shaped_right_with_epilogue(rng, m, n, k, transpose_a, transpose_b, jit):
    a, b = operands(rng, m, n, k, transpose_a, transpose_b)
    bias = random_operand(rng, (n,), "float32")
    residual = random_operand(rng, (m, n), "float32")

    def f(a, b, bias, residual):
        return hopper_matmul(a, b, bias=bias, residual=residual, activation="gelu", alpha=3.0,
                             beta=-0.5, out_dtype=jnp.float32, transpose_a=transpose_a,
                             transpose_b=transpose_b, strict=True)
    with launches() as calls, warnings.catch_warnings():
        warnings.simplefilter("error")  # an empty operand is no reason to fall back
        out = (jax.jit(f) if jit else f)(a, b, bias, residual)
    assert calls == []  # nothing to launch
    assert out.shape == (m, n) and out.dtype == jnp.float32
    # K = 0: the product is zeros, so out = gelu(bias) + beta * residual, element by element.
    want = reference64(a, b, transpose_a=transpose_a, transpose_b=transpose_b, bias=bias,
                       residual=residual, activation="gelu", alpha=3.0, beta=-0.5)
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-6, atol=1e-6)
    if m and n:
        assert np.all(np.asarray(out) != 0)  # the epilogue really ran


@pytest.mark.parametrize("batch_a,batch_b,want", [
    ((0,), (0,), (0, 8, 16)), ((0,), (), (0, 8, 16)), ((2, 0), (1,), (2, 0, 8, 16)),
    ((3,), (0, 1), (0, 3, 8, 16))])
def test_empty_batch(rng, batch_a, batch_b, want):
    a = random_operand(rng, (*batch_a, 8, 24), "bfloat16")
    b = random_operand(rng, (*batch_b, 24, 16), "bfloat16")
    with launches() as calls:
        out = hopper_matmul(a, b, bias=jnp.ones((16,)), activation="relu")
    assert out.shape == want and calls == []


@pytest.mark.parametrize("batch,m,n,k", [((2,), 0, 16, 24), ((2,), 8, 16, 0), ((2,), 8, 0, 24),
                                          ((2, 3), 0, 16, 24), ((2, 3), 8, 16, 0)])
@pytest.mark.parametrize("transpose_a,transpose_b", LAYOUTS)
def test_batched_empty_rows_or_k(rng, batch, m, n, k, transpose_a, transpose_b):
    """A batch of products with no rows, columns or K: shaped right, the epilogue applied to a
    zero product (a batched residual too); nothing launches."""
    a, b = operands(rng, m, n, k, transpose_a, transpose_b, batch=batch)
    bias = random_operand(rng, (n,), "float32")
    residual = random_operand(rng, (*batch, m, n), "float32")
    with launches() as calls:
        out = hopper_matmul(a, b, bias=bias, residual=residual, activation="silu", beta=0.5,
                            out_dtype=jnp.float32, transpose_a=transpose_a,
                            transpose_b=transpose_b)
    assert out.shape == (*batch, m, n) and calls == []
    want = reference64(a, b, transpose_a=transpose_a, transpose_b=transpose_b, bias=bias,
                       residual=residual, activation="silu", beta=0.5)
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("a_shape,b_shape,in_axes", [
    ((3, 2, 0, 24), (3, 24, 16), (0, 0)),        # no rows
    ((3, 2, 0, 24), (24, 16), (0, None)),        # no rows, b shared (a folds its batch)
    ((0, 2, 5, 24), (24, 16), (0, None)),        # an empty vmap axis against a shared b
    ((0, 5, 24), (2, 24, 16), (0, None)),        # ... against a batched b (a folds V)
    ((3, 5, 24), (0, 24, 16), (0, None)),        # an empty batch of b
])
def test_empty_under_vmap(rng, a_shape, b_shape, in_axes):
    """vmap where an axis is empty (the batching rule's folds and merges): shaped as jnp."""
    a, b = random_operand(rng, a_shape, "bfloat16"), random_operand(rng, b_shape, "bfloat16")
    out = jax.vmap(hopper_matmul, in_axes=in_axes)(a, b)
    assert out.shape == jax.vmap(jnp.matmul, in_axes=in_axes)(a, b).shape


def test_zero_k_with_every_activation_and_out_dtype(rng):
    a, b = jnp.zeros((5, 0), jnp.float16), jnp.zeros((0, 7), jnp.float16)
    bias = random_operand(rng, (7,), "float32")
    for act, out_dtype in itertools.product(ACTIVATIONS, catalog.OUTPUT_DTYPES):
        out = hopper_matmul(a, b, bias=bias, activation=act, out_dtype=out_dtype)
        want = np.broadcast_to(reference64(a, b, bias=bias, activation=act), (5, 7))
        assert out.dtype == jnp.dtype(out_dtype)
        assert rel_frob(out, want) < REL_FROB_BOUND[out_dtype], (act, out_dtype)


# ---------------------------------------------------------------- tiny problems and the pitch rule

def test_1x1x1_takes_the_kernel_path_and_strict_refuses_the_copy(rng):
    a, b = random_operand(rng, (1, 1), "bfloat16"), random_operand(rng, (1, 1), "bfloat16")
    with launches() as calls, warnings.catch_warnings():
        warnings.simplefilter("error")
        out = hopper_matmul(a, b, out_dtype=jnp.float32)
    assert len(calls) == 1
    assert float(out[0, 0]) == float(a[0, 0].astype(jnp.float32) * b[0, 0].astype(jnp.float32))
    with nothing_runs(), pytest.raises(ValueError, match=r"strict=True\): a's rows are 2 bytes"):
        hopper_matmul(a, b, strict=True)


@pytest.mark.parametrize("transpose_a,transpose_b", LAYOUTS)
def test_1_by_1_output_takes_the_kernel_path_in_every_layout(rng, transpose_a, transpose_b):
    # M = N = 1: a (K, 1) or b (K, 1) has 2-byte rows, padded in the CUDA lowering.
    a, b = operands(rng, 1, 1, 16, transpose_a, transpose_b)
    with launches() as calls, warnings.catch_warnings():
        warnings.simplefilter("error")
        out = hopper_matmul(a, b, out_dtype=jnp.float32, transpose_a=transpose_a,
                            transpose_b=transpose_b)
    assert len(calls) == 1
    ref = reference64(a, b, transpose_a=transpose_a, transpose_b=transpose_b)
    assert rel_frob(out, ref) < REL_FROB_BOUND["float32"]


def test_vectors_follow_jnp_matmul_on_the_kernel_path(rng):
    v = random_operand(rng, (16,), "bfloat16")
    mat = random_operand(rng, (16, 24), "bfloat16")
    with launches() as calls, warnings.catch_warnings():
        warnings.simplefilter("error")
        row = hopper_matmul(v, mat, out_dtype=jnp.float32)  # (1, K) @ (K, N): addressable
    assert row.shape == (24,) and len(calls) == 1
    assert rel_frob(row, reference64(v, mat)) < REL_FROB_BOUND["float32"]
    # A vector b is stored K-major as (1, K) (not as a (K, 1) column with 2-byte rows), so the
    # dot product of two vectors also runs on the kernel, with no fallback warning.
    with launches() as calls, warnings.catch_warnings():
        warnings.simplefilter("error")
        dot = hopper_matmul(v, v, out_dtype=jnp.float32)
    assert dot.shape == () and len(calls) == 1
    assert rel_frob(dot, reference64(v, v)) < REL_FROB_BOUND["float32"]


# (transpose_a, transpose_b) -> the stored operand and dimension that are a row pitch
PITCH_OWNERS = {(False, False): ("a", "k", "b", "n"), (True, False): ("a", "m", "b", "n"),
                (False, True): ("a", "k", "b", "k"), (True, True): ("a", "m", "b", "k")}


@pytest.mark.parametrize("transpose_a,transpose_b", LAYOUTS)
@pytest.mark.parametrize("dtype", catalog.INPUT_DTYPES)
def test_pitch_rule_per_layout(rng, dtype, transpose_a, transpose_b):
    """A dimension that is a row pitch and not a multiple of 8 elements (16 bytes) takes the
    kernel path all the same (the CUDA lowering pads it), and strict=True refuses that copy;
    the same odd size elsewhere needs no copy and passes strict."""
    a_name, a_dim, b_name, b_dim = PITCH_OWNERS[(transpose_a, transpose_b)]
    for dim in ("m", "n", "k"):
        sizes = dict(m=64, n=64, k=64)
        sizes[dim] = 100 + 3  # 206 bytes: not a multiple of 16
        a, b = operands(rng, sizes["m"], sizes["n"], sizes["k"], transpose_a, transpose_b, dtype)
        owners = [name for name, d in ((a_name, a_dim), (b_name, b_dim)) if d == dim]
        if owners:
            with nothing_runs(), pytest.raises(
                    ValueError, match=rf"strict=True\): {owners[0]}'s rows are 206 bytes apart"):
                hopper_matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b,
                              strict=True)
        with launches() as calls, warnings.catch_warnings():
            warnings.simplefilter("error")
            out = hopper_matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b,
                                strict=not owners)
        assert len(calls) == 1
        ref = reference64(a, b, transpose_a=transpose_a, transpose_b=transpose_b)
        assert rel_frob(out, ref) < REL_FROB_BOUND[dtype], dim


# ---------------------------------------------------------------- extreme shapes

EXTREME = [(2**20, 64, 64), (64, 2**20, 64), (65536, 32768, 64), (1, 1, 2**20), (8, 8, 2**24)]


@pytest.mark.parametrize("m,n,k", EXTREME)
def test_heuristic_picks_a_compiled_config_for_extreme_shapes(m, n, k):
    for transpose_a, transpose_b in LAYOUTS:
        choose_config(m, n, k).validate("bfloat16", transpose_a, not transpose_b)


@pytest.mark.parametrize("m,n,k", EXTREME[:3])
@pytest.mark.parametrize("transpose_a,transpose_b", LAYOUTS)
def test_extreme_shapes_trace_on_the_kernel_path(m, n, k, transpose_a, transpose_b):
    # Abstract shapes only (no memory): > 2^31 output elements must not trip any Python-side
    # arithmetic, and must not be routed to the fallback.
    a = jax.ShapeDtypeStruct((k, m) if transpose_a else (m, k), jnp.bfloat16)
    b = jax.ShapeDtypeStruct((n, k) if transpose_b else (k, n), jnp.bfloat16)
    with launches() as calls:
        out = jax.eval_shape(lambda a, b: hopper_matmul(
            a, b, transpose_a=transpose_a, transpose_b=transpose_b, strict=True), a, b)
    assert out.shape == (m, n) and out.dtype == jnp.bfloat16 and len(calls) == 1


def test_tall_problem_on_the_reference_path(rng):
    m = 2**16
    a, b = operands(rng, m, 64, 64, False, False)
    out = jax.jit(lambda a, b: hopper_matmul(a, b, strict=True))(a, b)
    assert out.shape == (m, 64)
    assert rel_frob(out, reference64(a, b)) < REL_FROB_BOUND["bfloat16"]


# ---------------------------------------------------------------- NaN and Inf

def with_specials(rng, x):
    """x with a few NaN, +Inf and -Inf entries at random places."""
    x = np.array(x.astype(jnp.float32))
    flat = x.reshape(-1)
    where = rng.choice(flat.size, size=6, replace=False)
    flat[where] = [np.nan, np.inf, -np.inf, np.nan, np.inf, -np.inf]
    return jnp.asarray(x)


def assert_same_specials(out, want):
    out = np.asarray(jnp.asarray(out).astype(jnp.float32))
    want = np.asarray(want, np.float64)
    assert np.array_equal(np.isnan(out), np.isnan(want)), "NaN masks differ"
    assert np.array_equal(np.isposinf(out), np.isposinf(want)), "+Inf masks differ"
    assert np.array_equal(np.isneginf(out), np.isneginf(want)), "-Inf masks differ"
    finite = np.isfinite(want)
    assert np.isnan(want).any() and finite.any()  # the inputs did produce both kinds
    np.testing.assert_allclose(out[finite], want[finite], rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("transpose_a,transpose_b", LAYOUTS)
@pytest.mark.parametrize("dtype", catalog.INPUT_DTYPES)
def test_nan_and_inf_propagate_as_in_jnp_dot(rng, dtype, transpose_a, transpose_b):
    a, b = operands(rng, 40, 48, 32, transpose_a, transpose_b, dtype)
    a, b = with_specials(rng, a).astype(dtype), with_specials(rng, b).astype(dtype)
    out = hopper_matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b,
                        out_dtype=jnp.float32)
    opa, opb = (a.T if transpose_a else a), (b.T if transpose_b else b)
    assert_same_specials(out, jnp.dot(opa, opb, preferred_element_type=jnp.float32))


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_nan_and_inf_through_the_epilogue_match_float64(rng, activation):
    a, b = operands(rng, 40, 48, 32, False, False)
    a = with_specials(rng, a).astype(jnp.bfloat16)
    bias = with_specials(rng, random_operand(rng, (48,), "float32"))
    with np.errstate(all="ignore"):
        want = reference64(a, b, bias=bias, activation=activation, alpha=0.5)
    out = hopper_matmul(a, b, bias=bias, activation=activation, alpha=0.5, out_dtype=jnp.float32)
    assert_same_specials(out, want)


# ---------------------------------------------------------------- bad input

BF = jnp.bfloat16


def _bad(kw):
    args = dict(a=np.ones((4, 8), BF), b=np.ones((8, 16), BF))
    args.update(kw)
    return args.pop("a"), args.pop("b"), args


@pytest.mark.parametrize("kwargs,message", [
    # ranks
    (dict(a=np.ones((), BF)), r"^a and b must have at least 1 dimension; got a\.ndim=0"),
    (dict(b=np.ones((), BF)), r"^a and b must have at least 1 dimension; got .*b\.ndim=0"),
    (dict(a=np.ones((8,), BF), transpose_a=True), r"^transpose_a needs a at least 2-D"),
    (dict(b=np.ones((8,), BF), transpose_b=True), r"^transpose_b needs b at least 2-D"),
    (dict(a=np.ones((2, 4, 8), BF), b=np.ones((3, 8, 16), BF)),
     r"^batch dimensions of a \(2,\) and b \(3,\) do not broadcast"),
    # contraction sizes, per layout
    (dict(b=np.ones((9, 16), BF)), r"^contraction dimensions differ: op\(a\) is \(4, 8\) and "
                                   r"op\(b\) is \(9, 16\)"),
    (dict(transpose_a=True), r"^contraction dimensions differ: op\(a\) is \(8, 4\)"),
    (dict(transpose_b=True), r"^contraction dimensions differ: .*op\(b\) is \(16, 8\) "
                             r"\(transpose_a=False, transpose_b=True\)"),
    (dict(a=np.ones((8,), BF), b=np.ones((16,), BF)), r"^contraction dimensions differ"),
    # layout switches are bools, not anything truthy
    (dict(transpose_a="yes"), r"^hopper_matmul: transpose_a must be a bool, got 'yes'"),
    (dict(transpose_b=np.ones(2)), r"^hopper_matmul: transpose_b must be a bool"),
    (dict(strict=1), r"^hopper_matmul: strict must be a bool, got 1"),
    # dtypes
    (dict(a=np.ones((4, 8), np.float32)), r"^a\.dtype=float32 is not supported: hopper_matmul "
                                          r"takes bfloat16, float16 inputs"),
    (dict(a=np.ones((4, 8), np.int8), b=np.ones((8, 16), np.int8)), r"^a\.dtype=int8"),
    (dict(b=np.ones((8, 16), jnp.float8_e4m3fn)), r"^b\.dtype=float8_e4m3fn is not supported"),
    (dict(b=np.ones((8, 16), np.complex64)), r"^b\.dtype=complex64 is not supported"),
    (dict(b=np.ones((8, 16), np.float16)), r"^a\.dtype=bfloat16 and b\.dtype=float16 differ"),
    (dict(out_dtype=jnp.int32), r"^out_dtype=int32 must be one of bfloat16, float16, float32"),
    (dict(out_dtype=jnp.float64), r"^out_dtype=float64 must be one of"),
    (dict(preferred_element_type=jnp.float8_e5m2), r"^out_dtype=float8_e5m2 must be one of"),
    (dict(out_dtype=BF, preferred_element_type=jnp.float32), r"^out_dtype and "
                                                             r"preferred_element_type disagree"),
    # epilogue arguments
    (dict(bias=np.ones((15,), np.float32)), r"^bias\.shape=\(15,\) must be \(N,\) = \(16,\)"),
    (dict(bias=np.ones((1, 16), np.float32)), r"^bias\.shape=\(1, 16\) must be \(N,\)"),
    (dict(residual=np.ones((4, 15), np.float32)), r"^residual\.shape=\(4, 15\) must broadcast "
                                                  r"to the output shape \(4, 16\)"),
    (dict(residual=np.ones((2, 4, 16), np.float32)), r"^residual\.shape=\(2, 4, 16\)"),
    (dict(activation="gelu_erf"), r"^activation='gelu_erf' must be one of None, 'relu'"),
    # configs
    (dict(config="128x256"), r"^config must be a GemmConfig, got str"),
    (dict(config=GemmConfig(block_m=64)),
     r"^config: \(block_m, block_n, block_k, stages, schedule, ctas_per_sm\) = "
     r"\(64, 256, 64, 4, 'cooperative', 1\) is not compiled; compiled tile shapes: "
     r"128x256x64_s4, 128x192x64_s4, "
     r"128x128x64_s6, 128x128x64_s6_pp, 64x256x64_s4_pp"),
    (dict(config=GemmConfig(cluster_m=2, cluster_n=2)), r"^config: cluster"),
    (dict(config=GemmConfig(cluster_m=4)), r"^config: cluster .* = \(4, 1\) must be one of"),
    (dict(config=GemmConfig(raster="hilbert")), r"^config: raster='hilbert'"),
    (dict(config=GemmConfig(group_size=0)), r"^config: group_size=0 must be an int in 1..1024"),
    (dict(config=GemmConfig(block_m=128.0)), r"^config: block_m=128.0 must be an int"),
    (dict(config=GemmConfig(stages="4")), r"^config: stages='4' must be an int"),
    (dict(config=GemmConfig(cluster_m=True)), r"^config: cluster_m=True must be an int"),
    (dict(config=GemmConfig(swizzle="64B")), r"^config: swizzle='64B'"),
    (dict(config=GemmConfig(b_mn_major=False)), r"^config: b_mn_major=False contradicts the call"),
    # strict mode with a pitch TMA cannot address
    (dict(a=np.ones((4, 12), BF), b=np.ones((12, 16), BF), strict=True),
     r"^hopper_matmul\(strict=True\): a's rows are 24 bytes apart; TMA needs a multiple of 16 "
     r"\(its last dimension, 12, must be a multiple of 8\)"),
])
def test_bad_input_is_a_value_error_before_anything_runs(kwargs, message):
    a, b, kw = _bad(kwargs)
    with nothing_runs(), pytest.raises(ValueError, match=message):
        hopper_matmul(a, b, **kw)
    with nothing_runs(), pytest.raises(ValueError, match=message):  # at trace time under jit
        jax.jit(lambda a, b: hopper_matmul(a, b, **kw))(a, b)


def test_a_tile_that_is_not_compiled_is_refused_by_name():
    # 256 x 256 tiles in 4 stages would need 256 KB of operand ring alone: not compiled (a
    # compiled kernel over the shared-memory limit is a build error: a static_assert in
    # cuda/gemm/kernel.cuh against the catalog's limit).
    cfg = GemmConfig(block_m=256, block_n=256, block_k=64, stages=4)
    with pytest.raises(ValueError,
                       match=r"^config: .* = \(256, 256, 64, 4, 'cooperative', 1\) "
                             r"is not compiled"):
        cfg.validate("bfloat16", False, True)
    ring = 4 * (256 + 256) * 64 * 2
    with pytest.raises(ValueError, match=rf"^nbytes: {ring} bytes of shared memory "
                                         rf"exceed the per-block limit of {232448} bytes"):
        check_smem_budget(ring)


@pytest.mark.parametrize("kwargs,message", [
    pytest.param(dict(out_dtype="fp8"), r"^out_dtype='fp8' is not a dtype",
                 id="out_dtype-not-a-dtype"),
    pytest.param(dict(activation=["relu"]), r"^activation=\['relu'\] must be one of",
                 id="activation-unhashable"),
    pytest.param(dict(alpha="2"), r"^alpha='2' must be a real", id="alpha-not-a-number"),
    pytest.param(dict(alpha=np.ones(3)), r"^alpha=.* must be a real", id="alpha-an-array"),
    pytest.param(dict(beta=True), r"^beta=True must be a real", id="beta-a-bool"),
])
def test_malformed_arguments_are_value_errors_naming_them(kwargs, message):
    a, b, kw = _bad(kwargs)
    with nothing_runs(), pytest.raises(ValueError, match=message):
        hopper_matmul(a, b, **kw)


def test_tma_unhashable_swizzle_is_a_value_error():
    with pytest.raises(ValueError, match="swizzle"):
        tma_copy(np.zeros((8, 64), np.float16), box=(8, 64), swizzle=["128B"])


def test_tma_dimension_beyond_int32_is_refused_at_trace_time():
    x = jax.ShapeDtypeStruct((2**31, 16), jnp.uint8)  # abstract: no memory needed
    with pytest.raises(ValueError, match=r"2\^31"):
        jax.jit(lambda x: tma_copy(x, box=(8, 16), swizzle="none")).trace(x)


# ------------------------------------------------------------ found by fuzzing the API (2026-12-04)

def test_an_empty_batch_takes_a_residual_of_its_own_shape():
    """A residual of the output's shape with a batch of 0 (its leading size 0 is not a shared
    residual's 1)."""
    from jax_hopper import hopper_fp8_matmul
    a, b = jnp.ones((0, 4, 8), jnp.bfloat16), jnp.ones((8, 16), jnp.bfloat16)
    assert hopper_matmul(a, b, residual=jnp.zeros((0, 4, 16), jnp.bfloat16)).shape == (0, 4, 16)
    a8, b8 = jnp.ones((0, 4, 32), jnp.float8_e4m3fn), jnp.ones((16, 32), jnp.float8_e4m3fn)
    out = hopper_fp8_matmul(a8, b8, 1.0, 1.0, residual=jnp.zeros((0, 4, 16)))
    assert out.shape == (0, 4, 16)


@pytest.mark.parametrize("recipe", ["tensor", "block"])
def test_fp8_dot_general_is_lax_shaped_at_k0_and_in_its_result_dtype(recipe):
    """fp8_dot_general as lax.dot_general: zeros for an empty contraction, and without a
    preferred_element_type lax's result dtype (bfloat16 x float16 gives bfloat16 there, not
    jnp's promotion to float32)."""
    from jax_hopper import fp8_dot_general
    dg, dims = fp8_dot_general(recipe), (((1,), (0,)), ((), ()))
    out = dg(jnp.ones((4, 0), jnp.bfloat16), jnp.ones((0, 16), jnp.bfloat16), dims)
    np.testing.assert_array_equal(np.asarray(out, np.float32), np.zeros((4, 16)))
    x, w = jnp.ones((4, 32), jnp.bfloat16), jnp.ones((32, 16), jnp.float32)
    assert dg(x, w, dims).dtype == jax.lax.dot_general(x, w, dims).dtype == jnp.float32
    w16 = w.astype(jnp.float16)
    assert dg(x, w16, dims).dtype == jax.lax.dot_general(x, w16, dims).dtype


def test_dequantize_fp8_checks_its_scale_and_block():
    """A scale of another layout than `block` says, an unknown block, a non-fp8 q: each a
    ValueError naming the rule (a row scale read as a tile one was once silently wrong); a (1,)
    per-tensor scale, as the fp8 products take it, works."""
    from jax_hopper import dequantize_fp8, quantize_fp8
    x = jnp.asarray(np.random.default_rng(0).standard_normal((4, 300)), jnp.bfloat16)
    rows = quantize_fp8(x, scaling="block")  # scale (4, 3)
    for kwargs, rule in [(dict(scale=jnp.ones((4, 5))), r"\(4, 3\)"),
                         (dict(scale=rows.scale, block="tile"), r"block='tile', \(1, 3\)"),
                         (dict(scale=rows.scale, block="tlie"), "'tensor', 'row' or 'tile'"),
                         (dict(scale=rows.scale, block="tensor"), "takes a scalar or"),
                         (dict(scale=rows.scale.astype(jnp.int32)), "float array"),
                         (dict(q=x), "q.dtype")]:
        args = dict(q=rows.q, scale=rows.scale) | kwargs
        with pytest.raises(ValueError, match=rule):
            dequantize_fp8(args.pop("q"), args.pop("scale"), **args)
    per_tensor = quantize_fp8(x)
    np.testing.assert_array_equal(dequantize_fp8(per_tensor.q, per_tensor.scale.reshape(1)),
                                  dequantize_fp8(per_tensor.q, per_tensor.scale))


def test_group_sizes_past_int32_take_the_remaining_rows():
    """A size past int32's range (uint32) is cut at M, not wrapped around to a negative."""
    from jax_hopper import hopper_ragged_contract, hopper_ragged_dot
    x, w = jnp.ones((8, 16), jnp.bfloat16), jnp.ones((2, 16, 32), jnp.bfloat16)
    sizes = jnp.asarray([3, 2**32 - 1], jnp.uint32)
    np.testing.assert_array_equal(np.asarray(hopper_ragged_dot(x, w, sizes)[3:, 0], np.float32),
                                  np.full(5, 16.0))
    assert float(hopper_ragged_contract(x, x, sizes)[1, 0, 0]) == 5.0


def test_epilogue_operands_and_flags_are_checked():
    """A complex bias or residual (its imaginary part would be cast away), a hopper_glu strict
    that is not a bool, an fp8_matmul out_dtype that is not a dtype: ValueErrors naming them."""
    from jax_hopper import fp8_matmul, hopper_glu
    a, b = jnp.ones((1, 8), jnp.bfloat16), jnp.ones((8, 2), jnp.bfloat16)
    with pytest.raises(ValueError, match="bias must be a real"):
        hopper_matmul(a, b, bias=jnp.array([1j, 2j]))
    with pytest.raises(ValueError, match="residual must be a real"):
        hopper_matmul(a, b, residual=jnp.array([1j, 2j]))
    with pytest.raises(ValueError, match="strict must be a bool"):
        hopper_glu(jnp.ones((4, 8), jnp.bfloat16), jnp.ones((8, 2, 16), jnp.bfloat16), strict="no")
    with pytest.raises(ValueError, match="out_dtype='foo' is not a dtype"):
        fp8_matmul(jnp.ones((4, 32)), jnp.ones((32, 16)), out_dtype="foo")


def test_numpy_integers_pass_where_python_ints_do():
    """A config's fields and fp8_meta's sizes take any integer (np.int64 from a shape
    computation), as block_m always did; bools and floats stay refused."""
    from jax_hopper import fp8_meta
    a, b = jnp.ones((8, 64), jnp.bfloat16), jnp.ones((64, 256), jnp.bfloat16)
    assert hopper_matmul(a, b, config=GemmConfig(group_size=np.int64(8))).shape == (8, 256)
    assert fp8_meta(np.int64(4), experts=np.int32(3)).w.shape == (3, 4)
    with pytest.raises(ValueError, match="group_size=True must be an int"):
        hopper_matmul(a, b, config=GemmConfig(group_size=True))
    with pytest.raises(ValueError, match=r"length=4.0 must be an int >= 1"):
        fp8_meta(4.0)


def test_symbolic_dimensions_are_refused_by_name():
    """jax.export's symbolic dimensions: a ValueError saying the shapes must be concrete (a
    config is chosen per shape), not an inconclusive comparison deep in the heuristic."""
    from jax import export
    from jax_hopper import hopper_ragged_dot
    b, = export.symbolic_shape("b")
    w = jnp.ones((64, 32), jnp.bfloat16)
    for f in (lambda x: hopper_matmul(x, w),
              lambda x: hopper_ragged_dot(x, jnp.stack([w, w]), jnp.asarray([3, 4], jnp.int32))):
        with pytest.raises(ValueError, match=r"must be concrete integers.*symbolic \{'m': b\}"):
            export.export(jax.jit(f))(jax.ShapeDtypeStruct((b, 64), jnp.bfloat16))


def test_lowering_for_cuda_without_a_gpu_warns_that_the_reference_runs():
    """A program exported for CUDA on a machine without a GPU embeds the XLA reference: said
    by a warning (exported for the CPU alone: none)."""
    from jax import export
    from jax_hopper import _ffi
    if _ffi.gpu_backend():
        pytest.skip("a GPU backend is present: a CUDA lowering here is this machine's own")
    w = jnp.ones((64, 32), jnp.bfloat16)
    f, x = jax.jit(lambda x: hopper_matmul(x, w)), jax.ShapeDtypeStruct((8, 64), jnp.bfloat16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        export.export(f)(x)
    assert not [c for c in caught if "lowering for CUDA" in str(c.message)]
    with pytest.warns(UserWarning, match="lowering for CUDA on a machine without a GPU"):
        exported = export.export(f, platforms=("cpu", "cuda"))(x)
    assert exported.call(jnp.ones((8, 64), jnp.bfloat16)).shape == (8, 32)
