"""A grouped block-scaled GEMM for Blackwell (sm_100a): G products ``C_g = A_g @ B_g.T`` with
NVFP4 or MXFP8 inputs, in one persistent launch.

The grouping is ``hopper_grouped_gemm``'s: the groups' C tiles laid end to end, a persistent
grid walking them, device metadata instead of tensors (G is a run-time value: one compile serves
every batch of groups), and one tensor map per operand per CTA, rewritten when the group changes.
The walk is ``group_walk``'s, the same contract as on Hopper, and numbers work items exactly as
``models/group_scheduler.locate`` does (the tests hold it to ``schedule()``); the map rewrites
are ``tensor_maps``'s. Here every warp role walks the groups on its own. With a cluster
(2x1, 1x2, 2x2) a work item is a cluster tile: the CTAs of a cluster take neighbouring C tiles
of one group and share their loads by TMA multicast. What Blackwell changes:

* **Block-scaled tensor-core MMA.** ``tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.block16``
  (NVFP4: e2m1 data, one e4m3 scale per 16 K-values) or ``kind::mxf8f6f4.block_scale.block32``
  (MXFP8: e4m3 data, one e8m0 scale per 32). The hardware multiplies each product by its two
  scales; the dequantized matrices never exist. One thread issues a 128 x N x K MMA for the
  whole CTA: K = 64 (fp4) or 32 (fp8) per instruction, 4 instructions per k-tile, so a k-tile is
  256 (NVFP4) or 128 (MXFP8) deep: 32 KiB of A and B either way for a 128 x 128 tile.
* **Accumulators in tensor memory.** 128 x 128 fp32 = 128 of TMEM's 512 columns. Two
  accumulator stages (256 columns) let the MMA warp start tile t+1 while the epilogue still reads
  tile t; a 128 x 256 tile has room for one. The scale factors of the current k-tile sit after
  them: 4 columns per 512-byte atom (128 rows x 4 scales).
* **Three warp roles, no warpgroup MMA** (192 threads, one CTA per SM):
  warp 5 - **TMA**: per k-tile, one TMA each for A, B, SFA, SFB into a ring of ``ab_stages``
  smem stages (NVFP4: 36 KiB a stage, 5 stages; MXFP8: 33 KiB, 6).
  warp 4 - **MMA**: per k-tile, ``tcgen05.cp`` of the stage's scale factors smem -> TMEM (NVFP4:
  4 + 4 atoms, MXFP8: 1 + 1), then the 4 MMAs, then ``tcgen05.commit`` frees the stage when
  they are done. After the last k-tile, a commit marks the accumulator full.
  warps 0-3 - **epilogue**: per 128 x 32 sub-tile, ``tcgen05.ld`` (each warp reads its 32 TMEM
  lanes = 32 rows), ``tcgen05.wait::ld``, convert to fp16/bf16, store to smem, TMA-store.
  Warp 0 also allocates TMEM at the start and frees it at the end.
* **Three pipelines**: the A/B/SF ring (``PipelineTmaUmma``), the accumulator ring
  (``PipelineUmmaAsync``: MMA commits full, epilogue warps free), the C buffers (``PipelineTmaStore``).
* **Five tensor maps per CTA**: A, B, SFA, SFB (the TMA warp's) and C (epilogue warp 0's). When
  a CTA's next tile is in another group, the owner patches its maps in smem (address, 5 sizes,
  4 strides: ``tensormap.replace`` x 10), publishes them to the CTA's workspace slot with a
  release (``tensormap.cp_fenceproxy``) and acquires them (``fence.proxy.tensormap``) before its
  next TMA. The scale factors' map describes the interleaved atom layout of
  ``models/block_scaling.py``, so its sizes are the group's M (or N) and K.

Not here: 2-CTA MMA, NVFP4's per-tensor global scale, MN-major operands, fp8/fp4 output, K = 0 groups.

The smem/TMEM budget is ``models/blackwell_plan.py``; the host side, ``grouped.py`` and ``grouped_launch.py``."""

from __future__ import annotations

