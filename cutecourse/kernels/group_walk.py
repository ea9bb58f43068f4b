"""The group walk: where the next tile of a grouped GEMM comes from, on the device.

One contract for every grouped kernel of the course: the Hopper grouped GEMMs
(``hopper_grouped_gemm``, ``hopper_grouped_gemm_fp8``) and the Blackwell grouped block-scaled
GEMM (``blackwell_grouped_gemm``). ``models/group_scheduler.py`` is its CPU model, and the tests
hold the two to the same answers.

* The groups' cluster tiles are laid end to end: group g owns ``ceil(M_g / CM) * ceil(N_g / CN)``
  consecutive *work items* (CM x CN: the CTA tile times the cluster shape), an empty group none.
  Cluster i of a persistent grid of P clusters takes items i, i + P, i + 2P ...
* A :class:`Walk` is a cluster's place in that sequence: its item, the group that owns it and
  where that group's items start. :func:`advance` moves it P items on. A cluster's items only
  grow, so the search for the owning group resumes where the last one stopped: over the whole
  kernel the search reads each group's shape once (``work_tile`` reads its own group's again).
* :func:`work_tile` turns a walk into what a CTA computes: its C tile (inside a group, bands of
  ``group_m`` cluster-tile rows, ``models/tile_order.py``), the k-tiles, the group, and whether
  the group just changed (the CTA's previous item was in another group: its tensor maps must be
  rewritten, ``tensor_maps.py``).
* The metadata has one column per operand, always in the order :data:`OPERANDS`: ``ptrs`` holds
  addresses, ``strides`` each operand's stride (A, B, C: their row strides in elements; the
  scale factors' columns are the kernel's own).

On Hopper only the producer warp walks; it hands each tile to the consumers through smem slots
(:func:`publish`, :func:`receive`, the same hand-over as the dense dynamic scheduler). On
Blackwell each warp role walks on its own. The functions take the :class:`Groups` state, not
methods of it: the DSL carries a local object whose method is called in a run-time loop through
that loop (``tile_scheduler.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import cutlass
import cutlass.cute as cute

from .sm90 import band_tile
from .tile_scheduler import WorkTile, put, take

#: The operands of a grouped GEMM, in the order of the metadata columns and of the CTA's tensor
#: maps in the workspace. A block-scaled GEMM has all five; the bf16 kernel the first three.
OPERANDS = ("a", "b", "c", "sfa", "sfb")
A, B, C, SFA, SFB = range(len(OPERANDS))
#: The ``shapes`` columns: M, N, K (and a 1, the batch mode of CUTLASS's problem shapes).
M, N, K = range(3)
#: Each operand's rows and columns, as ``shapes`` columns: A (M, K), B (N, K), C (M, N).
EXTENTS = {A: (M, K), B: (N, K), C: (M, N)}
#: The int32 fields of a tile handed from the producer to the consumers (Hopper): tile_m, tile_n,
#: k_tiles, group (``count``: no more tiles), new group.
TILE_FIELDS = 5


@dataclass
class Groups:
    """The group metadata and the walk's constants inside a CTA (built at trace time)."""

    shapes: object  # (G, 4) int32: M, N, K, 1
    ptrs: object  # (G, operands) int64: addresses, columns in OPERANDS order
    strides: object  # (G, operands) int64: strides, columns in OPERANDS order
    count: object  # G
    cluster_tile: tuple  # (CM, CN, tile_k): the CTA tile times the cluster shape, and the k-tile
    cluster_mn: tuple  # CTAs per cluster along (M, N)
    in_cluster: object  # this CTA's (m, n) inside its cluster
    first: object  # this cluster's first work item (its index in the grid)
    stride: object  # clusters in the grid
    group_m: int  # band height inside a group, in cluster-tile rows
    queue: object = None  # Hopper: the smem slots' pipeline (producer -> consumers)
    slots: object = None  # Hopper: (slots, TILE_FIELDS) int32
    trace: object = None  # Hopper: (CTAs, 2) int32, per CTA its items and groups entered
    cta: object = None  # this CTA's row of ``trace`` and of the tensor-map workspace
    maps: object = None  # this CTA's tensor maps (``tensor_maps.TensorMaps``)


class Walk(NamedTuple):
    """A cluster's place in the group walk (carried through the roles' loops)."""

    work: cutlass.Int32  # its work item, over all groups' items laid end to end
    group: cutlass.Int32  # the group that owns it; ``count``: past the last group
    first: cutlass.Int32  # that group's first work item
    entered: cutlass.Int32  # groups this cluster has entered so far (counting this one)


