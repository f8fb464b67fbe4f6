"""hopper_matmul on sharded operands: local GEMMs per device, a psum only for a split K (a
reduce-scatter where the output is asked for split over K's mesh axes).

The device count is fixed when jax starts, so the cases run in one child process (this file
run as a script) with XLA_FLAGS=--xla_force_host_platform_device_count=4; the pytest process
keeps its single CPU device. test_sharding_gpu.py runs the same cases on the GPUs there are.
Each case compares the sharded result with the unsharded one and reads the compiled HLO: no
all-gather anywhere (a sharded operand is never gathered), an all-reduce exactly where a
contraction is split.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import traceback

import numpy as np
import pytest

CASES = ["batch", "m", "n", "n_k_major_b", "k_with_epilogue", "batch_and_n_2d", "auto_mesh",
         "output_sharding", "grad_data_parallel", "vmap", "shard_map", "glu_rows", "glu_f",
         "glu_k", "glu_grad", "k_scatter_m", "k_scatter_n", "k_scatter_bf16", "glu_k_scatter",
         "ragged_n", "ragged_n_k_major", "ragged_experts_gathered", "ragged_experts_shard_map",
         "ragged_k_split", "ragged_n_grad", "ragged_glu_f", "ragged_glu_k", "contract_columns",
         "ragged_rows", "ragged_dp_grad", "contract_rows", "fp8_rows", "fp8_block_n", "fp8_block_k",
         "fp8_tensor_k_scatter", "fp8_kn_columns", "fp8_entry_scales", "ragged_fp8_n",
         "ragged_fp8_rows", "ragged_fp8_block_n", "ragged_fp8_block_rows", "ragged_fp8_k",
         "ragged_fp8_block_k", "fp8_ragged_dp_grad", "fp8_ragged_tp_grad", "fp8_ragged_served_n",
         "contract_fp8_rows", "contract_fp8_columns", "contract_fp8_block_columns",
         "quantize_rows_tensor", "quantize_cols_blocks", "quantize_one_row_block",
         "quantize_unaligned_rows", "quantize_given_amax",
         "fp8_matmul_data_parallel", "config_per_shard", "tune_problems_per_shard",
         "typed_reshapes", "empty_problems", "shard_map_grads", "shard_map_contract_local",
         "shard_map_delayed_meta", "quantize_blocks_fewer_than_devices",
         "fp8_block_two_axes", "glu_grad_f_split", "ragged_glu_grad_f_split",
         "sequence_split_grad", "explicit_grad_types", "fp8_block_few_rows_warned",
         "explicit_result_types", "glu_vmap_grad", "ragged_vmap_entries",
         "contract_vmap_entries", "ragged_glu_vmap_grad", "ragged_fp8_vmap_entries",
         "ragged_vmap_summed_grad", "ragged_glu_summed_grad", "glu_summed_grad",
         "matmul_summed_grad"]


def _full_spec(x) -> tuple:
    """x's PartitionSpec with an entry for every dimension (None: whole), however it is
    spelled (P(None, 'x') and P(None, 'x', None) alike)."""
    spec = tuple(x.sharding.spec)
    return spec + (None,) * (x.ndim - len(spec))


def run_cases(env: dict, timeout: int = 600) -> dict:
    """Runs every case in a child process; returns {case: "ok" | error text}."""
    proc = subprocess.run([sys.executable, os.path.abspath(__file__)], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=timeout,
                          cwd=os.path.dirname(os.path.abspath(__file__)))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, f"child failed:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return json.loads(lines[-1])


@pytest.fixture(scope="module")
def results():
    return run_cases({"XLA_FLAGS": "--xla_force_host_platform_device_count=4",
                      "JAX_PLATFORMS": "cpu"})


@pytest.mark.parametrize("case", CASES)
def test_sharded(results, case):
    if results[case].startswith("skip:"):
        pytest.skip(results[case][5:])
    assert results[case] == "ok", results[case]


# ------------------------------------------------------------------ the child process

def _rand(rng, shape, dtype="bfloat16"):
    import jax.numpy as jnp
    return jnp.asarray(rng.standard_normal(shape, dtype=np.float32)).astype(dtype)


def _compare(f, args, shardings, *, all_reduce: bool, bound=1e-5, reference=None, mesh=None):
    """f under jit on sharded args (inside jax.set_mesh(mesh) where one is given) vs
    (reference or f) on whole ones, outside it; the HLO's collectives as promised."""
    import contextlib
    import jax
    from gemm_helpers import rel_frob, to64
    want = jax.jit(reference or f)(*args)
    placed = [x if s is None else jax.device_put(x, s) for x, s in zip(args, shardings)]
    jf = jax.jit(f)
    with jax.set_mesh(mesh) if mesh is not None else contextlib.nullcontext():
        got = jf(*placed)
        hlo = jf.lower(*placed).compile().as_text()
    for w, g in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
        err = rel_frob(g, to64(w))
        assert err < bound, f"sharded result differs: rel. error {err}"
    assert "all-gather" not in hlo, "an operand is gathered"
    assert ("all-reduce" in hlo) == all_reduce, f"all-reduce present: {'all-reduce' in hlo}"
    return got