from typing import NamedTuple

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass.cute.nvgpu import cpasync, tcgen05
from cutlass.memory import SmemAllocator

from ..errors import DTypeError, ShapeError
from ..models.blackwell_plan import (B200_SMS, EPI_TILE, K_BLOCKS, SMEM_CAPACITY, check_cluster,
                                     check_format, check_tile, plan)
from ..tensors import dtype_name
from . import group_walk, sm100, tensor_maps
from .barriers import Barrier
from .configured import Configured
from .group_walk import A, B, C, SFA, SFB, M, N, K, operand_pointer, operand_tensor

#: Warp roles (module docstring).
EPILOGUE_WARPS = (0, 1, 2, 3)
MMA_WARP, TMA_WARP = 4, 5
THREADS = 32 * 6
EPILOGUE_THREADS = 32 * len(EPILOGUE_WARPS)
#: Tensor maps per CTA, one per operand in ``group_walk.OPERANDS`` order: the workspace is
#: (CTAs, MAPS, 16) int64. The TMA warp owns the four it loads with, the store warp C's.
MAPS = len(group_walk.OPERANDS)
LOADED = (A, B, SFA, SFB)
#: Order inside a group: one band taller than any group = m fastest (``hopper_grouped_gemm``).
GROUP_M = 1 << 12


class WalkArgs(NamedTuple):
    """What every warp role's group walk reads from the host (``group_walk.GroupArgs``'s tensors,
    in the order ``__call__`` takes them, which is the order of the compiled kernel's parameters)."""

    shapes: cute.Tensor  # (G, 4) int32: M, N, K, 1
    ptrs: cute.Tensor  # (G, 5) int64: addresses, in group_walk.OPERANDS order
    strides: cute.Tensor  # (G, 5) int64: row strides in elements (the interleaved scale factors: 0)
    map_workspace: cute.Tensor  # (CTAs, 5, 16) int64: the CTAs' tensor maps in global memory
    trace: cute.Tensor  # (CTAs, 2) int32: per CTA its items and groups entered


