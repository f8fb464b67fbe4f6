"""transpose_fp8's kernel on an sm_90 GPU: bit for bit against jnp.swapaxes into a poisoned
output (whole and partial 128 x 128 tiles, rows TMA cannot address, batches, NaN bytes), vmap in
one launch, and hopper_fp8_matmul on an a stored (K, M) or a b stored (K, N) against float64."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemm_helpers import (REL_FROB_BOUND_FP8, REL_FROB_BOUND_FP8_BLOCK, bit_pattern,
                          block_scales, fp8_block_reference64, fp8_operand, fp8_reference64,
                          poisoned_call, rel_frob)
from jax_hopper import hopper_fp8_matmul, transpose_fp8

pytestmark = pytest.mark.gpu
E4M3, E5M2 = jnp.float8_e4m3fn, jnp.float8_e5m2


@pytest.mark.parametrize("dtype", [E4M3, E5M2])
@pytest.mark.parametrize("shape", [(16, 16), (128, 128), (3, 300, 520), (2, 129, 4112),
                                   (17, 33), (1, 4000, 3000), (2, 2, 48, 1040)])
def test_kernel_matches_swapaxes(dtype, shape):
    rng = np.random.default_rng()
    x = np.array(fp8_operand(rng, shape, dtype))
    x.reshape(-1)[rng.integers(0, x.size, 8)] = np.nan  # NaN bytes travel as they are
    x = jnp.asarray(x)
    f = jax.jit(transpose_fp8)
    assert "jax_hopper_transpose_fp8" in f.lower(x).as_text()
    want_shape = (*shape[:-2], shape[-1], shape[-2])
    got = poisoned_call(transpose_fp8, want_shape, dtype, x)
    assert got.shape == want_shape and got.dtype == dtype
    bad = np.flatnonzero(bit_pattern(got) != bit_pattern(jnp.swapaxes(x, -1, -2)))
    assert bad.size == 0, f"{bad.size} bytes differ, first at {bad[:5]}"


def test_vmap_is_one_launch():
    x = fp8_operand(np.random.default_rng(), (4, 2, 160, 96), E4M3)
    f = jax.jit(jax.vmap(transpose_fp8, in_axes=1))
    hlo = f.lower(x).compile().as_text()
    assert hlo.count('custom_call_target="jax_hopper_transpose_fp8"') == 1
    assert np.array_equal(bit_pattern(f(x)), bit_pattern(jnp.swapaxes(jnp.moveaxis(x, 1, 0),
                                                                      -1, -2)))


@pytest.mark.parametrize("transpose_a,transpose_b", [(False, False), (True, True)])
@pytest.mark.parametrize("block", [False, True])
@pytest.mark.parametrize("m,n,k", [(256, 384, 512), (64, 1000, 264), (1, 4096, 1024)])
def test_fp8_matmul_of_mn_major_operands_matches_float64(block, m, n, k, transpose_a,
                                                          transpose_b):
    rng = np.random.default_rng()
    a, b_nk = fp8_operand(rng, (m, k), E4M3), fp8_operand(rng, (n, k), E4M3)
    if block:
        sa = block_scales(rng, (m, -(-k // 128)))
        sb = block_scales(rng, (-(-n // 128), -(-k // 128)))
    else:
        sa, sb = jnp.float32(0.25), jnp.float32(0.5)
    a_in, b_in = (a.T if transpose_a else a), (b_nk if transpose_b else b_nk.T)

    def fn(a, b, sa, sb):
        return hopper_fp8_matmul(a, b, sa, sb, transpose_a=transpose_a, transpose_b=transpose_b,
                                 out_dtype=jnp.float32)

    hlo = jax.jit(fn).lower(a_in, b_in, sa, sb).compile().as_text()
    # one launch: the operand stored MN-major
    assert hlo.count('custom_call_target="jax_hopper_transpose_fp8"') == 1
    out = poisoned_call(fn, (m, n), jnp.float32, a_in, b_in, sa, sb)
    if block:
        err, bound = rel_frob(out, fp8_block_reference64(a, b_nk, sa, sb)), REL_FROB_BOUND_FP8_BLOCK
    else:
        err, bound = rel_frob(out, fp8_reference64(a, b_nk, 0.25, 0.5)), REL_FROB_BOUND_FP8
    assert err < bound["float32"], err
