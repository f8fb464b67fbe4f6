"""TMA ops on Hopper: box copy, the raw shared-memory bytes of a box, cluster multicast, and
reduce-add into global memory; each a custom call on CUDA and a pure-JAX reference elsewhere."""
from jax_hopper.tma.boxes import SWIZZLES
from jax_hopper.tma.ops import tma_copy, tma_multicast, tma_reduce_add, tma_smem_bytes

__all__ = ["SWIZZLES", "tma_copy", "tma_multicast", "tma_reduce_add", "tma_smem_bytes"]
