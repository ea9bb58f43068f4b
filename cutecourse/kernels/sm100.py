"""Blackwell (sm_100a) building blocks of the course's block-scaled GEMM.

The pieces ``blackwell_grouped_gemm`` is made of, each small enough to read next to the
instruction it becomes. What is new on Blackwell, compared with ``sm90.py``:

* **tcgen05 MMA.** One thread issues a 128 x N x K MMA for the whole CTA; A and B come from
  smem (descriptors), the fp32 accumulator lives in *tensor memory* (TMEM), not registers.
  ``block_scale`` variants also read a scale factor per 16 or 32 K-values of each row, from TMEM.
* **TMEM.** 512 columns x 128 lanes x 32 bits per SM (256 KiB). It is allocated by one warp
  (``tcgen05.alloc`` writes the base address to smem), read by the others, and freed at the end.
  A 128 x 128 fp32 accumulator takes 128 columns; the scale factors of one k-tile take 4 columns
  per 512-byte atom (128 rows x 4 blocks).
* **Scale factors in three places.** gmem (interleaved atoms, ``models/block_scaling.sf_offset``),
  smem (the same atoms, one k-tile per stage, loaded by TMA with A and B), TMEM (copied from smem
  by ``tcgen05.cp`` right before the MMAs that read them).
* **Epilogue through registers.** ``tcgen05.ld`` copies accumulator columns to registers; it is
  asynchronous, so ``tcgen05.wait::ld`` (``fence_view_async_tmem_load``) must come before the
  registers are read. Then convert, store to smem, TMA-store, as on Hopper.
* **Tensor maps per group** (grouped GEMM): ``tensor_maps.py``, shared with Hopper; here five
  maps per CTA (A, B, C, SFA, SFB).

Functions, not methods, and dataclasses for state: the DSL treats an object whose method is
called inside a run-time loop as carried through that loop (``tile_scheduler.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.blackwell_helpers as sm100_utils
import cutlass.utils.blockscaled_layout as sf_layouts
from cutlass.cute.nvgpu import cpasync, tcgen05
from cutlass.tensor_utils import LayoutEnum

from ..models import blackwell_plan
from .barriers import Barrier  # named barrier ids: the epilogue warps', the TMEM-address hand-off
from .epilogue_op import apply_at

#: TMEM columns per SM (128 lanes x 32 bits each), all allocated by the one CTA on the SM.
TMEM_COLUMNS = blackwell_plan.TMEM_COLUMNS
C_LAYOUT = LayoutEnum.ROW_MAJOR  # C is N-major (row-major), like torch


# -- the MMA and its operands in smem ----------------------------------------------------------
def tiled_mma(data_dtype, sf_dtype, sf_vec: int, tile_mn):
    """A 1-CTA ``tcgen05.mma ... block_scale`` over a (tile_m, tile_n) tile, A and B K-major.

    The instruction's K is fixed by the data type: 64 for e2m1 (32 bytes), 32 for e4m3.
    """
    k_major = cute.nvgpu.OperandMajorMode.K
    return sm100_utils.make_blockscaled_trivial_tiled_mma(
        data_dtype, data_dtype, k_major, k_major, sf_dtype, sf_vec, tcgen05.CtaGroup.ONE,
        tuple(tile_mn))


@dataclass
class SmemLayouts:
    """Staged smem layouts: A, B (swizzled), SFA, SFB (atoms), C (``epi_tile`` buffers)."""

    a: object
    b: object
    sfa: object
    sfb: object
    c: object


def smem_layouts(mma, mma_tiler, data_dtype, sf_vec: int, ab_stages: int, c_dtype, epi_tile,
                 c_stages: int) -> SmemLayouts:
    return SmemLayouts(
        sm100_utils.make_smem_layout_a(mma, mma_tiler, data_dtype, ab_stages),
        sm100_utils.make_smem_layout_b(mma, mma_tiler, data_dtype, ab_stages),
        sf_layouts.make_smem_layout_sfa(mma, mma_tiler, sf_vec, ab_stages),
        sf_layouts.make_smem_layout_sfb(mma, mma_tiler, sf_vec, ab_stages),
        sm100_utils.make_smem_layout_epi(c_dtype, C_LAYOUT, epi_tile, c_stages))


def sf_tensor(ptr, rows, k, sf_vec: int):
    """The scale factors of a (rows, K) operand as a cute tensor over ``ptr``: the interleaved
    atoms ``((32,4),(sf_vec,4)):((16,4),(0,1))`` tiled k-fastest (block_scaling.sf_offset).
    The stride-0 mode repeats one scale over its ``sf_vec`` K-values, so the tensor has A's shape."""
    layout = sf_layouts.tile_atom_to_shape_SF((rows, k, 1), sf_vec)
    return cute.make_tensor(ptr, cute.select(layout, mode=[0, 1]))


