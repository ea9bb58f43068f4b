"""The course's Hopper GEMM with thread-block clusters and TMA multicast (notebook 05).

The 1x1 kernel (``hopper_gemm.HopperGemm``) was written with the cluster shape as a parameter
from the start, so the multicast machinery is in it and costs nothing at 1x1:

* the ctaMasks: ``cute.make_layout_image_mask(cta_layout, coord, mode=1)`` for A (the CTAs of
  this CTA's row of the cluster, which share its rows of C) and ``mode=0`` for B (its column);
* each CTA's slice of the box: ``cpasync.tma_partition(tma_a, cluster_coord[1], ...)`` gives
  this CTA 1/CN of A's box and 1/CM of B's, and ``make_tiled_tma_atom(..., num_multicast=)``
  sizes the TMA box to that slice;
* the full barrier's ``tx_count``: the whole A and B tiles, since every slice lands in every
  CTA of its mask (the CTA issues only a slice but receives all of them);
* the empty barrier's arrival count: ``(CM + CN - 1)`` CTAs x 8 consumer warps, because a
  producer overwrites a stage in every CTA of its row (A) and column (B), so all of them must
  have released it; ``PipelineTmaAsync`` makes each consumer warp arrive on the empty barrier of
  each of those CTAs (a remote ``mbarrier.arrive.shared::cluster`` through ``mapa``);
* cluster-wide barrier init: ``pipeline_init_arrive`` / ``pipeline_init_wait`` make every CTA's
  barriers initialised before any peer can multicast into them or arrive on them;
* cluster-wide teardown: the epilogue starts with ``cluster_arrive`` + ``cluster_wait`` instead
  of ``sync_threads`` when the cluster has more than one CTA, so that no CTA reuses its ring or
  exits while a peer may still arrive on its empty barriers.

``HopperGemm`` itself accepts the pairs (2, 1) and (1, 2). ``ClusterHopperGemm`` here is the
same kernel for every cluster shape that :func:`check_cluster` accepts (2x2 included): it only
replaces the constructor's list of shapes by that check. It also carries one experiment that is
not part of the multicast change, L2 eviction hints on the TMA loads (``l2_hints``).

``kernel_facts(cluster)`` reads back from a trace of the kernel (no GPU, no compile) the masks,
transaction bytes and arrival counts it really uses, so tests can hold them against the CPU
planner (``cutecourse.models.multicast``). ``launcher`` / ``gemm`` run it on an H100.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from unittest import mock

from ..errors import CourseError, ShapeError
from . import hopper_gemm as hg

#: The cluster shapes the course runs and measures.
CLUSTERS = ((1, 1), (2, 1), (1, 2), (2, 2))
#: The ctaMask is 16 bits: a multicast reaches at most 16 CTAs.
MAX_CLUSTER_CTAS = 16
#: L2 cache-policy operands of a TMA load (the 64-bit values CUTLASS's ``CacheHintSm90`` uses).
EVICT_FIRST = 0x12F0000000000000
EVICT_LAST = 0x14F0000000000000
#: ``l2_hints`` choices: (A's policy, B's policy). "a_first" is CUTLASS's choice for its raster
#: (A evict-first, B evict-last); "b_first" the reverse. Which helps depends on which operand's
#: tiles more CTAs in flight share, i.e. on the tile order (this kernel walks bands of M).
L2_HINTS = {"a_first": (EVICT_FIRST, EVICT_LAST), "b_first": (EVICT_LAST, EVICT_FIRST)}


def check_cluster(cluster_mn, tile_mn=(128, 256), tiles_mn=None) -> tuple[int, int]:
    """Refuse a cluster shape that cannot work, saying why; return it as a tuple.

    ``tiles_mn``: the grid of C tiles (ceil(M / tile_m), ceil(N / tile_n)), when known.
    """
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
    if tiles_mn is not None:
        tm, tn = tiles_mn
        if tm % cm or tn % cn:
            raise ShapeError(
                f"the C tiles form a {tm}x{tn} grid (tile {tile_mn[0]}x{tile_mn[1]}), which is not a "
                f"whole number of {cm}x{cn} clusters: the CTAs past the edge would have no tile, and "
                "the masks (closed form: every CTA of the row/column) would name them",
                f"make ceil(M/{tile_mn[0]}) a multiple of {cm} and ceil(N/{tile_mn[1]}) a multiple "
                f"of {cn} (pad M or N), or use a smaller cluster")
    return cm, cn


class ClusterHopperGemm(hg.HopperGemm):
    """``HopperGemm`` for every cluster shape :func:`check_cluster` accepts (module docstring)."""

    def __init__(self, tile_mn=(128, 256), variant: str = "prefetch", cluster_mn=(2, 1),
                 prefetch_stages: int | None = None, stages: int | None = None,
                 l2_hints: str | None = None):
        cluster_mn = check_cluster(cluster_mn, tile_mn)  # instead of HopperGemm's short list
        if l2_hints is not None and l2_hints not in L2_HINTS:
            raise CourseError(f"l2_hints={l2_hints!r} is not a policy pair this kernel knows",
                              f"use None or one of {list(L2_HINTS)}")
        # Construct as 1x1 (HopperGemm's list of shapes stops at the pairs), then set the shape:
        # every line of the kernel reads self.cluster_mn at trace time.
        super().__init__(tile_mn, variant, (1, 1), prefetch_stages, stages)
        self.cluster_mn = cluster_mn
        self.l2_hints = l2_hints

    def _issue_tma(self, ring, ops, state, pred=None):
        """The 1x1 kernel's loads, optionally with L2 eviction hints (not part of the diff that
        turns clusters on: a separate experiment, ``l2_hints="a_first"`` or ``"b_first"``)."""
        if self.l2_hints is None:
            return hg.HopperGemm._issue_tma(ring, ops, state, pred=pred)
        policy_a, policy_b = L2_HINTS[self.l2_hints]
        bar = ring.producer_get_barrier(state)
        hg.cute.copy(ops.tma_a, ops.tAgA[(None, state.count)], ops.tAsA[(None, state.index)],
                     tma_bar_ptr=bar, mcast_mask=ops.a_mcast_mask, pred=pred,
                     cache_policy=hg.cutlass.Int64(policy_a))
        hg.cute.copy(ops.tma_b, ops.tBgB[(None, state.count)], ops.tBsB[(None, state.index)],
                     tma_bar_ptr=bar, mcast_mask=ops.b_mcast_mask, pred=pred,
                     cache_policy=hg.cutlass.Int64(policy_b))


def compile_target(variant: str = "prefetch", tile=(128, 256), cluster=(2, 1),
                   in_dtype: str = "float16", out_dtype: str = "float16",
                   prefetch_stages: int | None = None, stages: int | None = None,
                   l2_hints: str | None = None):
    """(jit_fn, args) for ``cutecourse.inspect.compile_report`` (all params JSON-able)."""
    import cuda.bindings.driver as cuda

    kernel = ClusterHopperGemm(tuple(tile), variant, tuple(cluster), prefetch_stages, stages,
                               l2_hints)
    a, b, c = hg.fake_operands(in_dtype, out_dtype)
    return kernel, (a, b, c, cuda.CUstream(0))


#: PTX of a multicast TMA load, and of any TMA load (CTA-local loads write ``shared::cta``).
PTX_MULTICAST_LOAD = r"^cp\.async\.bulk\.tensor.*multicast::cluster"
PTX_TMA_LOAD = r"^cp\.async\.bulk\.tensor\.\w+\.shared::(cta|cluster)\.global"
#: Where each variant's PTX issues TMA loads: prefetch in its prologue and its mainloop; the
#: compiler variant's pipeliner writes a prologue and a steady loop; naive, one loop body.
_LOAD_PLACES = {"naive": 1, "prefetch": 2, "compiler": 2}


def expected_multicast_loads(cluster_mn, variant: str = "prefetch") -> int:
    """How many multicast TMA load instructions the kernel's PTX holds for ``cluster_mn``.

    One copy per operand per place the variant issues loads. An operand is multicast only when
    more than one CTA shares its tile: A when CN > 1 (CTAs of the same row of C), B when CM > 1.
    """
    cm, cn = cluster_mn
    return _LOAD_PLACES[variant] * ((cn > 1) + (cm > 1))


# ------------------------------------------------------------------------------------------
# What the kernel really uses, read back from a trace (dry run: no compile, no GPU)
# ------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _dry_run():
    """``cute.compile`` traces the kernel to IR and stops: the DSL's dry-run setting
    (``CUTE_DSL_DRYRUN``, read once at import into its settings object), flipped for one call."""
    from cutlass.cutlass_dsl import CuTeDSL

    envar = CuTeDSL._get_dsl().envar
    saved, envar.dryrun = envar.dryrun, True
    try:
        yield
    finally:
        envar.dryrun = saved


@dataclass
class KernelFacts:
    """The multicast parameters one ``ClusterHopperGemm`` passes to CuTe, for every rank."""

    cluster: tuple[int, int]
    tile: tuple[int, int]
    masks: dict[int, dict[str, int]] = field(default_factory=dict)  # rank -> {"A": m, "B": m}
    tx_count: int = 0  # the full barrier's expected bytes per stage
    empty_arrivals: int = 0  # the empty barrier's arrival count per stage
    multicast_copies: dict[str, int] = field(default_factory=dict)  # operand -> copy call sites
    plain_copies: dict[str, int] = field(default_factory=dict)


def kernel_facts(cluster=(2, 1), tile=(128, 256), variant: str = "prefetch",
                 kernel_class=None) -> KernelFacts:
    """Trace the kernel for ``cluster`` and record what it hands CuTe.

    Every TMA load copy is recorded with its ``mcast_mask``; a mask that came from
    ``cute.make_layout_image_mask`` is traced back to the layout and mode it was built from and
    evaluated here, with CuTe, for every rank of the cluster (the kernel evaluates it for its own
    rank at run time, from the same layout). ``PipelineTmaAsync.create`` is recorded for the
    full barrier's ``tx_count`` and the empty barrier's arrival count. ``kernel_class``:
    ``ClusterHopperGemm`` (default) or ``hopper_gemm.HopperGemm`` itself (for the shapes it takes).
    """
    import cutlass.cute as cute
    import cutlass.pipeline as pipeline
    from cutlass.cute.nvgpu import cpasync  # noqa: F401  (the kernel's own module references)

    from ..layouts import parse_layout, run_on_host

    if tile[0] == tile[1]:
        raise ShapeError(f"tile {tile}: kernel_facts tells A's loads from B's by their size",
                         "use a tile whose M and N differ, e.g. (128, 256)")
    if kernel_class is None:
        jit_fn, args = compile_target(variant, tuple(tile), tuple(cluster))
    else:
        import cuda.bindings.driver as cuda

        jit_fn = kernel_class(tuple(tile), variant, tuple(cluster))
        args = (*hg.fake_operands(), cuda.CUstream(0))
    a_elems, b_elems = tile[0] * hg.TILE_K, tile[1] * hg.TILE_K
    built: dict[int, tuple[str, int]] = {}  # id(mask value) -> (layout text, mode)
    copies: list[tuple[str, object]] = []
    created: dict = {}
    real_mask, real_copy, real_create = (cute.make_layout_image_mask, cute.copy,
                                         pipeline.PipelineTmaAsync.create)

    def image_mask(layout, coord, mode, **kw):
        out = real_mask(layout, coord, mode, **kw)
        built[id(out)] = (str(layout), mode)
        return out

    def copy(atom, src, dst, **kw):
        if "mcast_mask" in kw and kw.get("tma_bar_ptr") is not None:
            size = cute.size(dst)
            operand = "A" if size == a_elems else "B" if size == b_elems else "?"
            copies.append((operand, built.get(id(kw["mcast_mask"]), kw["mcast_mask"])))
        return real_copy(atom, src, dst, **kw)

    def create(**kw):
        created.update(kw)
        return real_create(**kw)

    with mock.patch.object(cute, "make_layout_image_mask", image_mask), \
            mock.patch.object(cute, "copy", copy), \
            mock.patch.object(pipeline.PipelineTmaAsync, "create", staticmethod(create)), \
            _dry_run():
        cute.compile(jit_fn, *args)

    cm, cn = cluster
    facts = KernelFacts((cm, cn), tuple(tile))
    sources: dict[str, tuple[str, int] | None] = {}
    for operand, mask in copies:
        is_mc = isinstance(mask, tuple)
        bucket = facts.multicast_copies if is_mc else facts.plain_copies
        bucket[operand] = bucket.get(operand, 0) + 1
        sources[operand] = mask if is_mc else None
    shapes = {op: parse_layout(src[0]) for op, src in sources.items() if src is not None}

    def evaluate():
        out = {}
        for op, (shape, stride) in shapes.items():
            lay = cute.make_layout(shape, stride=stride)
            mode = sources[op][1]
            out[op] = [int(real_mask(lay, lay.get_flat_coord(r), mode)) for r in range(cm * cn)]
        return out

    evaluated = run_on_host(evaluate) if shapes else {}
    for r in range(cm * cn):
        # an operand loaded without multicast lands in this CTA only: mask = its own bit
        facts.masks[r] = {op: evaluated[op][r] if op in evaluated else 1 << r for op in "AB"}
    facts.tx_count = int(created["tx_count"])
    facts.empty_arrivals = int(created["consumer_group"].size)
    return facts


# ------------------------------------------------------------------------------------------
# Running it (H100)
# ------------------------------------------------------------------------------------------
_COMPILED: dict = {}


def launcher(a, b, c, cluster=(2, 1), tile=(128, 256), variant: str = "prefetch",
             prefetch_stages: int | None = None, stages: int | None = None,
             l2_hints: str | None = None):
    """Validate, compile once, and return ``fn`` that launches ``c = a @ b.T`` (for benchmarks)."""
    import cuda.bindings.driver as cuda
    import torch
    from cutlass.cute.runtime import from_dlpack

    from ..modes import require_gpu

    hg.validate(a, b, c.dtype, tile, stages)
    tiles_mn = (-(-a.shape[0] // tile[0]), -(-b.shape[0] // tile[1]))
    cluster = check_cluster(cluster, tile, tiles_mn)
    if c.shape != (a.shape[0], b.shape[0]):
        raise ShapeError(f"c is {tuple(c.shape)}, expected {(a.shape[0], b.shape[0])}",
                         "allocate c as torch.empty(M, N)")
    require_gpu("sm_90a")
    args = [from_dlpack(t, assumed_align=16).mark_layout_dynamic(leading_dim=1) for t in (a, b, c)]
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    key = (variant, tuple(tile), a.dtype, c.dtype, cluster, prefetch_stages, stages, l2_hints)
    if key not in _COMPILED:
        kernel = ClusterHopperGemm(tuple(tile), variant, cluster, prefetch_stages, stages,
                                   l2_hints)
        _COMPILED[key] = hg.cute.compile(kernel, *args, stream)
    compiled = _COMPILED[key]

    def fn():
        compiled(*args, stream)

    return fn


def gemm(a, b, cluster=(2, 1), out_dtype=None, tile=(128, 256), variant: str = "prefetch"):
    """C = A @ B.T with a ``cluster`` of CTAs sharing A and B tiles by TMA multicast."""
    import torch

    out_dtype = a.dtype if out_dtype is None else out_dtype
    c = torch.empty((a.shape[0], b.shape[0]), dtype=out_dtype, device=a.device)
    launcher(a, b, c, cluster, tile, variant)()
    return c


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


def paired_ratio(result, case: str, baseline: str = "cluster 1x1") -> str:
    """How ``case`` compares with ``baseline`` in a result, and whether the run can tell.

    The interleaved benchmark times every case once per round, so repeat i of one case ran in
    the same round as repeat i of the other: their ratio, repeat by repeat, shows how much of a
    difference in the medians is noise (the clocks drift between rounds, the pairs together).
    """
    import statistics

    a, b = result.row(case), result.row(baseline)
    ratio = b.us / a.us
    pairs = [y / x for x, y in zip(a.us_repeats, b.us_repeats)]
    faster = sum(p > 1 for p in pairs)
    n = len(pairs)
    if faster >= 0.9 * n:
        verdict = f"faster in {faster} of {n} paired repeats"
    elif faster <= 0.1 * n:
        verdict = f"slower in {n - faster} of {n} paired repeats"
    else:
        verdict = f"no consistent difference: faster in {faster} of {n} paired repeats"
    return (f"{case} vs {baseline}: {ratio:.3f}x (medians), paired repeats "
            f"{statistics.median(pairs):.3f}x [{min(pairs):.2f} .. {max(pairs):.2f}]; {verdict}")


def kernel_cluster_lines(cls=None) -> str:
    """Every line of the 1x1 kernel's source that the cluster shape touches (with numbers)."""
    import inspect
    import re

    cls = cls or hg.HopperGemm
    keep = re.compile(r"self\.cluster_mn|mcast|cluster_coord|cluster_(arrive|wait|idx|dim)|in_cluster"
                      r"|image_mask")
    out = []
    for obj in (hg.multicast_masks, hg.make_ring, cls):  # helpers the kernel calls
        lines, first = inspect.getsourcelines(obj)
        out += [f"{first + i:4d}  {line.rstrip()}" for i, line in enumerate(lines)
                if keep.search(line) and not line.strip().startswith(("#", '"', "``"))]
    return "\n".join(out)
