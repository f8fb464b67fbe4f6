"""transpose_fp8 without a GPU (the reference lowering) and hopper_fp8_matmul on operands stored
MN-major through it (a (K, M), b (K, N)): the same values as the K-major call; argument checks
that name the rule; vmap."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gemm_helpers import bit_pattern, block_scales, fp8_operand, fp8_reference64, rel_frob
from jax_hopper import hopper_fp8_matmul, transpose_fp8
from properties import RUNNING

CPU = jax.devices("cpu")[0]
E4M3, E5M2 = jnp.float8_e4m3fn, jnp.float8_e5m2


@pytest.mark.parametrize("dtype", [E4M3, E5M2])
@pytest.mark.parametrize("shape", [(40, 24), (3, 17, 130), (2, 2, 1, 16), (0, 16), (3, 0, 5),
                                   (0, 4, 4)])
def test_transpose_is_swapaxes_bit_for_bit(dtype, shape):
    x = fp8_operand(np.random.default_rng(), shape, dtype)
    with jax.default_device(CPU):
        got = jax.jit(transpose_fp8)(x)
    assert got.shape == (*shape[:-2], shape[-1], shape[-2]) and got.dtype == dtype
    assert np.array_equal(bit_pattern(got), bit_pattern(jnp.swapaxes(x, -1, -2)))


@pytest.mark.parametrize("x,match", [
    (jnp.zeros((4, 4), jnp.bfloat16), r"x.dtype=bfloat16 must be one of"),
    (jnp.zeros((16,), E4M3), r"at least 2-D"),
])
def test_bad_arguments_name_the_rule(x, match):
    with pytest.raises(ValueError, match=match):
        transpose_fp8(x)


@pytest.mark.parametrize("in_axes", [0, 1, 2])
def test_vmap_matches_the_loop(in_axes):
    x = fp8_operand(np.random.default_rng(), (3, 32, 48), E4M3)
    with jax.default_device(CPU):
        got = jax.vmap(transpose_fp8, in_axes=in_axes)(x)
        want = jnp.stack([transpose_fp8(e) for e in jnp.moveaxis(x, in_axes, 0)])
    assert np.array_equal(bit_pattern(got), bit_pattern(want))


@pytest.mark.parametrize("transpose_a,transpose_b", [(False, False), (True, True), (True, False)])
@pytest.mark.parametrize("scaling", ["tensor", "block"])
def test_fp8_matmul_of_mn_major_operands_equals_the_k_major_call(scaling, transpose_a,
                                                                  transpose_b):
    rng = np.random.default_rng()
    m, n, k = 40, 136, 264
    a, b_nk = fp8_operand(rng, (2, m, k), E4M3), fp8_operand(rng, (n, k), E4M3)
    if scaling == "tensor":
        sa, sb = jnp.float32(0.5), jnp.float32(2.0)
    else:  # scales are per block of the logical (M, K) and (N, K) however stored
        sa, sb = block_scales(rng, (2, m, 3)), block_scales(rng, (2, 3))  # K: 3 blocks; N: 2
    a_in = jnp.swapaxes(a, -1, -2) if transpose_a else a
    b_in = b_nk if transpose_b else b_nk.T
    with jax.default_device(CPU):
        got = jax.jit(lambda a, b, sa, sb: hopper_fp8_matmul(
            a, b, sa, sb, transpose_a=transpose_a, transpose_b=transpose_b,
            out_dtype=jnp.float32))(a_in, b_in, sa, sb)
        want = hopper_fp8_matmul(a, b_nk, sa, sb, out_dtype=jnp.float32)
    assert np.array_equal(np.asarray(got), np.asarray(want))
    if scaling == "tensor":
        assert rel_frob(got, fp8_reference64(a, b_nk, 0.5, 2.0)) < 1e-5


def test_vmap_of_a_kn_b_matches_the_loop():
    # vmap over an fp8 (K, N) b: the transposition joins the vmap batch, then the GEMM's.
    rng = np.random.default_rng()
    a, b_kn = fp8_operand(rng, (3, 16, 64), E4M3), fp8_operand(rng, (3, 64, 24), E4M3)

    def f(a, b):
        return hopper_fp8_matmul(a, b, 0.5, 2.0, transpose_b=False, out_dtype=jnp.float32)

    with jax.default_device(CPU):
        got = jax.jit(jax.vmap(f))(a, b_kn)
        want = jnp.stack([f(x, y) for x, y in zip(a, b_kn)])
    assert np.array_equal(np.asarray(got), np.asarray(want))


@given(st.lists(st.integers(0, 3), max_size=2), st.integers(0, 40), st.integers(0, 40),
       st.sampled_from([E4M3, E5M2]))
@RUNNING
def test_any_shape_is_swapaxes(lead, r, c, dtype):
    x = fp8_operand(np.random.default_rng(r * 41 + c), (*lead, r, c), dtype)
    with jax.default_device(CPU):
        got = transpose_fp8(x)
    assert got.shape == (*lead, c, r)
    assert np.array_equal(bit_pattern(got), bit_pattern(jnp.swapaxes(x, -1, -2)))
