"""typed_reshape._out_spec: the sharding a reshape of an explicitly sharded array is given (the
split kept where no data moves, replicated where it would), and reshape's plain path."""

import jax.numpy as jnp
import pytest

from jax_hopper.gemm.typed_reshape import _out_spec, explicitly_sharded, reshape

MESH = {"a": 2, "b": 2}


@pytest.mark.parametrize("old,spec,new,want", [
    ((4, 128, 256), ("a", None, None), (512, 256), ["a", None]),      # major part split: kept
    ((4, 128, 256), (None, "a", None), (512, 256), [None, None]),     # minor part: replicated
    ((512, 256), ("a", None), (4, 128, 256), ["a", None, None]),      # split onto the major part
    ((8, 256), (("a", "b"), None), (2, 4, 256), [None, None, None]),  # 2 over 4 devices
    ((256, 2, 128), ("a", None, None), (1, 256, 256), [None, "a", None]),  # a size-1 dimension
    ((256, 2, 128), (None, None, "a"), (1, 256, 256), [None, None, None]),
    ((4, 256, 2, 128), (None, "a", None, None), (1024, 2, 128), [None, None, None]),
    ((1, 512, 256), (None, "a", None), (512, 256), ["a", None]),
    ((2, 3), ("a", None), (3, 2), [None, None]),                      # no common boundary
])
def test_out_spec(old, spec, new, want):
    assert _out_spec(old, spec, new, MESH) == want


def test_plain_arrays_reshape_as_numpy():
    x = jnp.arange(24.0).reshape(2, 3, 4)
    assert not explicitly_sharded(x)
    assert (reshape(x, (-1, 4)) == x.reshape(6, 4)).all()
