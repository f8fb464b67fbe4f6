"""CPU tests of examples/transformer_layer.py: the CLI end to end on a tiny layer, that every
projection of the hopper version is a hopper_matmul (and none of the jnp version is), that
the numerical check fails, with exit status 1, when a projection computes the wrong thing, and
--fp8: its versions, table, JSON and training run, and that their projections are fp8 GEMMs."""

import collections
import functools
import json
import math
from unittest import mock

import jax
import jax.numpy as jnp
import pytest

from jax.extend.core import ClosedJaxpr, Jaxpr

import jax_hopper
from example_loader import load_example
from gemm_helpers import program_eqns

D, D_FF, HEADS, BATCH, SEQ = 64, 128, 2, 2, 16
TINY = ["--d-model", str(D), "--d-ff", str(D_FF), "--heads", str(HEADS), "--batch", str(BATCH),
        "--seq", str(SEQ), "--reps", "2"]
PARAMS = ("ln1", "w_qkv", "w_o", "ln2", "w_gate_up", "w_down")


@pytest.fixture(scope="module")
def example():
    return load_example("transformer_layer.py")


@pytest.fixture(scope="module")
def inputs(example):
    kp, kx = jax.random.split(jax.random.key(3))
    params = example.init_params(kp, D, D_FF)
    x = jax.random.normal(kx, (BATCH, SEQ, D), jnp.float32).astype(jnp.bfloat16)
    return params, x, jnp.zeros(x.shape, jnp.float32)


def test_cli_writes_a_sane_table_and_json(example, tmp_path, capsys):
    path = tmp_path / "results.json"
    assert example.main(TINY + ["--json", str(path)]) == 0
    printed = capsys.readouterr().out
    assert "numerical check: passed" in printed and "FAIL" not in printed
    # The reference lowering says so, and shows no speed-up; on a Hopper GPU the kernel runs.
    kernels = bool(jax_hopper.kernels_available())
    assert ("no Hopper kernels" in printed) == (not kernels)
    assert ("speedup" in printed) == kernels
    r = json.loads(path.read_text())
    assert r["config"]["d_model"] == D and r["tokens"] == BATCH * SEQ
    assert r["output_shape"] == [BATCH, SEQ, D] and r["dtype"] == "bfloat16"
    assert r["passed"] is True
    assert set(r["errors"]) == {"output", "loss"} | {f"grad {k}" for k in PARAMS}
    for k, e in r["errors"].items():
        assert math.isfinite(e) and 0 <= e <= r["bounds"][k], (k, e)
    for version in ("hopper", "jnp"):
        assert math.isfinite(r["loss"][version]) and r["loss"][version] > 0
        for key in ("forward_s", "train_step_s"):
            t = r["times_s"][version][key]
            assert 0 < t < 60
            assert r["tokens_per_s"][version][key] == pytest.approx(BATCH * SEQ / t)
    assert r["hopper"] == kernels and ("speedup" in r) == kernels
    for key in ("forward_s", "train_step_s") if kernels else ():
        assert r["speedup"][key] == pytest.approx(r["times_s"]["jnp"][key]
                                                  / r["times_s"]["hopper"][key])


def test_cli_with_fp8_block_adds_the_fp8_versions(example, tmp_path, capsys):
    """--fp8 block: four versions timed side by side, the fp8 differences and a short training
    run in the table and the JSON; no speed-up where the kernels are not (CPU: references)."""
    path = tmp_path / "results.json"
    steps = 3
    assert example.main(TINY + ["--fp8", "block", "--train-steps", str(steps),
                                "--json", str(path)]) == 0
    printed = capsys.readouterr().out
    assert "numerical check: passed" in printed and "fp8_matmul, recipe 'block'" in printed
    assert f"training: {steps} Adam steps" in printed
    kernels = bool(jax_hopper.kernels_available())
    assert ("speedup" in printed) == kernels
    r = json.loads(path.read_text())
    assert r["passed"] is True and r["config"]["fp8"] == "block"
    assert r["config"]["train_steps"] == steps
    versions = ("hopper", "jnp", "fp8", "xla_fp8")
    assert set(r["times_s"]) == set(r["loss"]) == set(versions)
    for version in versions:
        assert math.isfinite(r["loss"][version]) and r["loss"][version] > 0
        assert all(0 < t < 60 for t in r["times_s"][version].values())
    f = r["fp8"]
    assert f["recipe"] == "block" and ("speedup" in f) == kernels
    for name in ("fp8", "xla_fp8"):
        d = f["differences_vs_jnp"][name]
        assert set(d) == {"output", "loss"} | {f"grad {k}" for k in PARAMS}
        # fp8's rounding (2^-4 relative for e4m3), not a wrong projection: well under 1.
        assert all(math.isfinite(e) and 0 < e < 0.3 for e in d.values()), (name, d)
    t = f["training"]
    assert t["steps"] == steps and all(len(t["losses"][n]) == steps for n in ("jnp", "fp8"))
    assert t["losses"]["fp8"][-1] < t["losses"]["fp8"][0]  # it trains
    assert 0 <= t["max_rel_loss_difference"] < 1e-2


