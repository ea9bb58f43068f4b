"""Tile schedulers: which work item a CTA of a persistent GEMM computes next.

A persistent kernel launches one CTA (or one cluster) per SM, and each loops over *work items*:
cluster-sized blocks of C tiles. A scheduler is an object with one interface, which the
persistent kernel's loops walk whatever the scheduler is:

* :class:`StaticScheduler`: cluster i takes items i, i + P, i + 2P ... (P clusters in the grid).
  Producer and consumers compute the same sequence; nothing is communicated.
* :class:`DynamicScheduler`: the producer warp takes the next item from a global atomic counter
  when it is ready for one and *publishes* it in a smem slot (a ``PipelineAsync`` of
  ``WORK_SLOTS`` slots); the consumers read it there. CTAs on fast SMs take more tiles.
* ``stream_k_scheduler.StreamKScheduler`` (pieces of a tile's K) and
  ``group_walk.GroupScheduler`` (the grouped GEMMs' tiles, group after group).

The interface (every method runs on the GPU, inside the kernel)::

    s = scheduler.start()            # the producer: a walk at this CTA's first item
    s = scheduler.start(slot)        # a consumer: the first item, through ``slot`` if handed over
    while s.active():
        tile = s.work_tile()         # a WorkTile: this CTA's C tile, its k-tiles, its group
        s.publish(slot, tile)        # producer: hand it to the consumers (if this scheduler does)
        ...
        s.advance(tile)              # producer: the next item; a consumer: s.advance(tile, slot)
    s.publish(slot)                  # producer: "no more tiles"
    s.finish()                       # producer: e.g. reset the dynamic scheduler's counters

**Why an object the DSL can carry.** A scheduler's fields are set once per CTA; only its
*position* (``position``: a work index, a cursor ...) moves. ``__extract_mlir_values__`` hands the
DSL the position's values, so a run-time ``while`` loop carries the scheduler from one iteration
to the next as it carries a pipeline state (``__new_from_mlir_values__`` rebuilds it). ``start``
returns a new object rather than moving the one the kernel made: the producer and the consumers
each walk their own copy.

**Typed fields.** A scheduler declares its fields (``Params``: :class:`DenseParams` here), the
tensors the kernel takes for it from the host (``Args``: :class:`Counters`) and the int32 width of
a work item in the hand-over slots (``ITEM_FIELDS``). Its class builds one from its fields by
name, ``Scheduler(**fields)`` (the one way, in every kernel); a misspelt or missing field fails
there, not deep inside a trace.

**The tile order is a method**: :meth:`StaticScheduler.tile_of` says which C tile work item i is
(bands of ``group_m`` tile-rows, ``models/tile_order.py``); a subclass that overrides it changes
the order of every schedule built on it (``docs/DEVELOPING.md``, "Adding a scheduler"). The
group walk's hook has the same name (``group_walk.GroupScheduler.tile_of``: the order inside a group).
"""

from __future__ import annotations

import copy
from typing import NamedTuple

import cutlass
import cutlass.cute as cute
from cutlass.cutlass_dsl import extract_mlir_values, new_from_mlir_values

from .sm90 import band_tile

#: Work-item slots in smem between the producer and the consumers. Two, so the producer can
#: publish item t+1 while the consumers still read item t's slot.
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


class TileScheduler:
    """The part every scheduler shares: fields given once (its ``Params``), a ``position`` that
    moves and that the DSL carries through loops.

    A scheduler declares what it needs: ``Params``, a NamedTuple of its fields (set once per CTA by
    the kernel's ``make_scheduler``, read as attributes: ``self.group_m``); ``Args``, a NamedTuple
    of the tensors the kernel takes for it (passed from the host, read by ``make_scheduler``); and
    ``ITEM_FIELDS``, the int32 values of a work item in the smem slots between the producer and
    the consumers. Build one from its fields by name, ``Scheduler(**fields)``: a misspelt or
    missing field fails there, with the fields it takes. ``PER_CTA``: None, or why the scheduler
    cannot serve clusters of CTAs (the kernel's constructor refuses a cluster with it, saying why)."""

    Params = NamedTuple("Params", [])
    Args = NamedTuple("Args", [])
    ITEM_FIELDS = 1
    PER_CTA = None

    def __init__(self, **fields):
        """A scheduler with these fields (its ``Params``, by name), before its walk starts."""
        names = self.Params._fields
        unknown = [f for f in fields if f not in names]
        missing = [f for f in names if f not in fields and f not in self.Params._field_defaults]
        if unknown or missing:
            what = "; ".join(s for s in (unknown and f"no field {', '.join(unknown)}",
                                         missing and f"{', '.join(missing)} missing") if s)
            name = type(self).__name__
            raise TypeError(f"{name}: {what}. Its fields ({name}.Params): {', '.join(names)}")
        self.params = self.Params(**fields)
        self.__dict__.update(self.params._asdict())
        self.position = None  # set by start()

    def __extract_mlir_values__(self):
        return extract_mlir_values(self.position) if self.position is not None else []

    def __new_from_mlir_values__(self, values):
        moved = copy.copy(self)
        moved.position = new_from_mlir_values(self.position, values)
        return moved

    def at(self, position):
        """A copy of this scheduler at ``position``."""
        walk = copy.copy(self)
        walk.position = position
        return walk

    # -- the interface (see the module docstring); the hand-over does nothing by default --------
    def publish(self, slot, tile=None):
        """Producer: hand ``tile`` to the consumers (None: no more tiles)."""

    def finish(self):
        """Producer, after its last item."""


