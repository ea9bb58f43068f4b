"""Issue 24: the FP8 kernel's epilogue under the next tile's first wgmmas.

``grouped_ceilings.py`` timed the course's FP8 kernel without its epilogue (``NoEpilogue``: no C
written): 1.11x faster at K 2048, 1.04x at K 7168. In the cooperative kernel both consumer
warpgroups store each tile, and the tensor cores idle meanwhile: the ring is full of the next
tile's k-tiles, but nobody issues them.

``OverlappedEpilogue`` changes the consumers' loop (``_consumer``), not the producer, the ring or
the promotion's arithmetic. Per tile:

1. issue the tile's first two k-tiles into ``part0`` and ``part1`` (a tile of one k-tile: its one);
2. run the *previous* tile's epilogue from ``acc``, while those wgmmas run;
3. rewrite C's tensor map if the group changed (``enter_tile``: after the previous tile's stores);
4. ``acc = 0`` and the mainloop from there: promote k-tile k, issue k + 2 into the part it freed.

The epilogue is then hidden as long as it takes less than two k-tiles of tensor work. The last
tile's epilogue runs after the loop. Every path has a fixed count of wgmma groups in flight
(tiles of one k-tile take their own branch), so ptxas can check each ``wait_group``.

**Measured, no gain** (H100, 2026-11-26, ``experiment_grouped_ceilings_overlap.json``): right on
ragged groups (3.4e-3), 0.89x and 0.885x the twin at K 2048 and 7168 against the course kernel's
0.90x and 0.88x (1x1: 0.89x, 0.84x). So the time ``NoEpilogue`` saves is not the tensor cores
idling through the stores: it is writing C at all (at K 2048, 470 MB of bf16 C against 126 MB of
operands read).

    python benchmarks/experiments/fp8_epilogue_overlap.py --cpu-check
    (timed and checked by grouped_ceilings.py, row "course fp8 2x1 epilogue overlap")
"""

from __future__ import annotations

import sys

import cutecourse  # noqa: F401  (fixes the DSL's architecture before cutlass loads)
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass.cute.nvgpu import warpgroup

from cutecourse.kernels import hopper_grouped_gemm_fp8 as fp8
from cutecourse.kernels import sm90, tensor_maps
from cutecourse.kernels.group_walk import C
from cutecourse.kernels.hopper_gemm_persistent import (CONSUMER_THREADS, EPILOGUE_STORE_WARP, PRODUCER_WARPGROUPS,
                                                       WORK_SLOTS)
from cutecourse.kernels.hopper_grouped_gemm_fp8 import _group_scales, _issue, _load_scales, _promote


