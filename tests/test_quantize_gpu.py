"""quantize_fp8's kernel on an sm_90 GPU, bit for bit against the same op on the CPU (its jnp
reference): every input and fp8 type, every scaling mode of q and of the transposed copy, partial
tiles, batches, NaN/Inf, vmap in one launch; plus fp8_matmul (forward and both gradients in fp8)
against float64 on the kernels, and serving on quantize_weight's weight bit for bit the same
forward."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemm_helpers import bit_pattern as _bytes, check_fp8_matmul
from jax_hopper import quantize_fp8
from jax_hopper.kernels import catalog

pytestmark = pytest.mark.gpu

MODES = [dict(scaling="tensor"), dict(scaling="block", block="row", transpose_block="row"),
         dict(scaling="block", block="row", transpose_block="tile"),
         dict(scaling="block", block="tile", transpose_block="tile"),
         dict(scaling="block", block="tile", transpose_block="row")]


def _check(x, **kwargs):
    """The kernel's result (which must come from the custom call) equals the CPU reference's."""
    f = jax.jit(lambda x: quantize_fp8(x, **kwargs))
    assert "jax_hopper_quantize_fp8" in f.lower(x).as_text()
    got = f(jax.device_put(x, jax.devices("gpu")[0]))
    cpu = jax.devices("cpu")[0]
    with jax.default_device(cpu):
        want = jax.jit(lambda x: quantize_fp8(x, **kwargs))(jax.device_put(x, cpu))
    for name, g, w in zip(want._fields, got, want):
        if w is None:
            assert g is None, name
            continue
        assert g.shape == w.shape and g.dtype == w.dtype, name
        bad = np.flatnonzero(_bytes(g) != _bytes(w))
        assert bad.size == 0, f"{name}: {bad.size} bytes differ, first at byte {bad[:5]}"
    return got


def _x(rng, shape, dtype="bfloat16"):
    mag = 2.0 ** rng.uniform(-4, 4, size=shape[:-1] + (1,))
    return np.asarray(rng.standard_normal(shape) * mag, np.float32).astype(dtype)


@pytest.mark.parametrize("in_dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("mode", MODES, ids=lambda m: f"{m.get('block', 'tensor')}"
                                                      f"-{m.get('transpose_block', '')}")
def test_matches_reference_bit_for_bit(rng, in_dtype, dtype, mode):
    # Partial tiles in both directions, both copies.
    _check(_x(rng, (208, 304), in_dtype), dtype=dtype, transpose=True, **mode)


@pytest.mark.parametrize("shape", [(16, 16), (128, 128), (3, 144, 272), (1008, 2048),
                                   (2, 2, 256, 384)])
@pytest.mark.parametrize("transpose", [False, True])
def test_shapes(rng, shape, transpose):
    for mode in MODES[:2] + MODES[3:4]:
        _check(_x(rng, shape), transpose=transpose, **mode)


def test_rows_not_aligned_without_transpose(rng):
    # 37 rows: fine for q (its rows are cols bytes long), the kernel still runs.
    _check(_x(rng, (37, 160)), scaling="block")


@pytest.mark.parametrize("shape", [(64, 40), (37, 100), (2, 129, 250), (300, 8)])
def test_unaligned_shapes_run_the_kernel(rng, shape):
    # cols (and rows, for the transposed copy) no multiple of 16 bytes of fp8: the kernel runs
    # on a zero-padded copy and the outputs are sliced back, bit for bit the reference's.
    for mode in MODES:
        for transpose in (False, True):
            _check(_x(rng, shape), transpose=transpose, **mode)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values(rng, bad):
    x = _x(rng, (256, 256), "float32")
    x[3, 7] = bad
    x[200, 130] = 0.0
    for mode in MODES:
        out = _check(x, transpose=True, **mode)
        assert np.isnan(np.asarray(out.q, np.float32)[3, 7])
        assert np.isnan(np.asarray(out.q_t, np.float32)[7, 3])


def test_zeros_and_extremes(rng):
    x = np.zeros((128, 256), np.float32)
    x[0, :16] = [3e38, -1e-30, 1e-40, 1.0] * 4
    for mode in MODES:
        out = _check(x, transpose=True, **mode)
        assert np.all(np.isfinite(np.asarray(out.q, np.float32)))


def test_vmap_is_one_launch(rng):
    x = _x(rng, (4, 128, 256))
    f = jax.jit(jax.vmap(lambda a: quantize_fp8(a, scaling="block", transpose=True)))
    hlo = f.lower(x).compile().as_text()
    assert hlo.count('custom_call_target="jax_hopper_quantize_fp8"') == 1
    got = f(x)
    for i in range(4):
        for g, w in zip(got, quantize_fp8(x[i], scaling="block", transpose=True)):
            assert (g is None) == (w is None)
            if w is not None:
                np.testing.assert_array_equal(_bytes(g[i]), _bytes(w))


def test_tensor_scale_under_vmap_is_per_entry(rng):
    x = _x(rng, (3, 64, 128))
    x[1] *= 100
    scales = jax.vmap(lambda a: quantize_fp8(a).scale)(x)
    want = np.abs(x.astype(np.float32)).max(axis=(1, 2)) / catalog.FP8_MAX["float8_e4m3fn"]
    np.testing.assert_allclose(scales, want, rtol=1e-6)


@pytest.mark.parametrize("in_dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("shape", [(208, 304), (3, 144, 272), (37, 100), (1008, 2048)])
def test_given_amax_matches_reference_bit_for_bit(rng, in_dtype, dtype, shape):
    # Delayed scaling: the scale from the amax given, x's own amax recorded by the kernel (an
    # atomic max per tile into a buffer zeroed first: a second call must not see the first's).
    x = _x(rng, shape, in_dtype)
    own = float(np.abs(x.astype(np.float32)).max())
    for amax, transpose in ((own, True), (own / 8, False), (own * 4, True)):
        out = _check(x, dtype=dtype, transpose=transpose, amax=np.float32(amax))
        assert float(out.amax) == own


def test_given_amax_records_non_finite(rng):
    # (_check: the kernel's bytes are the reference's, an Inf NaN in q: kernel `scaled`.)
    x = _x(rng, (256, 384), "float32")
    x[100, 300] = np.inf
    x[7, 8] = 1e36  # far beyond the amax: saturates, finite
    out = _check(x, amax=np.float32(2.0), transpose=True)
    assert float(out.amax) == np.inf
    assert np.isnan(np.asarray(out.q, np.float32)[100, 300])
    assert np.isnan(np.asarray(out.q_t, np.float32)[300, 100])
    assert np.isfinite(np.asarray(out.q, np.float32)[7, 8])
    x[5, 5] = np.nan
    assert np.isnan(float(_check(x, amax=np.float32(2.0), transpose=True).amax))


def test_given_amax_under_vmap_is_one_launch_per_entry_amax(rng):
    x = _x(rng, (4, 128, 256))
    x[2] *= 64
    f = jax.jit(jax.vmap(lambda a: quantize_fp8(a, transpose=True, amax=np.float32(1.0))))
    hlo = f.lower(x).compile().as_text()
    assert hlo.count('custom_call_target="jax_hopper_quantize_fp8"') == 1
    np.testing.assert_array_equal(f(x).amax, np.abs(x.astype(np.float32)).max(axis=(1, 2)))


@pytest.mark.parametrize("recipe", ["tensor", "delayed", "block"])
@pytest.mark.parametrize("lead,k,n", [((256,), 512, 384), ((2, 100), 300, 200), ((8,), 4096, 1024)])
def test_fp8_matmul_on_the_kernels(rng, recipe, lead, k, n):
    check_fp8_matmul(rng, lead, k, n, recipe, jit=True)


@pytest.mark.parametrize("recipe", ["tensor", "block"])
def test_fp8_matmul_bias_and_residual_on_the_kernels(rng, recipe):
    check_fp8_matmul(rng, (2, 100), 300, 200, recipe, jit=True, epilogue=True)


def test_fp8_matmul_runs_quantize_and_fp8_gemms():
    # The cotangent is an argument: a constant one would be quantized while tracing.
    from jax_hopper import fp8_matmul
    x, w, g = (jnp.ones(s, jnp.bfloat16) for s in ((256, 512), (512, 384), (256, 384)))

    def step(x, w, g):
        y, vjp = jax.vjp(lambda x, w: fp8_matmul(x, w, recipe="block"), x, w)
        return y, vjp(g)

    hlo = jax.jit(step).lower(x, w, g).as_text()
    assert hlo.count("jax_hopper_quantize_fp8") == 3       # x, w, dy: each once
    assert hlo.count("jax_hopper_gemm_fp8_block") == 3     # y, dx, dw


@pytest.mark.parametrize("recipe", ["tensor", "block"])
@pytest.mark.parametrize("lead,k,n", [((256,), 512, 384), ((2, 100), 300, 200), ((8,), 40, 24)])
def test_serving_on_a_quantized_weight_is_the_training_calls_forward(rng, recipe, lead, k, n):
    from jax_hopper import fp8_matmul, quantize_weight
    x = jnp.asarray(rng.standard_normal((*lead, k)), jnp.bfloat16)
    w = jnp.asarray(rng.standard_normal((k, n)) / np.sqrt(k), jnp.bfloat16)
    bias = jnp.asarray(rng.standard_normal(n), jnp.float32)
    served = jax.jit(lambda x, wq: fp8_matmul(x, wq, recipe=recipe, bias=bias))(
        x, quantize_weight(w, recipe=recipe))
    want = jax.jit(lambda x, w: fp8_matmul(x, w, recipe=recipe, bias=bias))(x, w)
    got = np.asarray(served, np.float32)
    assert np.all(np.isfinite(got)) and np.any(got)
    np.testing.assert_array_equal(got, np.asarray(want, np.float32))
