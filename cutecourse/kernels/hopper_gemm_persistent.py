"""A persistent, warp-specialized Hopper GEMM: the schedule that keeps the tensor cores busy.

``C = A @ B.T`` exactly as in ``hopper_gemm`` (same operands, tiles, TMA ring, WGMMA and
TMA-store epilogue: the pieces in ``sm90.py``), but organised differently:

* **Persistent grid.** One CTA per SM (132 on an H100), not one per C tile. Each CTA loops over
  C tiles handed out by a *tile scheduler*. The smem ring, barriers and TMA descriptors are set
  up once per SM instead of once per tile, and - the point - the ring never drains between tiles.
* **Warp specialization.** Three warpgroups: warpgroup 0 is the *producer*; only its warp 0 works,
  issuing TMA loads and nothing else. Warpgroups 1 and 2 are the *consumers*: WGMMA and epilogue,
  64 rows of the 128-row tile each. Nobody does both jobs, so no role waits on the other's work.
* **setmaxnreg.** A CTA of 384 threads gets 65536 / 384 = 170 registers per thread at launch
  (168 after rounding to 8). The producer needs a few dozen (addresses, loop counters); the
  consumers need 128 just for a 64x256 fp32 accumulator, plus fragments, addresses and epilogue
  values. So the producer warpgroup gives registers back (``setmaxnreg.dec 40``) and the consumer
  warpgroups take them (``setmaxnreg.inc 232``): 128 x 40 + 256 x 232 = 64512 <= 65536.
* **The producer runs ahead.** Its loop does not stop at tile boundaries: as soon as the consumers
  release the stages of tile t's last k-tiles, it fills them with the first k-tiles of the next
  tile. While the consumers run tile t's epilogue, those loads are in flight, so the next
  mainloop starts on a full ring. (So C is staged in its own smem buffers, not in the A ring.)
* **L2-friendly tile order.** Bands of ``group_m`` tile-rows (``models/tile_order.py``). 16 here,
  not 8 as in ``hopper_gemm``: the ~132 tiles in flight then form a 16 x ~8 block, reading 16 A
  panels (128 rows each) and ~8 B panels (256 rows each), the minimum of r*128 + c*256 with
  r*c = 132 (measured: docs/hopper_gemm.md).
* **Two schedulers.** "static" (default): CTA i computes work items i, i + P, i + 2P ... (P CTAs)
  and needs no communication. "dynamic": the producer warp takes the next work item from a global
  atomic counter when it is ready for one and hands it to its consumers through a two-slot smem
  queue (``cutlass.pipeline.PipelineAsync``), so CTAs on faster SMs take more tiles.

* **Three tiles.** 128x256 (the default), 128x128, and 256x128, where each consumer warpgroup owns
  two 64-row slabs (two m64n128 wgmmas per k-step; same 48 KiB stage, same 128 accumulator
  registers). 256x128 with a 1x2 cluster is what cuBLAS launches for bf16 on most of the
  schedules table; here it measured 0.98-1.01x the 128x256 tile, never ahead of it
  (``benchmarks/results/schedules_bfloat16_tall.json``).

* **Programmatic dependent launch** (``pdl=True``, off by default). A loop of GEMMs on one stream
  normally leaves the GPU idle between two kernels for 1-2 us: the next grid is launched only
  when the last CTA of this one has exited. With PDL the next grid may start early: its CTAs take
  SMs as this grid's CTAs leave and set up their barriers and descriptors, and only the producer
  warp waits (``griddepcontrol.wait``) for this grid to finish and flush its memory before its
  first load. The consumers tell the GPU when this CTA's work is done
  (``griddepcontrol.launch_dependents``). Every read of A and B and every write of C comes after
  the producer's wait, so a kernel may read what the previous one wrote, or overwrite what it read.

What it does *not* do: overlap the epilogue with the next tile's MMAs (the "ping-pong" schedule,
``hopper_gemm_pingpong``), or split the last partial wave along K (stream-K,
``hopper_gemm_streamk``, which passes this kernel its ``workspace``; ``None`` here).

Entry points mirror ``hopper_gemm``: ``gemm_persistent(a, b, ...)``, ``launcher(...)`` for
benchmarks, ``compile_target(...)`` for ``cutecourse.inspect``, ``plan_persistent(...)``.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
from cutlass.cute.nvgpu import cpasync, warpgroup

from ..errors import ShapeError
from ..models.gemm_plan import (EPI_STAGES, EPI_TILE, SMEM_CAPACITY, TILE_K, TILES, check_epi_tile,
                                check_tile, plan_stages)
from ..models.tile_order import persistent_ctas, tile_order  # noqa: F401  (the scheduler's CPU model)
from . import gemm_launch, sm90, tile_scheduler

#: Warpgroup roles. Warpgroup 0: producer (warp 0 issues TMA); 1 and 2: MMA + epilogue.
PRODUCER_WARPGROUPS = 1
CONSUMER_WARPGROUPS = 2  # each owns 64 rows of the 128-row tile
CONSUMER_THREADS = 128 * CONSUMER_WARPGROUPS
THREADS = 128 * (PRODUCER_WARPGROUPS + CONSUMER_WARPGROUPS)  # 384
#: setmaxnreg targets (multiples of 8, between 24 and 256). See the module docstring.
PRODUCER_REGISTERS = 40
CONSUMER_REGISTERS = 232
REGISTER_FILE = 65536
assert PRODUCER_REGISTERS * 128 * PRODUCER_WARPGROUPS + CONSUMER_REGISTERS * CONSUMER_THREADS <= REGISTER_FILE
#: Band height of the tile order, in clusters (module docstring).
GROUP_M = 16
#: The tiles: gemm_plan's two, and 256x128 (each consumer warpgroup 128x128: two m64n128 wgmmas
#: per k-step, the same 48 KiB stage and 128 accumulator registers as 128x256).
TALL = (256, 128)
PERSISTENT_TILES = (*TILES, TALL)
#: Cluster shapes (the multicast pairs share A or B tiles as in ``hopper_gemm_cluster``).
CLUSTERS = ((1, 1), (2, 1), (1, 2))
#: Tile schedulers (tile_scheduler.py): "static" or "dynamic".
SCHEDULERS = tile_scheduler.KINDS
WORK_SLOTS = tile_scheduler.WORK_SLOTS
#: The first consumer warp issues the epilogue's TMA stores.
EPILOGUE_STORE_WARP = 4


def plan_persistent(tile_mn=(128, 256), in_dtype="float16", out_dtype="float16",
                    capacity: int = SMEM_CAPACITY, stages: int | None = None, epi_tile=EPI_TILE,
                    c_buffer_sets: int = 1, tiles=TILES, epi_stages: int = EPI_STAGES, **kwargs):
    """The smem plan with C staged in its own buffers: 128x256 fp16 out: 4 stages; fp32 out: 3.
    ``c_buffer_sets``: sets of ``epi_stages`` C buffers (one per warpgroup that stores on its own)."""
    return plan_stages(tile_mn, in_dtype, out_dtype, capacity, stages, c_in_ring=False,
                       epi_tile=epi_tile, epi_stages=epi_stages * c_buffer_sets, tiles=tiles, **kwargs)


class PersistentHopperGemm:
    """C = A @ B.T, persistent and warp-specialized (see the module docstring).

    ``sms``: CTAs (SMs) the persistent grid may use; the launchers pass the GPU's SM count.
    ``group_m``: band height of the tile order. ``stages``: override the ring depth.
    ``scheduler``: "static" or "dynamic"; the kernel always takes a ``counters`` tensor
    (2 x int32, zero before the first launch; the dynamic scheduler leaves it zero again when it
    finishes), the static one ignores it. ``cluster_mn``: one of ``CLUSTERS``. ``pdl``: launch with
    programmatic dependent launch (module docstring).
    """

    #: The tiles it takes; warpgroups sharing one tile's MMAs (2: each owns 64 of its 128 rows);
    #: sets of C buffers (one: the two warpgroups store each tile together).
    TILES = PERSISTENT_TILES
    MMA_WARPGROUPS = CONSUMER_WARPGROUPS
    C_BUFFER_SETS = 1

    def __init__(self, tile_mn=(128, 256), cluster_mn=(1, 1), sms: int = 132,
                 group_m: int = GROUP_M, stages: int | None = None, scheduler: str = "static",
                 epi_tile=EPI_TILE, epi_stages: int = EPI_STAGES, pdl: bool = False):
        self.tile_mn = check_tile(tile_mn, self.TILES)
        if tuple(cluster_mn) not in CLUSTERS:
            raise ShapeError(f"cluster {tuple(cluster_mn)} is not supported",
                             f"use one of {list(CLUSTERS)} ((1, 1) = no multicast)")
        if sms < cluster_mn[0] * cluster_mn[1] or group_m < 1:
            raise ShapeError(f"sms={sms}, group_m={group_m}: need at least one cluster and group_m >= 1",
                             "pass the GPU's SM count (132 on an H100 SXM)")
        if scheduler not in SCHEDULERS:
            raise ValueError(f"scheduler must be one of {SCHEDULERS}, not {scheduler!r}")
        if scheduler == "dynamic" and tuple(cluster_mn) != (1, 1):
            raise ShapeError("the dynamic scheduler hands out tiles per CTA, but a cluster's CTAs must "
                             "work on neighbouring tiles (they share multicast loads)",
                             "use scheduler='static' with clusters")
        self.tile_mnk = (*self.tile_mn, TILE_K)
        self.cluster_mn = tuple(cluster_mn)
        self.sms, self.group_m, self.scheduler = sms, group_m, scheduler
        self.requested_stages = stages
        self.epi_stages, self.pdl = epi_stages, pdl
        self.epi_tile = check_epi_tile(self.tile_mn, epi_tile, whole_rounds=True, epi_stages=epi_stages)
        self.acc_dtype = cutlass.Float32
        self.config = (self.tile_mn, self.cluster_mn, sms, group_m, stages, scheduler, self.epi_tile,
                       epi_stages, pdl)

    # -- host side ---------------------------------------------------------------------------
    @cute.jit
    def __call__(self, a: cute.Tensor, b: cute.Tensor, c: cute.Tensor, counters: cute.Tensor, stream,
                 workspace=None):
        self.a_dtype, self.c_dtype = a.element_type, c.element_type
        self.stages = plan_persistent(self.tile_mn, sm90.dtype_name(self.a_dtype),
                                      sm90.dtype_name(self.c_dtype), stages=self.requested_stages,
                                      epi_tile=self.epi_tile, c_buffer_sets=self.C_BUFFER_SETS,
                                      tiles=self.TILES, epi_stages=self.epi_stages).stages
        self.tiled_mma = sm90.tiled_mma(self.a_dtype, self.acc_dtype, self.MMA_WARPGROUPS, self.tile_mn[1])
        sA_layout, sB_layout, sC_layout = sm90.smem_layouts(self.tile_mnk, self.a_dtype, self.c_dtype,
                                                            self.stages, self.epi_tile,
                                                            self.epi_stages * self.C_BUFFER_SETS)
        tma_a, gA, tma_b, gB, tma_c, gC = sm90.tma_atoms(
            a, b, c, sA_layout, sB_layout, sC_layout, self.tile_mn, self.cluster_mn, self.epi_tile)

        @cute.struct
        class SharedStorage:
            barriers: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
            sA: cute.struct.Align[cute.struct.MemRange[self.a_dtype, cute.cosize(sA_layout)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[self.a_dtype, cute.cosize(sB_layout)], 1024]
            sC: cute.struct.Align[cute.struct.MemRange[self.c_dtype, cute.cosize(sC_layout)], 1024]
            # dynamic scheduler: work-item slots and their full/empty barriers (in the first KiB)
            work_barriers: cute.struct.MemRange[cutlass.Int64, WORK_SLOTS * 2]
            work_ids: cute.struct.MemRange[cutlass.Int32, WORK_SLOTS]

        self.shared_storage = SharedStorage

        # The persistent grid: (cluster_m, cluster_n, clusters). Each cluster of CTAs loops over
        # work items (one cluster-sized block of C tiles each); as many clusters as fit on the SMs,
        # fewer when the problem has fewer tiles.
        cm, cn = self.cluster_mn
        clusters_m = cute.ceil_div(cute.ceil_div(c.shape[0], self.tile_mn[0]), cm)
        clusters_n = cute.ceil_div(cute.ceil_div(c.shape[1], self.tile_mn[1]), cn)
        clusters = cutlass.min(clusters_m * clusters_n, self.sms // (cm * cn))
        # A 1x1 "cluster" launch attribute is left out: with it, the grouped kernel ran up to 2x
        # slower on the H100 (benchmarks/results/grouped_bfloat16.json, docs/hopper_grouped_gemm.md).
        cluster = {"cluster": (cm, cn, 1)} if cm * cn > 1 else {}
        self.kernel(tma_a, gA, tma_b, gB, tma_c, gC, self.tiled_mma, sA_layout, sB_layout,
                    sC_layout, counters, workspace).launch(grid=(cm, cn, clusters), block=[THREADS, 1, 1],
                                                min_blocks_per_mp=1, stream=stream, use_pdl=self.pdl,
                                                **cluster)

    # -- device side -------------------------------------------------------------------------
    @cute.kernel
    def kernel(self, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom, mB: cute.Tensor,
               tma_c: cute.CopyAtom, mC: cute.Tensor, tiled_mma: cute.TiledMma,
               sA_layout: cute.ComposedLayout, sB_layout: cute.ComposedLayout,
               sC_layout: cute.ComposedLayout, counters: cute.Tensor, workspace):
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        warpgroup_idx = cute.arch.make_warp_uniform(tidx // 128)
        if warp_idx == 0:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)
            cpasync.prefetch_descriptor(tma_c)

        cta_layout, cluster_coord, a_mcast_mask, b_mcast_mask = sm90.multicast_masks(self.cluster_mn)

        # The ring, as in hopper_gemm, except that only the warpgroups that compute a tile release
        # its stages.
        storage = utils.SmemAllocator().allocate(self.shared_storage)
        ring = sm90.make_ring(storage.barriers.data_ptr(), self.stages, self.a_dtype, sA_layout,
                              sB_layout, cta_layout, self.cluster_mn, 128 * self.MMA_WARPGROUPS)
        # Dynamic scheduler: the producer warp (32 threads arrive) publishes a work item in a slot,
        # the 256 consumer threads read it and release the slot.
        queue = pipeline.PipelineAsync.create(
            barrier_storage=storage.work_barriers.data_ptr(), num_stages=WORK_SLOTS,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 32),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, CONSUMER_THREADS),
            defer_sync=True)
        pipeline.pipeline_init_arrive(cluster_shape_mn=self.cluster_mn, is_relaxed=True)

        sA = storage.sA.get_tensor(sA_layout.outer, swizzle=sA_layout.inner)
        sB = storage.sB.get_tensor(sB_layout.outer, swizzle=sB_layout.inner)
        sC = storage.sC.get_tensor(sC_layout.outer, swizzle=sC_layout.inner)

        # All tiles of A, B, C (the tile coordinates stay free: the scheduler picks them per work
        # item). gA: (tile_m, TILE_K, tiles_m, k_tiles); gC: (tile_m, tile_n, tiles_m, tiles_n).
        gA = cute.local_tile(mA, self.tile_mnk, (None, None, None), proj=(1, None, 1))
        gB = cute.local_tile(mB, self.tile_mnk, (None, None, None), proj=(None, 1, 1))
        gC = cute.local_tile(mC, self.tile_mnk, (None, None, None), proj=(1, 1, None))
        # tAgA[(None, m, k)]: k-tile k of row-panel m; tAsA[(None, s)]: ring stage s.
        tAsA, tAgA, tBsB, tBgB = sm90.tma_views(tma_a, tma_b, cta_layout, cluster_coord, sA, sB, gA, gB)

        # The tile scheduler (tile_scheduler.py): this cluster's first work item, the stride
        # between its work items (the number of clusters in the grid) and the grid of work items.
        cm, cn = self.cluster_mn
        in_cluster = cute.arch.block_in_cluster_idx()
        clusters_m = cute.ceil_div(cute.size(gC, mode=[2]), cm)
        clusters_n = cute.ceil_div(cute.size(gC, mode=[3]), cn)
        sched = tile_scheduler.Scheduler(
            self.scheduler, first=cute.arch.block_idx()[2], stride=cute.arch.grid_dim()[2],
            clusters_m=clusters_m, clusters_n=clusters_n, total=clusters_m * clusters_n,
            group_m=self.group_m,
            cluster_mn=self.cluster_mn, in_cluster=in_cluster, queue=queue, counters=counters,
            slots=storage.work_ids.get_tensor(cute.make_layout(WORK_SLOTS)), workspace=workspace)
        k_tiles = cute.size(gA, mode=[3])

        pipeline.pipeline_init_wait(cluster_shape_mn=self.cluster_mn)

        if warpgroup_idx < PRODUCER_WARPGROUPS:
            # Producer warpgroup: give registers back first (all 4 warps of the warpgroup must
            # execute setmaxnreg), then only warp 0 stays busy.
            cute.arch.setmaxregister_decrease(PRODUCER_REGISTERS)
            if warp_idx == 0:
                if cutlass.const_expr(self.pdl):
                    cute.arch.griddepcontrol_wait()  # the previous kernel has finished (PDL)
                loads = sm90.Loads(tma_a, tAgA, tAsA, a_mcast_mask, tma_b, tBgB, tBsB, b_mcast_mask)
                self._producer(ring, sched, k_tiles, loads)
        else:
            cute.arch.setmaxregister_increase(CONSUMER_REGISTERS)
            self._consumers(ring, sched, k_tiles, tiled_mma, tma_c, sA, sB, sC, gC, tidx, warp_idx,
                            warpgroup_idx)
            if cutlass.const_expr(self.pdl):
                cute.arch.griddepcontrol_launch_dependents()  # the next kernel may start (PDL)

    # -- producer: one warp, TMA only --------------------------------------------------------
    @cute.jit
    def _producer(self, ring, sched, k_tiles, loads):
        """Load every k-tile of every work item of this CTA, in order, into the ring.

        One pipeline state runs across tile boundaries: the producer does not wait for the
        consumers to finish a tile (or its epilogue), only for a free stage. So the first k-tiles of
        the next tile are loaded while the consumers still compute and store the current one.
        """
        prod = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        slot = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, WORK_SLOTS)
        work = tile_scheduler.first_work(sched)
        while work < sched.total:
            tile_scheduler.publish(sched, slot, work)
            slot.advance()
            tile_m, tile_n = tile_scheduler.tile_of(sched, work)
            tile_loads = sm90.Loads(loads.tma_a, loads.tAgA[(None, tile_m, None)], loads.tAsA,
                                    loads.a_mcast_mask, loads.tma_b, loads.tBgB[(None, tile_n, None)],
                                    loads.tBsB, loads.b_mcast_mask)
            for k in cutlass.range(k_tiles, unroll=1):
                ring.producer_acquire(prod)  # wait for a free stage, expect its bytes
                sm90.issue_tma(ring, tile_loads, prod, k)
                prod.advance()
            work = tile_scheduler.next_work(sched, work)
        tile_scheduler.publish(sched, slot, work)  # a work item >= total: "no more tiles"
        tile_scheduler.finish(sched)
        # Wait until the consumers (ours and, in a cluster, the peers') have released every stage:
        # the CTA must not exit while arrivals to its barriers are still on the way.
        ring.producer_tail(prod)

    # -- consumers: two warpgroups, WGMMA + epilogue -----------------------------------------
    @cute.jit
    def _consumers(self, ring, sched, k_tiles, tiled_mma, tma_c, sA, sB, sC, gC, tidx, warp_idx,
                   warpgroup_idx):
        """Both consumer warpgroups work on the same tile: each owns 64 of its 128 rows."""
        ctid = tidx - 128 * PRODUCER_WARPGROUPS  # 0..255 among the consumers
        thr_mma = tiled_mma.get_slice(
            cute.make_layout(CONSUMER_WARPGROUPS, stride=128)(warpgroup_idx - PRODUCER_WARPGROUPS))
        tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))
        tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
        acc = cute.make_rmem_tensor(thr_mma.partition_C(gC[(None, None, 0, 0)]).shape, self.acc_dtype)
        tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
        mma = sm90.Mma(tiled_mma, tCrA, tCrB, acc)
        self._consumer(ring, sched, k_tiles, mma, tma_c, gC, sC, ctid, warp_idx)

    @cute.jit
    def _consumer(self, ring, sched, k_tiles, mma, tma_c, gC, sC, ctid, warp_idx):
        """Per work item: the prefetch variant's MMA loop (without the loads), then the epilogue.

        The C buffers continue across tiles (the tile's sub-tile count is a multiple of
        EPI_STAGES), and the store pipeline keeps at most EPI_STAGES - 1 TMA stores in flight, so
        a buffer is never rewritten while a store still reads it, across tiles too.
        """
        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        epilogue = sm90.Epilogue(tma_c, sC, mma.tiled_mma, mma.acc, ctid, self.c_dtype,
                                 self.epi_tile, self.epi_stages, CONSUMER_THREADS,
                                 store_warp=EPILOGUE_STORE_WARP, barrier_threads=CONSUMER_THREADS)
        slot = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, WORK_SLOTS)
        work = tile_scheduler.receive(sched, slot, sched.first)
        slot.advance()
        while work < sched.total:
            tile_m, tile_n = tile_scheduler.tile_of(sched, work)
            read, release = sm90.mma_tile(ring, mma, read, release, k_tiles)
            sm90.store_tile(epilogue, gC[(None, None, tile_m, tile_n)], warp_idx)
            work = tile_scheduler.receive(sched, slot, work + sched.stride)
            slot.advance()
        sm90.finish_stores(epilogue, warp_idx)


# ------------------------------------------------------------------------------------------
# Python entry points
# ------------------------------------------------------------------------------------------
def compile_target(tile=(128, 256), in_dtype: str = "float16", out_dtype: str = "float16",
                   cluster=(1, 1), sms: int = 132, group_m: int = GROUP_M, stages: int | None = None,
                   scheduler: str = "static", pdl: bool = False):
    """(jit_fn, fake_args) for ``cutecourse.inspect.compile_report`` (symbolic M, N, K)."""
    # clear errors before tracing
    plan_persistent(tuple(tile), in_dtype, out_dtype, stages=stages, tiles=PERSISTENT_TILES)
    kernel = PersistentHopperGemm(tuple(tile), tuple(cluster), sms, group_m, stages, scheduler,
                                  pdl=pdl)
    return kernel, fake_arguments(in_dtype, out_dtype)


def fake_arguments(in_dtype: str, out_dtype: str) -> tuple:
    """A persistent kernel's arguments for compiling without a GPU: fake A, B, C, the
    scheduler's counters and a stream."""
    import cuda.bindings.driver as cuda
    from cutlass.cute.runtime import make_fake_tensor

    counters = make_fake_tensor(cutlass.Int32, (2,), (1,), assumed_align=8)
    return (*gemm_launch.fake_operands(in_dtype, out_dtype), counters, cuda.CUstream(0))


