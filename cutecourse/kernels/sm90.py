"""Hopper (sm_90a) building blocks that every course GEMM is made of.

The one-CTA-per-tile kernel (``hopper_gemm``), its cluster version (``hopper_gemm_cluster``) and
the persistent kernel (``hopper_gemm_persistent``) differ in *schedule*: who loads, who computes,
which tile when. The pieces below are the same in all of them, so they live here once:

* host side: the WGMMA tiling (:func:`tiled_mma`), the swizzled smem layouts (:func:`smem_layouts`),
  the TMA atoms (:func:`tma_atoms`: :func:`tma_load` for A and B, multicast when a cluster shares
  the tile, and :func:`tma_store` for C);
* device side: this CTA's TMA views of A and B (:func:`tma_views`) and its multicast masks
  (:func:`multicast_masks`), the smem ring's barriers (:func:`make_ring`), one k-tile's loads
  (:func:`issue_tma`) and MMAs (:func:`issue_mma`), the tile order (:func:`band_tile`), and the
  TMA-store epilogue (:class:`Epilogue`, :func:`store_tile`, :func:`finish_stores`).

Every function takes the cluster shape (CM, CN); at (1, 1) each one reduces to the plain
single-CTA code (no mask, a CTA-local copy op, arrivals from this CTA only).
"""

from __future__ import annotations

from dataclasses import dataclass

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import cpasync, warpgroup

from ..errors import CourseError, DTypeError
from ..models.gemm_plan import IN_DTYPES, OUT_DTYPES, TILE_K
from ..models.tile_order import band_coord
from .barriers import Barrier
from .epilogue_op import apply_at

DTYPES = {"float16": cutlass.Float16, "bfloat16": cutlass.BFloat16, "float32": cutlass.Float32,
          "float8_e4m3fn": cutlass.Float8E4M3FN}
#: The DSL type of every dtype a kernel's other tensors may have (scratch, epilogue operands, the
#: operands a kernel describes): the one table the host's fakes read.
TENSOR_TYPES = {**DTYPES, "int32": cutlass.Int32, "uint8": cutlass.Uint8}
#: K-major A (M, K) and B (N, K), N-major C (M, N): all "row-major" in CuTe's layout enum.
ROW_MAJOR = utils.LayoutEnum.ROW_MAJOR


def dtype_name(dtype) -> str:
    for name, d in DTYPES.items():
        if d is dtype:
            return name
    raise DTypeError(f"dtype {dtype} is not supported by the Hopper GEMM",
                     f"use inputs in {IN_DTYPES} and outputs in {OUT_DTYPES}")


# -- host side ---------------------------------------------------------------------------------
def tiled_mma(a_dtype, acc_dtype, warpgroups: int, tile_n: int, wgmma_n: int | None = None):
    """``warpgroups`` warpgroups stacked along M, each issuing 64 x tile_n wgmmas (A, B from smem);
    ``wgmma_n``: narrower wgmmas, tile_n / wgmma_n of them side by side."""
    return sm90_utils.make_trivial_tiled_mma(
        a_dtype, a_dtype, warpgroup.OperandMajorMode.K, warpgroup.OperandMajorMode.K, acc_dtype,
        (warpgroups, 1, 1), tiler_mn=(64, wgmma_n or tile_n))


def smem_layouts(tile_mnk, a_dtype, c_dtype, stages: int, epi_tile, epi_stages: int):
    """The 128B-swizzled smem layouts: A and B rings (tile, TILE_K, stages), C buffers."""
    return (sm90_utils.make_smem_layout_a(ROW_MAJOR, tile_mnk, a_dtype, stages),
            sm90_utils.make_smem_layout_b(ROW_MAJOR, tile_mnk, a_dtype, stages),
            sm90_utils.make_smem_layout_epi(c_dtype, ROW_MAJOR, epi_tile, epi_stages))


def tma_load(tensor, smem_layout_staged, tile, mcast: int):
    """TMA atom and view for loading ``tile`` boxes of ``tensor`` into one ring stage.

    ``mcast`` > 1: the tile is shared by that many CTAs of a cluster, so each loads a 1/mcast
    slice of the box and multicasts it to all of them (a multicast copy op).
    """
    op = cpasync.CopyBulkTensorTileG2SOp() if mcast == 1 else cpasync.CopyBulkTensorTileG2SMulticastOp()
    return cpasync.make_tiled_tma_atom(op, tensor, cute.slice_(smem_layout_staged, (None, None, 0)),
                                       tile, num_multicast=mcast)


