"""The contract between the CUDA lowering and the GEMM handlers, checked without a GPU.

XLA decodes a custom call's operands before the handler runs: the CUDA stream, the buffers and
the attributes (GemmAttrs in ffi/gemm/gemm_call.h, by name and type). Registered for the CPU
platform, a GEMM handler can only fail to get its CUDA stream (operand 0); every attribute the
lowering passes (primitive.call_attrs) must decode. A renamed, missing or mistyped attribute
shows up here, before it would on a GPU: as another bad operand (jax 0.10), or as a crash of
XLA's struct decoding (jax 0.11 segfaults on it, which is why no test feeds it a bad one on
purpose).
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_hopper import GemmConfig, _ffi
from jax_hopper.gemm import ragged_primitive
from jax_hopper.gemm.primitive import call_attrs
from jax_hopper.kernels import catalog

pytestmark = pytest.mark.extension

BAD_OPERANDS = re.compile(r"bad operands at: ([0-9, ]+)")


@pytest.fixture(scope="module", autouse=True)
def registered_on_cpu():
    for name, registration in _ffi.extension().types().items():
        jax.ffi.register_ffi_type(name, registration, platform="cpu")
    for name, capsule in _ffi.extension().registrations().items():
        if name.startswith(("jax_hopper_gemm_", "jax_hopper_grouped_")):
            jax.ffi.register_ffi_target(name, capsule, platform="cpu")


def _undecoded(family, attrs, out_cols):
    """The operand indices XLA could not decode for a call with `attrs`, run on the CPU device
    (on a GPU machine the default device would run the real CUDA handler instead)."""
    with jax.default_device(jax.devices("cpu")[0]):
        return _undecoded_on_default_device(family, attrs, out_cols)


def _undecoded_on_default_device(family, attrs, out_cols):
    a_dtype, b_dtype = catalog.FAMILIES[family].dtypes[0]
    a = jnp.ones((1, 256, 128), a_dtype)
    gated = family in ("glu", "grouped_glu")  # (K, 2, N) or (G K, 2, N) weights
    b = jnp.ones((128, 2, out_cols) if gated else (1, 128, out_cols), b_dtype)
    # The grouped handlers take a fifth input: the tile table (ragged_primitive.py) or the
    # group ends (ragged_contract.py, with the two scales after them for fp8); the fp8
    # handlers two, the scales (fp8.py): per tensor (1,), per block (1, M, K/128) and
    # (1, N/128, K/128) (swapped too: the handler exchanges them); the grouped fp8 ones all
    # three (ragged_fp8.py).
    table = [jnp.zeros((1 + catalog.GROUP_TILE_FIELDS,), jnp.int32)]
    block_scales = [jnp.ones((1, 256, 1), jnp.float32),
                    jnp.ones((1, -(-out_cols // 128), 1), jnp.float32)]
    extra = {"grouped": table, "grouped_glu": table,
             "grouped_contraction": [jnp.zeros((1,), jnp.int32)],
             "grouped_contraction_fp8": [jnp.zeros((1,), jnp.int32)]
             + [jnp.ones((1,), jnp.float32)] * 2,
             "grouped_contraction_fp8_block": [jnp.zeros((1,), jnp.int32)] + block_scales,
             "fp8": [jnp.ones((1,), jnp.float32)] * 2,
             "fp8_swap": [jnp.ones((1,), jnp.float32)] * 2,
             "grouped_fp8": table + [jnp.ones((1,), jnp.float32)] * 2,
             "grouped_fp8_block": table + block_scales,
             "fp8_block": block_scales, "fp8_block_swap": block_scales}.get(family, [])
    call = jax.ffi.ffi_call(f"jax_hopper_gemm_{family}",
                            (jax.ShapeDtypeStruct((1, 256, out_cols), jnp.bfloat16),
                             jax.ShapeDtypeStruct((0,), jnp.uint8)))
    with pytest.raises(Exception) as info:
        jax.block_until_ready(call(a, b, jnp.zeros((0,), jnp.float32),
                                   jnp.zeros((0, 0, 0), jnp.bfloat16), *extra, **attrs))
    found = BAD_OPERANDS.search(str(info.value))
    assert found, str(info.value)[:500]
    return [int(i) for i in found.group(1).split(",")]


@pytest.mark.parametrize("family", list(catalog.FAMILIES))
def test_the_lowering_s_attributes_decode(family):
    fam = catalog.FAMILIES[family]
    config = (GemmConfig.for_tile(fam.tiles[0], stream_k=False, cluster_n=2) if fam.scheduler
              else GemmConfig.for_tile(fam.tiles[0], cluster_m=2))
    kernel = config.kernel(family, fam.dtypes[0][0], *fam.majors[-1], fam.dtypes[0][1])
    plan = config.plan(kernel, 1, 256, 128, 128, 66)
    plan.pop("workspace_bytes")
    attrs = call_attrs(kernel, config, plan, activation=4, alpha=0.5, beta=1.0)
    assert _undecoded(family, attrs, 128) == [0]  # only the CUDA stream, absent on a CPU


def test_every_gemm_family_has_a_target_with_and_one_without_the_flags_stage():
    # Plans that split tiles take "<name>_split", whose initialize stage prepares the stream-K
    # ready flags; the others "<name>", with no initialize stage for XLA to run before every
    # execution (primitive.gemm_target, ffi/module.cc).
    regs = _ffi.extension().registrations()
    plain = {name for name in regs if name.startswith("jax_hopper_gemm_")
             and not name.endswith("_split")}
    assert plain == {f"jax_hopper_gemm_{family}" for family in catalog.FAMILIES}
    for name in plain:
        assert set(regs[name]) == {"instantiate", "execute"}, name
        assert set(regs[name + "_split"]) == {"instantiate", "initialize", "execute"}, name



def test_the_tile_table_call_decodes():
    """The tile table's call (ragged_primitive.build_tile_table) as its CUDA lowering makes it."""
    sizes = jnp.asarray([3, 0, 5], jnp.int32)
    out = ragged_primitive._tile_table_abstract(sizes, m=9, block=4, paired=True)
    call = jax.ffi.ffi_call("jax_hopper_grouped_tile_table",
                            jax.ShapeDtypeStruct(out.shape, out.dtype))
    with jax.default_device(jax.devices("cpu")[0]):
        with pytest.raises(Exception) as info:
            jax.block_until_ready(call(sizes, m=np.int64(9), block=np.int64(4), paired=True))
    found = BAD_OPERANDS.search(str(info.value))
    assert found and found.group(1).strip() == "0", str(info.value)[:500]