class DenseParams(NamedTuple):
    """The fields of a dense GEMM's scheduler, set once per CTA."""

    first: cutlass.Int32  # this cluster's first work item
    stride: cutlass.Int32  # P: the clusters in the grid
    clusters_m: cutlass.Int32  # work items along M and N (cluster-sized blocks of C tiles) ...
    clusters_n: cutlass.Int32
    total: cutlass.Int32  # ... and in all
    k_tiles: cutlass.Int32  # k-tiles per item
    group_m: int  # band height of the tile order, in work items
    cluster_mn: tuple  # the cluster shape
    in_cluster: tuple  # this CTA's place in its cluster
    queue: object = None  # the smem hand-over (``PipelineAsync``) and its slots
    slots: object = None
    counters: object = None  # int32 in global memory, zero between launches (dynamic)


class Counters(NamedTuple):
    """What a dense GEMM's scheduler takes from the host: the dynamic scheduler's two tickets."""

    counters: object  # int32 (2,): zero before the first launch and again after each


class StaticScheduler(TileScheduler):
    """Cluster i takes work items i, i + P, i + 2P ... (P clusters); its fields: ``DenseParams``."""

    Params = DenseParams
    Args = Counters

    def tile_of(self, work):
        """Hook: this CTA's (m, n) C tile for work item ``work``: the cluster's tile in bands of
        ``group_m`` rows of cluster tiles, then this CTA's place inside the cluster."""
        cluster_m, cluster_n = band_tile(work, self.clusters_m, self.clusters_n, self.group_m)
        return (cluster_m * self.cluster_mn[0] + self.in_cluster[0],
                cluster_n * self.cluster_mn[1] + self.in_cluster[1])

    def start(self, slot=None):
        return self.at(self.first)

    def active(self):
        return self.position < self.total

    def work_tile(self) -> WorkTile:
        tile_m, tile_n = self.tile_of(self.position)
        return WorkTile(self.position, tile_m, tile_n, 0, self.k_tiles, 0, False)

    def advance(self, tile=None, slot=None):
        self.position = self.position + self.stride


class DynamicScheduler(StaticScheduler):
    """Work items from a global atomic counter, taken by the producer warp and handed to the
    consumers through the smem slots (module docstring). Single-CTA clusters only."""

    PER_CTA = ("the dynamic scheduler hands out tiles per CTA, but a cluster's CTAs must work on "
               "neighbouring tiles (they share multicast loads)")

    @cute.jit
    def _fetch(self):
        """Producer warp: lane 0 takes a ticket from the global counter, the warp shares it."""
        ticket = cutlass.Int32(0)
        counter = self.counters.iterator
        if cute.arch.lane_idx() == 0:
            ticket = cute.arch.atomic_add(counter, cutlass.Int32(1))
        return cute.arch.shuffle_sync(ticket, 0)

    def _next(self, slot):
        """The producer fetches the next item; a consumer (``slot``) reads the one it published."""
        if cutlass.const_expr(slot is None):
            return self._fetch()
        return take(self.queue, self.slots, slot, 1)[0]

    def start(self, slot=None):
        return self.at(self._next(slot))

    def advance(self, tile=None, slot=None):
        self.position = self._next(slot)

    def publish(self, slot, tile=None):
        """Write the work item into a free slot (after the last one too: ``position`` >= total
        says "no more tiles")."""
        put(self.queue, self.slots, slot, (self.position,))

    @cute.jit
    def finish(self):
        """The last CTA to finish sets both counters back to 0 for the next launch: counters[1]
        counts CTAs whose producer is done fetching; the one that brings it to P (the grid size)
        knows that no CTA will touch counters[0] again in this launch."""
        counter = self.counters.iterator
        grid = self.stride
        if cute.arch.lane_idx() == 0:
            done_ptr = counter + 1
            done = cute.arch.atomic_add(done_ptr, cutlass.Int32(1), sem="acq_rel", scope="gpu")
            if done == grid - 1:
                cute.arch.atomic_exch(counter, cutlass.Int32(0))
                cute.arch.atomic_exch(done_ptr, cutlass.Int32(0))


#: The schedulers a dense persistent kernel takes, by name (the launchers' ``scheduler=``): its
#: class's ``SCHEDULERS``. Each kernel family has one such table (stream-K's in
#: ``stream_k_scheduler``, the grouped kernels' in ``group_walk``), where ``configured.named``
#: looks up a name given to a constructor or an entry.
SCHEDULERS = {"static": StaticScheduler, "dynamic": DynamicScheduler}


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
