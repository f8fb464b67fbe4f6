"""The random calls of random_calls.py through the reference lowering (no GPU): each within its
float64 bound, rows past every group zero. The same strategies run on the kernels in
test_random_calls_gpu.py; here they check the references, the argument handling and the
strategies themselves on every CI run."""

import numpy as np
from hypothesis import given, settings

from gemm_helpers import (REL_FROB_BOUND, check_fp8_matmul, check_fp8_ragged_dot, check_ragged,
                          check_ragged_fp8, check_ragged_glu, check_ragged_grads)
from properties import RUNNING
from random_calls import (fp8_matmul_calls, fp8_ragged_calls, ragged_calls, ragged_fp8_calls,
                          ragged_glu_calls, ragged_grad_calls)

# Each example compiles the reference for its shapes: few examples, small shapes.
FEW = settings(RUNNING, max_examples=12)


@given(ragged_calls(max_m=300, max_kn=96, max_groups=130))
@FEW
def test_random_ragged_calls_match_float64(call):
    check_ragged(np.random.default_rng(call.pop("seed")), **call)


@given(ragged_glu_calls(max_m=300, max_kn=96, max_groups=130))
@FEW
def test_random_ragged_glu_calls_match_float64(call):
    check_ragged_glu(np.random.default_rng(call.pop("seed")), **call)


@given(ragged_fp8_calls(max_m=300, max_kn=200, max_groups=130))
@FEW
def test_random_ragged_fp8_calls_match_float64(call):
    check_ragged_fp8(np.random.default_rng(call.pop("seed")), **call, on_kernel=False)


@given(ragged_grad_calls(max_m=300, max_kn=96))
@FEW
def test_random_ragged_gradients_match_float64(call):
    check_ragged_grads(np.random.default_rng(call.pop("seed")), **call,
                       bound=REL_FROB_BOUND["bfloat16"])


@given(fp8_matmul_calls(max_rows=200, max_kn=160))
@FEW
def test_random_fp8_matmul_calls_match_float64(call):
    check_fp8_matmul(np.random.default_rng(call.pop("seed")), **call, jit=True)


@given(fp8_ragged_calls(max_rows=200, max_kn=160))
@FEW
def test_random_fp8_ragged_dot_calls_match_float64(call):
    check_fp8_ragged_dot(np.random.default_rng(call.pop("seed")), **call, jit=True)
