"""hopper_ragged_fp8_contract without a GPU: the reference lowering against float64 of the fp8
values (adversarial sizes, every out dtype, padding), both layouts, vmap, empty problems, the
config choice and the argument errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemm_helpers import (REL_FROB_BOUND_FP8, contract_reference64, fp8_operand, rel_frob,
                          to64)
from jax_hopper import GemmConfig, hopper_ragged_fp8_contract
from jax_hopper.gemm.heuristics import choose_contraction_config
from jax_hopper.kernels import catalog

E4M3, E5M2 = jnp.float8_e4m3fn, jnp.float8_e5m2


@pytest.fixture(autouse=True)
def _on_cpu():
    with jax.default_device(jax.devices("cpu")[0]):
        yield


@pytest.mark.parametrize("sizes", [[10, 0, -3, 50, 60], [0, 100, 0], [2**31 - 1, 5],
                                   [1] * 20, [0, 0]], ids=str)
@pytest.mark.parametrize("out_dtype", catalog.OUTPUT_DTYPES)
def test_reference_against_float64(rng, sizes, out_dtype):
    xt, yt = fp8_operand(rng, (24, 100), E4M3), fp8_operand(rng, (40, 100), E5M2)
    got = jax.jit(hopper_ragged_fp8_contract, static_argnames="out_dtype")(
        xt, yt, jnp.asarray(sizes, jnp.int32), 0.5, 0.125, out_dtype=out_dtype)
    assert got.shape == (len(sizes), 24, 40) and got.dtype == jnp.dtype(out_dtype)
    want = contract_reference64(to64(xt).T * 0.5, to64(yt).T * 0.125, sizes)
    assert rel_frob(got, want) < REL_FROB_BOUND_FP8[out_dtype]


def test_layouts_agree_and_padding(rng):
    """M = 37 and Q = 21 need padding; (M, P) operands give what their transposes give."""
    xt, yt = fp8_operand(rng, (16, 37), E4M3), fp8_operand(rng, (21, 37), E4M3)
    gs = jnp.asarray([10, 20, 7], jnp.int32)
    got = hopper_ragged_fp8_contract(xt, yt, gs, 1.0, 2.0, out_dtype=jnp.float32)
    rows_first = hopper_ragged_fp8_contract(xt.T, yt.T, gs, 1.0, 2.0, out_dtype=jnp.float32,
                                            transposed=False)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(rows_first))
    want = contract_reference64(to64(xt).T, to64(yt).T * 2.0, [10, 20, 7])
    assert rel_frob(got, want) < REL_FROB_BOUND_FP8["float32"]


def test_vmap_matches_the_loop(rng):
    xt, yt = fp8_operand(rng, (3, 32, 48), E4M3), fp8_operand(rng, (3, 16, 48), E5M2)
    gs = jnp.asarray([[10, 38], [0, 48], [48, 0]], jnp.int32)
    scales = jnp.asarray([0.5, 1.0, 2.0], jnp.float32)
    got = jax.jit(jax.vmap(lambda x, y, g, s: hopper_ragged_fp8_contract(x, y, g, s, 1.0)))(
        xt, yt, gs, scales)
    for i in range(3):
        np.testing.assert_array_equal(
            np.asarray(got[i]),
            np.asarray(hopper_ragged_fp8_contract(xt[i], yt[i], gs[i], scales[i], 1.0)))


def test_empty_problems():
    xt, yt = jnp.zeros((8, 0), E4M3), jnp.zeros((16, 0), E4M3)
    out = hopper_ragged_fp8_contract(xt, yt, jnp.asarray([0, 0]), 1.0, 1.0)
    assert out.shape == (2, 8, 16) and out.dtype == jnp.bfloat16 and not np.any(to64(out))
    none = hopper_ragged_fp8_contract(jnp.ones((8, 4), E4M3), jnp.ones((16, 4), E4M3),
                                      jnp.zeros((0,), jnp.int32), 1.0, 1.0)
    assert none.shape == (0, 8, 16)


def test_default_config_is_compiled():
    fam = catalog.FAMILIES["grouped_contraction_fp8"]
    for p, q in [(64, 64), (4096, 14336), (200, 7168)]:
        config = choose_contraction_config(p, q, "grouped_contraction_fp8")
        config.validate(E4M3.dtype.name, False, False, family=fam.name, b_dtype=E5M2.dtype.name)
    names = {i.name for i in catalog.compiled_instances() if i.family == fam.name}
    assert len(names) == len(catalog.FP8_PAIRS) * len(fam.tiles)
    assert all(n.endswith("_kk_contract_fp8") for n in names)


_X, _Y = jnp.ones((16, 32), E4M3), jnp.ones((8, 32), E4M3)


@pytest.mark.parametrize("args,kwargs,match", [
    ((_X.astype(jnp.bfloat16), _Y), {}, r"\(x.dtype, y.dtype\) = \('bfloat16', "
                                        r"'float8_e4m3fn'\) is not one of the fp8 pairs"),
    ((_X.astype(E5M2), _Y.astype(E5M2)), {}, r"\('float8_e5m2', 'float8_e5m2'\) is not one"),
    ((_X, _Y[:, :31]), {}, r"must be \(P, M\) and \(Q, M\) with the same rows M"),
    ((_X, _Y), dict(transposed=False), r"must be \(M, P\) and \(M, Q\) with the same rows M"),
    ((_X[None], _Y), {}, r"x.shape=\(1, 16, 32\)"),
    ((_X, _Y), dict(transposed=1), r"transposed must be a bool"),
    ((_X, _Y), dict(out_dtype=jnp.int8), r"out_dtype=int8 must be one of"),
    ((_X, _Y), dict(config=GemmConfig(128, 256, 64)), r"GemmConfig|not compiled"),
], ids=["16_bit", "e5m2_pair", "rows_differ", "rows_first_differ", "rank", "transposed",
        "out_dtype", "config"])
def test_bad_arguments(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        hopper_ragged_fp8_contract(*args, jnp.asarray([16, 16]), 1.0, 1.0, **kwargs)


@pytest.mark.parametrize("sizes,scales,match", [
    (jnp.asarray([[16, 16]]), (1.0, 1.0), r"group_sizes must be a 1-D integer array"),
    (jnp.asarray([16.0, 16.0]), (1.0, 1.0), r"group_sizes must be an integer array"),
    (jnp.asarray([16, 16]), (jnp.ones((2,)), 1.0), r"x_scale must be a float scalar or a "
                                                    r"\(1,\) array"),
    (jnp.asarray([16, 16]), (1.0, jnp.ones((), jnp.int32)), r"y_scale must be a float scalar"),
], ids=["sizes_rank", "sizes_dtype", "x_scale_shape", "y_scale_dtype"])
def test_bad_sizes_and_scales(sizes, scales, match):
    with pytest.raises(ValueError, match=match):
        hopper_ragged_fp8_contract(_X, _Y, sizes, *scales)
