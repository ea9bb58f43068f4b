"""The course's Hopper GEMM with thread-block clusters and TMA multicast (notebook 05).

``ClusterHopperGemm`` is ``hopper_gemm.HopperGemm`` plus one small change: a cluster shape
(CM, CN) and the three steps that depend on it. Everything else is the 1x1 kernel, because its
shared pieces (``sm90.py``) already take the cluster shape as a parameter and are the plain
single-CTA code at (1, 1):

* the TMA atoms: a multicast copy op, each CTA loading a 1/CN slice of A's box and 1/CM of B's
  (``sm90.tma_load(..., mcast=)``); the ctaMasks (``sm90.multicast_masks``: the CTAs of this
  CTA's cluster row share its A tile, those of its column its B tile);
* the full barrier's ``tx_count``: the whole A and B tiles, since every slice lands in every CTA
  of its mask; the empty barrier's arrivals: ``(CM + CN - 1)`` CTAs x 8 consumer warps, because
  a producer overwrites a stage in every CTA of its row and column (``sm90.make_ring``);
* cluster-wide barrier init (``pipeline_init_arrive/wait`` with the cluster shape) and a grid of
  whole clusters (``HopperGemm.__call__`` rounds it up; TMA zero-fills and clips past the edge).

The three overridden steps: which tile a CTA computes (clusters walk the band order, CTAs
take their place inside the cluster), the barrier before the epilogue reuses the ring (the whole
cluster, since peers may still arrive on our empty barriers), and - a separate experiment, not
part of the multicast change - L2 eviction hints on the loads (``l2_hints``).

The other mainloops (``hopper_gemm.VARIANTS``, ``DEMO_VARIANTS``) run on clusters as subclasses
of both, which ``on_clusters`` builds for every variant of those tables (``ON_CLUSTERS``):
``NaiveClusterHopperGemm(ClusterHopperGemm, NaiveHopperGemm)`` and so on.
The entry points (``ENTRY``: ``compile_target``, ``launcher``, ``gemm``, which runs it on an H100)
pick that class by ``variant=`` for every cluster shape but one: at 1x1 without L2 hints they
build the plain one-CTA kernel, so "cluster 1x1" in every measurement is notebook 03's kernel.

``cutecourse.kernel_facts`` reads back from a trace of the kernel (no GPU, no compile) the masks,
transaction bytes and arrival counts it really uses, so tests can hold them against the CPU
planner (``cutecourse.models.multicast``).
"""

from __future__ import annotations

import cutlass.cute as cute

from ..errors import ShapeError
from . import gemm_launch, sm90
from .hopper_gemm import HopperGemm, all_variants, variant_class

#: The cluster shapes the course runs and measures.
CLUSTERS = ((1, 1), (2, 1), (1, 2), (2, 2))
#: The ctaMask is 16 bits: a multicast reaches at most 16 CTAs.
MAX_CLUSTER_CTAS = 16
#: The L2 cache-policy operands and the named pairs ``l2_hints=`` takes (``sm90``: the persistent
#: kernels take the same names), here under their names of this module. The table keeps the name
#: it has on a kernel class, ``L2_HINT_PAIRS``, since a class's ``L2_HINTS`` is the keyword's
#: default, as ``configured.py`` names defaults.
EVICT_FIRST, EVICT_LAST, L2_HINT_PAIRS = sm90.EVICT_FIRST, sm90.EVICT_LAST, sm90.L2_HINT_PAIRS


def check_cluster(cluster_mn) -> tuple[int, int]:
    """Refuse a cluster shape that cannot work, saying why; return it as a tuple."""
    try:
        cm, cn = (int(v) for v in cluster_mn)
    except (TypeError, ValueError):
        raise ShapeError(f"cluster must be a pair (CM, CN), got {cluster_mn!r}",
                         "e.g. cluster=(2, 1): two CTAs along M share each B tile") from None
    if cm < 1 or cn < 1:
        raise ShapeError(f"cluster {cm}x{cn}: both sides must be at least 1", "e.g. cluster=(2, 1)")
    if cm * cn > MAX_CLUSTER_CTAS:
        raise ShapeError(f"cluster {cm}x{cn} has {cm * cn} CTAs; a multicast ctaMask has 16 bits, "
                         "so it can reach 16 CTAs at most",
                         "use at most 16 CTAs (Hopper guarantees 8; 16 needs a GPC with 16 free SMs)")
    for side, name in ((cm, "CM"), (cn, "CN")):
        if side & (side - 1):
            raise ShapeError(f"cluster {cm}x{cn}: {name}={side} is not a power of two; the tile's "
                             f"{'N' if name == 'CM' else 'M'} rows are split into {name} equal "
                             "TMA slices of whole 8-row swizzle atoms",
                             "use 1, 2, 4, 8 or 16 along each side")
    return cm, cn


