"""The course's Hopper GEMM: TMA -> multi-stage smem ring -> WGMMA -> TMA-store epilogue.

``C = A @ B.T`` with A (M, K) and B (N, K) both K-major (row-major in torch terms), fp16 or bf16
inputs, fp32 accumulators, fp16 / bf16 / fp32 output. One CTA computes one (tile_m, tile_n) tile of
C with two warpgroups (each owns 64 rows of the tile); warp 0 also acts as the TMA producer.

The kernel is one class in the quack style: ``__call__`` is the ``@cute.jit`` host side (TMA
descriptors, smem layouts, grid), ``kernel`` the ``@cute.kernel`` device side. The three teaching
variants differ **only in the mainloop** (``_mainloop_naive``, ``_mainloop_prefetch``,
``_mainloop_compiler``), so a notebook can show them side by side as diffs:

* ``naive``: load k-tile k, wait for it, compute it, wait for the MMAs, release, repeat.
  Every TMA latency is exposed.
* ``prefetch``: a prologue fills the ring, then each iteration computes tile k while TMA loads
  tile k + stages - 1 (the classic hand-written software pipeline, as in CUTLASS).
* ``compiler``: the naive loop body, with ``cutlass.range(..., prefetch_stages=P)`` asking the
  compiler to build the prologue and the overlap itself. docs/hopper_gemm.md explains what the
  loop must look like for the compiler to do that.

Python entry points: ``gemm(a, b, ...)`` (validates, caches compiled kernels, launches),
``plan_stages(...)`` (the shared-memory budget arithmetic, pure Python), and compile targets for
``cutecourse.inspect`` (``compile_target``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import AlignmentError, DeviceError, DTypeError, LayoutError, ShapeError

#: The variants, in teaching order.
VARIANTS = ("naive", "prefetch", "compiler")
#: Plus, for notebook 04: a counter-example (prefetch_stages on a loop the compiler cannot
#: pipeline) and an experiment (compiler-pipelined loads plus hand-kept MMA overlap).
DEMO_VARIANTS = ("compiler_guarded", "compiler_overlap")
#: The CTA tiles the course supports (M, N). K per tile is fixed by the 128-byte swizzle: 64 for 16-bit.
TILES = ((128, 128), (128, 256))
TILE_K = 64
#: Cluster shapes (M, N). (1, 1) is the course's kernel; the pairs multicast (experimental).
CLUSTERS = ((1, 1), (2, 1), (1, 2))
#: Input dtypes (names as in torch / cutlass) and output dtypes.
IN_DTYPES = ("float16", "bfloat16")
OUT_DTYPES = ("float16", "bfloat16", "float32")
_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}

#: H100 shared memory per CTA when opted in (cutlass.utils.get_smem_capacity_in_bytes("sm_90")).
SMEM_CAPACITY = 232448
#: mbarriers (2 x 8 bytes per stage) live in front of the A ring, which is 1024-byte aligned
#: (the 128B swizzle repeats every 1024 bytes): reserving 1 KiB covers both.
BARRIER_BYTES = 1024
#: Epilogue: C goes registers -> smem -> TMA store in sub-tiles of EPI_TILE, EPI_STAGES buffers deep.
EPI_STAGES = 4
EPI_TILE = (128, 32)
#: Two warpgroups split the 128-row tile: each owns 64 rows (the M of one wgmma).
WARPGROUPS = 2
THREADS = 128 * WARPGROUPS


# ------------------------------------------------------------------------------------------
# Shared-memory budget (seed 002): (Mt*Kt + Nt*Kt) * sizeof * stages <= budget - epilogue - barriers
# ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StagePlan:
    """How the shared memory of one CTA is spent."""

    tile_mn: tuple[int, int]
    tile_k: int
    in_dtype: str
    out_dtype: str
    bytes_per_stage: int  # (Mt*Kt + Nt*Kt) * sizeof(in)
    stages: int
    barrier_bytes: int
    epi_bytes: int  # the C staging buffers; they reuse the A ring after the mainloop
    capacity: int

    @property
    def ring_bytes(self) -> int:
        return self.bytes_per_stage * self.stages

    @property
    def a_ring_bytes(self) -> int:
        return self.tile_mn[0] * self.tile_k * _BYTES[self.in_dtype] * self.stages

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory the kernel asks for (the epilogue lives inside the A ring)."""
        return self.barrier_bytes + self.ring_bytes

    def __str__(self) -> str:
        return (f"tile {self.tile_mn[0]}x{self.tile_mn[1]}x{self.tile_k} {self.in_dtype}: "
                f"{self.bytes_per_stage // 1024} KiB/stage x {self.stages} stages = "
                f"{self.ring_bytes // 1024} KiB + {self.barrier_bytes} B barriers "
                f"(of {self.capacity // 1024} KiB)")


