"""A batch against one shared b as a single product of its rows: hopper_matmul's unmapped call
and the vmap rule (batching.py) both fold it this way."""

from __future__ import annotations

import jax


def fold_shared_batch(a3, b3, res3, a_mn_major: bool):
    """(a3, res3) with a batch of K-major a against one shared b made one product of batch x M
    rows (free reshapes of a and of a batched residual): b is then read once, not once per
    entry, and the config fits the whole product (a decode step's (B, 1, K) tokens are B rows).
    Unchanged where b is batched, a is MN-major, a residual is shared by the batch (folding
    would copy it) or a is explicitly sharded."""
    if (b3.shape[0] != 1 or a3.shape[0] < 2 or a_mn_major or res3.shape[0] == 1 or
            explicitly_sharded(a3)):
        return a3, res3
    rows = a3.shape[0] * a3.shape[1]
    return (a3.reshape(1, rows, a3.shape[2]),
            res3.reshape(1, rows, res3.shape[2]) if res3.size else res3)


def explicitly_sharded(x) -> bool:
    """Whether x's type carries a sharding (jax's explicit sharding mode): a reshape that merges
    a sharded axis would then need its output sharding spelled out, so such a batch stays a
    batch (the sharding rule splits it)."""
    spec = getattr(getattr(jax.typeof(x), "sharding", None), "spec", None)
    return spec is not None and any(p is not None for p in spec)