class OverlappedEpilogue(fp8.BlockScaledGroupedHopperGemm):
    """The course's FP8 kernel, each tile's epilogue run under the next tile's first k-tiles."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.config = ("epilogue overlap", *self.config)

    @cute.jit
    def _consumer(self, ring, sched, mma, tma_c, gC, sC, ctid, warp_idx):
        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        epilogue = sm90.Epilogue(tma_c, sC, mma.tiled_mma, mma.acc, ctid, self.c_dtype,
                                 self.epi_tile, self.epi_stages, CONSUMER_THREADS,
                                 store_warp=EPILOGUE_STORE_WARP, barrier_threads=CONSUMER_THREADS)
        slot = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, WORK_SLOTS)
        c_map = tensor_maps.map_pointer(sched.maps, C)  # this CTA's C map: the same slot for every tile
        tidx, _, _ = cute.arch.thread_idx()
        thr = mma.tiled_mma.get_slice(tidx - 128 * PRODUCER_WARPGROUPS)
        rows = thr.partition_C(cute.make_identity_tensor(self.tile_mn))
        part0 = cute.make_rmem_tensor(mma.acc.shape, self.acc_dtype)
        part1 = cute.make_rmem_tensor(mma.acc.shape, self.acc_dtype)
        sa0 = cute.make_rmem_tensor(mma.acc.shape, self.acc_dtype)
        sa1 = cute.make_rmem_tensor(mma.acc.shape, self.acc_dtype)
        tiled_mma, tCrA, tCrB, acc = mma.tiled_mma, mma.tCrA, mma.tCrB, mma.acc
        prev_m, prev_n = cutlass.Int32(-1), cutlass.Int32(0)  # the tile whose epilogue is pending
        work = self.schedule.receive(sched, slot)
        slot.advance()
        while self.schedule.active(sched, work):
            tile = self.schedule.work_tile(sched, work)
            k_tiles = tile.k_end
            sfa, sfb, m_rows, n_blocks = _group_scales(sched, tile.group, k_tiles)
            scales = (sfa, sfb, rows, tile.tile_m * self.tile_mn[0], m_rows,
                      cutlass.min(tile.tile_n, n_blocks - 1))
            sb0 = _load_scales(scales, sa0, 0)
            tiled_mma = _issue(ring, read, tiled_mma, tCrA, tCrB, part0)
            read.advance()
            if k_tiles == 1:
                if prev_m >= 0:
                    sm90.store_tile(epilogue, gC[(None, None, prev_m, prev_n)], warp_idx, c_map)
                self.enter_tile(sched, epilogue, tile, warp_idx)
                acc.fill(0.0)
                warpgroup.wait_group(0)
                _promote(ring, release, acc, part0, sa0, sb0)
                release.advance()
            else:
                sb1 = _load_scales(scales, sa1, 1)
                tiled_mma = _issue(ring, read, tiled_mma, tCrA, tCrB, part1)
                read.advance()
                if prev_m >= 0:  # the previous tile's epilogue, under k-tiles 0 and 1
                    sm90.store_tile(epilogue, gC[(None, None, prev_m, prev_n)], warp_idx, c_map)
                self.enter_tile(sched, epilogue, tile, warp_idx)
                acc.fill(0.0)
                for pair in cutlass.range((k_tiles - 2) // 2, unroll=1):
                    k = 2 * pair
                    warpgroup.wait_group(1)  # k-tile k is done, k + 1 still running
                    _promote(ring, release, acc, part0, sa0, sb0)
                    release.advance()
                    sb0 = _load_scales(scales, sa0, k + 2)
                    tiled_mma = _issue(ring, read, tiled_mma, tCrA, tCrB, part0)
                    read.advance()
                    warpgroup.wait_group(1)
                    _promote(ring, release, acc, part1, sa1, sb1)
                    release.advance()
                    sb1 = _load_scales(scales, sa1, k + 3)
                    tiled_mma = _issue(ring, read, tiled_mma, tCrA, tCrB, part1)
                    read.advance()
                if k_tiles % 2 == 1:  # three k-tiles left: K-3 in part0, K-2 in part1, then K-1
                    warpgroup.wait_group(1)
                    _promote(ring, release, acc, part0, sa0, sb0)
                    release.advance()
                    sb0 = _load_scales(scales, sa0, k_tiles - 1)
                    tiled_mma = _issue(ring, read, tiled_mma, tCrA, tCrB, part0)
                    read.advance()
                    warpgroup.wait_group(1)
                    _promote(ring, release, acc, part1, sa1, sb1)
                    release.advance()
                    warpgroup.wait_group(0)
                    _promote(ring, release, acc, part0, sa0, sb0)
                    release.advance()
                else:  # two left
                    warpgroup.wait_group(1)
                    _promote(ring, release, acc, part0, sa0, sb0)
                    release.advance()
                    warpgroup.wait_group(0)
                    _promote(ring, release, acc, part1, sa1, sb1)
                    release.advance()
            prev_m, prev_n = tile.tile_m, tile.tile_n
            work = self.schedule.receive(sched, slot, work, tile)
            slot.advance()
        if prev_m >= 0:
            sm90.store_tile(epilogue, gC[(None, None, prev_m, prev_n)], warp_idx, c_map)
        sm90.finish_stores(epilogue, warp_idx)


def target(cluster=(2, 1)):
    """(kernel, fake_args) for ``cutecourse.inspect.compile_report("fp8_epilogue_overlap:target")``."""
    from fp8_variants import fake_target

    return fake_target(OverlappedEpilogue((128, 128), tuple(cluster), 132))


def cpu_check():
    """Compile for sm_90a (no GPU) and print what decides what it times (``fp8_variants.describe``)."""
    from fp8_variants import print_report

    return print_report("fp8_epilogue_overlap:target", "epilogue overlap")


if __name__ == "__main__":
    if "--cpu-check" in sys.argv:
        cpu_check()