def tma_load_atoms(mma, mma_tiler, smem: SmemLayouts, a, b, sfa, sfb, cluster_mn=(1, 1)):
    """TMA loads of one stage of A, B, SFA, SFB: ((atom, tensor) x 4, bytes per stage).

    With a cluster, A (and SFA) is multicast along the cluster's N (every CTA of a row has the
    same rows of A), B (and SFB) along its M. The scale-factor maps are built with 16-bit
    elements (``internal_type``, as CUTLASS builds them): TMA moves the 1-byte scales in pairs.
    """
    cluster_vmnk = cute.tiled_divide(cute.make_layout((*cluster_mn, 1)), (mma.thr_id.shape,))
    op_a = sm100_utils.cluster_shape_to_tma_atom_A(cluster_mn, mma.thr_id)
    op_b = sm100_utils.cluster_shape_to_tma_atom_B(cluster_mn, mma.thr_id)
    op_sfb = sm100_utils.cluster_shape_to_tma_atom_SFB(cluster_mn, mma.thr_id)
    stage = lambda layout: cute.slice_(layout, (None, None, None, 0))  # noqa: E731
    loads = (
        cute.nvgpu.make_tiled_tma_atom_A(op_a, a, stage(smem.a), mma_tiler, mma, cluster_vmnk.shape),
        cute.nvgpu.make_tiled_tma_atom_B(op_b, b, stage(smem.b), mma_tiler, mma, cluster_vmnk.shape),
        cute.nvgpu.make_tiled_tma_atom_A(op_a, sfa, stage(smem.sfa), mma_tiler, mma,
                                         cluster_vmnk.shape, internal_type=cutlass.Int16),
        cute.nvgpu.make_tiled_tma_atom_B(op_sfb, sfb, stage(smem.sfb), mma_tiler, mma,
                                         cluster_vmnk.shape, internal_type=cutlass.Int16),
    )
    stage_bytes = (cute.size_in_bytes(a.element_type, stage(smem.a))
                   + cute.size_in_bytes(b.element_type, stage(smem.b))
                   + cute.size_in_bytes(sfa.element_type, stage(smem.sfa))
                   + cute.size_in_bytes(sfb.element_type, stage(smem.sfb)))
    return loads, stage_bytes, cluster_vmnk


def tma_store_atom(c, smem: SmemLayouts, epi_tile):
    """TMA store of one ``epi_tile`` of C from smem."""
    return cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileS2GOp(), c,
                                       cute.slice_(smem.c, (None, None, 0)), epi_tile)


def tma_views(atom, coord, cta_layout, s, g, sf: bool):
    """(smem view, gmem view) of one operand's TMA copies; scale factors drop the stride-0
    (broadcast) modes on both sides: TMA moves each byte once."""
    s_view, g_view = cpasync.tma_partition(atom, coord, cta_layout, cute.group_modes(s, 0, 3),
                                           cute.group_modes(g, 0, 3))
    if sf:
        return cute.filter_zeros(s_view), cute.filter_zeros(g_view)
    return s_view, g_view


def multicast_masks(cluster_vmnk, coord, cluster_mn):
    """The multicast masks of the loads of A, B, SFA, SFB for the CTA at ``coord`` (v, m, n, k)
    of ``cluster_vmnk``, traced inside a kernel: A and its scale factors go to the CTAs of this
    CTA's cluster row (mode 2, along N), B and SFB to those of its column (mode 1); None each
    without a cluster (``sm90.multicast_masks`` is Hopper's)."""
    if tuple(cluster_mn) == (1, 1):
        return (None, None, None, None)
    m_a = cpasync.create_tma_multicast_mask(cluster_vmnk, coord, mcast_mode=2)
    m_b = cpasync.create_tma_multicast_mask(cluster_vmnk, coord, mcast_mode=1)
    return (m_a, m_b, m_a, m_b)


# -- TMEM: allocation, accumulators, scale factors ---------------------------------------------
@cute.jit
def tmem_alloc(holding, warp_idx, alloc_warp: int):
    """``alloc_warp`` allocates all of TMEM (``tcgen05.alloc``; the base address lands in smem at
    ``holding``). Readers wait on the TMEM barrier, then call :func:`tmem_pointer`."""
    if warp_idx == alloc_warp:
        cute.arch.alloc_tmem(TMEM_COLUMNS, holding)


