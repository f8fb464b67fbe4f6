"""examples/moe_layer.py: the MoE block runs its grouped GEMMs on jax_hopper (hopper_ragged_glu,
ragged_dot), both versions match float32 within the bound, and a block that multiplies the
wrong experts fails the check; with --fp8 the third version runs on fp8_ragged_dot and is
checked too."""

from unittest import mock

import jax
import pytest

import jax_hopper
from example_loader import load_example

SMALL = ["--tokens", "96", "--d-model", "64", "--d-ff", "64", "--experts", "5", "--reps", "1"]


@pytest.fixture(scope="module")
def example():
    return load_example("moe_layer.py")


def test_runs_on_the_grouped_kernels_and_matches_float32(example, capsys):
    with mock.patch.object(example.jax_hopper, "ragged_dot",
                           wraps=jax_hopper.ragged_dot) as spy, \
            mock.patch.object(example.jax_hopper, "hopper_ragged_glu",
                              wraps=jax_hopper.hopper_ragged_glu) as glu_spy:
        assert example.main(SMALL) == 0
    # The down projection and the gated gate/up, traced once per compiled function.
    assert spy.call_count >= 2 and glu_spy.call_count >= 2
    printed = capsys.readouterr().out
    assert "numerical check: passed" in printed
    assert ("lax speed-up" in printed) == bool(jax_hopper.kernels_available())


def test_wrong_experts_fail_the_check(example):
    ragged_dot = jax_hopper.ragged_dot

    def shifted(lhs, rhs, sizes):  # every group multiplies the next expert's weights
        return ragged_dot(lhs, jax.numpy.roll(rhs, 1, axis=0), sizes)
    with mock.patch.object(example.jax_hopper, "ragged_dot", shifted):
        assert example.main(SMALL) == 1


@pytest.mark.parametrize("recipe", ["tensor", "delayed", "block"])
def test_fp8_version_runs_on_fp8_ragged_dot(example, capsys, recipe):
    with mock.patch.object(example.jax_hopper, "fp8_ragged_dot",
                           wraps=jax_hopper.fp8_ragged_dot) as spy:
        assert example.main(SMALL + ["--fp8", recipe]) == 0
    assert spy.call_count >= 2 and all(c.kwargs["recipe"] == recipe
                                       for c in spy.call_args_list)
    # "delayed": every training call site passes its calibrated Fp8Meta (one w history per
    # expert); the serving version's calls get the weights quantized once, and no meta.
    served = [isinstance(c.args[1], jax_hopper.Fp8Array) for c in spy.call_args_list]
    assert any(served) and not all(served)
    metas = [c.kwargs.get("meta") for c in spy.call_args_list]
    assert all((m is not None) == (recipe == "delayed" and not s)
               for m, s in zip(metas, served, strict=True))
    printed = capsys.readouterr().out
    assert "fp8: experts' output vs float32" in printed and "numerical check: passed" in printed
    assert "fp8 serve: experts' output vs float32" in printed


def test_delayed_step_replaces_the_metas_and_records_amaxes(example):
    """The training step hands each Fp8Meta its gradient (the histories pushed on by the step's
    amaxes), and the weights move; the calibrated histories hold nonzero amaxes."""
    import jax.numpy as jnp
    params = example.init_params(jax.random.key(0), 32, 32, 3)
    x = jax.random.normal(jax.random.key(1), (48, 32)).astype(jnp.bfloat16)
    target = jax.random.normal(jax.random.key(2), x.shape)
    moe = example.make_block(
        lambda lhs, rhs, sizes, **meta: jax_hopper.fp8_ragged_dot(lhs, rhs, sizes,
                                                                  recipe="delayed", **meta), 2)
    p = example.with_calibrated_metas(moe, params, x, target)
    for m in p["fp8_meta"].values():
        assert m.w.shape == (3, 16) and float(m.x[0]) > 0 and float(m.grad[0]) > 0
    new, loss = example.make_train_step(moe)(p, x, target)
    assert jnp.isfinite(loss)
    for name, m in new["fp8_meta"].items():
        old = p["fp8_meta"][name]
        # Newest first: the step's amax in front, the rest shifted by one.
        assert jnp.array_equal(m.x[1:], old.x[:-1]) and float(m.x[0]) > 0
    assert not jnp.array_equal(new["w_down"], p["w_down"])


def test_fp8_version_with_wrong_experts_fails_the_check(example):
    fp8_ragged_dot = jax_hopper.fp8_ragged_dot

    def shifted(lhs, rhs, sizes, **kw):  # the weights quantized once too (serving)
        return fp8_ragged_dot(lhs, jax.tree.map(lambda t: jax.numpy.roll(t, 1, axis=0), rhs),
                              sizes, **kw)
    with mock.patch.object(example.jax_hopper, "fp8_ragged_dot", shifted):
        assert example.main(SMALL + ["--fp8", "block"]) == 1
