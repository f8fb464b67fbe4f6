"""The grouped GEMM's rows: how device-side group sizes become row ranges, and the tile table
the grouped kernel walks (cuda/gemm/scheduler/grouped.cuh reads it).

Group sizes are device values, never read on the host; whatever they hold, they are made
valid the same way here (the reference lowering) and for the kernel:
- a negative size counts as 0;
- the groups take consecutive rows from row 0; a group reaching past M is cut at M, and the
  groups after it are empty;
- rows past the last group (sum(sizes) < M) belong to no group: the product there is 0.

The table (int32): one header entry, the M tiles in use, then GROUP_TILE_FIELDS entries per M
tile ("slot"): first row, rows (1..block_m), group (-1 for rows past every group). Each group's
rows are cut into tiles from its first row, then the rows past every group; slots past those in
use are zero. There are at most ceil(M / block_m) + G tiles, so the table's size, and with it
the launch, depends on static shapes only. A paired table (for 2-CTA clusters along M, whose
two CTAs multicast one group's weights) gives every group, and the rows past the groups, an
even count of tiles: an odd one gets one more tile of 0 rows (computed, nothing stored). On a
GPU one small kernel builds the table (cuda/gemm/scheduler/tile_table.cu, through
ragged_primitive.build_tile_table); tile_table here is its reference lowering and the model the
GPU tests hold it to.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from jax_hopper.gemm.typed_reshape import explicitly_sharded, resharded
from jax_hopper.kernels.catalog import GROUP_TILE_FIELDS


# These run as XLA ops wherever they are used on a GPU (row_groups: the bias gradient; the
# sharded sizes): as few and as small kernels as possible. jnp.searchsorted's default method is
# a loop (several kernels per step on a GPU); comparing every query with every boundary is one
# fused kernel while the product stays small.
_COMPARE_ALL_MAX = 1 << 24


def int32_sizes(group_sizes, m: int):
    """The group sizes as the kernels read them (int32), each cut to [0, m] first: a size past
    int32 (uint32, int64 under x64) then takes every remaining row, as the rules say, instead
    of wrapping around. Every device needs all of them (their prefix sums place its rows): a
    split typed on them (explicit sharding) is gathered here, G integers."""
    sizes = jnp.clip(group_sizes, 0, m).astype(jnp.int32)
    if explicitly_sharded(sizes):
        sizes = resharded(sizes, PartitionSpec())
    return sizes


def _searchsorted_right(sorted_, queries):
    method = "compare_all" if sorted_.size * queries.size <= _COMPARE_ALL_MAX else "sort"
    return jnp.searchsorted(sorted_, queries, side="right", method=method).astype(jnp.int32)


def group_ends(group_sizes, m: int):
    """(G,) int32: the row after each group's last, the sizes made valid as the module says."""
    sizes = jnp.clip(group_sizes.astype(jnp.int32), 0, m)
    if group_sizes.shape[0] * m < 2**31:  # the plain prefix sum cannot overflow int32
        return jnp.minimum(jnp.cumsum(sizes), m)
    # A saturating prefix sum.
    return jax.lax.associative_scan(lambda x, y: jnp.minimum(x + y, m), sizes)


def _starts(ends):
    """Each group's first row, from group_ends."""
    return jnp.concatenate([jnp.zeros((1,), jnp.int32), ends[:-1]])


def valid_sizes(group_sizes, m: int):
    """(G,) int32: the group sizes made valid (the rows each group really has)."""
    ends = group_ends(group_sizes, m)
    return ends - _starts(ends)


def local_sizes(group_sizes, m: int, offset, rows: int):
    """(G,) int32: the group sizes of rows [offset, offset + rows) of the M rows (one device's
    shard of them), the sizes made valid over all M first; the shard's rows past every group
    stay past every group."""
    ends = jnp.clip(group_ends(group_sizes, m) - offset, 0, rows)
    return ends - _starts(ends)


def _entry_ranges(group_sizes, m: int):
    """(starts, ends), each (E, G) int32: every entry's group_ends and their starts within its
    own m rows."""
    ends = jax.vmap(lambda sizes: group_ends(sizes, m))(group_sizes)
    return jax.vmap(_starts)(ends), ends


def entry_sizes(group_sizes, m: int):
    """(E (G + 1),) int32 for the (E, G) sizes of E entries of m rows each (one launch over
    the entries' E m rows): each entry's sizes made valid, then its rows past every group as
    one more group (G >= 1: a launch has groups). These consecutive groups fill the E m rows
    exactly, so tile_table cuts them into tiles that never straddle two entries;
    entry_groups then names each tile's group as the kernel reads rhs."""
    starts, ends = _entry_ranges(group_sizes, m)
    return jnp.concatenate([ends - starts, m - ends[:, -1:]], axis=1).reshape(-1)


def entry_bounds(group_sizes, m: int):
    """(2, E G) int32 for the (E, G) sizes of E entries of m rows each, stacked (E m rows):
    the first row of each entry's groups, then the row after each (entry e's group g is
    e G + g), the sizes made valid per entry. An entry's rows past its groups lie between
    its last end and the next entry's first start: in no group. The grouped contraction
    reads these bounds (cuda/gemm/scheduler/grouped_contraction.cuh)."""
    starts, ends = _entry_ranges(group_sizes, m)
    offsets = m * jnp.arange(ends.shape[0], dtype=jnp.int32)[:, None]
    return jnp.stack([(starts + offsets).reshape(-1), (ends + offsets).reshape(-1)])


