"""Checkers for notebook 05 (TMA multicast and clusters).

Every answer is compared with the multicast planner (``cutecourse.models.multicast``), which
works the answer out by brute force from the definition, so a checker never holds a table of
expected numbers it could get wrong on its own.
"""

from __future__ import annotations

from types import SimpleNamespace

from ..models.multicast import fmt_mask, plan
from . import Result, answered, checker, failed, passed
from .kernel_check import KernelExercise, LearnerError, gemm_args, gpu_here, kernel_checker, run_on_gpu
from .learner_code import reason
from .pipeline_checks import NOT_HERE

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


# ----------------------------------------------------------------------------------------
# Kernel exercises: the learner writes the multicast masks and loads of the cluster kernel
# ----------------------------------------------------------------------------------------
# Each is a KernelExercise (kernel_check): the learner's hook is compiled for sm_90a here (a 2x2
# cluster) and its multicast loads counted in the PTX; the hook itself is run on the host, once per
# CTA rank, with the rank as a number, and what it hands ``cute.copy`` is held against the
# brute-force planner; on an H100 the kernel runs against torch in a child with a timeout.
TILE = (128, 256)
CLUSTER = (2, 2)
#: the k-tile and ring stage the host run loads (distinct, so a swapped index shows)
K_TILE, STAGE = 5, 1


def kernel_expr(cls, cluster=CLUSTER) -> str:
    return f"{cls.__name__}(tile_mn={TILE}, cluster_mn={tuple(cluster)})"


class _View:
    """A TMA view that remembers how it was indexed: ``tAgA[(None, k)]`` -> ("A's k-tiles", k)."""

    def __init__(self, name: str):
        self.name = name

    def __getitem__(self, index):
        return (self.name, index[-1] if isinstance(index, tuple) else index)


