"""Issue 24: the course's two-part FP8 promotion with the consumer warpgroups taking turns to issue.

Timed and checked by ``grouped_ceilings.py``, row "course fp8 2x1 turns" (on ragged groups too:
3.4e-3 of the largest value, ``experiment_grouped_ceilings_smoke.json``).
**Measured, lost** (H100, 2026-11-26, ``experiment_grouped_ceilings_turns.json``): 0.82-0.87x the
rowwise twin against the course kernel's 0.87-0.88x in the same run.
"""

from __future__ import annotations

import cutecourse  # noqa: F401  (fixes the DSL's architecture before cutlass loads)
import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import warpgroup

from cutecourse.kernels import hopper_grouped_gemm_fp8 as fp8
from cutecourse.kernels import hopper_grouped_gemm_fp8_onepart as onepart
from cutecourse.kernels.hopper_gemm_persistent import PRODUCER_WARPGROUPS


class TwoPartsInTurn(fp8.BlockScaledGroupedHopperGemm):
    """The course kernel's promotion (two parts), the consumer warpgroups taking turns to issue
    (``hopper_grouped_gemm_fp8_onepart``'s named barriers, turn passed once issued). If the
    tensor cores run the batches in the order issued, warpgroup 1's batch k ends half a k-tile
    after warpgroup 0's, so the two warpgroups promote at different times instead of sharing
    the SM's issue slots and register file for their FFMAs at once. The loop is the course's
    ``mainloop`` with ``_issue`` wrapped in the turn."""

    @cute.jit
    def mainloop(self, ring, mma, read, release, groups, tile):
        sfa, sfb, m_rows, n_blocks = fp8._group_scales(groups, tile.group, tile.k_end)
        tidx, _, _ = cute.arch.thread_idx()
        wg = cute.arch.make_warp_uniform(tidx // 128 - PRODUCER_WARPGROUPS)
        thr = mma.tiled_mma.get_slice(tidx - 128 * PRODUCER_WARPGROUPS)
        rows = thr.partition_C(cute.make_identity_tensor(self.tile_mn))
        scales = (sfa, sfb, rows, tile.tile_m * self.tile_mn[0], m_rows,
                  cutlass.min(tile.tile_n, n_blocks - 1))
        part0 = cute.make_rmem_tensor(mma.acc.shape, self.acc_dtype)
        part1 = cute.make_rmem_tensor(mma.acc.shape, self.acc_dtype)
        sa0 = cute.make_rmem_tensor(mma.acc.shape, self.acc_dtype)
        sa1 = cute.make_rmem_tensor(mma.acc.shape, self.acc_dtype)
        tiled_mma, tCrA, tCrB, acc, k_tiles = mma.tiled_mma, mma.tCrA, mma.tCrB, mma.acc, tile.k_end
        acc.fill(0.0)
        if wg == 1:  # warpgroup 0 issues first
            cute.arch.barrier_arrive(barrier_id=onepart.ORDER_BARRIER, number_of_threads=256)
        sb0 = fp8._load_scales(scales, sa0, 0)
        sb1 = cutlass.Float32(0.0)
        tiled_mma = _issue_in_turn(ring, read, tiled_mma, tCrA, tCrB, part0, wg, k_tiles > 1)
        read.advance()
        for pair in cutlass.range((k_tiles - 1) // 2, unroll=1):
            k = 2 * pair
            sb1 = fp8._load_scales(scales, sa1, k + 1)
            tiled_mma = _issue_in_turn(ring, read, tiled_mma, tCrA, tCrB, part1, wg, k + 2 < k_tiles)
            read.advance()
            warpgroup.wait_group(1)
            fp8._promote(ring, release, acc, part0, sa0, sb0)
            release.advance()
            sb0 = fp8._load_scales(scales, sa0, k + 2)
            tiled_mma = _issue_in_turn(ring, read, tiled_mma, tCrA, tCrB, part0, wg, k + 3 < k_tiles)
            read.advance()
            warpgroup.wait_group(1)
            fp8._promote(ring, release, acc, part1, sa1, sb1)
            release.advance()
        if k_tiles % 2 == 0:
            sb1 = fp8._load_scales(scales, sa1, k_tiles - 1)
            tiled_mma = _issue_in_turn(ring, read, tiled_mma, tCrA, tCrB, part1, wg, False)
            read.advance()
            warpgroup.wait_group(1)
            fp8._promote(ring, release, acc, part0, sa0, sb0)
            release.advance()
            warpgroup.wait_group(0)
            fp8._promote(ring, release, acc, part1, sa1, sb1)
            release.advance()
        else:
            warpgroup.wait_group(0)
            fp8._promote(ring, release, acc, part0, sa0, sb0)
            release.advance()
        return read, release


@cute.jit
def _issue_in_turn(ring, read, tiled_mma, tCrA, tCrB, part, wg, more):
    """``_issue`` between waiting for this warpgroup's turn and passing it on (``more``: this
    warpgroup issues again in this tile)."""
    ring.consumer_wait(read)  # before the turn: the other warpgroup must not wait for our stage
    cute.arch.barrier(barrier_id=onepart.ORDER_BARRIER + wg, number_of_threads=256)
    tiled_mma = fp8._issue(ring, read, tiled_mma, tCrA, tCrB, part)
    onepart._pass_turn(wg, more)
    return tiled_mma
