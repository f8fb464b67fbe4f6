"""Property-based check (hypothesis) of the heuristic, without a GPU: for any problem of a dense
family (every compiled dtype pair and operand majors, any batch and shape), the config a call
that passes none takes where nothing is tuned (tuned.heuristic_default_choice) is a compiled one
(GemmConfig.validate for that family, dtype and majors), named by a rule of the heuristics
package; or, for a weight the matmul_swap_odd tiles read in place, one that launches such a
tile (pitch.shifted_weight_tile), whatever rule picked it. The same for the grouped products
and contractions."""

import jax
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jax_hopper.gemm import heuristics, pitch, tuned
from jax_hopper.kernels import catalog
from properties import PROPERTY

DENSE_FAMILIES = ("matmul", "glu", "fp8", "fp8_block")
# Model widths, and widths off the 64-element tile and the 16-byte row.
DIMS = st.one_of(st.sampled_from([768, 1000, 1024, 1536, 3000, 4096, 4097, 6144, 11008, 28672]),
                 st.integers(1, 30000))


@st.composite
def problems(draw, families, batches, rows):
    """(family, dtype, a_mn, b_mn, batch or groups, m, n, k, b_dtype or None) of one of
    `families`, in the family's compiled dtypes and majors: the problem tuned's lookups take."""
    family = draw(st.sampled_from(families))
    fam = catalog.FAMILIES[family]
    dtypes = draw(st.sampled_from(fam.dtypes))
    a_mn, b_mn = draw(st.sampled_from(fam.majors))
    return (family, dtypes[0], a_mn, b_mn, draw(st.sampled_from(batches)), draw(rows),
            draw(DIMS), draw(DIMS), dtypes[-1] if dtypes[-1] != dtypes[0] else None)


@pytest.mark.extension  # the rules that read a plan
@PROPERTY
@given(problems(DENSE_FAMILIES, [1, 2, 3, 7],
                st.one_of(st.integers(1, 64), st.integers(65, 300), st.integers(301, 9000))))
def test_the_default_config_is_a_compiled_one_picked_by_a_named_rule(problem):
    family, dtype, a_mn, b_mn, batch, m, n, k, b_dtype = problem
    choice = tuned.heuristic_default_choice(*problem)
    assert callable(getattr(heuristics, choice.rule)), choice
    weight = jax.ShapeDtypeStruct((batch, k, n) if b_mn else (batch, n, k), dtype)
    if pitch.shifted_weight_tile(weight, b_mn, choice.config, family) is not None:
        return  # launched on that odd tile
    assert choice.rule != "odd_weight_config", choice
    choice.config.validate(dtype, a_mn, b_mn, family, b_dtype)


GROUPED = catalog.GROUPED_FAMILIES + catalog.CONTRACTION_FAMILIES


@PROPERTY
@given(problems(GROUPED, [1, 2, 8, 32, 128, 1024], st.integers(1, 70000)))
def test_the_grouped_default_config_is_a_compiled_one(problem):
    """The same for the grouped products and contractions (tuned.grouped_config, where nothing
    is tuned: heuristics.grouped_heuristic_config)."""
    family, dtype, a_mn, b_mn, groups, m, n, k, b_dtype = problem
    tuned.grouped_config(*problem).validate(dtype, a_mn, b_mn, family, b_dtype)
