"""The tile scheduler of the persistent Hopper GEMMs: which work item a CTA computes next.

A persistent kernel launches one CTA (or one cluster) per SM, and each loops over *work items*:
cluster-sized blocks of C tiles, numbered in the banded order of ``models/tile_order.py``.

* ``static``: cluster i takes items i, i + P, i + 2P ... (P clusters in the grid). Producer and
  consumers compute the same sequence independently; nothing is communicated.
* ``dynamic``: the producer warp takes the next item from a global atomic counter when it is
  ready for one, and publishes it in a smem slot (a ``cutlass.pipeline.PipelineAsync`` of
  ``WORK_SLOTS`` slots); the consumers read it from there. CTAs on fast SMs come back sooner and
  take more tiles; items are still handed out in increasing order, so the tiles in flight stay a
  window of the banded order.

Every scheduler of the course keeps one contract, so that the persistent kernel's loops serve
them all: this module (static, dynamic), ``stream_k_scheduler`` (stream-K) and ``group_walk``
(the grouped GEMMs). The producer walks ``start`` / ``advance`` while ``active``; ``work_tile``
says what an item means for this CTA (a :class:`WorkTile`); ``publish`` / ``receive`` hand items
from the producer to the consumers (or let the consumers compute the same sequence); ``finish``
ends the producer's walk. A consumer's item is whatever ``receive`` returns and ``work_tile``
takes: here a work index, in ``group_walk`` the tile itself.

The functions are module-level ``@cute.jit`` functions taking the :class:`Scheduler` state, not
its methods: the DSL treats a local object whose method is called inside a run-time loop as
carried through the loop, and a Python object cannot be. ``publish`` and ``receive`` leave
``slot.advance()`` to the caller for the same reason: the DSL carries a pipeline state through a
run-time loop only if the loop body itself advances it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import cutlass
import cutlass.cute as cute

from .sm90 import band_tile

KINDS = ("static", "dynamic")
#: Dynamic scheduler: work-item slots in smem between the producer and the consumers. Two, so the
#: producer can publish item t+1 while the consumers still read item t's slot.
WORK_SLOTS = 2


class WorkTile(NamedTuple):
    """What one work item asks of this CTA: every scheduler's answer, dense or grouped."""

    linear: cutlass.Int32  # the work item's index in the scheduler's order
    tile_m: cutlass.Int32  # this CTA's C tile (in tiles of the CTA tile)
    tile_n: cutlass.Int32
    k_begin: cutlass.Int32  # its k-tiles [k_begin, k_end) (stream-K: part of the tile's K)
    k_end: cutlass.Int32
    group: cutlass.Int32  # the group it belongs to (0: a dense GEMM has one)
    new_group: cutlass.Boolean  # this CTA's previous tile was in another group


@dataclass
class Scheduler:
    """The scheduler's state inside one CTA (built by the kernel at trace time)."""

    kind: str  # "static" or "dynamic"
    first: object  # this cluster's first work item (static)
    stride: object  # clusters in the grid
    clusters_m: object  # the grid of work items
    clusters_n: object
    total: object  # clusters_m * clusters_n
    k_tiles: object  # per work item
    group_m: int  # band height of the tile order
    cluster_mn: tuple[int, int]
    in_cluster: object  # this CTA's (m, n) inside its cluster
    queue: object  # dynamic: the PipelineAsync of the smem slots
    slots: object  # dynamic: the slots, (WORK_SLOTS, 1) int32 work items
    counters: object  # int32 in global memory, zero between launches: dynamic: 2 tickets;
    #                   stream-k: then one "partial sums ready" flag per CTA


def tile_of(sched: Scheduler, work):
    """This CTA's (m, n) C tile for work item ``work`` (a cluster-sized block of tiles)."""
    cluster_m, cluster_n = band_tile(work, sched.clusters_m, sched.clusters_n, sched.group_m)
    return (cluster_m * sched.cluster_mn[0] + sched.in_cluster[0],
            cluster_n * sched.cluster_mn[1] + sched.in_cluster[1])