class BlackwellGroupedBlockScaledGemm(Configured):
    """G block-scaled products in one persistent launch (module docstring).

    ``tile_mn``: the CTA tile (128x128 or 128x256). ``fmt``: "nvfp4" or "mxfp8", which fixes the
    input dtype (``IN_DTYPES``). ``cluster_mn``: CTAs per cluster along (M, N); a cluster shares
    its loads by TMA multicast (A and SFA along N, B and SFB along M). ``sms``: the CTAs the
    persistent grid may use, in whole clusters (148 on a B200; passed in because querying the GPU
    needs a driver). ``group_m``: the band height inside a group, in cluster-tile rows.
    ``scheduler``: the group walk, ``group_walk.GroupScheduler`` or a subclass. A keyword left
    None is the class's default (``TILE_MN``, ``FMT`` ...: ``configured.py``). Hooks: the roles
    ``tma_warp``, ``mma_warp``, ``epilogue_warps``; ``make_scheduler``; the epilogue's
    ``make_epilogue``, ``store_tile``, ``finish_stores``, ``tile_origin``.
    """

    MAPS = MAPS
    #: The defaults of the keywords left None (``configured.py``): a variant sets those it changes.
    TILE_MN, FMT, CLUSTER_MN, SMS, GROUP_M = (128, 128), "nvfp4", (1, 1), B200_SMS, GROUP_M
    SCHEDULER, SCHEDULERS = group_walk.GroupScheduler, group_walk.SCHEDULERS  # scheduler=: a class or a name

    def __init__(self, tile_mn=None, *, fmt: str | None = None, cluster_mn=None, sms: int | None = None,
                 group_m: int | None = None, scheduler=None, epilogue_op=None):
        # (every keyword left None arrives as the class's default: configured.py)
        group_walk.check_scheduler(scheduler)
        self.Scheduler = scheduler
        self.format = check_format(fmt)
        self.tile_mn = check_tile(tile_mn)
        self.cluster_mn = cluster_mn = check_cluster(cluster_mn)
        if not (isinstance(sms, int) and sms >= cluster_mn[0] * cluster_mn[1]):
            raise ShapeError(f"sms={sms!r}: need a whole number of at least one cluster's CTAs",
                             f"pass the GPU's SM count ({B200_SMS} on a B200)")
        self.sms, self.group_m = sms, group_m
        self.IN_DTYPES = (dtype_name(self.format.data_dtype),)  # the format's data, nothing else
        # The stages fit whichever 2-byte C (fp16 or bf16) the launch brings: ``plan`` checks it.
        self.budget = plan(self.format.name, self.tile_mn)
        self.mma_tiler = self.budget.tile_mnk
        self.cluster_tile = (self.tile_mn[0] * cluster_mn[0], self.tile_mn[1] * cluster_mn[1],
                             self.mma_tiler[2])
        data, scale = self.format.cutlass_types
        self.data_dtype, self.sf_dtype = getattr(cutlass, data), getattr(cutlass, scale)
        self.sf_vec = self.format.block
        self.epilogue_op = epilogue_op  # applied to each accumulator before C (epilogue_op.py)

    def plan(self, in_dtype: str, out_dtype: str):
        """The smem/TMEM plan (``models/blackwell_plan.Plan``) for these dtypes (torch names), with
        a clear error for an input the format does not hold or an unsupported C."""
        if in_dtype not in self.IN_DTYPES:
            raise DTypeError(f"{self.format.name} data is {self.IN_DTYPES[0]}, not {in_dtype}",
                             f"quantize the inputs with block_scaling.quantize(x, '{self.format.name}'), "
                             "or build the kernel with the fmt they hold")
        return plan(self.format.name, self.tile_mn, out_dtype)

    # -- host side ---------------------------------------------------------------------------
    @cute.jit
    def __call__(self, a: cute.Tensor, b: cute.Tensor, c: cute.Tensor, sfa: cute.Tensor,
                 sfb: cute.Tensor, shapes: cute.Tensor, ptrs: cute.Tensor, strides: cute.Tensor,
                 map_workspace: cute.Tensor, trace: cute.Tensor, work_bound: cutlass.Int32, stream,
                 *epilogue_args):
        """``a`` (M, K), ``b`` (N, K), ``c`` (M, N), ``sfa``, ``sfb`` (1-D, any 1-byte type): the
        templates of the tensor maps (dtype, majorness; sizes and addresses are patched per group).
        ``shapes`` (G, 4) int32 [M, N, K, 1], ``ptrs``, ``strides`` (G, 5) int64 (``group_walk``'s
        columns), ``map_workspace`` (CTAs, 5, 16) int64 (the CTAs' tensor maps), ``trace`` (CTAs, 2)
        int32 (each CTA's items and groups entered), ``work_bound`` >= the total number of cluster
        tiles."""
        self.c_dtype = c.element_type
        mma = sm100.tiled_mma(self.data_dtype, self.sf_dtype, self.sf_vec, self.tile_mn)
        p = self.budget
        smem = sm100.smem_layouts(mma, self.mma_tiler, self.data_dtype, self.sf_vec, p.ab_stages,
                                  self.c_dtype, EPI_TILE, p.c_stages)
        sfa_t = sm100.sf_tensor(cute.recast_ptr(sfa.iterator, dtype=self.sf_dtype), a.shape[0],
                                a.shape[1], self.sf_vec)
        sfb_t = sm100.sf_tensor(cute.recast_ptr(sfb.iterator, dtype=self.sf_dtype), b.shape[0],
                                b.shape[1], self.sf_vec)
        loads, self.stage_bytes, cluster_vmnk = sm100.tma_load_atoms(mma, self.mma_tiler, smem, a, b,
                                                                     sfa_t, sfb_t, self.cluster_mn)
        tma_c, mC = sm100.tma_store_atom(c, smem, EPI_TILE)

        @cute.struct
        class SharedStorage:
            maps: cute.struct.Align[cute.struct.MemRange[cutlass.Int64, MAPS * tensor_maps.MAP_WORDS],
                                    tensor_maps.MAP_BYTES]
            ab_barriers: cute.struct.MemRange[cutlass.Int64, 2 * p.ab_stages]
            acc_barriers: cute.struct.MemRange[cutlass.Int64, 2 * p.acc_stages]
            tmem_address: cutlass.Int32
            sC: cute.struct.Align[cute.struct.MemRange[self.c_dtype, cute.cosize(smem.c.outer)], 1024]
            sA: cute.struct.Align[cute.struct.MemRange[self.data_dtype, cute.cosize(smem.a.outer)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[self.data_dtype, cute.cosize(smem.b.outer)], 1024]
            sSFA: cute.struct.Align[cute.struct.MemRange[self.sf_dtype, cute.cosize(smem.sfa)], 1024]
            sSFB: cute.struct.Align[cute.struct.MemRange[self.sf_dtype, cute.cosize(smem.sfb)], 1024]

        self.shared_storage = SharedStorage
        self.smem_bytes = SharedStorage.size_in_bytes()  # plan() predicts it
        assert self.smem_bytes <= SMEM_CAPACITY, (self.smem_bytes, p)
        cm, cn = self.cluster_mn
        clusters = cutlass.min(work_bound, self.sms // (cm * cn))
        (tma_a, mA), (tma_b, mB), (tma_sfa, mSFA), (tma_sfb, mSFB) = loads
        self.kernel(mma, tma_a, mA, tma_b, mB, tma_sfa, mSFA, tma_sfb, mSFB, tma_c, mC, smem.a, smem.b,
                    smem.sfa, smem.sfb, smem.c, cluster_vmnk,
                    WalkArgs(shapes, ptrs, strides, map_workspace, trace), epilogue_args).launch(
                        grid=(cm, cn, clusters), block=[THREADS, 1, 1], cluster=(cm, cn, 1), min_blocks_per_mp=1,
                        stream=stream)

    # -- device side -------------------------------------------------------------------------
    @cute.kernel
    def kernel(self, mma: cute.TiledMma, tma_a: cute.CopyAtom, mA: cute.Tensor,
               tma_b: cute.CopyAtom, mB: cute.Tensor, tma_sfa: cute.CopyAtom, mSFA: cute.Tensor,
               tma_sfb: cute.CopyAtom, mSFB: cute.Tensor, tma_c: cute.CopyAtom, mC: cute.Tensor,
               sA_layout: cute.ComposedLayout, sB_layout: cute.ComposedLayout, sSFA_layout: cute.Layout,
               sSFB_layout: cute.Layout, sC_layout: cute.ComposedLayout, cluster_vmnk: cute.Layout,
               scheduler_args: WalkArgs, epilogue_args):
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        atoms = (tma_a, tma_b, tma_sfa, tma_sfb)  # the loads, in LOADED order
        smem = sm100.SmemLayouts(sA_layout, sB_layout, sSFA_layout, sSFB_layout, sC_layout)
        if warp_idx == TMA_WARP:
            for atom in (*atoms, tma_c):
                cpasync.prefetch_descriptor(atom)

        storage = SmemAllocator().allocate(self.shared_storage)
        p = self.budget
        # A/B/SF ring: the TMA warp's expect_tx covers all four tiles; each consumer (the MMA
        # warp of every CTA that reads a multicast stage) frees it with one tcgen05.commit.
        mcast_a, mcast_b = self.cluster_mn[1], self.cluster_mn[0]
        ring = pipeline.PipelineTmaUmma.create(
            barrier_storage=storage.ab_barriers.data_ptr(), num_stages=p.ab_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, mcast_a + mcast_b - 1),
            tx_count=self.stage_bytes, cta_layout_vmnk=cluster_vmnk, defer_sync=True)
        # Accumulator ring: full = the MMA warp's commit; empty = one arrive per epilogue warp.
        accs = pipeline.PipelineUmmaAsync.create(
            barrier_storage=storage.acc_barriers.data_ptr(), num_stages=p.acc_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, len(EPILOGUE_WARPS)),
            cta_layout_vmnk=cluster_vmnk, defer_sync=True)
        pipeline.pipeline_init_arrive(cluster_shape_mn=self.cluster_mn, is_relaxed=True)

        sA = storage.sA.get_tensor(smem.a.outer, swizzle=smem.a.inner)
        sB = storage.sB.get_tensor(smem.b.outer, swizzle=smem.b.inner)
        sSFA = storage.sSFA.get_tensor(smem.sfa)
        sSFB = storage.sSFB.get_tensor(smem.sfb)
        sC = storage.sC.get_tensor(smem.c.outer, swizzle=smem.c.inner)

        # Tiles of the templates (only their coordinates are used: each group's map carries its
        # own address and bounds). gA: (128, tile_k, tiles_m, k_tiles), gC: (128, N, tiles_m, tiles_n).
        tiler_mk = cute.slice_(self.mma_tiler, (None, 0, None))
        tiler_nk = cute.slice_(self.mma_tiler, (0, None, None))
        thr_mma = mma.get_slice(0)
        tCgA = thr_mma.partition_A(cute.local_tile(mA, tiler_mk, (None, None)))
        tCgB = thr_mma.partition_B(cute.local_tile(mB, tiler_nk, (None, None)))
        tCgSFA = thr_mma.partition_A(cute.local_tile(mSFA, tiler_mk, (None, None)))
        tCgSFB = thr_mma.partition_B(cute.local_tile(mSFB, tiler_nk, (None, None)))
        gC = cute.local_tile(mC, cute.slice_(self.mma_tiler, (None, None, 0)), (None, None))

        # This CTA's place in its cluster, and its TMA views (multicast: its slice of each box).
        rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        coord = cluster_vmnk.get_flat_coord(rank)  # (v, m, n, k)
        along_n = cute.make_layout(cute.slice_(cluster_vmnk, (0, 0, None, 0)).shape)
        along_m = cute.make_layout(cute.slice_(cluster_vmnk, (0, None, 0, 0)).shape)
        views = (sm100.tma_views(tma_a, coord[2], along_n, sA, tCgA, False),
                 sm100.tma_views(tma_b, coord[1], along_m, sB, tCgB, False),
                 sm100.tma_views(tma_sfa, coord[2], along_n, sSFA, tCgSFA, True),
                 sm100.tma_views(tma_sfb, coord[1], along_m, sSFB, tCgSFB, True))
        masks = sm100.multicast_masks(cluster_vmnk, coord, self.cluster_mn)  # in LOADED order

        acc_shape = mma.partition_shape_C(self.tile_mn)
        acc_layout = mma.make_fragment_C(cute.append(acc_shape, p.acc_stages)).layout

        groups = self.make_scheduler(scheduler_args, storage.maps.data_ptr())
        pipeline.pipeline_init_wait(cluster_shape_mn=self.cluster_mn)

        if warp_idx == TMA_WARP:
            self.tma_warp(ring, groups, atoms, views, masks)
        if warp_idx == MMA_WARP:
            self.mma_warp(ring, accs, groups, mma, sA, sB, sSFA, sSFB, smem, acc_layout,
                          storage.tmem_address.ptr)
        if warp_idx < MMA_WARP:
            self.epilogue_warps(accs, groups, tma_c, sC, gC, acc_layout, storage.tmem_address.ptr,
                                epilogue_args, tidx, warp_idx)

    def make_scheduler(self, args, maps_smem):
        """Hook: the CTA's group walk (``scheduler=``), which every role walks on its own."""
        cta = tensor_maps.workspace_row(self.cluster_mn)
        maps = tensor_maps.tensor_maps(args.map_workspace, cta, maps_smem, MAPS)
        return self.Scheduler(
            shapes=args.shapes, ptrs=args.ptrs, strides=args.strides, count=args.shapes.shape[0],
            cluster_tile=self.cluster_tile, cluster_mn=self.cluster_mn, in_cluster=cute.arch.block_in_cluster_idx(),
            first=cute.arch.block_idx()[2], stride=cute.arch.grid_dim()[2], group_m=self.group_m,
            trace=args.trace, cta=cta, maps=maps)

    # -- warp 5: tensor maps A/B/SFA/SFB, TMA -----------------------------------------------
    @cute.jit
    def tma_warp(self, ring, groups, atoms, views, masks):
        """For each work item: on a new group, point the four load maps at it, then load its
        k-tiles. The ring's state runs across items, so the next item's first k-tiles load while
        the MMA warp still works on this one."""
        tensor_maps.init_maps(groups.maps, atoms, LOADED, TMA_WARP)
        descs = tuple(tensor_maps.map_pointer(groups.maps, i) for i in LOADED)
        prod = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.budget.ab_stages)
        walk = groups.start()  # this warp's own walk
        while walk.active():
            tile = walk.work_tile()
            if tile.new_group:
                g = tile.group
                m, n, k = groups.shapes[(g, M)], groups.shapes[(g, N)], groups.shapes[(g, K)]
                tensors = (operand_tensor(groups, g, A, self.data_dtype),
                           operand_tensor(groups, g, B, self.data_dtype),
                           sm100.sf_tensor(operand_pointer(groups, g, SFA, self.sf_dtype), m, k, self.sf_vec),
                           sm100.sf_tensor(operand_pointer(groups, g, SFB, self.sf_dtype), n, k, self.sf_vec))
                tensor_maps.update_maps(groups.maps, tensors, atoms, LOADED, TMA_WARP)  # release
                tensor_maps.acquire_maps(groups.maps, LOADED)  # ... before this warp's next TMA
            coords = (tile.tile_m, tile.tile_n, tile.tile_m, tile.tile_n)
            for k in cutlass.range(tile.k_begin, tile.k_end, unroll=1):
                ring.producer_acquire(prod)  # a free stage; arms its barrier with stage_bytes
                bar = ring.producer_get_barrier(prod)
                for i in cutlass.range_constexpr(len(LOADED)):
                    s_view, g_view = views[i]
                    cute.copy(atoms[i], g_view[(None, coords[i], k)], s_view[(None, prod.index)],
                              tma_bar_ptr=bar, mcast_mask=masks[i], tma_desc_ptr=descs[i])
                prod.advance()
            walk.advance()
        walk.finish()
        ring.producer_tail(prod)  # the CTA must not exit while its stages are still in use

    # -- warp 4: scale factors to TMEM, MMA ---------------------------------------------------
    @cute.jit
    def mma_warp(self, ring, accs, groups, mma, sA, sB, sSFA, sSFB, smem, acc_layout, tmem_address):
        """Per work item: wait for a free accumulator stage, then per k-tile copy its scale
        factors to TMEM and issue its 4 MMAs; commit the accumulator when the item is done."""
        p = self.budget
        cute.arch.barrier(barrier_id=Barrier.TMEM_ADDRESS, number_of_threads=32 + EPILOGUE_THREADS)
        acc = cute.make_tensor(sm100.tmem_pointer(tmem_address), acc_layout)
        tCtSFA, tCtSFB = sm100.sf_tmem_tensors(mma, self.mma_tiler, self.sf_dtype, self.sf_vec,
                                               smem, acc)
        cp_a, src_a, dst_a = sm100.sf_copy_to_tmem(self.sf_dtype, sSFA, tCtSFA)
        cp_b, src_b, dst_b = sm100.sf_copy_to_tmem(self.sf_dtype, sSFB, tCtSFB)
        tCrA, tCrB = mma.make_fragment_A(sA), mma.make_fragment_B(sB)  # smem descriptors

        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, p.ab_stages)
        fill = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, p.acc_stages)
        walk = groups.start()  # this warp's own walk
        while walk.active():
            tile = walk.work_tile()
            accs.producer_acquire(fill)  # the epilogue has emptied this accumulator stage
            tAcc = acc[(None, None, None, fill.index)]
            mma.set(tcgen05.Field.ACCUMULATE, False)  # the item's first MMA overwrites
            for k in cutlass.range(tile.k_begin, tile.k_end, unroll=1):
                ring.consumer_wait(read)
                cute.copy(cp_a, src_a[(None, None, None, None, read.index)], dst_a)
                cute.copy(cp_b, src_b[(None, None, None, None, read.index)], dst_b)
                for kb in cutlass.range_constexpr(K_BLOCKS):
                    mma.set(tcgen05.Field.SFA, tCtSFA[(None, None, kb)].iterator)
                    mma.set(tcgen05.Field.SFB, tCtSFB[(None, None, kb)].iterator)
                    cute.gemm(mma, tAcc, tCrA[(None, None, kb, read.index)],
                              tCrB[(None, None, kb, read.index)], tAcc)
                    mma.set(tcgen05.Field.ACCUMULATE, True)
                ring.consumer_release(read)  # tcgen05.commit: free when these MMAs finish
                read.advance()
            accs.producer_commit(fill)  # tcgen05.commit: full when all of the item's MMAs finish
            fill.advance()
            walk.advance()
        accs.producer_tail(fill)

    # -- warps 0-3: TMEM allocation, C's tensor map, epilogue -------------------------------
    @cute.jit
    def epilogue_warps(self, accs, groups, tma_c, sC, gC, acc_layout, tmem_address, epilogue_args, tidx,
                       warp_idx):
        store_warp = EPILOGUE_WARPS[0]
        tensor_maps.init_maps(groups.maps, (tma_c,), (C,), store_warp)
        sm100.tmem_alloc(tmem_address, warp_idx, store_warp)
        cute.arch.barrier(barrier_id=Barrier.TMEM_ADDRESS, number_of_threads=32 + EPILOGUE_THREADS)
        tmem = sm100.tmem_pointer(tmem_address)
        acc = cute.make_tensor(tmem, acc_layout)
        epi = self.make_epilogue(tidx, acc, sC, tma_c, store_warp, epilogue_args)
        c_desc = tensor_maps.map_pointer(groups.maps, C)
        drain = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.budget.acc_stages)
        walk = groups.start()  # this warp's own walk
        while walk.active():
            tile = walk.work_tile()
            if tile.new_group:  # C's map follows the group (after the stores still reading it)
                c_g = operand_tensor(groups, tile.group, C, self.c_dtype)
                tensor_maps.update_maps(groups.maps, (c_g,), (tma_c,), (C,), store_warp)
                if warp_idx == store_warp:
                    tensor_maps.acquire_maps(groups.maps, (C,))
            accs.consumer_wait(drain)
            self.store_tile(epi, drain.index, gC, tile, warp_idx, c_desc)
            with cute.arch.elect_one():
                accs.consumer_release(drain)  # every tcgen05.ld of this stage has completed
            drain.advance()
            walk.advance()
        sm100.tmem_free(tmem, warp_idx, store_warp, EPILOGUE_THREADS)
        self.finish_stores(epi, warp_idx)

    # -- the epilogue: the same three hooks as the Hopper kernels' -------------------------------
    def make_epilogue(self, tidx, acc, sC, tma_c, store_warp, epilogue_args):
        """Hook: the epilogue warps' ``sm100.Epilogue``, with the op's operands ``epilogue_args``."""
        return sm100.make_epilogue(tidx, acc, sC, tma_c, self.mma_tiler, self.c_dtype, EPI_TILE,
                                   self.budget.c_stages, EPILOGUE_THREADS, store_warp, self.epilogue_op,
                                   epilogue_args)

    def store_tile(self, epi, acc_stage, gC, tile, warp_idx, c_map):
        """Hook: accumulator stage ``acc_stage`` of item ``tile`` to C (``sm100.store_tile``)."""
        sm100.store_tile(epi, acc_stage, gC[(None, None, tile.tile_m, tile.tile_n)], warp_idx, c_map,
                         origin=self.tile_origin(tile))

    def tile_origin(self, tile):
        """Hook: the (row, column) in C of ``tile``'s first element (what the epilogue op is told),
        as in every family; counted in the group's C, like ``PersistentHopperGemm.tile_origin``."""
        return (tile.tile_m * self.tile_mn[0], tile.tile_n * self.tile_mn[1])

    def finish_stores(self, epi, warp_idx):
        """Hook, after the last item: its last TMA stores finish reading smem (``sm100.finish_stores``)."""
        sm100.finish_stores(epi, warp_idx)