def tma_store(c, sC_layout, epi_tile):
    """TMA atom and view for storing ``epi_tile`` boxes of C from one smem buffer."""
    return cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileS2GOp(), c,
                                       cute.slice_(sC_layout, (None, None, 0)), epi_tile)


def tma_atoms(a, b, c, sA_layout, sB_layout, sC_layout, tile_mn, cluster_mn, epi_tile, tile_k=TILE_K):
    """(tma_a, gA, tma_b, gB, tma_c, gC): the TMA atoms and views of one GEMM. A's tile is shared
    by the CN CTAs of a cluster row, B's by the CM of a column: one load each, multicast (at 1x1:
    plain loads). ``tile_k``: 128 for 8-bit inputs (one 128-byte row)."""
    cm, cn = cluster_mn
    tma_a, gA = tma_load(a, sA_layout, (tile_mn[0], tile_k), mcast=cn)
    tma_b, gB = tma_load(b, sB_layout, (tile_mn[1], tile_k), mcast=cm)
    tma_c, gC = tma_store(c, sC_layout, epi_tile)
    return tma_a, gA, tma_b, gB, tma_c, gC


# -- device side: clusters, views, the ring ----------------------------------------------------
def multicast_masks(cluster_mn):
    """(cluster layout, this CTA's coordinate in it, A mask, B mask), traced inside a kernel.

    A mask has one bit per CTA rank of the cluster that receives a multicast load (0 = this CTA
    only). A tile of A is shared by the CTAs of one cluster row (same m, every n): the image of
    this CTA's coordinate along mode 1; B's by the CTAs of one cluster column (mode 0).
    """
    cta_layout = cute.make_layout((*cluster_mn, 1))
    cta_rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
    cluster_coord = cta_layout.get_flat_coord(cta_rank)
    a_mask = cute.make_layout_image_mask(cta_layout, cluster_coord, mode=1) if cluster_mn[1] > 1 else 0
    b_mask = cute.make_layout_image_mask(cta_layout, cluster_coord, mode=0) if cluster_mn[0] > 1 else 0
    return cta_layout, cluster_coord, a_mask, b_mask


def tma_views(tma_a, tma_b, cta_layout, cluster_coord, sA, sB, gA, gB):
    """(tAsA, tAgA, tBsB, tBgB): this CTA's TMA views of the smem ring and of global A and B.

    ``tAgA[(None, ..., k)]`` is k-tile k in global memory, ``tAsA[(None, s)]`` ring stage s. With
    multicast, A's box is split among the CTAs of this CTA's cluster row (its slice:
    ``cluster_coord[1]``) and B's among those of its column.
    """
    tAsA, tAgA = cpasync.tma_partition(
        tma_a, cluster_coord[1], cute.make_layout(cute.slice_(cta_layout, (0, None, 0)).shape),
        cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2))
    tBsB, tBgB = cpasync.tma_partition(
        tma_b, cluster_coord[0], cute.make_layout(cute.slice_(cta_layout, (None, 0, 0)).shape),
        cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2))
    return tAsA, tAgA, tBsB, tBgB


def make_ring(barriers, stages: int, dtype, sA_layout, sB_layout, cta_layout, cluster_mn,
              consumer_threads: int):
    """The smem ring's barriers: full[s] completes when stage s's TMA bytes (one A tile + one B
    tile, whatever CTA issued each slice) have landed; empty[s] when every consumer warp of this
    CTA *and of each CTA it multicasts to* has released it (one arrive per warp): CM + CN - 1 CTAs
    share a stage's contents, so all of them must be done before any refills it."""
    stage_bytes = (cute.size_in_bytes(dtype, cute.slice_(sA_layout, (None, None, 0)))
                   + cute.size_in_bytes(dtype, cute.slice_(sB_layout, (None, None, 0))))
    sharing = cluster_mn[0] + cluster_mn[1] - 1
    return pipeline.PipelineTmaAsync.create(
        barrier_storage=barriers,
        num_stages=stages,
        producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
        consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread,
                                                 sharing * consumer_threads // 32),
        tx_count=stage_bytes,
        cta_layout_vmnk=cute.make_layout((1, *cta_layout.shape)),
        defer_sync=True,
    )