# -- the contract every scheduler of the course keeps (``group_walk`` and ``stream_k_scheduler``
#    too): the producer walks start / advance while active; work_tile says what an item means
#    for this CTA; publish / receive hand items to the consumers; finish ends the producer's walk.
#    A consumer's item is what ``receive`` returns: here a work index, in group_walk a tile.
def work_tile(sched: Scheduler, work) -> WorkTile:
    tile_m, tile_n = tile_of(sched, work)
    return WorkTile(work, tile_m, tile_n, 0, sched.k_tiles, 0, False)


def active(sched: Scheduler, work):
    return work < sched.total


@cute.jit
def _fetch(sched: Scheduler):
    """Producer warp: lane 0 takes a ticket from the global counter, the warp shares it."""
    ticket = cutlass.Int32(0)
    counter = sched.counters.iterator
    if cute.arch.lane_idx() == 0:
        ticket = cute.arch.atomic_add(counter, cutlass.Int32(1))
    return cute.arch.shuffle_sync(ticket, 0)


@cute.jit
def start(sched: Scheduler):
    """Producer: the first work item."""
    if cutlass.const_expr(sched.kind == "dynamic"):
        return _fetch(sched)
    return sched.first


@cute.jit
def advance(sched: Scheduler, work, tile=None):
    """Producer: the work item after ``work``."""
    if cutlass.const_expr(sched.kind == "dynamic"):
        return _fetch(sched)
    return work + sched.stride


@cute.jit
def publish(sched: Scheduler, slot, work, tile=None):
    """Producer, dynamic: write the work item into a free smem slot for the consumers (after the
    last item too: ``work`` >= total says "no more tiles")."""
    if cutlass.const_expr(sched.kind == "dynamic"):
        put(sched.queue, sched.slots, slot, (work,))


@cute.jit
def receive(sched: Scheduler, slot, work=None, tile=None):
    """Consumers: the next work item after ``work`` (None: the first). Dynamic: from the
    producer's slot; static: computed, the same sequence as the producer's."""
    if cutlass.const_expr(sched.kind == "dynamic"):
        return take(sched.queue, sched.slots, slot, 1)[0]
    if cutlass.const_expr(work is None):
        return sched.first
    return work + sched.stride


@cute.jit
def finish(sched: Scheduler, work):
    """Producer, dynamic: the last CTA to finish sets both counters back to 0 for the next launch.

    counters[1] counts CTAs whose producer is done fetching. The CTA that brings it to
    P (the grid size) knows that no CTA will touch counters[0] again in this launch.
    """
    if cutlass.const_expr(sched.kind == "dynamic"):
        counter = sched.counters.iterator
        grid = sched.stride
        if cute.arch.lane_idx() == 0:
            done_ptr = counter + 1
            done = cute.arch.atomic_add(done_ptr, cutlass.Int32(1), sem="acq_rel", scope="gpu")
            if done == grid - 1:
                cute.arch.atomic_exch(counter, cutlass.Int32(0))
                cute.arch.atomic_exch(done_ptr, cutlass.Int32(0))


# -- the hand-over: smem slots between the producer warp and the consumers ----------------------
@cute.jit
def put(queue, slots, slot, values):
    """Producer warp: write ``values`` (int32) into a free slot (lane 0), then release it."""
    queue.producer_acquire(slot)
    if cute.arch.lane_idx() == 0:
        for i in cutlass.range_constexpr(len(values)):
            slots[(slot.index, i)] = values[i]
    queue.producer_commit(slot)  # mbarrier arrive: releases lane 0's smem writes


@cute.jit
def take(queue, slots, slot, fields: int):
    """Consumers: read the ``fields`` values of the next slot and free it."""
    queue.consumer_wait(slot)
    values = tuple(slots[(slot.index, i)] for i in range(fields))
    queue.consumer_release(slot)
    return values
