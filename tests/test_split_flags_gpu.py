"""The split's ready flags (ffi/gemm/split_flags.h) on an sm_90 GPU: kept by each GEMM custom call
across its executions, zeroed once when allocated and left zero by every launch, so no clearing
launch runs before the kernel. A flag left raised would let a later launch add a partial before
it is written: these tests run split plans many times in a row (a lax.scan, a CUDA-graph
command buffer replayed) and check every result against float64 and against the first run
bit for bit (the pieces are summed in a fixed order)."""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemm_helpers import REL_FROB_BOUND, random_operand, reference64, rel_frob, \
    run_in_command_buffer
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jax_hopper import GemmConfig, _ffi, hopper_matmul

pytestmark = pytest.mark.gpu

# (M, N, K, config): a decode product on the swap-AB kernels and a small-M product on the
# 128 x 128 tiles, both split along K by the default plan (asserted below), and a stream-K tail
# (144 tiles on 132 SMs: the last 12 tiles in pieces).
SPLIT_CASES = [(16, 4096, 4096, None), (256, 4096, 4096, None),
               (1536, 1536, 4096, GemmConfig(block_n=128, stages=6))]


def _split_clusters(f, *args):
    """The sk_clusters attribute of every GEMM call in f's lowering."""
    text = jax.jit(f).lower(*args).as_text()
    return [int(v) for v in re.findall(r"sk_clusters = (\d+)", text)]


@pytest.mark.parametrize("m,n,k,config", SPLIT_CASES, ids=["swap16", "m256", "stream_k"])
def test_split_runs_many_times_in_a_scan(rng, m, n, k, config):
    steps = 12
    xs = random_operand(rng, (steps, m, k), jnp.bfloat16)
    w = random_operand(rng, (k, n), jnp.bfloat16)

    def product(x, w):
        return hopper_matmul(x, w, config=config, preferred_element_type=jnp.float32)

    assert all(c > 0 for c in _split_clusters(product, xs[0], w)), "the plan does not split"
    scan = jax.jit(lambda xs, w: jax.lax.scan(lambda c, x: (c, product(x, w)), 0, xs)[1])
    outs = np.asarray(scan(xs, w))
    for i in range(steps):
        assert rel_frob(outs[i], reference64(xs[i], w)) < REL_FROB_BOUND["bfloat16"], i
    # The same call again: every launch finds the flags zero and leaves them so.
    assert np.array_equal(np.asarray(scan(xs, w)), outs)


_GRAPH_CHILD = r"""
import jax, jax.numpy as jnp, numpy as np, sys
sys.path.insert(0, {tests!r})
from gemm_helpers import reference64, rel_frob
from jax_hopper import hopper_matmul
k0, k1, k2 = jax.random.split(jax.random.key(0), 3)
x = jax.random.normal(k0, (16, 4096), jnp.float32).astype(jnp.bfloat16)
y = jax.random.normal(k1, (256, 4096), jnp.float32).astype(jnp.bfloat16)
w = jax.random.normal(k2, (4096, 4096), jnp.float32).astype(jnp.bfloat16)
f = jax.jit(lambda x, y, w: (hopper_matmul(jnp.sin(x), w, preferred_element_type=jnp.float32),
                             hopper_matmul(y, w, preferred_element_type=jnp.float32)))
want = (reference64(jnp.sin(x), w), reference64(y, w))
first = None
for _ in range(6):
    got = [np.asarray(o) for o in f(x, y, w)]
    first = first or got
    for g, r, f0 in zip(got, want, first):
        print("ERR", rel_frob(g, r) + (0.0 if np.array_equal(g, f0) else 1.0), flush=True)
"""


def test_split_replays_in_a_command_buffer(rng):
    """Replays of a CUDA graph launch the kernels with the same flags and no clearing node in
    between: each replay must find them zero. An error of 1 or more marks a replay whose result
    differs from the first run's bits."""
    x = random_operand(rng, (16, 4096), jnp.bfloat16)
    y = random_operand(rng, (256, 4096), jnp.bfloat16)
    w = random_operand(rng, (4096, 4096), jnp.bfloat16)
    split = _split_clusters(lambda x, y, w: (hopper_matmul(x, w), hopper_matmul(y, w)), x, y, w)
    assert len(split) == 2 and min(split) > 0, split
    errors = run_in_command_buffer(_GRAPH_CHILD, "hopper_gemm", "jax_hopper_gemm_matmul")
    assert len(errors) == 12 and max(errors) < REL_FROB_BOUND["bfloat16"], errors


@pytest.mark.multigpu
def test_one_executable_splits_on_every_gpu(rng):
    """One SPMD executable, one state, a split plan on each device: the state must hold a set of
    flags per device. Were one device handed another's flags, the two launches would raise and
    clear each other's flags, and partials would be summed before they are written."""
    devices = _ffi.hopper_devices()
    if len(devices) < 2:
        pytest.skip(f"needs two Hopper GPUs; this machine has {len(devices)}")
    mesh = jax.sharding.Mesh(np.array(devices), ("x",))
    steps, m, n, k = 8, 16, 4096, 4096
    xs = random_operand(rng, (steps, len(devices) * m, k), jnp.bfloat16)
    w = random_operand(rng, (k, n), jnp.bfloat16)

    def product(x, w):
        return hopper_matmul(x, w, preferred_element_type=jnp.float32)

    assert all(c > 0 for c in _split_clusters(product, xs[0, :m], w)), "the plan does not split"

    @functools.partial(jax.shard_map, mesh=mesh, in_specs=(P(None, "x"), P()),
                       out_specs=P(None, "x"))
    def rows_per_device(xs, w):
        return jax.lax.scan(lambda c, x: (c, product(x, w)), 0, xs)[1]

    xs = jax.device_put(xs, NamedSharding(mesh, P(None, "x")))
    w = jax.device_put(w, NamedSharding(mesh, P()))
    f = jax.jit(rows_per_device)
    outs = np.asarray(f(xs, w))
    for i in range(steps):
        assert rel_frob(outs[i], reference64(xs[i], w)) < REL_FROB_BOUND["bfloat16"], i
    assert np.array_equal(np.asarray(f(xs, w)), outs)
