"""The stream-K tile scheduler (``hopper_gemm_streamk``): whole tiles first, then pieces of K.

The static order deals out the work items that fill whole waves; the k-tiles of the rest are
dealt out evenly among the clusters (``models/stream_k.py``, whose arithmetic these functions
run on the device). A cluster's work is then a list of *units*, pieces of one item's K range,
which the producer and the consumers walk in the same order with a :class:`Cursor` over the
global iteration space (item * k_tiles + k): [pos, end) is what is left of the current range.

It keeps the contract of ``tile_scheduler`` (start / advance / active / work_tile / publish /
receive / finish), so the persistent kernel's producer and consumer loops walk it unchanged; a
:class:`~tile_scheduler.WorkTile`'s ``k_begin``, ``k_end`` say which piece of the tile's K a unit
is. Nothing is handed over: both roles compute the same cursor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import cutlass
import cutlass.cute as cute

from ..models import stream_k
from .tile_scheduler import Scheduler, WorkTile, tile_of


@dataclass
class StreamKScheduler(Scheduler):
    """The static scheduler's state plus the split of this launch (``models/stream_k.plan``)."""

    dp: object = None  # work items dealt out whole (the first dp of the banded order)
    sk_ctas: object = None  # clusters that share the k-tiles of the others
    sk_iters: object = None  # those k-tiles, in all
    done: object = None  # a cursor position past every unit: no more work
    partial_sums: object = None  # fp32, one tile per CTA (``hopper_gemm_streamk.save_partial``)


class Cursor(NamedTuple):
    """What is left of a cluster's current range of the iteration space: [pos, end)."""

    pos: cutlass.Int32
    end: cutlass.Int32


def split(sched: Scheduler, min_saved: int, partial_sums) -> StreamKScheduler:
    """``sched`` with this launch's stream-K split: only where it saves each cluster at least
    ``min_saved`` k-tiles (``models/stream_k.plan``); ``partial_sums``: where split tiles meet."""
    dp, sk_ctas, sk_iters = stream_k.plan(sched.total, sched.stride, sched.k_tiles, min_saved,
                                          min_=cutlass.min)
    fields = {name: getattr(sched, name) for name in Scheduler.__dataclass_fields__}
    return StreamKScheduler(**fields, dp=dp, sk_ctas=sk_ctas, sk_iters=sk_iters,
                            done=sched.total * sched.k_tiles, partial_sums=partial_sums)


@cute.jit
def _whole(sched: StreamKScheduler, item):
    """The cursor of work item ``item`` as one unit, or past the end if it is not a whole item."""
    pos, end = sched.done, sched.done
    if item < sched.dp:
        pos = item * sched.k_tiles
        end = pos + sched.k_tiles
    return pos, end


@cute.jit
def _sk_range(sched: StreamKScheduler):
    """This cluster's stream-K range in the iteration space (empty for clusters >= sk_ctas)."""
    return stream_k.sk_range(sched.first, sched.dp, sched.k_tiles, sched.sk_ctas, sched.sk_iters,
                             cutlass.min, cutlass.max)


@cute.jit
def start(sched: StreamKScheduler) -> Cursor:
    """This cluster's first cursor: its first whole item, or if it has none its stream-K range."""
    pos, end = _whole(sched, sched.first)
    if pos == end:
        pos, end = _sk_range(sched)
    return Cursor(pos, end)


def active(sched: StreamKScheduler, cursor: Cursor):
    return cursor.pos < cursor.end


def work_tile(sched: StreamKScheduler, cursor: Cursor) -> WorkTile:
    """The next unit: the last piece of [pos, end) inside one item (a range is walked backwards:
    ``models/stream_k.py``), as this CTA's tile and k-tiles."""
    item, k_begin, k_end = stream_k.piece(cursor.pos, cursor.end, sched.k_tiles, cutlass.max)
    tile_m, tile_n = tile_of(sched, item)
    return WorkTile(item, tile_m, tile_n, k_begin, k_end, 0, False)


@cute.jit
def advance(sched: StreamKScheduler, cursor: Cursor, tile: WorkTile) -> Cursor:
    """The cursor after unit ``tile``: the rest of its range; else, after a whole item (it
    started at pos < dp * k_tiles), the next one or the stream-K range; after the stream-K range,
    past the end."""
    pos, end = cursor.pos, cursor.end - (tile.k_end - tile.k_begin)
    new_pos, new_end = pos, end
    if pos == end:
        new_pos, new_end = sched.done, sched.done
        if pos < sched.dp * sched.k_tiles:
            new_pos, new_end = _whole(sched, pos // sched.k_tiles + sched.stride)
            if new_pos == new_end:
                new_pos, new_end = _sk_range(sched)
    return Cursor(new_pos, new_end)


def publish(sched: StreamKScheduler, slot, cursor: Cursor, tile=None):
    """Nothing to hand over: the consumers walk the same cursor."""


@cute.jit
def receive(sched: StreamKScheduler, slot, cursor=None, tile=None) -> Cursor:
    """Consumers: their next cursor, computed (None: the first)."""
    if cutlass.const_expr(cursor is None):
        return start(sched)
    return advance(sched, cursor, tile)


def finish(sched: StreamKScheduler, cursor: Cursor):
    """Nothing to reset: the flags are reset by the CTAs that read them."""


@cute.jit
def helpers(sched: StreamKScheduler, tile: WorkTile):
    """[first, stop): the clusters whose partial sums of ``tile`` this cluster adds after its
    unit (k_begin, k_tiles) of it: those before it, from the owner of the item's k-tile 0 (none
    if k_begin = 0)."""
    first = sched.first
    if tile.k_begin > 0:
        first = stream_k.owner((tile.linear - sched.dp) * sched.k_tiles, sched.sk_ctas, sched.sk_iters)
    return first, sched.first