def tmem_pointer(holding):
    return cute.arch.retrieve_tmem_ptr(cutlass.Float32, alignment=16,
                                       ptr_to_buffer_holding_addr=holding)


@cute.jit
def tmem_free(tmem, warp_idx, alloc_warp: int, barrier_threads: int):
    """End of the kernel: give up the right to allocate again (lets the next CTA on this SM
    allocate), wait until no epilogue warp still reads TMEM, then free it."""
    if warp_idx == alloc_warp:
        cute.arch.relinquish_tmem_alloc_permit()
    cute.arch.barrier(barrier_id=Barrier.EPILOGUE, number_of_threads=barrier_threads)
    if warp_idx == alloc_warp:
        cute.arch.dealloc_tmem(tmem, TMEM_COLUMNS)


def sf_tmem_tensors(mma, mma_tiler, sf_dtype, sf_vec: int, smem: SmemLayouts, acc):
    """(tCtSFA, tCtSFB): scale factors in TMEM, placed after the accumulator columns
    (``acc`` holds every accumulator stage), SFA first."""
    acc_cols = tcgen05.find_tmem_tensor_col_offset(acc)
    sfa_layout = sf_layouts.make_tmem_layout_sfa(mma, mma_tiler, sf_vec,
                                                 cute.slice_(smem.sfa, (None, None, None, 0)))
    sfb_layout = sf_layouts.make_tmem_layout_sfb(mma, mma_tiler, sf_vec,
                                                 cute.slice_(smem.sfb, (None, None, None, 0)))
    sfa = cute.make_tensor(cute.recast_ptr(acc.iterator + acc_cols, dtype=sf_dtype), sfa_layout)
    sfa_cols = tcgen05.find_tmem_tensor_col_offset(sfa)
    sfb = cute.make_tensor(cute.recast_ptr(acc.iterator + acc_cols + sfa_cols, dtype=sf_dtype),
                           sfb_layout)
    return sfa, sfb


def sf_copy_to_tmem(sf_dtype, s_sf, t_sf):
    """smem -> TMEM copy of one operand's scale factors (``tcgen05.cp.32x128b.warpx4``): each
    copy moves one 512-byte atom (32 lanes x 16 bytes, broadcast to the 4 lane quarters).
    Returns (tiled copy, source per stage, destination)."""
    s_compact, t_compact = cute.filter_zeros(s_sf), cute.filter_zeros(t_sf)
    atom = cute.make_copy_atom(tcgen05.Cp4x32x128bOp(tcgen05.CtaGroup.ONE), sf_dtype)
    copy = tcgen05.make_s2t_copy(atom, t_compact)
    thr = copy.get_slice(0)
    src = tcgen05.get_s2t_smem_desc_tensor(copy, thr.partition_S(s_compact))
    return copy, src, thr.partition_D(t_compact)


# -- the epilogue -------------------------------------------------------------------------------
@dataclass
class Epilogue:
    """TMEM -> registers -> smem -> TMA store, one ``epi_tile`` (128 x 32) at a time."""

    t2r: object  # tcgen05.ld tiled copy
    tTR_tAcc: object  # (T2R, T2R_M, T2R_N, sub-tile, acc stage): this thread's TMEM source
    tTR_rAcc: object  # fp32 registers of one sub-tile
    r2s: object  # registers -> smem
    tRS_rC: object  # C-typed registers of one sub-tile
    tRS_sC: object  # (R2S, ..., buffer): smem destination
    tma_c: object
    sC: object
    c_dtype: object
    c_stages: int
    epi_tile: object
    threads: int  # epilogue threads (the barrier count)
    store_warp: int
    pipe: object  # PipelineTmaStore: at most c_stages - 1 TMA stores in flight
    op: object = None  # the elementwise epilogue op (``epilogue_op.py``), None: none
    operands: tuple = ()  # the tensors it reads
    tTR_cC: object = None  # with an op: each register's (row, column) in its sub-tile


