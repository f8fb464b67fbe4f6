"""Shared test setup: the `gpu` marker skips with a stated reason where no sm_90 device exists
(and fails where one exists but the extension does not load), the `extension` marker skips
where the package was built without its compiled extension."""

import zlib

import jax
import numpy as np
import pytest

from jax_hopper import _ffi

_HOPPER = _ffi.hopper_devices()
_SKIP_REASON = ("needs an NVIDIA Hopper (sm_90) GPU with jax[cuda]; "
                "this machine has none (run scripts/gpu_suite.sh on an H100/H200)")


def _missing_extension() -> str | None:
    try:
        _ffi.extension()
    except RuntimeError as e:
        return str(e)
    return None


def pytest_collection_modifyitems(config, items):
    no_extension = _missing_extension()
    for item in items:
        if "gpu" in item.keywords and not _HOPPER:
            item.add_marker(pytest.mark.skip(reason=_SKIP_REASON))
        elif "extension" in item.keywords and no_extension:
            item.add_marker(pytest.mark.skip(
                reason=f"needs the compiled extension: {no_extension}"))


def pytest_runtest_setup(item):
    """A GPU test on a Hopper machine whose extension does not load fails: its ops would lower
    to their XLA references (with only a warning) and it would pass for kernels it never ran.
    (pytest started in the checkout's root imports the source tree, which has no extension:
    a tanh-GELU value test then failed on XLA's float32 tanh-GELU, -0.0 at x = -4.906, not on
    the kernel's.)"""
    if "gpu" in item.keywords and _HOPPER and (no_extension := _missing_extension()):
        pytest.fail(f"a Hopper GPU is here but the kernels are not: {no_extension}",
                    pytrace=False)


@pytest.fixture
def rng(request):
    """Fresh random inputs per test, seeded from the test's name so failures reproduce."""
    seed = zlib.crc32(request.node.nodeid.encode())
    return np.random.default_rng(seed)


@pytest.fixture
def kernel_emulation(monkeypatch):
    """The monkeypatch of gemm_helpers' emulate_* (a primitive bound as a numpy emulation of
    its kernel), with jax's trace caches cleared before the test, so that its calls are traced
    anew with the emulation, and after it, so that no later test reuses those traces."""
    jax.clear_caches()
    yield monkeypatch
    jax.clear_caches()