def _cases():
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from jax_hopper import hopper_glu, hopper_matmul, hopper_ragged_dot

    n_dev = jax.device_count()
    mesh = jax.make_mesh((n_dev,), ("x",))
    rng = np.random.default_rng(0)
    f32 = jnp.float32
    bsz, m, k, n = 2 * n_dev, 64, 128, 16 * n_dev

    def named(*spec, on=mesh):
        return NamedSharding(on, P(*spec))

    def mm(**kw):
        return lambda a, b, *extra: hopper_matmul(a, b, out_dtype=f32, **kw)

    def batch():
        got = _compare(mm(), (_rand(rng, (bsz, m, k)), _rand(rng, (k, n))),
                       (named("x"), None), all_reduce=False)
        assert got.sharding.spec[0] == "x"

    def m_split():
        _compare(mm(activation="gelu_tanh"), (_rand(rng, (m, k)), _rand(rng, (k, n))),
                 (named("x"), None), all_reduce=False)

    def n_split():
        _compare(lambda a, b, bias: hopper_matmul(a, b, bias=bias, activation="silu",
                                                  out_dtype=f32),
                 (_rand(rng, (m, k)), _rand(rng, (k, n)), _rand(rng, (n,), f32)),
                 (None, named(None, "x"), named("x")), all_reduce=False)

    def n_k_major_b():
        _compare(mm(transpose_b=True), (_rand(rng, (m, k)), _rand(rng, (n, k))),
                 (None, named("x")), all_reduce=False)

    def k_with_epilogue():
        # Partials are summed in float32 before bias, GELU and residual are applied.
        f = lambda a, b, bias, res: hopper_matmul(a, b, bias=bias, residual=res,  # noqa: E731
                                                  activation="gelu", alpha=0.5, beta=2.0,
                                                  out_dtype=f32)
        _compare(f, (_rand(rng, (bsz, m, k)), _rand(rng, (k, n)), _rand(rng, (n,), f32),
                     _rand(rng, (bsz, m, n), f32)),
                 (named(None, None, "x"), named("x"), None, None), all_reduce=True, bound=1e-5)

    def batch_and_n_2d():
        if n_dev < 4:
            return "skip:needs 4 devices for a 2 x 2 mesh"
        mesh2 = jax.make_mesh((2, n_dev // 2), ("x", "y"))
        got = _compare(mm(), (_rand(rng, (bsz, m, k)), _rand(rng, (k, n))),
                       (named("x", on=mesh2), named(None, "y", on=mesh2)), all_reduce=False)
        assert tuple(got.sharding.spec) == ("x", None, "y"), got.sharding.spec
        return None

    def auto_mesh():
        auto = jax.sharding.Mesh(np.array(jax.devices()), ("x",))
        _compare(mm(), (_rand(rng, (m, k)), _rand(rng, (k, n))),
                 (named("x", on=auto), None), all_reduce=False)

    def output_sharding():
        # Replicated operands, a sharded result: each device computes only its rows.
        f = jax.jit(mm(), out_shardings=named(None, "x"))
        a, b = _rand(rng, (bsz, m, k)), _rand(rng, (k, n))
        got = f(a, b)
        assert "all-gather" not in f.lower(a, b).compile().as_text()
        assert np.array_equal(np.asarray(got), np.asarray(jax.jit(mm())(a, b)))

    def grad_data_parallel():
        # Activations split along the batch, weights replicated: dW is one K-split GEMM whose
        # partial products are all-reduced; nothing is gathered.
        def loss(a, w, bias):
            return hopper_matmul(a, w, bias=bias, activation="silu", out_dtype=f32).sum()
        _compare(jax.grad(loss, (0, 1, 2)),
                 (_rand(rng, (bsz, m, k)), _rand(rng, (k, n)), _rand(rng, (n,), f32)),
                 (named("x"), None, None), all_reduce=True, bound=2e-2)

    def vmap():
        _compare(jax.vmap(mm(), (0, None)), (_rand(rng, (bsz, m, k)), _rand(rng, (k, n))),
                 (named("x"), None), all_reduce=False)

    def shard_map():
        @functools.partial(jax.shard_map, mesh=mesh, in_specs=(P(None, "x"), P("x")),
                           out_specs=P())
        def split_k(a, b):
            return jax.lax.psum(hopper_matmul(a, b, out_dtype=f32), "x")

        _compare(split_k, (_rand(rng, (m, k)), _rand(rng, (k, n))),
                 (named(None, "x"), named("x")), all_reduce=True, reference=mm())

    # hopper_glu: w (K, 2, F) keeps gate and up columns together under a split of F.
    def glu(**kw):
        return lambda x, w, *extra: hopper_glu(x, w, out_dtype=f32, **kw)

    def glu_rows():
        got = _compare(glu(activation="gelu"), (_rand(rng, (bsz, m, k)), _rand(rng, (k, 2, n))),
                       (named("x"), None), all_reduce=False)
        assert got.sharding.spec[0] == "x"

    def glu_f():
        _compare(lambda x, w, bias: hopper_glu(x, w, bias=bias, out_dtype=f32),
                 (_rand(rng, (m, k)), _rand(rng, (k, 2, n)), _rand(rng, (2, n), f32)),
                 (None, named(None, None, "x"), named(None, "x")), all_reduce=False)

    def glu_k():
        # Partial products are summed in float32 before bias, the unit and the residual.
        f = lambda x, w, bias, res: hopper_glu(x, w, bias=bias, residual=res,  # noqa: E731
                                               alpha=0.5, beta=2.0, out_dtype=f32)
        _compare(f, (_rand(rng, (m, k)), _rand(rng, (k, 2, n)), _rand(rng, (2, n), f32),
                     _rand(rng, (m, n), f32)),
                 (named(None, "x"), named("x"), None, None), all_reduce=True)

    def glu_grad():
        def loss(x, w):
            return hopper_glu(x, w, out_dtype=f32).sum()
        _compare(jax.grad(loss, (0, 1)), (_rand(rng, (bsz, m, k)), _rand(rng, (k, 2, n))),
                 (named("x"), None), all_reduce=True, bound=2e-2)

    # A split K with the output asked for split over the same axis: the partial sums are
    # reduce-scattered (each device gets its rows or columns), nothing all-reduced or gathered.
    def k_scattered(f, args, shardings, out_spec):
        jf = jax.jit(f, out_shardings=named(*out_spec))
        placed = [x if sh is None else jax.device_put(x, sh) for x, sh in zip(args, shardings)]
        got, hlo = jf(*placed), jf.lower(*placed).compile().as_text()
        assert "reduce-scatter" in hlo and "all-reduce" not in hlo and "all-gather" not in hlo
        assert tuple(got.sharding.spec) == out_spec, got.sharding.spec
        from gemm_helpers import rel_frob, to64
        err = rel_frob(got, to64(jax.jit(f)(*args)))
        assert err < 1e-5, f"sharded result differs: rel. error {err}"

    def with_epilogue(a, b, bias, res):
        return hopper_matmul(a, b, bias=bias, residual=res, activation="gelu", alpha=0.5,
                             beta=2.0, out_dtype=f32)

    def k_args():
        return (_rand(rng, (m, k)), _rand(rng, (k, n)), _rand(rng, (n,), f32),
                _rand(rng, (m, n), f32))

    def k_scatter_m():
        k_scattered(with_epilogue, k_args(), (named(None, "x"), named("x"), None, None),
                    ("x", None))

    def k_scatter_n():
        k_scattered(with_epilogue, k_args(), (named(None, "x"), named("x"), None, None),
                    (None, "x"))

    def k_scatter_bf16():
        # A 16-bit out dtype: the partials are bf16 (sharding.partial_dtype), so the
        # reduce-scatter moves half of float32's bytes; the result stays within bf16's bound of
        # the float64 product.
        from gemm_helpers import REL_FROB_BOUND, reference64, rel_frob
        f = jax.jit(lambda a, b: hopper_matmul(a, b), out_shardings=named("x", None))
        a, b = _rand(rng, (m, 4 * k)), _rand(rng, (4 * k, n))
        placed = (jax.device_put(a, named(None, "x")), jax.device_put(b, named("x")))
        got = f(*placed)
        assert got.dtype == jnp.bfloat16 and tuple(got.sharding.spec) == ("x", None)
        err = rel_frob(got, reference64(a, b))
        assert err < REL_FROB_BOUND["bfloat16"], f"rel. error {err}"
        hlo = f.lower(*placed).compile().as_text()
        scatters = [ln.split("reduce-scatter(")[0] for ln in hlo.splitlines()
                    if "reduce-scatter(" in ln]
        # (XLA's CPU backend widens a bf16 collective to float32; the GPU's runs it in bf16.)
        moved = "f32[" if jax.default_backend() == "cpu" else "bf16["
        assert scatters and all(moved in ln for ln in scatters), scatters
        assert "all-reduce" not in hlo and "all-gather" not in hlo

    def glu_k_scatter():
        # Rows only: a split of the [gate | up] product's columns would part gate from up.
        k_scattered(lambda x, w, res: hopper_glu(x, w, residual=res, out_dtype=f32),
                    (_rand(rng, (m, k)), _rand(rng, (k, 2, n)), _rand(rng, (m, n), f32)),
                    (named(None, "x"), named("x"), None), ("x", None))

    # hopper_ragged_dot: the experts' N split runs locally; other splits are gathered.
    groups, rows = 6, 8 * n_dev * 6
    moe_rows = rows
    sizes = jnp.asarray(rng.multinomial(rows - 5, np.ones(groups) / groups), jnp.int32)

    def ragged(**kw):
        return lambda x, w, *extra: hopper_ragged_dot(
            x, w, sizes, out_dtype=f32, **dict(zip(("bias", "residual"), extra)), **kw)

    def ragged_n():
        got = _compare(ragged(activation="silu"),
                       (_rand(rng, (rows, k)), _rand(rng, (groups, k, n)),
                        _rand(rng, (groups, n), f32), _rand(rng, (rows, n), f32)),
                       (None, named(None, None, "x"), named(None, "x"), None), all_reduce=False)
        assert tuple(got.sharding.spec) == (None, "x"), got.sharding.spec

    def ragged_n_k_major():
        _compare(ragged(transpose_rhs=True), (_rand(rng, (rows, k)), _rand(rng, (groups, n, k))),
                 (None, named(None, "x")), all_reduce=False)

    def ragged_experts_gathered():  # groups split under jit: gathered, with a warning
        import warnings
        sizes8 = jnp.asarray(rng.multinomial(rows, np.ones(8) / 8), jnp.int32)
        x, w = _rand(rng, (rows, k)), _rand(rng, (8, k, n))
        placed = jax.device_put(w, named("x"))

        def f(x, w):
            return hopper_ragged_dot(x, w, sizes8, out_dtype=f32)

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            jf = jax.jit(f)
            got, hlo = jf(x, placed), jf.lower(x, placed).compile().as_text()
        messages = [str(c.message) for c in caught]
        assert any(m.startswith("hopper_ragged_dot: rhs") and "gathered" in m
                   for m in messages), messages
        assert "all-gather" in hlo
        np.testing.assert_array_equal(np.asarray(got), np.asarray(jax.jit(f)(x, w)))

    def ragged_experts_shard_map():
        # Expert parallelism: each device holds its experts and the rows routed to them.
        local = groups // 2 if n_dev == 2 else 1
        per_dev = rows // n_dev
        x = _rand(rng, (rows, k))
        w = _rand(rng, (n_dev * local, k, n))
        local_sizes = jnp.asarray(rng.multinomial(per_dev, np.ones(local) / local,
                                                  size=n_dev).reshape(-1), jnp.int32)

        @functools.partial(jax.shard_map, mesh=mesh, in_specs=(P("x"), P("x"), P("x")),
                           out_specs=P("x"))
        def expert_parallel(x, w, s):
            return hopper_ragged_dot(x, w, s, out_dtype=f32)

        got = jax.jit(expert_parallel)(jax.device_put(x, named("x")), jax.device_put(w, named("x")),
                                       jax.device_put(local_sizes, named("x")))
        # Each device's shards through the unsharded op: the same kernel, so equal bit for bit
        # (jax.lax.ragged_dot sums in another order on a GPU: 1e-6 apart, H200 x2, 2026-11-24).
        want = [hopper_ragged_dot(x[d * per_dev:(d + 1) * per_dev], w[d * local:(d + 1) * local],
                                  local_sizes[d * local:(d + 1) * local], out_dtype=f32)
                for d in range(n_dev)]
        np.testing.assert_array_equal(np.asarray(got), np.concatenate(want))

    def ragged_k_split():
        # K split on lhs and rhs alike: float32 partials summed (psum), the epilogue after.
        _compare(ragged(activation="gelu"),
                 (_rand(rng, (rows, k)), _rand(rng, (groups, k, n)),
                  _rand(rng, (groups, n), f32), _rand(rng, (rows, n), f32)),
                 (named(None, "x"), named(None, "x"), None, None), all_reduce=True)

    def ragged_n_grad():
        # Tensor-parallel training: rhs split along N. d rhs (the grouped contraction) stays
        # local; d lhs contracts over the split N: psum, no gather.
        def grads(x, w, dy):  # dy split along N, as the layer's output is
            return jax.grad(lambda x, w: jnp.sum(ragged()(x, w) * dy), (0, 1))(x, w)

        got = _compare(grads, (_rand(rng, (rows, k)), _rand(rng, (groups, k, n)),
                               _rand(rng, (rows, n), f32)),
                       (None, named(None, None, "x"), named(None, "x")), all_reduce=True,
                       bound=1e-2)
        assert tuple(got[1].sharding.spec) == (None, None, "x"), got[1].sharding.spec

    def ragged_glu_f():
        from jax_hopper import hopper_ragged_glu
        _compare(lambda x, w, b: hopper_ragged_glu(x, w, sizes, bias=b, out_dtype=f32),
                 (_rand(rng, (rows, k)), _rand(rng, (groups, k, 2, n)),
                  _rand(rng, (groups, 2, n), f32)),
                 (None, named(None, None, None, "x"), named(None, None, "x")), all_reduce=False)

    def ragged_glu_k():
        # The experts' gated weights split along K (typed on the arrays: make_mesh's explicit
        # axes), as an FSDP layout puts them: partial products summed, then the unit.
        from jax_hopper import hopper_ragged_glu
        _compare(lambda x, w: hopper_ragged_glu(x, w, sizes, out_dtype=f32),
                 (_rand(rng, (rows, k)), _rand(rng, (groups, k, 2, n))),
                 (named(None, "x"), named(None, "x", None, None)), all_reduce=True)

    def empty_problems():
        # Nothing to multiply (no rows, or K = 0) on operands whose splits a product would have
        # to reconcile (a's rows and b's columns on one axis): the epilogue of a zero product,
        # from no operand's sharding.
        from jax_hopper import hopper_fp8_matmul
        bias = _rand(rng, (n,), "float32")
        for rows, kk in ((0, k), (8 * n_dev, 0)):
            a = jax.device_put(_rand(rng, (rows, kk)), named("x"))
            got = jax.jit(lambda a, b: hopper_matmul(a, b, bias=bias, activation="silu",
                                                     out_dtype=f32))(
                a, jax.device_put(_rand(rng, (kk, n)), named(None, "x")))
            np.testing.assert_allclose(got, jax.nn.silu(jnp.broadcast_to(bias, (rows, n))),
                                       atol=1e-6)
            got = jax.jit(lambda a, w: hopper_glu(a, w, out_dtype=f32))(
                a, jax.device_put(_rand(rng, (kk, 2, n)), named(None, None, "x")))
            assert got.shape == (rows, n) and not np.any(np.asarray(got))
            e4m3 = jnp.float8_e4m3fn
            got = jax.jit(lambda a, b: hopper_fp8_matmul(a, b, f32(2), f32(3), bias=bias,
                                                         out_dtype=f32))(
                jax.device_put(_rand(rng, (rows, kk)).astype(e4m3), named("x")),
                jax.device_put(_rand(rng, (n, kk)).astype(e4m3), named("x")))
            np.testing.assert_allclose(got, jnp.broadcast_to(bias, (rows, n)), atol=1e-6)
        from jax_hopper import fp8_ragged_dot
        got = jax.jit(lambda x, w: fp8_ragged_dot(x, w, jnp.zeros((groups,), jnp.int32)))(
            jax.device_put(jnp.zeros((0, k), f32), named("x")),
            jax.device_put(_rand(rng, (groups, k, n), "float32"), named(None, None, "x")))
        assert got.shape == (0, n)

    def typed_reshapes():
        # Shardings jax's explicit mode types on the arrays that our wrappers reshape (merging
        # a sharded dimension): the sequence of a (batch, seq, d) activation (sequence
        # parallel) through the gradients of hopper_matmul, fp8_matmul and hopper_glu, the
        # experts' gated weights split along F under jax.grad, and 4-D inputs below. Values,
        # and the warning where a merge cannot keep its split and replicates
        # (typed_reshape.py).
        from gemm_helpers import rel_frob, to64
        from jax_hopper import fp8_matmul, hopper_ragged_glu

        def grads(f):
            return jax.grad(lambda x, w: jnp.sum(f(x, w).astype(f32) ** 2), (0, 1))

        x3 = _rand(rng, (bsz, 2 * n_dev * 8, k))
        cases = [(grads(hopper_matmul), x3, _rand(rng, (k, n)) / 8, (None, "x", None), None),
                 (grads(lambda x, w: fp8_matmul(x, w, recipe="block")), x3,
                  _rand(rng, (k, n)) / 8, (None, "x", None), None),
                 (grads(hopper_glu), x3, _rand(rng, (k, 2, n)) / 8, None, ("x", None, None)),
                 (grads(lambda x, w: hopper_ragged_glu(x, w, sizes)), _rand(rng, (rows, k)),
                  _rand(rng, (groups, k, 2, n)) / 8, None, (None, None, None, "x"))]
        # 4-D: an inner batch dimension split, through quantize_fp8, transpose_fp8 and
        # dot_general (each merges the leading dimensions).
        from jax_hopper import dot_general, quantize_fp8, transpose_fp8
        x4 = _rand(rng, (2, n_dev, 128, 128))
        cases += [(lambda x, w: tuple(quantize_fp8(x, scaling="block", block="tile",
                                                   transpose=True))[:4], x4, None,
                   (None, "x", None, None), None),
                  (lambda x, w: transpose_fp8(x.astype(jnp.float8_e4m3fn)).astype(f32), x4,
                   None, (None, "x", None, None), None),
                  (lambda x, w: dot_general(x, w, (((3,), (0,)), ((), ()))), x4,
                   _rand(rng, (128, n)), (None, "x", None, None), None)]
        import warnings
        for f, x, w, x_spec, w_spec in cases:
            want = jax.jit(f)(x, w)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                got = jax.jit(f)(x if x_spec is None else jax.device_put(x, named(*x_spec)),
                                 w if w_spec is None else jax.device_put(w, named(*w_spec)))
            for g, ref in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
                assert rel_frob(g, to64(ref)) < 1e-2, rel_frob(g, to64(ref))
            gathered = any("cannot keep the split" in str(c.message) for c in caught)
            if f is cases[0][0]:  # d w sums each entry's product: the rows' split stays
                assert not gathered, [str(c.message) for c in caught]
                hlo = jax.jit(f).lower(jax.device_put(x, named(*x_spec)), w).compile().as_text()
                assert "all-gather" not in hlo and "all-reduce" in hlo
            if f is cases[1][0]:  # fp8_matmul merges the batch into x's rows: said, not silent
                assert gathered, caught

    def contract_columns():
        from jax_hopper import hopper_ragged_contract
        got = _compare(lambda x, y: hopper_ragged_contract(x, y, sizes, out_dtype=f32),
                       (_rand(rng, (rows, k)), _rand(rng, (rows, n))),
                       (named(None, "x"), None), all_reduce=False)
        assert _full_spec(got) == (None, "x", None), got.sharding.spec

    def ragged_rows():
        # Data parallelism: each device its shard of the rows, the sizes cut to it; no
        # communication (the bias per group and the residual follow the rows).
        got = _compare(ragged(activation="silu"),
                       (_rand(rng, (rows, k)), _rand(rng, (groups, k, n)),
                        _rand(rng, (groups, n), f32), _rand(rng, (rows, n), f32)),
                       (named("x"), None, None, named("x")), all_reduce=False)
        assert tuple(got.sharding.spec)[:1] == ("x",), got.sharding.spec

    def ragged_dp_grad():
        # Data-parallel training: rows and dy split, the weights replicated; d rhs is each
        # shard's contraction summed (one all-reduce), d lhs stays local.
        def grads(x, w, dy):
            return jax.grad(lambda x, w: jnp.sum(ragged()(x, w) * dy), (0, 1))(x, w)

        _compare(grads, (_rand(rng, (rows, k)), _rand(rng, (groups, k, n)),
                         _rand(rng, (rows, n), f32)),
                 (named("x"), None, named("x")), all_reduce=True, bound=1e-2)

    def contract_rows():
        from jax_hopper import hopper_ragged_contract
        _compare(lambda x, y: hopper_ragged_contract(x, y, sizes, out_dtype=f32),
                 (_rand(rng, (rows, k)), _rand(rng, (rows, n))), (named("x"), named("x")),
                 all_reduce=True)

    def fp8(**kw):
        from jax_hopper import hopper_fp8_matmul
        return lambda a, b, sa, sb, *extra: hopper_fp8_matmul(
            a, b, sa, sb, out_dtype=f32, **dict(zip(("bias", "residual"), extra)), **kw)

    e4m3 = jnp.float8_e4m3fn
    kblock = 128 * n_dev  # K and N of whole 128-wide scale blocks on every device
    # A K split sums fp8 products in another order. The CPU reference sums in float32; the
    # tensor cores sum fp8 products with fewer bits (gemm_helpers.REL_FROB_BOUND_FP8): there
    # the orders differ by up to 7e-4 (H200 x2, 2026-11-24).
    from gemm_helpers import REL_FROB_BOUND, REL_FROB_BOUND_FP8
    fp8_order = 1e-5 if jax.default_backend() == "cpu" else REL_FROB_BOUND_FP8["float32"]

    def fp8_rows():
        got = _compare(fp8(activation="relu"),
                       (_rand(rng, (m, k), e4m3), _rand(rng, (n, k), e4m3), jnp.float32(0.5),
                        jnp.float32(2.0)),
                       (named("x"), None, None, None), all_reduce=False)
        assert tuple(got.sharding.spec)[:1] == ("x",), got.sharding.spec

    def fp8_block_n():
        # Block scales: b's N split falls on 128-row blocks, b_scale's blocks split with it.
        got = _compare(fp8(),
                       (_rand(rng, (m, k), e4m3), _rand(rng, (kblock, k), e4m3),
                        jnp.abs(_rand(rng, (m, 1), f32)), jnp.abs(_rand(rng, (n_dev, 1), f32))),
                       (None, named("x"), None, named("x")), all_reduce=False)
        assert tuple(got.sharding.spec) == (None, "x"), got.sharding.spec

    def fp8_block_k():
        # K split over whole blocks: float32 partials summed, then bias, GELU and residual.
        _compare(fp8(activation="gelu", alpha=0.5, beta=2.0),
                 (_rand(rng, (m, kblock), e4m3), _rand(rng, (n, kblock), e4m3),
                  jnp.abs(_rand(rng, (m, n_dev), f32)), jnp.abs(_rand(rng, (1, n_dev), f32)),
                  _rand(rng, (n,), f32), _rand(rng, (m, n), f32)),
                 (named(None, "x"), named(None, "x"), named(None, "x"), named(None, "x"),
                  None, None), all_reduce=True, bound=fp8_order)

    def fp8_tensor_k_scatter():
        # Per-tensor scales, K split, the output asked for split along M over K's axis: a
        # reduce-scatter, each device keeping its rows.
        f = jax.jit(fp8(), out_shardings=named("x", None))
        a, b = _rand(rng, (m, k), e4m3), _rand(rng, (n, k), e4m3)
        placed = (jax.device_put(a, named(None, "x")), jax.device_put(b, named(None, "x")))
        got = f(*placed, jnp.float32(0.25), jnp.float32(4.0))
        want = jax.jit(fp8())(a, b, jnp.float32(0.25), jnp.float32(4.0))
        from gemm_helpers import rel_frob, to64
        err = rel_frob(got, to64(want))
        assert err < fp8_order, f"sharded result differs: rel. error {err}"
        hlo = f.lower(*placed, jnp.float32(0.25), jnp.float32(4.0)).compile().as_text()
        assert "reduce-scatter" in hlo and "all-gather" not in hlo, "not a reduce-scatter"

    def fp8_kn_columns():
        # b stored (K, N) as flax stores a kernel, split along N (tensor parallel): each device
        # transposes its columns (transpose_fp8) and multiplies them; nothing is gathered.
        got = _compare(fp8(transpose_b=False),
                       (_rand(rng, (m, k), e4m3), _rand(rng, (k, n), e4m3), jnp.float32(0.5),
                        jnp.float32(2.0)),
                       (None, named(None, "x"), None, None), all_reduce=False,
                       reference=lambda a, b, sa, sb: fp8()(a, b.T, sa, sb))
        assert tuple(got.sharding.spec) == (None, "x"), got.sharding.spec

    def fp8_entry_scales():
        # vmap over entries with a per-tensor scale each, the entries split over the devices:
        # one launch per device, its entries' scales split with them; nothing gathered.
        f = jax.vmap(lambda a, s: fp8()(a, b8, s, jnp.float32(2.0)))
        b8 = _rand(rng, (n, k), e4m3)
        got = _compare(f, (_rand(rng, (bsz, m, k), e4m3), jnp.abs(_rand(rng, (bsz,), f32))),
                       (named("x"), named("x")), all_reduce=False)
        assert tuple(got.sharding.spec)[:1] == ("x",), got.sharding.spec

    def ragged_fp8(**kw):
        from jax_hopper import hopper_ragged_fp8_dot
        scales = jnp.linspace(0.5, 2.0, groups, dtype=f32)  # one per expert
        return lambda x, w, *extra: hopper_ragged_fp8_dot(
            x, w, sizes, 0.5, scales, out_dtype=f32,
            **dict(zip(("bias", "residual"), extra)), **kw)

    def ragged_fp8_n():
        # The grouped fp8 GEMM, the experts' N split (weights stored (G, N, K)): local.
        got = _compare(ragged_fp8(activation="silu"),
                       (_rand(rng, (rows, k), e4m3), _rand(rng, (groups, n, k), e4m3),
                        _rand(rng, (groups, n), f32), _rand(rng, (rows, n), f32)),
                       (None, named(None, "x"), named(None, "x"), None), all_reduce=False)
        assert tuple(got.sharding.spec) == (None, "x"), got.sharding.spec

    def ragged_fp8_rows():
        # ... and the rows split evenly: each device its rows, the sizes cut to them.
        got = _compare(ragged_fp8(), (_rand(rng, (rows, k), e4m3),
                                      _rand(rng, (groups, n, k), e4m3)),
                       (named("x"), None), all_reduce=False)
        assert tuple(got.sharding.spec)[:1] == ("x",), got.sharding.spec

    def ragged_fp8_block(ls, **kw):
        from jax_hopper import hopper_ragged_fp8_dot
        return lambda x, w, rs, *extra: hopper_ragged_fp8_dot(
            x, w, sizes, ls, rs, out_dtype=f32, **dict(zip(("bias", "residual"), extra)), **kw)

    def ragged_fp8_block_n():
        # Block scales, the experts' N split in whole 128-row blocks: each device its columns
        # and their blocks' scales, nothing gathered.
        ls = jnp.abs(_rand(rng, (rows, -(-k // 128)), f32))
        got = _compare(ragged_fp8_block(ls, activation="relu"),
                       (_rand(rng, (rows, k), e4m3), _rand(rng, (groups, kblock, k), e4m3),
                        jnp.abs(_rand(rng, (groups, n_dev, -(-k // 128)), f32)),
                        _rand(rng, (groups, kblock), f32)),
                       (None, named(None, "x"), named(None, "x"), named(None, "x")),
                       all_reduce=False)
        assert tuple(got.sharding.spec) == (None, "x"), got.sharding.spec

    def ragged_fp8_block_rows():
        # ... and the rows split evenly, each row's scales with it.
        from jax_hopper import hopper_ragged_fp8_dot
        w8 = _rand(rng, (groups, n, k), e4m3)
        rs = jnp.abs(_rand(rng, (groups, -(-n // 128), -(-k // 128)), f32))
        got = _compare(lambda x, ls: hopper_ragged_fp8_dot(x, w8, sizes, ls, rs, out_dtype=f32),
                       (_rand(rng, (rows, k), e4m3),
                        jnp.abs(_rand(rng, (rows, -(-k // 128)), f32))),
                       (named("x"), named("x")), all_reduce=False)
        assert tuple(got.sharding.spec)[:1] == ("x",), got.sharding.spec

    def ragged_fp8_k():
        # K split on both operands (per tensor): partial products summed (one all-reduce), then
        # bias, activation and residual.
        got = _compare(ragged_fp8(activation="gelu", beta=2.0),
                       (_rand(rng, (rows, kblock), e4m3), _rand(rng, (groups, n, kblock), e4m3),
                        _rand(rng, (groups, n), f32), _rand(rng, (rows, n), f32)),
                       (named(None, "x"), named(None, None, "x"), None, None), all_reduce=True,
                       bound=fp8_order)
        assert got.shape == (rows, n)

    def ragged_fp8_block_k():
        # ... with block scales: K in whole 128-wide blocks per device, each scale's k-blocks
        # with it.
        ls = jnp.abs(_rand(rng, (rows, n_dev), f32))
        _compare(ragged_fp8_block(ls),
                 (_rand(rng, (rows, kblock), e4m3), _rand(rng, (groups, n, kblock), e4m3),
                  jnp.abs(_rand(rng, (groups, 1, n_dev), f32))),
                 (named(None, "x"), named(None, None, "x"), named(None, None, "x")),
                 all_reduce=True, bound=fp8_order)

    def fp8_ragged_grads(n_cols, shardings, n_rows=rows):
        # jax.grad of sum(fp8_ragged_dot(x, w) * dy) for x and w, both recipes, on sharded
        # (x (n_rows, K), w (G, K, n_cols), dy): nothing gathered, one all-reduce for the split
        # product.
        from jax_hopper import fp8_ragged_dot
        gs = jnp.asarray(rng.multinomial(n_rows - 5, np.ones(groups) / groups), jnp.int32)
        for recipe in ("block", "tensor"):
            def grads(x, w, dy, recipe=recipe):
                return jax.grad(lambda x, w: jnp.sum(
                    fp8_ragged_dot(x, w, gs, recipe=recipe).astype(f32) * dy), (0, 1))(x, w)

            _compare(grads, (_rand(rng, (n_rows, k)), _rand(rng, (groups, k, n_cols)),
                             _rand(rng, (n_rows, n_cols), f32)),
                     shardings, all_reduce=True, bound=1e-2)

    def fp8_ragged_tp_grad():
        # Tensor-parallel (the experts' N split, whole 128-wide blocks): the forward and d rhs
        # stay local, d lhs is a K split (the all-reduce).
        fp8_ragged_grads(kblock, (None, named(None, None, "x"), named(None, "x")))

    def fp8_ragged_dp_grad():
        # Data-parallel (rows and dy split, the weights replicated): the forward and d lhs stay
        # local, d rhs is the all-reduce (the per-tensor recipe adds its amaxes' max). Each
        # device's rows are whole 128-row scale blocks of the block recipe's weight gradient.
        fp8_ragged_grads(n, (named("x"), None, named("x")), n_rows=128 * n_dev)

    def fp8_ragged_served_n():
        # Serving on experts quantized once (quantize_experts: w^T (G, N, K) and its scales),
        # the experts' N split in whole 128-wide blocks: every device its columns, nothing
        # gathered or summed, both recipes.
        from jax_hopper import Fp8Array, fp8_ragged_dot, quantize_experts
        x, w = _rand(rng, (rows, k)), _rand(rng, (groups, k, kblock))
        for recipe, scale_spec in (("tensor", None), ("block", named(None, "x"))):
            wq = quantize_experts(w, recipe=recipe)
            got = _compare(lambda x, q, sc, recipe=recipe: fp8_ragged_dot(
                               x, Fp8Array(q, sc), sizes, recipe=recipe, out_dtype=f32),
                           (x, wq.q, wq.scale), (None, named(None, "x"), scale_spec),
                           all_reduce=False)
            assert tuple(got.sharding.spec) == (None, "x"), got.sharding.spec

    def contract_fp8(xt_spec, yt_spec, all_reduce):
        # The fp8 weight gradient on x^T (K, rows) and dy^T (N, rows).
        from jax_hopper import hopper_ragged_fp8_contract
        return _compare(lambda xt, yt: hopper_ragged_fp8_contract(xt, yt, sizes, 0.5, 0.25,
                                                                  out_dtype=f32),
                        (_rand(rng, (k, rows), e4m3), _rand(rng, (n, rows), jnp.float8_e5m2)),
                        (xt_spec, yt_spec), all_reduce=all_reduce, bound=fp8_order)

    def contract_fp8_rows():
        # Data parallelism: each device contracts its rows of every group, one all-reduce.
        contract_fp8(named(None, "x"), named(None, "x"), True)

    def contract_fp8_columns():
        got = contract_fp8(named("x"), None, False)
        assert _full_spec(got) == (None, "x", None), got.sharding.spec

    def contract_fp8_block_columns():
        # Block scales: x^T's rows (P) split with x_scale's, nothing else; no communication.
        from jax_hopper import hopper_ragged_fp8_contract
        mb = -(-rows // 128)
        got = _compare(lambda xt, yt, xs, ys: hopper_ragged_fp8_contract(xt, yt, sizes, xs, ys,
                                                                         out_dtype=f32),
                       (_rand(rng, (k, rows), e4m3), _rand(rng, (n, rows), e4m3),
                        jnp.ones((k, mb), f32) * 0.5, jnp.ones((-(-n // 128), mb), f32)),
                       (named("x"), None, named("x"), None), all_reduce=False, bound=fp8_order)
        assert _full_spec(got) == (None, "x", None), got.sharding.spec

    def quantize_rows_tensor():
        # Per-tensor scaling: the amax is one all-reduce (max); each device quantizes its rows
        # and writes its columns of the transposed copy.
        from jax_hopper import quantize_fp8
        got = _compare(lambda x: tuple(quantize_fp8(x, transpose=True)),
                       (_rand(rng, (4 * 32, 64)),), (named("x"),), all_reduce=True)
        assert tuple(got[0].sharding.spec)[:1] == ("x",), got[0].sharding.spec
        assert tuple(got[2].sharding.spec) == (None, "x"), got[2].sharding.spec

    def quantize_cols_blocks():
        # Row scales (1 x 128) over C split into whole blocks, tile scales for the transposed
        # copy: no communication at all.
        from jax_hopper import quantize_fp8
        got = _compare(lambda x: tuple(quantize_fp8(x, scaling="block", block="row",
                                                    transpose=True, transpose_block="tile")),
                       (_rand(rng, (256, kblock)),), (named(None, "x"),), all_reduce=False)
        assert tuple(got[1].sharding.spec) == (None, "x"), got[1].sharding.spec

    def quantize_one_row_block():
        # Tile scales over 128 rows (one block: no compound factor, which Shardy refuses at
        # size 1) and columns split into whole blocks: each device its columns and scales.
        from jax_hopper import quantize_fp8
        got = _compare(lambda x: tuple(quantize_fp8(x, scaling="block", block="tile",
                                                    transpose=True)),
                       (_rand(rng, (128, kblock)),), (named(None, "x"),), all_reduce=False)
        assert tuple(got[1].sharding.spec) == (None, "x"), got[1].sharding.spec

    def quantize_unaligned_rows():
        # Tile scales over rows that do not split into whole 128-row blocks per device: R stays
        # whole (x is gathered) and the result is still exact.
        from jax_hopper import quantize_fp8
        from gemm_helpers import rel_frob, to64
        f = lambda x: tuple(quantize_fp8(x, scaling="block", block="tile"))  # noqa: E731
        x = _rand(rng, (96 * n_dev, 64))
        got = jax.jit(f)(jax.device_put(x, named("x")))
        for g, w in zip(got[:2], jax.jit(f)(x)[:2]):  # q and its scales (no transposed copy)
            assert rel_frob(g.astype(f32), to64(w.astype(f32))) == 0

    def quantize_given_amax():
        # An amax given (delayed scaling): no amax pass before; the maxima each device records
        # for its shard meet in one all-reduce (max), so every device holds the whole's.
        from jax_hopper import quantize_fp8
        got = _compare(lambda x: tuple(quantize_fp8(x, transpose=True, amax=jnp.float32(3.0))),
                       (_rand(rng, (4 * 32, 64)),), (named("x"),), all_reduce=True)
        assert tuple(got[0].sharding.spec)[:1] == ("x",), got[0].sharding.spec

    def fp8_matmul_data_parallel():
        # The differentiable fp8 matmul on rows split over the devices: quantize and the GEMMs
        # run on local shards; the weight gradient is one all-reduce, nothing is gathered.
        from jax_hopper import fp8_matmul

        def grads(x, w):
            return jax.grad(lambda x, w: jnp.sum(fp8_matmul(x, w) ** 2), (0, 1))(x, w)

        # The gradients are bf16, so the weight gradient's partials are summed in bf16
        # (sharding.partial_dtype): the two results differ by bf16 roundings.
        _compare(grads, (_rand(rng, (4 * 64, 128)), _rand(rng, (128, 64))),
                 (named("x"), None), all_reduce=True, bound=REL_FROB_BOUND["bfloat16"])

    def config_per_shard():
        # A data-parallel decode: 64 rows a device. Each shard's product takes the config of its
        # own problem (the swap-AB kernels), which the whole batch's is not; so do the fp8 GEMM
        # and the backward products.
        from gemm_helpers import REL_FROB_BOUND, launched_configs
        from jax_hopper import hopper_fp8_matmul
        from jax_hopper.gemm import tuned
        rows = 64 * n_dev
        # A weight whose column tiles keep every SM busy (heuristics.swap_for_narrow_weight):
        # the whole batch's rows (past 64) do not run swapped.
        n = 16384

        def launched(seen, a_shape, b_shape):
            return [(shapes, c) for *shapes, c in seen if shapes == [a_shape, b_shape]]

        want = tuned.default_config("matmul", "bfloat16", False, True, 1, 64, n, k)
        assert want.swap_ab and not tuned.default_config("matmul", "bfloat16", False, True, 1,
                                                         rows, n, k).swap_ab
        x, w = _rand(rng, (rows, k)), _rand(rng, (k, n))
        with launched_configs() as seen:
            _compare(mm(), (x, w), (named("x"), None), all_reduce=False)
            _compare(jax.grad(lambda x, w: (mm()(x, w) ** 2).sum(), (0, 1)), (x, w),
                     (named("x"), None), all_reduce=True, bound=REL_FROB_BOUND["bfloat16"])
        assert {c for shapes, c in launched(seen, (1, 64, k), (1, k, n))} == {want}, seen
        # dX = dY W^T on each device's 64 rows: (64, N) against W stored (K, N)
        dx = tuned.default_config("matmul", "bfloat16", False, False, 1, 64, k, n)
        assert {c for shapes, c in launched(seen, (1, 64, n), (1, k, n))} == {dx}, seen
        # hopper_glu's decode route per shard: the swap-AB product (b as the (1, K, 2F)
        # [gate | up] matrix) and the unit after it, not the fused kernel of the whole batch.
        wg = _rand(rng, (k, 2, n))
        with launched_configs() as seen:
            _compare(glu(), (x, wg), (named("x"), None), all_reduce=False)
        local = [c for a_shape, b_shape, c in seen if a_shape == (1, 64, k)]
        assert local and all(c.swap_ab for c in local), seen
        assert {b_shape for a_shape, b_shape, _ in seen if a_shape == (1, 64, k)} == \
            {(1, k, 2 * n)}, seen
        e4m3 = jnp.float8_e4m3fn
        with launched_configs() as seen:
            _compare(lambda a, b: hopper_fp8_matmul(a, b, 1.0, 1.0, out_dtype=f32),
                     (x.astype(e4m3), w.T.astype(e4m3)), (named("x"), None), all_reduce=False)
        fp8 = tuned.default_config("fp8", "float8_e4m3fn", False, False, 1, 64, n, k)
        assert fp8.swap_ab and {c for _, c in launched(seen, (1, 64, k), (1, n, k))} == {fp8}
        # The experts' N split (tensor parallel): 768 columns a device are 3 column tiles,
        # which no 2-CTA cluster pairs, though the 3 x devices of the whole would pair.
        from jax_hopper.gemm.heuristics import choose_grouped_config
        cols = 768 * n_dev
        local = choose_grouped_config(moe_rows, 768, groups)
        assert local.cluster_n == 1 and choose_grouped_config(
            moe_rows, cols, groups).cluster_n == (2 if n_dev > 1 else 1)
        with launched_configs() as seen:
            _compare(ragged(), (_rand(rng, (moe_rows, k)), _rand(rng, (groups, k, cols))),
                     (None, named(None, None, "x")), all_reduce=False)
        assert {c for _, c in launched(seen, (1, moe_rows, k), (groups, k, 768))} == {local}

    def tune_problems_per_shard():
        # The tuner sees what each device runs (the cache is read with a shard's problem): 64
        # rows a device of a data-parallel product, and of an fp8 one; unsharded, the whole.
        import dataclasses

        from jax_hopper import hopper_fp8_matmul, tune
        rows = 64 * n_dev
        x, w = _rand(rng, (rows, k)), _rand(rng, (k, n))
        xs = jax.device_put(x, named("x"))
        local = tune.Problem("matmul", "bfloat16", False, True, 1, 64, n, k)
        assert tune.problems_of(jax.jit(mm()), xs, w) == [local]
        assert tune.problems_of(mm(), x, w) == [dataclasses.replace(local, m=rows)]
        e4m3 = jnp.float8_e4m3fn
        fp8, = tune.problems_of(lambda a, b: hopper_fp8_matmul(a, b, 1.0, 1.0),
                                xs.astype(e4m3), w.T.astype(e4m3))
        assert (fp8.family, fp8.m, fp8.n, fp8.k, fp8.b_dtype) == ("fp8", 64, n, k, None), fp8

    # Inside jax.shard_map (check_vma, jax's default) each device runs the op on its shards:
    # rows split, the weight replicated. The gradients are those of the sum of every shard's
    # loss: the weight's summed over the devices (manual_axes.like_primals), the rows' local.
    # (On a mesh of automatic axes: shard_map then reshards arrays placed anyhow.)
    auto_axes = jax.sharding.Mesh(np.array(jax.devices()), ("x",))

    def shard_map_grads():
        from gemm_helpers import rel_frob, to64

        from jax_hopper import (fp8_matmul, fp8_ragged_dot, hopper_ragged_contract,
                                hopper_ragged_glu)
        per_dev, local_gs = 16, jnp.asarray([5, 11], jnp.int32)
        ops = {
            "matmul": lambda x, w: hopper_matmul(  # its bias from w: summed over devices
                x, w, bias=w[0].astype(f32), alpha=0.5, activation="gelu", residual=x[:, :n],
                beta=0.5),
            "glu": lambda x, w: hopper_glu(x, w.reshape(k, 2, n // 2)),
            "ragged_dot": lambda x, w: hopper_ragged_dot(x, jnp.stack([w, -w]), local_gs),
            "ragged_glu": lambda x, w: hopper_ragged_glu(  # its bias from w: summed too
                x, jnp.stack([w, -w]).reshape(2, k, 2, n // 2), local_gs,
                bias=w[:2].reshape(2, 2, n // 2).astype(f32)),
            "ragged_contract": lambda x, w: hopper_ragged_contract(x, x @ w, local_gs)[0],
            "fp8_tensor": lambda x, w: fp8_matmul(x, w, recipe="tensor"),
            "fp8_block": lambda x, w: fp8_matmul(x, w, recipe="block"),
            "fp8_ragged_dot": lambda x, w: fp8_ragged_dot(x, jnp.stack([w, -w]), local_gs),
        }
        x, w = _rand(rng, (per_dev * n_dev, k)), _rand(rng, (k, n)) * 0.1
        failures = []
        for name, op in ops.items():
            def loss(x, w, op=op):
                return (op(x, w).astype(f32) ** 2).sum()
            sharded = jax.shard_map(op, mesh=auto_axes, in_specs=(P("x"), P()), out_specs=P("x"))
            got = jax.jit(jax.grad(lambda x, w, f=sharded: (f(x, w).astype(f32) ** 2).sum(),
                                   argnums=(0, 1)))(x, w)
            want = jax.grad(lambda x, w, loss=loss: sum(
                loss(x[d * per_dev:(d + 1) * per_dev], w) for d in range(n_dev)),
                argnums=(0, 1))(x, w)
            errs = [rel_frob(g, to64(v)) for g, v in zip(got, want)]
            if not max(errs) < 2e-2:
                failures.append(f"{name}: rel. errors of dx, dw {errs}")
        assert not failures, failures

    def shard_map_contract_local():
        # The grouped contraction of each device's rows stays on the device (its reference
        # lowering once summed them over the devices: 8x inside an 8-device shard_map).
        from jax_hopper import hopper_ragged_contract
        x, y = _rand(rng, (16 * n_dev, 32)), _rand(rng, (16 * n_dev, 24))
        gs = jnp.asarray([6, 0, 10], jnp.int32)
        contract = jax.jit(jax.shard_map(
            lambda x, y: hopper_ragged_contract(x, y, gs, out_dtype=f32)[None], mesh=auto_axes,
            in_specs=(P("x"), P("x")), out_specs=P("x")))
        got = contract(x, y)
        want = [hopper_ragged_contract(x[d * 16:(d + 1) * 16], y[d * 16:(d + 1) * 16], gs,
                                       out_dtype=f32) for d in range(n_dev)]
        np.testing.assert_allclose(np.asarray(got), np.stack(want), rtol=1e-6, atol=1e-6)
        assert "all-reduce" not in contract.lower(x, y).compile().as_text()

    def shard_map_delayed_meta():
        # fp8 delayed scaling inside shard_map: the histories every device holds alike are
        # pushed by the amax of the whole array, the largest of the devices' (pmax).
        from jax_hopper import fp8_matmul, fp8_meta
        x, w = _rand(rng, (16 * n_dev, k)), _rand(rng, (k, n))
        x = x.at[16 * (n_dev - 1) + 2, 5].set(40.0)  # the largest value, on the last device
        sharded = jax.shard_map(lambda x, w, m: fp8_matmul(x, w, recipe="delayed", meta=m),
                                mesh=auto_axes, in_specs=(P("x"), P(), P()), out_specs=P("x"))
        meta = jax.jit(jax.grad(lambda x, w, m: sharded(x, w, m).astype(f32).sum(),
                                argnums=2))(x, w, fp8_meta(4))
        assert float(meta.x[0]) == 40.0, meta.x
        assert float(meta.w[0]) == float(jnp.abs(w.astype(f32)).max()), meta.w
        assert float(meta.uses) == 1.0, meta.uses  # one call, however many devices ran it
        # Read by two calls on each device: two uses, each history the devices' largest.
        twice = jax.shard_map(lambda x, w, m: fp8_matmul(x, w, recipe="delayed", meta=m) +
                              fp8_matmul(2 * x, w, recipe="delayed", meta=m),
                              mesh=auto_axes, in_specs=(P("x"), P(), P()), out_specs=P("x"))
        meta = jax.jit(jax.grad(lambda x, w, m: twice(x, w, m).astype(f32).sum(),
                                argnums=2))(x, w, fp8_meta(4))
        assert float(meta.uses) == 2.0 and float(meta.x[0]) == 120.0, (meta.uses, meta.x)

    def quantize_blocks_fewer_than_devices():
        # A block-scaled dimension of fewer whole 128-blocks than the devices splitting it (two
        # blocks of w's columns over four devices): kept whole, where Shardy once split it
        # inside a block and the compile failed.
        from jax_hopper import fp8_matmul, quantize_fp8
        x, w = _rand(rng, (64, 256)), _rand(rng, (256, 128 * n_dev // 2))
        ws = jax.device_put(w, NamedSharding(auto_axes, P(None, "x")))
        quantize = jax.jit(lambda w: quantize_fp8(w, scaling="block", block="tile",
                                                  transpose=True))
        for got, want in zip(jax.tree.leaves(quantize(ws)), jax.tree.leaves(quantize(w))):
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        grad = jax.jit(jax.grad(lambda x, w: fp8_matmul(x, w, recipe="block").astype(f32).sum(),
                                argnums=(0, 1)))
        for got, want in zip(grad(x, ws), grad(x, w)):
            np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32),
                                       rtol=1e-2, atol=1e-2)

    def fp8_block_two_axes():
        # Rows over one mesh axis, w's columns over the other, as many 128-blocks as that
        # axis's devices: the block scales split with them, nothing gathered.
        from jax_hopper import fp8_matmul
        if n_dev % 2:
            return "skip: needs an even device count"
        grid = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, n_dev // 2),
                                 ("data", "model"))
        x, w = _rand(rng, (64, 256)), _rand(rng, (256, 128 * (n_dev // 2)))
        _compare(lambda x, w: fp8_matmul(x, w, recipe="block", out_dtype=f32), (x, w),
                 (NamedSharding(grid, P("data")), NamedSharding(grid, P(None, "model"))),
                 all_reduce=False)

    def glu_grad_f_split():
        # Tensor parallelism through hopper_glu's gradient: w's F split, the rows too on a
        # second axis; the product keeps gate and up apart (gated_product), so nothing is
        # gathered: d x sums over F's devices, d w over the rows' (an all-reduce each).
        if n_dev % 2:
            return "skip: needs an even device count"
        for axis_type in (jax.sharding.AxisType.Auto, jax.sharding.AxisType.Explicit):
            grid = jax.make_mesh((2, n_dev // 2), ("data", "model"),
                                 axis_types=(axis_type,) * 2)
            loss = functools.partial(lambda x, w: (hopper_glu(x, w, activation="gelu",
                                                              out_dtype=f32) ** 2).sum())
            _compare(jax.grad(loss, (0, 1)),
                     (_rand(rng, (bsz, m, k)), _rand(rng, (k, 2, n)) * 0.1),
                     (NamedSharding(grid, P("data")),
                      NamedSharding(grid, P(None, None, "model"))),
                     all_reduce=True, bound=2e-2, mesh=grid)

    def ragged_glu_grad_f_split():
        # The same through hopper_ragged_glu's gradient (its bias too): the experts' F split,
        # the rows split evenly on a second axis (each device its rows' groups); the grouped
        # products keep gate and up apart (gated_product.ragged_gated_product), so nothing is
        # gathered; the bias gradient sums each device's rows (ragged_primitive.group_sums).
        import warnings
        from jax_hopper import hopper_ragged_glu
        if n_dev % 2:
            return "skip: needs an even device count"
        for axis_type in (jax.sharding.AxisType.Auto, jax.sharding.AxisType.Explicit):
            grid = jax.make_mesh((2, n_dev // 2), ("data", "model"),
                                 axis_types=(axis_type,) * 2)

            def loss(x, w, b):
                return (hopper_ragged_glu(x, w, sizes, bias=b, alpha=0.5, activation="gelu",
                                          out_dtype=f32) ** 2).sum()

            def dense_loss(x, w, b):  # hopper_ragged_dot's bias gradient likewise
                return (hopper_ragged_dot(x, w, sizes, bias=b, out_dtype=f32) ** 2).sum()

            with warnings.catch_warnings():
                warnings.simplefilter("error")  # no operand gathered (warned) either
                _compare(jax.grad(loss, (0, 1, 2)),
                         (_rand(rng, (rows, k)), _rand(rng, (groups, k, 2, n)) * 0.1,
                          _rand(rng, (groups, 2, n), f32)),
                         (NamedSharding(grid, P("data")),
                          NamedSharding(grid, P(None, None, None, "model")),
                          NamedSharding(grid, P(None, None, "model"))),
                         all_reduce=True, bound=2e-2, mesh=grid)
                _compare(jax.grad(dense_loss, (0, 1, 2)),
                         (_rand(rng, (rows, k)), _rand(rng, (groups, k, n)) * 0.1,
                          _rand(rng, (groups, n), f32)),
                         (NamedSharding(grid, P("data")),
                          NamedSharding(grid, P(None, None, "model")),
                          NamedSharding(grid, P(None, "model"))),
                         all_reduce=True, bound=2e-2, mesh=grid)

    def dense_dot_general(x, w, transpose_b, out_dtype):
        from jax_hopper import dot_general
        del transpose_b
        return dot_general(x, w, (((x.ndim - 1,), (0,)), ((), ())),
                           preferred_element_type=out_dtype)

    def sequence_split_grad():
        # Sequence parallelism: a (batch, seq, d) activation split along seq, the weight
        # shared. The weight's gradient contracts over (batch, seq), merged on each device's
        # shards (gated_product.rows_contracted), so on automatic axes too, where the split is
        # not in the types, it is one all-reduce and no gather; dot_general in flax's Dense
        # form keeps the leading dimensions (merged, they gathered the activation).
        for axis_type in (jax.sharding.AxisType.Auto, jax.sharding.AxisType.Explicit):
            grid = jax.make_mesh((n_dev,), ("x",), axis_types=(axis_type,))
            # the weight stored (K, N), or (N, K); and flax's Dense call, dot_general
            for transpose_b, product in ((False, hopper_matmul), (True, hopper_matmul),
                                         (False, dense_dot_general)):

                def loss(x, w, transpose_b=transpose_b, product=product):
                    y = product(x, w, transpose_b=transpose_b, out_dtype=f32)
                    return (y ** 2).sum()

                _compare(jax.grad(loss, (0, 1)),
                         (_rand(rng, (bsz, 8 * n_dev, k)),
                          _rand(rng, (n, k) if transpose_b else (k, n)) * 0.1),
                         (NamedSharding(grid, P(None, "x")), None),
                         all_reduce=True, bound=2e-2, mesh=grid)

    def explicit_grad_types():
        # Explicit sharding: a custom VJP's cotangents must have their primals' types; a
        # K-split product's partials (or a merged dimension's) came back split otherwise, and
        # jax refused the gradient (manual_axes.like_primals reshards them); and two forwards
        # that reshaped typed arrays untyped. Values (forward and gradients) as unsharded.
        from gemm_helpers import rel_frob, to64
        from jax_hopper import hopper_ragged_glu
        if n_dev % 2:
            return "skip: needs an even device count"
        grid = jax.make_mesh((2, n_dev // 2), ("data", "model"),
                             axis_types=(jax.sharding.AxisType.Explicit,) * 2)
        gs = jnp.asarray([20, 0, 30], jnp.int32)
        cases = [  # (op, operands, their specs)
            (lambda a, b: hopper_matmul(a, b), (_rand(rng, (64, k)), _rand(rng, (k, n)) / 8),
             (P(None, "data"), P())),
            (lambda x, w: hopper_glu(x, w), (_rand(rng, (32, k)), _rand(rng, (k, 2, n)) / 8),
             (P(), P("data"))),
            (lambda x, w: hopper_ragged_dot(x, w, gs),
             (_rand(rng, (64, k)), _rand(rng, (3, k, n)) / 8),
             (P("model", "data"), P(None, "data"))),
            (lambda x, w, b: hopper_ragged_glu(x, w, gs, bias=b),
             (_rand(rng, (64, k)), _rand(rng, (3, k, 2, n)) / 8, _rand(rng, (3, 2, n), f32)),
             (P("data"), P(), P(None, None, "data"))),
            # A batch folded against a weight split along N (its result typed so), and a
            # decode-sized gated unit whose bias is split along F.
            (lambda a, b: hopper_matmul(a, b), (_rand(rng, (2, 16, k)), _rand(rng, (k, n)) / 8),
             (P(), P(None, "data"))),
            (lambda x, w, b: hopper_glu(x, w, bias=b),
             (_rand(rng, (32, k)), _rand(rng, (k, 2, n)) / 8, _rand(rng, (2, n), f32)),
             (P(), P(), P(None, "data"))),
        ]
        import contextlib
        import warnings
        # Under jax.set_mesh, and on arrays typed by device_put alone (no mesh context).
        for context in (lambda: jax.set_mesh(grid), contextlib.nullcontext):
            for op, args, specs in cases:
                def loss(*a, op=op):
                    return (op(*a).astype(f32) ** 2).sum()
                grad = jax.grad(loss, tuple(range(len(args))))
                placed = [jax.device_put(a, NamedSharding(grid, s)) for a, s in zip(args, specs)]
                with context(), warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # what a layout gathers is said elsewhere
                    got = (jax.jit(op)(*placed), *jax.jit(grad)(*placed))
                want = (jax.jit(op)(*args), *jax.jit(grad)(*args))
                for g, w in zip(got, want):
                    assert rel_frob(g, to64(w)) < 2e-2, rel_frob(g, to64(w))
        # Group sizes split along G (every device needs them all: ragged_tiles.int32_sizes
        # gathers them; jnp.cumsum refused the split).
        from jax_hopper import hopper_ragged_contract
        sizes = jnp.asarray([20, 0, 30, 4], jnp.int32)
        x, w = _rand(rng, (64, k)), _rand(rng, (4, k, n)) / 8
        ops = (lambda x, w, s: jax.grad(lambda x, w: (hopper_ragged_dot(x, w, s).astype(f32)
                                                      ** 2).sum(), (0, 1))(x, w),
               lambda x, w, s: hopper_ragged_contract(x, x @ w[0], s))
        for op in ops:
            want = jax.jit(op)(x, w, sizes)
            with jax.set_mesh(grid):
                got = jax.jit(op)(x, w, jax.device_put(sizes, NamedSharding(grid, P("data"))))
            for g, v in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
                assert rel_frob(g, to64(v)) < 2e-2
        # fp8_ragged_dot's delayed recipe with the experts split (gathered, as documented): its
        # per-expert amaxes vmapped with the experts' weights are split alike.
        from jax_hopper import fp8_meta, fp8_ragged_dot
        meta = fp8_meta(experts=4)

        def fp8_loss(x, w, m):
            return (fp8_ragged_dot(x, w, sizes, recipe="delayed", meta=m).astype(f32) ** 2).sum()
        fp8_grads = jax.jit(jax.grad(fp8_loss, (0, 1, 2)))
        want = fp8_grads(x, w, meta)
        with jax.set_mesh(grid), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the experts' split is gathered, and said
            got = fp8_grads(x, jax.device_put(w, NamedSharding(grid, P("data"))), meta)
        for g, v in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
            np.testing.assert_array_equal(np.asarray(g, np.float32), np.asarray(v, np.float32))

    def fp8_block_few_rows_warned():
        # fp8_matmul's block-scaled weight gradient contracts over the rows in whole 128-row
        # blocks: fewer than 128 a device are gathered, and said (it was silent).
        import warnings
        from jax_hopper import fp8_matmul
        x, w = _rand(rng, (64 * n_dev, 256)), _rand(rng, (256, 128)) / 16
        grad = jax.jit(jax.grad(lambda x, w: (fp8_matmul(x, w, recipe="block").astype(f32)
                                              ** 2).sum(), (0, 1)))
        want = grad(x, w)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = grad(jax.device_put(x, named("x")), w)
        messages = [str(c.message) for c in caught]
        assert any("hopper_fp8_matmul" in m and "block scales split only" in m
                   for m in messages), messages
        # quantize_fp8's x^T, per column of x and 128 rows, says the same of x's rows.
        assert any(m.startswith("quantize_fp8: x's rows") for m in messages), messages
        for g, v in zip(got, want):
            np.testing.assert_array_equal(np.asarray(g, np.float32), np.asarray(v, np.float32))

    def explicit_result_types():
        # Under explicit sharding the results are typed as jnp's are (rows as a's, columns as
        # b's), so what follows them needs no reshard: a loss over the product and its
        # gradients make the collectives jnp's program makes, no gather.
        if n_dev % 2:
            return "skip: needs an even device count"
        from jax_hopper import (fp8_matmul, hopper_ragged_contract, hopper_ragged_dot,
                                hopper_ragged_glu)
        grid = jax.make_mesh((2, n_dev // 2), ("data", "model"),
                             axis_types=(jax.sharding.AxisType.Explicit,) * 2)
        a, b = _rand(rng, (4, 32, k)), _rand(rng, (k, 8 * n_dev))
        gs = jnp.asarray([20, 12], jnp.int32)
        rows = _rand(rng, (512, k))  # fp8's transposed block copy: whole 128-row tiles a device
        cases = [(lambda a, b: hopper_matmul(a, b), lambda a, b: a @ b, a, P("data", "model"),
                  P()),
                 (lambda a, b: hopper_matmul(a, b), lambda a, b: a @ b, a, P("data"),
                  P(None, "model")),
                 (lambda a, b: hopper_ragged_dot(a[0], jnp.stack([b, b]), gs),
                  lambda a, b: a[0] @ b, a, P(None, "data"), P(None, "model")),
                 (lambda a, b: fp8_matmul(a, b, recipe="block"), lambda a, b: a @ b, rows,
                  P("data"), P())]
        with jax.set_mesh(grid):
            for ours, theirs, x, a_spec, b_spec in cases:
                placed = (jax.device_put(x, a_spec), jax.device_put(b, b_spec))
                want = jax.jit(theirs).trace(*placed).out_info.sharding.spec
                got = jax.jit(ours).trace(*placed).out_info.sharding.spec
                assert got == want, (got, want)
                loss = jax.jit(jax.grad(lambda a, b, f=ours: (f(a, b).astype(f32) ** 2).sum(),
                                        (0, 1)))
                assert "all-gather" not in loss.lower(*placed).compile().as_text()
            # The experts' gated unit: rows as x's, F as the weights'.
            placed = (jax.device_put(a[0], P("data")),
                      jax.device_put(_rand(rng, (2, k, 2, 4 * n_dev)), P(None, None, None,
                                                                         "model")))
            got = jax.jit(lambda x, w: hopper_ragged_glu(x, w, gs)).trace(*placed)
            want = jax.jit(lambda x, w: jax.nn.silu(x @ w[0, :, 0]) * (x @ w[0, :, 1])).trace(
                *placed)
            assert got.out_info.sharding.spec == want.out_info.sharding.spec, (
                got.out_info.sharding, want.out_info.sharding)
            # The grouped contraction (the experts' weight gradient): P and Q as x's and y's
            # columns; untyped it was replicated, and its gradient gathered it.
            placed = (jax.device_put(_rand(rng, (32, 8 * n_dev)), P(None, "model")),
                      jax.device_put(_rand(rng, (32, 16)), P()))
            got = jax.jit(lambda x, y: hopper_ragged_contract(x, y, gs)).trace(*placed)
            want = jax.jit(lambda x, y: jnp.stack([x[:20].T @ y[:20], x[20:].T @ y[20:]])).trace(
                *placed)
            assert got.out_info.sharding.spec == want.out_info.sharding.spec, (
                got.out_info.sharding, want.out_info.sharding)
            loss = jax.jit(jax.grad(lambda x, y: (hopper_ragged_contract(x, y, gs).astype(f32)
                                                  ** 2).sum(), (0, 1)))
            assert "all-gather" not in loss.lower(*placed).compile().as_text()

    def glu_vmap_grad():
        # hopper_glu's per-example gradients of a shared weight (vmap(grad)): one launch per
        # product, no loop over the entries, whichever of the entries and the batch is split,
        # on automatic and explicit axes; the entries merge into the batch only on each
        # device's shards, so a split batch is not gathered.
        if n_dev % 2:
            return "skip: needs an even device count"
        from gemm_helpers import count_eqns, rel_frob, to64
        x, w = _rand(rng, (4, 2, 16, k)), _rand(rng, (k, 2, n))

        def loss(x, w):
            return (hopper_glu(x, w, activation="silu").astype(f32) ** 2).sum()
        f = jax.vmap(jax.grad(loss, (0, 1)), in_axes=(0, None))
        want = jax.jit(f)(x, w)
        for axis_type in (jax.sharding.AxisType.Explicit, jax.sharding.AxisType.Auto):
            grid = jax.make_mesh((2, n_dev // 2), ("data", "model"), axis_types=(axis_type,) * 2)
            for spec in (P("data"), P(None, "data")):
                with jax.set_mesh(grid):
                    placed = jax.device_put(x, NamedSharding(grid, spec))
                    loops = count_eqns(jax.make_jaxpr(f)(placed, w).jaxpr, ("scan", "while"))
                    assert loops == 0, spec
                    got = jax.jit(f)(placed, w)
                    hlo = jax.jit(f).lower(placed, w).compile().as_text()
                    assert "all-gather" not in hlo, (axis_type, spec)
                for g, v in zip(got, want):
                    assert rel_frob(g, to64(v)) < 1e-2, (spec, rel_frob(g, to64(v)))

    def matmul_summed_grad():
        # jax.grad of the sum over vmapped hopper_matmul calls sharing w, plain and with a
        # fused bias and GELU (its custom JVP over the plain product), the entries split over
        # one mesh axis and w's N over the other: w's gradient is one GEMM of each device's
        # rows into its columns (dense_product's transpose) and an all-reduce, never a (K, N)
        # per entry; nothing gathered, no loop; as unsharded, on automatic and explicit axes.
        # A split of each call's own batch (below the mapped axis) merges with the entries
        # into the kernel's batch and is gathered, as the forward's was (explicit types: with
        # a warning; it had raised ShardingTypeError), correct either way.
        import warnings
        if n_dev % 2:
            return "skip: needs an even device count"
        from gemm_helpers import count_eqns, program_eqns, rel_frob, to64
        x, w, bias = _rand(rng, (4, 2, 16, k)), _rand(rng, (k, n)) * 0.1, _rand(rng, (n,))
        for fused in (False, True):
            def unit(a, w, bias, fused=fused):
                if fused:
                    return hopper_matmul(a, w, bias=bias, activation="gelu")
                return hopper_matmul(a, w)

            def loss(x, w, bias, unit=unit):
                return (jax.vmap(lambda a: unit(a, w, bias))(x).astype(f32) ** 2).sum()
            step = jax.grad(loss, (0, 1, 2))
            want = jax.jit(step)(x, w, bias)
            for axis_type in (jax.sharding.AxisType.Explicit, jax.sharding.AxisType.Auto):
                grid = jax.make_mesh((2, n_dev // 2), ("data", "model"),
                                     axis_types=(axis_type,) * 2)
                for spec in (P("data"), P(None, "data")):
                    minor = spec == P(None, "data")
                    explicit = axis_type == jax.sharding.AxisType.Explicit
                    with jax.set_mesh(grid), warnings.catch_warnings(record=True) as seen:
                        warnings.simplefilter("always" if minor else "error")
                        args = (jax.device_put(x, NamedSharding(grid, spec)),
                                jax.device_put(w, NamedSharding(grid, P(None, "model"))),
                                jax.device_put(bias, NamedSharding(grid, P("model"))))
                        jaxpr = jax.make_jaxpr(step)(*args).jaxpr
                        assert count_eqns(jaxpr, ("scan", "while")) == 0, spec
                        shapes = [e.outvars[0].aval.shape for e in program_eqns(jaxpr)
                                  if e.primitive.name == "hopper_gemm"]
                        # the forward (a fused activation's: z), d x, d w: three either way
                        assert len(shapes) == 3 and (1, k, n) in shapes, (spec, shapes)
                        got = jax.jit(step)(*args)
                        hlo = jax.jit(step).lower(*args).compile().as_text()
                        assert minor or "all-gather" not in hlo, (fused, axis_type, spec)
                        assert hlo.count("all-reduce(") + hlo.count("all-reduce-start(") >= 1
                    assert not (minor and explicit) or any("gathered" in str(m.message)
                                                           for m in seen), spec
                    for g, v in zip(got, want):
                        assert rel_frob(g, to64(v)) < 1e-2, (fused, spec, rel_frob(g, to64(v)))

    def glu_summed_grad():
        # jax.grad of the sum over vmapped hopper_glu calls sharing w (a per-example model
        # vmapped over its batch), the entries or their rows split over one mesh axis and F
        # over the other: w's gradient is one GEMM of each device's rows into its F columns
        # (gated_product's dw_summed) and an all-reduce, never a (K, 2, F) per entry; nothing
        # gathered, no loop; as unsharded, on automatic and explicit axes.
        import warnings
        if n_dev % 2:
            return "skip: needs an even device count"
        from gemm_helpers import count_eqns, program_eqns, rel_frob, to64
        x, w = _rand(rng, (4, 2, 16, k)), _rand(rng, (k, 2, n)) * 0.1

        def loss(x, w):
            return (jax.vmap(lambda a: hopper_glu(a, w, activation="silu"))(x).astype(f32)
                    ** 2).sum()
        step = jax.grad(loss, (0, 1))
        want = jax.jit(step)(x, w)
        for axis_type in (jax.sharding.AxisType.Explicit, jax.sharding.AxisType.Auto):
            grid = jax.make_mesh((2, n_dev // 2), ("data", "model"), axis_types=(axis_type,) * 2)
            for spec in (P("data"), P(None, "data")):
                with jax.set_mesh(grid), warnings.catch_warnings():
                    warnings.simplefilter("error")  # no operand gathered (warned)
                    args = (jax.device_put(x, NamedSharding(grid, spec)),
                            jax.device_put(w, NamedSharding(grid, P(None, None, "model"))))
                    jaxpr = jax.make_jaxpr(step)(*args).jaxpr
                    assert count_eqns(jaxpr, ("scan", "while")) == 0, spec
                    shapes = [e.outvars[0].aval.shape for e in program_eqns(jaxpr)
                              if e.primitive.name == "hopper_gemm"]
                    assert len(shapes) == 3 and (1, k, 2 * n) in shapes, (spec, shapes)
                    got = jax.jit(step)(*args)
                    hlo = jax.jit(step).lower(*args).compile().as_text()
                    assert "all-gather" not in hlo, (axis_type, spec)
                    assert hlo.count("all-reduce(") + hlo.count("all-reduce-start(") >= 1
                for g, v in zip(got, want):
                    assert rel_frob(g, to64(v)) < 1e-2, (spec, rel_frob(g, to64(v)))

    def ragged_vmap_entries():
        # hopper_ragged_dot under vmap over entries with their own group sizes: one launch of
        # every entry (no loop), the entries split over one mesh axis and the experts'
        # columns over the other, with the weights shared or one per entry: each device
        # multiplies its entries by its columns (no all-gather, no all-reduce), on automatic
        # and explicit axes.
        if n_dev % 2:
            return "skip: needs an even device count"
        from gemm_helpers import count_eqns, rel_frob, to64
        x, bias = _rand(rng, (n_dev, 40, k)), _rand(rng, (groups, n), f32)
        gs = jnp.asarray(rng.integers(-2, 12, (n_dev, groups)), jnp.int32)
        for w_shape in ((groups, k, n), (n_dev, groups, k, n)):
            w = _rand(rng, w_shape)
            f = jax.vmap(lambda x, s, w: hopper_ragged_dot(x, w, s, bias=bias, out_dtype=f32),
                         in_axes=(0, 0, 0 if len(w_shape) == 4 else None))
            want = jax.jit(f)(x, gs, w)
            for axis_type in (jax.sharding.AxisType.Explicit, jax.sharding.AxisType.Auto):
                grid = jax.make_mesh((2, n_dev // 2), ("data", "model"),
                                     axis_types=(axis_type,) * 2)
                w_spec = ("data",) * (len(w_shape) == 4) + (None, None, "model")
                with jax.set_mesh(grid):
                    args = [jax.device_put(a, NamedSharding(grid, P(*spec))) for a, spec in
                            ((x, ("data",)), (gs, ("data",)), (w, w_spec))]
                    loops = count_eqns(jax.make_jaxpr(f)(*args).jaxpr, ("scan", "while"))
                    assert loops == 0, (w_shape, axis_type)
                    got = jax.jit(f)(*args)
                    hlo = jax.jit(f).lower(*args).compile().as_text()
                    assert "all-gather" not in hlo and "all-reduce" not in hlo, \
                        (w_shape, axis_type)
                assert rel_frob(got, to64(want)) < 1e-5, (w_shape, axis_type)

    def ragged_vmap_summed_grad():
        # jax.grad of the sum over vmapped hopper_ragged_dot calls sharing the experts (a
        # model's step over a vmapped layer), plain and with a per-expert bias and GELU fused
        # (its custom JVP over the plain product), the entries split over the mesh (data
        # parallelism): the weights' gradient is each device's entries contracted into one
        # (G, K, N) partial and one all-reduce of it (ragged_contract.summed_over_entries),
        # the bias's each device's segment sums all-reduced (group_rows.group_sums), no
        # all-gather of the entries' rows; as unsharded, on automatic and explicit axes.
        from gemm_helpers import rel_frob, to64
        x, w = _rand(rng, (n_dev, 40, k)), _rand(rng, (groups, k, n)) * 0.1
        bias = _rand(rng, (groups, n))
        gs = jnp.asarray(rng.integers(-2, 12, (n_dev, groups)), jnp.int32)
        for fused in ({}, {"activation": "gelu"}):
            def loss(x, w, bias, s, fused=fused):
                kw = dict(fused, bias=bias) if fused else {}
                return jax.vmap(lambda x, s: hopper_ragged_dot(x, w, s, out_dtype=f32, **kw))(
                    x, s).sum()
            step = jax.grad(loss, (0, 1, 2))
            want = jax.jit(step)(x, w, bias, gs)
            for axis_type in (jax.sharding.AxisType.Explicit, jax.sharding.AxisType.Auto):
                grid = jax.make_mesh((n_dev,), ("data",), axis_types=(axis_type,))
                with jax.set_mesh(grid):
                    args = [jax.device_put(a, NamedSharding(grid, P(*spec))) for a, spec in
                            ((x, ("data",)), (w, ()), (bias, ()), (gs, ("data",)))]
                    got = jax.jit(step)(*args)
                    hlo = jax.jit(step).lower(*args).compile().as_text()
                    assert "all-gather" not in hlo, (fused, axis_type)
                    assert hlo.count("all-reduce(") + hlo.count("all-reduce-start(") >= 1
                for g, w_ in zip(got, want):
                    assert rel_frob(g, to64(w_)) < 1e-2, (fused, axis_type)

    def contract_vmap_entries():
        # hopper_ragged_contract under vmap (the weight gradients of vmap(grad)): one launch
        # of every entry (no loop), the entries split over one mesh axis and y's columns
        # over the other: each device contracts its entries' rows into its columns (no
        # all-gather, no all-reduce), on automatic and explicit axes; as the per-entry
        # contractions whole.
        if n_dev % 2:
            return "skip: needs an even device count"
        from gemm_helpers import count_eqns, rel_frob, to64
        from jax_hopper import hopper_ragged_contract
        x, y = _rand(rng, (n_dev, 40, k)), _rand(rng, (n_dev, 40, n))
        gs = jnp.asarray(rng.integers(-2, 12, (n_dev, groups)), jnp.int32)
        f = jax.vmap(lambda x, y, s: hopper_ragged_contract(x, y, s, out_dtype=f32))
        want = jax.jit(f)(x, y, gs)
        for axis_type in (jax.sharding.AxisType.Explicit, jax.sharding.AxisType.Auto):
            grid = jax.make_mesh((2, n_dev // 2), ("data", "model"), axis_types=(axis_type,) * 2)
            with jax.set_mesh(grid):
                args = [jax.device_put(a, NamedSharding(grid, P(*spec))) for a, spec in
                        ((x, ("data",)), (y, ("data", None, "model")), (gs, ("data",)))]
                assert count_eqns(jax.make_jaxpr(f)(*args).jaxpr, ("scan", "while")) == 0
                got = jax.jit(f)(*args)
                hlo = jax.jit(f).lower(*args).compile().as_text()
                assert "all-gather" not in hlo and "all-reduce" not in hlo, axis_type
            assert _full_spec(got) == ("data", None, None, "model"), (axis_type, got.sharding)
            assert rel_frob(got, to64(want)) < 1e-5, axis_type

    def ragged_glu_vmap_grad():
        # vmap of hopper_ragged_glu's gradient over entries with their own group sizes, the
        # weights shared with F split: the gated product, d x and d w one launch each over
        # every entry (no loop), the entries split over the other mesh axis; nothing gathered
        # (d x sums over F's devices: an all-reduce), on automatic and explicit axes.
        import warnings
        from gemm_helpers import count_eqns, rel_frob, to64
        from jax_hopper import hopper_ragged_glu
        if n_dev % 2:
            return "skip: needs an even device count"
        x, w = _rand(rng, (n_dev, 40, k)), _rand(rng, (groups, k, 2, n)) * 0.1
        gs = jnp.asarray(rng.integers(-2, 12, (n_dev, groups)), jnp.int32)

        def grads(x, s):
            return jax.grad(lambda x, w: (hopper_ragged_glu(
                x, w, s, activation="silu", out_dtype=f32) ** 2).sum(), (0, 1))(x, w)

        f = jax.vmap(grads)
        want = jax.jit(f)(x, gs)
        for axis_type in (jax.sharding.AxisType.Explicit, jax.sharding.AxisType.Auto):
            grid = jax.make_mesh((2, n_dev // 2), ("data", "model"), axis_types=(axis_type,) * 2)
            with jax.set_mesh(grid), warnings.catch_warnings():
                warnings.simplefilter("error")  # no operand gathered (warned)
                # grads reads w when traced: now the split one
                w = jax.device_put(w, NamedSharding(grid, P(None, None, None, "model")))
                args = [jax.device_put(a, NamedSharding(grid, P("data"))) for a in (x, gs)]
                assert count_eqns(jax.make_jaxpr(f)(*args).jaxpr, ("scan", "while")) == 0
                got = jax.jit(f)(*args)
                hlo = jax.jit(f).lower(*args).compile().as_text()
                assert "all-gather" not in hlo, axis_type
            for g, v in zip(got, want):
                assert rel_frob(g, to64(v)) < 2e-2, (axis_type, rel_frob(g, to64(v)))

    def ragged_glu_summed_grad():
        # jax.grad of the sum over vmapped hopper_ragged_glu calls sharing the experts, the
        # entries split over one mesh axis and F over the other: the weights' gradient is one
        # contraction of each device's entries into its F columns (gated_product's dw_summed)
        # and an all-reduce of it over the entries' devices, never the (E, G, K, 2, F) of each
        # entry; nothing gathered, no loop; as unsharded, on automatic and explicit axes.
        import warnings
        from gemm_helpers import count_eqns, program_eqns, rel_frob, to64
        from jax_hopper import hopper_ragged_glu
        if n_dev % 2:
            return "skip: needs an even device count"
        x, w = _rand(rng, (n_dev, 40, k)), _rand(rng, (groups, k, 2, n)) * 0.1
        gs = jnp.asarray(rng.integers(-2, 12, (n_dev, groups)), jnp.int32)

        def loss(x, w, s):
            return jax.vmap(lambda x, s: hopper_ragged_glu(
                x, w, s, activation="silu", out_dtype=f32) ** 2)(x, s).sum()
        step = jax.grad(loss, (0, 1))
        want = jax.jit(step)(x, w, gs)
        for axis_type in (jax.sharding.AxisType.Explicit, jax.sharding.AxisType.Auto):
            grid = jax.make_mesh((2, n_dev // 2), ("data", "model"), axis_types=(axis_type,) * 2)
            with jax.set_mesh(grid), warnings.catch_warnings():
                warnings.simplefilter("error")  # no operand gathered (warned)
                args = [jax.device_put(a, NamedSharding(grid, P(*spec))) for a, spec in
                        ((x, ("data",)), (w, (None, None, None, "model")), (gs, ("data",)))]
                jaxpr = jax.make_jaxpr(step)(*args).jaxpr
                assert count_eqns(jaxpr, ("scan", "while")) == 0
                assert [e.outvars[0].aval.shape for e in program_eqns(jaxpr)
                        if e.primitive.name == "hopper_ragged_contract"] == [
                            (groups, k, 2 * n)], axis_type
                got = jax.jit(step)(*args)
                hlo = jax.jit(step).lower(*args).compile().as_text()
                assert "all-gather" not in hlo, axis_type
                assert hlo.count("all-reduce(") + hlo.count("all-reduce-start(") >= 1, axis_type
            for g, v in zip(got, want):
                assert rel_frob(g, to64(v)) < 2e-2, (axis_type, rel_frob(g, to64(v)))

    def ragged_fp8_vmap_entries():
        # hopper_ragged_fp8_dot with block scales under vmap over entries with their own sizes
        # and lhs scales: one launch of every entry (no loop), the entries split over one mesh
        # axis and the experts' N (whole 128-wide scale blocks) over the other: each device
        # its entries by its columns (no all-gather, no all-reduce), explicit and automatic.
        if n_dev % 2:
            return "skip: needs an even device count"
        from gemm_helpers import count_eqns, rel_frob, to64
        from jax_hopper import hopper_ragged_fp8_dot
        nb = 256 * (n_dev // 2)
        x = _rand(rng, (n_dev, 40, k), e4m3)
        ls = jnp.abs(_rand(rng, (n_dev, 40, -(-k // 128)), f32))
        w8 = _rand(rng, (groups, nb, k), e4m3)
        rs = jnp.abs(_rand(rng, (groups, nb // 128, -(-k // 128)), f32))
        gs = jnp.asarray(rng.integers(-2, 12, (n_dev, groups)), jnp.int32)
        f = jax.vmap(lambda x, s, l, w, r: hopper_ragged_fp8_dot(x, w, s, l, r, out_dtype=f32),
                     in_axes=(0, 0, 0, None, None))
        want = jax.jit(f)(x, gs, ls, w8, rs)
        for axis_type in (jax.sharding.AxisType.Explicit, jax.sharding.AxisType.Auto):
            grid = jax.make_mesh((2, n_dev // 2), ("data", "model"), axis_types=(axis_type,) * 2)
            with jax.set_mesh(grid):
                args = [jax.device_put(a, NamedSharding(grid, P(*spec))) for a, spec in
                        ((x, ("data",)), (gs, ("data",)), (ls, ("data",)),
                         (w8, (None, "model")), (rs, (None, "model")))]
                assert count_eqns(jax.make_jaxpr(f)(*args).jaxpr, ("scan", "while")) == 0
                got = jax.jit(f)(*args)
                hlo = jax.jit(f).lower(*args).compile().as_text()
                assert "all-gather" not in hlo and "all-reduce" not in hlo, axis_type
            assert rel_frob(got, to64(want)) < 1e-5, axis_type

    return dict(zip(CASES, [batch, m_split, n_split, n_k_major_b, k_with_epilogue,
                            batch_and_n_2d, auto_mesh, output_sharding, grad_data_parallel,
                            vmap, shard_map, glu_rows, glu_f, glu_k, glu_grad, k_scatter_m,
                            k_scatter_n, k_scatter_bf16, glu_k_scatter, ragged_n, ragged_n_k_major,
                            ragged_experts_gathered, ragged_experts_shard_map, ragged_k_split,
                            ragged_n_grad, ragged_glu_f, ragged_glu_k, contract_columns,
                            ragged_rows, ragged_dp_grad, contract_rows, fp8_rows, fp8_block_n,
                            fp8_block_k, fp8_tensor_k_scatter, fp8_kn_columns, fp8_entry_scales,
                            ragged_fp8_n, ragged_fp8_rows, ragged_fp8_block_n,
                            ragged_fp8_block_rows, ragged_fp8_k, ragged_fp8_block_k,
                            fp8_ragged_dp_grad, fp8_ragged_tp_grad, fp8_ragged_served_n,
                            contract_fp8_rows,
                            contract_fp8_columns, contract_fp8_block_columns,
                            quantize_rows_tensor,
                            quantize_cols_blocks, quantize_one_row_block,
                            quantize_unaligned_rows, quantize_given_amax,
                            fp8_matmul_data_parallel, config_per_shard,
                            tune_problems_per_shard, typed_reshapes, empty_problems,
                            shard_map_grads, shard_map_contract_local, shard_map_delayed_meta,
                            quantize_blocks_fewer_than_devices, fp8_block_two_axes,
                            glu_grad_f_split, ragged_glu_grad_f_split, sequence_split_grad,
                            explicit_grad_types, fp8_block_few_rows_warned,
                            explicit_result_types, glu_vmap_grad, ragged_vmap_entries,
                            contract_vmap_entries, ragged_glu_vmap_grad,
                            ragged_fp8_vmap_entries, ragged_vmap_summed_grad,
                            ragged_glu_summed_grad, glu_summed_grad, matmul_summed_grad]))


def main():
    out = {}
    for name, case in _cases().items():
        try:
            out[name] = case() or "ok"
        except Exception:  # noqa: BLE001 (reported to the parent test, case by case)
            out[name] = traceback.format_exc()[-3000:]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
