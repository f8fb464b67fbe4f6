"""examples/decode.py: the decode loop runs every projection on jax_hopper, matches the jnp
version within its bound, and a wrong projection fails the check."""

from unittest import mock

import pytest

import jax_hopper
from example_loader import load_example

SMALL = ["--d-model", "128", "--d-ff", "256", "--steps", "8", "--batches", "1", "4",
         "--reps", "1"]


@pytest.fixture(scope="module")
def example():
    return load_example("decode.py")


def test_runs_on_hopper_matmul_and_matches_jnp(example, capsys):
    with mock.patch.object(example.block, "hopper_matmul",
                           wraps=jax_hopper.hopper_matmul) as spy:
        assert example.main(SMALL) == 0
    assert spy.call_count >= 3  # traced once per version and batch: qkv, o, down
    printed = capsys.readouterr().out
    assert "numerical check: passed" in printed
    assert ("weights GB/s" in printed) == bool(jax_hopper.kernels_available())


def test_a_wrong_projection_fails_the_check(example):
    wrong = lambda h, w, residual=None: jax_hopper.hopper_matmul(  # noqa: E731
        h, w * 1.05, residual=residual)
    with mock.patch.object(example.block, "hopper_dense", wrong):
        assert example.main(SMALL) == 1
