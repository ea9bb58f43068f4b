"""A grouped GEMM on Hopper: G independent products ``C_g = A_g @ B_g.T`` in one launch.

The experts of a mixture-of-experts layer each multiply their own tokens by their own weights:
G GEMMs with different M (tokens routed to the expert), often the same N and K. A loop of G
launches pays a launch, a ramp-up and a tail per expert, and a small expert cannot fill 132 SMs.
One grouped launch lays all the groups' C tiles end to end and lets the persistent kernel of
``hopper_gemm_persistent`` walk through them. What changes, and nothing else does:

* **Group metadata on the device.** The kernel takes three small tensors instead of A, B, C:
  ``shapes`` (G, 4) int32 ``[M, N, K, 1]``, ``ptrs`` (G, 3) int64 (addresses of A_g, B_g, C_g)
  and ``strides`` (G, 3) int64 (their row strides, in elements). G and every size are run-time
  values: one compile serves every batch of groups.
* **The group search** (:func:`find_group`). Work item w belongs to the first group whose
  running total of tiles exceeds w (``models/group_scheduler.py`` is the CPU model). A CTA's work
  items only grow (w, w + P, w + 2P ...), so its search resumes where the last one stopped:
  over the whole kernel a CTA walks each group once. Only the producer warp searches; it hands
  each item (group, tile_m, tile_n, k_tiles) to the consumers through two smem slots.
* **One tensor map per operand per CTA, rewritten when the group changes.** A TMA copy reads a
  128-byte *tensor map* (base address, sizes, strides, box, swizzle). The host makes one from a
  template tensor per operand; each CTA copies them into smem once, and when its next item is in
  another group, patches address, sizes and strides there (``tensormap.replace``), copies the map
  to its slot of a global workspace with a release fence (``tensormap.cp_fenceproxy``), and
  acquires it before the next copy (``fence.proxy.tensormap``). The producer warp owns A's and
  B's maps, the store warp C's. ``cutlass.tensor_utils.TensorMapManager`` in SMEM mode does the
  three steps.
* **Edges for free.** TMA zero-fills loads past a group's M or K and drops stores past its M or
  N, so no group needs a multiple of the tile: the maps carry each group's true sizes.

Entry points: ``grouped_gemm([A_0, ...], [B_0, ...])`` (a list per operand, like a loop of
``A_g @ B_g.T``), ``grouped_mm(a, w, offs)`` (the packed MoE form of ``torch._grouped_mm``),
``launcher`` for benchmarks, ``compile_target`` for ``cutecourse.inspect``.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.tensor_utils import TensorMapManager, TensorMapUpdateMode

from ..errors import ShapeError
from ..models.gemm_plan import EPI_STAGES, EPI_TILE, IN_DTYPES, TILES
from . import sm90
from .group_search import Groups, find_group, group_grid, group_tensor
from .hopper_gemm_persistent import (CONSUMER_REGISTERS, CONSUMER_THREADS, EPILOGUE_STORE_WARP,
                                     PRODUCER_REGISTERS, PRODUCER_WARPGROUPS, THREADS,
                                     PersistentHopperGemm, plan_persistent)

#: Tensor maps per CTA (A, B, C), 128 bytes each: the workspace is (CTAs, MAPS, 16) int64.
MAPS = 3
MAP_BYTES = 128
#: Work-item slots between the producer and the consumers; each holds (group, tile_m, tile_n,
#: k_tiles). group = -1: no more work.
WORK_SLOTS = 2
ITEM_FIELDS = 4
#: The producer warp and the warp that stores C: the two warps that rewrite tensor maps.
PRODUCER_WARP = 0
#: Order inside a group: bands of GROUP_M tile-rows (``models/tile_order.py``). One band taller
#: than a group (4096 tile-rows: M up to 524288) = m fastest, the order of the CPU model and of
#: the DSL's group scheduler (and GROUP_M x tile columns stays far below 2^31). Bands
#: of 16 (the dense persistent kernel's) measured no faster here: 0.97-1.03x of this order on
#: the three problems of ``benchmarks/grouped.py`` (grouped_bfloat16.json).
GROUP_M = 1 << 12


def work_item(groups: Groups, work, group, first, group_m: int, cluster_mn, in_cluster):
    """(tile_m, tile_n, k_tiles) of item ``work`` in ``group`` for the CTA at ``in_cluster``: inside
    a group, bands of ``group_m`` cluster-tile rows (``models.group_scheduler.locate(..., group_m=)``)."""
    rows, cols, k_tiles = group_grid(groups, group)
    block_m, block_n = sm90.band_tile(work - first, rows, cols, group_m)
    return (block_m * cluster_mn[0] + in_cluster[0], block_n * cluster_mn[1] + in_cluster[1], k_tiles)


class GroupedHopperGemm(PersistentHopperGemm):
    """G products ``C_g = A_g @ B_g.T`` in one persistent, warp-specialized launch.

    The persistent kernel's roles, ring, mainloop and epilogue (inherited); new: the group
    metadata, the group search and the tensor maps (module docstring). ``sms``: the CTAs the
    grid may use. ``cluster_mn`` (2, 1) or (1, 2): a work item is a cluster tile of one group, and
    the pair shares B (or A) by multicast; past the group's edge a CTA's loads are zero-filled
    and its stores dropped. The dynamic scheduler is not offered.
    """

    IN_DTYPES = IN_DTYPES

    def __init__(self, tile_mn=(128, 256), sms: int = 132, stages: int | None = None,
                 epi_tile=EPI_TILE, group_m: int = GROUP_M, cluster_mn=(1, 1)):
        super().__init__(tile_mn, cluster_mn, sms, group_m=group_m, stages=stages, epi_tile=epi_tile)
        self.config = ("grouped", *self.config)
        self.maps = TensorMapManager(TensorMapUpdateMode.SMEM, MAP_BYTES)

    # -- host side ---------------------------------------------------------------------------
    @cute.jit
    def __call__(self, a: cute.Tensor, b: cute.Tensor, c: cute.Tensor, shapes: cute.Tensor,
                 ptrs: cute.Tensor, strides: cute.Tensor, workspace: cute.Tensor, trace: cute.Tensor,
                 work_bound: cutlass.Int32, stream):
        """``a``, ``b``, ``c``: templates (dtype, row-major) for the tensor maps, e.g. group 0's
        operands; ``work_bound``: at least the total number of C tiles (it sizes the grid);
        ``trace`` (CTAs, 2) int32: each CTA writes its item and tensor-map-update counts."""
        self.a_dtype, self.c_dtype = a.element_type, c.element_type
        self.stages = plan_persistent(self.tile_mn, sm90.dtype_name(self.a_dtype),
                                      sm90.dtype_name(self.c_dtype), stages=self.requested_stages,
                                      epi_tile=self.epi_tile, tiles=self.TILES,
                                      in_dtypes=self.IN_DTYPES).stages
        self.tiled_mma = sm90.tiled_mma(self.a_dtype, self.acc_dtype, self.MMA_WARPGROUPS, self.tile_mn[1])
        sA_layout, sB_layout, sC_layout = sm90.smem_layouts(self.tile_mnk, self.a_dtype, self.c_dtype,
                                                            self.stages, self.epi_tile, EPI_STAGES)
        tma_a, gA, tma_b, gB, tma_c, gC = sm90.tma_atoms(
            a, b, c, sA_layout, sB_layout, sC_layout, self.tile_mn, self.cluster_mn, self.epi_tile,
            tile_k=self.tile_mnk[2])

        @cute.struct
        class SharedStorage:
            barriers: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
            sA: cute.struct.Align[cute.struct.MemRange[self.a_dtype, cute.cosize(sA_layout)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[self.a_dtype, cute.cosize(sB_layout)], 1024]
            sC: cute.struct.Align[cute.struct.MemRange[self.c_dtype, cute.cosize(sC_layout)], 1024]
            # the CTA's tensor maps, patched here before they are published to the workspace
            maps: cute.struct.Align[cute.struct.MemRange[cutlass.Int64, MAPS * MAP_BYTES // 8], MAP_BYTES]
            work_barriers: cute.struct.MemRange[cutlass.Int64, WORK_SLOTS * 2]
            work_items: cute.struct.MemRange[cutlass.Int32, WORK_SLOTS * ITEM_FIELDS]

        self.shared_storage = SharedStorage
        cm, cn = self.cluster_mn
        clusters = cutlass.min(work_bound, self.sms // (cm * cn))
        # (a 1x1 "cluster" launch attribute is left out: measured slower for this kernel)
        cluster = {"cluster": (cm, cn, 1)} if cm * cn > 1 else {}
        self.kernel(tma_a, gA, tma_b, gB, tma_c, gC, self.tiled_mma, sA_layout, sB_layout, sC_layout,
                    shapes, ptrs, strides, workspace, trace).launch(
            grid=(cm, cn, clusters), block=[THREADS, 1, 1], min_blocks_per_mp=1, stream=stream,
            **cluster)

    # -- device side -------------------------------------------------------------------------
    @cute.kernel
    def kernel(self, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom, mB: cute.Tensor,
               tma_c: cute.CopyAtom, mC: cute.Tensor, tiled_mma: cute.TiledMma,
               sA_layout: cute.ComposedLayout, sB_layout: cute.ComposedLayout,
               sC_layout: cute.ComposedLayout, shapes: cute.Tensor, ptrs: cute.Tensor,
               strides: cute.Tensor, workspace: cute.Tensor, trace: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        warpgroup_idx = cute.arch.make_warp_uniform(tidx // 128)
        cs = self.cluster_mn[0] * self.cluster_mn[1]
        cta = cute.arch.block_idx()[2] * cs + cute.arch.block_idx_in_cluster()  # workspace slot

        cta_layout, cluster_coord, a_mcast_mask, b_mcast_mask = sm90.multicast_masks(self.cluster_mn)
        storage = utils.SmemAllocator().allocate(self.shared_storage)
        ring = sm90.make_ring(storage.barriers.data_ptr(), self.stages, self.a_dtype, sA_layout,
                              sB_layout, cta_layout, self.cluster_mn, CONSUMER_THREADS)
        queue = pipeline.PipelineAsync.create(
            barrier_storage=storage.work_barriers.data_ptr(), num_stages=WORK_SLOTS,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 32),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, CONSUMER_THREADS),
            defer_sync=True)
        items = storage.work_items.get_tensor(cute.make_layout((WORK_SLOTS, ITEM_FIELDS),
                                                               stride=(ITEM_FIELDS, 1)))
        # Tensor maps: operand i's lives at smem_maps + 16 i and at workspace[cta, i, :].
        smem_maps = storage.maps.data_ptr()
        map_ptrs = [(self.maps.get_tensormap_ptr(workspace[(cta, i, None)].iterator), smem_maps + 16 * i)
                    for i in range(MAPS)]
        # Each map's owner copies the host-made template into smem (it is patched before first use).
        self.maps.init_tensormap_from_atom(tma_a, map_ptrs[0][1], PRODUCER_WARP)
        self.maps.init_tensormap_from_atom(tma_b, map_ptrs[1][1], PRODUCER_WARP)
        self.maps.init_tensormap_from_atom(tma_c, map_ptrs[2][1], EPILOGUE_STORE_WARP)
        pipeline.pipeline_init_arrive(cluster_shape_mn=self.cluster_mn, is_relaxed=True)

        sA = storage.sA.get_tensor(sA_layout.outer, swizzle=sA_layout.inner)
        sB = storage.sB.get_tensor(sB_layout.outer, swizzle=sB_layout.inner)
        sC = storage.sC.get_tensor(sC_layout.outer, swizzle=sC_layout.inner)
        # Tile views over the *template* tensors: only their coordinates are used (the maps give
        # each group's address and bounds), so never ask them for a size.
        gA = cute.local_tile(mA, self.tile_mnk, (None, None, None), proj=(1, None, 1))
        gB = cute.local_tile(mB, self.tile_mnk, (None, None, None), proj=(None, 1, 1))
        gC = cute.local_tile(mC, self.tile_mnk, (None, None, None), proj=(1, 1, None))
        tAsA, tAgA, tBsB, tBgB = sm90.tma_views(tma_a, tma_b, cta_layout, cluster_coord, sA, sB, gA, gB)
        cm, cn = self.cluster_mn
        groups = Groups(shapes, ptrs, strides, shapes.shape[0],
                        (self.tile_mn[0] * cm, self.tile_mn[1] * cn, self.tile_mnk[2]))
        in_cluster = cute.arch.block_in_cluster_idx()

        pipeline.pipeline_init_wait(cluster_shape_mn=self.cluster_mn)

        if warpgroup_idx < PRODUCER_WARPGROUPS:
            cute.arch.setmaxregister_decrease(PRODUCER_REGISTERS)
            if warp_idx == PRODUCER_WARP:
                loads = sm90.Loads(tma_a, tAgA, tAsA, a_mcast_mask, tma_b, tBgB, tBsB, b_mcast_mask)
                self._producer(ring, queue, items, groups, loads, map_ptrs, in_cluster, cta, trace)
        else:
            cute.arch.setmaxregister_increase(CONSUMER_REGISTERS)
            ctid = tidx - 128 * PRODUCER_WARPGROUPS
            thr_mma = tiled_mma.get_slice(
                cute.make_layout(self.MMA_WARPGROUPS, stride=128)(warpgroup_idx - PRODUCER_WARPGROUPS))
            acc = cute.make_rmem_tensor(thr_mma.partition_C(gC[(None, None, 0, 0)]).shape, self.acc_dtype)
            tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
            mma = sm90.Mma(tiled_mma, tiled_mma.make_fragment_A(thr_mma.partition_A(sA)),
                           tiled_mma.make_fragment_B(thr_mma.partition_B(sB)), acc)
            epilogue = sm90.Epilogue(tma_c, sC, tiled_mma, acc, ctid, self.c_dtype, self.epi_tile,
                                     EPI_STAGES, CONSUMER_THREADS, store_warp=EPILOGUE_STORE_WARP,
                                     barrier_threads=CONSUMER_THREADS)
            self._grouped_consumer(ring, queue, items, groups, mma, epilogue, gC, map_ptrs[2], warp_idx)

    # -- producer: group search, A/B tensor maps, TMA ----------------------------------------
    @cute.jit
    def _producer(self, ring, queue, items, groups, loads, map_ptrs, in_cluster, cta, trace):
        """For each work item: find its group, rewrite A's and B's maps if the group changed,
        publish the item to the consumers, load its k-tiles (with the rewritten maps)."""
        prod = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        slot = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, WORK_SLOTS)
        (a_map, a_smem), (b_map, b_smem) = map_ptrs[0], map_ptrs[1]
        a_desc = self.maps.get_tensormap_ptr(a_map, cute.AddressSpace.generic)
        b_desc = self.maps.get_tensormap_ptr(b_map, cute.AddressSpace.generic)
        work = cute.arch.block_idx()[2]
        stride = cute.arch.grid_dim()[2]
        group, first = find_group(groups, work, cutlass.Int32(0), cutlass.Int32(0))
        last = cutlass.Int32(-1)
        n_items = cutlass.Int32(0)
        n_updates = cutlass.Int32(0)
        while group < groups.count:
            tile_m, tile_n, k_tiles = work_item(groups, work, group, first, self.group_m,
                                                self.cluster_mn, in_cluster)
            _publish(queue, items, slot, group, tile_m, tile_n, k_tiles)
            slot.advance()
            if group != last:
                # The whole warp patches both maps in smem and publishes them (release); then
                # acquire them before the next TMA reads them.
                a_g = group_tensor(groups, group, 0, self.a_dtype, 0, 2)
                b_g = group_tensor(groups, group, 1, self.a_dtype, 1, 2)
                self.maps.update_tensormap((a_g, b_g), (loads.tma_a, loads.tma_b), (a_map, b_map),
                                           PRODUCER_WARP, (a_smem, b_smem))
                self.maps.fence_tensormap_update(a_map)
                self.maps.fence_tensormap_update(b_map)
                last = group
                n_updates = n_updates + 1
            tile_loads = sm90.Loads(loads.tma_a, loads.tAgA[(None, tile_m, None)], loads.tAsA,
                                    loads.a_mcast_mask, loads.tma_b, loads.tBgB[(None, tile_n, None)],
                                    loads.tBsB, loads.b_mcast_mask)
            for k in cutlass.range(k_tiles, unroll=1):
                ring.producer_acquire(prod)
                sm90.issue_tma(ring, tile_loads, prod, k, maps=(a_desc, b_desc))
                prod.advance()
            n_items = n_items + 1
            work = work + stride
            group, first = find_group(groups, work, group, first)
        _publish(queue, items, slot, cutlass.Int32(-1), cutlass.Int32(0), cutlass.Int32(0),
                 cutlass.Int32(0))
        if cute.arch.lane_idx() == 0:
            trace[(cta, 0)] = n_items
            trace[(cta, 1)] = n_updates
        ring.producer_tail(prod)

    # -- consumers: MMA, C's tensor map, epilogue --------------------------------------------
    @cute.jit
    def _grouped_consumer(self, ring, queue, items, groups, mma, epilogue, gC, c_map_ptrs, warp_idx):
        """The persistent consumer's loop over the producer's items; the store warp rewrites C's
        map when the group changes (``update_tensormap`` first waits for the TMA stores still
        reading the old one)."""
        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        slot = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, WORK_SLOTS)
        c_desc = self.maps.get_tensormap_ptr(c_map_ptrs[0], cute.AddressSpace.generic)
        group, tile_m, tile_n, k_tiles = _receive(queue, items, slot)
        slot.advance()
        last = cutlass.Int32(-1)
        while group >= 0:
            if group != last:
                self._switch_c_map(groups, group, epilogue, c_map_ptrs, warp_idx)
                last = group
            read, release = sm90.mma_tile(ring, mma, read, release, k_tiles)  # every group has K >= 1
            sm90.store_tile(epilogue, gC[(None, None, tile_m, tile_n)], warp_idx, c_desc)
            group, tile_m, tile_n, k_tiles = _receive(queue, items, slot)
            slot.advance()
        sm90.finish_stores(epilogue, warp_idx)


    @cute.jit
    def _switch_c_map(self, groups, group, epilogue, c_map_ptrs, warp_idx):
        """C's map now points at ``group``'s C: patched and published by the store warp (which
        first waits for its TMA stores still reading the old map), then acquired by it."""
        c_map, c_smem = c_map_ptrs
        c_g = group_tensor(groups, group, 2, self.c_dtype, 0, 1)
        self.maps.update_tensormap((c_g,), (epilogue.tma_c,), (c_map,), EPILOGUE_STORE_WARP, (c_smem,))
        if warp_idx == EPILOGUE_STORE_WARP:
            self.maps.fence_tensormap_update(c_map)


@cute.jit
def _publish(queue, items, slot, group, tile_m, tile_n, k_tiles):
    """Producer warp: write one work item into a free slot (lane 0), then release it."""
    queue.producer_acquire(slot)
    if cute.arch.lane_idx() == 0:
        items[(slot.index, 0)] = group
        items[(slot.index, 1)] = tile_m
        items[(slot.index, 2)] = tile_n
        items[(slot.index, 3)] = k_tiles
    queue.producer_commit(slot)


@cute.jit
def _receive(queue, items, slot):
    """Consumers: read the next work item and free its slot."""
    queue.consumer_wait(slot)
    item = (items[(slot.index, 0)], items[(slot.index, 1)], items[(slot.index, 2)],
            items[(slot.index, 3)])
    queue.consumer_release(slot)
    return item


# ------------------------------------------------------------------------------------------
# Python entry points
# ------------------------------------------------------------------------------------------
def compile_target(tile=(128, 256), in_dtype: str = "float16", out_dtype: str = "float16",
                   sms: int = 132, stages: int | None = None, cluster=(1, 1)):
    """(jit_fn, fake_args) for ``cutecourse.inspect.compile_report``: symbolic sizes and G."""
    import cuda.bindings.driver as cuda
    from cutlass.cute.runtime import make_fake_tensor

    from . import gemm_launch

    plan_persistent(tuple(tile), in_dtype, out_dtype, stages=stages)
    kernel = GroupedHopperGemm(tuple(tile), sms, stages, cluster_mn=tuple(cluster))
    g = cute.sym_int(symbol="G")
    shapes = make_fake_tensor(cutlass.Int32, (g, 4), (4, 1), assumed_align=16)
    ptrs = make_fake_tensor(cutlass.Int64, (g, MAPS), (MAPS, 1), assumed_align=8)
    strides = make_fake_tensor(cutlass.Int64, (g, MAPS), (MAPS, 1), assumed_align=8)
    workspace = make_fake_tensor(cutlass.Int64, (sms, MAPS, MAP_BYTES // 8),
                                 (MAPS * MAP_BYTES // 8, MAP_BYTES // 8, 1), assumed_align=MAP_BYTES)
    trace = make_fake_tensor(cutlass.Int32, (sms, 2), (2, 1), assumed_align=8)
    return kernel, (*gemm_launch.fake_operands(in_dtype, out_dtype), shapes, ptrs, strides,
                    workspace, trace, cutlass.Int32(sms), cuda.CUstream(0))


def check_groups(As, Bs, out_dtype=None, in_dtypes=None) -> tuple[str, str]:
    """The dense GEMM's operand checks for every group (M_g = 0 allowed: the group is skipped),
    plus what a grouped launch adds: equal-length lists, one dtype, one device."""
    import torch

    from ..errors import CourseError, DTypeError
    from .gemm_launch import check_operands

    if not isinstance(As, (list, tuple)) or not isinstance(Bs, (list, tuple)):
        raise ShapeError("grouped_gemm takes a list of A_g and a list of B_g",
                         "e.g. grouped_gemm([a0, a1], [b0, b1]); for one packed A use grouped_mm")
    if len(As) != len(Bs) or not As:
        raise ShapeError(f"{len(As)} A's and {len(Bs)} B's: need the same number, at least one",
                         "pass one (A_g, B_g) pair per group")
    names = set()
    for g, (a, b) in enumerate(zip(As, Bs)):
        try:
            if (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dim() == b.dim() == 2
                    and 0 in (a.shape[0], a.shape[1]) and a.shape[1] == b.shape[1]):
                # nothing to multiply (M_g = 0, or K_g = 0 and C_g = 0): the kernel never reads
                # these tensors, so check only dtypes and devices
                a, b = a.new_empty((1, 16)), b.new_empty((max(1, b.shape[0]), 16))
            names.add(check_operands(a, b, out_dtype, in_dtypes=in_dtypes))
        except CourseError as e:
            raise type(e)(f"group {g}: {e.what}", e.fix) from None
    if len(names) > 1:
        raise DTypeError(f"the groups mix dtypes {sorted(names)}", "give every group the same dtype")
    if len({t.device for t in (*As, *Bs)}) > 1:
        from ..errors import DeviceError
        raise DeviceError("the groups' tensors are on different devices", "put them all on one GPU")
    return names.pop()


def _compiled(kernel, templates, extra, device):
    """Compile once per (configuration, dtypes); return (compiled fn, converted args, stream)."""
    import cuda.bindings.driver as cuda
    import torch
    from cutlass.cute.runtime import from_dlpack

    from ..modes import require_gpu
    from .gemm_launch import _COMPILED

    require_gpu("sm_90a")
    if device.type != "cuda":
        from ..errors import DeviceError
        raise DeviceError(f"the operands are on {device}", "move them to the GPU with .cuda()")
    args = [from_dlpack(t, assumed_align=16).mark_layout_dynamic(leading_dim=1) for t in templates]
    args += [from_dlpack(t, assumed_align=align).mark_layout_dynamic(leading_dim=t.dim() - 1)
             for t, align in extra]
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    key = (type(kernel).__qualname__, kernel.config, templates[0].dtype, templates[2].dtype)
    if key not in _COMPILED:
        _COMPILED[key] = cute.compile(kernel, *args, cutlass.Int32(1), stream)
    return _COMPILED[key], args, stream


def _launch_closure(kernel, templates, shapes, ptrs, strides, work_bound: int):
    """``fn()`` launching the grouped kernel on this metadata; ``fn.trace`` (CTAs, 2): per CTA its
    work items and tensor-map rewrites of the last launch; ``fn.ctas``: the grid."""
    import torch

    device = shapes.device
    workspace = torch.empty((kernel.sms, MAPS, MAP_BYTES // 8), dtype=torch.int64, device=device)
    trace = torch.zeros((kernel.sms, 2), dtype=torch.int32, device=device)
    extra = [(shapes, 16), (ptrs, 8), (strides, 8), (workspace, MAP_BYTES), (trace, 8)]
    compiled, args, stream = _compiled(kernel, templates, extra, device)
    bound = cutlass.Int32(max(1, work_bound))

    def fn():
        compiled(*args, bound, stream)

    cs = kernel.cluster_mn[0] * kernel.cluster_mn[1]
    fn.trace, fn.ctas = trace, min(max(1, work_bound), kernel.sms // cs) * cs
    fn.keep_alive = (templates, shapes, ptrs, strides, workspace)
    return fn


def launcher(As, Bs, Cs, tile=(128, 256), sms: int | None = None, stages: int | None = None,
             group_m: int = GROUP_M, cluster=(1, 1)):
    """Validated, compiled launch closure: ``fn()`` writes ``A_g @ B_g.T`` into every ``Cs[g]``.

    Groups with K_g = 0 have C_g = 0: the host zeroes them once here and gives them no tiles.
    """
    from ..modes import require_gpu

    check_groups(As, Bs, Cs[0].dtype if Cs else None)
    check_outputs(As, Bs, Cs)
    sms = require_gpu("sm_90a").sm_count if sms is None else sms
    kernel = GroupedHopperGemm(tuple(tile), sms, stages, group_m=group_m, cluster_mn=tuple(cluster))
    return list_closure(kernel, As, Bs, Cs)


def check_outputs(As, Bs, Cs):
    """The list form's outputs: one contiguous (M_g, N_g) C_g per group."""
    if len(Cs) != len(As) or any(tuple(c.shape) != (a.shape[0], b.shape[0]) or not c.is_contiguous()
                                 for a, b, c in zip(As, Bs, Cs)):
        raise ShapeError("Cs must hold one contiguous (M_g, N_g) tensor per group",
                         "allocate each as torch.empty(M_g, N_g)")


