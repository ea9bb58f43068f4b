"""The device side of a grouped GEMM's tile scheduler: which group owns work item w.

Shared by the Hopper grouped GEMM (``hopper_grouped_gemm.py``) and the Blackwell grouped
block-scaled GEMM (``blackwell_grouped_gemm.py``); ``models/group_scheduler.py`` is its CPU model.
Groups own consecutive work items (cluster tiles), an empty group none. A CTA's work items only
grow (w, w + P, w + 2P ...), so :func:`find_group` resumes where the last search stopped: over the
whole kernel a CTA reads each group's shape once. G is a run-time value (the metadata's length).
"""

from __future__ import annotations

from dataclasses import dataclass

import cutlass.cute as cute


@dataclass
class Groups:
    """The group metadata inside a CTA (built at trace time), and the block of C one item covers."""

    shapes: object  # (G, 4) int32: M, N, K, 1
    ptrs: object  # (G, operands) int64: A_g, B_g, C_g (then any scale factors)
    strides: object  # (G, 3) int64: row strides of A_g, B_g, C_g (elements)
    count: object  # G
    cluster_tile: tuple  # (CM, CN, tile_k): CTA tile x cluster shape, and the k-tile


def group_items(groups: Groups, g):
    """Work items of group g: ceil(M / CM) * ceil(N / CN) cluster tiles (0 when M = 0)."""
    cm, cn, _ = groups.cluster_tile
    return ((groups.shapes[(g, 0)] + cm - 1) // cm) * ((groups.shapes[(g, 1)] + cn - 1) // cn)


@cute.jit
def find_group(groups: Groups, work, group, first):
    """Walk forward from ``group`` (whose items start at ``first``) to the group that owns item
    ``work``; return (group, first). ``group == groups.count``: past the last group."""
    searching = group < groups.count
    while searching:
        items = group_items(groups, group)
        searching = work >= first + items
        if searching:
            first = first + items
            group = group + 1
            searching = group < groups.count
    return group, first


def group_grid(groups: Groups, group):
    """(rows, cols, k_tiles) of ``group``: its cluster tiles along M and N, its k-tile steps."""
    cm, cn, tile_k = groups.cluster_tile
    return ((groups.shapes[(group, 0)] + cm - 1) // cm, (groups.shapes[(group, 1)] + cn - 1) // cn,
            (groups.shapes[(group, 2)] + tile_k - 1) // tile_k)


def group_tensor(groups: Groups, g, column: int, dtype, rows: int, cols: int):
    """A row-major operand of group g (``ptrs`` column ``column``; sizes from ``shapes`` columns
    ``rows``, ``cols``): what its tensor map is rewritten from."""
    ptr = cute.make_ptr(dtype, groups.ptrs[(g, column)], cute.AddressSpace.gmem, assumed_align=16)
    layout = cute.make_layout((groups.shapes[(g, rows)], groups.shapes[(g, cols)]),
                              stride=(groups.strides[(g, column)], 1))
    return cute.make_tensor(ptr, layout)
