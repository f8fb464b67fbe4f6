"""hopper_fp8_matmul without a GPU: the reference lowering against float64, argument checks that
name the rule, traced scales, vmap, and the fp8 catalog entries."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemm_helpers import (block_scales, fp8_block_reference64, fp8_operand, fp8_reference64,
                          launched_configs, rel_frob)
from jax_hopper import GemmConfig, hopper_fp8_matmul
from jax_hopper.kernels import catalog

CPU = jax.devices("cpu")[0]
E4M3, E5M2 = jnp.float8_e4m3fn, jnp.float8_e5m2


@pytest.mark.parametrize("pair", catalog.FP8_PAIRS)
def test_reference_matches_float64(pair):
    rng = np.random.default_rng()
    a = fp8_operand(rng, (2, 40, 96), pair[0])
    b = fp8_operand(rng, (24, 96), pair[1])
    bias = jnp.asarray(rng.standard_normal(24), jnp.float32)
    res = jnp.asarray(rng.standard_normal((2, 40, 24)), jnp.float32)
    sa, sb = float(rng.uniform(0.01, 2)), float(rng.uniform(0.01, 2))
    with jax.default_device(CPU):
        out = hopper_fp8_matmul(a, b, sa, jnp.float32(sb), bias=bias, residual=res,
                                activation="gelu_tanh", alpha=0.5, beta=2.0,
                                out_dtype=jnp.float32)
    ref = fp8_reference64(a, b, sa, sb, bias=bias, residual=res, activation="gelu_tanh",
                          alpha=0.5, beta=2.0)
    assert out.dtype == jnp.float32 and out.shape == (2, 40, 24)
    assert rel_frob(out, ref) < 1e-5


def test_default_out_dtype_is_bfloat16_and_odd_n():
    rng = np.random.default_rng()
    a, b = fp8_operand(rng, (5, 32), E4M3), fp8_operand(rng, (13, 32), E4M3)
    with jax.default_device(CPU):
        out = hopper_fp8_matmul(a, b, 1.0, 1.0)
    assert out.dtype == jnp.bfloat16 and out.shape == (5, 13)
    assert rel_frob(out, fp8_reference64(a, b, 1.0, 1.0)) < 6e-3


@pytest.mark.parametrize("k", [24, 200])
def test_k_of_any_pitch_is_padded(k):
    """K not a multiple of 16 (fp8 rows not whole 16-byte chunks) runs padded with zeros."""
    rng = np.random.default_rng()
    a, b = fp8_operand(rng, (9, k), E4M3), fp8_operand(rng, (16, k), E4M3)
    with jax.default_device(CPU):
        out = hopper_fp8_matmul(a, b, 0.5, 2.0, out_dtype=jnp.float32)
    assert out.shape == (9, 16)
    assert rel_frob(out, fp8_reference64(a, b, 0.5, 2.0)) < 1e-5


def test_scales_are_traced_not_compiled_in():
    rng = np.random.default_rng()
    a, b = fp8_operand(rng, (8, 32), E4M3), fp8_operand(rng, (16, 32), E4M3)
    traces = []

    @jax.jit
    def f(sa, sb):
        traces.append(None)
        return hopper_fp8_matmul(a, b, sa, sb, out_dtype=jnp.float32)

    with jax.default_device(CPU):
        for sa, sb in ((1.0, 2.0), (0.25, 3.0)):
            out = f(jnp.float32(sa), jnp.asarray([sb], jnp.float32))
            assert rel_frob(out, fp8_reference64(a, b, sa, sb)) < 1e-5
    assert len(traces) == 1


@pytest.mark.parametrize("kwargs,match", [
    (dict(a_dtype=jnp.bfloat16), r"not one of the pairs compiled for tensor scaling"),
    (dict(a_dtype=E5M2, b_dtype=E5M2), r"\('float8_e5m2', 'float8_e5m2'\) is not one"),
    (dict(transpose_b=1), r"transpose_b must be a bool"),
    (dict(transpose_a=True, k=24), r"contraction dimensions differ: .*\(transpose_a=True"),
    (dict(a_scale=jnp.ones((2,))), r"a_scale must be a float scalar or a \(1,\) array"),
    (dict(b_scale=jnp.int32(1)), r"b_scale must be a float scalar"),
    (dict(out_dtype=E4M3), r"out_dtype=float8_e4m3fn must be one of"),
    (dict(bias=jnp.ones((3,))), r"bias.shape=\(3,\) must be \(N,\)"),
    (dict(alpha=jnp.ones((2,))), r"alpha=.* must be a real Python or NumPy scalar"),
    (dict(config=GemmConfig()), r"not compiled for the fp8 GEMM"),
    (dict(config=GemmConfig(block_k=128, stages=6, block_n=128, cluster_m=4)), r"cluster"),
])
def test_bad_arguments_name_the_rule(kwargs, match):
    call = dict(a_scale=1.0, b_scale=1.0) | kwargs
    k = call.pop("k", 32)
    a = jnp.zeros((8, k), call.pop("a_dtype", E4M3))
    b = jnp.zeros((16, k), call.pop("b_dtype", E4M3))
    with pytest.raises(ValueError, match=match):
        hopper_fp8_matmul(a, b, call.pop("a_scale"), call.pop("b_scale"), **call)


def test_catalog_fp8_family():
    fam = catalog.FAMILIES["fp8"]
    assert fam.majors == ((False, False),)  # fp8 wgmma reads K-major operands only
    names = {i.name for i in catalog.compiled_instances() if i.family == "fp8"}
    assert len(names) == len(fam.dtypes) * len(fam.tiles)
    assert "sm90_gemm_e5m2xe4m3_128x256x128_s4_kk_fp8" in names
    # One 128-byte swizzle row per k-block: 128 fp8 elements.
    assert all(t.block_k == 128 for t in fam.tiles)
    inst = catalog.instance("fp8", "float8_e4m3fn", fam.tiles[0], False, False, "float8_e4m3fn")
    assert inst is not None and inst.b_dtype == ""


def test_vmap_matches_the_loop():
    rng = np.random.default_rng()
    a = fp8_operand(rng, (3, 16, 32), E4M3)
    b = fp8_operand(rng, (24, 32), E4M3)
    sa = jnp.asarray([0.5, 1.0, 2.0], jnp.float32)
    with jax.default_device(CPU):
        out = jax.vmap(lambda x, s: hopper_fp8_matmul(x, b, s, 1.0, out_dtype=jnp.float32))(a, sa)
    for i in range(3):
        assert rel_frob(out[i], fp8_reference64(a[i], b, float(sa[i]), 1.0)) < 1e-5


def _launches(f, *args):
    """(a's shape, b's shape) of each fp8 GEMM bound when f is traced."""
    with launched_configs() as seen:
        jax.jit(f).lower(*args)
    return sorted({(a_shape, b_shape) for a_shape, b_shape, _ in seen})


def test_vmap_joins_the_kernel_batch_and_folds_into_rows():
    # Per tensor, a and the residual mapped against a shared b and shared scales: one launch of
    # 4 x 16 rows; per block, a and its scale mapped: the scale's rows fold with a's; b and its
    # scale mapped: the kernel's batch; nested vmaps: every level folds.
    rng = np.random.default_rng()
    a = fp8_operand(rng, (4, 16, 256), E4M3)
    b = fp8_operand(rng, (24, 256), E4M3)
    bs = fp8_operand(rng, (4, 24, 256), E4M3)
    res = jnp.asarray(rng.standard_normal((4, 16, 24)), jnp.float32)
    bias = jnp.asarray(rng.standard_normal(24), jnp.float32)
    sa, sb = block_scales(rng, (4, 16, 2)), block_scales(rng, (4, 1, 2))

    def tensor(x, r):
        return hopper_fp8_matmul(x, b, 0.5, 2.0, bias=bias, residual=r, out_dtype=jnp.float32)

    def block_a(x, s):
        return hopper_fp8_matmul(x, b, s, sb[0], out_dtype=jnp.float32)

    def block_b(w, s):
        return hopper_fp8_matmul(a[0], w, sa[0], s, out_dtype=jnp.float32)

    cases = [(jax.vmap(tensor), (a, res), [((1, 64, 256), (1, 24, 256))],
              [fp8_reference64(a[i], b, 0.5, 2.0, bias=bias, residual=res[i]) for i in range(4)]),
             (jax.vmap(block_a), (a, sa), [((1, 64, 256), (1, 24, 256))],
              [fp8_block_reference64(a[i], b, sa[i], sb[0]) for i in range(4)]),
             (jax.vmap(block_b), (bs, sb), [((1, 16, 256), (4, 24, 256))],
              [fp8_block_reference64(a[0], bs[i], sa[0], sb[i]) for i in range(4)]),
             (jax.vmap(jax.vmap(tensor)), (a.reshape(2, 2, 16, 256), res.reshape(2, 2, 16, 24)),
              [((1, 64, 256), (1, 24, 256))],
              [fp8_reference64(a[i], b, 0.5, 2.0, bias=bias, residual=res[i]) for i in range(4)])]
    for f, args, launches, want in cases:
        assert _launches(f, *args)[-1:] == launches  # (custom_vmap traces the unmapped call too)
        with jax.default_device(CPU):
            got = np.asarray(jax.jit(f)(*args)).reshape(4, 16, 24)
        for i in range(4):
            assert rel_frob(got[i], want[i]) < 1e-5, i


def test_vmap_over_per_tensor_scales():
    # A mapped per-tensor scale beside a mapped operand: one launch with a scale per batch entry
    # (the entries' rows, scaled apart, do not fold into one product). Over operands every entry
    # shares, a mapped scale, or residual, runs entry by entry.
    rng = np.random.default_rng()
    a = fp8_operand(rng, (3, 16, 32), E4M3)
    b = fp8_operand(rng, (24, 32), E4M3)
    bs = fp8_operand(rng, (3, 24, 32), E4M3)
    sa = jnp.asarray([0.5, 1.0, 2.0], jnp.float32)
    res = jnp.asarray(rng.standard_normal((3, 16, 24)), jnp.float32)
    f32 = jnp.float32
    f = jax.vmap(lambda x, s: hopper_fp8_matmul(x, b, s, 1.0, out_dtype=f32))
    w = jax.vmap(lambda y, s: hopper_fp8_matmul(a[0], y, 1.0, s, out_dtype=f32))
    assert _launches(f, a, sa)[-1:] == [((3, 16, 32), (1, 24, 32))]
    assert _launches(w, bs, sa)[-1:] == [((1, 16, 32), (3, 24, 32))]
    with jax.default_device(CPU):
        got_f, got_w = jax.jit(f)(a, sa), jax.jit(w)(bs, sa)
    for i in range(3):
        assert rel_frob(got_f[i], fp8_reference64(a[i], b, float(sa[i]), 1.0)) < 1e-5
        assert rel_frob(got_w[i], fp8_reference64(a[0], bs[i], 1.0, float(sa[i]))) < 1e-5
    h = jax.vmap(lambda s: hopper_fp8_matmul(a[0], b, s, 1.0, out_dtype=f32))
    assert _launches(h, sa) == [((1, 16, 32), (1, 24, 32))]
    g = jax.vmap(lambda r: hopper_fp8_matmul(a[0], b, 0.5, 1.0, residual=r, out_dtype=f32))
    assert _launches(g, res) == [((1, 16, 32), (1, 24, 32))]
    with jax.default_device(CPU):
        got = jax.jit(g)(res)
    for i in range(3):
        assert rel_frob(got[i], fp8_reference64(a[0], b, 0.5, 1.0, residual=res[i])) < 1e-5


@pytest.mark.parametrize("block", [False, True], ids=["tensor", "block"])
def test_vmap_over_any_operands_matches_the_loop(block):
    # Every subset of the call's arrays mapped (a, b, residual, bias, and the scales: per
    # tensor a's, per block both): the vmapped call equals the entries computed one by one.
    rng = np.random.default_rng()
    v, m, n, k = 3, 16, 136, 256
    full = dict(a=fp8_operand(rng, (v, m, k), E4M3), b=fp8_operand(rng, (v, n, k), E4M3),
                res=jnp.asarray(rng.standard_normal((v, m, n)), jnp.float32),
                bias=jnp.asarray(rng.standard_normal((v, n)), jnp.float32))
    if block:
        full |= dict(sa=block_scales(rng, (v, m, 2)), sb=block_scales(rng, (v, 2, 2)))
    else:
        full |= dict(sa=jnp.asarray([0.5, 1.0, 2.0], jnp.float32))
    names = list(full)

    def f(*xs):
        d = dict(zip(names, xs))
        return hopper_fp8_matmul(d["a"], d["b"], d["sa"], d["sb"] if block else 1.5,
                                 residual=d["res"], bias=d["bias"], out_dtype=jnp.float32)

    with jax.default_device(CPU):
        for mapped in itertools.product((False, True), repeat=len(names)):
            if not any(mapped):
                continue
            args = [full[x] if on else full[x][0] for x, on in zip(names, mapped)]
            got = jax.jit(jax.vmap(f, in_axes=[0 if on else None for on in mapped]))(*args)
            want = [f(*[full[x][i] if on else full[x][0] for x, on in zip(names, mapped)])
                    for i in range(v)]
            assert rel_frob(got, np.asarray(jnp.stack(want), np.float64)) < 1e-6, mapped