def list_closure(kernel, As, Bs, Cs, extra=()):
    """The list form's launch closure, for checked operands: zeroes the C_g of empty groups and
    builds the metadata: per group its sizes, and a pointer and a stride for A_g, B_g, C_g (row
    strides) and for each ``extra`` column ``(tensors, dim)``, whose stride is taken along ``dim``
    (the FP8 kernel's scales)."""
    import torch

    sizes = [(a.shape[0] if a.shape[1] else 0, b.shape[0], a.shape[1]) for a, b in zip(As, Bs)]
    for (m, _, _), c in zip(sizes, Cs):
        if m == 0 and c.numel():
            c.zero_()
    device = As[0].device
    columns = [(As, 0), (Bs, 0), (Cs, 0), *extra]
    shapes = torch.tensor([[m, n, k, 1] for m, n, k in sizes], dtype=torch.int32, device=device)
    ptrs = torch.tensor([[ts[g].data_ptr() for ts, _ in columns] for g in range(len(As))],
                        dtype=torch.int64, device=device)
    strides = torch.tensor([[ts[g].stride(dim) for ts, dim in columns] for g in range(len(As))],
                           dtype=torch.int64, device=device)
    bm, bn = kernel.tile_mn[0] * kernel.cluster_mn[0], kernel.tile_mn[1] * kernel.cluster_mn[1]
    work = sum(-(-m // bm) * -(-n // bn) for m, n, _ in sizes)
    live = [g for g, (m, _, _) in enumerate(sizes) if m] or [0]
    templates = (As[live[0]], Bs[live[0]], Cs[live[0]])
    if work == 0:  # nothing to compute (every group empty)
        fn = lambda: None  # noqa: E731
        fn.trace, fn.ctas = None, 0
        return fn
    fn = _launch_closure(kernel, templates, shapes, ptrs, strides, work)
    fn.sizes = sizes
    fn.keep_alive = (*fn.keep_alive, *(ts for ts, _ in extra))
    return fn


def grouped_gemm(As, Bs, out_dtype=None, **config):
    """``[A_g @ B_g.T for g]`` in one launch on an H100: A_g (M_g, K_g), B_g (N_g, K_g), both
    K-major fp16/bf16 (every group the same dtype); M_g may be 0. Returns the list of C_g."""
    import torch

    check_groups(As, Bs, out_dtype)  # before touching the GPU
    dtype = out_dtype or As[0].dtype
    Cs = [torch.empty((a.shape[0], b.shape[0]), dtype=dtype, device=a.device) for a, b in zip(As, Bs)]
    launcher(As, Bs, Cs, **config)()
    return Cs


def packed_metadata(a, b, c, offs):
    """Device metadata of the packed MoE form, computed on the GPU from ``offs`` (no host sync):
    group g is rows ``offs[g-1]:offs[g]`` of A and C, and B = b[g] (K, N) read as its transpose
    (N, K), which must be K-major."""
    import torch

    ends = offs.to(torch.int64)
    starts = torch.cat([ends.new_zeros(1), ends[:-1]])
    groups, k, n = b.shape
    rows = ends - starts
    shapes = torch.stack([rows, torch.full_like(rows, n), torch.full_like(rows, k),
                          torch.ones_like(rows)], dim=1).to(torch.int32)
    g = torch.arange(groups, device=offs.device, dtype=torch.int64)
    ptrs = torch.stack([a.data_ptr() + starts * a.stride(0) * a.element_size(),
                        b.data_ptr() + g * b.stride(0) * b.element_size(),
                        c.data_ptr() + starts * c.stride(0) * c.element_size()], dim=1)
    strides = torch.tensor([a.stride(0), b.stride(2), c.stride(0)], dtype=torch.int64,
                           device=offs.device).expand(groups, 3).contiguous()
    return shapes, ptrs, strides


def check_packed(a, b, offs, out_dtype=None, in_dtypes=None) -> tuple[str, str]:
    """``torch._grouped_mm``'s 2d x 3d form: a (sum M, K), b (G, K, N) with K-major b[g]."""
    import torch

    from ..errors import DTypeError, LayoutError
    from .gemm_launch import check_operands

    if not isinstance(b, torch.Tensor) or b.dim() != 3:
        raise ShapeError("b must be 3-D (G, K, N), as torch._grouped_mm takes it",
                         "stack the experts' weights: w (G, N, K), then pass w.transpose(-2, -1)")
    if not isinstance(offs, torch.Tensor) or offs.dim() != 1 or offs.dtype != torch.int32:
        raise DTypeError("offs must be a 1-D int32 tensor of cumulative row ends, one per group",
                         "e.g. offs = torch.cumsum(rows_per_group, 0).to(torch.int32)")
    if offs.shape[0] != b.shape[0]:
        raise ShapeError(f"offs has {offs.shape[0]} entries but b has {b.shape[0]} groups",
                         "one cumulative end per group")
    if b.stride(1) != 1:
        raise LayoutError(f"b[g] (K, N) must be the transpose of a K-major (N, K) weight; b's strides "
                          f"are {tuple(b.stride())}",
                          "keep w as (G, N, K) contiguous and pass w.transpose(-2, -1)")
    if offs.device != a.device:
        from ..errors import DeviceError
        raise DeviceError(f"offs is on {offs.device}, a on {a.device}", "put offs on the GPU too")
    return check_operands(a, b[0].transpose(0, 1), out_dtype, in_dtypes=in_dtypes)


def packed_launcher(a, b, offs, c, tile=(128, 256), sms: int | None = None,
                    stages: int | None = None, group_m: int = GROUP_M, cluster=(1, 1)):
    """Launch closure for the packed form: ``fn()`` writes ``a[rows_g] @ b[g]`` into ``c[rows_g]``."""
    from ..modes import require_gpu

    check_packed(a, b, offs, c.dtype)
    if tuple(c.shape) != (a.shape[0], b.shape[2]) or not c.is_contiguous():
        raise ShapeError(f"c is {tuple(c.shape)}, expected a contiguous {(a.shape[0], b.shape[2])}",
                         "allocate c as torch.empty(sum M, N)")
    sms = require_gpu("sm_90a").sm_count if sms is None else sms
    kernel = GroupedHopperGemm(tuple(tile), sms, stages, group_m=group_m, cluster_mn=tuple(cluster))
    shapes, ptrs, strides = packed_metadata(a, b, c, offs)
    bm, bn = kernel.tile_mn[0] * kernel.cluster_mn[0], kernel.tile_mn[1] * kernel.cluster_mn[1]
    # Without reading offs on the host: the tiles of all groups are at most ceil(sum M / BM) + G
    # rows (each group wastes less than one) times ceil(N / BN) columns.
    bound = (-(-a.shape[0] // bm) + b.shape[0]) * -(-b.shape[2] // bn)
    return _launch_closure(kernel, (a, b[0].transpose(0, 1), c), shapes, ptrs, strides, bound)


def check_offs(offs, rows: int) -> int:
    """Check (one host sync) that ``offs`` is non-decreasing and ends within ``rows``; return its
    last end (rows past it belong to no group)."""
    import torch

    if not offs.numel():
        return 0
    ends = offs.to(torch.int64)
    ok = bool(((ends[1:] >= ends[:-1]).all() & (ends[0] >= 0) & (ends[-1] <= rows)).item())
    if not ok:
        raise ShapeError("offs must be non-decreasing cumulative row ends within a's rows",
                         "build it as torch.cumsum(rows_per_group, 0).to(torch.int32)")
    return int(ends[-1])


def grouped_mm(a, b, offs, out_dtype=None, **config):
    """``torch._grouped_mm(a, b, offs=offs)`` for a (sum M, K) and b (G, K, N), on an H100.

    Checks that ``offs`` is non-decreasing and ends within ``a`` (one host sync); rows past
    ``offs[-1]`` belong to no group and are returned as zeros.
    """
    import torch

    check_packed(a, b, offs, out_dtype)
    c = torch.empty((a.shape[0], b.shape[2]), dtype=out_dtype or a.dtype, device=a.device)
    c[check_offs(offs, a.shape[0]):].zero_()
    if a.shape[0] == 0 or a.shape[1] == 0:
        return c.zero_()
    packed_launcher(a, b, offs, c, **config)()
    return c
