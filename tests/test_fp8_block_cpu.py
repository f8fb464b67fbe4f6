"""hopper_fp8_matmul with block scales without a GPU: the reference lowering against float64 of
the dequantised operands, scale shapes and dtypes checked with the rule named, traced scales,
batches, and the fp8_block catalog entries."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemm_helpers import block_scales, fp8_block_reference64, fp8_operand, rel_frob
from jax_hopper import GemmConfig, hopper_fp8_matmul
from jax_hopper.kernels import catalog

CPU = jax.devices("cpu")[0]
E4M3, E5M2 = jnp.float8_e4m3fn, jnp.float8_e5m2


def test_reference_matches_dequantised_float64():
    # K = 304: three k-blocks, the last partial; N = 130: two row blocks of b, the last of 2.
    rng = np.random.default_rng()
    a, b = fp8_operand(rng, (2, 40, 304), E4M3), fp8_operand(rng, (130, 304), E4M3)
    sa, sb = block_scales(rng, (2, 40, 3)), block_scales(rng, (2, 3))
    bias = jnp.asarray(rng.standard_normal(130), jnp.float32)
    res = jnp.asarray(rng.standard_normal((2, 40, 130)), jnp.float32)
    with jax.default_device(CPU):
        out = hopper_fp8_matmul(a, b, sa, sb, bias=bias, residual=res, activation="relu",
                                alpha=0.5, beta=2.0, out_dtype=jnp.float32)
    ref = fp8_block_reference64(a, b, sa, sb, bias=bias, residual=res, activation="relu",
                                alpha=0.5, beta=2.0)
    assert out.shape == (2, 40, 130)
    assert rel_frob(out, ref) < 1e-5


def test_k_of_any_pitch_keeps_its_block_scales():
    # K = 300: not whole 16-byte rows, so a and b are padded to 304, which stays within the
    # third k-block: the scales keep their (.., 3) shape.
    rng = np.random.default_rng()
    a, b = fp8_operand(rng, (40, 300), E4M3), fp8_operand(rng, (130, 300), E4M3)
    sa, sb = block_scales(rng, (40, 3)), block_scales(rng, (2, 3))
    with jax.default_device(CPU):
        out = hopper_fp8_matmul(a, b, sa, sb, out_dtype=jnp.float32)
    assert out.shape == (40, 130)
    assert rel_frob(out, fp8_block_reference64(a, b, sa, sb)) < 1e-5


def test_each_block_scales_only_its_own_elements():
    # One nonzero scale per operand: the product is that block's alone.
    a = jnp.ones((256, 256), jnp.float32).astype(E4M3)
    b = jnp.ones((256, 256), jnp.float32).astype(E4M3)
    sa = jnp.zeros((256, 2), jnp.float32).at[3, 1].set(2.0)
    sb = jnp.zeros((2, 2), jnp.float32).at[1, 1].set(0.5)
    with jax.default_device(CPU):
        out = np.asarray(hopper_fp8_matmul(a, b, sa, sb, out_dtype=jnp.float32))
    expected = np.zeros((256, 256))
    expected[3, 128:] = 128 * 2.0 * 0.5
    np.testing.assert_array_equal(out, expected)


def test_scales_are_traced_not_compiled_in():
    rng = np.random.default_rng()
    a, b = fp8_operand(rng, (8, 160), E4M3), fp8_operand(rng, (16, 160), E4M3)
    traces = []

    @jax.jit
    def f(sa, sb):
        traces.append(None)
        return hopper_fp8_matmul(a, b, sa, sb, out_dtype=jnp.float32)

    with jax.default_device(CPU):
        for spread in (1.0, 6.0):
            sa, sb = block_scales(rng, (8, 2), spread), block_scales(rng, (1, 2), spread)
            assert rel_frob(f(sa, sb), fp8_block_reference64(a, b, sa, sb)) < 1e-5
    assert len(traces) == 1


def test_vmap_matches_the_loop():
    rng = np.random.default_rng()
    a, b = fp8_operand(rng, (3, 16, 32), E4M3), fp8_operand(rng, (24, 32), E4M3)
    sa, sb = block_scales(rng, (3, 16, 1)), block_scales(rng, (1, 1))
    with jax.default_device(CPU):
        out = jax.vmap(lambda x, s: hopper_fp8_matmul(x, b, s, sb, out_dtype=jnp.float32))(a, sa)
    for i in range(3):
        assert rel_frob(out[i], fp8_block_reference64(a[i], b, sa[i], sb)) < 1e-5


@pytest.mark.parametrize("kwargs,match", [
    (dict(a_scale=jnp.ones((8, 2))), r"a_scale of shape \(\.\.\., M, ceil\(K/128\)\).*here "
                                     r"\(8, 3\).*got shape \(8, 2\)"),
    (dict(b_scale=jnp.ones((16, 3))), r"b_scale of shape \(\.\.\., ceil\(N/128\), "
                                      r"ceil\(K/128\)\).*here \(1, 3\).*got shape \(16, 3\)"),
    (dict(a_scale=jnp.ones((1, 8, 3))), r"a_scale of shape .*a's leading dimensions"),
    (dict(b_scale=jnp.ones((1, 3), jnp.int32)), r"b_scale .*floating.*got shape \(1, 3\), "
                                                r"dtype int32"),
    (dict(b_scale=1.0), r"block scaling needs b_scale .*got shape \(\).*both scales per "
                        r"tensor or both per block"),
    (dict(a_dtype=E5M2), r"\('float8_e5m2', 'float8_e4m3fn'\) is not one of the pairs compiled "
                         r"for block scaling"),
    (dict(config=GemmConfig(block_k=128, stages=6, block_n=128, schedule="pingpong",
                            block_m=64)), r"not compiled for the block-scaled fp8 GEMM"),
])
def test_bad_arguments_name_the_rule(kwargs, match):
    call = dict(a_scale=jnp.ones((8, 3)), b_scale=jnp.ones((1, 3))) | kwargs
    a = jnp.zeros((8, 320), call.pop("a_dtype", E4M3))
    b = jnp.zeros((16, 320), E4M3)
    with pytest.raises(ValueError, match=match):
        hopper_fp8_matmul(a, b, call.pop("a_scale"), call.pop("b_scale"), **call)


def test_catalog_fp8_block_family():
    fam = catalog.FAMILIES["fp8_block"]
    assert fam.majors == ((False, False),) and fam.dtypes == (("float8_e4m3fn",) * 2,)
    # A k-block is one scale block, and a tile's columns whole scale blocks of b.
    assert all(t.block_k == catalog.FP8_SCALE_BLOCK for t in fam.tiles)
    assert all(t.block_n % catalog.FP8_SCALE_BLOCK == 0 for t in fam.tiles)
    names = {i.name for i in catalog.compiled_instances() if i.family == "fp8_block"}
    assert "sm90_gemm_e4m3_128x128x128_s6_kk_fp8_block" in names
    assert len(names) == len(fam.tiles)