def band_tile(linear, tiles_m, tiles_n, group_m: int):
    """(m, n) of work item ``linear`` in bands of ``group_m`` rows: the L2-friendly tile order of
    ``models/tile_order.py``, whose CPU model is this same arithmetic."""
    return band_coord(linear, tiles_m, tiles_n, group_m, min_=cutlass.min)


# -- device side: one k-tile -------------------------------------------------------------------
@dataclass
class Loads:
    """What a producer needs to load k-tiles: TMA atoms, this CTA's views, multicast masks; and
    optionally (``maps``) pointers to tensor maps in global memory that replace the atoms' own
    (the grouped GEMMs rewrite one per group)."""

    tma_a: object
    tAgA: object  # (box, k_tiles): A's k-tiles of this CTA's tile-row
    tAsA: object  # (box, stages): the A ring
    a_mcast_mask: object
    tma_b: object
    tBgB: object
    tBsB: object
    b_mcast_mask: object
    maps: tuple = (None, None)


@dataclass
class Mma:
    """What a consumer needs to compute: the tiled MMA, its smem fragments, the accumulators."""

    tiled_mma: object
    tCrA: object  # (mma, mma_m, k_blocks, stages): views of the A ring
    tCrB: object
    acc: object


def make_mma(tiled_mma, slice_index, sA, sB, c_tile, acc_dtype) -> Mma:
    """The MMA of one consumer: warpgroup ``slice_index``'s views of the A and B rings (wgmma smem
    descriptors, not copies) and its fp32 accumulators for a C tile shaped like ``c_tile``."""
    thr_mma = tiled_mma.get_slice(slice_index)
    tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))
    tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
    acc = cute.make_rmem_tensor(thr_mma.partition_C(c_tile).shape, acc_dtype)
    tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
    return Mma(tiled_mma, tCrA, tCrB, acc)


def issue_tma(ring, loads: Loads, state, k=None, pred=None, policies=(None, None)):
    """TMA-load k-tile ``k`` (default: ``state.count``) of A and B into ring stage ``state.index``.

    One elected thread issues both copies; both complete on the stage's full barrier, which
    ``producer_acquire`` armed with the stage's byte count. ``pred``: a predicate tensor (the
    compiler-pipelined loop issues from every warp, predicated). ``policies``: optional L2
    cache-policy operands for A and B. The copies go through ``loads.maps`` where they are set.
    """
    k = state.count if k is None else k
    bar = ring.producer_get_barrier(state)
    cute.copy(loads.tma_a, loads.tAgA[(None, k)], loads.tAsA[(None, state.index)],
              tma_bar_ptr=bar, mcast_mask=loads.a_mcast_mask, pred=pred, cache_policy=policies[0],
              tma_desc_ptr=loads.maps[0])
    cute.copy(loads.tma_b, loads.tBgB[(None, k)], loads.tBsB[(None, state.index)],
              tma_bar_ptr=bar, mcast_mask=loads.b_mcast_mask, pred=pred, cache_policy=policies[1],
              tma_desc_ptr=loads.maps[1])


def issue_mma(mma: Mma, stage):
    """acc += A_tile @ B_tile.T from ring stage ``stage``: TILE_K/16 async wgmmas, one group.

    ``warpgroup.fence`` orders the accumulator registers before the wgmmas read them;
    ``commit_group`` closes the batch, so ``wait_group(n)`` can later wait for all but n batches.
    """
    warpgroup.fence()
    for kb in range(cute.size(mma.tCrA, mode=[2])):
        coord = (None, None, kb, stage)
        cute.gemm(mma.tiled_mma, mma.acc, mma.tCrA[coord], mma.tCrB[coord], mma.acc)
    warpgroup.commit_group()


@cute.jit
def mma_tile(ring, mma: Mma, read, release, k_tiles, turn=None):
    """The consumers' mainloop of one tile (warp-specialized kernels): acc = 0, then acc += each of
    the next ``k_tiles`` ring stages, releasing each stage once its MMAs are done. Returns the
    advanced (read, release) pipeline states: the caller's run-time loop must assign them itself
    to carry them (the DSL carries what the loop body assigns or advances).

    One batch of wgmmas stays in flight: when ``wait_group(1)`` returns, k-tile k-1's MMAs are done
    with their stage, which goes back to the producer; the last one after ``wait_group(0)``
    (``k_tiles`` >= 1: there is one). ``turn``: a ``barriers.MmaTurn`` (ping-pong): wait for it
    before the first MMA, pass it on once the last is issued, before waiting for them to finish.
    """
    mma.acc.fill(0.0)
    if cutlass.const_expr(turn is not None):
        turn.wait()
    for k in cutlass.range(k_tiles, unroll=1):
        ring.consumer_wait(read)
        issue_mma(mma, read.index)
        warpgroup.wait_group(1)
        if k > 0:
            ring.consumer_release(release)
            release.advance()
        read.advance()
    if cutlass.const_expr(turn is not None):
        turn.pass_on()
    warpgroup.wait_group(0)
    ring.consumer_release(release)
    release.advance()
    return read, release


