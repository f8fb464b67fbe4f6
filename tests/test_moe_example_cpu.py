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


@pytest.mark.parametrize("recipe", ["tensor", "block"])
def test_fp8_version_runs_on_fp8_ragged_dot(example, capsys, recipe):
    with mock.patch.object(example.jax_hopper, "fp8_ragged_dot",
                           wraps=jax_hopper.fp8_ragged_dot) as spy:
        assert example.main(SMALL + ["--fp8", recipe]) == 0
    assert spy.call_count >= 2 and all(c.kwargs["recipe"] == recipe
                                       for c in spy.call_args_list)
    printed = capsys.readouterr().out
    assert "fp8: experts' output vs float32" in printed and "numerical check: passed" in printed


def test_fp8_version_with_wrong_experts_fails_the_check(example):
    fp8_ragged_dot = jax_hopper.fp8_ragged_dot

    def shifted(lhs, rhs, sizes, **kw):
        return fp8_ragged_dot(lhs, jax.numpy.roll(rhs, 1, axis=0), sizes, **kw)
    with mock.patch.object(example.jax_hopper, "fp8_ragged_dot", shifted):
        assert example.main(SMALL + ["--fp8", "block"]) == 1
