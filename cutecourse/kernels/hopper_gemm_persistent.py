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
* **Two schedulers** (``tile_scheduler.py``; the launchers' ``scheduler="static"`` / ``"dynamic"``).
  ``StaticScheduler`` (default): CTA i computes work items i, i + P, i + 2P ... (P CTAs) and needs
  no communication. ``DynamicScheduler``: the producer warp takes the next work item from a global
  atomic counter when it is ready for one and hands it to its consumers through a two-slot smem
  queue (``cutlass.pipeline.PipelineAsync``), so CTAs on faster SMs take more tiles.
* **Three tiles.** 128x256 (the default), 128x128, and 256x128, where each consumer warpgroup owns
  two 64-row slabs (two m64n128 wgmmas per k-step; the same 48 KiB stage and 128 accumulator
  registers; cuBLAS's bf16 tile, measured 0.98-1.01x the 128x256 tile: docs/hopper_gemm.md).
* **Programmatic dependent launch** (``pdl=True``). The next grid's CTAs may start as this grid's
  leave; only the producer warp waits (``griddepcontrol.wait``) for the previous grid's memory
  before its first load, and the consumers release the next grid when their work is done
  (``griddepcontrol.launch_dependents``). It saves the 1-2 us the GPU idles between two launches.

A variant is a subclass that overrides hooks (the class docstring), each the one place where a
part of the kernel is decided: where the tiles come from, what a tile's loads go through, how the
consumers share the work, the mainloop, the epilogue (``registry.py`` names the dense variants).
``epilogue_op`` (``epilogue_op.py``): an elementwise op on each accumulator before it is stored,
e.g. a bias and an activation.
"""

from __future__ import annotations

import dataclasses

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
from cutlass.cute.nvgpu import cpasync

from ..errors import CourseError, ShapeError
from ..models.gemm_plan import (EPI_STAGES, EPI_TILE, IN_DTYPES, TILE_K, TILES, check_epi_tile, check_tile,
                                plan_persistent)
from . import gemm_launch, sm90, tile_scheduler
from .barriers import Barrier
from .configured import Configured
from .persistent_setup import (CtaSetup, EpilogueArgs, dense_grid_fields, fitting_epi_stages, grid_clusters,
                               shared_storage)

#: Warpgroup roles. Warpgroup 0: producer (its warp 0 issues TMA); 1 and 2: MMA + epilogue.
PRODUCER_WARPGROUPS = 1
PRODUCER_WARP = 0
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
WORK_SLOTS = tile_scheduler.WORK_SLOTS
#: The first consumer warp issues the epilogue's TMA stores.
EPILOGUE_STORE_WARP = 4


class PersistentHopperGemm(Configured):
    """C = A @ B.T, persistent and warp-specialized (see the module docstring).

    ``sms``: CTAs (SMs) the grid may use. ``group_m``: band height of the tile order. ``stages``:
    the ring depth. ``scheduler``: ``StaticScheduler``, ``DynamicScheduler`` (the kernel takes 2
    int32 ``counters``, zero between launches; the static one ignores them) or another subclass of
    ``StaticScheduler`` (another tile order). ``cluster_mn``: one of ``CLUSTERS``. ``pdl``:
    programmatic dependent launch. ``l2_hints``: the L2 eviction policies of the loads, a name of
    ``L2_HINT_PAIRS`` (``sm90``'s, as in the cluster kernel) or a pair; None: no hints. ``epilogue_op``: an ``epilogue_op.EpilogueOp`` applied to each
    accumulator before it is stored. A keyword left None is the class's default (``TILE_MN`` ...).

    A variant changes it through small hooks, with the same signature in every subclass: where
    the tiles come from (``make_scheduler``: an object of the ``Scheduler`` class, from its
    ``Args``), which tensors a tile's loads use (``tile_loads``) with which L2 eviction policies
    (``load_policies``), how the consumer warpgroups share the work (``consumers``), what they do
    as a tile starts (``enter_tile``), its mainloop (``mainloop``), its epilogue (``make_epilogue``)
    and where its result goes (``store_tile``, from the tile's first element ``tile_origin``);
    and its own shared memory (``smem_fields``) and tensor-map prefetch (``prefetch_descriptors``);
    on the host, what its epilogue takes of C itself (``epilogue_c``). The base names none of its
    variants; some hook parameters (``turn``, ``unit``) and attributes exist for them.
    """

    #: The tiles it takes; warpgroups sharing one tile's MMAs (2: each owns 64 of its 128 rows);
    #: sets of C buffers (one: both warpgroups store each tile); input dtypes; the wgmma's N by the
    #: tile's N, where it is narrower (tile_n / wgmma_n wgmmas side by side; absent: the tile's); the
    #: k-tile's depth.
    TILES, MMA_WARPGROUPS, C_BUFFER_SETS = PERSISTENT_TILES, CONSUMER_WARPGROUPS, 1
    IN_DTYPES, WGMMA_N, TILE_K = IN_DTYPES, {}, TILE_K
    #: The constructor's defaults, by keyword (``configured.py``): a variant sets those it changes.
    #: ``scheduler=`` takes a name of ``SCHEDULERS`` (its family's table), or ``SCHEDULER`` or a subclass;
    #: ``l2_hints=`` a name of ``L2_HINT_PAIRS`` (``configured.NAMED``), or a pair.
    TILE_MN, CLUSTER_MN, GROUP_M, SCHEDULER = (128, 256), (1, 1), GROUP_M, tile_scheduler.StaticScheduler
    EPI_TILE, SMS, PDL, SCHEDULERS = EPI_TILE, 132, False, tile_scheduler.SCHEDULERS
    L2_HINT_PAIRS = sm90.L2_HINT_PAIRS
    #: C buffers at most (epi_stages= left None fits the tile under it: not a default, hence the name)
    MOST_EPI_STAGES = EPI_STAGES

    def __init__(self, tile_mn=None, *, cluster_mn=None, sms: int | None = None, group_m: int | None = None,
                 stages: int | None = None, scheduler=None, epi_tile=None, epi_stages: int | None = None,
                 pdl: bool | None = None, epilogue_op=None, l2_hints=None):
        # (every keyword left None arrives as the class's default: configured.py)
        self.tile_mn, cluster_mn = check_tile(tile_mn, self.TILES), tuple(cluster_mn)
        if cluster_mn not in CLUSTERS:
            raise ShapeError(f"cluster {cluster_mn} is not supported",
                             f"use one of {list(CLUSTERS)} ((1, 1) = no multicast)")
        if sms < cluster_mn[0] * cluster_mn[1] or group_m < 1:
            raise ShapeError(f"sms={sms}, group_m={group_m}: need at least one cluster and group_m >= 1",
                             "pass the GPU's SM count (132 on an H100 SXM)")
        if not (isinstance(scheduler, type) and issubclass(scheduler, self.SCHEDULER)):
            raise CourseError(f"scheduler={scheduler!r} is not a scheduler {type(self).__name__} can walk",
                              f"pass {self.SCHEDULER.__name__} or a subclass of it (e.g. one whose tile_of "
                              "orders the tiles another way)")
        if scheduler.PER_CTA is not None and cluster_mn != (1, 1):
            raise ShapeError(scheduler.PER_CTA, "use scheduler='static' with clusters")
        if epi_stages is None:  # a tile stores through every C buffer equally often: fewer where it must
            epi_stages = self.arguments["epi_stages"] = fitting_epi_stages(self.tile_mn, epi_tile,
                                                                           self.MOST_EPI_STAGES)
        self.tile_mnk = (*self.tile_mn, self.TILE_K)
        self.cluster_mn, self.sms, self.group_m, self.Scheduler = cluster_mn, sms, group_m, scheduler
        self.requested_stages = stages
        self.epi_stages, self.pdl = epi_stages, pdl
        self.epi_tile = check_epi_tile(self.tile_mn, epi_tile, whole_rounds=True, epi_stages=self.epi_stages)
        self.acc_dtype = cutlass.Float32
        self.epilogue_op = epilogue_op  # applied to each accumulator before C (epilogue_op.py)
        self.l2_hints = sm90.check_l2_hints(l2_hints, self)  # a name arrives as its pair

    def plan(self, in_dtype: str, out_dtype: str):
        """The smem plan for these dtypes (``models/gemm_plan.plan_persistent``): clear errors first."""
        return plan_persistent(self.tile_mn, in_dtype, out_dtype, stages=self.requested_stages,
                               epi_tile=self.epi_tile, c_buffer_sets=self.C_BUFFER_SETS, tiles=self.TILES,
                               epi_stages=self.epi_stages, in_dtypes=self.IN_DTYPES)

    def scratch(self):
        """Tensors it needs besides A, B, C (``gemm_launch.Scratch``): the dynamic scheduler's two
        ticket counters, zero between launches (the static one ignores them)."""
        return (gemm_launch.Scratch("counters", "int32", 2, 8),)

    # -- host side ---------------------------------------------------------------------------
    @cute.jit
    def __call__(self, a: cute.Tensor, b: cute.Tensor, c: cute.Tensor, *args):
        """``args``: the tensors of ``scratch()``, in its order (they make the scheduler's ``Args``),
        the stream, then the epilogue op's operands."""
        n = len(self.scratch())
        self.launch(a, b, c, self.Scheduler.Args(*args[:n]), grid_clusters(self, c), args[n], args[n + 1:])

    @cute.jit
    def launch(self, a: cute.Tensor, b: cute.Tensor, c: cute.Tensor, scheduler_args: tuple, clusters, stream,
               epilogue_args=()):
        """Plan the smem, build the MMA and the TMA atoms of A, B, C (``a``, ``b``, ``c``: the
        operands, or templates of them), launch ``clusters`` clusters. ``scheduler_args``: what
        ``make_scheduler`` reads (the scheduler's ``Args``, e.g. ``tile_scheduler.Counters``);
        ``epilogue_args``: the op's operands (with ``epilogue_c(c)``: the ``EpilogueArgs``)."""
        self.a_dtype, self.c_dtype = a.element_type, c.element_type
        self.stages = self.plan(sm90.dtype_name(self.a_dtype), sm90.dtype_name(self.c_dtype)).stages
        self.tiled_mma = sm90.tiled_mma(self.a_dtype, self.acc_dtype, self.MMA_WARPGROUPS, self.tile_mn[1],
                                        self.WGMMA_N.get(self.tile_mn[1]))
        sA_layout, sB_layout, sC_layout = sm90.smem_layouts(self.tile_mnk, self.a_dtype, self.c_dtype,
                                                            self.stages, self.epi_tile,
                                                            self.epi_stages * self.C_BUFFER_SETS)
        tma_a, gA, tma_b, gB, tma_c, gC = sm90.tma_atoms(a, b, c, sA_layout, sB_layout, sC_layout, self.tile_mn,
                                                         self.cluster_mn, self.epi_tile, tile_k=self.tile_mnk[2])

        self.shared_storage = shared_storage(self, sA_layout, sB_layout, sC_layout)
        cm, cn = self.cluster_mn
        # No 1x1 "cluster" launch attribute: it shares nothing and ran up to 2x slower (docs/grouped_measured.md).
        cluster = {"cluster": (cm, cn, 1)} if cm * cn > 1 else {}
        epilogue = EpilogueArgs(self.epilogue_c(c), tuple(epilogue_args))
        self.kernel(tma_a, gA, tma_b, gB, tma_c, gC, self.tiled_mma, sA_layout, sB_layout,
                    sC_layout, scheduler_args, epilogue).launch(grid=(cm, cn, clusters), block=[THREADS, 1, 1],
                                                   min_blocks_per_mp=1, stream=stream, use_pdl=self.pdl,
                                                   **cluster)

    def epilogue_c(self, c):
        """Hook (host side): what the epilogue needs of C itself besides its TMA atom (nothing: it
        stores through the tensor map)."""
        return ()

    # -- device side -------------------------------------------------------------------------
    @cute.kernel
    def kernel(self, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom, mB: cute.Tensor,
               tma_c: cute.CopyAtom, mC: cute.Tensor, tiled_mma: cute.TiledMma,
               sA_layout: cute.ComposedLayout, sB_layout: cute.ComposedLayout,
               sC_layout: cute.ComposedLayout, scheduler_args: tuple, epilogue_args: EpilogueArgs):
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        warpgroup_idx = cute.arch.make_warp_uniform(tidx // 128)
        if warp_idx == 0:
            self.prefetch_descriptors((tma_a, tma_b, tma_c))

        cta_layout, cluster_coord, a_mcast_mask, b_mcast_mask = sm90.multicast_masks(self.cluster_mn)

        # The ring, as in hopper_gemm, except that only the warpgroups that compute a tile release
        # its stages.
        storage = utils.SmemAllocator().allocate(self.shared_storage)
        ring = sm90.make_ring(storage.barriers.data_ptr(), self.stages, self.a_dtype, sA_layout,
                              sB_layout, cta_layout, self.cluster_mn, 128 * self.MMA_WARPGROUPS)
        # Work-item slots: the producer warp (32 threads arrive) publishes a work item, the 256
        # consumer threads read it and release the slot (a scheduler that hands its items over).
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
        fields = self.Scheduler.ITEM_FIELDS
        slots = storage.work_items.get_tensor(cute.make_layout((WORK_SLOTS, fields), stride=(fields, 1)))
        scheduler = self.make_scheduler(scheduler_args, CtaSetup(queue, slots, gA, gC, storage, (tma_a, tma_b, tma_c)))

        pipeline.pipeline_init_wait(cluster_shape_mn=self.cluster_mn)

        if warpgroup_idx < PRODUCER_WARPGROUPS:
            # Producer warpgroup: give registers back first (all 4 warps of the warpgroup must
            # execute setmaxnreg), then only warp 0 stays busy.
            cute.arch.setmaxregister_decrease(PRODUCER_REGISTERS)
            if warp_idx == PRODUCER_WARP:
                if cutlass.const_expr(self.pdl):
                    cute.arch.griddepcontrol_wait()  # the previous kernel has finished (PDL)
                loads = sm90.Loads(tma_a, tAgA, tAsA, a_mcast_mask, tma_b, tBgB, tBsB, b_mcast_mask)
                self._producer(ring, scheduler, loads)
        else:
            cute.arch.setmaxregister_increase(CONSUMER_REGISTERS)
            self.consumers(ring, scheduler, tiled_mma, tma_c, sA, sB, sC, gC, tidx, warp_idx,
                           warpgroup_idx, epilogue_args)
            if cutlass.const_expr(self.pdl):
                cute.arch.griddepcontrol_launch_dependents()  # the next kernel may start (PDL)

    def smem_fields(self) -> dict:
        """Hook: the variant's own fields of the shared memory, by name (``cute.struct`` members,
        e.g. tensor maps the CTA patches)."""
        return {}

    def prefetch_descriptors(self, atoms):
        """Hook: warp 0 prefetches the TMA atoms' tensor maps (made on the host) once per CTA."""
        for atom in atoms:
            cpasync.prefetch_descriptor(atom)

    def make_scheduler(self, scheduler_args: tile_scheduler.Counters, setup: CtaSetup):
        """Hook: this CTA's scheduler, ``self.Scheduler(**fields)`` (here the fields of
        ``grid_fields``); ``scheduler_args``: its ``Args`` (here ``tile_scheduler.Counters``);
        ``setup``: what the CTA has set up that a scheduler may need (``CtaSetup``)."""
        return self.Scheduler(**self.grid_fields(scheduler_args, setup))

    def grid_fields(self, scheduler_args: tile_scheduler.Counters, setup: CtaSetup) -> dict:
        """A dense scheduler's fields for this CTA (``persistent_setup.dense_grid_fields``)."""
        return dense_grid_fields(self, scheduler_args, setup)

    # -- producer: one warp, TMA only --------------------------------------------------------
    @cute.jit
    def _producer(self, ring, scheduler, loads):
        """Load every k-tile of every work item of this CTA, in order, into the ring. One pipeline
        state runs across tiles: the producer waits for a free stage, never for the consumers to
        finish a tile, so the next tile's first k-tiles load during this tile's epilogue."""
        prod = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        slot = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, WORK_SLOTS)
        scheduler = scheduler.start()  # this warp's walk, at its first work item
        while scheduler.active():
            tile = scheduler.work_tile()
            scheduler.publish(slot, tile)  # for the consumers, if the scheduler hands items over
            slot.advance()
            tile_loads = self.tile_loads(scheduler, loads, tile)
            for k in cutlass.range(tile.k_begin, tile.k_end, unroll=1):
                ring.producer_acquire(prod)  # wait for a free stage, expect its bytes
                sm90.issue_tma(ring, tile_loads, prod, k, policies=self.load_policies())
                prod.advance()
            scheduler.advance(tile)
        scheduler.publish(slot)  # past the last item: "no more tiles"
        scheduler.finish()
        # Wait until the consumers (ours and, in a cluster, the peers') have released every stage:
        # the CTA must not exit while arrivals to its barriers are still on the way.
        ring.producer_tail(prod)

    def tile_loads(self, scheduler, loads, tile):
        """Hook: the loads of one tile (``sm90.Loads``): A's row panel and B's column panel of the
        tile, through ``loads.maps`` (None: the maps the host made)."""
        return dataclasses.replace(loads, tAgA=loads.tAgA[(None, tile.tile_m, None)],
                                   tBgB=loads.tBgB[(None, tile.tile_n, None)])

    def load_policies(self):
        """Hook: the L2 eviction policies of A's and B's loads, (None, None) for no hint: the pair of
        ``l2_hints`` (``sm90.l2_policies``), as in ``ClusterHopperGemm``. A hint a pair cannot say
        is a subclass overriding this, in any persistent kernel (grouped, FP8 ...)."""
        return sm90.l2_policies(self.l2_hints)

    # -- consumers: two warpgroups, WGMMA + epilogue -----------------------------------------
    @cute.jit
    def consumers(self, ring, scheduler, tiled_mma, tma_c, sA, sB, sC, gC, tidx, warp_idx, warpgroup_idx,
                  epilogue_args):
        """Hook: the consumer warpgroups' work. Here both work on the same tile, each owning 64 of
        its 128 rows (*cooperative*). Per work item: the mainloop (the prefetch variant's, without
        the loads), then the epilogue. The C buffers continue across tiles (a tile's sub-tiles are
        a multiple of ``epi_stages``) and at most ``epi_stages`` - 1 TMA stores are in flight, so a
        buffer is never rewritten while a store still reads it, across tiles too."""
        ctid = tidx - 128 * PRODUCER_WARPGROUPS  # 0..255 among the consumers
        first_thread = cute.make_layout(CONSUMER_WARPGROUPS, stride=128)(warpgroup_idx - PRODUCER_WARPGROUPS)
        mma = sm90.make_mma(tiled_mma, first_thread, sA, sB, gC[(None, None, 0, 0)], self.acc_dtype)
        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        epilogue = self.make_epilogue(tma_c, sC, mma, ctid, epilogue_args)
        slot = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, WORK_SLOTS)
        scheduler = scheduler.start(slot)  # the first work item (handed over through slot, if so)
        slot.advance()
        while scheduler.active():
            tile = scheduler.work_tile()
            self.enter_tile(scheduler, epilogue, tile, warp_idx)
            read, release = self.mainloop(ring, mma, read, release, scheduler, tile)
            self.store_tile(scheduler, epilogue, mma, gC, tile, ctid, warp_idx)
            scheduler.advance(tile, slot)
            slot.advance()
        self.finish_stores(epilogue, warp_idx)

    def make_epilogue(self, tma_c, sC, mma, ctid, epilogue_args, unit: int = 0):
        """Hook: the epilogue of MMA unit ``unit`` (the ``MMA_WARPGROUPS`` consumer warpgroups that
        share a tile: here one unit of two; where each warpgroup owns a tile, one unit each),
        ``sm90.Epilogue``: its own C buffers, TMA-store pipeline, store warp (its first) and named
        barrier, and the epilogue op; ``ctid``: the thread among the unit's; ``epilogue_args``: its
        ``EpilogueArgs`` (here it reads the op's operands)."""
        threads = 128 * self.MMA_WARPGROUPS
        first_warp = 4 * (PRODUCER_WARPGROUPS + unit * self.MMA_WARPGROUPS)
        return sm90.Epilogue(tma_c, sC, mma.tiled_mma, mma.acc, ctid, self.c_dtype, self.epi_tile,
                             self.epi_stages, threads, store_warp=first_warp,
                             barrier_threads=threads, barrier_id=Barrier.EPILOGUE + unit,
                             first_buffer=unit * self.epi_stages, op=self.epilogue_op,
                             operands=epilogue_args.operands)

    def finish_stores(self, epilogue, warp_idx):
        """Hook, after the last tile: its last TMA stores finish reading smem (``sm90.finish_stores``)."""
        sm90.finish_stores(epilogue, warp_idx)

    def enter_tile(self, scheduler, epilogue, tile, warp_idx):
        """Hook: what the consumers do before a tile's mainloop (e.g. point C's tensor map elsewhere)."""

    def mainloop(self, ring, mma, read, release, scheduler, tile, turn=None):
        """Hook: acc = the tile's k-tiles multiplied (``sm90.mma_tile``); returns (read, release)
        advanced. ``turn``: None, or the unit's turn on the tensor cores where units take turns
        (``barriers.MmaTurn``), taken before the first MMA and passed on after the last is issued."""
        return sm90.mma_tile(ring, mma, read, release, tile.k_end - tile.k_begin, turn)

    def store_tile(self, scheduler, epilogue, mma, gC, tile, ctid, warp_idx):
        """Hook: the epilogue of a tile: its accumulators, through the epilogue op if the kernel
        has one, to C (``sm90.store_tile``, through the host's tensor map of C)."""
        sm90.store_tile(epilogue, gC[(None, None, tile.tile_m, tile.tile_n)], warp_idx,
                        origin=self.tile_origin(tile))

    def tile_origin(self, tile):
        """Hook: the (row, column) in C of ``tile``'s first element (what the epilogue op is told),
        as in every family."""
        return (tile.tile_m * self.tile_mn[0], tile.tile_n * self.tile_mn[1])


# Python entry points (gemm_launch.Entry): compile_target(tile=..., scheduler="dynamic", ...) for
# cutecourse.inspect, launcher(a, b, c, ...) for benchmarks (``sms``: default every SM of the GPU),
# gemm(a, b) returns C (the name in every dense module; gemm_persistent: notebook 06's).
ENTRY = gemm_launch.Entry(PersistentHopperGemm)
compile_target, validate, launcher, gemm = ENTRY.compile_target, ENTRY.validate, ENTRY.launcher, ENTRY.gemm
gemm_persistent = gemm
