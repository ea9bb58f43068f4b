"""The group walk: where the next tile of a grouped GEMM comes from, on the device.

One scheduler for every grouped kernel of the course: the Hopper grouped GEMMs
(``hopper_grouped_gemm``, ``hopper_grouped_gemm_fp8``) and the Blackwell grouped block-scaled
GEMM (``blackwell_grouped_gemm``). ``models/group_scheduler.py`` is its CPU model, and the tests
hold the two to the same answers.

* The groups' cluster tiles are laid end to end: group g owns ``ceil(M_g / CM) * ceil(N_g / CN)``
  consecutive *work items* (CM x CN: the CTA tile times the cluster shape), an empty group none.
  Cluster i of a persistent grid of P clusters takes items i, i + P, i + 2P ...
* A :class:`Walk` is a cluster's place in that sequence: its item, the group that owns it and
  where that group's items start. ``advance`` moves it P items on. Its items only grow, so the
  search for their group (the ``find_group`` hook, by default :func:`find_group`) resumes where
  the last stopped: each group's shape is read once per cluster (``work_tile`` reads its own again).
* ``work_tile`` turns a walk into what a CTA computes: its C tile (inside a group, bands of
  ``group_m`` cluster-tile rows: the ``tile_of`` hook), the k-tiles, the group, and whether the
  group just changed (its previous item was in another: its tensor maps are rewritten, ``tensor_maps``).
* The metadata has one column per operand, always in the order :data:`OPERANDS`: ``ptrs`` holds
  addresses, ``strides`` each operand's stride (A, B, C: their row strides in elements; the
  scale factors' columns are the kernel's own).

:class:`GroupScheduler` keeps the interface of ``tile_scheduler.py``. On Hopper only the producer
warp walks; it hands each tile to the consumers through smem slots (``publish``), and a consumer's
``start(slot)`` returns a :class:`HandedTiles`: the tiles as they arrive, not a walk (the same
hand-over as the dense dynamic scheduler). On Blackwell each warp role walks on its own.
"""

from __future__ import annotations

from typing import NamedTuple

import cutlass
import cutlass.cute as cute

from ..errors import CourseError
from .sm90 import band_tile
from .tile_scheduler import TileScheduler, WorkTile, put, take

#: The operands of a grouped GEMM, in the order of the metadata columns and of the CTA's tensor
#: maps in the workspace. A block-scaled GEMM has all five; the bf16 kernel the first three.
OPERANDS = ("a", "b", "c", "sfa", "sfb")
A, B, C, SFA, SFB = range(len(OPERANDS))
#: The ``shapes`` columns: M, N, K (and a 1, the batch mode of CUTLASS's problem shapes).
M, N, K = range(3)
#: The int32 fields of a tile handed from the producer to the consumers (Hopper): tile_m, tile_n,
#: k_tiles, group (``count``: no more tiles), new group. A grouped tile covers all of its group's K
#: (``k_begin`` = 0), so its ``k_end`` is its k-tile count: the FP8 mainloops use it as such.
TILE_FIELDS = 5


class GroupParams(NamedTuple):
    """The group walk's fields, set once per CTA."""

    shapes: object  # (G, 4) int32: M, N, K, 1 per group
    ptrs: object  # (G, operands) int64: addresses, columns in OPERANDS order
    strides: object  # (G, operands) int64: row strides (the scale factors': the kernel's own)
    count: cutlass.Int32  # G
    cluster_tile: tuple  # (CM, CN, tile_k): the CTA tile times the cluster shape, and the k-tile
    cluster_mn: tuple
    in_cluster: tuple  # this CTA's (m, n) in its cluster
    first: cutlass.Int32  # this cluster's first work item
    stride: cutlass.Int32  # clusters in the grid
    group_m: int  # band height inside a group, in cluster-tile rows
    queue: object = None  # Hopper: the hand-over to the consumers and its smem slots
    slots: object = None
    trace: object = None  # (CTAs, 2) int32: per CTA its items and groups entered
    cta: object = None  # this CTA's row of ``trace`` and of the tensor-map workspace
    maps: object = None  # its tensor maps (``tensor_maps.tensor_maps``)


