"""Loads the compiled extension and registers its XLA FFI targets for the CUDA platform.

On a machine without a GPU the registration is queued by jax and never used: every op lowers to
its pure-JAX reference on CPU. On a GPU platform, ops need the built extension.
"""

from __future__ import annotations

import functools

import jax

try:
    from jax_hopper import _jax_hopper as _ext
    _IMPORT_ERROR: Exception | None = None
except ImportError as e:  # a source checkout that was never built
    _ext = None
    _IMPORT_ERROR = e


def extension():
    """The nanobind module, or a RuntimeError that says how to build it."""
    if _ext is None:
        raise RuntimeError(
            "jax_hopper's compiled extension is missing (import of jax_hopper._jax_hopper failed: "
            f"{_IMPORT_ERROR}); install the package with `pip install .` (needs nvcc >= 12.5)")
    return _ext


@functools.cache
def register_targets() -> bool:
    """Registers every handler once; returns False when the extension is not built."""
    if _ext is None:
        return False
    for name, capsule in _ext.registrations().items():
        jax.ffi.register_ffi_target(name, capsule, platform="CUDA")
    return True


def is_hopper(device: jax.Device) -> bool:
    """True for a CUDA device of compute capability 9.x (H100/H200)."""
    capability = str(getattr(device, "compute_capability", ""))
    return device.platform == "gpu" and capability.startswith("9")


@functools.cache
def resident_clusters(kernel: str, cluster_size: int) -> int:
    """How many clusters of `cluster_size` CTAs of GEMM kernel `kernel` (a catalog name) fit on
    the first Hopper GPU at once: what the lowering plans a call for. A process's GPUs are
    assumed alike; the launcher refuses a split plan its GPU cannot hold all at once."""
    device = hopper_devices()[0]
    return extension().gemm_resident_clusters(kernel, cluster_size, device.local_hardware_id)


def kernels_available() -> bool:
    """True when calls run jax_hopper's kernels: a Hopper GPU and the built extension."""
    return bool(hopper_devices()) and register_targets()


def hopper_devices() -> list[jax.Device]:
    try:
        return [d for d in jax.devices("gpu") if is_hopper(d)]
    except RuntimeError:  # no GPU backend at all
        return []
