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
* ``stream-k`` (``hopper_gemm_streamk``): the static order for the items that fill whole waves;
  the k-tiles of the rest are dealt out evenly (``models/stream_k.py``, whose arithmetic the
  functions at the end of this module run). A CTA's work is a list of *units*, pieces of one
  item's K range, which producer and consumers walk in the same order with a cursor (pos, end)
  over the global iteration space (item * k_tiles + k).

The functions are module-level ``@cute.jit`` functions taking the :class:`Scheduler` state, not
its methods: the DSL treats a local object whose method is called inside a run-time loop as
carried through the loop, and a Python object cannot be. ``publish`` and ``receive`` leave
``slot.advance()`` to the caller for the same reason: the DSL carries a pipeline state through a
run-time loop only if the loop body itself advances it.
"""

from __future__ import annotations

from dataclasses import dataclass

import cutlass
import cutlass.cute as cute

from .sm90 import band_tile

from ..models import stream_k

KINDS = ("static", "dynamic")
#: Dynamic scheduler: work-item slots in smem between the producer and the consumers. Two, so the
#: producer can publish item t+1 while the consumers still read item t's slot.
WORK_SLOTS = 2


@dataclass
class Scheduler:
    """The scheduler's state inside one CTA (built by the kernel at trace time)."""

    kind: str  # "static" or "dynamic"
    first: object  # this cluster's first work item (static)
    stride: object  # clusters in the grid
    clusters_m: object  # the grid of work items
    clusters_n: object
    total: object  # clusters_m * clusters_n
    group_m: int  # band height of the tile order
    cluster_mn: tuple[int, int]
    in_cluster: object  # this CTA's (m, n) inside its cluster
    queue: object  # dynamic: the PipelineAsync of the smem slots
    slots: object  # dynamic: the slots (int32 work items)
    counters: object  # int32 in global memory, zero between launches: dynamic: 2 tickets;
    #                   stream-k: then one "partial sums ready" flag per CTA
    workspace: object = None  # stream-k: fp32 partial sums, one tile per CTA


def tile_of(sched: Scheduler, work):
    """This CTA's (m, n) C tile for work item ``work`` (a cluster-sized block of tiles)."""
    cluster_m, cluster_n = band_tile(work, sched.clusters_m, sched.clusters_n, sched.group_m)
    return (cluster_m * sched.cluster_mn[0] + sched.in_cluster[0],
            cluster_n * sched.cluster_mn[1] + sched.in_cluster[1])


@cute.jit
def _fetch(sched: Scheduler):
    """Producer warp: lane 0 takes a ticket from the global counter, the warp shares it."""
    ticket = cutlass.Int32(0)
    counter = sched.counters.iterator
    if cute.arch.lane_idx() == 0:
        ticket = cute.arch.atomic_add(counter, cutlass.Int32(1))
    return cute.arch.shuffle_sync(ticket, 0)


@cute.jit
def first_work(sched: Scheduler):
    """Producer: the first work item."""
    if cutlass.const_expr(sched.kind == "dynamic"):
        return _fetch(sched)
    return sched.first


@cute.jit
def next_work(sched: Scheduler, work):
    """Producer: the work item after ``work``."""
    if cutlass.const_expr(sched.kind == "dynamic"):
        return _fetch(sched)
    return work + sched.stride


@cute.jit
def publish(sched: Scheduler, slot, work):
    """Producer, dynamic: write the work item into a free smem slot for the consumers."""
    if cutlass.const_expr(sched.kind == "dynamic"):
        queue, slots = sched.queue, sched.slots  # locals: see sm90.store_tile
        queue.producer_acquire(slot)
        if cute.arch.lane_idx() == 0:
            slots[slot.index] = work
        queue.producer_commit(slot)  # mbarrier arrive: releases lane 0's smem write


@cute.jit
def receive(sched: Scheduler, slot, static_work):
    """Consumers: the next work item (dynamic: from the producer's slot; static: computed)."""
    work = static_work
    if cutlass.const_expr(sched.kind == "dynamic"):
        sched.queue.consumer_wait(slot)
        work = sched.slots[slot.index]
        sched.queue.consumer_release(slot)
    return work


@cute.jit
def finish(sched: Scheduler):
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


# -- stream-K (hopper_gemm_streamk) ------------------------------------------------------------
@dataclass
class StreamK:
    """The stream-K split of one launch (``models/stream_k.plan``), in k-tiles."""

    k_tiles: object  # per work item
    dp: object  # work items dealt out whole (the first dp of the banded order)
    sk_ctas: object  # clusters that share the k-tiles of the others
    sk_iters: object  # those k-tiles, in all
    done: object  # a cursor position past every unit: no more work


@cute.jit
def stream_k_split(sched: Scheduler, k_tiles, min_saved: cutlass.Constexpr):
    dp, sk_ctas, sk_iters = stream_k.plan(sched.total, sched.stride, k_tiles, min_saved, min_=cutlass.min)
    return StreamK(k_tiles, dp, sk_ctas, sk_iters, sched.total * k_tiles)


@cute.jit
def _whole(sk: StreamK, item):
    """The cursor of work item ``item`` as one unit, or past the end if it is not a whole item."""
    pos, end = sk.done, sk.done
    if item < sk.dp:
        pos = item * sk.k_tiles
        end = pos + sk.k_tiles
    return pos, end


@cute.jit
def _sk_range(sk: StreamK, cluster):
    """A cluster's stream-K range in the iteration space (empty for clusters >= sk_ctas)."""
    return stream_k.sk_range(cluster, sk.dp, sk.k_tiles, sk.sk_ctas, sk.sk_iters, cutlass.min, cutlass.max)


@cute.jit
def first_unit(sched: Scheduler, sk: StreamK):
    """This cluster's cursor: its first whole item, or if it has none its stream-K range."""
    pos, end = _whole(sk, sched.first)
    if pos == end:
        pos, end = _sk_range(sk, sched.first)
    return pos, end


@cute.jit
def unit(sk: StreamK, pos, end):
    """(item, k_begin, k_end) of the next unit: the last piece of [pos, end) inside one item (a
    range is walked backwards: ``models/stream_k.py``)."""
    return stream_k.piece(pos, end, sk.k_tiles, cutlass.max)


@cute.jit
def next_unit(sched: Scheduler, sk: StreamK, pos, end):
    """The cursor after a unit, given the rest of its range [pos, end): that rest; else, after a
    whole item (it started at pos < dp * k_tiles), the next one or the stream-K range; after the
    stream-K range, past the end."""
    new_pos, new_end = pos, end
    if pos == end:
        new_pos, new_end = sk.done, sk.done
        if pos < sk.dp * sk.k_tiles:
            new_pos, new_end = _whole(sk, pos // sk.k_tiles + sched.stride)
            if new_pos == new_end:
                new_pos, new_end = _sk_range(sk, sched.first)
    return new_pos, new_end


@cute.jit
def helpers(sched: Scheduler, sk: StreamK, item, k0):
    """[first, stop): the clusters whose partial sums of ``item`` this cluster adds after its unit
    (k0, k_tiles) of it: those before it, from the owner of the item's k-tile 0 (none if k0 = 0)."""
    first = sched.first
    if k0 > 0:
        first = stream_k.owner((item - sk.dp) * sk.k_tiles, sk.sk_ctas, sk.sk_iters)
    return first, sched.first