class GroupArgs(NamedTuple):
    """What a grouped kernel takes from the host for its scheduler: the group metadata."""

    shapes: object  # (G, 4) int32
    ptrs: object  # (G, operands) int64
    strides: object  # (G, operands) int64
    trace: object  # (CTAs, 2) int32
    map_workspace: object  # (CTAs, maps, 16) int64: the CTAs' tensor maps in global memory


class Walk(NamedTuple):
    """A cluster's place in the group walk: the producer's ``position`` (carried through its loop)."""

    work: cutlass.Int32  # its work item, over all groups' items laid end to end
    group: cutlass.Int32  # the group that owns it; ``count``: past the last group
    first: cutlass.Int32  # that group's first work item
    entered: cutlass.Int32  # groups this cluster has entered so far (counting this one)


class GroupScheduler(TileScheduler):
    """The group walk as a tile scheduler (``tile_scheduler``'s interface); its fields:
    ``GroupParams``. Its position is a :class:`Walk`: the producer's (and each Blackwell role's)."""

    Params = GroupParams
    Args = GroupArgs
    ITEM_FIELDS = TILE_FIELDS

    def start(self, slot=None):
        """This cluster's first place in the walk (a consumer, ``slot``: the tiles handed over)."""
        if cutlass.const_expr(slot is not None):
            return HandedTiles(**self.params._asdict()).at(self._receive(slot))
        group, first = self.find_group(self.first, cutlass.Int32(0), cutlass.Int32(0))
        return self.at(Walk(self.first, group, first, _entering(self, self.first, group, first)))

    def advance(self, tile=None, slot=None):
        """The walk one step on: this cluster's next work item, P items later."""
        walk = self.position
        work = walk.work + self.stride
        group, first = self.find_group(work, walk.group, walk.first)
        self.position = Walk(work, group, first, walk.entered + _entering(self, work, group, first))

    def active(self):
        """The walk is still inside the groups."""
        return self.position.group < self.count

    def tile_of(self, item, rows, cols):
        """Hook: the (m, n) cluster tile of a group's item ``item`` (a group of rows x cols
        cluster tiles): bands of ``group_m`` rows, ``models/tile_order.py``."""
        return band_tile(item, rows, cols, self.group_m)

    def find_group(self, work, group, first):
        """Hook: (group, first) of item ``work``, searching on from ``group``: :func:`find_group`."""
        return find_group(self, work, group, first)

    def work_tile(self) -> WorkTile:
        """What this CTA computes: its C tile inside the group, all the group's k-tiles, and
        whether the group is new to it (``models.group_scheduler.locate(..., group_m=)`` on the
        CPU)."""
        walk = self.position
        rows, cols, k_tiles = group_grid(self, walk.group)
        block_m, block_n = self.tile_of(walk.work - walk.first, rows, cols)
        cm, cn = self.cluster_mn
        return WorkTile(walk.work, block_m * cm + self.in_cluster[0], block_n * cn + self.in_cluster[1],
                        0, k_tiles, walk.group, _new_group(self, walk.work, walk.first))

    # -- the hand-over between the producer and the consumers (Hopper) --------------------------
    # The producer hands over the tile it computed, not its walk: the consumers would otherwise
    # read the group's shape from global memory before every tile's mainloop, on their critical path.
    @cute.jit
    def publish(self, slot, tile=None):
        """Producer warp: hand ``tile`` to the consumers; None: past the last group, no more tiles."""
        if cutlass.const_expr(tile is None):
            put(self.queue, self.slots, slot, (0, 0, 0, self.count, 0))
        else:
            put(self.queue, self.slots, slot,
                (tile.tile_m, tile.tile_n, tile.k_end, tile.group, cutlass.Int32(tile.new_group)))

    @cute.jit
    def _receive(self, slot) -> WorkTile:
        """Consumers: the next tile the producer handed over."""
        tile_m, tile_n, k_tiles, group, new_group = take(self.queue, self.slots, slot, TILE_FIELDS)
        return WorkTile(cutlass.Int32(0), tile_m, tile_n, cutlass.Int32(0), k_tiles, group, new_group != 0)

    @cute.jit
    def finish(self):
        """Producer warp, after its last item: lane 0 writes this CTA's tally into ``trace``
        (its items and the groups it entered: its tensor-map rewrites)."""
        if cutlass.const_expr(self.trace is not None):
            trace, cta, walk = self.trace, self.cta, self.position  # locals: no attribute written in an `if`
            items = (walk.work - self.first) // self.stride
            if cute.arch.lane_idx() == 0:
                trace[(cta, 0)] = items
                trace[(cta, 1)] = walk.entered


