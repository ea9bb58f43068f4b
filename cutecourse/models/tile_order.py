"""The order in which the Hopper GEMMs visit the tiles of C: bands of rows, for L2.

A GEMM's CTAs in flight at one moment (~132 on an H100) read the A row-panels and B column-panels
of their tiles. Visited row by row (the launch order), 132 tiles of one row of C read one A panel
but 132 B panels: all of B streams through L2 again for every row. Visited in *bands* of
``group_m`` rows, column by column inside a band, 132 tiles form a ``group_m x (132/group_m)``
block that reads ``group_m`` A panels and ``132/group_m`` B panels, and neighbours in time share
both. (CUTLASS calls this a tile swizzle; ``cutlass.utils.PersistentTileSchedulerParams`` with
``raster_along_m=False`` and ``swizzle_size=group_m`` gives the same order when ``group_m``
divides the rows: the tests compare them.)

:func:`band_coord` is written so that the same function runs on the device (DSL integers,
``min_=cutlass.min``, as the kernels call it) and on the CPU (Python ints): the CPU model *is*
the kernel's code.
"""

from __future__ import annotations

import math


def band_coord(linear, tiles_m, tiles_n, group_m, min_=min):
    """(m, n) of work item ``linear`` in the banded order over a tiles_m x tiles_n grid.

    Bands of ``group_m`` rows; inside a band, go down the column (m fastest), then right. The last
    band may be shorter (``rows < group_m``): that is what keeps every tile visited exactly once
    when tiles_m is not a multiple of group_m, without padding the grid.
    """
    band = linear // (group_m * tiles_n)
    first_row = band * group_m
    rows = min_(group_m, tiles_m - first_row)
    within = linear - band * group_m * tiles_n
    return first_row + within % rows, within // rows


def tile_order(tiles_m: int, tiles_n: int, ctas: int, group_m: int) -> list[list[tuple[int, int]]]:
    """The static persistent schedule: for each CTA, the list of (m, n) tiles it computes, in order.

    CTA i takes work items i, i + ctas, i + 2 ctas, ... < tiles_m * tiles_n (the kernel's loop).
    """
    total = tiles_m * tiles_n
    return [[band_coord(w, tiles_m, tiles_n, group_m) for w in range(i, total, ctas)]
            for i in range(min(ctas, total))]


def persistent_ctas(tiles: int, sms: int = 132, cluster_size: int = 1) -> int:
    """How many CTAs a persistent grid launches: one per SM (whole clusters), never more than tiles."""
    clusters = math.ceil(tiles / cluster_size)
    return min(clusters, sms // cluster_size) * cluster_size
