"""Checkers for notebook 05 (TMA multicast and clusters).

Every answer is compared with the multicast planner (``cutecourse.models.multicast``), which
works the answer out by brute force from the definition, so a checker never holds a table of
expected numbers it could get wrong on its own.
"""

from __future__ import annotations

from ..models.multicast import fmt_mask, plan
from . import Result, answered, checker, failed, passed

#: Cluster shapes the mask checker tries, small to large (the 16-bit mask allows up to 16 CTAs).
MASK_CLUSTERS = [(1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (1, 4), (4, 2), (2, 4), (4, 4)]



@checker("ctaMask of each CTA (CuTe's column-major cluster)",
         hint="rank r sits at (cm, cn) = (r % CM, r // CM). A is shared by the CTAs of the same "
              "row cm: ranks cm, cm + CM, cm + 2*CM, ...; B by the CTAs of the same column cn: "
              "ranks cn*CM ... cn*CM + CM - 1.")
def check_mask(mask_fn) -> Result:
    """``mask_fn(operand, rank, cluster_mn) -> int`` for operand "A" or "B"."""
    title = "ctaMask of each CTA (CuTe's column-major cluster)"
    tried = 0
    for cluster in MASK_CLUSTERS:
        p = plan(tile=(128, 256, 64), cluster=cluster, tiles=(cluster[0], cluster[1], 1))
        width = max(4, p.cluster_size)
        for rank in range(p.cluster_size):
            for op in "AB":
                want = p.mask(op, 0, 0, rank)
                got = answered(mask_fn(op, rank, cluster), "mask_fn")
                tried += 1
                if not isinstance(got, int) or got != want:
                    shown = fmt_mask(got, width) if isinstance(got, int) else repr(got)
                    return failed(title, f"cluster {cluster[0]}x{cluster[1]}, rank {rank}, "
                                  f"operand {op}: you gave {shown}, the CTAs that need the same "
                                  f"{op} tile are {fmt_mask(want, width)}",
                                  "bit r of the mask is CTA rank r; the issuing CTA's own bit "
                                  "is set too (it receives its slice as well)")
    return passed(title, f"all {tried} masks agree with the brute-force planner, cluster shapes "
                  f"1x1 to 4x4")


@checker("bytes per CTA per stage, cluster 2x1, tile 128x256x64 fp16",
         hint="every CTA receives whole A and B tiles (its own slices and its partners'); it "
              "issues 1/CN of A's box and 1/CM of B's.")
def check_bytes(full_barrier_tx, issued_bytes) -> Result:
    """The full barrier's transaction bytes, and the bytes one CTA issues (reads from L2)."""
    title = "bytes per CTA per stage, cluster 2x1, tile 128x256x64 fp16"
    tx = answered(full_barrier_tx, "full_barrier_tx")
    issued = answered(issued_bytes, "issued_bytes")
    p = plan(tile=(128, 256, 64), cluster=(2, 1), tiles=(2, 1, 1))
    want_tx, want_issued = p.tx_bytes(0, 0, 0), p.l2_bytes(0, 0, 0)
    if tx != want_tx:
        hint = ("that is what this CTA issues, not what lands in it" if tx == want_issued else
                "A tile 128x64 + B tile 256x64, 2 bytes each")
        return failed(title, f"full_barrier_tx = {tx}, but {want_tx} bytes land in each CTA's "
                      "stage", hint)
    if issued != want_issued:
        hint = ("with a 2x1 cluster B is shared by 2 CTAs: each issues half of it; A is not "
                "shared (1 CTA along N)")
        return failed(title, f"issued_bytes = {issued}, expected {want_issued}", hint)
    saved = 1 - want_issued / want_tx
    return passed(title, f"{want_tx} B land in each CTA, {want_issued} B are read from L2 by it: "
                  f"{saved:.0%} less L2 traffic than without multicast")


@checker("empty-barrier arrivals per stage",
         hint="a producer may refill a stage only when every CTA its loads write into has "
              "released it: the CTAs of its row (A) and of its column (B), itself counted once; "
              "each releases once per consumer warp.")
def check_empty_arrivals(arrivals_fn) -> Result:
    """``arrivals_fn(cluster_mn, consumer_warps) -> int``: the empty barrier's arrival count."""
    title = "empty-barrier arrivals per stage"
    for cluster in MASK_CLUSTERS:
        for warps in (4, 8):
            p = plan(tile=(128, 256, 64), cluster=cluster, tiles=(cluster[0], cluster[1], 1))
            want = p.empty_arrivals(0, 0, 0) * warps
            got = answered(arrivals_fn(cluster, warps), "arrivals_fn")
            if got != want:
                return failed(title, f"cluster {cluster[0]}x{cluster[1]} with {warps} consumer "
                              f"warps: you gave {got}, expected {want}")
    return passed(title, "(CM + CN - 1) x warps, for every cluster shape tried")
