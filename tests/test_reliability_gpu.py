"""Reliability of the GEMM kernel on an sm_90 GPU: random calls against float64 (hypothesis),
NaN/Inf as jnp.dot propagates them, empty and > 2^31-element problems, 10,000 calls without
memory growth, calls from several threads, and arrays on a second GPU."""

import concurrent.futures
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from test_properties_cpu import matmul_calls

from gemm_helpers import REL_FROB_BOUND, random_operand, reference64, rel_frob
from jax_hopper import _ffi, hopper_matmul

pytestmark = pytest.mark.gpu


@given(matmul_calls(max_dim=300))
@settings(max_examples=60, deadline=None, derandomize=True, database=None)
def test_random_calls_match_float64(call):
    a, b, kwargs, facts = call
    arrays = {k: v for k, v in kwargs.items() if k in ("bias", "residual")}
    static = {k: v for k, v in kwargs.items() if k not in arrays}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unaddressable pitches fall back; tested elsewhere
        out = jax.jit(lambda a, b, arrays: hopper_matmul(a, b, **static, **arrays))(a, b, arrays)
    out_dtype = jnp.dtype(kwargs["out_dtype"] or facts["dtype"])
    assert out.shape == facts["out_shape"] and out.dtype == out_dtype
    ref = reference64(a, b, **{k: v for k, v in kwargs.items() if k not in ("out_dtype", "config")})
    assert rel_frob(out, ref) < REL_FROB_BOUND[out_dtype.name], facts


@pytest.mark.parametrize("transpose_a,transpose_b", [(False, False), (True, True)])
def test_nan_and_inf_propagate_as_in_jnp_dot(rng, transpose_a, transpose_b):
    m, n, k = 200, 264, 136
    a = np.asarray(random_operand(rng, (m, k), "bfloat16")).astype(np.float32)
    b = np.asarray(random_operand(rng, (k, n), "bfloat16")).astype(np.float32)
    a[3, 5] = np.nan      # row 3 of the product: NaN
    b[7, 11] = np.inf     # column 11: +-Inf where a[:, 7] is finite
    b[9, 11] = -np.inf    # ... and NaN where +Inf meets -Inf in one sum
    a[150, 9] = 0.0       # 0 * -Inf = NaN at (150, 11)
    a16, b16 = jnp.asarray(a, jnp.bfloat16), jnp.asarray(b, jnp.bfloat16)
    want = np.asarray(jnp.dot(a16, b16, preferred_element_type=jnp.float32))
    got = np.asarray(hopper_matmul(a16.T if transpose_a else a16, b16.T if transpose_b else b16,
                                   transpose_a=transpose_a, transpose_b=transpose_b,
                                   out_dtype=jnp.float32, strict=True))
    for test in (np.isnan, np.isposinf, np.isneginf):
        assert np.array_equal(test(got), test(want)), test.__name__
    assert np.isnan(got[3]).all() and np.isnan(got[150, 11])
    finite = np.isfinite(want)
    assert np.allclose(got[finite], want[finite], rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("m,n,k", [(0, 64, 64), (64, 0, 64), (64, 64, 0)])
def test_empty_problems(rng, m, n, k):
    a, b = random_operand(rng, (m, k), "bfloat16"), random_operand(rng, (k, n), "bfloat16")
    bias = random_operand(rng, (n,), "float32")
    out = jax.jit(lambda a, b, bias: hopper_matmul(a, b, bias=bias, activation="relu",
                                                   out_dtype=jnp.float32))(a, b, bias)
    assert out.shape == (m, n)
    np.testing.assert_array_equal(np.asarray(out), np.broadcast_to(np.maximum(bias, 0), (m, n)))


def test_output_beyond_2_31_elements(rng):
    """65536 x 32768 = 2^31 outputs: 64-bit addressing in the epilogue and the TMA store."""
    m, n, k = 65536, 32768, 64
    a, b = random_operand(rng, (m, k), "bfloat16"), random_operand(rng, (k, n), "bfloat16")
    out = jax.jit(lambda a, b: hopper_matmul(a, b, strict=True))(a, b)
    rows = np.r_[0:64, m // 2 - 32:m // 2 + 32, m - 64:m]
    got = np.asarray(out[rows])
    ref = reference64(np.asarray(a)[rows], b)
    assert rel_frob(got, ref) < REL_FROB_BOUND["bfloat16"]
    del out


def _device_bytes(device):
    return device.memory_stats()["bytes_in_use"]


def _host_rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_ten_thousand_calls_with_changing_shapes_hold_memory_steady(rng):
    shapes = [(64 + 8 * i, 128 + 16 * (i % 5), 64 + 8 * (i % 7)) for i in range(20)]
    ops = [(random_operand(rng, (m, k), "bfloat16"), random_operand(rng, (k, n), "bfloat16"))
           for m, n, k in shapes]
    f = jax.jit(lambda a, b: hopper_matmul(a, b, activation="silu", strict=True))
    device = jax.devices()[0]

    def sweep(times):
        for i in range(times):
            out = f(*ops[i % len(ops)])
        return out.block_until_ready()

    sweep(len(ops))  # compile each shape once
    dev0, host0 = _device_bytes(device), _host_rss_bytes()
    sweep(10_000)
    dev1, host1 = _device_bytes(device), _host_rss_bytes()
    assert dev1 - dev0 <= 1 << 20, (dev0, dev1)
    assert host1 - host0 <= 64 << 20, (host0, host1)


def test_calls_from_several_threads(rng):
    cases = [(random_operand(rng, (96 + 32 * t, 72), "bfloat16"),
              random_operand(rng, (72, 136 + 8 * t), "bfloat16")) for t in range(8)]
    f = jax.jit(lambda a, b: hopper_matmul(a, b, out_dtype=jnp.float32, strict=True))

    def work(t):
        a, b = cases[t]
        return [rel_frob(f(a, b), reference64(a, b)) for _ in range(20)]

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        errors = [e for errs in pool.map(work, range(8)) for e in errs]
    assert len(errors) == 160 and max(errors) < REL_FROB_BOUND["float32"]


@pytest.mark.multigpu
def test_arrays_on_a_second_gpu_run_there(rng):
    devices = _ffi.hopper_devices()
    if len(devices) < 2:
        pytest.skip(f"needs two Hopper GPUs; this machine has {len(devices)}")
    a = jax.device_put(random_operand(rng, (300, 136), "bfloat16"), devices[1])
    b = jax.device_put(random_operand(rng, (136, 264), "bfloat16"), devices[1])
    before = _device_bytes(devices[0])
    out = jax.jit(lambda a, b: hopper_matmul(a, b, out_dtype=jnp.float32, strict=True))(a, b)
    assert out.devices() == {devices[1]}
    assert rel_frob(out, reference64(a, b)) < REL_FROB_BOUND["float32"]
    assert _device_bytes(devices[0]) <= before  # nothing allocated on the first GPU
