"""hopper_ragged_fp8_dot without a GPU (the reference lowering): against float64 with one scale
per expert and with block scales, adversarial group sizes, both rhs layouts, the epilogue, vmap,
and argument checks that name the rule."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemm_helpers import (block_scales, check_ragged_fp8_entries, emulate_grouped_kernel,
                          fp8_operand, ragged_fp8_reference64, rel_frob)
from jax_hopper import hopper_ragged_fp8_dot
from jax_hopper.kernels import catalog

CPU = jax.devices("cpu")[0]
E4M3, E5M2 = jnp.float8_e4m3fn, jnp.float8_e5m2


@pytest.mark.parametrize("sizes", [[40, 0, 70, 10], [200, 0, 0, 0], [-5, 30, 2**20, 9],
                                   [0, 0, 0, 0], [10, 10, 10, 10]])
@pytest.mark.parametrize("pair", catalog.FP8_PAIRS)
def test_matches_float64_with_a_scale_per_expert(sizes, pair):
    rng = np.random.default_rng()
    m, n, k, groups = 120, 48, 96, 4
    lhs, rhs = fp8_operand(rng, (m, k), pair[0]), fp8_operand(rng, (groups, n, k), pair[1])
    gs = jnp.asarray(sizes, jnp.int32)
    ls, rs = jnp.float32(0.5), jnp.asarray(rng.uniform(0.1, 2, groups), jnp.float32)
    bias = jnp.asarray(rng.standard_normal((groups, n)), jnp.float32)
    res = jnp.asarray(rng.standard_normal((m, n)), jnp.float32)
    with jax.default_device(CPU):
        out = jax.jit(lambda *a: hopper_ragged_fp8_dot(
            *a, bias=bias, residual=res, activation="gelu_tanh", alpha=0.5, beta=2.0,
            out_dtype=jnp.float32))(lhs, rhs, gs, ls, rs)
    want = ragged_fp8_reference64(lhs, rhs, sizes, 0.5, rs, bias=bias, residual=res,
                                  activation="gelu_tanh", alpha=0.5, beta=2.0)
    assert out.shape == (m, n) and rel_frob(out, want) < 1e-5


def test_rhs_stored_kn_and_one_scale_for_every_expert():
    rng = np.random.default_rng()
    lhs, rhs = fp8_operand(rng, (64, 32), E4M3), fp8_operand(rng, (3, 40, 32), E4M3)
    gs = jnp.asarray([20, 30, 14], jnp.int32)
    with jax.default_device(CPU):
        got = hopper_ragged_fp8_dot(lhs, jnp.swapaxes(rhs, 1, 2), gs, 2.0, 0.25,
                                    transpose_rhs=False, out_dtype=jnp.float32)
        want = hopper_ragged_fp8_dot(lhs, rhs, gs, 2.0, jnp.full((3,), 0.25),
                                     out_dtype=jnp.float32)
    assert np.array_equal(np.asarray(got), np.asarray(want))
    assert rel_frob(got, ragged_fp8_reference64(lhs, rhs, [20, 30, 14], 2.0, 0.25)) < 1e-5


def test_vmap_matches_the_loop():
    rng = np.random.default_rng()
    lhs, rhs = fp8_operand(rng, (2, 48, 32), E4M3), fp8_operand(rng, (3, 24, 32), E4M3)
    gs = jnp.asarray([[10, 20, 18], [0, 48, 0]], jnp.int32)
    rs = jnp.asarray([[0.5, 1.0, 2.0], [1.0, 1.0, 4.0]], jnp.float32)

    def f(x, g, s):
        return hopper_ragged_fp8_dot(x, rhs, g, 1.0, s, out_dtype=jnp.float32)

    with jax.default_device(CPU):
        got = jax.jit(jax.vmap(f))(lhs, gs, rs)
        want = [f(lhs[i], gs[i], rs[i]) for i in range(2)]
    for i in range(2):
        assert np.array_equal(np.asarray(got[i]), np.asarray(want[i]))


@pytest.mark.parametrize("block", [False, True], ids=["tensor", "block"])
def test_vmap_folds_the_entries_into_one_launch(rng, block):
    """The reference lowering of the folded launch (gemm_helpers.check_ragged_fp8_entries)."""
    with jax.default_device(CPU):
        check_ragged_fp8_entries(rng, 70, 48, 160, block, 1e-5)


@pytest.mark.parametrize("m,expert_major", [(70, True), (400, False)])
@pytest.mark.parametrize("block", [False, True], ids=["tensor", "block"])
def test_vmap_feeds_the_kernel_each_entrys_tiles(rng, kernel_emulation, block, m,
                                                 expert_major):
    """The folded launch's operands, table and scales read as the fp8 grouped kernel reads
    them (gemm_helpers.emulate_grouped_kernel): each entry's rows, sizes and block scales its
    own, the experts and theirs shared; 70 rows over 5 experts placed expert by expert, with
    their block scales (ragged_primitive.runs_expert_major), 400 each entry's tiles apart."""
    from jax_hopper.gemm import ragged_primitive
    calls, real = [], ragged_primitive.expert_major
    kernel_emulation.setattr(ragged_primitive, "expert_major",
                             lambda *a: calls.append(1) or real(*a))
    emulate_grouped_kernel(kernel_emulation)
    with jax.default_device(CPU):
        check_ragged_fp8_entries(rng, m, 48, 160, block, 1e-6, launch=("pure_callback",))
    assert bool(calls) == expert_major


