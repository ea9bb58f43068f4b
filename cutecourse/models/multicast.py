"""TMA multicast planned on the CPU: who needs which tile, who loads it, and the masks.

In a thread-block cluster, CTAs that compute neighbouring output tiles need the same input tiles:
two CTAs on the same rows of C read the same tile of A, two on the same columns the same tile of
B. A multicast TMA load (``cp.async.bulk.tensor ... .multicast::cluster``) reads a box from L2
once and writes it into the shared memory of every CTA whose bit is set in a 16-bit ``ctaMask``
(bit ``r`` = the CTA of rank ``r`` in the cluster), signalling each receiver's mbarrier at the
same offset. So for every k-tile the kernel must know:

* which CTAs need the same tile (the "same bulk" relation of the nvFuser multicast issue,
  NVIDIA/Fuser#3689 "Optimize matrix multiplication performance using tma multicast"),
* who issues the load (CUTLASS: *every* CTA of the group issues 1/g of the box, so the g loads
  are spread over g SMs' TMA units; nvFuser's design: the lowest rank issues the whole box),
* the mask of each load,
* how many bytes land in each CTA (its *full* barrier's transaction count: the whole A and B
  tiles, although the CTA itself issued only a slice of each), and
* how many CTAs must release a stage before a producer may overwrite it (its *empty* barrier's
  arrivals: every CTA its loads write into).

This module answers all of that twice. :meth:`Plan.mask` and friends by brute force, straight
from the definition: compute each CTA's tile, compare. :meth:`Plan.closed_form` by the formula a
kernel can afford (a modulo for the issuer, ``(2**C - 1) << ...`` for the mask), which is only
right under divisibility conditions (:meth:`Plan.conditions`). :meth:`Plan.differences` lists
where the two disagree, so a learner can see the conditions bite (e.g. a persistent grid of 127
CTAs). The closed form, its conditions and differences are ``multicast_closed_form.py``, mixed into
:class:`Plan`.

Two tile orders (how a CTA, in a wave of a persistent grid, finds its output tile):

``"cluster"`` (CuTe's own, the course's kernel): a cluster of ``CM x CN`` CTAs owns a whole
    ``CM x CN`` block of output tiles; the CTA at cluster coordinate ``(cm, cn)`` takes tile
    ``(cm, cn)`` of it. Rank in the cluster is column-major, ``r = cm + cn * CM``
    (``cute.make_layout((CM, CN))``). A persistent grid hands out these cluster tiles, M fastest.
``"linear"`` (the schedule of nvFuser's multicast design): tile index ``I = wave * G + cta``
    over a grid of ``G`` CTAs, tiles grouped ``CM x CN`` with N fastest inside a group; rank
    ``r = cta % S``, ``S = CM * CN``. Clusters are a run of consecutive ``cta`` ids, and nothing
    ties them to the groups: that is where the divisibility conditions come from.

A grid whose CTA count is not a multiple of the cluster size cannot be launched on Hopper, but
the planner accepts it (its last cluster is partial) to show what the closed form gets wrong;
:attr:`Plan.launchable` says whether the grid could run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from ..errors import ShapeError
from .multicast_closed_form import MASK_BITS, ClosedFormMixin, Operand, _check_operand, bits, fmt_mask

#: Largest cluster Hopper launches without opting in to non-portable sizes (8), and with (16).
PORTABLE_CLUSTER = 8

Order = Literal["cluster", "linear"]
ORDERS = ("cluster", "linear")


@dataclass(frozen=True)
class Slice:
    """One multicast load: ``issuer`` reads rows ``rows`` of the ``operand`` box for ``tile``
    and writes them to every CTA in ``mask``. ``index`` of ``count`` slices of the box."""

    operand: str
    tile: tuple[int, int]  # (m, k) for A, (n, k) for B
    issuer: int  # rank in the cluster
    index: int
    count: int
    rows: tuple[int, int]  # [start, stop) along the box's outer dimension (M for A, N for B)
    mask: int
    bytes: int

    @property
    def receivers(self) -> list[int]:
        return bits(self.mask)


def _pair(value, name: str) -> tuple[int, int]:
    try:
        a, b = (int(v) for v in value)
    except (TypeError, ValueError):
        raise ShapeError(f"{name} must be a pair of integers, got {value!r}",
                         f"pass e.g. {name}=(2, 1)") from None
    if a < 1 or b < 1:
        raise ShapeError(f"{name} must be positive, got {value!r}", f"pass e.g. {name}=(2, 1)")
    return a, b


def _triple(value, name: str) -> tuple[int, int, int]:
    try:
        a, b, c = (int(v) for v in value)
    except (TypeError, ValueError):
        raise ShapeError(f"{name} must be three integers, got {value!r}",
                         f"pass e.g. {name}=(128, 256, 64)") from None
    if min(a, b, c) < 1:
        raise ShapeError(f"{name} must be positive, got {value!r}",
                         f"pass e.g. {name}=(128, 256, 64)")
    return a, b, c


@dataclass(frozen=True)
class Plan(ClosedFormMixin):
    """Everything about the multicast loads of one GEMM launch; build it with :func:`plan`."""

    tile: tuple[int, int, int]  # (BM, BN, BK) elements
    cluster: tuple[int, int]  # (CM, CN) CTAs
    tiles: tuple[int, int, int]  # (Mt, Nt, Kt): output tiles along M and N, k-tiles along K
    grid: int  # CTAs launched
    order: str
    elem_bytes: int = 2
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    # -- the launch ------------------------------------------------------------------------
    @property
    def cluster_size(self) -> int:
        return self.cluster[0] * self.cluster[1]

    @property
    def num_clusters(self) -> int:
        return math.ceil(self.grid / self.cluster_size)

    @property
    def launchable(self) -> bool:
        """Hopper launches whole clusters only: the grid must be a multiple of the cluster."""
        return self.grid % self.cluster_size == 0

    @property
    def num_tiles(self) -> int:
        return self.tiles[0] * self.tiles[1]

    @property
    def waves(self) -> int:
        """Rounds of a persistent grid (1 when every CTA gets one tile)."""
        if self.order == "cluster":
            cluster_tiles = math.ceil(self.tiles[0] / self.cluster[0]) * math.ceil(
                self.tiles[1] / self.cluster[1])
            return math.ceil(cluster_tiles / self.num_clusters)
        return math.ceil(self.num_tiles / self.grid)

    def ranks(self, cluster: int) -> list[int]:
        """The ranks present in ``cluster`` (all of them, except in a partial last cluster)."""
        first = cluster * self.cluster_size
        return list(range(min(self.cluster_size, self.grid - first)))

    def coord(self, rank: int) -> tuple[int, int]:
        """(cm, cn) of a rank: column-major for "cluster" (CuTe), row-major for "linear"."""
        cm_size, cn_size = self.cluster
        if self.order == "cluster":
            return rank % cm_size, rank // cm_size
        return rank // cn_size, rank % cn_size

    # -- who computes what -----------------------------------------------------------------
    def output_tile(self, cluster: int, wave: int, rank: int) -> tuple[int, int] | None:
        """The (m, n) output tile this CTA computes in ``wave``, or None if it idles."""
        mt, nt, _ = self.tiles
        cm_size, cn_size = self.cluster
        if rank not in self.ranks(cluster):
            return None
        if self.order == "cluster":
            clusters_m = math.ceil(mt / cm_size)
            clusters_n = math.ceil(nt / cn_size)
            t = wave * self.num_clusters + cluster  # this cluster's cluster-tile, M fastest
            if t >= clusters_m * clusters_n:
                return None
            cm, cn = self.coord(rank)
            m, n = (t % clusters_m) * cm_size + cm, (t // clusters_m) * cn_size + cn
        else:
            index = wave * self.grid + cluster * self.cluster_size + rank  # nvFuser's I
            if index >= self.num_tiles:
                return None
            group, within = divmod(index, cm_size * cn_size)
            groups_n = math.ceil(nt / cn_size)  # RN
            m = (group // groups_n) * cm_size + within // cn_size
            n = (group % groups_n) * cn_size + within % cn_size
        return (m, n) if m < mt and n < nt else None

    def needs(self, cluster: int, wave: int, rank: int, k: int) -> dict[str, tuple[int, int]] | None:
        """The A tile (m, k) and B tile (n, k) this CTA reads at k-tile ``k``, or None."""
        mn = self.output_tile(cluster, wave, rank)
        if mn is None:
            return None
        return {"A": (mn[0], k), "B": (mn[1], k)}

    # -- brute force: the "same bulk" relation ---------------------------------------------
    def same_bulk(self, operand: Operand, cluster: int, wave: int, k: int, r1: int, r2: int) -> bool:
        """Do ranks r1 and r2 of this cluster load the same tile of ``operand`` at this step?
        All CTAs of a cluster walk k in lock-step (a multicast writes the same stage of every
        receiver), so only CTAs of the same cluster, wave and k-tile can share a load."""
        n1, n2 = self.needs(cluster, wave, r1, k), self.needs(cluster, wave, r2, k)
        return n1 is not None and n2 is not None and n1[operand] == n2[operand]

    def groups(self, operand: Operand, cluster: int, wave: int, k: int = 0) -> list[list[int]]:
        """The ranks of this cluster split into sets that need the same ``operand`` tile."""
        key = ("groups", operand, cluster, wave, k)
        if key not in self._cache:
            by_tile: dict[tuple[int, int], list[int]] = {}
            for r in self.ranks(cluster):
                need = self.needs(cluster, wave, r, k)
                if need is not None:
                    by_tile.setdefault(need[operand], []).append(r)
            self._cache[key] = sorted(by_tile.values())
        return self._cache[key]

    def mask(self, operand: Operand, cluster: int, wave: int, rank: int, k: int = 0) -> int:
        """Brute force: bit r set for every rank r that needs the same tile as ``rank``."""
        _check_operand(operand)
        return sum(1 << r for r in self.ranks(cluster)
                   if self.same_bulk(operand, cluster, wave, k, r, rank))

    def single_issuer(self, operand: Operand, cluster: int, wave: int, rank: int, k: int = 0) -> bool:
        """nvFuser's single-issuer predicate: no lower rank loads the same bulk, so this one
        issues it."""
        if self.needs(cluster, wave, rank, k) is None:
            return False
        return not any(self.same_bulk(operand, cluster, wave, k, r, rank) for r in range(rank))

    def loads(self, cluster: int, wave: int, k: int = 0) -> list[Slice]:
        """Every multicast load of one k-tile step of one cluster, CUTLASS style: each of the
        g CTAs that share a tile issues 1/g of its box (rows of A's M, of B's N)."""
        bm, bn, bk = self.tile
        out = []
        for operand, rows in (("A", bm), ("B", bn)):
            for group in self.groups(operand, cluster, wave, k):
                mask = sum(1 << r for r in group)
                tile = self.needs(cluster, wave, group[0], k)[operand]
                g = len(group)
                for i, r in enumerate(group):
                    lo, hi = i * rows // g, (i + 1) * rows // g
                    out.append(Slice(operand, tile, r, i, g, (lo, hi), mask,
                                     (hi - lo) * bk * self.elem_bytes))
        return out

    def issued(self, cluster: int, wave: int, rank: int, k: int = 0) -> list[Slice]:
        return [s for s in self.loads(cluster, wave, k) if s.issuer == rank]

    def tx_bytes(self, cluster: int, wave: int, rank: int, k: int = 0) -> int:
        """Bytes that land in this CTA's smem for this k-tile: what its full barrier expects.
        Every slice whose mask has this rank's bit counts, whoever issued it."""
        return sum(s.bytes for s in self.loads(cluster, wave, k) if s.mask >> rank & 1)

    def empty_arrivals(self, cluster: int, wave: int, rank: int, k: int = 0) -> int:
        """CTAs this rank's loads write into: each must release the stage (arrive on this
        rank's empty barrier) before this rank may overwrite it. Multiply by the consumer
        arrivals per CTA (one per consumer warp in CuTe's PipelineTmaAsync) for the count."""
        union = 0
        for s in self.issued(cluster, wave, rank, k):
            union |= s.mask
        return len(bits(union))

    def l2_bytes(self, cluster: int, wave: int, rank: int, k: int = 0, multicast: bool = True) -> int:
        """Bytes this CTA's loads read from L2 at this k-tile, with or without multicast."""
        if multicast:
            return sum(s.bytes for s in self.issued(cluster, wave, rank, k))
        if self.needs(cluster, wave, rank, k) is None:
            return 0
        bm, bn, bk = self.tile
        return (bm + bn) * bk * self.elem_bytes

    # -- summaries -------------------------------------------------------------------------
    def table(self, cluster: int = 0, wave: int = 0, k: int = 0) -> str:
        """One line per rank: its tile, its masks, what it issues, what it receives."""
        lines = [f"cluster {cluster}, wave {wave}, k-tile {k}  (tile {self.tile}, cluster "
                 f"{self.cluster[0]}x{self.cluster[1]}, {self.order} order)",
                 "rank (cm,cn)  C tile    A mask  B mask  issues A rows  issues B rows  "
                 "full tx B  empty arrivals"]
        width = max(4, self.cluster_size)
        for r in range(self.cluster_size):
            mn = self.output_tile(cluster, wave, r)
            if mn is None:
                lines.append(f"{r:>4} {str(self.coord(r)):>7}  idle")
                continue
            rows = {s.operand: f"{s.rows[0]}:{s.rows[1]}" for s in self.issued(cluster, wave, r, k)}
            lines.append(
                f"{r:>4} {str(self.coord(r)):>7}  {str(mn):<8} "
                f"{fmt_mask(self.mask('A', cluster, wave, r, k), width):>7} "
                f"{fmt_mask(self.mask('B', cluster, wave, r, k), width):>7} "
                f"{rows.get('A', '-'):>13}  {rows.get('B', '-'):>13}  "
                f"{self.tx_bytes(cluster, wave, r, k):>9}  {self.empty_arrivals(cluster, wave, r, k):>14}")
        return "\n".join(lines)