class ClusterHopperGemm(HopperGemm):
    """``HopperGemm`` on clusters of CM x CN CTAs sharing A and B tiles by TMA multicast."""

    #: The default cluster (``configured.py``); the other defaults are ``HopperGemm``'s.
    #: ``l2_hints=`` takes a name of ``L2_HINT_PAIRS`` (``configured.NAMED``), or a pair.
    CLUSTER_MN, L2_HINT_PAIRS = (2, 1), sm90.L2_HINT_PAIRS

    def __init__(self, tile_mn=None, *, cluster_mn=None, l2_hints=None, **options):
        super().__init__(tile_mn, **options)
        self.cluster_mn = check_cluster(cluster_mn)
        self.l2_hints = sm90.check_l2_hints(l2_hints, self)  # a name arrives as its pair

    def tile_coord(self):
        """The 1x1 kernel's band order over *clusters*, then this CTA's place in its cluster."""
        cx, cy, _ = cute.arch.cluster_idx()
        nx, ny, _ = cute.arch.cluster_dim()
        cluster_m, cluster_n = sm90.band_tile(cx + cy * nx, nx, ny, self.group_m)
        in_cluster = cute.arch.block_in_cluster_idx()
        return (cluster_m * self.cluster_mn[0] + in_cluster[0],
                cluster_n * self.cluster_mn[1] + in_cluster[1])

    def mainloop_done(self):
        """Every CTA of the cluster is past the mainloop: a peer may still be sending its last
        "empty" arrivals to our barriers, and must not find the ring reused (or the CTA gone)."""
        cute.arch.cluster_arrive()
        cute.arch.cluster_wait()

    def load(self, ring, loads, state, pred=None):
        """The 1x1 kernel's loads, with the L2 eviction policies of ``load_policies``."""
        sm90.issue_tma(ring, loads, state, pred=pred, policies=self.load_policies())

    def load_policies(self):
        """Hook: the L2 eviction policies of A's and B's loads, (None, None) for no hint: here the
        pair of ``l2_hints`` (``sm90.l2_policies``), as in the persistent kernels. A hint a pair
        cannot say overrides this; the loop's ``load`` step tests no keyword."""
        return sm90.l2_policies(self.l2_hints)


#: The hooks ClusterHopperGemm overrides, for notebook 05 to show as diffs against HopperGemm.
CLUSTER_STEPS = ("tile_coord", "mainloop_done", "load")


def on_clusters(one_cta: type) -> type:
    """The one-CTA kernel class ``one_cta`` on clusters: ``ClusterHopperGemm``'s steps (first in
    the method order) on ``one_cta``'s mainloop. Nothing else is needed, because a mainloop and the
    cluster steps share no hook; so every variant of ``hopper_gemm.VARIANTS`` and
    ``DEMO_VARIANTS`` runs on clusters without a class written for it (``ON_CLUSTERS``)."""
    if one_cta is HopperGemm:
        return ClusterHopperGemm
    name = one_cta.__name__
    name = name.replace("HopperGemm", "ClusterHopperGemm") if "HopperGemm" in name else f"{name}OnClusters"
    return type(name, (ClusterHopperGemm, one_cta),
                {"__doc__": f"{one_cta.__name__}'s mainloop on clusters.", "__module__": __name__})


#: the one-CTA kernel of a variant -> the same variant on clusters (built by ``on_clusters``)
ON_CLUSTERS = {one_cta: on_clusters(one_cta) for one_cta in all_variants().values()}


def cluster_gemm(cluster_mn=None, variant: str = "prefetch", **kw):
    """The kernel of a cluster shape and a variant (``hopper_gemm.VARIANTS``): at 1x1 the plain
    one-CTA kernel, where it takes every other argument given (one given as None counts as not
    given: no L2 hints); else the variant on clusters (``ON_CLUSTERS``)."""
    import inspect

    one_cta = variant_class(variant)
    given = {k: v for k, v in kw.items() if v is not None}
    if cluster_mn == (1, 1) and set(given) <= set(inspect.signature(one_cta).parameters):
        return one_cta(**given)
    if one_cta not in ON_CLUSTERS:  # a mainloop added to a table after this module was imported
        ON_CLUSTERS[one_cta] = on_clusters(one_cta)
    return ON_CLUSTERS[one_cta](**kw, **({} if cluster_mn is None else {"cluster_mn": cluster_mn}))


#: The entry points (gemm_launch.Entry): compile_target, launcher(a, b, c, cluster=...), gemm.
ENTRY = gemm_launch.Entry(cluster_gemm)
compile_target, validate, launcher, gemm = ENTRY.compile_target, ENTRY.validate, ENTRY.launcher, ENTRY.gemm


def expected_multicast_loads(cluster_mn, variant: str = "prefetch") -> int:
    """How many multicast TMA load instructions the kernel's PTX holds for ``cluster_mn``.

    One copy per operand per place the variant issues loads (its class's ``LOAD_PLACES``). An
    operand is multicast only when more than one CTA shares its tile: A when CN > 1 (CTAs of the
    same row of C), B when CM > 1.
    """
    cm, cn = cluster_mn
    return variant_class(variant).LOAD_PLACES * ((cn > 1) + (cm > 1))