# -- device side: the epilogue -----------------------------------------------------------------
class Epilogue:
    """fp32 accumulators -> C dtype -> smem (stmatrix) -> TMA store, one ``epi_tile`` at a time.

    Built once per CTA (the register -> smem copy and the TMA-store pipeline); then
    :func:`store_tile` writes one C tile and :func:`finish_stores` drains the stores. ``threads``
    take part (they own the accumulators); ``barrier_threads`` is None when they are the whole
    CTA (a plain ``bar.sync``), else their count (a named barrier, ``barrier_id``, that the other
    warps, e.g. a producer, never wait on). ``store_warp`` issues the TMA stores; ``first_buffer``:
    where this epilogue's ``epi_stages`` buffers start among the C buffers in smem (each ping-pong
    warpgroup has its own). ``op``: an ``epilogue_op.EpilogueOp`` applied to each fp32 accumulator
    before the conversion (None: none), ``operands`` the tensors it reads.
    """

    def __init__(self, tma_c, sC, tiled_mma, acc, thread, c_dtype, epi_tile, epi_stages: int,
                 threads: int, store_warp: int, barrier_threads=None, barrier_id: int = Barrier.EPILOGUE,
                 first_buffer: int = 0, op=None, operands=()):
        r2s_atom = sm90_utils.sm90_get_smem_store_op(ROW_MAJOR, elem_ty_d=c_dtype,
                                                     elem_ty_acc=acc.element_type)
        stmatrix = cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4), c_dtype)
        self.r2s = cute.make_tiled_copy_S(r2s_atom, cute.make_tiled_copy_C_atom(stmatrix, tiled_mma))
        thr_r2s = self.r2s.get_slice(thread)
        self.tRS_sC = thr_r2s.partition_D(sC)
        self.tRS_acc = self.r2s.retile(acc)
        self.rC_layout = cute.make_layout(cute.shape(thr_r2s.partition_S(sC))[:3])
        self.tma_c, self.sC, self.c_dtype, self.acc_dtype = tma_c, sC, c_dtype, acc.element_type
        self.epi_tile, self.epi_stages = epi_tile, epi_stages
        self.store_warp, self.barrier_threads, self.barrier_id = store_warp, barrier_threads, barrier_id
        self.first_buffer = first_buffer  # of the smem C buffers, this epilogue's first
        # The elementwise op (``epilogue_op.py``) and the tensors it reads; with an op, this
        # thread's MMA slice gives each accumulator's (row, column) in the tile.
        self.op, self.operands = op, tuple(operands)
        self.thr_mma = tiled_mma.get_slice(thread) if op is not None else None
        # at most epi_stages - 1 TMA stores in flight: a buffer is free again once acquired
        self.pipe = pipeline.PipelineTmaStore.create(
            num_stages=epi_stages, producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, threads))


