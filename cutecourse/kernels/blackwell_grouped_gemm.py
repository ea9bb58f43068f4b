"""A grouped block-scaled GEMM for Blackwell (sm_100a): G products ``C_g = A_g @ B_g.T`` with
NVFP4 or MXFP8 inputs, in one persistent launch.

The grouping is ``hopper_grouped_gemm``'s: the groups' C tiles laid end to end, a persistent
grid walking them, device metadata instead of tensors (G is a run-time value: one compile serves
every batch of groups), and one tensor map per operand per CTA, rewritten when the group changes.
The walk (:func:`find_group`, :func:`work_item`) numbers work items exactly as
``models/group_scheduler.locate`` does, and the tests hold it to ``schedule()``. With a cluster
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
* **Three pipelines**: the A/B/SF ring (``PipelineTmaUmma``: TMA fills, MMA commits free), the
  accumulator ring (``PipelineUmmaAsync``: MMA commits full, epilogue warps free) and the C
  store buffers (``PipelineTmaStore``).
* **Five tensor maps per CTA**: A, B, SFA, SFB (the TMA warp's) and C (epilogue warp 0's). When
  a CTA's next tile is in another group, the owner patches its maps in smem (address, 5 sizes,
  4 strides: ``tensormap.replace`` x 10), publishes them to the CTA's workspace slot with a
  release (``tensormap.cp_fenceproxy``) and acquires them (``fence.proxy.tensormap``) before its
  next TMA. The scale factors' map describes the interleaved atom layout of
  ``models/block_scaling.py``, so its sizes are the group's M (or N) and K.

Not here (exercises): 2-CTA MMA (256-row tiles), NVFP4's per-tensor global scale (``alpha`` in
the epilogue), MN-major operands, fp8/fp4 output, K = 0 groups (the host rejects them).

Entry points: ``grouped_gemm_blockscaled(As, Bs, fmt)`` (quantizes and runs on a B200),
``host_metadata`` (device metadata from torch tensors, CPU-testable), ``compile_target`` for
``cutecourse.inspect``, ``plan`` for the smem/TMEM budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass.cute.nvgpu import cpasync, tcgen05
from cutlass.memory import SmemAllocator

from ..errors import AlignmentError, DeviceError, DTypeError, ShapeError
from ..models import block_scaling
from . import sm100
from .group_search import Groups, find_group, group_grid, group_tensor

FORMATS = ("nvfp4", "mxfp8")
TILES = ((128, 128), (128, 256))
CLUSTERS = ((1, 1), (2, 1), (1, 2), (2, 2))
OUT_DTYPES = ("float16", "bfloat16")
#: Warp roles (module docstring).
EPILOGUE_WARPS = (0, 1, 2, 3)
MMA_WARP, TMA_WARP = 4, 5
THREADS = 32 * 6
EPILOGUE_THREADS = 32 * len(EPILOGUE_WARPS)
#: Tensor maps per CTA and their order in the workspace (CTAs, MAPS, 16) int64.
MAPS = 5
A, B, SFA, SFB, C = range(MAPS)
#: Metadata columns: ptrs (G, 5) int64 = addresses of A, B, C, SFA, SFB (A, B, C first, as in
#: hopper_grouped_gemm); strides (G, 3) int64 = row strides of A, B, C in elements.
PTR_COLUMNS = ("a", "b", "c", "sfa", "sfb")
#: MMAs per k-tile, and each MMA's K: fixed by the instruction (32 bytes of A per row).
K_BLOCKS = 4
MMA_K = {"e2m1": 64, "e4m3": 32}
#: Epilogue sub-tile: 128 rows (4 warps x 32 TMEM lanes) x 32 columns (one tcgen05.ld.32x32b.x32).
EPI_TILE = (128, 32)
SMEM_CAPACITY = 232448  # 227 KiB per CTA on sm_100
HEADER_BYTES = 1024  # tensor maps (640 B) + mbarriers + TMEM address, before the 1 KiB-aligned buffers
B200_SMS = 148


@dataclass(frozen=True)
class Plan:
    """The smem and TMEM budget of one configuration (bytes, columns)."""

    fmt: str
    tile_mnk: tuple
    ab_stages: int
    acc_stages: int
    c_stages: int
    stage_bytes: int  # one k-tile of A, B, SFA, SFB
    smem_bytes: int
    tmem_columns: int  # accumulators + one k-tile of scale factors

    @property
    def sf_atoms(self) -> tuple[int, int]:
        """512-byte SF atoms per k-tile of SFA and SFB = ``tcgen05.cp`` per k-tile of each."""
        f = block_scaling.get_format(self.fmt)
        k_atoms = self.tile_mnk[2] // (4 * f.block)
        return k_atoms * -(-self.tile_mnk[0] // 128), k_atoms * -(-self.tile_mnk[1] // 128)


def plan(fmt: str = "nvfp4", tile_mn=(128, 128), out_dtype: str = "float16") -> Plan:
    """Stages that fit: C buffers first (4, or 2 when that buys one more A/B stage), then as many
    A/B/SF stages as the rest of 227 KiB holds; 2 accumulator stages when TMEM has the columns."""
    f = _format(fmt)
    tile_mn = _tile(tile_mn)
    if out_dtype not in OUT_DTYPES:
        raise DTypeError(f"output dtype {out_dtype!r} is not supported", f"use one of {OUT_DTYPES}")
    tile_k = MMA_K[f.data] * K_BLOCKS
    data_bits = 4 if f.data == "e2m1" else 8
    stage = sum(tile_mn) * tile_k * data_bits // 8 + sum(tile_mn) * tile_k // f.block
    c_buffer = EPI_TILE[0] * EPI_TILE[1] * 2
    free = SMEM_CAPACITY - HEADER_BYTES
    c_stages = 4 if (free - 2 * c_buffer) // stage == (free - 4 * c_buffer) // stage else 2
    ab_stages = (free - c_stages * c_buffer) // stage
    sf_columns = 4 * (tile_k // (4 * f.block)) * (tile_mn[0] // 128 + tile_mn[1] // 128)
    acc_stages = 2 if 2 * tile_mn[1] + sf_columns <= sm100.TMEM_COLUMNS else 1
    assert (tile_mn[1] // EPI_TILE[1]) % c_stages == 0  # sub-tile e always uses buffer e % c_stages
    return Plan(f.name, (*tile_mn, tile_k), ab_stages, acc_stages, c_stages, stage,
                HEADER_BYTES + ab_stages * stage + c_stages * c_buffer,
                acc_stages * tile_mn[1] + sf_columns)


def _format(fmt):
    f = block_scaling.get_format(fmt)
    if f.name not in FORMATS:
        raise DTypeError(f"format {f.name!r} is not supported by the Blackwell grouped GEMM",
                         f"use one of {FORMATS}")
    return f


def _tile(tile_mn):
    if tuple(tile_mn) not in TILES:
        raise ShapeError(f"tile {tuple(tile_mn)} is not supported", f"use one of {list(TILES)}")
    return tuple(tile_mn)


# -- the group scheduler (models/group_scheduler.py is its CPU model) ---------------------------
def work_item(groups: Groups, work, group, first):
    """(cluster tile m, cluster tile n, k_tiles) of item ``work`` in ``group``: m fastest, as
    ``group_scheduler.locate`` numbers them."""
    rows, _, k_tiles = group_grid(groups, group)
    within = work - first
    return within % rows, within // rows, k_tiles


class BlackwellGroupedBlockScaledGemm:
    """G block-scaled products in one persistent launch (module docstring).

    ``fmt``: "nvfp4" or "mxfp8". ``cluster_mn``: CTAs per cluster along (M, N); a cluster shares
    its loads by TMA multicast (A and SFA along N, B and SFB along M). ``max_active_clusters``:
    clusters the persistent grid may use (148 SMs on a B200; passed in because querying the GPU
    needs a driver).
    """

    def __init__(self, fmt: str = "nvfp4", tile_mn=(128, 128), cluster_mn=(1, 1),
                 max_active_clusters: int = B200_SMS, out_dtype: str = "float16"):
        self.format = _format(fmt)
        self.tile_mn = _tile(tile_mn)
        if tuple(cluster_mn) not in CLUSTERS:
            raise ShapeError(f"cluster {tuple(cluster_mn)} is not supported",
                             f"use one of {list(CLUSTERS)} ((1, 1) = no multicast)")
        if not (isinstance(max_active_clusters, int) and max_active_clusters >= 1):
            raise ShapeError(f"max_active_clusters={max_active_clusters!r} must be a positive int",
                             f"pass SMs // cluster size, e.g. {B200_SMS} on a B200 with (1, 1)")
        self.cluster_mn = tuple(cluster_mn)
        self.max_active_clusters = max_active_clusters
        self.plan = plan(self.format.name, self.tile_mn, out_dtype)
        self.mma_tiler = self.plan.tile_mnk
        self.cluster_tile = (self.tile_mn[0] * cluster_mn[0], self.tile_mn[1] * cluster_mn[1],
                             self.mma_tiler[2])
        data, scale = self.format.cutlass_types
        self.data_dtype, self.sf_dtype = getattr(cutlass, data), getattr(cutlass, scale)
        self.sf_vec = self.format.block
        self.config = (self.format.name, self.tile_mn, self.cluster_mn, max_active_clusters, out_dtype)

    @property
    def ctas(self) -> int:
        """CTAs of the largest grid: the rows of the tensor-map workspace."""
        return self.max_active_clusters * self.cluster_mn[0] * self.cluster_mn[1]

    # -- host side ---------------------------------------------------------------------------
    @cute.jit
    def __call__(self, a: cute.Tensor, b: cute.Tensor, c: cute.Tensor, sfa: cute.Tensor,
                 sfb: cute.Tensor, shapes: cute.Tensor, ptrs: cute.Tensor, strides: cute.Tensor,
                 workspace: cute.Tensor, work_bound: cutlass.Int32, stream):
        """``a`` (M, K), ``b`` (N, K), ``c`` (M, N), ``sfa``, ``sfb`` (1-D, any 1-byte type): the
        templates of the tensor maps (dtype, majorness; sizes and addresses are patched per group).
        ``shapes`` (G, 4) int32 [M, N, K, 1], ``ptrs`` (G, 5) int64, ``strides`` (G, 3) int64,
        ``workspace`` (CTAs, 5, 16) int64, ``work_bound`` >= the total number of cluster tiles."""
        self.c_dtype = c.element_type
        mma = sm100.tiled_mma(self.data_dtype, self.sf_dtype, self.sf_vec, self.tile_mn)
        p = self.plan
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
            maps: cute.struct.Align[cute.struct.MemRange[cutlass.Int64, MAPS * sm100.MAP_BYTES // 8],
                                    sm100.MAP_BYTES]
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
        clusters = cutlass.min(work_bound, self.max_active_clusters)
        (tma_a, mA), (tma_b, mB), (tma_sfa, mSFA), (tma_sfb, mSFB) = loads
        self.kernel(mma, tma_a, mA, tma_b, mB, tma_sfa, mSFA, tma_sfb, mSFB, tma_c, mC, smem.a, smem.b,
                    smem.sfa, smem.sfb, smem.c, cluster_vmnk, shapes, ptrs, strides,
                    workspace).launch(grid=(cm, cn, clusters), block=[THREADS, 1, 1],
                                      cluster=(cm, cn, 1), min_blocks_per_mp=1, stream=stream)

    # -- device side -------------------------------------------------------------------------
    @cute.kernel
    def kernel(self, mma: cute.TiledMma, tma_a: cute.CopyAtom, mA: cute.Tensor,
               tma_b: cute.CopyAtom, mB: cute.Tensor, tma_sfa: cute.CopyAtom, mSFA: cute.Tensor,
               tma_sfb: cute.CopyAtom, mSFB: cute.Tensor, tma_c: cute.CopyAtom, mC: cute.Tensor,
               sA_layout: cute.ComposedLayout, sB_layout: cute.ComposedLayout, sSFA_layout: cute.Layout,
               sSFB_layout: cute.Layout, sC_layout: cute.ComposedLayout, cluster_vmnk: cute.Layout,
               shapes: cute.Tensor, ptrs: cute.Tensor, strides: cute.Tensor, workspace: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        atoms = (tma_a, tma_b, tma_sfa, tma_sfb)
        smem = sm100.SmemLayouts(sA_layout, sB_layout, sSFA_layout, sSFB_layout, sC_layout)
        if warp_idx == TMA_WARP:
            for atom in (*atoms, tma_c):
                cpasync.prefetch_descriptor(atom)

        storage = SmemAllocator().allocate(self.shared_storage)
        p = self.plan
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
        views = (sm100.tma_views(atoms[A], coord[2], along_n, sA, tCgA, False),
                 sm100.tma_views(atoms[B], coord[1], along_m, sB, tCgB, False),
                 sm100.tma_views(atoms[SFA], coord[2], along_n, sSFA, tCgSFA, True),
                 sm100.tma_views(atoms[SFB], coord[1], along_m, sSFB, tCgSFB, True))
        masks = (None, None, None, None)
        if cutlass.const_expr(self.cluster_mn != (1, 1)):
            m_a = cpasync.create_tma_multicast_mask(cluster_vmnk, coord, mcast_mode=2)
            m_b = cpasync.create_tma_multicast_mask(cluster_vmnk, coord, mcast_mode=1)
            masks = (m_a, m_b, m_a, m_b)

        acc_shape = mma.partition_shape_C(self.tile_mn)
        acc_layout = mma.make_fragment_C(cute.append(acc_shape, p.acc_stages)).layout

        bidx, bidy, bidz = cute.arch.block_idx()
        cm, cn = self.cluster_mn
        maps = sm100.tensor_maps(workspace, bidz * cm * cn + bidy * cm + bidx,
                                 storage.maps.data_ptr(), MAPS)
        groups = Groups(shapes, ptrs, strides, shapes.shape[0], self.cluster_tile)
        in_cluster = (bidx, bidy)
        pipeline.pipeline_init_wait(cluster_shape_mn=self.cluster_mn)

        if warp_idx == TMA_WARP:
            self._tma_warp(ring, groups, maps, atoms, views, masks, in_cluster)
        if warp_idx == MMA_WARP:
            self._mma_warp(ring, accs, groups, mma, sA, sB, sSFA, sSFB, smem, acc_layout,
                           storage.tmem_address.ptr)
        if warp_idx < MMA_WARP:
            self._epilogue_warps(accs, groups, maps, tma_c, sC, gC, acc_layout,
                                 storage.tmem_address.ptr, tidx, warp_idx, in_cluster)

    # -- warp 5: tensor maps A/B/SFA/SFB, TMA -----------------------------------------------
    @cute.jit
    def _tma_warp(self, ring, groups, maps, atoms, views, masks, in_cluster):
        """For each work item: patch the four load maps if the group changed, then load its
        k-tiles. The ring's state runs across items, so the next item's first k-tiles load while
        the MMA warp still works on this one."""
        which = (A, B, SFA, SFB)
        sm100.init_maps(maps, atoms, which, TMA_WARP)
        descs = tuple(sm100.map_pointer(maps, i) for i in which)
        prod = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.plan.ab_stages)
        work = cute.arch.block_idx()[2]
        stride = cute.arch.grid_dim()[2]
        group, first = find_group(groups, work, cutlass.Int32(0), cutlass.Int32(0))
        last = cutlass.Int32(-1)
        while group < groups.count:
            tile_m, tile_n, k_tiles = work_item(groups, work, group, first)
            if group != last:
                m, n, k = groups.shapes[(group, 0)], groups.shapes[(group, 1)], groups.shapes[(group, 2)]
                tensors = (group_tensor(groups, group, 0, self.data_dtype, 0, 2),
                           group_tensor(groups, group, 1, self.data_dtype, 1, 2),
                           sm100.sf_tensor(self._ptr(groups, group, 3), m, k, self.sf_vec),
                           sm100.sf_tensor(self._ptr(groups, group, 4), n, k, self.sf_vec))
                sm100.update_maps(maps, tensors, atoms, which, TMA_WARP)  # release
                sm100.acquire_maps(maps, which)  # ... before this warp's next TMA
                last = group
            m_tile = tile_m * self.cluster_mn[0] + in_cluster[0]
            n_tile = tile_n * self.cluster_mn[1] + in_cluster[1]
            coords = (m_tile, n_tile, m_tile, n_tile)
            for k in cutlass.range(k_tiles, unroll=1):
                ring.producer_acquire(prod)  # a free stage; arms its barrier with stage_bytes
                bar = ring.producer_get_barrier(prod)
                for i in cutlass.range_constexpr(4):
                    s_view, g_view = views[i]
                    cute.copy(atoms[i], g_view[(None, coords[i], k)], s_view[(None, prod.index)],
                              tma_bar_ptr=bar, mcast_mask=masks[i], tma_desc_ptr=descs[i])
                prod.advance()
            work = work + stride
            group, first = find_group(groups, work, group, first)
        ring.producer_tail(prod)  # the CTA must not exit while its stages are still in use

    def _ptr(self, groups, g, column):
        return cute.make_ptr(self.sf_dtype, groups.ptrs[(g, column)], cute.AddressSpace.gmem,
                             assumed_align=16)

    # -- warp 4: scale factors to TMEM, MMA ---------------------------------------------------
    @cute.jit
    def _mma_warp(self, ring, accs, groups, mma, sA, sB, sSFA, sSFB, smem, acc_layout, tmem_address):
        """Per work item: wait for a free accumulator stage, then per k-tile copy its scale
        factors to TMEM and issue its 4 MMAs; commit the accumulator when the item is done."""
        p = self.plan
        cute.arch.barrier(barrier_id=sm100.TMEM_BARRIER, number_of_threads=32 + EPILOGUE_THREADS)
        acc = cute.make_tensor(sm100.tmem_pointer(tmem_address), acc_layout)
        tCtSFA, tCtSFB = sm100.sf_tmem_tensors(mma, self.mma_tiler, self.sf_dtype, self.sf_vec,
                                               smem, acc)
        cp_a, src_a, dst_a = sm100.sf_copy_to_tmem(self.sf_dtype, sSFA, tCtSFA)
        cp_b, src_b, dst_b = sm100.sf_copy_to_tmem(self.sf_dtype, sSFB, tCtSFB)
        tCrA, tCrB = mma.make_fragment_A(sA), mma.make_fragment_B(sB)  # smem descriptors

        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, p.ab_stages)
        fill = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, p.acc_stages)
        work = cute.arch.block_idx()[2]
        stride = cute.arch.grid_dim()[2]
        group, first = find_group(groups, work, cutlass.Int32(0), cutlass.Int32(0))
        while group < groups.count:
            _, _, k_tiles = work_item(groups, work, group, first)
            accs.producer_acquire(fill)  # the epilogue has emptied this accumulator stage
            tAcc = acc[(None, None, None, fill.index)]
            mma.set(tcgen05.Field.ACCUMULATE, False)  # the item's first MMA overwrites
            for k in cutlass.range(k_tiles, unroll=1):
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
            work = work + stride
            group, first = find_group(groups, work, group, first)
        accs.producer_tail(fill)

    # -- warps 0-3: TMEM allocation, C's tensor map, epilogue -------------------------------
    @cute.jit
    def _epilogue_warps(self, accs, groups, maps, tma_c, sC, gC, acc_layout, tmem_address, tidx,
                        warp_idx, in_cluster):
        store_warp = EPILOGUE_WARPS[0]
        sm100.init_maps(maps, (tma_c,), (C,), store_warp)
        sm100.tmem_alloc(tmem_address, warp_idx, store_warp)
        cute.arch.barrier(barrier_id=sm100.TMEM_BARRIER, number_of_threads=32 + EPILOGUE_THREADS)
        tmem = sm100.tmem_pointer(tmem_address)
        acc = cute.make_tensor(tmem, acc_layout)
        epi = sm100.make_epilogue(tidx, acc, sC, tma_c, self.mma_tiler, self.c_dtype, EPI_TILE,
                                  self.plan.c_stages, EPILOGUE_THREADS, store_warp)
        c_desc = sm100.map_pointer(maps, C)
        drain = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.plan.acc_stages)
        work = cute.arch.block_idx()[2]
        stride = cute.arch.grid_dim()[2]
        group, first = find_group(groups, work, cutlass.Int32(0), cutlass.Int32(0))
        last = cutlass.Int32(-1)
        while group < groups.count:
            tile_m, tile_n, _ = work_item(groups, work, group, first)
            if group != last:
                c_g = group_tensor(groups, group, 2, self.c_dtype, 0, 1)
                sm100.update_maps(maps, (c_g,), (tma_c,), (C,), store_warp)
                if warp_idx == store_warp:
                    sm100.acquire_maps(maps, (C,))
                last = group
            accs.consumer_wait(drain)
            m_tile = tile_m * self.cluster_mn[0] + in_cluster[0]
            n_tile = tile_n * self.cluster_mn[1] + in_cluster[1]
            sm100.store_tile(epi, drain.index, gC[(None, None, m_tile, n_tile)], warp_idx, c_desc)
            with cute.arch.elect_one():
                accs.consumer_release(drain)  # every tcgen05.ld of this stage has completed
            drain.advance()
            work = work + stride
            group, first = find_group(groups, work, group, first)
        sm100.tmem_free(tmem, warp_idx, store_warp, EPILOGUE_THREADS)
        pipe = epi.pipe
        if warp_idx == store_warp:
            pipe.producer_tail()  # the last TMA stores must finish reading smem



# ------------------------------------------------------------------------------------------
# Python entry points
# ------------------------------------------------------------------------------------------
def compile_target(fmt: str = "nvfp4", tile=(128, 128), cluster=(1, 1), out_dtype: str = "float16",
                   max_active_clusters: int | None = None):
    """(jit_fn, fake_args) for ``cutecourse.inspect.compile_report(..., arch="sm_100a")``:
    symbolic sizes, strides and group count G."""
    import cuda.bindings.driver as cuda
    from cutlass.cute.runtime import make_fake_tensor

    cluster = tuple(cluster)
    size = cluster[0] * cluster[1] if cluster in CLUSTERS else 1
    kernel = BlackwellGroupedBlockScaledGemm(fmt, tuple(tile), cluster,
                                             max_active_clusters or B200_SMS // size, out_dtype)
    data = kernel.data_dtype
    per_16b = 128 // data.width  # elements in 16 bytes: TMA's row alignment (32 fp4, 16 fp8)
    m, n = cute.sym_int(symbol="M"), cute.sym_int(symbol="N")
    k = cute.sym_int(divisibility=per_16b, symbol="K")
    lda = cute.sym_int64(divisibility=per_16b, symbol="lda")
    ldb = cute.sym_int64(divisibility=per_16b, symbol="ldb")
    ldc = cute.sym_int64(divisibility=8, symbol="ldc")
    c_dtype = cutlass.Float16 if out_dtype == "float16" else cutlass.BFloat16
    a = make_fake_tensor(data, (m, k), (lda, 1), assumed_align=16)
    b = make_fake_tensor(data, (n, k), (ldb, 1), assumed_align=16)
    c = make_fake_tensor(c_dtype, (m, n), (ldc, 1), assumed_align=16)
    sfa = make_fake_tensor(cutlass.Uint8, (cute.sym_int(symbol="SFA"),), (1,), assumed_align=16)
    sfb = make_fake_tensor(cutlass.Uint8, (cute.sym_int(symbol="SFB"),), (1,), assumed_align=16)
    g = cute.sym_int(symbol="G")
    shapes = make_fake_tensor(cutlass.Int32, (g, 4), (4, 1), assumed_align=16)
    ptrs = make_fake_tensor(cutlass.Int64, (g, 5), (5, 1), assumed_align=8)
    strides = make_fake_tensor(cutlass.Int64, (g, 3), (3, 1), assumed_align=8)
    words = sm100.MAP_BYTES // 8
    workspace = make_fake_tensor(cutlass.Int64, (kernel.ctas, MAPS, words), (MAPS * words, words, 1),
                                 assumed_align=sm100.MAP_BYTES)
    return kernel, (a, b, c, sfa, sfb, shapes, ptrs, strides, workspace,
                    cutlass.Int32(kernel.max_active_clusters), cuda.CUstream(0))


@dataclass
class GroupOperands:
    """One group's bytes as the kernel reads them: data (M, K/2) packed e2m1 or (M, K) e4m3,
    scale factors interleaved (``block_scaling.to_interleaved``: 1-D, rows padded to 128 and
    K-blocks to 4), and the output C (M, N)."""

    a: object
    sfa: object
    b: object
    sfb: object
    c: object


class Metadata(NamedTuple):
    """What the kernel takes besides the templates (all on the groups' device)."""

    shapes: object  # (G, 4) int32: M, N, K, 1
    ptrs: object  # (G, 5) int64: A, B, C, SFA, SFB
    strides: object  # (G, 3) int64: row strides of A, B, C, in elements (fp4: 2 per byte)
    workspace: object  # (CTAs, 5, 16) int64: the CTAs' tensor maps
    work_bound: int  # total cluster tiles (models.group_scheduler.GroupedProblem.total)
    sizes: list  # [(M, N, K), ...]


def _name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def check_sizes(m: int, n: int, k: int, fmt, group: int = 0) -> None:
    """The size rules of one group, before any bytes are made."""
    f = _format(fmt)
    where = f"group {group}: "
    if m < 0 or n < 1 or k < 1:
        raise ShapeError(f"{where}(M, N, K) = {(m, n, k)}: need M >= 0, N >= 1, K >= 1",
                         "M = 0 marks an empty group; a K = 0 group has C = 0, zero it yourself")
    if k % f.block:
        raise ShapeError(f"{where}K = {k} is not a multiple of {f.name}'s scale block {f.block}",
                         f"pad K with zeros to {-(-k // f.block) * f.block}")
    per_16b = 32 if f.data == "e2m1" else 16
    if k % per_16b:
        raise AlignmentError(f"{where}K = {k}: a row of A is {k * (4 if f.data == 'e2m1' else 8) // 8}"
                             " bytes, and TMA needs a multiple of 16",
                             f"pad K with zeros to a multiple of {per_16b}")
    if n % 8:
        raise AlignmentError(f"{where}N = {n}: a row of C is {2 * n} bytes, and TMA needs a multiple "
                             "of 16", "pad N (B's rows) with zeros to a multiple of 8")


def check_groups(groups, fmt) -> list[tuple[int, int, int]]:
    """Check quantized groups (dtypes, shapes, SF sizes, alignment, devices); return the sizes."""
    import torch

    f = _format(fmt)
    if not groups:
        raise ShapeError("no groups", "pass at least one GroupOperands")
    sizes, devices = [], set()
    for g, op in enumerate(groups):
        for name in ("a", "b"):
            t = getattr(op, name)
            if t.dtype != f.data_dtype or t.dim() != 2:
                raise DTypeError(f"group {g}: {name} is {_name(t.dtype)} {tuple(t.shape)}; {f.name} "
                                 f"data is 2-D {_name(f.data_dtype)}",
                                 f"quantize it: block_scaling.quantize({name}, '{f.name}')")
            if t.stride(1) != 1 or t.data_ptr() % 16:
                raise AlignmentError(f"group {g}: {name} must be K-major (row-major) and 16-byte aligned",
                                     f"pass {name}.contiguous()")
        per_byte = 2 if f.data == "e2m1" else 1
        (m, ka), (n, kb) = op.a.shape, op.b.shape
        if ka != kb:
            raise ShapeError(f"group {g}: A is {tuple(op.a.shape)}, B {tuple(op.b.shape)}: K differs",
                             "B is (N, K), like a torch Linear weight")
        k = ka * per_byte
        check_sizes(m, n, k, f, g)
        for name, rows in (("sfa", m), ("sfb", n)):
            t = getattr(op, name)
            pr, pk = block_scaling.padded_sf_shape(rows, k // f.block)
            if t.dim() != 1 or t.numel() != pr * pk or t.element_size() != 1:
                raise ShapeError(f"group {g}: {name} must be the 1-D interleaved scale factors "
                                 f"({pr} x {pk} = {pr * pk} bytes), got {_name(t.dtype)} {tuple(t.shape)}",
                                 f"pass block_scaling.to_interleaved(sf) of the ({rows}, {k // f.block}) "
                                 "scales quantize returned")
        if tuple(op.c.shape) != (m, n) or not op.c.is_contiguous() or op.c.dtype not in (
                torch.float16, torch.bfloat16):
            raise ShapeError(f"group {g}: C must be a contiguous ({m}, {n}) float16/bfloat16 tensor",
                             "allocate it with torch.empty(M, N, dtype=torch.float16)")
        devices |= {t.device for t in (op.a, op.b, op.sfa, op.sfb, op.c)}
        sizes.append((m, n, k))
    if len({op.c.dtype for op in groups}) > 1:
        raise DTypeError("the groups' C dtypes differ", "give every C the same dtype")
    if len(devices) > 1:
        raise DeviceError(f"the groups' tensors are on {sorted(map(str, devices))}",
                          "put them all on one GPU")
    if not any(m for m, _, _ in sizes):
        raise ShapeError("every group is empty (all M = 0)", "skip the launch")
    return sizes


def quantize_groups(As, Bs, fmt: str = "nvfp4", out_dtype=None, device=None) -> list[GroupOperands]:
    """Quantize each (A_g (M, K), B_g (N, K)) with ``block_scaling.quantize`` (so the bytes are
    the ones ``grouped_reference`` uses), interleave the scales, allocate C; move to ``device``."""
    import torch

    f = _format(fmt)
    if len(As) != len(Bs) or not As:
        raise ShapeError(f"{len(As)} A's and {len(Bs)} B's: need the same number, at least one",
                         "pass one (A_g, B_g) pair per group")
    out = []
    for g, (a, b) in enumerate(zip(As, Bs)):
        if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
            raise ShapeError(f"group {g}: A {tuple(a.shape)} and B {tuple(b.shape)} are not (M, K), (N, K)",
                             "B is (N, K), like a torch Linear weight")
        check_sizes(a.shape[0], b.shape[0], a.shape[1], f, g)
        qa, sfa = block_scaling.quantize(a, f)
        qb, sfb = block_scaling.quantize(b, f)
        ops = [qa, block_scaling.to_interleaved(sfa), qb, block_scaling.to_interleaved(sfb),
               torch.empty((a.shape[0], b.shape[0]), dtype=out_dtype or torch.float16)]
        out.append(GroupOperands(*[t.to(device) if device is not None else t for t in ops]))
    return out


def host_metadata(groups, fmt: str = "nvfp4", tile_mn=(128, 128), cluster_mn=(1, 1),
                  ctas: int = B200_SMS) -> Metadata:
    """The device metadata of ``groups`` (a list of :class:`GroupOperands`), on their device.
    Works on CPU tensors too (the pointers are then host addresses): the tests check it there."""
    import torch

    from ..models.group_scheduler import GroupedProblem

    f = _format(fmt)
    sizes = check_groups(groups, f)
    per_byte = 2 if f.data == "e2m1" else 1
    device = groups[0].a.device
    shapes = torch.tensor([[m, n, k, 1] for m, n, k in sizes], dtype=torch.int32, device=device)
    ptrs = torch.tensor([[getattr(op, name).data_ptr() for name in PTR_COLUMNS] for op in groups],
                        dtype=torch.int64, device=device)
    strides = torch.tensor([[op.a.stride(0) * per_byte, op.b.stride(0) * per_byte, op.c.stride(0)]
                            for op in groups], dtype=torch.int64, device=device)
    workspace = torch.empty((ctas, MAPS, sm100.MAP_BYTES // 8), dtype=torch.int64, device=device)
    tile_k = MMA_K[f.data] * K_BLOCKS
    total = GroupedProblem(sizes, tuple(tile_mn), tuple(cluster_mn), tile_k).total
    return Metadata(shapes, ptrs, strides, workspace, total, sizes)


def launcher(groups, fmt: str = "nvfp4", tile=(128, 128), cluster=(1, 1),
             max_active_clusters: int | None = None):
    """Validated, compiled launch closure: ``fn()`` writes every group's C. Needs a B200."""
    import cuda.bindings.driver as cuda
    import torch
    from cutlass.cute.runtime import from_dlpack

    from ..modes import require_gpu
    from .gemm_launch import _COMPILED

    gpu = require_gpu("sm_100a")
    size = cluster[0] * cluster[1]
    clusters = max_active_clusters or gpu.sm_count // size
    kernel = BlackwellGroupedBlockScaledGemm(fmt, tuple(tile), tuple(cluster), clusters,
                                             _name(groups[0].c.dtype))
    meta = host_metadata(groups, fmt, tile, cluster, kernel.ctas)
    t = next(op for op, (m, _, _) in zip(groups, meta.sizes) if m)  # templates: a non-empty group
    args = [from_dlpack(x, assumed_align=16).mark_layout_dynamic(leading_dim=1) for x in (t.a, t.b, t.c)]
    args += [from_dlpack(x.view(torch.uint8), assumed_align=16).mark_layout_dynamic()
             for x in (t.sfa, t.sfb)]
    args += [from_dlpack(x, assumed_align=16).mark_layout_dynamic(leading_dim=1)
             for x in (meta.shapes, meta.ptrs, meta.strides)]
    args.append(from_dlpack(meta.workspace, assumed_align=sm100.MAP_BYTES))
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    bound = cutlass.Int32(meta.work_bound)
    key = (type(kernel).__qualname__, kernel.config)
    if key not in _COMPILED:
        _COMPILED[key] = cute.compile(kernel, *args, bound, stream)
    compiled = _COMPILED[key]

    def fn():
        compiled(*args, bound, stream)

    fn.metadata, fn.keep_alive = meta, groups
    return fn


def grouped_gemm_blockscaled(As, Bs, fmt: str = "nvfp4", out_dtype=None, **config):
    """``[dequant(A_g) @ dequant(B_g).T for g]`` on a B200: each pair is quantized to ``fmt``
    (``block_scaling.quantize``, on the CPU), multiplied by the block-scaled tensor cores in one
    launch, and returned as float16 (or ``out_dtype``) C_g. ``config``: ``launcher``'s keywords."""
    from ..modes import require_gpu

    require_gpu("sm_100a")  # before quantizing anything
    groups = quantize_groups(As, Bs, fmt, out_dtype, device="cuda")
    launcher(groups, fmt, **config)()
    return [op.c for op in groups]
