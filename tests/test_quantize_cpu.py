"""quantize_fp8 and dequantize_fp8 through their reference (what every machine runs without the
kernel): scale shapes per mode, the scales against numpy's block maxima, the block maximum landing
on the fp8 maximum, the round trip within fp8 precision, the transposed copy equal to quantizing
x^T, saturation, zeros, NaN and Inf, vmap, and bad arguments."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gemm_helpers import bit_pattern as _bytes

from jax_hopper import dequantize_fp8, quantize_fp8
from jax_hopper.kernels import catalog

FP8 = ["float8_e4m3fn", "float8_e5m2"]
# Relative Frobenius error of dequantize(quantize(x)) for normal data: half an ulp is 2^-4 (e4m3,
# 3 mantissa bits) or 2^-3 (e5m2); the root mean square is about a third of that.
ROUND_TRIP_BOUND = {"float8_e4m3fn": 0.035, "float8_e5m2": 0.07}
MODES = [dict(scaling="tensor"), dict(scaling="block", block="row"),
         dict(scaling="block", block="tile")]


@pytest.fixture(autouse=True)
def _on_cpu():
    with jax.default_device(jax.devices("cpu")[0]):
        yield


def _x(rng, shape, dtype="bfloat16", spread=3.0):
    # Rows of very different magnitudes, so a single scale would not fit them all.
    mag = 2.0 ** rng.uniform(-spread, spread, size=shape[:-1] + (1,))
    return jnp.asarray((rng.standard_normal(shape) * mag).astype(np.float32)).astype(dtype)


def _np_block_amax(x, block):
    """Block maxima in numpy (x (R, C) float64): per row and 128 columns, or per 128 x 128."""
    r, c = x.shape
    b = catalog.FP8_SCALE_BLOCK
    pad = np.zeros((-(-r // b) * b, -(-c // b) * b))
    pad[:r, :c] = np.abs(x)
    if block == "row":
        return pad[:r].reshape(r, -1, b).max(axis=2)
    return pad.reshape(pad.shape[0] // b, b, -1, b).max(axis=(1, 3))


@pytest.mark.parametrize("dtype", FP8)
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.get("block", "tensor"))
@pytest.mark.parametrize("shape", [(200, 300), (2, 129, 40), (1, 1)])
def test_scales_and_round_trip(rng, dtype, mode, shape):
    x = _x(rng, shape)
    out = quantize_fp8(x, dtype=dtype, **mode)
    fp8_max = catalog.FP8_MAX[dtype]
    assert out.q.shape == x.shape and out.q.dtype == jnp.dtype(dtype)
    assert out.q_t is None and out.scale_t is None
    x64 = np.asarray(x, np.float64).reshape(-1, *shape[-2:])
    if mode["scaling"] == "tensor":
        assert out.scale.shape == ()
        np.testing.assert_allclose(out.scale, np.abs(x64).max() / fp8_max, rtol=1e-6)
    else:
        want = np.stack([_np_block_amax(e, mode["block"]) for e in x64]) / fp8_max
        np.testing.assert_allclose(np.asarray(out.scale).reshape(want.shape), want, rtol=1e-6)
        # The largest element of every block becomes +-fp8 max: the whole range is used.
        q = np.abs(np.asarray(out.q, np.float64).reshape(x64.shape))
        got_max = np.stack([_np_block_amax(e, mode["block"]) for e in q])
        np.testing.assert_array_equal(got_max, fp8_max)
    back = dequantize_fp8(out.q, out.scale, block=mode.get("block", "row"))
    err = np.linalg.norm(np.asarray(back, np.float64) - np.asarray(x, np.float64))
    assert err <= ROUND_TRIP_BOUND[dtype] * np.linalg.norm(np.asarray(x, np.float64))


@pytest.mark.parametrize("block,transpose_block", [("row", "row"), ("row", "tile"),
                                                   ("tile", "tile"), ("tile", "row")])
@pytest.mark.parametrize("in_dtype", ["bfloat16", "float16", "float32"])
def test_transposed_copy_is_quantized_transpose(rng, block, transpose_block, in_dtype):
    x = _x(rng, (2, 150, 270), in_dtype)
    out = quantize_fp8(x, scaling="block", block=block, transpose=True,
                       transpose_block=transpose_block)
    alone = quantize_fp8(x, scaling="block", block=block)
    xt = quantize_fp8(jnp.swapaxes(x, -1, -2), scaling="block", block=transpose_block)
    for got, want in ((out.q, alone.q), (out.scale, alone.scale), (out.q_t, xt.q),
                      (out.scale_t, xt.scale)):
        np.testing.assert_array_equal(_bytes(got), _bytes(want))
    tensor = quantize_fp8(x, transpose=True)
    assert tensor.scale_t is tensor.scale or np.array_equal(tensor.scale_t, tensor.scale)
    np.testing.assert_array_equal(np.asarray(tensor.q_t, np.float32),
                                  np.swapaxes(np.asarray(tensor.q, np.float32), -1, -2))


def test_zeros_get_a_finite_scale():
    out = quantize_fp8(jnp.zeros((4, 256), jnp.bfloat16), scaling="block")
    assert np.all(np.isfinite(out.scale)) and np.all(np.asarray(out.scale) > 0)
    assert not np.any(np.asarray(out.q, np.float32))


@pytest.mark.parametrize("shape", [(0, 128), (2, 0, 128), (2, 3, 0), (0, 4, 8)])
@pytest.mark.parametrize("scaling,block", [("tensor", "row"), ("block", "row"), ("block", "tile")])
def test_empty_inputs(shape, scaling, block):
    """An array with no elements quantizes to empty arrays of the right shapes (scales of its
    blocks' counts; an amax of 0), with or without the transposed copy or a given amax."""
    x = jnp.zeros(shape, jnp.float32)
    r, c, lead = shape[-2], shape[-1], shape[:-2]
    for transpose in (False, True):
        out = quantize_fp8(x, scaling=scaling, block=block, transpose=transpose)
        assert out.q.shape == shape
        if transpose:
            assert out.q_t.shape == (*lead, c, r)
        if scaling == "tensor":
            assert float(out.amax) == 0.0 and np.isfinite(float(out.scale))
            given = quantize_fp8(x, amax=2.0, transpose=transpose)
            assert float(given.amax) == 0.0 and given.q.shape == shape
        else:
            rows = r if block == "row" else -(-r // 128)
            assert out.scale.shape == (*lead, rows, -(-c // 128))


@pytest.mark.parametrize("dtype", FP8)
def test_saturation_of_extreme_values(dtype):
    # A value near the top of float32 and one at the bottom: both quantize finite (no overflow
    # in fp8 max / amax, no NaN from an unsaturated cast); the amax is clamped to 2^126, so the
    # large one saturates to fp8 max and dequantises to 2^126.
    x = jnp.asarray([[3e38, -1e-30] + [1.0] * 14], jnp.float32)
    out = quantize_fp8(x, dtype=dtype)
    q = np.asarray(out.q, np.float32)
    assert np.all(np.isfinite(q)) and q[0, 0] == catalog.FP8_MAX[dtype]
    assert float(out.scale) * q[0, 0] == catalog.FP8_MAX_AMAX


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_poisons_only_its_block(bad):
    x = np.ones((2, 256), np.float32)
    x[0, 5] = bad
    out = quantize_fp8(jnp.asarray(x), scaling="block", block="row")
    q, scale = np.asarray(out.q, np.float32), np.asarray(out.scale)
    assert not np.isfinite(scale[0, 0])
    assert np.isfinite(scale[0, 1]) and np.all(np.isfinite(scale[1]))
    assert np.isnan(q[0, 5])  # never a finite value where x was not finite
    if np.isnan(bad):
        assert np.all(np.isnan(q[0, :128]))
    else:  # an Inf amax: the block's finite values become 0, dequantising to NaN (Inf * 0)
        assert np.all(q[0, :5] == 0)
    np.testing.assert_array_equal(q[0, 128:], catalog.FP8_MAX["float8_e4m3fn"])
    np.testing.assert_array_equal(q[1], catalog.FP8_MAX["float8_e4m3fn"])
    tensor = quantize_fp8(jnp.asarray(x))
    assert not np.isfinite(float(tensor.scale))


def test_vmap_matches_a_loop(rng):
    x = _x(rng, (3, 2, 40, 144))
    for mode in MODES:
        f = lambda a: quantize_fp8(a, transpose=True, **mode)  # noqa: E731
        got = jax.vmap(f)(x)
        for i in range(3):
            want = f(x[i])
            for g, w in zip(got, want):
                assert (g is None) == (w is None)
                if w is not None:
                    np.testing.assert_array_equal(_bytes(g[i]), _bytes(w))


def test_under_jit_equals_eager(rng):
    x = _x(rng, (96, 160))
    f = lambda a: quantize_fp8(a, scaling="block", transpose=True)  # noqa: E731
    for g, w in zip(jax.jit(f)(x), f(x)):
        assert (g is None) == (w is None)
        if w is not None:
            np.testing.assert_array_equal(_bytes(g), _bytes(w))


@pytest.mark.parametrize("kwargs,match", [
    (dict(x=jnp.ones((4, 4), jnp.int32)), "x.dtype"),
    (dict(x=jnp.ones((4,), jnp.float32)), "at least 2-D"),
    (dict(dtype=jnp.bfloat16), "dtype=bfloat16 must be one of"),
    (dict(scaling="channel"), "scaling='channel'"),
    (dict(scaling="block", block="col"), "block='col'"),
    (dict(scaling="block", transpose_block="tiles"), "transpose_block='tiles'"),
    (dict(transpose=1), "transpose must be a bool"),
    (dict(scaling="block", amax=1.0), "amax= is for scaling='tensor'"),
    (dict(amax=jnp.ones((2,))), r"amax must be a float scalar, got shape \(2,\)"),
    (dict(amax=jnp.int32(3)), "amax must be a float scalar.*int32"),
    (dict(amax=-1.0), r"amax=-1.0 must be > 0"),
    (dict(amax=0.0), r"amax=0.0 must be > 0"),
])
def test_bad_arguments(kwargs, match):
    x = kwargs.pop("x", jnp.ones((4, 16), jnp.float32))
    with pytest.raises(ValueError, match=match):
        quantize_fp8(x, **kwargs)


def test_catalog_generates_the_modes():
    from jax_hopper.kernels import codegen
    header = codegen.constants_header()
    assert "enum class QuantMode : int32_t { kTensor = 0, kRow = 1, kTile = 2 };" in header
    assert f"{catalog.FP8_MIN_AMAX.hex()}f" in header


@pytest.mark.parametrize("dtype", FP8)
@pytest.mark.parametrize("transpose", [False, True])
def test_given_amax_scales_and_is_recorded(rng, dtype, transpose):
    # Given x's own amax, the result is the computed one's, bit for bit; given another, the
    # scale follows it, and either way the recorded amax is x's.
    x = _x(rng, (2, 200, 144))
    own = quantize_fp8(x, dtype=dtype, transpose=transpose)
    given = quantize_fp8(x, dtype=dtype, transpose=transpose, amax=own.amax)
    assert float(own.amax) == float(np.abs(np.asarray(x, np.float32)).max())
    for g, w in zip(given, own):
        assert (g is None) == (w is None)
        if w is not None:
            np.testing.assert_array_equal(_bytes(g), _bytes(w))
    half = quantize_fp8(x, dtype=dtype, transpose=transpose, amax=own.amax / 2)
    assert float(half.scale) == float(own.scale) / 2 and float(half.amax) == float(own.amax)
    q = np.asarray(half.q, np.float32)  # the top half of the range saturates, finite
    assert np.all(np.isfinite(q)) and np.abs(q).max() == catalog.FP8_MAX[dtype]


@pytest.mark.parametrize("dtype", FP8)
def test_given_amax_keeps_an_inf_non_finite(dtype):
    # Under a given amax an Inf is NaN in q and q_t, not the fp8 maximum a saturating cast
    # gives it; a finite value far beyond the amax (its product past float32) still saturates.
    x = np.ones((4, 256), np.float32)
    x[1, 7], x[2, 9], x[3, 11] = np.inf, -np.inf, 1e36
    out = quantize_fp8(jnp.asarray(x), dtype=dtype, amax=1e-30, transpose=True)
    q, q_t = np.asarray(out.q, np.float32), np.asarray(out.q_t, np.float32)
    assert np.isnan(q[1, 7]) and np.isnan(q[2, 9]) and np.isnan(q_t[7, 1])
    assert q[3, 11] == catalog.FP8_MAX[dtype] and q_t[11, 3] == catalog.FP8_MAX[dtype]
    assert np.isfinite(q).sum() == q.size - 2 and float(out.amax) == np.inf


def test_given_amax_records_nan_and_zero():
    x = np.ones((2, 256), np.float32)
    x[1, 7] = np.nan
    assert np.isnan(float(quantize_fp8(jnp.asarray(x), amax=1.0).amax))
    assert float(quantize_fp8(jnp.zeros((16, 16)), amax=1.0).amax) == 0.0


def test_given_amax_under_vmap_records_each_entry(rng):
    x = _x(rng, (3, 64, 128))
    x = x.at[1].multiply(100)
    got = jax.vmap(lambda a: quantize_fp8(a, amax=2.0))(x)
    np.testing.assert_array_equal(got.amax, np.abs(np.asarray(x, np.float32)).max(axis=(1, 2)))
