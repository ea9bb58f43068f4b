"""The tile scheduler of a persistent grouped GEMM, on the CPU.

A grouped GEMM computes G independent products ``C_g = A_g @ B_g.T`` in one launch, each with
its own ``(M_g, N_g, K_g)``: the experts of a mixture-of-experts layer, say, where ``M_g`` is the
number of tokens routed to expert g. The kernel is persistent: it launches one CTA per SM (in
whole clusters) and each CTA loops over *work items*. This module answers, without a GPU, which
CTA computes which tile of which group, and what that costs.

How a linear work index becomes (group, tile)
---------------------------------------------
Lay the groups end to end. Group g owns ``ceil(M_g / CM) * ceil(N_g / CN)`` consecutive work
items, where ``CM x CN`` is the *cluster* tile (the CTA tile times the cluster shape: a cluster
of 2x1 CTAs takes a 256x256 block of C with 128x256 CTA tiles, as one work item). So
work index ``w`` belongs to the first group whose running total of items exceeds ``w``; the
index local to that group is ``w`` minus the items of the groups before it, and it is split
into (m, n) with m fastest ("along M": go down a column of tiles, then right). An empty group
(``M_g = 0``) owns no items and is skipped. K does not shape the grid: it decides how many
k-tile steps, ``ceil(K_g / tile_k)``, the mainloop of that item takes.

This is the arithmetic of the DSL's helper (``cutlass.utils.StaticPersistentGroupTileScheduler``
and the older ``GroupedGemmTileSchedulerHelper.delinearize_z``). The helper walks the groups 32
at a time, one per lane of a warp: a warp prefix sum gives each lane its group's running total,
``popc(ballot(w >= total))`` counts the groups that end at or before ``w`` (that count *is* the
group index), and it keeps the search state (first group of the window, items before it) from
one call to the next, because a CTA's work indices only grow: the next search starts where the
last one ended instead of at group 0. :func:`locate` below counts the same way, one group per
loop step, with integer operations only, so the same function could be traced by the DSL.

Two costs the model measures
----------------------------
* **Tensor-map updates.** A TMA copy reads a tensor map (base address, shape, strides). Each SM
  keeps its own maps for A, B and C (plus SFA, SFB when block-scaled) and must rewrite them in
  shared memory, and fence them, whenever its next item belongs to another group.
  :func:`tensormap_updates` counts those rewrites.
* **Balance.** Items of a group with a larger K take more k-tile steps. :func:`balance` sums them
  per CTA: the slowest CTA sets the kernel's time.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import NamedTuple, Sequence

from ..errors import ShapeError
from .tile_order import band_coord


class WorkItem(NamedTuple):
    """One work item as a CTA sees it: C tile (tile_m, tile_n) of ``group``, ``k_tiles`` steps."""

    group: int
    tile_m: int  # CTA tile index along M (rows tile_m*BM ... of C_g)
    tile_n: int  # CTA tile index along N
    k_tiles: int  # ceil(K_g / tile_k): mainloop steps for this item
    linear: int  # the scheduler's linear work index (one per cluster tile)


def locate(linear, shapes, cluster_tile, cluster=(1, 1), cta_in_cluster=(0, 0), int_=int,
           group_m=None, min_=min) -> WorkItem:
    """(group, tile_m, tile_n, k_tiles) of work item ``linear``: the kernel's own arithmetic.

    ``shapes[g]`` is ``(M_g, N_g, K_g)``; ``cluster_tile`` is ``(CM, CN, tile_k)``, the CTA tile
    times the cluster shape ``cluster``; ``cta_in_cluster`` is this CTA's (m, n) position in its
    cluster (every CTA of a cluster gets the same ``linear`` and takes its own part of the cluster
    tile). ``linear`` must be below the total item count (the kernel's loop condition).

    ``group_m``: None walks each group m fastest (the DSL helper's order); an int walks it in bands
    of ``group_m`` tile-rows (``models/tile_order.band_coord``, the dense persistent kernel's
    L2-friendly order), which the course's Hopper grouped kernel uses.

    Only + - * // and comparisons: inside a ``@cute.jit`` function pass DSL integers and
    ``int_=cutlass.Int32`` (which turns a comparison into 0 or 1); with ``len(shapes)`` a
    compile-time constant the loops unroll.
    """
    cm, cn, ck = cluster_tile
    group = 0  # groups that end at or before `linear`: the group index (the warp's popc(ballot))
    first = 0  # items owned by those groups: where our group's items start
    end = 0  # running total of items up to and including group g
    for g in range(len(shapes)):
        m, n, _ = shapes[g]
        items = ((m + cm - 1) // cm) * ((n + cn - 1) // cn)  # 0 for an empty group
        end = end + items
        before = int_(end <= linear)  # 1 while `linear` lies beyond group g
        group = group + before
        first = first + before * items
    m_g = n_g = k_g = 0  # the matched group's shape (the kernel loads problem_shape_mnkl[group])
    for g in range(len(shapes)):
        hit = int_(group == g)
        m_g, n_g, k_g = m_g + hit * shapes[g][0], n_g + hit * shapes[g][1], k_g + hit * shapes[g][2]
    rows = (m_g + cm - 1) // cm  # cluster tiles along M in this group
    within = linear - first  # index local to the group; m fastest ("along M")
    if group_m is None:
        block_m, block_n = within % rows, within // rows
    else:
        block_m, block_n = band_coord(within, rows, (n_g + cn - 1) // cn, group_m, min_)
    tile_m = block_m * cluster[0] + cta_in_cluster[0]
    tile_n = block_n * cluster[1] + cta_in_cluster[1]
    return WorkItem(group, tile_m, tile_n, (k_g + ck - 1) // ck, linear)


@dataclass(frozen=True)
class GroupedProblem:
    """G GEMMs and the tiling one grouped kernel uses for all of them.

    ``sizes``: ``[(M, N, K), ...]``, one per group; M may be 0 (an expert that got no tokens),
    N and K must be positive. ``tile``: the CTA tile (BM, BN). ``cluster``: CTAs per cluster along
    (M, N). ``tile_k``: the k-tile; K need not be a multiple of it (TMA fills the tail with zeros).
    """

    sizes: tuple
    tile: tuple = (128, 256)
    cluster: tuple = (1, 1)
    tile_k: int = 64
    group_m: int | None = None  # order inside a group: None m fastest, else bands (see locate)

    def __post_init__(self):
        sizes = tuple(tuple(s) for s in self.sizes)
        object.__setattr__(self, "sizes", sizes)
        object.__setattr__(self, "tile", tuple(self.tile))
        object.__setattr__(self, "cluster", tuple(self.cluster))
        if not sizes:
            raise ShapeError("no groups: sizes is empty", "pass at least one (M, N, K)")
        for g, s in enumerate(sizes):
            if len(s) != 3 or not all(isinstance(x, int) for x in s):
                raise ShapeError(f"group {g}: size {s!r} is not three ints", "write (M, N, K)")
            if s[0] < 0 or s[1] <= 0 or s[2] <= 0:
                raise ShapeError(f"group {g}: (M, N, K) = {s} — M must be >= 0, N and K > 0",
                                 "M = 0 marks an empty group; N and K are fixed by the weights")
        for name, pair in (("tile", self.tile), ("cluster", self.cluster)):
            if len(pair) != 2 or not all(isinstance(x, int) and x > 0 for x in pair):
                raise ShapeError(f"{name}={pair!r}: need two positive ints (M, N)",
                                 "e.g. tile=(128, 256), cluster=(2, 1)")
        if not (isinstance(self.tile_k, int) and self.tile_k > 0):
            raise ShapeError(f"tile_k={self.tile_k!r} must be a positive int", "e.g. tile_k=64")
        if self.group_m is not None and not (isinstance(self.group_m, int) and self.group_m > 0):
            raise ShapeError(f"group_m={self.group_m!r} must be None or a positive int",
                             "None walks a group m fastest; e.g. group_m=16 walks it in bands")
        if self.total == 0:
            raise ShapeError("every group is empty (all M = 0): there is nothing to launch",
                             "skip the launch, or give one group a positive M")

    @property
    def groups(self) -> int:
        return len(self.sizes)

    @property
    def cluster_tile(self) -> tuple[int, int, int]:
        """(CM, CN, tile_k): the block of C one work item covers (CTA tile x cluster shape)."""
        return (self.tile[0] * self.cluster[0], self.tile[1] * self.cluster[1], self.tile_k)

    @property
    def cluster_size(self) -> int:
        return self.cluster[0] * self.cluster[1]

    @property
    def grids(self) -> list[tuple[int, int]]:
        """Per group, the cluster tiles along (M, N): ``(ceil(M/CM), ceil(N/CN))``."""
        cm, cn, _ = self.cluster_tile
        return [(-(-m // cm), -(-n // cn)) for m, n, _ in self.sizes]

    @property
    def tiles_per_group(self) -> list[int]:
        """Work items (cluster tiles) each group owns, as the DSL helper counts them."""
        return [a * b for a, b in self.grids]

    @property
    def offsets(self) -> list[int]:
        """The first linear index of each group (an empty group's equals the next group's)."""
        out, acc = [], 0
        for t in self.tiles_per_group:
            out.append(acc)
            acc += t
        return out

    @property
    def total(self) -> int:
        """Total work items: the ``total_num_clusters`` the host passes to the scheduler."""
        return sum(self.tiles_per_group)

    @property
    def k_tiles(self) -> list[int]:
        """Per group, the mainloop's k-tile steps per item: ``ceil(K / tile_k)``."""
        return [-(-k // self.tile_k) for _, _, k in self.sizes]

    def locate(self, linear: int, cta_in_cluster=(0, 0)) -> WorkItem:
        """The :class:`WorkItem` of linear index ``linear`` for the CTA at ``cta_in_cluster``."""
        if not (isinstance(linear, int) and 0 <= linear < self.total):
            raise ShapeError(f"work item {linear!r} is outside [0, {self.total})",
                             "the kernel's loop stops at the total item count")
        if not all(0 <= c < s for c, s in zip(cta_in_cluster, self.cluster)):
            raise ShapeError(f"cta_in_cluster={cta_in_cluster} is outside cluster {self.cluster}",
                             "each coordinate runs from 0 to the cluster side - 1")
        return locate(linear, self.sizes, self.cluster_tile, self.cluster, tuple(cta_in_cluster),
                      group_m=self.group_m)

    def items(self) -> list[WorkItem]:
        """Every work item in linear order (cluster leaders' view, cta_in_cluster = (0, 0))."""
        return [self.locate(w) for w in range(self.total)]


def schedule(problem: GroupedProblem, ctas: int) -> list[list[WorkItem]]:
    """The static persistent schedule: for each CTA, the work items it computes, in order.

    ``ctas``: the CTAs (SMs) the kernel may use; it launches ``P = ctas // cluster_size``
    clusters (never more than there are items, like the DSL's ``get_grid_shape``). Cluster c
    takes items c, c + P, c + 2P, ...; its CTAs share each item, each on its own tile. CTA ids
    follow the grid (cluster_m, cluster_n, P): ``id = c * cluster_size + n_in * cluster_m + m_in``
    (the index of the CTA's tensor-map workspace).
    """
    cs = problem.cluster_size
    if not (isinstance(ctas, int) and ctas >= cs):
        raise ShapeError(f"ctas={ctas!r}: need at least one whole cluster of {cs} CTAs",
                         "pass the SM count, e.g. ctas=132 on an H100 SXM")
    clusters = min(ctas // cs, problem.total)
    out = []
    for c in range(clusters):
        for n_in in range(problem.cluster[1]):
            for m_in in range(problem.cluster[0]):
                out.append([problem.locate(w, (m_in, n_in))
                            for w in range(c, problem.total, clusters)])
    return out


class TensorMapUpdates(NamedTuple):
    """Where each CTA rewrites its tensor maps: item positions, counts per CTA, total."""

    positions: list  # per CTA, indices into its item list where the group changes
    per_cta: list  # per CTA, len(positions[i])
    total: int


def tensormap_updates(sched: Sequence[Sequence[WorkItem]]) -> TensorMapUpdates:
    """Count the tensor-map rewrites of a schedule.

    A CTA starts with ``last_group = -1`` (its maps in the workspace are a template), so its first
    item always counts; after that, every item whose group differs from the previous item's. Each
    rewrite patches the maps for A, B, C (and SFA, SFB) in shared memory, fences them and copies
    them to the SM's workspace in global memory before the next TMA may use them.
    """
    positions = []
    for items in sched:
        last, mine = -1, []
        for i, it in enumerate(items):
            if it.group != last:
                mine.append(i)
            last = it.group
        positions.append(mine)
    per_cta = [len(p) for p in positions]
    return TensorMapUpdates(positions, per_cta, sum(per_cta))


class Balance(NamedTuple):
    """k-tile (MMA mainloop) steps per CTA and how uneven they are."""

    steps: list  # per CTA, the sum of k_tiles over its items
    max: int
    mean: float
    ratio: float  # max / mean: 1.0 is perfect; the kernel runs as long as its busiest CTA


def balance(sched: Sequence[Sequence[WorkItem]]) -> Balance:
    """Per CTA the mainloop steps it runs, and the max/mean ratio (load imbalance)."""
    steps = [sum(it.k_tiles for it in items) for items in sched]
    if not steps:
        raise ShapeError("the schedule has no CTAs", "build it with schedule(problem, ctas)")
    mean = sum(steps) / len(steps)
    return Balance(steps, max(steps), mean, max(steps) / mean if mean else 1.0)


def moe_sizes(groups: int, n: int, k: int, m_range=(64, 1024), seed: int = 0) -> list[tuple]:
    """Mixture-of-experts-like sizes: ``groups`` experts sharing (N, K), M drawn from ``m_range``.

    M is uniform over ``[lo, hi]`` (inclusive; ``lo = 0`` allows empty experts), from a private
    ``random.Random(seed)``: the same seed gives the same sizes on every machine.
    """
    lo, hi = m_range
    if not (isinstance(groups, int) and groups > 0):
        raise ShapeError(f"groups={groups!r} must be a positive int", "e.g. groups=8")
    if not (0 <= lo <= hi):
        raise ShapeError(f"m_range={m_range!r}: need 0 <= lo <= hi", "e.g. m_range=(64, 1024)")
    if n <= 0 or k <= 0:
        raise ShapeError(f"n={n}, k={k}: both must be positive", "e.g. n=4096, k=7168")
    rng = random.Random(seed)
    return [(rng.randint(lo, hi), n, k) for _ in range(groups)]