def plan(tile=(128, 256, 64), cluster=(2, 1), problem=None, tiles=None, grid: int | None = None,
         order: Order = "cluster", elem_bytes: int = 2) -> Plan:
    """Plan the multicast loads of a GEMM.

    tile:     (BM, BN, BK) of one CTA, in elements.
    cluster:  (CM, CN) CTAs per cluster along M and N.
    problem:  (M, N, K) in elements (the tile must divide it), or give
    tiles:    (Mt, Nt, Kt) tile counts directly.
    grid:     CTAs launched; None = one CTA per output tile, rounded up to whole clusters. Less
              than that makes a persistent grid (several waves).
    order:    "cluster" (CuTe's scheduler, the course's kernel) or "linear" (nvFuser's design).
    """
    bm, bn, bk = _triple(tile, "tile")
    cm, cn = _pair(cluster, "cluster")
    if cm * cn > MASK_BITS:
        raise ShapeError(f"a cluster of {cm}x{cn} = {cm * cn} CTAs is more than the 16 a ctaMask "
                         "can address", f"use at most {MASK_BITS} CTAs (Hopper launches up to "
                         f"{PORTABLE_CLUSTER} portably, 16 with the non-portable opt-in)")
    if order not in ORDERS:
        raise ShapeError(f"unknown tile order {order!r}", f"use one of {ORDERS}")
    if (problem is None) == (tiles is None):
        raise ShapeError("give exactly one of problem=(M, N, K) or tiles=(Mt, Nt, Kt)",
                         "e.g. plan(tile=(128, 256, 64), cluster=(2, 1), problem=(8192, 8192, 8192))")
    if problem is not None:
        m, n, k = _triple(problem, "problem")
        for name, size, t in (("M", m, bm), ("N", n, bn), ("K", k, bk)):
            if size % t:
                raise ShapeError(f"{name}={size} is not a multiple of the tile's {t}",
                                 f"pad {name} to {math.ceil(size / t) * t} or pick a tile that "
                                 "divides it")
        tiles = (m // bm, n // bn, k // bk)
    mt, nt, kt = _triple(tiles, "tiles")
    if grid is None:
        if order == "cluster":
            grid = math.ceil(mt / cm) * math.ceil(nt / cn) * cm * cn
        else:
            grid = math.ceil(mt * nt / (cm * cn)) * cm * cn
    if int(grid) < 1:
        raise ShapeError(f"grid must be at least one CTA, got {grid}", "pass grid=None or e.g. 132")
    return Plan((bm, bn, bk), (cm, cn), (mt, nt, kt), int(grid), order, int(elem_bytes))


def l2_traffic(p: Plan) -> dict[str, int]:
    """Bytes the whole launch reads from L2 per k-tile step, with and without multicast, summed
    over all CTAs and waves (k-tile 0; every k-tile is the same)."""
    with_mc = without = 0
    for wave in range(p.waves):
        for c in range(p.num_clusters):
            for r in p.ranks(c):
                with_mc += p.l2_bytes(c, wave, r, 0, multicast=True)
                without += p.l2_bytes(c, wave, r, 0, multicast=False)
    return {"with_multicast": with_mc * p.tiles[2], "without_multicast": without * p.tiles[2]}


def traffic_summary(result) -> str:
    """L2 -> SM traffic of a ``benchmarks/multicast.py`` result: the planner's prediction per
    cluster shape, next to what Nsight Compute counted (when it could read the counters)."""
    predicted = result.params.get("predicted_l2_to_smem_bytes", {})
    ncu = result.params.get("ncu", {})
    measured = ncu.get("metrics", {})
    clock = ncu.get("clock_control", "none")
    lines = ["L2 -> shared memory bytes of the whole GEMM (GiB = 2**30 B); ncu durations at "
             + ("the base clock" if clock == "base" else "the GPU's own clock")]
    for name, nbytes in predicted.items():
        line = f"  {name}: planner {nbytes / 2**30:6.2f} GiB"
        m = measured.get(name)
        if m:
            if "lts__t_sectors_srcunit_tex_op_read.sum" in m:
                line += (f" | ncu L2 reads by the SMs "
                         f"{m['lts__t_sectors_srcunit_tex_op_read.sum'] * 32 / 2**30:6.2f} GiB")
            line += f" | all L2 traffic {m.get('lts__t_bytes.sum', float('nan')) / 2**30:6.2f} GiB"
            line += f" | DRAM reads {m.get('dram__bytes_read.sum', float('nan')) / 2**30:5.2f} GiB"
            if "gpu__time_duration.sum" in m:  # ns, at the clock ncu fixed (params["ncu"])
                line += f" | {m['gpu__time_duration.sum'] / 1e3:6.0f} us"
        lines.append(line)
    if not measured:
        lines.append(f"  (no counters: {ncu.get('error', 'not recorded')})")
    for name, why in ncu.get("errors", {}).items():
        if name not in measured:
            lines.append(f"  {name}: ncu could not read counters: {why[:200]}")
    return "\n".join(lines)
