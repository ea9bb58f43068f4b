"""The course's Hopper GEMM kernel: TMA -> multi-stage smem ring -> WGMMA -> TMA-store epilogue.

``C = A @ B.T`` with A (M, K) and B (N, K) both K-major (row-major in torch terms), fp16 or bf16
inputs, fp32 accumulators, fp16 / bf16 / fp32 output. One CTA computes one (tile_m, tile_n) tile
of C with two warpgroups (each owns 64 rows of the tile); warp 0 also acts as the TMA producer.

Read ``HopperGemm`` top-down: ``__call__``, ``kernel``, the ``mainloop`` hook (the prefetch loop),
the epilogue hooks, the cluster hooks. The building blocks are in ``sm90.py`` (shared with the
persistent kernel); the smem budget is ``models/gemm_plan.py``. The other mainloops, the table of
them and the entry points are ``hopper_gemm.py``: each mainloop is a subclass of this class.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
from cutlass.cute.nvgpu import cpasync, warpgroup

from ..models.gemm_plan import (EPI_STAGES, EPI_TILE, IN_DTYPES, THREADS, TILE_K, check_epi_tile, check_tile,
                                plan_stages)
from . import sm90
from .configured import Configured

#: Two warpgroups split the 128-row tile: each owns 64 rows (the M of one wgmma).
WARPGROUPS = 2
#: Band height (in tile-rows) of the L2-friendly tile order (models/tile_order.py).
GROUP_M = 8


def default_prefetch(stages: int) -> int:
    """The compiler variants' prefetch depth when none is asked for: ``stages - 2``, at least 1
    (``HopperGemm.__call__`` says why not ``stages - 1``)."""
    return max(1, stages - 2)


class HopperGemm(Configured):
    """C = A @ B.T on Hopper, one CTA per (tile_m, tile_n) tile of C, with the prefetch mainloop.

    Its hooks: ``mainloop`` (here in three parts: ``fill_ring``, ``consume``, ``drain``), which
    each teaching variant overrides (``hopper_gemm.py``); the epilogue, ``make_epilogue``,
    ``store_tile`` and ``finish_stores`` (as in the persistent kernel); and ``tile_coord``,
    ``mainloop_done`` and ``load``, which the cluster version overrides. An override keeps the hook's signature, so
    variants combine: a mainloop variant on clusters is a subclass of both.

    ``prefetch_stages``: the compiler variants' prefetch depth (default: stages - 2, at least 1).
    ``stages``: the ring depth (default: as many as the smem budget allows).
    ``group_m``: band height of the tile order. ``epi_tile``: the epilogue's C sub-tile.
    ``epilogue_op``: an ``epilogue_op.EpilogueOp`` applied to each accumulator before it is stored.
    """

    IN_DTYPES = IN_DTYPES
    #: The defaults of the keywords left None (``configured.py``): a variant sets those it changes.
    TILE_MN, GROUP_M, EPI_TILE = (128, 256), GROUP_M, EPI_TILE
    #: Places its mainloop issues TMA loads (prologue and loop): ``expected_multicast_loads`` reads it.
    LOAD_PLACES = 2

    def __init__(self, tile_mn=None, *, prefetch_stages: int | None = None, stages: int | None = None,
                 group_m: int | None = None, epi_tile=None, epilogue_op=None):
        # (every keyword left None arrives as the class's default: configured.py)
        self.tile_mn = check_tile(tile_mn)
        self.tile_mnk = (*self.tile_mn, TILE_K)
        # CTAs per cluster, which the shared pieces (sm90) read: at (1, 1) they are the single-CTA
        # code. Not a keyword here: the cluster version's (``ClusterHopperGemm(cluster_mn=)``).
        self.cluster_mn = (1, 1)
        self.requested_prefetch = prefetch_stages
        self.requested_stages = stages
        self.group_m = group_m
        self.epi_tile = check_epi_tile(self.tile_mn, epi_tile)
        self.acc_dtype = cutlass.Float32
        self.epilogue_op = epilogue_op  # applied to each accumulator before C (epilogue_op.py)

    def plan(self, in_dtype: str, out_dtype: str):
        """The smem plan for these dtypes (``models/gemm_plan.plan_stages``): clear errors first."""
        return plan_stages(self.tile_mn, in_dtype, out_dtype, stages=self.requested_stages, epi_tile=self.epi_tile)

    def scratch(self):
        """Tensors it needs besides A, B, C (``gemm_launch.Scratch``): none."""
        return ()

    # -- host side ---------------------------------------------------------------------------
    @cute.jit
    def __call__(self, a: cute.Tensor, b: cute.Tensor, c: cute.Tensor, stream, *epilogue_args):
        self.a_dtype, self.c_dtype = a.element_type, c.element_type
        self.stages = self.plan(sm90.dtype_name(self.a_dtype), sm90.dtype_name(self.c_dtype)).stages
        # The compiler variant's prefetch depth. Not stages - 1: iteration k loads k-tile k + P
        # into the stage of tile k + P - stages, and this loop releases a stage only after
        # wait_group(0). With P = stages - 1 that is the stage released at the end of the
        # previous iteration, so warp 0 waits there for the slowest warp before it can issue
        # its own wgmmas; P = stages - 2 leaves one stage of slack (measured: docs/hopper_gemm.md).
        self.prefetch = (default_prefetch(self.stages) if self.requested_prefetch is None
                         else self.requested_prefetch)
        self.tiled_mma = sm90.tiled_mma(self.a_dtype, self.acc_dtype, WARPGROUPS, self.tile_mn[1])
        sA_layout, sB_layout, sC_layout = sm90.smem_layouts(
            self.tile_mnk, self.a_dtype, self.c_dtype, self.stages, self.epi_tile, EPI_STAGES)
        # TMA atoms (tensor maps) for A and B (at 1x1 plain loads; a cluster multicasts) and C.
        tma_a, gA, tma_b, gB, tma_c, gC = sm90.tma_atoms(
            a, b, c, sA_layout, sB_layout, sC_layout, self.tile_mn, self.cluster_mn, self.epi_tile)

        @cute.struct
        class SharedStorage:
            # full[stages] then empty[stages]: the ring's mbarriers
            barriers: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
            sA: cute.struct.Align[cute.struct.MemRange[self.a_dtype, cute.cosize(sA_layout)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[self.a_dtype, cute.cosize(sB_layout)], 1024]

        self.shared_storage = SharedStorage

        # One CTA per C tile, whole clusters: the grid is rounded up, and TMA fills the boxes
        # past the edge of A and B with zeros and clips the stores past the edge of C.
        cm, cn = self.cluster_mn
        grid = (cute.round_up(cute.ceil_div(c.shape[0], self.tile_mn[0]), cm),
                cute.round_up(cute.ceil_div(c.shape[1], self.tile_mn[1]), cn), 1)
        self.kernel(tma_a, gA, tma_b, gB, tma_c, gC, self.tiled_mma, sA_layout, sB_layout,
                    sC_layout, epilogue_args).launch(grid=grid, block=[THREADS, 1, 1], cluster=(cm, cn, 1),
                                      stream=stream)

    # -- device side -------------------------------------------------------------------------
    @cute.kernel
    def kernel(self, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom, mB: cute.Tensor,
               tma_c: cute.CopyAtom, mC: cute.Tensor, tiled_mma: cute.TiledMma,
               sA_layout: cute.ComposedLayout, sB_layout: cute.ComposedLayout,
               sC_layout: cute.ComposedLayout, epilogue_args):
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        is_producer = warp_idx == 0  # warp 0 issues the TMA loads (one elected lane does)
        if is_producer:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)

        tile_m, tile_n = self.tile_coord()
        cta_layout, cluster_coord, a_mcast_mask, b_mcast_mask = sm90.multicast_masks(self.cluster_mn)

        # The ring: full[s] flips when stage s's TMA bytes have landed, empty[s] when every
        # consumer warp has released it.
        storage = utils.SmemAllocator().allocate(self.shared_storage)
        ring = sm90.make_ring(storage.barriers.data_ptr(), self.stages, self.a_dtype, sA_layout,
                              sB_layout, cta_layout, self.cluster_mn, THREADS)
        pipeline.pipeline_init_arrive(cluster_shape_mn=self.cluster_mn, is_relaxed=True)
        sA = storage.sA.get_tensor(sA_layout.outer, swizzle=sA_layout.inner)
        sB = storage.sB.get_tensor(sB_layout.outer, swizzle=sB_layout.inner)

        # This CTA's tiles of A, B (all k-tiles: (tile, TILE_K, k_tiles)) and C.
        coord = (tile_m, tile_n, None)
        gA = cute.local_tile(mA, self.tile_mnk, coord, proj=(1, None, 1))
        gB = cute.local_tile(mB, self.tile_mnk, coord, proj=(None, 1, 1))
        gC = cute.local_tile(mC, self.tile_mnk, coord, proj=(1, 1, None))
        tAsA, tAgA, tBsB, tBgB = sm90.tma_views(tma_a, tma_b, cta_layout, cluster_coord, sA, sB, gA, gB)

        # WGMMA views: each warpgroup's slice of the smem ring, and its fp32 accumulators.
        wg = cute.arch.make_warp_uniform(tidx // 128)
        thr_mma = tiled_mma.get_slice(cute.make_layout(WARPGROUPS, stride=128)(wg))
        tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))
        tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
        acc = cute.make_rmem_tensor(thr_mma.partition_C(gC).shape, self.acc_dtype)
        # Zero the accumulators once, then every wgmma accumulates (scale-d = 1): no special first
        # k-tile. ACCUMULATE is a field of the MMA atom and defaults to False (overwrite).
        acc.fill(0.0)
        tiled_mma.set(warpgroup.Field.ACCUMULATE, True)

        pipeline.pipeline_init_wait(cluster_shape_mn=self.cluster_mn)

        k_tiles = cute.size(gA, mode=[2])  # ceil(K / TILE_K): TMA zero-fills the ragged last tile
        loads = sm90.Loads(tma_a, tAgA, tAsA, a_mcast_mask, tma_b, tBgB, tBsB, b_mcast_mask)
        mma = sm90.Mma(tiled_mma, tCrA, tCrB, acc)
        self.mainloop(ring, loads, mma, k_tiles, is_producer)

        # Epilogue: C is staged in the A ring, so every warp must be past the mainloop first.
        self.mainloop_done()
        sC = cute.make_tensor(cute.recast_ptr(sA.iterator, sC_layout.inner, dtype=self.c_dtype),
                              sC_layout.outer)
        epilogue = self.make_epilogue(tma_c, sC, mma, tidx, epilogue_args)
        self.store_tile(epilogue, mma, gC, (tile_m, tile_n), warp_idx)
        self.finish_stores(epilogue, warp_idx)

    # -- the mainloop: this class's is the prefetch one; each variant below overrides it --------
    # A mainloop consumes k-tiles 0..k_tiles-1 of the ring into ``mma.acc`` and ends with every
    # wgmma complete and every stage released.
    @cute.jit
    def mainloop(self, ring, loads, mma, k_tiles, is_producer):
        """Prologue fills the ring; then compute k-tile k while TMA loads k + stages - 1.

        Three pipeline states: ``prod`` (the next load), ``cons`` (the next k-tile to compute) and
        ``released`` (one k-tile behind ``cons``). Its parts hand back the states they advanced:
        a state changed inside a traced ``if`` or loop is rebuilt by the DSL, so the caller takes
        the new one.
        """
        prod = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        cons = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        released = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        prod = self.fill_ring(ring, loads, prod, k_tiles, is_producer)
        for k in cutlass.range(k_tiles, unroll=1):
            cons, released = self.consume(ring, mma, k, cons, released)
            if is_producer and prod.count < k_tiles:  # refill the stage of k-1, just released
                ring.producer_acquire(prod)
                self.load(ring, loads, prod)
                prod.advance()
        self.drain(ring, k_tiles, released)

    @cute.jit
    def fill_ring(self, ring, loads, prod, k_tiles, is_producer):
        """The prologue: warp 0 loads the first stages - 1 k-tiles (or all, if there are fewer).

        Not all of them: iteration k refills the stage of tile k-1, released just before; with a
        full ring the first refill would wait for a stage nobody has released yet (warp 0 would
        hang there and never release its own share: a deadlock). Returns ``prod``.
        """
        if is_producer:
            for _ in cutlass.range(cutlass.min(self.stages - 1, k_tiles), unroll=1):
                ring.producer_acquire(prod)
                self.load(ring, loads, prod)
                prod.advance()
        return prod

    @cute.jit
    def consume(self, ring, mma, k, cons, released):
        """K-tile ``k``'s MMAs, one batch kept in flight; returns ``(cons, released)``.

        ``wait_group(1)``: tile k's MMAs run while tile k-1's are retired and its stage released,
        which is the moment the producer may refill it.
        """
        ring.consumer_wait(cons)
        sm90.issue_mma(mma, cons.index)
        warpgroup.wait_group(1)  # tile k-1's MMAs are done: its stage can be refilled
        cons.advance()
        if k > 0:
            ring.consumer_release(released)
            released.advance()
        return cons, released

    @cute.jit
    def drain(self, ring, k_tiles, released):
        """After the loop: the last batch of MMAs, then the last stage back to the producer."""
        warpgroup.wait_group(0)
        if k_tiles > 0:
            ring.consumer_release(released)

    # -- the epilogue: the same three hooks as the persistent kernel's ----------------------------
    def make_epilogue(self, tma_c, sC, mma, tidx, epilogue_args):
        """Hook: the epilogue of the CTA's tile, an ``sm90.Epilogue`` (C staged in smem ``sC``,
        TMA stores issued by warp 0, the epilogue op and its operands ``epilogue_args``)."""
        return sm90.Epilogue(tma_c, sC, mma.tiled_mma, mma.acc, tidx, self.c_dtype, self.epi_tile,
                             EPI_STAGES, THREADS, store_warp=0, op=self.epilogue_op, operands=epilogue_args)

    def store_tile(self, epilogue, mma, gC, tile, warp_idx):
        """Hook: the accumulators ``mma.acc``, through the epilogue op if the kernel has one, to the
        C tile ``gC`` (``tile``: its (m, n) among C's tiles; ``sm90.store_tile``)."""
        sm90.store_tile(epilogue, gC, warp_idx, origin=self.tile_origin(tile))

    def tile_origin(self, tile):
        """Hook: the (row, column) in C of ``tile``'s first element (what the epilogue op is told),
        as in every family; ``tile``: its (m, n) among C's tiles."""
        return (tile[0] * self.tile_mn[0], tile[1] * self.tile_mn[1])

    def finish_stores(self, epilogue, warp_idx):
        """Hook, after the tile: its last TMA stores finish reading smem (``sm90.finish_stores``)."""
        sm90.finish_stores(epilogue, warp_idx)

    # -- the hooks the cluster version overrides (hopper_gemm_cluster.ClusterHopperGemm) ------
    def tile_coord(self):
        """(m, n) of this CTA's C tile: the launch order re-mapped to bands of ``group_m``
        tile-rows, so that the ~132 CTAs running at once share A and B tiles in L2."""
        bx, by, _ = cute.arch.block_idx()
        gx, gy, _ = cute.arch.grid_dim()
        return sm90.band_tile(bx + by * gx, gx, gy, self.group_m)

    def mainloop_done(self):
        """Every warp of the CTA is past the mainloop: the A ring may be reused for C."""
        cute.arch.sync_threads()

    def load(self, ring, loads, state, pred=None):
        """One k-tile's TMA loads (A and B) into the ring."""
        sm90.issue_tma(ring, loads, state, pred=pred)
