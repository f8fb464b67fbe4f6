"""Hypothesis strategies for random calls of the grouped (the gated one too) and fp8 ops:
shapes (unaligned ones included), group sizes of every kind, rhs layouts, dtypes, epilogues and
compiled configs, none of them picked by hand. test_random_calls_cpu.py runs them through the
reference lowering, test_random_calls_gpu.py through the kernels. Each strategy gives the
keyword arguments of a gemm_helpers check (which draws the operands from `seed` and compares
with float64)."""

import numpy as np
from hypothesis import strategies as st

from jax_hopper import GemmConfig
from jax_hopper.gemm.epilogue import ACTIVATIONS
from jax_hopper.kernels import catalog

FP8_RECIPES = ("tensor", "delayed", "block")
# The fp8 checks bound the relative Frobenius error of a whole product. A product of a few
# elements, each with its own rounding of both operands, is too small a sample to hold a bound
# on the rounding's spread: every product of these calls (y, dx, dw) has at least this many
# elements.
FP8_MIN_ELEMENTS, FP8_MIN_K = 512, 16


@st.composite
def group_sizes(draw, m: int, groups: int, *, kinds=("cover", "with_empty", "short",
                                                     "adversarial")) -> list:
    """Sizes of one of these kinds: covering all m rows; covering them with empty groups among
    them; covering fewer (rows past every group come out zero); adversarial values (negative,
    above m, near 2^31), which ragged_tiles.py makes valid (negative 0, cut at M)."""
    kind = draw(st.sampled_from(kinds))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if kind == "adversarial":
        pool = [-2**31, -7, -1, 0, 1, 15, m // 3, m, m + 1, 2**31 - 1]
        return [int(v) for v in rng.choice(pool, groups)]
    weights = rng.dirichlet(np.full(groups, 0.5))
    if kind == "with_empty" and groups > 1:
        weights[rng.random(groups) < 0.4] = 0
        weights = weights / weights.sum() if weights.sum() else np.full(groups, 1 / groups)
    rows = m if kind != "short" else int(draw(st.integers(0, m)))
    return [int(v) for v in rng.multinomial(rows, weights)]


def _groups(draw, max_groups: int) -> int:
    # Mostly a handful; sometimes many experts, each with few rows or none.
    return draw(st.one_of(st.integers(1, 12), st.sampled_from([64, max_groups])))


def _grouped_call(draw, family: str, max_m: int, max_kn: int, max_groups: int) -> dict:
    """What a grouped product's and a grouped GLU's random calls share: seed, M, K, the width
    (n), group sizes, dtypes, epilogue and (half the time) a compiled tile and cluster of
    `family`."""
    groups = _groups(draw, max_groups)
    cap = max_kn if groups <= 12 else 64  # many experts: keep rhs and its float64 copy small
    m, k, n = draw(st.integers(1, max_m)), draw(st.integers(1, cap)), draw(st.integers(1, cap))
    call = dict(seed=draw(st.integers(0, 2**32 - 1)), m=m, k=k, n=n,
                group_sizes=draw(group_sizes(m, groups)),
                dtype=draw(st.sampled_from(catalog.INPUT_DTYPES)),
                out_dtype=draw(st.sampled_from([None, *catalog.OUTPUT_DTYPES])),
                activation=draw(st.sampled_from(list(ACTIVATIONS))),
                bias=draw(st.booleans()), residual=draw(st.booleans()),
                alpha=draw(st.sampled_from([1.0, 0.5, -2.0])),
                beta=draw(st.sampled_from([1.0, -0.5, 2.0])))
    if draw(st.booleans()):
        fam = catalog.FAMILIES[family]
        cluster_m, cluster_n = draw(st.sampled_from(fam.clusters))
        call["config"] = GemmConfig.for_tile(draw(st.sampled_from(fam.tiles)), stream_k=False,
                                             cluster_m=cluster_m, cluster_n=cluster_n)
    return call


@st.composite
def ragged_calls(draw, max_m: int = 1200, max_kn: int = 320, max_groups: int = 257) -> dict:
    """check_ragged's arguments: hopper_ragged_dot with any shape, sizes, layout, dtypes,
    epilogue and (half the time) a compiled tile and cluster."""
    return _grouped_call(draw, "grouped", max_m, max_kn, max_groups) | dict(
        transpose_rhs=draw(st.booleans()))


@st.composite
def ragged_glu_calls(draw, max_m: int = 1200, max_kn: int = 320, max_groups: int = 257) -> dict:
    """check_ragged_glu's arguments: hopper_ragged_glu with any shape (F unaligned too), sizes,
    dtypes, activation (None: bilinear), epilogue and (half the time) a compiled tile and
    cluster."""
    call = _grouped_call(draw, "grouped_glu", max_m, max_kn, max_groups)
    call["f"] = call.pop("n")
    return call


@st.composite
def ragged_fp8_calls(draw, max_m: int = 1200, max_kn: int = 640, max_groups: int = 257) -> dict:
    """check_ragged_fp8's arguments: hopper_ragged_fp8_dot on fp8 operands with any shape
    (K and N unaligned and partial 128-wide blocks too), sizes, dtype pair, scales per tensor
    or per block, rhs layout, out dtype, epilogue and (half the time) a compiled tile and
    cluster. Its bound is against the dequantised operands, so any size holds it."""
    block = draw(st.booleans())
    fam = catalog.FAMILIES["grouped_fp8_block" if block else "grouped_fp8"]
    groups = _groups(draw, max_groups)
    cap = max_kn if groups <= 12 else 128
    m, n, k = draw(st.integers(1, max_m)), draw(st.integers(1, cap)), draw(st.integers(1, cap))
    call = dict(seed=draw(st.integers(0, 2**32 - 1)), m=m, n=n, k=k,
                sizes=draw(group_sizes(m, groups)), pair=draw(st.sampled_from(fam.dtypes)),
                block=block, transpose_rhs=draw(st.booleans()),
                out_dtype=draw(st.sampled_from(catalog.OUTPUT_DTYPES)),
                activation=draw(st.sampled_from(list(ACTIVATIONS))),
                with_bias=draw(st.booleans()), with_residual=draw(st.booleans()),
                alpha=draw(st.sampled_from([1.0, 0.5, -2.0])),
                beta=draw(st.sampled_from([1.0, -0.5, 2.0])))
    if block and call["out_dtype"] == "float16":
        # Operands of |x| ~ 4 under scales up to 2^4 each would pass float16's 65504 at a few
        # hundred K; scales within 2^-1 .. 2 keep the product in its range.
        call["scale_spread"] = 1.0
    if draw(st.booleans()):
        cluster_m, cluster_n = draw(st.sampled_from(fam.clusters))
        call["config"] = GemmConfig.for_tile(draw(st.sampled_from(fam.tiles)), stream_k=False,
                                             cluster_m=cluster_m, cluster_n=cluster_n)
    return call


@st.composite
def ragged_grad_calls(draw, max_m: int = 900, max_kn: int = 256) -> dict:
    """check_ragged_grads' arguments (d lhs, d rhs and d bias through jax.grad)."""
    groups = _groups(draw, 64)
    cap = max_kn if groups <= 12 else 64
    m, k, n = draw(st.integers(1, max_m)), draw(st.integers(1, cap)), draw(st.integers(1, cap))
    return dict(seed=draw(st.integers(0, 2**32 - 1)), m=m, k=k, n=n,
                group_sizes=draw(group_sizes(m, groups)))


def _fp8_dims(draw, max_rows: int, max_kn: int) -> tuple:
    """Rows, K and N whose three products (y, dx, dw) each hold FP8_MIN_ELEMENTS."""
    k = draw(st.integers(FP8_MIN_K, max_kn))
    n = draw(st.integers(max(FP8_MIN_K, -(-FP8_MIN_ELEMENTS // k)), max_kn))
    rows = draw(st.integers(-(-FP8_MIN_ELEMENTS // min(k, n)), max_rows))
    return rows, k, n


@st.composite
def fp8_matmul_calls(draw, max_rows: int = 700, max_kn: int = 400) -> dict:
    """check_fp8_matmul's arguments: fp8_matmul forward and both gradients, any recipe, one or
    two leading dimensions, with or without bias and residual."""
    rows, k, n = _fp8_dims(draw, max_rows, max_kn)
    lead = (rows,) if draw(st.booleans()) else (2, -(-rows // 2))
    return dict(seed=draw(st.integers(0, 2**32 - 1)), lead=lead, k=k, n=n,
                recipe=draw(st.sampled_from(FP8_RECIPES)),
                dtype=draw(st.sampled_from(["bfloat16", "float16", "float32"])),
                epilogue=draw(st.booleans()))


@st.composite
def fp8_ragged_calls(draw, max_rows: int = 900, max_kn: int = 320) -> dict:
    """check_fp8_ragged_dot's arguments: forward and both gradients, any recipe. The sizes cover
    every row (with empty groups among them) so that the product holds FP8_MIN_ELEMENTS;
    adversarial sizes have their own tests."""
    m, k, n = _fp8_dims(draw, max_rows, max_kn)
    groups = draw(st.one_of(st.integers(1, 12), st.just(64)))
    return dict(seed=draw(st.integers(0, 2**32 - 1)), m=m, k=k, n=n,
                sizes=draw(group_sizes(m, groups, kinds=("cover", "with_empty"))),
                recipe=draw(st.sampled_from(FP8_RECIPES)),
                dtype=draw(st.sampled_from(["bfloat16", "float16", "float32"])))