def test_fp8_versions_run_every_projection_in_fp8(example, inputs):
    """Every projection of the fp8 version is one fp8_matmul of a (K, N) weight (the gated MLP
    input too, through swiglu_from; the residual adds fused into the output and down
    projections), and the XLA fp8 version's forward and gradient are fp8 dots: three per
    projection (forward, dx, dw)."""
    params, x, target = inputs
    m = BATCH * SEQ
    with mock.patch.object(example, "fp8_matmul", wraps=jax_hopper.fp8_matmul) as spy:
        jax.jit(example.make_layer(example.fp8_dense_for("block"), HEADS))(params, x)
        calls = [(c.args[0].shape, c.args[1].shape, c.kwargs["recipe"], c.kwargs["meta"],
                  c.kwargs["residual"] is not None) for c in spy.call_args_list]
    assert calls == [((m, D), (D, 3 * D), "block", None, False),
                     ((m, D), (D, D), "block", None, True),
                     ((m, D), (D, 2 * D_FF), "block", None, False),
                     ((m, D_FF), (D_FF, D), "block", None, True)]
    layer = example.make_layer(example.xla_fp8_dense, HEADS)
    grad = jax.grad(functools.partial(example.mse_loss, layer))
    assert _count_fp8_dots(jax.make_jaxpr(layer)(params, x).jaxpr) == 4
    assert _count_fp8_dots(jax.make_jaxpr(grad)(params, x, target).jaxpr) == 12


def test_every_projection_calls_hopper_matmul(example, inputs):
    params, x, _ = inputs
    m = BATCH * SEQ
    with mock.patch.object(example, "hopper_matmul", wraps=jax_hopper.hopper_matmul) as spy:
        out = jax.jit(example.make_layer(example.hopper_dense, HEADS))(params, x)
        calls = [(c.args[0].shape, c.args[1].shape, c.kwargs.get("residual") is not None)
                 for c in spy.call_args_list]
        assert calls == [((m, D), (D, 3 * D), False),        # q, k, v in one GEMM
                         ((m, D), (D, D), True),             # output projection + residual
                         ((m, D), (D, 2 * D_FF), False),     # gate and up in one GEMM
                         ((m, D_FF), (D_FF, D), True)]       # down projection + residual
        spy.reset_mock()
        jax.jit(example.make_layer(example.jnp_dense, HEADS))(params, x)
        assert spy.call_count == 0
    assert out.shape == x.shape and out.dtype == jnp.bfloat16


def _count_primitives(jaxpr):
    """Primitive names in a jaxpr, every jaxpr nested in its equations' parameters, and the
    launches its traced primitives lower to (gemm_helpers.program_eqns: the gated products
    of hopper_glu's gradient)."""
    return collections.Counter(eqn.primitive.name for eqn in program_eqns(jaxpr))


def _count_fp8_dots(jaxpr):
    """dot_generals with both operands fp8, in a jaxpr and every jaxpr nested in it."""
    count = 0
    for eqn in jaxpr.eqns:
        count += eqn.primitive.name == "dot_general" and all(
            jnp.dtype(v.aval.dtype).name.startswith("float8") for v in eqn.invars)
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(sub, (ClosedJaxpr, Jaxpr)):
                    count += _count_fp8_dots(getattr(sub, "jaxpr", sub))
    return count


def test_hopper_version_leaves_only_attention_to_xla_dots(example, inputs):
    """Forward: 4 kernel GEMMs (hopper_glu's fused unit is one); gradient: 4 + 2 per projection
    (dA, dB). The dot_generals left
    are the attention's, as many as the jnp version has beyond its 6 or 18 projection dots."""
    params, x, target = inputs
    counts = {}
    for name, dense, swiglu in (("hopper", example.hopper_dense, example.hopper_swiglu),
                                ("jnp", example.jnp_dense, None)):
        layer = example.make_layer(dense, HEADS, swiglu=swiglu)
        grad = jax.grad(functools.partial(example.mse_loss, layer))
        counts[name] = (_count_primitives(jax.make_jaxpr(layer)(params, x).jaxpr),
                        _count_primitives(jax.make_jaxpr(grad)(params, x, target).jaxpr))
    (h_fwd, h_grad), (j_fwd, j_grad) = counts["hopper"], counts["jnp"]
    assert (h_fwd["hopper_gemm"], h_grad["hopper_gemm"]) == (4, 12)
    assert (j_fwd["hopper_gemm"], j_grad["hopper_gemm"]) == (0, 0)
    assert h_fwd["dot_general"] == j_fwd["dot_general"] - 4
    assert h_grad["dot_general"] == j_grad["dot_general"] - 12


def test_wrong_projection_fails_the_check(example, capsys):
    """A 5% scale error in every hopper projection must trip the bounds and exit with 1.
    (Timing is stubbed out: it compiles two more programs per version and checks nothing.)"""
    def scaled_dense(h, w, residual=None):
        return example.hopper_matmul(h, w, residual=residual, alpha=1.05)

    with mock.patch.object(example, "hopper_dense", scaled_dense), \
            mock.patch.object(example, "median_seconds",
                              lambda runs, **kwargs: dict.fromkeys(runs, 1.0)):
        assert example.main(TINY) == 1
    assert "numerical check: FAILED" in capsys.readouterr().out


def test_median_seconds_interleaves_the_versions(example):
    calls = []
    runs = {name: (lambda name=name: calls.append(name) or jnp.zeros(())) for name in "abc"}
    medians = example.median_seconds(runs, reps=8, warmup=1, pipeline=2)
    assert set(medians) == set("abc") and all(t >= 0 for t in medians.values())
    # A sample is `pipeline` calls back to back; each round times every version once, in a
    # new order, so no version always runs right after the same one.
    assert calls[:3] == list("abc")
    samples = calls[3::2]
    assert calls[3:] == [v for v in samples for _ in range(2)]
    rounds = [samples[i:i + 3] for i in range(0, len(samples), 3)]
    assert len(rounds) == 8 and all(sorted(r) == list("abc") for r in rounds)
    for name in "abc":
        after = {samples[i - 1] for i in range(1, len(samples)) if samples[i] == name}
        assert len(after - {name}) == 2, (name, after)