# (Functions, not methods: the DSL treats an object whose method is called inside a run-time loop
# as carried through the loop, and a Python object cannot be.)
@cute.jit
def store_tile(epi: Epilogue, gC_tile, warp_idx, c_map=None, origin=(0, 0)):
    """Write the accumulators to the C tile ``gC_tile``, one ``epi_tile`` sub-tile at a time.
    ``c_map``: optional pointer to a tensor map in global memory to store with (grouped GEMM).
    ``origin``: the tile's first (row, column) in C, which the epilogue op is told (clamped to
    its operands where the tile pads C: ``epilogue_op.apply_at``)."""
    gC_epi = cute.zipped_divide(gC_tile, epi.epi_tile)
    bSG_sC, bSG_gC = cpasync.tma_partition(epi.tma_c, 0, cute.make_layout(1),
                                           cute.group_modes(epi.sC, 0, 2), gC_epi)
    n_epi = cute.size(gC_epi, mode=[1])
    epi_grid = cute.make_layout(gC_epi.shape[1], stride=(gC_epi.shape[1][1], 1))
    rC = cute.make_rmem_tensor_like(epi.rC_layout, epi.acc_dtype)
    # Plain locals, for the same reason: an object whose attribute is used inside a run-time
    # ``if`` would be carried through it.
    pipe, tma_c = epi.pipe, epi.tma_c
    if cutlass.const_expr(epi.op is not None):
        # (row, column) in the tile of each accumulator, in the order the r2s copy takes them
        tRS_cC = epi.r2s.retile(epi.thr_mma.partition_C(cute.make_identity_tensor(gC_tile.shape)))
    for e in cutlass.range_constexpr(n_epi):
        for v in cutlass.range_constexpr(cute.size(rC)):
            rC[v] = epi.tRS_acc[e * cute.size(rC) + v]
            if cutlass.const_expr(epi.op is not None):
                m, n = tRS_cC[e * cute.size(rC) + v]
                apply_at(epi.op, rC, v, origin[0] + m, origin[1] + n, epi.operands)
        rC_out = cute.make_rmem_tensor_like(epi.rC_layout, epi.c_dtype)
        rC_out.store(rC.load().to(epi.c_dtype))
        buf = epi.first_buffer + e % epi.epi_stages
        cute.copy(epi.r2s, rC_out, epi.tRS_sC[(None, None, None, buf)])
        # generic-proxy smem writes must be visible to the async proxy (TMA) before the store
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.barrier(barrier_id=epi.barrier_id, number_of_threads=epi.barrier_threads)
        if warp_idx == epi.store_warp:
            cute.copy(tma_c, bSG_sC[(None, buf)], bSG_gC[(None, epi_grid.get_hier_coord(e))],
                      tma_desc_ptr=c_map)
            pipe.producer_commit()
            pipe.producer_acquire()
        cute.arch.barrier(barrier_id=epi.barrier_id, number_of_threads=epi.barrier_threads)


@cute.jit
def finish_stores(epi: Epilogue, warp_idx):
    """The last TMA stores must finish reading smem before the CTA exits."""
    pipe = epi.pipe
    if warp_idx == epi.store_warp:
        pipe.producer_tail()


# -- L2 hints ----------------------------------------------------------------------------------
#: L2 cache-policy operands of a TMA load (the 64-bit values CUTLASS's ``CacheHintSm90`` uses).
EVICT_FIRST = 0x12F0000000000000
EVICT_LAST = 0x14F0000000000000
#: The named L2 hint pairs, (A's policy, B's policy): the table a name given for ``l2_hints=``
#: looks up (``configured.NAMED``) in the cluster and the persistent kernels alike. "a_first": A
#: evict-first, B evict-last (what CUTLASS's example 63 sets; its generic SM90 mainloop passes no
#: hint); "b_first" the reverse. Which helps depends on which operand's tiles more CTAs in flight
#: share, i.e. on the tile order. A new pair is an entry here; a hint a pair cannot say (one that
#: changes per tile, say) is a subclass overriding ``load_policies``.
L2_HINT_PAIRS = {"a_first": (EVICT_FIRST, EVICT_LAST), "b_first": (EVICT_LAST, EVICT_FIRST)}


def check_l2_hints(pair, kernel):
    """``pair`` if it is what ``l2_hints=`` may be once its name is looked up: None (no hints) or
    (A's policy, B's policy), each a 64-bit operand or None (a list too: JSON arguments); else a
    ``CourseError`` naming the pairs."""
    if pair is None or (isinstance(pair, (tuple, list)) and len(pair) == 2
                        and all(p is None or isinstance(p, int) for p in pair)):
        return None if pair is None else tuple(pair)
    raise CourseError(f"l2_hints={pair!r} is not a policy pair {type(kernel).__name__} knows",
                      f"pass None, one of {', '.join(map(repr, kernel.L2_HINT_PAIRS))} "
                      "(L2_HINT_PAIRS), or a pair (A's policy, B's policy) of 64-bit operands")


def l2_policies(pair):
    """What ``load_policies`` returns for an ``l2_hints`` pair: each policy a constant of the
    trace, None where there is no hint (``pair`` None: no hints at all, the code of no keyword)."""
    return tuple(None if p is None else cutlass.Int64(p) for p in (pair or (None, None)))
