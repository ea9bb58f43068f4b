"""What the persistent kernel's hooks receive, and its shared memory, in one place.

``CtaSetup`` is what a CTA has built when it makes its scheduler (``make_scheduler``);
``EpilogueArgs`` what the consumers' epilogue takes from the host (``make_epilogue``);
``shared_storage`` the CTA's shared memory, field by field, with the variant's own fields,
``fitting_epi_stages`` how many C buffers it holds when the constructor is not told,
``grid_clusters`` how many clusters the persistent grid launches, and ``dense_grid_fields`` what
a dense scheduler of one CTA is made of (the kernel's ``grid_fields``).
"""

from __future__ import annotations

from typing import NamedTuple

import cutlass
import cutlass.cute as cute

from .tile_scheduler import WORK_SLOTS


class CtaSetup(NamedTuple):
    """What a CTA has set up when it makes its scheduler (``make_scheduler``): the work-item
    hand-over (``queue`` and its smem ``slots``), all tiles of A and of C (``gA``, ``gC``: their
    counts give the grid of work items), its shared memory (``storage``, with the variant's own
    ``smem_fields``) and its TMA atoms of A, B, C (``atoms``)."""

    queue: object
    slots: object
    gA: object
    gC: object
    storage: object
    atoms: tuple


class EpilogueArgs(NamedTuple):
    """What the consumers' epilogue takes from the host: what it needs of C itself besides C's
    TMA atom (``epilogue_c``: nothing for the TMA-store epilogue) and the epilogue op's operands."""

    c: object
    operands: tuple


def shared_storage(kernel, sA_layout, sB_layout, sC_layout):
    """The kernel's shared memory, field by field: the ring's barriers and stages, the C buffers,
    the work-item slots (and their full/empty barriers: a work item is ``ITEM_FIELDS`` int32 of
    the kernel's scheduler), then the variant's own fields (``smem_fields``)."""
    MemRange, Align = cute.struct.MemRange, cute.struct.Align
    fields = {
        "barriers": MemRange[cutlass.Int64, kernel.stages * 2],
        "sA": Align[MemRange[kernel.a_dtype, cute.cosize(sA_layout)], 1024],
        "sB": Align[MemRange[kernel.a_dtype, cute.cosize(sB_layout)], 1024],
        "sC": Align[MemRange[kernel.c_dtype, cute.cosize(sC_layout)], 1024],
        "work_barriers": MemRange[cutlass.Int64, WORK_SLOTS * 2],
        "work_items": MemRange[cutlass.Int32, WORK_SLOTS * kernel.Scheduler.ITEM_FIELDS],
        **kernel.smem_fields(),
    }
    return cute.struct(type("SharedStorage", (), {"__annotations__": fields}))


def fitting_epi_stages(tile_mn, epi_tile, most: int) -> int:
    """C buffers (``epi_stages``) when the constructor is not told: ``most`` (the class's
    ``MOST_EPI_STAGES``), or fewer where the tile's sub-tiles do not come in multiples of it (a tile
    stores through every buffer equally often, since the buffers continue from tile to tile):
    128x192 in sub-tiles of 128x32 is six, so 3 buffers, not 4. Where no count from ``most`` down
    to 2 divides them, ``most``, and ``gemm_plan.check_epi_tile`` says why that fails."""
    if min(epi_tile) < 1:
        return most  # check_epi_tile says what is wrong
    subtiles = (tile_mn[0] // epi_tile[0]) * (tile_mn[1] // epi_tile[1])
    return next((n for n in range(most, 1, -1) if subtiles % n == 0), most)


def grid_clusters(kernel, c):
    """The persistent grid of ``kernel`` for C ``c`` (traced on the host): as many clusters as fit
    on its ``sms``, fewer when the problem has fewer work items (cluster-sized blocks of C tiles)."""
    cm, cn = kernel.cluster_mn
    clusters_m = cute.ceil_div(cute.ceil_div(c.shape[0], kernel.tile_mn[0]), cm)
    clusters_n = cute.ceil_div(cute.ceil_div(c.shape[1], kernel.tile_mn[1]), cn)
    return cutlass.min(clusters_m * clusters_n, kernel.sms // (cm * cn))


def dense_grid_fields(kernel, scheduler_args, setup: CtaSetup) -> dict:
    """A dense scheduler's fields for this CTA of ``kernel`` (``tile_scheduler.DenseParams``, by
    name; traced on the device): its first work item, the stride between its items (the clusters
    in the grid), the grid of work items, the hand-over; ``scheduler_args``: the scheduler's
    ``Args`` (its ``counters``)."""
    cm, cn = kernel.cluster_mn
    in_cluster = cute.arch.block_in_cluster_idx()
    clusters_m = cute.ceil_div(cute.size(setup.gC, mode=[2]), cm)
    clusters_n = cute.ceil_div(cute.size(setup.gC, mode=[3]), cn)
    return dict(first=cute.arch.block_idx()[2], stride=cute.arch.grid_dim()[2],
                clusters_m=clusters_m, clusters_n=clusters_n, total=clusters_m * clusters_n,
                k_tiles=cute.size(setup.gA, mode=[3]), group_m=kernel.group_m, cluster_mn=kernel.cluster_mn,
                in_cluster=in_cluster, queue=setup.queue, slots=setup.slots, counters=scheduler_args.counters)
