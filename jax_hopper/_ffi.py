"""Loads the compiled extension and registers its XLA FFI targets for the CUDA platform, and
says whether the kernels run here (kernels_available).

On a machine without a Hopper GPU, or in a package built without the CUDA toolkit (a pure-JAX
install: CMakeLists.txt, JAX_HOPPER_KERNELS), every op lowers to its pure-JAX reference.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import os

import jax

try:
    from jax_hopper import _build_info  # written by CMakeLists.txt into the installed package
except ImportError:
    _build_info = None

try:
    from jax_hopper import _jax_hopper as _ext
    _IMPORT_ERROR: Exception | None = None
except ImportError as e:  # built without kernels, or a source checkout that was never built
    _ext = None
    _IMPORT_ERROR = e


def _missing_extension() -> str:
    """Why there is no extension: how the package was built, or the import error."""
    if _build_info is None:
        installed = _installed_copy()
        if installed:
            return (f"jax_hopper is imported from the source tree {_here()}, which shadows the "
                    f"built package installed at {installed}: run from another directory than "
                    "the checkout's root")
        return ("jax_hopper is imported from a source tree that was never built; install it "
                "with `pip install .` (the kernels need nvcc >= 12.5)")
    if not _build_info.KERNELS:
        return (f"this jax_hopper was built without kernels ({_build_info.NO_KERNELS_REASON}); "
                "reinstall with the CUDA toolkit >= 12.5 (nvcc) present")
    return f"the compiled extension failed to import: {_IMPORT_ERROR}"


def _here() -> str:
    return os.path.dirname(os.path.abspath(__file__))


def _installed_copy() -> str | None:
    """Where pip installed jax_hopper, when that is not the package being imported."""
    try:
        path = str(importlib.metadata.distribution("jax-hopper").locate_file("jax_hopper"))
    except importlib.metadata.PackageNotFoundError:
        return None
    same = os.path.isdir(path) and os.path.samefile(path, _here())
    return None if same or not os.path.isdir(path) else path


def has_extension() -> bool:
    """Whether the compiled extension (the kernels and the C++ planner) imported: a build
    without kernels (a pure-JAX wheel) or a shadowed source tree has none."""
    return _ext is not None


def extension():
    """The nanobind module, or a RuntimeError that says why there is none."""
    if _ext is None:
        raise RuntimeError(_missing_extension())
    return _ext


@dataclasses.dataclass(frozen=True)
class KernelStatus:
    """Whether jax_hopper's ops run its kernels here (truthy) or their XLA reference, and why."""
    available: bool
    reason: str

    def __bool__(self) -> bool:
        return self.available


def kernels_available() -> KernelStatus:
    """KernelStatus: the kernels run when the package was built with them and a Hopper GPU
    (compute capability 9.x) is visible to jax; otherwise every op lowers to its XLA reference.
    `reason` says which it is."""
    if _ext is None:
        return KernelStatus(False, _missing_extension())
    devices = hopper_devices()
    if not devices:
        try:
            kinds = sorted({d.device_kind for d in jax.devices()})
        except RuntimeError:
            kinds = []
        return KernelStatus(False, "no Hopper GPU (sm_90) visible to jax; devices: "
                                   f"{', '.join(kinds) or 'none'}")
    register_targets()
    return KernelStatus(True, f"kernels run on {len(devices)} Hopper GPU(s): "
                              f"{devices[0].device_kind}")


@functools.cache
def register_targets() -> bool:
    """Registers every handler once; returns False when the extension is not built."""
    if _ext is None:
        return False
    for name, registration in _ext.types().items():
        jax.ffi.register_ffi_type(name, registration, platform="CUDA")
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


def hopper_devices() -> list[jax.Device]:
    return [d for d in jax.devices("gpu") if is_hopper(d)] if gpu_backend() else []


def gpu_backend() -> bool:
    """Whether jax has a GPU backend here."""
    try:
        jax.devices("gpu")
    except RuntimeError:  # no GPU backend at all
        return False
    return True
