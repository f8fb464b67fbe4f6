"""A batch against one shared b as a single product of its rows: the launches of the 16-bit and
fp8 GEMMs (primitive.launch, fp8.launch) fold it this way, whatever made the batch (leading
dimensions of the call, vmap, the backward pass)."""

from __future__ import annotations

from jax_hopper.gemm.typed_reshape import explicitly_sharded


def folds(a3, b_batch: int, res3, a_mn_major: bool) -> bool:
    """Whether a batch of a (B, M, K) against b of batch `b_batch` runs as one product of B x M
    rows (fold): b is then read once, not once per entry, and the config fits the whole product
    (a decode step's (B, 1, K) tokens are B rows). Not where b is batched, a is MN-major, a
    residual is shared by the batch (folding would copy it) or a is explicitly sharded (the
    batch then stays a batch: the sharding rule splits it)."""
    return (b_batch == 1 and a3.shape[0] >= 2 and not a_mn_major and res3.shape[0] != 1
            and not explicitly_sharded(a3))


def fold(x3):
    """(B, M, C) -> (1, B x M, C), a free reshape (an empty residual (0, 0, 0) stays)."""
    return x3.reshape(1, -1, x3.shape[2]) if x3.size else x3