@pytest.mark.parametrize("sizes", [[100, 0, 200, 11], [311, 0, 0, 0], [-5, 30, 2**20, 9],
                                   [0, 0, 0, 0]])
@pytest.mark.parametrize("m,n,k", [(311, 264, 300), (64, 128, 128)])
def test_block_scales_match_float64(sizes, m, n, k):
    """Block scales spanning 2^-4 .. 2^4 per row and 128 of K, and per expert's 128 x 128
    block, on sizes that leave partial blocks of K and N; the epilogue on top."""
    rng = np.random.default_rng()
    groups = 4
    lhs, rhs = fp8_operand(rng, (m, k), E4M3), fp8_operand(rng, (groups, n, k), E4M3)
    ls = block_scales(rng, (m, -(-k // 128)))
    rs = block_scales(rng, (groups, -(-n // 128), -(-k // 128)))
    bias = jnp.asarray(rng.standard_normal((groups, n)), jnp.float32)
    res = jnp.asarray(rng.standard_normal((m, n)), jnp.float32)
    with jax.default_device(CPU):
        out = jax.jit(lambda *a: hopper_ragged_fp8_dot(
            *a, bias=bias, residual=res, activation="relu", alpha=0.5, beta=2.0,
            out_dtype=jnp.float32))(lhs, rhs, jnp.asarray(sizes, jnp.int32), ls, rs)
    want = ragged_fp8_reference64(lhs, rhs, sizes, ls, rs, bias=bias, residual=res,
                                  activation="relu", alpha=0.5, beta=2.0)
    assert out.shape == (m, n) and rel_frob(out, want) < 1e-5


def test_block_scales_with_rhs_stored_kn_and_under_vmap():
    """rhs (G, K, N) takes the same (G, ceil(N/128), ceil(K/128)) scales; vmap over entries
    of lhs, sizes and lhs scales equals the loop."""
    rng = np.random.default_rng()
    lhs, rhs = fp8_operand(rng, (2, 96, 160), E4M3), fp8_operand(rng, (3, 136, 160), E4M3)
    gs = jnp.asarray([[30, 40, 26], [0, 96, 0]], jnp.int32)
    ls, rs = block_scales(rng, (2, 96, 2)), block_scales(rng, (3, 2, 2))

    def f(x, g, s):
        return hopper_ragged_fp8_dot(x, rhs, g, s, rs, out_dtype=jnp.float32)

    with jax.default_device(CPU):
        got = jax.jit(jax.vmap(f))(lhs, gs, ls)
        kn = hopper_ragged_fp8_dot(lhs[0], jnp.swapaxes(rhs, 1, 2), gs[0], ls[0], rs,
                                   transpose_rhs=False, out_dtype=jnp.float32)
        want = [f(lhs[i], gs[i], ls[i]) for i in range(2)]
    for i in range(2):
        assert np.array_equal(np.asarray(got[i]), np.asarray(want[i]))
    assert np.array_equal(np.asarray(kn), np.asarray(want[0]))
    assert rel_frob(want[1], ragged_fp8_reference64(lhs[1], rhs, [0, 96, 0], ls[1], rs)) < 1e-5


@pytest.mark.parametrize("kwargs,match", [
    (dict(lhs_scale=jnp.ones((16, 1)), rhs_scale=jnp.ones((3,))),
     r"both per tensor .* or both per block .*; got lhs_scale of rank 2 and rhs_scale of rank 1"),
    (dict(lhs_scale=jnp.ones((16, 2)), rhs_scale=jnp.ones((3, 1, 1))),
     r"lhs_scale must be a float array \(M, ceil\(K/128\)\) = \(16, 1\)"),
    (dict(lhs_scale=jnp.ones((16, 1)), rhs_scale=jnp.ones((3, 2, 1))),
     r"rhs_scale must be a float array \(G, ceil\(N/128\), ceil\(K/128\)\) = \(3, 1, 1\)"),
    (dict(lhs_scale=jnp.ones((16, 1), jnp.int32), rhs_scale=jnp.ones((3, 1, 1))),
     r"lhs_scale must be a float array .* dtype int32"),
    (dict(lhs_scale=jnp.ones((16, 1)), rhs_scale=jnp.ones((3, 1, 1)), rhs_dtype=E5M2),
     r"not one of the pairs compiled .* for block scales"),
])
def test_bad_block_scales_name_the_rule(kwargs, match):
    lhs = jnp.zeros((16, 32), E4M3)
    rhs = jnp.zeros((3, 24, 32), kwargs.pop("rhs_dtype", E4M3))
    with pytest.raises(ValueError, match=match):
        hopper_ragged_fp8_dot(lhs, rhs, jnp.asarray([4, 4, 8], jnp.int32), **kwargs)


@pytest.mark.parametrize("kwargs,match", [
    (dict(lhs_dtype=jnp.bfloat16), r"not one of the pairs compiled"),
    (dict(rhs_dtype=E5M2, lhs_dtype=E5M2), r"not one of the pairs compiled"),
    (dict(rhs_scale=jnp.ones((4,))), r"rhs_scale must be a float scalar or a \(1,\) array or "
                                     r"one per expert \(G,\)"),
    (dict(lhs_scale=jnp.ones((3,))), r"lhs_scale must be a float scalar or a \(1,\) array;"),
    (dict(group_sizes=jnp.ones((2,), jnp.int32)), r"group_sizes must be an integer array"),
    (dict(transpose_rhs=0), r"transpose_rhs must be a bool"),
    (dict(k=24), r"lhs's K \(24\) must be rhs's \(G, N, K\) K \(32\)"),
    (dict(out_dtype=E4M3), r"out_dtype=float8_e4m3fn must be one of"),
    (dict(bias=jnp.ones((3,))), r"bias.shape=\(3,\) must be \(G, N\)"),
])
def test_bad_arguments_name_the_rule(kwargs, match):
    call = dict(lhs_scale=1.0, rhs_scale=jnp.ones((3,)),
                group_sizes=jnp.asarray([4, 4, 8], jnp.int32)) | kwargs
    lhs = jnp.zeros((16, call.pop("k", 32)), call.pop("lhs_dtype", E4M3))
    rhs = jnp.zeros((3, 24, 32), call.pop("rhs_dtype", E4M3))
    with pytest.raises(ValueError, match=match):
        hopper_ragged_fp8_dot(lhs, rhs, call.pop("group_sizes"), call.pop("lhs_scale"),
                              call.pop("rhs_scale"), **call)


def test_catalog_grouped_fp8_family():
    fam = catalog.FAMILIES["grouped_fp8"]
    assert fam.majors == ((False, False),) and not fam.stream_k  # K-major; whole tiles
    names = {i.name for i in catalog.compiled_instances() if i.family == "grouped_fp8"}
    assert len(names) == len(fam.dtypes) * len(fam.tiles)
    assert all(t.block_k == 128 for t in fam.tiles)


def test_catalog_grouped_fp8_block_family():
    fam = catalog.FAMILIES["grouped_fp8_block"]
    assert fam.majors == ((False, False),) and not fam.stream_k and not fam.multicast
    assert fam.dtypes == (("float8_e4m3fn", "float8_e4m3fn"),) and fam.clusters == ((1, 1),)
    names = {i.name for i in catalog.compiled_instances() if i.family == "grouped_fp8_block"}
    assert len(names) == len(fam.tiles)
    assert all(t.block_k == catalog.FP8_SCALE_BLOCK for t in fam.tiles)
