"""The one-part FP8 grouped GEMM with its block scales in shared memory: DeepGEMM's scale path.

``hopper_grouped_gemm_fp8_onepart`` loads each k-tile's four scales (sa of a thread's two rows,
sb of the tile's two blocks of B) from global memory, a k-tile ahead. Nsight Compute found what
that still costs (``docs/grouped_measured.md``, "Where the rest goes"): the load of B's scale is
copied into a uniform register (``R2UR``) one *batch* later, not one k-tile later, and 5% of the
samples wait there. DeepGEMM keeps no scale load on the consumers' path; this variant does the same:

* **A's scales ride with the stage.** Each ring stage gets a 128-float slot, and the producer
  loads k-tile k's column of A's scales (128 rows, one k-block: 512 bytes) into it by TMA, with
  the stage's A and B tiles. The stage's full barrier counts those 512 bytes too (one more
  ``mbarrier.expect_tx`` after ``producer_acquire``), so when a consumer sees the stage full its
  scales are there: it reads them with two ``ld.shared``. A TMA box needs 16-byte aligned
  addresses and strides, so the host hands sa as (K/128, M) with M padded to a multiple of 4,
  "MN-major" (DeepGEMM's API asks for the same layout): ``TmaScaledListGroups``, a copy made
  when the launch is made, outside the timed kernel (the packed form, ``TmaScaledPackedGroups``,
  also starts each group's rows at a multiple of 4, on the GPU). Like A's, B's and C's, the map
  is the CTA's own, patched per group (``tensor_maps``: a fourth map, ``MAPS = 4``).
* **B's scales once per tile.** A tile needs sb of at most two blocks of B for each of its
  k-tiles: 8 bytes per k-tile. At the tile's start the 256 consumer threads copy them from
  global memory into shared memory (one value or two each), meet at a named barrier, and every
  k-tile reads its two from shared memory. The buffer has room for ``MAX_K_BLOCKS`` k-tiles
  (K up to 32768); the host refuses a longer K.
* **The room comes from the ring.** 4 stages of 128x192 (40 KiB + 512 B) leave what the scales
  need: the plan (``plan``) counts them and takes the largest ring that still fits; 128x256 keeps
  4 stages only with 2 C buffers (``epi_stages=2``), else 3.

The mainloop is the one-part kernel's (turns, one fresh part per batch, ``promote``), with the
scales read from shared memory at the stage's top. The producer's k-tile adds the scale copy.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass.cute.nvgpu import cpasync, warpgroup

from ..errors import ShapeError
from ..models.gemm_plan import SMEM_CAPACITY, plan_persistent
from . import sm90, tensor_maps
from .barriers import Barrier
from .group_forms import ScaledListGroups, ScaledPackedGroups
from .group_walk import SFA, GroupArgs, M, operand_pointer
from .grouped_launch import GroupedEntry
from .hopper_gemm_persistent import CONSUMER_THREADS, PRODUCER_WARP, PRODUCER_WARPGROUPS, WORK_SLOTS
from .hopper_grouped_gemm_fp8 import BLOCK, group_scales, refuse_turn
from .hopper_grouped_gemm_fp8_onepart import OnePartBlockScaledGroupedHopperGemm, _issue_batch

#: k-tiles of B's scales the per-tile buffer holds (2 blocks x 4 bytes each: 2 KiB): K <= 32768.
MAX_K_BLOCKS = 256
#: A's scales per stage: one fp32 per row of the 128-row tile.
SFA_STAGE_BYTES = 128 * 4
#: TMA's rule: global addresses and strides in multiples of 16 bytes = 4 fp32.
SCALE_ALIGN = 4
#: The SFA template's extents (the tensor map the host encodes; every CTA patches its own copy
#: per group, so only its dtype, box and rank matter, and the extents must be large enough that
#: CuTe's coordinate tensor keeps a stride for both modes).
TEMPLATE_ROWS, TEMPLATE_K_BLOCKS = 1 << 24, 1 << 12


class ScaleArgs(NamedTuple):
    """The group metadata (``GroupArgs``' fields) and the host-made TMA atom of A's scales with
    its coordinate tensor: the kernel's scheduler argument."""

    shapes: object
    ptrs: object
    strides: object
    trace: object
    map_workspace: object
    tma_sfa: object
    mSFA: object


class SmemScalesGroupedHopperGemm(OnePartBlockScaledGroupedHopperGemm):
    """The one-part FP8 grouped GEMM with A's scales loaded by TMA into each ring stage and B's
    copied into shared memory per tile (module docstring). Its groups come through
    ``TmaScaledListGroups`` or ``TmaScaledPackedGroups`` (A's scales 16-byte aligned, M-major:
    ``launcher_fp8``, ``grouped_gemm_fp8``, ``grouped_mm_fp8`` below)."""

    TILE_MN = (128, 192)  # DeepGEMM's tile: 4 stages of 40.5 KiB
    MAPS = 4  # A, B, C and A's scales (group_walk.SFA = 3)

    def plan(self, in_dtype: str, out_dtype: str):
        """The persistent plan with the scales' shared memory taken off first: B's per-tile buffer,
        and 512 bytes per stage for A's (the most stages that fit, or the ``stages`` asked for)."""
        fixed = SMEM_CAPACITY - 2 * MAX_K_BLOCKS * 4 - 128  # the SFB buffer, alignment

        def fit(stages):
            return plan_persistent(self.tile_mn, in_dtype, out_dtype, capacity=fixed - stages * SFA_STAGE_BYTES,
                                   stages=stages, epi_tile=self.epi_tile, c_buffer_sets=self.C_BUFFER_SETS,
                                   tiles=self.TILES, epi_stages=self.epi_stages, in_dtypes=self.IN_DTYPES)
        if self.requested_stages is not None:
            return fit(self.requested_stages)
        most = plan_persistent(self.tile_mn, in_dtype, out_dtype, capacity=fixed, epi_tile=self.epi_tile,
                               tiles=self.TILES, epi_stages=self.epi_stages, in_dtypes=self.IN_DTYPES).stages
        for stages in range(most, 2, -1):  # the per-stage scale bytes may cost the last stage
            try:
                return fit(stages)
            except ShapeError:
                continue
        return fit(2)  # says what does not fit

    def smem_fields(self) -> dict:
        """The maps, A's scales per stage (a TMA destination: 128-byte aligned), B's per tile."""
        MemRange, Align = cute.struct.MemRange, cute.struct.Align
        return {**super().smem_fields(), "sfa": Align[MemRange[cutlass.Float32, 128 * self.stages], 128],
                "sfb": Align[MemRange[cutlass.Float32, 2 * MAX_K_BLOCKS], 16]}

    # -- host side ---------------------------------------------------------------------------
    @cute.jit
    def __call__(self, a: cute.Tensor, b: cute.Tensor, c: cute.Tensor, shapes: cute.Tensor,
                 ptrs: cute.Tensor, strides: cute.Tensor, map_workspace: cute.Tensor, trace: cute.Tensor,
                 work_bound: cutlass.Int32, stream, *epilogue_args):
        """The grouped kernel's host side, plus the TMA atom of A's scales: a (128 rows x 1 k-block)
        box of an fp32 (M, K/128) tensor with unit stride along M. Its template points at the
        workspace (any 16-byte aligned address: each CTA rewrites the map per group)."""
        template = cute.make_tensor(cute.recast_ptr(map_workspace.iterator, dtype=cutlass.Float32),
                                    cute.make_layout((TEMPLATE_ROWS, TEMPLATE_K_BLOCKS), stride=(1, TEMPLATE_ROWS)))
        tma_sfa, mSFA = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), template,
                                                    cute.make_layout((128, 1)), (128, 1))
        cm, cn = self.cluster_mn
        self.launch(a, b, c, ScaleArgs(shapes, ptrs, strides, trace, map_workspace, tma_sfa, mSFA),
                    cutlass.min(work_bound, self.sms // (cm * cn)), stream, epilogue_args)

    # -- device side ---------------------------------------------------------------------------
    def make_scheduler(self, scheduler_args: ScaleArgs, setup):
        """The group walk, and the scales' shared memory and TMA views, kept on the kernel for the
        producer's loop and the mainloop (values of this kernel's trace): the SFA ring (128,
        stages), B's buffer (k-tiles, 2 blocks)."""
        scheduler = super(SmemScalesGroupedHopperGemm, self).make_scheduler(GroupArgs(*scheduler_args[:5]), setup)
        tensor_maps.init_maps(scheduler.maps, (scheduler_args.tma_sfa,), (SFA,), PRODUCER_WARP)
        sSFA = setup.storage.sfa.get_tensor(cute.make_layout((128, 1, self.stages)))
        self.sSFB = setup.storage.sfb.get_tensor(cute.make_layout((MAX_K_BLOCKS, 2), stride=(2, 1)))
        self.sSFA = cute.group_modes(sSFA, 0, 2)  # ((128, 1), stages)
        gSFA = cute.local_tile(scheduler_args.mSFA, (128, 1), (None, None))  # (128, 1, tiles_m, k-blocks)
        self.tSsS, self.tSgS = cpasync.tma_partition(scheduler_args.tma_sfa, 0, cute.make_layout(1), self.sSFA,
                                                     cute.group_modes(gSFA, 0, 2))
        self.tma_sfa = scheduler_args.tma_sfa
        return scheduler

    @cute.jit
    def tile_loads(self, groups, loads, tile):
        """On a new group the producer warp also points its map of A's scales at the group's:
        (M_g, K_g/128) with the k-block stride the host gave (a multiple of 4)."""
        if tile.new_group:
            sfa_g = cute.make_tensor(operand_pointer(groups, tile.group, SFA, cutlass.Float32),
                                     cute.make_layout((groups.shapes[(tile.group, M)], tile.k_end),
                                                      stride=(1, groups.strides[(tile.group, SFA)])))
            tensor_maps.update_maps(groups.maps, (sfa_g,), (self.tma_sfa,), (SFA,), PRODUCER_WARP)
            tensor_maps.acquire_maps(groups.maps, (SFA,))
        return super(SmemScalesGroupedHopperGemm, self).tile_loads(groups, loads, tile)

    @cute.jit
    def _producer(self, ring, scheduler, loads):
        """The persistent producer's loop (``PersistentHopperGemm._producer``) with one more copy per
        k-tile: A's scales into the stage's slot, counted on the stage's full barrier."""
        prod = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        slot = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, WORK_SLOTS)
        scheduler = scheduler.start()
        while scheduler.active():
            tile = scheduler.work_tile()
            scheduler.publish(slot, tile)
            slot.advance()
            tile_loads = self.tile_loads(scheduler, loads, tile)
            tSgS = self.tSgS[(None, tile.tile_m, None)]
            for k in cutlass.range(tile.k_begin, tile.k_end, unroll=1):
                ring.producer_acquire(prod)  # arms the barrier with A's and B's bytes ...
                bar = ring.producer_get_barrier(prod)
                with cute.arch.elect_one():  # ... and the scales' (before any of the stage's copies)
                    cute.arch.mbarrier_expect_tx(bar, SFA_STAGE_BYTES)
                cute.copy(self.tma_sfa, tSgS[(None, k)], self.tSsS[(None, prod.index)], tma_bar_ptr=bar,
                          tma_desc_ptr=tensor_maps.map_pointer(scheduler.maps, SFA))
                sm90.issue_tma(ring, tile_loads, prod, k)
                prod.advance()
            scheduler.advance(tile)
        scheduler.publish(slot)
        scheduler.finish()
        ring.producer_tail(prod)

    @cute.jit
    def mainloop(self, ring, mma, read, release, groups, tile, turn=None):
        """The one-part mainloop (turns, a fresh part per batch, ``promote``) with the scales read
        from shared memory: B's copied in once per tile, A's from the stage's slot once the stage
        is full, before the stage is released."""
        refuse_turn(self, turn)
        _, sfb, _, n_blocks = group_scales(groups, tile.group, tile.k_end)
        tidx, _, _ = cute.arch.thread_idx()
        ctid = tidx - 128 * PRODUCER_WARPGROUPS
        wg = cute.arch.make_warp_uniform(tidx // 128 - PRODUCER_WARPGROUPS)
        part_mn = (self.tile_mn[0], self.part_n)
        rows = mma.tiled_mma.get_slice(ctid).partition_C(cute.make_identity_tensor(part_mn))
        at0 = mma.tiled_mma.get_slice(0).partition_C(cute.make_identity_tensor(part_mn))
        hi_i = next(i for i in range(cute.size(at0)) if at0[i][0] != at0[0][0])  # the second row's register
        lo_row, hi_row = rows[0][0], rows[hi_i][0]
        n0 = tile.tile_n * self.tile_mn[1]
        first = cutlass.min(n0 // BLOCK, n_blocks - 1)  # (a CTA past N reads the last block)
        second = cutlass.min(n0 // BLOCK + 1, n_blocks - 1)
        sSFA, sSFB = self.sSFA, self.sSFB
        # B's scales of the tile: every consumer thread is past the last tile's mainloop (so no one
        # still reads the buffer), the copy, then every copy is visible
        cute.arch.barrier(barrier_id=Barrier.EPILOGUE, number_of_threads=CONSUMER_THREADS)
        for kk in cutlass.range(ctid, tile.k_end, CONSUMER_THREADS, unroll=1):
            sSFB[(kk, 0)] = sfb[(first, kk)]
            sSFB[(kk, 1)] = sfb[(second, kk)]
        cute.arch.barrier(barrier_id=Barrier.EPILOGUE, number_of_threads=CONSUMER_THREADS)
        part = cute.make_rmem_tensor(rows.shape, self.acc_dtype)
        tiled_mma, tCrA, tCrB, acc = mma.tiled_mma, mma.tCrA, mma.tCrB, mma.acc
        batches = cute.size(tCrB, mode=[1])
        acc.fill(0.0)
        self.first_turn(wg)
        for k in cutlass.range(tile.k_end, unroll=1):
            ring.consumer_wait(read)
            # read before the stage is released: the producer refills the slot after that
            sab = (sSFA[((lo_row, 0), read.index)], sSFA[((hi_row, 0), read.index)], sSFB[(k, 0)], sSFB[(k, 1)])
            for h in cutlass.range_constexpr(batches):
                self.wait_turn(wg)
                tiled_mma = _issue_batch(tiled_mma, tCrA, tCrB, read.index, h, batches, part)
                self.after_issue(wg, k + 1 < tile.k_end or h + 1 < batches)
                warpgroup.wait_group(0)
                self.after_wait(wg, k + 1 < tile.k_end or h + 1 < batches)
                if cutlass.const_expr(h == batches - 1):
                    ring.consumer_release(release)
                acc_h = acc[(None, 0, h)]
                if cutlass.const_expr(self.tile_mn[1] % BLOCK == 0):
                    self.promote(acc_h, part, sab, at0, h * part_mn[1])
                elif n0 % BLOCK == 0:
                    self.promote(acc_h, part, sab, at0, 0)
                else:
                    self.promote(acc_h, part, sab, at0, self.tile_mn[1] % BLOCK)
            read.advance()
            release.advance()
        return read, release


# -- host side: the groups in the layout the TMA of A's scales reads ---------------------------
def tma_scales(sa):
    """sa (M, K/128) as the scales' TMA reads it: a (K/128, M') buffer, M' = M rounded up to a
    multiple of 4 (16-byte rows), seen as (M, K/128) with strides (1, M'). A copy; DeepGEMM's
    API takes A's scales in the same layout."""
    import torch

    m, kb = sa.shape
    buf = torch.zeros((kb, max(SCALE_ALIGN, -(-m // SCALE_ALIGN) * SCALE_ALIGN)), dtype=sa.dtype, device=sa.device)
    buf[:, :m] = sa.t()
    return buf.t()[:m]


class TmaScaledListGroups(ScaledListGroups):
    """``ScaledListGroups`` for ``SmemScalesGroupedHopperGemm``: A's scales copied into the
    layout its TMA reads (``tma_scales``, once, when the launch is made), K within the per-tile
    buffer of B's scales."""

    def check_scales(self):
        super(TmaScaledListGroups, self).check_scales()
        for g, a in enumerate(self.As):
            if math.ceil(a.shape[1] / BLOCK) > MAX_K_BLOCKS:
                raise ShapeError(f"group {g}: K = {a.shape[1]} has {math.ceil(a.shape[1] / BLOCK)} blocks of "
                                 f"{BLOCK}; the kernel keeps B's scales of a tile for at most {MAX_K_BLOCKS}",
                                 "split K into parts and add the products, or use grouped.launcher_fp8")

    def scale_columns(self) -> list:
        """SFA: each sa in ``tma_scales``' layout and its k-block stride; SFB as given."""
        sas = [tma_scales(sa) for sa in self.scales[0]]
        return [(sas, [sa.stride(1) for sa in sas]), (self.scales[1], [sb.stride(0) for sb in self.scales[1]])]


def packed_tma_scales(sa, offs):
    """The packed form's sa (rows, K/128) as the scales' TMA reads it, without a host sync: a
    (K/128, ld) buffer in which group g's rows start at ``starts[g]``, a multiple of 4 (each
    group's block rounded up to 16 bytes), ld a multiple of 4. Returns (buffer, starts). Rows
    past ``offs[-1]`` belong to no group: they go to the buffer's last column, which none reads."""
    import torch

    ends = offs.to(torch.int64)
    firsts = torch.cat([ends.new_zeros(1), ends[:-1]])
    padded = (ends - firsts + SCALE_ALIGN - 1) // SCALE_ALIGN * SCALE_ALIGN
    starts = torch.cumsum(padded, 0) - padded
    rows, groups = sa.shape[0], ends.shape[0]
    ld = -(-(rows + (SCALE_ALIGN - 1) * groups + 1) // SCALE_ALIGN) * SCALE_ALIGN  # + the spare column
    buf = torch.zeros((sa.shape[1], ld), dtype=sa.dtype, device=sa.device)
    r = torch.arange(rows, device=sa.device)
    g = torch.searchsorted(ends, r, right=True)  # each row's group (groups: past the last)
    gc = g.clamp(max=groups - 1)
    buf[:, torch.where(g < groups, starts[gc] + r - firsts[gc], ld - 1)] = sa.t()
    return buf, starts


class TmaScaledPackedGroups(ScaledPackedGroups):
    """``ScaledPackedGroups`` for ``SmemScalesGroupedHopperGemm``: the metadata's SFA column points
    into ``packed_tma_scales``' buffer (a copy made on the GPU when the launch is made)."""

    def check_scales(self):
        super(TmaScaledPackedGroups, self).check_scales()
        blocks = self.scales[0].shape[1]
        if blocks > MAX_K_BLOCKS:
            raise ShapeError(f"K = {self.a.shape[1]} has {blocks} blocks of {BLOCK}; the kernel keeps B's "
                             f"scales of a tile for at most {MAX_K_BLOCKS}",
                             "split K into parts and add the products, or use grouped.grouped_mm_fp8")

    def metadata(self, kernel):
        meta, templates, keep = super(TmaScaledPackedGroups, self).metadata(kernel)
        buf, starts = packed_tma_scales(self.scales[0], self.offs)
        ptrs, strides = meta.ptrs.clone(), meta.strides.clone()
        ptrs[:, SFA] = buf.data_ptr() + starts * buf.element_size()
        strides[:, SFA] = buf.stride(0)
        return meta._replace(ptrs=ptrs, strides=strides), templates, (*keep, buf)


def _choose(groups):
    from .grouped import fp8_cluster  # (grouped.py imports the kernels)

    return {"cluster": fp8_cluster(*groups.rows())}


#: The entry (``grouped_launch.GroupedEntry``): the FP8 entry's defaults, this kernel's class.
ENTRY = GroupedEntry(SmemScalesGroupedHopperGemm, columns=5, out_dtype="bfloat16", choose=_choose)
compile_target = ENTRY.compile_target


def launcher_fp8(As, Bs, SAs, SBs, Cs, epilogue_args=(), **config):
    """``grouped.launcher_fp8`` for this kernel: ``fn()`` writes group g's scaled product into
    ``Cs[g]``; ``config``: the constructor's keywords (``tile``, ``cluster``, ``stages``,
    ``epi_stages`` ...)."""
    return ENTRY.launcher(TmaScaledListGroups(As, Bs, SAs, SBs, Cs), epilogue_args, **config)


def grouped_gemm_fp8(As, Bs, SAs, SBs, out_dtype=None, epilogue_args=(), **config):
    """``grouped.grouped_gemm_fp8`` for this kernel: returns the list of C_g (bf16 by default)."""
    return ENTRY.gemm(TmaScaledListGroups(As, Bs, SAs, SBs), out_dtype, epilogue_args, **config)


def grouped_mm_fp8(a, b, sa, sb, offs, out_dtype=None, epilogue_args=(), **config):
    """``grouped.grouped_mm_fp8`` (the packed MoE form) for this kernel."""
    return ENTRY.gemm(TmaScaledPackedGroups(a, b, sa, sb, offs), out_dtype, epilogue_args, **config)