def plan_stages(tile_mn=(128, 256), in_dtype="float16", out_dtype="float16",
                capacity: int = SMEM_CAPACITY, stages: int | None = None) -> StagePlan:
    """The largest stage count whose ring fits the shared-memory budget (or check ``stages``).

    The epilogue stages C through ``EPI_STAGES`` buffers of ``EPI_TILE``; it runs after the last
    k-tile is consumed, so it reuses the A ring instead of taking its own smem (``epi_bytes`` is
    reported, and must fit in the A ring).
    """
    tile_mn = tuple(tile_mn)
    if tile_mn not in TILES:
        raise ShapeError(f"tile {tile_mn} is not one of the course's tiles {list(TILES)}",
                         "use tile=(128, 128) or tile=(128, 256)")
    _check_dtype_names(in_dtype, out_dtype)
    m, n = tile_mn
    per_stage = (m * TILE_K + n * TILE_K) * _BYTES[in_dtype]
    epi = EPI_TILE[0] * EPI_TILE[1] * _BYTES[out_dtype] * EPI_STAGES
    fit = (capacity - BARRIER_BYTES) // per_stage
    if stages is None:
        stages = fit
    plan = StagePlan(tile_mn, TILE_K, in_dtype, out_dtype, per_stage, stages, BARRIER_BYTES, epi,
                     capacity)
    if stages < 2 or stages > fit:
        raise ShapeError(
            f"{stages} stages of {per_stage} B for tile {m}x{n} need "
            f"{stages * per_stage + BARRIER_BYTES} B of shared memory; the budget is {capacity} B "
            f"({fit} stages fit)",
            "use fewer stages or a smaller tile (a ring needs at least 2 stages to overlap)")
    if epi > plan.a_ring_bytes:
        raise ShapeError(f"the epilogue needs {epi} B but the A ring it reuses has {plan.a_ring_bytes} B",
                         "use more stages or a 16-bit output")
    return plan


def _check_dtype_names(in_dtype: str, out_dtype: str) -> None:
    if in_dtype not in IN_DTYPES:
        raise DTypeError(f"input dtype {in_dtype} is not supported by the Hopper GEMM",
                         f"use one of {IN_DTYPES} (convert with .half() or .bfloat16())")
    if out_dtype not in OUT_DTYPES:
        raise DTypeError(f"output dtype {out_dtype} is not supported", f"use one of {OUT_DTYPES}")


def waves(m: int, n: int, tile_mn=(128, 256), sms: int = 132) -> float:
    """How many waves of CTAs the grid needs on ``sms`` SMs (one CTA per SM: the ring fills smem)."""
    tiles = math.ceil(m / tile_mn[0]) * math.ceil(n / tile_mn[1])
    return tiles / sms


# ------------------------------------------------------------------------------------------
# The kernel
# ------------------------------------------------------------------------------------------
import cutlass  # noqa: E402  (cutecourse sets CUTE_DSL_ARCH before this import)
import cutlass.cute as cute  # noqa: E402
import cutlass.pipeline as pipeline  # noqa: E402
import cutlass.utils as utils  # noqa: E402
import cutlass.utils.hopper_helpers as sm90_utils  # noqa: E402
from cutlass.cute.nvgpu import cpasync, warpgroup  # noqa: E402

_CUTLASS_DTYPES = {"float16": cutlass.Float16, "bfloat16": cutlass.BFloat16, "float32": cutlass.Float32}


def multicast_masks(cluster_mn, mcast_a: int, mcast_b: int):
    """(cluster layout, this CTA's coordinate in it, A mask, B mask), traced inside a kernel.

    A mask has one bit per CTA rank of the cluster that receives a multicast load (0 = this CTA
    only). A tile of A is shared by the CTAs of one cluster row (same m, every n): the image of
    this CTA's coordinate along mode 1; B's by the CTAs of one cluster column (mode 0).
    """
    cta_layout = cute.make_layout((*cluster_mn, 1))
    cta_rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
    cluster_coord = cta_layout.get_flat_coord(cta_rank)
    a_mask = cute.make_layout_image_mask(cta_layout, cluster_coord, mode=1) if mcast_a > 1 else 0
    b_mask = cute.make_layout_image_mask(cta_layout, cluster_coord, mode=0) if mcast_b > 1 else 0
    return cta_layout, cluster_coord, a_mask, b_mask


def tma_views(tma_a, tma_b, cta_layout, cluster_coord, sA, sB, gA, gB):
    """(tAsA, tAgA, tBsB, tBgB): this CTA's TMA views of the smem ring and of global A and B
    (traced inside a kernel). With multicast, A's box is split among the CTAs of this CTA's
    cluster row (its slice: ``cluster_coord[1]``) and B's among those of its column."""
    tAsA, tAgA = cpasync.tma_partition(
        tma_a, cluster_coord[1], cute.make_layout(cute.slice_(cta_layout, (0, None, 0)).shape),
        cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2))
    tBsB, tBgB = cpasync.tma_partition(
        tma_b, cluster_coord[0], cute.make_layout(cute.slice_(cta_layout, (None, 0, 0)).shape),
        cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2))
    return tAsA, tAgA, tBsB, tBgB


