"""The sharding cases of test_sharding_cpu.py on the GPUs of this machine (two or more Hopper
GPUs): each device runs the kernel on its own shards; results equal the unsharded call."""

import pytest

from jax_hopper import _ffi
from test_sharding_cpu import CASES, run_cases

pytestmark = [pytest.mark.gpu, pytest.mark.multigpu]


@pytest.fixture(scope="module")
def results():
    if len(_ffi.hopper_devices()) < 2:
        pytest.skip(f"needs two or more Hopper GPUs; this machine has "
                    f"{len(_ffi.hopper_devices())}")
    return run_cases({})


@pytest.mark.parametrize("case", CASES)
def test_sharded_on_gpus(results, case):
    if results[case].startswith("skip:"):
        pytest.skip(results[case][5:])
    assert results[case] == "ok", results[case]
