"""The stream-K tile scheduler (``hopper_gemm_streamk``): whole tiles first, then pieces of K.

The static order deals out the work items that fill whole waves; the k-tiles of the rest are
dealt out evenly among the clusters (``models/stream_k.py``, whose arithmetic these methods
run on the device). A cluster's work is then a list of *units*, pieces of one item's K range,
which the producer and the consumers walk in the same order with a :class:`Cursor` over the
global iteration space (item * k_tiles + k): [pos, end) is what is left of the current range.

It is a :class:`~tile_scheduler.StaticScheduler` (its fields and the split's: ``StreamKParams``;
the same tile order) whose position is that cursor, so the persistent kernel's loops walk it unchanged; a
:class:`~tile_scheduler.WorkTile`'s ``k_begin``, ``k_end`` say which piece of the tile's K a unit
is. Nothing is handed over: both roles compute the same cursor.
"""

from __future__ import annotations

from typing import NamedTuple

import cutlass
import cutlass.cute as cute

from ..models import stream_k
from .tile_scheduler import DenseParams, StaticScheduler, WorkTile


class Cursor(NamedTuple):
    """What is left of a cluster's current range of the iteration space: [pos, end)."""

    pos: cutlass.Int32
    end: cutlass.Int32


#: The static scheduler's fields (``DenseParams``), then this launch's split (``models/stream_k.plan``).
StreamKParams = NamedTuple("StreamKParams", [
    *DenseParams.__annotations__.items(),
    ("dp", cutlass.Int32),  # work items dealt out whole: the first dp of the banded order
    ("sk_ctas", cutlass.Int32),  # clusters that share the k-tiles of the others
    ("sk_iters", cutlass.Int32),  # those k-tiles, in all
    ("done", cutlass.Int32),  # a cursor position past every unit
    ("partial_sums", object),  # fp32, one tile per CTA, where the pieces of a split tile meet
])


class StreamKArgs(NamedTuple):
    """What the stream-K kernel takes from the host for its scheduler."""

    counters: object  # int32: one "partial sums ready" flag per CTA
    partial_sums: object  # fp32, one tile per CTA


class StreamKScheduler(StaticScheduler):
    """The static scheduler's fields plus this launch's split (``StreamKParams``: the kernel's
    ``make_scheduler`` computes it with ``models/stream_k.plan``). The partial sums are where the
    pieces of a split tile meet (``hopper_gemm_streamk``)."""

    Params = StreamKParams
    Args = StreamKArgs

    @cute.jit
    def _whole(self, item):
        """The cursor of work item ``item`` as one unit, or past the end if it is not a whole item."""
        pos, end = self.done, self.done
        if item < self.dp:
            pos = item * self.k_tiles
            end = pos + self.k_tiles
        return pos, end

    def _sk_range(self):
        """This cluster's stream-K range in the iteration space (empty for clusters >= sk_ctas)."""
        return stream_k.sk_range(self.first, self.dp, self.k_tiles, self.sk_ctas, self.sk_iters,
                                 cutlass.min, cutlass.max)

    @cute.jit
    def _first(self):
        """This cluster's first cursor: its first whole item, or if it has none its stream-K range."""
        pos, end = self._whole(self.first)
        if pos == end:
            pos, end = self._sk_range()
        return Cursor(pos, end)

    def start(self, slot=None):
        return self.at(self._first())

    def active(self):
        return self.position.pos < self.position.end

    def work_tile(self) -> WorkTile:
        """The next unit: the last piece of [pos, end) inside one item (a range is walked
        backwards: ``models/stream_k.py``), as this CTA's tile and k-tiles."""
        item, k_begin, k_end = stream_k.piece(self.position.pos, self.position.end, self.k_tiles, cutlass.max)
        tile_m, tile_n = self.tile_of(item)
        return WorkTile(item, tile_m, tile_n, k_begin, k_end, 0, False)

    @cute.jit
    def _after(self, cursor: Cursor, tile: WorkTile) -> Cursor:
        """The cursor after unit ``tile``: the rest of its range; else, after a whole item (it
        started at pos < dp * k_tiles), the next one or the stream-K range; after the stream-K
        range, past the end."""
        pos, end = cursor.pos, cursor.end - (tile.k_end - tile.k_begin)
        new_pos, new_end = pos, end
        if pos == end:
            new_pos, new_end = self.done, self.done
            if pos < self.dp * self.k_tiles:
                new_pos, new_end = self._whole(pos // self.k_tiles + self.stride)
                if new_pos == new_end:
                    new_pos, new_end = self._sk_range()
        return Cursor(new_pos, new_end)

    def advance(self, tile=None, slot=None):
        self.position = self._after(self.position, tile)

    @cute.jit
    def helpers(self, tile: WorkTile):
        """[first, stop): the clusters whose partial sums of ``tile`` this cluster adds after its
        unit (k_begin, k_tiles) of it: those before it, from the owner of the item's k-tile 0
        (none if k_begin = 0)."""
        first = self.first
        if tile.k_begin > 0:
            first = stream_k.owner((tile.linear - self.dp) * self.k_tiles, self.sk_ctas, self.sk_iters)
        return first, self.first


#: The stream-K kernel's schedulers by name (``StreamKHopperGemm.SCHEDULERS``: its ``scheduler=``
#: takes these names): "static", the dense static order's whole tiles, then the split. A new order
#: of the whole tiles is a subclass that also inherits the dense order's ``tile_of``
#: (``class ColumnStreamK(StreamKScheduler, ColumnMajorScheduler)``) and a name here.
SCHEDULERS = {"static": StreamKScheduler}