def make_epilogue(tidx, acc, sC, tma_c, cta_tile, c_dtype, epi_tile, c_stages: int,
                  threads: int, store_warp: int, op=None, operands=()) -> Epilogue:
    """The copies the epilogue warps use, built once per CTA for thread ``tidx`` (0..127);
    ``op``: an elementwise op on each fp32 accumulator (``epilogue_op.py``), reading ``operands``."""
    acc_epi = cute.flat_divide(acc[((None, None), 0, 0, None)], epi_tile)
    t2r_atom = sm100_utils.get_tmem_load_op(cta_tile, C_LAYOUT, c_dtype, cutlass.Float32, epi_tile,
                                            False)
    t2r = tcgen05.make_tmem_copy(t2r_atom, acc_epi[(None, None, 0, 0, 0)])
    thr_t2r = t2r.get_slice(tidx)
    tTR_tAcc = thr_t2r.partition_S(acc_epi)
    sub_tile = cute.make_identity_tensor(cute.product_each(cute.shape(epi_tile)))
    tTR_rAcc = cute.make_rmem_tensor(thr_t2r.partition_D(sub_tile).shape, cutlass.Float32)
    r2s_atom = sm100_utils.get_smem_store_op(C_LAYOUT, c_dtype, cutlass.Float32, t2r)
    r2s = cute.make_tiled_copy_D(r2s_atom, t2r)
    tRS_rC = r2s.retile(cute.make_rmem_tensor(tTR_rAcc.shape, c_dtype))
    tRS_sC = r2s.get_slice(tidx).partition_D(sC)
    pipe = pipeline.PipelineTmaStore.create(
        num_stages=c_stages, producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, threads))
    tTR_cC = thr_t2r.partition_D(sub_tile) if op is not None else None
    return Epilogue(t2r, tTR_tAcc, tTR_rAcc, r2s, tRS_rC, tRS_sC, tma_c, sC, c_dtype, c_stages,
                    epi_tile, threads, store_warp, pipe, op, tuple(operands), tTR_cC)


@cute.jit
def store_tile(epi: Epilogue, acc_stage, gC_tile, warp_idx, c_map, origin=(0, 0)):
    """Write accumulator stage ``acc_stage`` to the C tile ``gC_tile`` (TMA store with the
    tensor map ``c_map``), sub-tile by sub-tile, through the epilogue op if there is one (it is
    told each value's row and column: ``origin``, the tile's first, plus its place in the tile,
    clamped to its operands where the tile pads C: ``epilogue_op.apply_at``);
    the caller releases the accumulator after."""
    gC_epi = cute.flat_divide(gC_tile, epi.epi_tile)  # (EPI_M, EPI_N, sub_m, sub_n)
    bSG_sC, bSG_gC = cpasync.tma_partition(epi.tma_c, 0, cute.make_layout(1),
                                           cute.group_modes(epi.sC, 0, 2),
                                           cute.group_modes(gC_epi, 0, 2))
    bSG_gC = cute.group_modes(bSG_gC, 1, cute.rank(bSG_gC))
    tAcc = epi.tTR_tAcc[(None, None, None, None, None, acc_stage)]
    tAcc = cute.group_modes(tAcc, 3, cute.rank(tAcc))
    rAcc, rC, tma_c, pipe = epi.tTR_rAcc, epi.tRS_rC, epi.tma_c, epi.pipe
    for e in cutlass.range_constexpr(cute.size(tAcc, mode=[3])):
        cute.copy(epi.t2r, tAcc[(None, None, None, e)], rAcc)  # tcgen05.ld (asynchronous)
        cute.arch.fence_view_async_tmem_load()  # tcgen05.wait::ld: the registers are now valid
        if cutlass.const_expr(epi.op is not None):
            sub_m = cute.size(gC_epi, mode=[2])  # sub-tile e is (e % sub_m, e // sub_m) of the tile
            m0 = origin[0] + (e % sub_m) * cute.size(gC_epi, mode=[0])
            n0 = origin[1] + (e // sub_m) * cute.size(gC_epi, mode=[1])
            for v in cutlass.range_constexpr(cute.size(rAcc)):
                m, n = epi.tTR_cC[v]
                apply_at(epi.op, rAcc, v, m0 + m, n0 + n, epi.operands)
        rC.store(epi.r2s.retile(rAcc).load().to(epi.c_dtype))
        buf = e % epi.c_stages  # sub-tiles per tile is a multiple of c_stages (see plan())
        cute.copy(epi.r2s, rC, epi.tRS_sC[(None, None, None, buf)])
        # generic-proxy smem writes must be visible to the async proxy (TMA) before the store
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.barrier(barrier_id=Barrier.EPILOGUE, number_of_threads=epi.threads)
        if warp_idx == epi.store_warp:
            cute.copy(tma_c, bSG_sC[(None, buf)], bSG_gC[(None, e)], tma_desc_ptr=c_map)
            pipe.producer_commit()
            pipe.producer_acquire()  # <= c_stages - 1 stores in flight: buffer buf+1 is free
        cute.arch.barrier(barrier_id=Barrier.EPILOGUE, number_of_threads=epi.threads)


@cute.jit
def finish_stores(epi: Epilogue, warp_idx):
    """After the last tile: the last TMA stores finish reading smem before the CTA exits."""
    pipe = epi.pipe
    if warp_idx == epi.store_warp:
        pipe.producer_tail()