def make_ring(barriers, stages: int, dtype, sA_layout, sB_layout, cta_layout, mcast_size: int,
              consumer_threads: int):
    """The smem ring's barriers (traced inside a kernel): full[s] completes when stage s's TMA
    bytes (one A tile + one B tile) have landed, empty[s] when every consumer warp of this CTA and
    of each multicast partner has released it (one arrive per warp)."""
    stage_bytes = (cute.size_in_bytes(dtype, cute.slice_(sA_layout, (None, None, 0)))
                   + cute.size_in_bytes(dtype, cute.slice_(sB_layout, (None, None, 0))))
    return pipeline.PipelineTmaAsync.create(
        barrier_storage=barriers,
        num_stages=stages,
        producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
        consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread,
                                                 mcast_size * consumer_threads // 32),
        tx_count=stage_bytes,
        cta_layout_vmnk=cute.make_layout((1, *cta_layout.shape)),
        defer_sync=True,
    )


class HopperGemm:
    """C = A @ B.T on Hopper, one CTA per (tile_m, tile_n) tile of C.

    ``variant``: "naive", "prefetch" or "compiler" (see the module docstring).
    ``prefetch_stages``: the compiler variant's prefetch depth (default: stages - 2, at least 1).
    ``stages``: override the ring depth (default: as many as the smem budget allows).
    ``cluster_mn``: CTAs per cluster. (1, 1): no multicast (the course default). (2, 1) / (1, 2):
    experimental TMA multicast of B / A to the CTA pair (the multicast notebook's subject); the
    masks and pipeline arrive counts below already handle it.
    """

    def __init__(self, tile_mn=(128, 256), variant: str = "prefetch", cluster_mn=(1, 1),
                 prefetch_stages: int | None = None, stages: int | None = None):
        if variant not in VARIANTS + DEMO_VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS + DEMO_VARIANTS}, not {variant!r}")
        if tuple(tile_mn) not in TILES:
            raise ShapeError(f"tile {tuple(tile_mn)} is not one of {list(TILES)}",
                             "use tile=(128, 128) or tile=(128, 256)")
        if tuple(cluster_mn) not in CLUSTERS:
            raise ShapeError(f"cluster {tuple(cluster_mn)} is not supported",
                             f"use one of {list(CLUSTERS)} ((1, 1) = no multicast)")
        self.tile_mn = tuple(tile_mn)
        self.tile_mnk = (*self.tile_mn, TILE_K)
        self.variant = variant
        self.cluster_mn = tuple(cluster_mn)
        self.requested_stages = stages
        self.requested_prefetch = prefetch_stages
        self.acc_dtype = cutlass.Float32

    # -- host side ---------------------------------------------------------------------------
    @cute.jit
    def __call__(self, a: cute.Tensor, b: cute.Tensor, c: cute.Tensor, stream):
        self.a_dtype = a.element_type
        self.c_dtype = c.element_type
        plan = plan_stages(self.tile_mn, _name_of(self.a_dtype), _name_of(self.c_dtype),
                           stages=self.requested_stages)
        self.stages = plan.stages
        # The compiler variant's prefetch depth. Not stages - 1: iteration k loads k-tile k + P
        # into the stage of tile k + P - stages, and this loop releases a stage only after
        # wait_group(0). With P = stages - 1 that is the stage released at the end of the
        # previous iteration, so warp 0 waits there for the slowest warp before it can issue
        # its own wgmmas; P = stages - 2 leaves one stage of slack (measured: docs/hopper_gemm.md).
        self.prefetch = (max(1, self.stages - 2) if self.requested_prefetch is None
                         else self.requested_prefetch)

        # Two warpgroups stacked along M, each issuing 64 x tile_n wgmmas.
        self.tiled_mma = sm90_utils.make_trivial_tiled_mma(
            self.a_dtype, self.a_dtype, warpgroup.OperandMajorMode.K, warpgroup.OperandMajorMode.K,
            self.acc_dtype, (WARPGROUPS, 1, 1), tiler_mn=(64, self.tile_mn[1]))

        # Staged, 128B-swizzled smem layouts: (tile, TILE_K, stages).
        a_layout = utils.LayoutEnum.ROW_MAJOR  # K-major A (M, K)
        b_layout = utils.LayoutEnum.ROW_MAJOR  # K-major B (N, K)
        c_layout = utils.LayoutEnum.ROW_MAJOR  # N-major C (M, N)
        sA_layout = sm90_utils.make_smem_layout_a(a_layout, self.tile_mnk, self.a_dtype, self.stages)
        sB_layout = sm90_utils.make_smem_layout_b(b_layout, self.tile_mnk, self.a_dtype, self.stages)
        sC_layout = sm90_utils.make_smem_layout_epi(self.c_dtype, c_layout, EPI_TILE, EPI_STAGES)
        self.c_layout = c_layout

        # TMA descriptors. With a cluster of n CTAs along N, A's tile is shared by them and can be
        # multicast (one load, n destinations); same for B along M.
        self.mcast_a = self.cluster_mn[1]
        self.mcast_b = self.cluster_mn[0]
        tma_a, gA = self._tma_load(a, sA_layout, (self.tile_mn[0], TILE_K), self.mcast_a)
        tma_b, gB = self._tma_load(b, sB_layout, (self.tile_mn[1], TILE_K), self.mcast_b)
        tma_c, gC = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileS2GOp(), c, cute.slice_(sC_layout, (None, None, 0)), EPI_TILE)

        @cute.struct
        class SharedStorage:
            # full[stages] then empty[stages]: the ring's mbarriers
            barriers: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
            sA: cute.struct.Align[cute.struct.MemRange[self.a_dtype, cute.cosize(sA_layout)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[self.a_dtype, cute.cosize(sB_layout)], 1024]

        self.shared_storage = SharedStorage

        # One CTA per C tile; the grid is rounded up (TMA clips the partial tiles).
        tiles_m = cute.ceil_div(c.shape[0], self.tile_mn[0])
        tiles_n = cute.ceil_div(c.shape[1], self.tile_mn[1])
        grid = (cute.round_up(tiles_m, self.cluster_mn[0]), cute.round_up(tiles_n, self.cluster_mn[1]), 1)
        self.kernel(tma_a, gA, tma_b, gB, tma_c, gC, self.tiled_mma, sA_layout, sB_layout,
                    sC_layout).launch(grid=grid, block=[THREADS, 1, 1],
                                      cluster=(*self.cluster_mn, 1), stream=stream)

    @staticmethod
    def _tma_load(tensor, smem_layout_staged, tile, mcast):
        op = cpasync.CopyBulkTensorTileG2SOp() if mcast == 1 else cpasync.CopyBulkTensorTileG2SMulticastOp()
        return cpasync.make_tiled_tma_atom(op, tensor, cute.slice_(smem_layout_staged, (None, None, 0)),
                                           tile, num_multicast=mcast)

    # -- device side -------------------------------------------------------------------------
    @cute.kernel
    def kernel(self, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom, mB: cute.Tensor,
               tma_c: cute.CopyAtom, mC: cute.Tensor, tiled_mma: cute.TiledMma,
               sA_layout: cute.ComposedLayout, sB_layout: cute.ComposedLayout,
               sC_layout: cute.ComposedLayout):
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        is_producer = warp_idx == 0  # warp 0 issues the TMA loads (one elected lane does)
        if is_producer:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)

        # Which C tile: walk the grid in bands of 8 tile-rows so that CTAs running at the same
        # time share A and B tiles in L2.
        cta_m, cta_n = self._swizzled_cluster_coord()
        in_cluster = cute.arch.block_in_cluster_idx()
        tile_m = cta_m * self.cluster_mn[0] + in_cluster[0]
        tile_n = cta_n * self.cluster_mn[1] + in_cluster[1]

        cta_layout, cluster_coord, a_mcast_mask, b_mcast_mask = multicast_masks(
            self.cluster_mn, self.mcast_a, self.mcast_b)

        # The ring: full[s] flips when stage s's TMA bytes have landed (tx_count), empty[s] when
        # every consumer warp has released it (one arrive per warp and multicast partner).
        smem = utils.SmemAllocator()
        storage = smem.allocate(self.shared_storage)
        ring = make_ring(storage.barriers.data_ptr(), self.stages, self.a_dtype, sA_layout, sB_layout,
                         cta_layout, self.mcast_a + self.mcast_b - 1, THREADS)
        pipeline.pipeline_init_arrive(cluster_shape_mn=self.cluster_mn, is_relaxed=True)

        sA = storage.sA.get_tensor(sA_layout.outer, swizzle=sA_layout.inner)
        sB = storage.sB.get_tensor(sB_layout.outer, swizzle=sB_layout.inner)

        # This CTA's tiles of A, B (all k-tiles: (tile, TILE_K, k_tiles)) and C.
        coord = (tile_m, tile_n, None)
        gA = cute.local_tile(mA, self.tile_mnk, coord, proj=(1, None, 1))
        gB = cute.local_tile(mB, self.tile_mnk, coord, proj=(None, 1, 1))
        gC = cute.local_tile(mC, self.tile_mnk, coord, proj=(1, 1, None))

        # TMA views: tAgA[(None, k)] is k-tile k in global memory, tAsA[(None, s)] ring stage s.
        tAsA, tAgA, tBsB, tBgB = tma_views(tma_a, tma_b, cta_layout, cluster_coord, sA, sB, gA, gB)

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
        ops = _Operands(tma_a, tAgA, tAsA, a_mcast_mask, tma_b, tBgB, tBsB, b_mcast_mask,
                        tiled_mma, tCrA, tCrB, acc)
        if cutlass.const_expr(self.variant == "naive"):
            self._mainloop_naive(ring, ops, k_tiles, is_producer)
        elif cutlass.const_expr(self.variant == "prefetch"):
            self._mainloop_prefetch(ring, ops, k_tiles, is_producer)
        elif cutlass.const_expr(self.variant == "compiler"):
            self._mainloop_compiler(ring, ops, k_tiles, is_producer)
        elif cutlass.const_expr(self.variant == "compiler_overlap"):
            self._mainloop_compiler_overlap(ring, ops, k_tiles, is_producer)
        else:
            self._mainloop_compiler_guarded(ring, ops, k_tiles, is_producer)

        self._epilogue(tma_c, gC, sA, sC_layout, tiled_mma, acc, tidx, warp_idx)

    # -- the three mainloops -----------------------------------------------------------------
    # Each one consumes k-tiles 0..k_tiles-1 of the ring into ``ops.acc`` and ends with every
    # wgmma complete and every stage released.

    @cute.jit
    def _mainloop_naive(self, ring, ops, k_tiles, is_producer):
        """Load k-tile k, wait for it, compute it, release it. No overlap at all.

        The pipeline state (stage index and phase bit) is a function of k: stage k % stages,
        and the phase flips each time the ring wraps around.
        """
        for k in cutlass.range(k_tiles, unroll=1):
            stage, phase = k % self.stages, (k // self.stages) % 2
            cons = pipeline.PipelineState(self.stages, k, stage, phase)
            prod = pipeline.PipelineState(self.stages, k, stage, phase ^ 1)  # empty barriers start "free"
            if is_producer:
                ring.producer_acquire(prod)  # wait until the stage is empty, expect its bytes
                self._issue_tma(ring, ops, prod)
            ring.consumer_wait(cons)  # wait until its bytes have landed: the full TMA latency
            self._issue_mma(ops, cons.index)
            warpgroup.wait_group(0)  # the MMAs read smem until they finish
            ring.consumer_release(cons)

    @cute.jit
    def _mainloop_prefetch(self, ring, ops, k_tiles, is_producer):
        """Prologue fills the ring; then compute k-tile k while TMA loads k + stages - 1.

        wgmmas are kept one batch in flight (wait_group(1)): tile k's MMAs run while tile k-1's
        are retired and its stage released, which is the moment the producer may refill it.
        """
        prod = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        cons = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        released = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        # Prologue: fill stages - 1 stages (or all k-tiles, if there are fewer). Not all of them:
        # iteration k refills the stage of tile k-1, released just before; with a full ring the
        # first refill would wait for a stage nobody has released yet (warp 0 would hang there
        # and never release its own share: a deadlock).
        if is_producer:
            for _ in cutlass.range(cutlass.min(self.stages - 1, k_tiles), unroll=1):
                ring.producer_acquire(prod)
                self._issue_tma(ring, ops, prod)
                prod.advance()
        for k in cutlass.range(k_tiles, unroll=1):
            ring.consumer_wait(cons)
            self._issue_mma(ops, cons.index)
            warpgroup.wait_group(1)  # tile k-1's MMAs are done: its stage can be refilled
            cons.advance()
            if k > 0:
                ring.consumer_release(released)
                released.advance()
            if is_producer and prod.count < k_tiles:
                ring.producer_acquire(prod)
                self._issue_tma(ring, ops, prod)
                prod.advance()
        warpgroup.wait_group(0)
        if k_tiles > 0:
            ring.consumer_release(released)

    @cute.jit
    def _mainloop_compiler(self, ring, ops, k_tiles, is_producer):
        """The naive loop, plus ``prefetch_stages``: the compiler writes the prologue itself.

        Two changes from ``_mainloop_naive`` make the compiler's software pipeliner take the loop
        (docs/hopper_gemm.md has the full story):

        * ``prefetch_stages=P``: issue the TMA loads of k-tile k + P in iteration k (a prologue
          loads tiles 0..P-1, a drain loop computes the last P tiles).
        * the TMA copies sit at the top level of the loop body, not inside ``if is_producer``.
          The pass splits the body at a TMA copy paired with a wait on the same mbarrier and
          does not look inside an ``if``; so the copies are predicated (``pred=``) instead, and
          still only warp 0 issues them. Only the barrier bookkeeping stays under the ``if``.
        """
        producer_only = cute.make_rmem_tensor((1,), cutlass.Boolean)
        producer_only[0] = is_producer
        for k in cutlass.range(k_tiles, prefetch_stages=self.prefetch, unroll=1):
            stage, phase = k % self.stages, (k // self.stages) % 2
            cons = pipeline.PipelineState(self.stages, k, stage, phase)
            prod = pipeline.PipelineState(self.stages, k, stage, phase ^ 1)
            if is_producer:
                ring.producer_acquire(prod)
            self._issue_tma(ring, ops, prod, pred=producer_only)
            ring.consumer_wait(cons)
            self._issue_mma(ops, cons.index)
            warpgroup.wait_group(0)
            ring.consumer_release(cons)

    @cute.jit
    def _mainloop_compiler_overlap(self, ring, ops, k_tiles, is_producer):
        """The compiler variant plus the prefetch variant's MMA overlap (experiment, notebook 04).

        The compiler pipelines the loads; keeping one wgmma batch in flight across k-tiles is
        still ours to write: wait_group(1), then release the previous k-tile's stage.
        """
        producer_only = cute.make_rmem_tensor((1,), cutlass.Boolean)
        producer_only[0] = is_producer
        for k in cutlass.range(k_tiles, prefetch_stages=self.prefetch, unroll=1):
            stage, phase = k % self.stages, (k // self.stages) % 2
            cons = pipeline.PipelineState(self.stages, k, stage, phase)
            prod = pipeline.PipelineState(self.stages, k, stage, phase ^ 1)
            if is_producer:
                ring.producer_acquire(prod)
            self._issue_tma(ring, ops, prod, pred=producer_only)
            ring.consumer_wait(cons)
            self._issue_mma(ops, cons.index)
            warpgroup.wait_group(1)
            if k > 0:
                j = k - 1
                ring.consumer_release(pipeline.PipelineState(
                    self.stages, j, j % self.stages, (j // self.stages) % 2))
        warpgroup.wait_group(0)
        if k_tiles > 0:
            j = k_tiles - 1
            ring.consumer_release(pipeline.PipelineState(self.stages, j, j % self.stages,
                                                         (j // self.stages) % 2))

    @cute.jit
    def _mainloop_compiler_guarded(self, ring, ops, k_tiles, is_producer):
        """What NOT to do (kept for notebook 04): the naive loop plus ``prefetch_stages`` only.

        The TMA copies are inside ``if is_producer``, where the pipeliner does not look: it prints
        "software pipelining ('prefetch_stages') skipped ..." and compiles the naive loop.
        """
        for k in cutlass.range(k_tiles, prefetch_stages=self.prefetch, unroll=1):
            stage, phase = k % self.stages, (k // self.stages) % 2
            cons = pipeline.PipelineState(self.stages, k, stage, phase)
            prod = pipeline.PipelineState(self.stages, k, stage, phase ^ 1)
            if is_producer:
                ring.producer_acquire(prod)
                self._issue_tma(ring, ops, prod)
            ring.consumer_wait(cons)
            self._issue_mma(ops, cons.index)
            warpgroup.wait_group(0)
            ring.consumer_release(cons)

    # -- pieces the mainloops share (straight-line code: plain Python at trace time) ----------
    @staticmethod
    def _issue_tma(ring, ops, state, pred=None):
        """TMA-load k-tile state.count of A and B into ring stage state.index."""
        bar = ring.producer_get_barrier(state)
        cute.copy(ops.tma_a, ops.tAgA[(None, state.count)], ops.tAsA[(None, state.index)],
                  tma_bar_ptr=bar, mcast_mask=ops.a_mcast_mask, pred=pred)
        cute.copy(ops.tma_b, ops.tBgB[(None, state.count)], ops.tBsB[(None, state.index)],
                  tma_bar_ptr=bar, mcast_mask=ops.b_mcast_mask, pred=pred)

    @staticmethod
    def _issue_mma(ops, stage):
        """acc += A_tile @ B_tile.T from ring stage ``stage``: TILE_K/16 async wgmmas, one group."""
        warpgroup.fence()
        for kb in range(cute.size(ops.tCrA, mode=[2])):
            coord = (None, None, kb, stage)
            cute.gemm(ops.tiled_mma, ops.acc, ops.tCrA[coord], ops.tCrB[coord], ops.acc)
        warpgroup.commit_group()

    # -- epilogue ----------------------------------------------------------------------------
    @cute.jit
    def _epilogue(self, tma_c, gC, sA, sC_layout, tiled_mma, acc, tidx, warp_idx):
        """fp32 accumulators -> out dtype -> smem (stmatrix) -> TMA store, EPI_TILE at a time."""
        # The C staging buffers reuse the A ring: every warp must be past the mainloop first.
        # In a cluster, also every CTA of it: a peer may still be sending its last "empty"
        # arrivals to our barriers, and must not find us gone.
        if cutlass.const_expr(self.cluster_mn != (1, 1)):
            cute.arch.cluster_arrive()
            cute.arch.cluster_wait()
        else:
            cute.arch.sync_threads()
        sC = cute.make_tensor(cute.recast_ptr(sA.iterator, sC_layout.inner, dtype=self.c_dtype),
                              sC_layout.outer)
        r2s_atom = sm90_utils.sm90_get_smem_store_op(self.c_layout, elem_ty_d=self.c_dtype,
                                                     elem_ty_acc=self.acc_dtype)
        stmatrix = cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4), self.c_dtype)
        r2s = cute.make_tiled_copy_S(r2s_atom, cute.make_tiled_copy_C_atom(stmatrix, tiled_mma))
        thr_r2s = r2s.get_slice(tidx)
        tRS_sC = thr_r2s.partition_D(sC)
        tRS_acc = r2s.retile(acc)
        rC_layout = cute.make_layout(cute.shape(thr_r2s.partition_S(sC))[:3])
        rC = cute.make_rmem_tensor_like(rC_layout, self.acc_dtype)

        gC_epi = cute.zipped_divide(gC, EPI_TILE)
        bSG_sC, bSG_gC = cpasync.tma_partition(tma_c, 0, cute.make_layout(1),
                                               cute.group_modes(sC, 0, 2), gC_epi)
        n_epi = cute.size(gC_epi, mode=[1])
        epi_grid = cute.make_layout(gC_epi.shape[1], stride=(gC_epi.shape[1][1], 1))
        store = pipeline.PipelineTmaStore.create(
            num_stages=EPI_STAGES,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, THREADS))
        for e in cutlass.range_constexpr(n_epi):
            for v in cutlass.range_constexpr(cute.size(rC)):
                rC[v] = tRS_acc[e * cute.size(rC) + v]
            rC_out = cute.make_rmem_tensor_like(rC_layout, self.c_dtype)
            rC_out.store(rC.load().to(self.c_dtype))
            buf = e % EPI_STAGES
            cute.copy(r2s, rC_out, tRS_sC[(None, None, None, buf)])
            # generic-proxy smem writes must be visible to the async proxy (TMA) before the store
            cute.arch.fence_proxy("async.shared", space="cta")
            pipeline.sync(barrier_id=1)
            if warp_idx == 0:
                cute.copy(tma_c, bSG_sC[(None, buf)], bSG_gC[(None, epi_grid.get_hier_coord(e))])
                store.producer_commit()
                store.producer_acquire()  # at most EPI_STAGES-1 stores in flight: buffer reusable
            pipeline.sync(barrier_id=1)
        if warp_idx == 0:
            store.producer_tail()

    # -- tile order --------------------------------------------------------------------------
    @cute.jit
    def _swizzled_cluster_coord(self):
        """(m, n) of this cluster's tile, visiting the grid in bands of GROUP_M cluster-rows.

        The launch order is x (M) fastest. Re-mapped, consecutive clusters walk down a band of
        GROUP_M rows column by column, so the ~132 CTAs in flight touch few A and B tiles.
        """
        cx, cy, _ = cute.arch.cluster_idx()
        nx, ny, _ = cute.arch.cluster_dim()
        linear = cx + cy * nx
        band = linear // (GROUP_M * ny)
        first_row = band * GROUP_M
        rows = cutlass.min(GROUP_M, nx - first_row)
        within = linear - band * GROUP_M * ny
        return first_row + within % rows, within // rows


#: Band height (in clusters) of the L2-friendly tile order.
GROUP_M = 8


@dataclass
class _Operands:
    """What the mainloops read and write: TMA atoms and views, MMA fragments, accumulators."""

    tma_a: object
    tAgA: object
    tAsA: object
    a_mcast_mask: object
    tma_b: object
    tBgB: object
    tBsB: object
    b_mcast_mask: object
    tiled_mma: object
    tCrA: object
    tCrB: object
    acc: object


def _name_of(dtype) -> str:
    for name, d in _CUTLASS_DTYPES.items():
        if d is dtype:
            return name
    raise DTypeError(f"dtype {dtype} is not supported by the Hopper GEMM",
                     f"use inputs in {IN_DTYPES} and outputs in {OUT_DTYPES}")


# ------------------------------------------------------------------------------------------
# Compile targets for cutecourse.inspect (fake tensors: no GPU, dynamic M, N, K)
# ------------------------------------------------------------------------------------------
def fake_operands(in_dtype="float16", out_dtype="float16"):
    """Fake K-major A (M, K), B (N, K) and N-major C (M, N) with symbolic sizes and 16-B aligned rows."""
    from cutlass.cute.runtime import make_fake_tensor

    _check_dtype_names(in_dtype, out_dtype)
    div_in = 16 // _BYTES[in_dtype]
    div_out = 16 // _BYTES[out_dtype]
    m, n, k = cute.sym_int(symbol="M"), cute.sym_int(symbol="N"), cute.sym_int(symbol="K")
    lda = cute.sym_int64(divisibility=div_in, symbol="lda")
    ldb = cute.sym_int64(divisibility=div_in, symbol="ldb")
    ldc = cute.sym_int64(divisibility=div_out, symbol="ldc")
    ti, to = _CUTLASS_DTYPES[in_dtype], _CUTLASS_DTYPES[out_dtype]
    a = make_fake_tensor(ti, (m, k), (lda, 1), assumed_align=16)
    b = make_fake_tensor(ti, (n, k), (ldb, 1), assumed_align=16)
    c = make_fake_tensor(to, (m, n), (ldc, 1), assumed_align=16)
    return a, b, c


def compile_target(variant: str = "prefetch", tile=(128, 256), in_dtype: str = "float16",
                   out_dtype: str = "float16", cluster=(1, 1), prefetch_stages: int | None = None,
                   stages: int | None = None):
    """(jit_fn, fake_args) for ``cutecourse.inspect.compile_report`` (all params JSON-able).

    The pipelining diagnostic ("software pipelining ('prefetch_stages') skipped ...") is a
    compiler *warning*: it reaches ``Report.log`` because inspect compiles with warnings on.
    """
    import cuda.bindings.driver as cuda

    kernel = HopperGemm(tuple(tile), variant, tuple(cluster), prefetch_stages, stages)
    a, b, c = fake_operands(in_dtype, out_dtype)
    return kernel, (a, b, c, cuda.CUstream(0))


# ------------------------------------------------------------------------------------------
# The Python entry: validate, compile once per configuration, launch
# ------------------------------------------------------------------------------------------
_COMPILED: dict = {}


def validate(a, b, out_dtype=None, tile=(128, 256), stages: int | None = None) -> StagePlan:
    """Check torch operands for ``gemm`` on any machine; return the smem plan. Raises CourseErrors."""
    import torch

    names = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32"}
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor):
            raise DTypeError(f"{name} is a {type(t).__name__}, not a torch.Tensor", "pass torch tensors")
        if t.dtype not in (torch.float16, torch.bfloat16):
            raise DTypeError(f"{name} is {str(t.dtype).replace('torch.', '')}; the Hopper GEMM takes "
                             "float16 or bfloat16 inputs", f"convert it, e.g. {name}.half()")
        if t.dim() != 2:
            raise ShapeError(f"{name} has {t.dim()} dimensions; the GEMM takes 2-D A (M, K) and B (N, K)",
                             "reshape to 2-D (batch by calling once per matrix)")
    if a.dtype != b.dtype:
        raise DTypeError(f"a is {a.dtype} but b is {b.dtype}", "give A and B the same dtype")
    out = out_dtype if out_dtype is not None else a.dtype
    if out not in names:
        raise DTypeError(f"out_dtype {out} is not supported", "use torch.float16, torch.bfloat16 or torch.float32")
    if a.shape[1] != b.shape[1]:
        raise ShapeError(f"A is {tuple(a.shape)} and B is {tuple(b.shape)}: their K (dim 1) differ",
                         "B is (N, K), like a torch Linear weight: C = A @ B.T")
    if min(a.shape[0], b.shape[0], a.shape[1]) < 1:
        raise ShapeError(f"empty operand: A {tuple(a.shape)}, B {tuple(b.shape)}", "M, N and K must be >= 1")
    for name, t in (("a", a), ("b", b)):
        if t.stride(1) != 1:
            raise LayoutError(
                f"{name} is not K-major: its strides are {tuple(t.stride())}, and the kernel's TMA reads "
                "rows of K contiguous elements (stride 1 along dim 1)",
                f"pass {name}.contiguous(); if you hold B as (K, N), pass b.T.contiguous()")
    el = a.element_size()
    for name, t in (("a", a), ("b", b)):
        if t.data_ptr() % 16:
            raise AlignmentError(f"{name} starts at an address that is not 16-byte aligned (TMA needs 16 B)",
                                 f"pass {name}.clone() (fresh allocations are 256-byte aligned)")
        if (t.stride(0) * el) % 16:
            raise AlignmentError(
                f"{name}'s rows are {t.stride(0) * el} bytes apart; TMA needs a multiple of 16 bytes "
                f"(K = {t.shape[1]} is not a multiple of {16 // el})",
                f"pad K to a multiple of {16 // el} with zeros (torch.nn.functional.pad)")
    n = b.shape[0]
    if (n * torch.empty((), dtype=out).element_size()) % 16:
        raise AlignmentError(f"C would have rows of {n} elements, not a multiple of 16 bytes (TMA store)",
                             f"pad N to a multiple of {16 // torch.empty((), dtype=out).element_size()}")
    if a.device != b.device:
        raise DeviceError(f"a is on {a.device}, b on {b.device}", "put both on the same GPU")
    return plan_stages(tuple(tile), names[a.dtype], names[out], stages=stages)


def gemm(a, b, out_dtype=None, tile=(128, 256), variant: str = "prefetch", cluster=(1, 1),
         prefetch_stages: int | None = None, stages: int | None = None):
    """C = A @ B.T on an H100: A (M, K), B (N, K), both K-major; returns C (M, N) of ``out_dtype``.

    Compiles once per (variant, tile, dtypes, cluster, stages, prefetch) and caches the kernel;
    M, N and K are runtime values, so new shapes reuse it.
    """
    import cuda.bindings.driver as cuda
    import torch
    from cutlass.cute.runtime import from_dlpack

    from ..modes import require_gpu

    out_dtype = a.dtype if out_dtype is None else out_dtype
    if variant not in VARIANTS + DEMO_VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, not {variant!r}")
    if tuple(cluster) not in CLUSTERS:
        raise ShapeError(f"cluster {tuple(cluster)} is not supported", f"use one of {list(CLUSTERS)}")
    validate(a, b, out_dtype, tile, stages)
    require_gpu("sm_90a")
    if a.device.type != "cuda":
        raise DeviceError(f"the operands are on {a.device}", "move them to the GPU with .cuda()")
    c = torch.empty((a.shape[0], b.shape[0]), dtype=out_dtype, device=a.device)
    args = [from_dlpack(t, assumed_align=16).mark_layout_dynamic(leading_dim=1) for t in (a, b, c)]
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    key = (variant, tuple(tile), a.dtype, out_dtype, tuple(cluster), prefetch_stages, stages)
    if key not in _COMPILED:
        kernel = HopperGemm(tuple(tile), variant, tuple(cluster), prefetch_stages, stages)
        _COMPILED[key] = cute.compile(kernel, *args, stream)
    _COMPILED[key](*args, stream)
    return c


def launcher(a, b, c, tile=(128, 256), variant: str = "prefetch", prefetch_stages: int | None = None,
             stages: int | None = None, cluster=(1, 1)):
    """A zero-overhead launch function for benchmarks: ``fn()`` writes A @ B.T into ``c``.

    Validation and compilation happen here, once; ``fn`` only launches.
    """
    import cuda.bindings.driver as cuda
    import torch
    from cutlass.cute.runtime import from_dlpack

    from ..modes import require_gpu

    validate(a, b, c.dtype, tile, stages)
    require_gpu("sm_90a")
    args = [from_dlpack(t, assumed_align=16).mark_layout_dynamic(leading_dim=1) for t in (a, b, c)]
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    key = (variant, tuple(tile), a.dtype, c.dtype, tuple(cluster), prefetch_stages, stages)
    if key not in _COMPILED:
        _COMPILED[key] = cute.compile(HopperGemm(tuple(tile), variant, tuple(cluster), prefetch_stages,
                                                 stages), *args, stream)
    compiled = _COMPILED[key]

    def fn():
        compiled(*args, stream)

    return fn