class HandedTiles(GroupScheduler):
    """A Hopper consumer's view of the group walk: the tiles the producer warp handed over (its
    position is the current :class:`WorkTile`), with the walk's fields (the group metadata, the
    tensor maps) for the hooks that read them."""

    def advance(self, tile=None, slot=None):
        """The next tile handed over."""
        self.position = self._receive(slot)

    def active(self):
        """The producer handed over a tile, not "no more tiles" (a group past the last)."""
        return self.position.group < self.count

    def work_tile(self) -> WorkTile:
        """The tile itself: the producer computed it."""
        return self.position


def check_scheduler(scheduler):
    """A grouped kernel's ``scheduler=`` (a name is a class by now): a :class:`GroupScheduler` class."""
    if not (isinstance(scheduler, type) and issubclass(scheduler, GroupScheduler)):
        raise CourseError(f"scheduler={scheduler!r}: a grouped GEMM walks groups, and this is not a group walk",
                          f"pass a name of group_walk.SCHEDULERS ({', '.join(SCHEDULERS)}), or GroupScheduler "
                          "or a subclass of it (e.g. one whose tile_of orders the tiles inside a group)")


def group_items(groups: GroupScheduler, g):
    """Work items of group g: ceil(M / CM) * ceil(N / CN) cluster tiles (0 when M = 0)."""
    cm, cn, _ = groups.cluster_tile
    return ((groups.shapes[(g, M)] + cm - 1) // cm) * ((groups.shapes[(g, N)] + cn - 1) // cn)


@cute.jit
def find_group(groups: GroupScheduler, work, group, first):
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


def _new_group(groups: GroupScheduler, work, first):
    """Item ``work`` of a group whose items start at ``first`` is the first of that group this
    cluster takes: its previous item, ``work - stride``, lies before the group's first."""
    return work - groups.stride < first


def _entering(groups: GroupScheduler, work, group, first):
    """1 if this cluster enters a group (not past the last) with item ``work``, else 0."""
    return cutlass.Int32(_new_group(groups, work, first) & (group < groups.count))


def group_grid(groups: GroupScheduler, g):
    """(rows, cols, k_tiles) of group g: its cluster tiles along M and N, its k-tile steps."""
    cm, cn, tile_k = groups.cluster_tile
    return ((groups.shapes[(g, M)] + cm - 1) // cm, (groups.shapes[(g, N)] + cn - 1) // cn,
            (groups.shapes[(g, K)] + tile_k - 1) // tile_k)


# -- one group's operands ---------------------------------------------------------------------
#: Each operand's rows and columns, as ``shapes`` columns: A (M, K), B (N, K), C (M, N).
EXTENTS = {A: (M, K), B: (N, K), C: (M, N)}


def operand_pointer(groups: GroupScheduler, g, operand: int, dtype, align: int = 16):
    """Group g's address of ``operand`` (one of A, B, C, SFA, SFB) as a global pointer."""
    return cute.make_ptr(dtype, groups.ptrs[(g, operand)], cute.AddressSpace.gmem, assumed_align=align)


def operand_tensor(groups: GroupScheduler, g, operand: int, dtype):
    """Group g's A (M, K), B (N, K) or C (M, N), row-major with its row stride: what the
    operand's tensor map is rewritten from when a CTA enters the group."""
    rows, cols = EXTENTS[operand]
    layout = cute.make_layout((groups.shapes[(g, rows)], groups.shapes[(g, cols)]),
                              stride=(groups.strides[(g, operand)], 1))
    return cute.make_tensor(operand_pointer(groups, g, operand, dtype), layout)


#: The grouped kernels' schedulers by name (Hopper's and Blackwell's ``SCHEDULERS``: their
#: ``scheduler=`` takes these names): "static", cluster i takes items i, i + P ..., in bands of
#: ``group_m`` rows inside a group. A new order is a subclass overriding ``tile_of(item, rows,
#: cols)`` and a name here.
SCHEDULERS = {"static": GroupScheduler}
