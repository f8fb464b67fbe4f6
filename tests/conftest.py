"""Shared test setup: the `gpu` marker skips with a stated reason where no sm_90 device exists."""

import zlib

import numpy as np
import pytest

from jax_hopper import _ffi

_HOPPER = _ffi.hopper_devices()
_SKIP_REASON = ("needs an NVIDIA Hopper (sm_90) GPU with jax[cuda]; "
                "this machine has none (run scripts/gpu_suite.sh on an H100/H200)")


def pytest_collection_modifyitems(config, items):
    if _HOPPER:
        return
    skip = pytest.mark.skip(reason=_SKIP_REASON)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng(request):
    """Fresh random inputs per test, seeded from the test's name so failures reproduce."""
    seed = zlib.crc32(request.node.nodeid.encode())
    return np.random.default_rng(seed)