def group_items(groups: Groups, g):
    """Work items of group g: ceil(M / CM) * ceil(N / CN) cluster tiles (0 when M = 0)."""
    cm, cn, _ = groups.cluster_tile
    return ((groups.shapes[(g, M)] + cm - 1) // cm) * ((groups.shapes[(g, N)] + cn - 1) // cn)


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


def _new_group(groups: Groups, work, first):
    """Item ``work`` of a group whose items start at ``first`` is the first of that group this
    cluster takes: its previous item, ``work - stride``, lies before the group's first."""
    return work - groups.stride < first


def _entering(groups: Groups, work, group, first):
    """1 if this cluster enters a group (not past the last) with item ``work``, else 0."""
    return cutlass.Int32(_new_group(groups, work, first) & (group < groups.count))


@cute.jit
def start(groups: Groups) -> Walk:
    """This cluster's first place in the walk."""
    group, first = find_group(groups, groups.first, cutlass.Int32(0), cutlass.Int32(0))
    return Walk(groups.first, group, first, _entering(groups, groups.first, group, first))


@cute.jit
def advance(groups: Groups, walk: Walk, tile=None) -> Walk:
    """The walk one step on: this cluster's next work item, P items later."""
    work = walk.work + groups.stride
    group, first = find_group(groups, work, walk.group, walk.first)
    return Walk(work, group, first, walk.entered + _entering(groups, work, group, first))


def active(groups: Groups, walk):
    """The walk (or a consumer's tile) is still inside the groups."""
    return walk.group < groups.count


def group_grid(groups: Groups, g):
    """(rows, cols, k_tiles) of group g: its cluster tiles along M and N, its k-tile steps."""
    cm, cn, tile_k = groups.cluster_tile
    return ((groups.shapes[(g, M)] + cm - 1) // cm, (groups.shapes[(g, N)] + cn - 1) // cn,
            (groups.shapes[(g, K)] + tile_k - 1) // tile_k)


def work_tile(groups: Groups, walk) -> WorkTile:
    """What this CTA computes for ``walk``: its C tile inside the group (bands of ``group_m``
    cluster-tile rows, then its place in the cluster), all the group's k-tiles, and whether the
    group is new to it (``models.group_scheduler.locate(..., group_m=)`` on the CPU). A consumer's
    item is already a tile: the producer computed it (:func:`receive`)."""
    if isinstance(walk, WorkTile):
        return walk
    rows, cols, k_tiles = group_grid(groups, walk.group)
    block_m, block_n = band_tile(walk.work - walk.first, rows, cols, groups.group_m)
    cm, cn = groups.cluster_mn
    return WorkTile(walk.work, block_m * cm + groups.in_cluster[0], block_n * cn + groups.in_cluster[1],
                    0, k_tiles, walk.group, _new_group(groups, walk.work, walk.first))


# -- the hand-over between the producer and the consumers (Hopper) ------------------------------
# The producer hands over the tile it computed, not its walk: the consumers would otherwise read
# the group's shape from global memory before every tile's mainloop, on their critical path.
@cute.jit
def publish(groups: Groups, slot, walk: Walk, tile=None):
    """Producer warp: hand ``tile`` to the consumers; None: past the last group, no more tiles."""
    if cutlass.const_expr(tile is None):
        put(groups.queue, groups.slots, slot, (0, 0, 0, groups.count, 0))
    else:
        put(groups.queue, groups.slots, slot,
            (tile.tile_m, tile.tile_n, tile.k_end, tile.group, cutlass.Int32(tile.new_group)))


@cute.jit
def receive(groups: Groups, slot, item=None, tile=None) -> WorkTile:
    """Consumers: the next tile the producer handed over."""
    tile_m, tile_n, k_tiles, group, new_group = take(groups.queue, groups.slots, slot, TILE_FIELDS)
    return WorkTile(cutlass.Int32(0), tile_m, tile_n, cutlass.Int32(0), k_tiles, group, new_group != 0)


@cute.jit
def finish(groups: Groups, walk: Walk):
    """Producer warp, after its last item: lane 0 writes this CTA's tally into ``trace``
    (its items and the groups it entered: its tensor-map rewrites)."""
    if cutlass.const_expr(groups.trace is not None):
        trace, cta = groups.trace, groups.cta  # locals: an attribute written in an `if` is carried
        items = (walk.work - groups.first) // groups.stride
        if cute.arch.lane_idx() == 0:
            trace[(cta, 0)] = items
            trace[(cta, 1)] = walk.entered


# -- one group's operands ---------------------------------------------------------------------
def operand_pointer(groups: Groups, g, operand: int, dtype, align: int = 16):
    """Group g's address of ``operand`` (one of A, B, C, SFA, SFB) as a global pointer."""
    return cute.make_ptr(dtype, groups.ptrs[(g, operand)], cute.AddressSpace.gmem, assumed_align=align)


def operand_tensor(groups: Groups, g, operand: int, dtype):
    """Group g's A (M, K), B (N, K) or C (M, N), row-major with its row stride: what the
    operand's tensor map is rewritten from when a CTA enters the group."""
    rows, cols = EXTENTS[operand]
    layout = cute.make_layout((groups.shapes[(g, rows)], groups.shapes[(g, cols)]),
                              stride=(groups.strides[(g, operand)], 1))
    return cute.make_tensor(operand_pointer(groups, g, operand, dtype), layout)