def expert_major_rows(group_sizes, m: int):
    """For the (E, G) sizes of E entries of m rows each (stacked, E m rows) that share G
    experts: (place, totals). place (E m,) int32 is each stacked row's row once every
    expert's rows of every entry lie together, expert by expert (within an expert the
    entries in order, each entry's rows in order), the rows past every group of every entry
    after them, in order: a permutation of the E m rows. totals (G,) int32 are the experts'
    rows over the entries, the sizes made valid per entry: a single product over the rows so
    placed, with these group sizes, is the entries' products."""
    starts, ends = _entry_ranges(group_sizes, m)
    groups = ends.shape[1]
    sizes = ends - starts
    totals = jnp.sum(sizes, axis=0)
    first = jnp.cumsum(totals) - totals  # each expert's first row
    before = jnp.cumsum(sizes, axis=0) - sizes  # (E, G): its rows of the entries before
    rows = jnp.arange(m, dtype=jnp.int32)
    group = jax.vmap(lambda entry_ends: _searchsorted_right(entry_ends, rows))(ends)  # (E, m)
    grouped = group < groups
    g = jnp.minimum(group, groups - 1)
    placed = (first[g] + jnp.take_along_axis(before, g, axis=1) + rows
              - jnp.take_along_axis(starts, g, axis=1))
    past = ~grouped.reshape(-1)
    tail = jnp.sum(totals) + jnp.cumsum(past, dtype=jnp.int32) - 1
    return jnp.where(past, tail, placed.reshape(-1)).astype(jnp.int32), totals


def entry_groups(table, groups: int, rhs_per_entry: bool):
    """A tile table over entry_sizes' groups with each tile's group as the kernel reads rhs
    and bias: entry e's group g is e G + g of the entries' stacked (E G, ...) rhs
    (rhs_per_entry), else g of the rhs they share; its rows past every group -1 (a zero
    product). Entries sharing the rhs have their tiles ordered expert by expert (every
    entry's tiles of expert 0, then of expert 1, ...; the rows past the groups first), so
    that the CTAs running at once read one expert's weights, as a single entry's do; each
    entry's tiles of one expert stay together, so a paired table's pairs stay pairs."""
    fields = table[1:].reshape(-1, GROUP_TILE_FIELDS)
    entry, g = fields[:, 2] // (groups + 1), fields[:, 2] % (groups + 1)
    group = jnp.where(g == groups, -1, entry * groups + g if rhs_per_entry else g)
    fields = fields.at[:, 2].set(group)
    if not rhs_per_entry:
        slot = jnp.arange(fields.shape[0], dtype=jnp.int32)
        fields = fields[jnp.argsort(jnp.where(slot < table[0], group, groups), stable=True)]
    return jnp.concatenate([table[:1], fields.reshape(-1)])


def row_groups(group_sizes, m: int):
    """(M,) int32: each row's group, G for the rows past every group."""
    return _searchsorted_right(group_ends(group_sizes, m), jnp.arange(m, dtype=jnp.int32))


def tile_slots(m: int, groups: int, block_m: int, paired: bool = False) -> int:
    """The table's M tiles: enough for any group sizes. Each nonempty group's last tile and the
    rows past the groups' last tile may be partial, so at most ceil(M / block_m) + G tiles;
    paired, one more per group and for the rows past them, rounded up to pairs."""
    slots = -(-m // block_m) + groups
    return slots + groups + 1 + (slots + groups + 1) % 2 if paired else slots


def _even(tiles, paired: bool):
    return tiles + tiles % 2 if paired else tiles


def tile_table(group_sizes, m: int, block_m: int, paired: bool = False):
    """The kernel's tile table (see the module) for `group_sizes` over M rows."""
    groups = group_sizes.shape[0]
    slots = tile_slots(m, groups, block_m, paired)
    ends = group_ends(group_sizes, m)
    starts = _starts(ends)
    tiles = _even((ends - starts + block_m - 1) // block_m, paired)
    tile_ends = jnp.cumsum(tiles)  # at most M / block_m + 2 G: no overflow
    grouped = tile_ends[-1]
    tail_start = ends[-1]
    used = grouped + _even((m - tail_start + block_m - 1) // block_m, paired)

    s = jnp.arange(slots, dtype=jnp.int32)
    g = _searchsorted_right(tile_ends, s)
    in_group = g < groups
    gc = jnp.minimum(g, groups - 1)
    first = jnp.where(in_group, starts[gc] + (s - (tile_ends[gc] - tiles[gc])) * block_m,
                      tail_start + (s - grouped) * block_m)
    last = jnp.where(in_group, ends[gc], m)
    live = s < used
    fields = jnp.stack([jnp.where(live, first, 0),
                        jnp.where(live, jnp.clip(last - first, 0, block_m), 0),
                        jnp.where(live & in_group, g, jnp.where(live, -1, 0))], axis=1)
    assert fields.shape[1] == GROUP_TILE_FIELDS
    return jnp.concatenate([used[None].astype(jnp.int32), fields.reshape(-1)])