def validate(a, b, out_dtype=None, tile=(128, 256), stages: int | None = None, c=None,
             epi_tile=EPI_TILE, epi_stages: int = EPI_STAGES):
    """The shared operand checks, then this kernel's smem plan."""
    in_name, out_name = gemm_launch.check_operands(a, b, out_dtype, c)
    return plan_persistent(tuple(tile), in_name, out_name, stages=stages, epi_tile=epi_tile,
                           epi_stages=epi_stages, tiles=PERSISTENT_TILES)


def launcher(a, b, c, tile=(128, 256), cluster=(1, 1), group_m: int = GROUP_M,
             stages: int | None = None, sms: int | None = None, scheduler: str = "static",
             epi_tile=EPI_TILE, epi_stages: int = EPI_STAGES, pdl: bool = False):
    """Validated, compiled launch closure for benchmarks: ``fn()`` writes A @ B.T into ``c``.

    ``sms``: how many CTAs the persistent grid may use (default: every SM of the GPU).
    ``pdl``: launch with programmatic dependent launch (see the class).
    """
    from ..modes import require_gpu

    validate(a, b, c.dtype, tile, stages, c, epi_tile, epi_stages)
    sms = require_gpu("sm_90a").sm_count if sms is None else sms
    kernel = PersistentHopperGemm(tuple(tile), tuple(cluster), sms, group_m, stages, scheduler,
                                  epi_tile, epi_stages, pdl)
    return counted_launcher(kernel, a, b, c)


def counted_launcher(kernel, a, b, c):
    """``gemm_launch.launcher`` for a persistent kernel, which also takes the dynamic scheduler's
    ticket counters: zero now, and zero again after every launch (the last CTA resets them). One
    pair per launcher: two launches in flight at once on different streams must not share it."""
    import torch

    counters = torch.zeros(2, dtype=torch.int32, device=a.device)
    fn = gemm_launch.launcher(kernel, a, b, c, extra=[(counters, 8)])
    fn.counters = counters
    return fn


def gemm_persistent(a, b, out_dtype=None, **config):
    """C = A @ B.T on an H100 with the persistent, warp-specialized kernel; returns C (M, N).

    Same contract as ``hopper_gemm.gemm``; ``config``: ``launcher``'s keywords.
    """
    return gemm_launch.run(launcher, a, b, out_dtype, **config)