def host_run(cls, cluster, rank: int, call):
    """Run ``call(kernel, ring, loads, state)`` for CTA ``rank`` of ``cluster`` inside a host-side
    trace, with the CTA's rank a plain number and ``cute.copy`` recorded (not issued). Returns
    (call's value, the copies)."""
    from unittest import mock

    import cutlass.cute as cute

    from ..kernels import sm90
    from ..layouts import run_on_host

    cm = cluster[0]
    kernel = cls(tile_mn=TILE, cluster_mn=tuple(cluster))
    p = plan(tile=(*TILE, 64), cluster=tuple(cluster), tiles=(cluster[0], cluster[1], 1))
    loads = sm90.Loads("A's atom", _View("A's k-tiles"), _View("A's ring"), p.mask("A", 0, 0, rank),
                       "B's atom", _View("B's k-tiles"), _View("B's ring"), p.mask("B", 0, 0, rank))
    ring = SimpleNamespace(producer_get_barrier=lambda s: ("full barrier", s.index))
    state = SimpleNamespace(count=K_TILE, index=STAGE, phase=0)
    copies = []

    def copy(atom, src, dst, **kw):
        mask = kw.get("mcast_mask")
        copies.append({"atom": atom, "src": src, "dst": dst, "bar": kw.get("tma_bar_ptr"),
                       "mask": None if mask is None else int(mask)})

    def run():
        with mock.patch.object(cute.arch, "block_idx_in_cluster", lambda: rank), \
                mock.patch.object(cute.arch, "block_in_cluster_idx", lambda: (rank % cm, rank // cm, 0)), \
                mock.patch.object(cute.arch, "make_warp_uniform", lambda x: x), \
                mock.patch.object(cute, "copy", copy):
            out = call(kernel, ring, loads, state)
        return out if not isinstance(out, tuple) else tuple(int(v) for v in out)

    return run_on_host(run), copies


def _on_host(code, cls, cluster, rank, call):
    try:
        return host_run(cls, cluster, rank, call)
    except NotImplementedError:
        raise
    except Exception as exc:
        where = code.locate(exc)
        at = f"{code.describe(*where)}: " if where else ""
        raise LearnerError(f"your {code.name} failed for CTA rank {rank} of a "
                           f"{cluster[0]}x{cluster[1]} cluster: {at}{reason(exc)}") from None


def _compiled_multicasts(attempt) -> str | None:
    """None if the 2x2 kernel compiled to the expected multicast loads, else what is wrong.
    Checked after the host run, which names a wrong mask, operand or index more precisely."""
    from ..kernels.hopper_gemm_cluster import expected_multicast_loads

    got, want = attempt.report.count("TMA multicast loads"), expected_multicast_loads(CLUSTER)
    if got != want:
        return (f"compiled for a 2x2 cluster, your kernel has {got} multicast TMA loads in its "
                f"PTX; {want} expected (A and B, in the prologue and in the mainloop)")
    return None


def cluster_exercise(title: str, hint: str, host_objection, passes) -> KernelExercise:
    """A hook of the cluster kernel: compiled at 2x2, run on the host once per CTA rank
    (``host_objection``), its multicast loads counted in the PTX; timed beside the course's."""
    return KernelExercise(title, hint, kernel=kernel_expr, passes=passes,
                          objections=(host_objection, _compiled_multicasts), elsewhere=NOT_HERE,
                          baseline=f"ClusterHopperGemm(tile_mn={TILE}, cluster_mn={CLUSTER})")


EX4 = ("Exercise 4 (kernel): the multicast masks, computed in the kernel",
       "rank = cm + cn * CM. A's tile is shared along the cluster's row (same cm, every cn): "
       "bits cm, cm + CM, cm + 2*CM, ...; B's along its column (same cn): CM consecutive bits "
       "from cn * CM. The CTA's own bit is set too.")


def _wrong_mask(attempt) -> str | None:
    """The learner's masks for every CTA of every cluster, against the planner's."""
    code, cls = attempt.code, attempt.answer
    answers, plans = {}, {}
    for cluster in MASK_CLUSTERS:
        plans[cluster] = p = plan(tile=(*TILE, 64), cluster=cluster, tiles=(cluster[0], cluster[1], 1))
        for rank in range(p.cluster_size):
            got, _ = _on_host(code, cls, cluster, rank, lambda k, r, l, s: k._masks())
            answers.update({(cluster, rank, op): mine for op, mine in zip("AB", got)})
    other = {"A": "B", "B": "A"}
    # a whole answer explained by one mistake is named as that mistake (diagnosis.py's idea)
    models = [(lambda c, r, op: plans[c].mask(other[op], 0, 0, r),
               " (that is the other operand's mask: A is shared along a row of the cluster, B "
               "along a column)"),
              (lambda c, r, op: _row_major_mask(op, r, c),
               " (that numbers the cluster row-major; CuTe's is column-major: rank = cm + cn * CM)")]
    why = next((text for model, text in models
                if all(model(c, r, op) == v for (c, r, op), v in answers.items())), "")
    for (cluster, rank, op), mine in answers.items():
        want = plans[cluster].mask(op, 0, 0, rank)
        if mine != want:
            width = max(4, plans[cluster].cluster_size)
            return (f"cluster {cluster[0]}x{cluster[1]}, CTA rank {rank}: your {op} "
                    f"mask is {fmt_mask(mine, width)}, the CTAs that need the same {op} "
                    f"tile are {fmt_mask(want, width)}{why}")
    attempt.notes["tried"] = len(answers)
    return None


MASKS = cluster_exercise(
    *EX4, _wrong_mask,
    passes=lambda a: (f"your masks compile into the kernel (2x2: 4 multicast loads) and, run on the "
                      f"host, agree with the brute-force planner for all {a.notes['tried']} (CTA, "
                      "operand) pairs of clusters 1x1 to 4x4."))


@MASKS.checker
def check_masks_in_kernel(cls) -> Result:
    """``cls``: your subclass of ``MaskedCluster`` whose ``_masks()`` returns (A's, B's)."""
    return MASKS.check(cls)


def _row_major_mask(op: str, rank: int, cluster) -> int:
    """The mask a learner who numbers the cluster row-major (rank = cm * CN + cn) computes."""
    cm_size, cn_size = cluster
    cm, cn = rank // cn_size, rank % cn_size
    if op == "A":  # same row cm: consecutive ranks cm * CN ...
        return ((1 << cn_size) - 1) << (cm * cn_size)
    return sum(1 << (i * cn_size + cn) for i in range(cm_size))


EX5 = ("Exercise 5 (kernel): the multicast loads of a 2x2 cluster",
       "cute.copy(loads.tma_a, loads.tAgA[(None, state.count)], loads.tAsA[(None, state.index)], "
       "tma_bar_ptr=ring.producer_get_barrier(state), mcast_mask=a_mask), and the same for B.")


def _wrong_copy(attempt) -> str | None:
    """What the learner's load hands cute.copy for every CTA of three clusters, on the host."""
    for cluster in (CLUSTER, (2, 1), (1, 2)):
        p = plan(tile=(*TILE, 64), cluster=cluster, tiles=(cluster[0], cluster[1], 1))
        for rank in range(p.cluster_size):
            _, copies = _on_host(attempt.code, attempt.answer, cluster, rank,
                                 lambda k, r, l, s: k.load(r, l, s))
            problem = _copy_problem(copies, p, rank, cluster)
            if problem:
                return problem
    return None


LOADS = cluster_exercise(
    *EX5, _wrong_copy,
    passes=lambda a: ("for every CTA of 2x2, 2x1 and 1x2 clusters your load issues one copy of A "
                      "and one of B, k-tile state.count into stage state.index, on the stage's full "
                      "barrier, multicast to the CTAs the planner says; compiled for 2x2, the PTX "
                      "has the 4 multicast loads."))


@LOADS.checker
def check_multicast_loads(cls) -> Result:
    """``cls``: your subclass of ``ClusterHopperGemm`` whose ``load`` issues the two copies."""
    return LOADS.check(cls)


def _view(seen, what: str) -> str:
    """("B's ring", 1) -> "stage 1 of B's ring", for a message; anything else as it is."""
    if isinstance(seen, tuple) and len(seen) == 2 and isinstance(seen[0], str):
        return f"{what} {seen[1]} of {seen[0].replace(' k-tiles', '').rstrip(chr(39) + 's')}"
    return str(seen)


def _copy_problem(copies, p, rank, cluster) -> str | None:
    where = f"CTA rank {rank} of a {cluster[0]}x{cluster[1]} cluster"
    atoms = sorted(str(c["atom"]) for c in copies)
    if atoms != ["A's atom", "B's atom"]:
        return (f"{where}: your load issues {len(copies)} copies ({', '.join(atoms) or 'none'}); "
                "one k-tile needs exactly one copy with loads.tma_a and one with loads.tma_b")
    width = max(4, p.cluster_size)
    for c in copies:
        op = str(c["atom"])[0]
        if c["src"] != (f"{op}'s k-tiles", K_TILE):
            return (f"{where}: the copy of {op} reads {_view(c['src'], 'k-tile')}; it must read "
                    f"k-tile state.count ({K_TILE}) of {op}: loads.t{op}g{op}[(None, state.count)]")
        if c["dst"] != (f"{op}'s ring", STAGE):
            return (f"{where}: the copy of {op} writes {_view(c['dst'], 'stage')}; it must write "
                    f"stage state.index ({STAGE}) of {op}'s ring: loads.t{op}s{op}[(None, state.index)]")
        if c["bar"] != ("full barrier", STAGE):
            return (f"{where}: the copy of {op} has tma_bar_ptr={c['bar']}: its bytes must "
                    "complete the stage's full barrier (ring.producer_get_barrier(state)), or "
                    "the consumers wait for them forever")
        want = p.mask(op, 0, 0, rank)
        if c["mask"] in (0, None) and want == 1 << rank:
            continue  # not shared: a plain load, whose mask (0 or none) means "this CTA"
        if c["mask"] != want:
            shown = "none" if c["mask"] is None else fmt_mask(c["mask"], width)
            swapped = c["mask"] == p.mask("B" if op == "A" else "A", 0, 0, rank)
            return (f"{where}: the copy of {op} goes to CTAs {shown}, but those sharing its {op} "
                    f"tile are {fmt_mask(want, width)}"
                    + (": you passed the other operand's mask" if swapped else ""))
    return None


EX6 = ("Exercise 6 (lab): another cluster shape",
       "an operand is multicast only when more than one CTA shares its tile: A when CN > 1, B "
       "when CM > 1; the prefetch variant issues loads in two places (prologue, mainloop).")


@kernel_checker(*EX6)
def check_cluster_lab(cluster, multicast_loads) -> Result:
    """Your ``cluster`` shape and your prediction of its multicast TMA load instructions; the
    kernel is compiled with it beside the 1x1 kernel (registers, loads); timed on an H100."""
    from ..inspect import compile_here
    from ..errors import ShapeError
    from ..kernels.hopper_gemm_cluster import ENTRY, check_cluster, expected_multicast_loads

    title = EX6[0]
    cluster, guess = answered(cluster, "cluster"), answered(multicast_loads, "multicast_loads")
    try:
        cluster = check_cluster(cluster)
    except ShapeError as e:
        return failed(title, f"the course kernel refuses this cluster shape: {e.what} ({e.fix})")
    if cluster == (1, 1):
        return failed(title, "1x1 is the course kernel itself, the baseline the lab compares "
                      "with: pick a cluster of 2 or more CTAs, e.g. (2, 1)")
    want = expected_multicast_loads(cluster)
    rows = []
    for shape in dict.fromkeys((cluster, (1, 1))):
        rep = compile_here(ENTRY.kernel(tile=TILE, cluster=shape), *gemm_args(None),
                           name=f"cluster {shape}")
        rows.append(f"{shape[0]}x{shape[1]}: {rep.registers} registers, "
                    f"{rep.count('TMA multicast loads')} multicast + "
                    f"{rep.count('TMA loads') - rep.count('TMA multicast loads')} plain TMA loads")
    measured = "; ".join(rows)
    shared = [op for op, n in (("A", cluster[1]), ("B", cluster[0])) if n > 1]
    why = (f"{' and '.join(shared)} {'is' if len(shared) == 1 else 'are'} shared in a "
           f"{cluster[0]}x{cluster[1]} cluster, and the prefetch variant loads in 2 places "
           f"(prologue, mainloop): {len(shared)} x 2 = {want}")
    if isinstance(guess, bool) or guess != want:
        return failed(title, f"you predict {guess!r} multicast loads for {cluster[0]}x{cluster[1]}; "
                      f"the compiler made: {measured}. {why[0].upper() + why[1:]}.")
    p = plan(tile=(*TILE, 64), cluster=cluster, tiles=(cluster[0], cluster[1], 1))
    message = (f"right: {why}. Compiled: {measured}. Each CTA reads {p.l2_bytes(0, 0, 0) // 1024} "
               f"KiB per stage from L2 instead of {p.tx_bytes(0, 0, 0) // 1024} KiB (the planner).")
    if gpu_here("sm_90a"):
        run = run_on_gpu(None, f"ClusterHopperGemm(tile_mn={TILE}, cluster_mn={cluster})"
                         if cluster != (1, 1) else f"HopperGemm(tile_mn={TILE})",
                         baseline=f"HopperGemm(tile_mn={TILE})")
        message += " On the GPU: " + run.message
    else:
        message += (" Nothing was timed (no H100 here): whether the saved L2 traffic makes the "
                    "kernel faster shows only in an H100 run, timed beside the 1x1 kernel.")
    return passed(title, message)
