"""Random calls of the grouped (gated too) and fp8 ops on an sm_90 GPU against float64
(hypothesis, the strategies of random_calls.py): shapes, group sizes, layouts, dtypes,
epilogues and compiled configs that no fixed test lists, each output poisoned before the kernel
runs. The GEMM's own random calls are in test_reliability_gpu.py."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from gemm_helpers import (REL_FROB_BOUND, check_fp8_matmul, check_fp8_ragged_dot, check_ragged,
                          check_ragged_fp8, check_ragged_glu, check_ragged_grads)
from random_calls import (fp8_matmul_calls, fp8_ragged_calls, ragged_calls, ragged_fp8_calls,
                          ragged_glu_calls, ragged_grad_calls)

pytestmark = pytest.mark.gpu


def examples(n):
    # Each example compiles its own program (about a second): n per test.
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


@given(ragged_calls())
@examples(120)
def test_random_ragged_calls_match_float64(call):
    check_ragged(np.random.default_rng(call.pop("seed")), **call)


@given(ragged_glu_calls())
@examples(60)
def test_random_ragged_glu_calls_match_float64(call):
    check_ragged_glu(np.random.default_rng(call.pop("seed")), **call)


@given(ragged_fp8_calls())
@examples(60)
def test_random_ragged_fp8_calls_match_float64(call):
    check_ragged_fp8(np.random.default_rng(call.pop("seed")), **call)


@given(ragged_grad_calls())
@examples(40)
def test_random_ragged_gradients_match_float64(call):
    check_ragged_grads(np.random.default_rng(call.pop("seed")), **call,
                       bound=REL_FROB_BOUND["bfloat16"])


@given(fp8_matmul_calls())
@examples(40)
def test_random_fp8_matmul_calls_match_float64(call):
    check_fp8_matmul(np.random.default_rng(call.pop("seed")), **call, jit=True)


@given(fp8_ragged_calls())
@examples(40)
def test_random_fp8_ragged_dot_calls_match_float64(call):
    check_fp8_ragged_dot(np.random.default_rng(call.pop("seed")), **call, jit=True)
