"""The ping-pong schedule: the persistent, warp-specialized GEMM with one tile per warpgroup.

``PingPongHopperGemm`` is ``hopper_gemm_persistent.PersistentHopperGemm`` (same producer warp,
ring, tile scheduler, setmaxnreg split) with one change in the consumers. In the *cooperative*
kernel both consumer warpgroups work on one 128-row tile, so both run its epilogue at the same
time and the tensor cores idle meanwhile. Here each consumer warpgroup owns a *whole* tile, and
the two alternate:

* the CTA's work items are dealt out in turn: warpgroup 0 takes items 0, 2, 4 ..., warpgroup 1
  items 1, 3, 5 ...; both follow the scheduler through every item (``scheduler.advance``) and
  skip the other's; the producer loads them all, in order, into the one ring, so each warpgroup
  reads its k-tiles at ring positions ``count``, skipping the other's k-tiles;
* an *ordered barrier* (``barriers.MmaTurn``) hands the tensor cores over: a warpgroup waits for
  its turn before its first MMA and passes the turn on after its last one is issued (the
  ``mainloop`` hook, given the turn). So while warpgroup 1 multiplies its tile, warpgroup 0 runs its
  epilogue: the epilogue is hidden, not exposed once per tile;
* each warpgroup has its own C buffers in smem and its own TMA-store pipeline and barrier (the
  ``make_epilogue`` hook, for MMA unit w).

A warpgroup holds a whole tile's fp32 accumulators, so the tile is 64x256 (128 registers per
thread, as in the cooperative kernel), not 128x256 (256: more than a thread can have). A 64x256
tile loads (64 + 256) x 64 elements per k-tile for 64 x 256 x 64 MMAs: 1.67x the bytes per flop
of a 128x256 tile. Which effect wins is a measurement (benchmarks/schedules.py). The other tile
with 128 accumulator registers, 128x128 (CUTLASS's usual ping-pong tile: two m64n128 wgmmas per
k-step, 1.33x the bytes per flop, 6 stages of 32 KiB), is an option (``tile_mn=(128, 128)``): as
fast as the cooperative kernel at the base clock, but 0.75-0.89x torch.matmul at the 700 W cap:
it moves 1.55x the cooperative kernel's L2 traffic, and at a high clock it waits for L2
(docs/gpu_verification.md).

The ring is deeper than the cooperative kernel's. A 40 KiB k-tile feeds half the MMAs of a 48 KiB
one, so the ring empties twice as fast, and 4 stages cover only half the load latency that the
cooperative kernel's 4 cover. So each warpgroup gets 2 C buffers (``EPI_STAGES``: one TMA store in
flight while it fills the other), not 4, and the 16 KiB saved makes a fifth stage: measured at
the 700 W cap, 1-8% faster on every shape with more than one wave of tiles, and ahead of the
cooperative kernel where the epilogue matters (docs/hopper_gemm.md, "Ping-pong schedule"). ``epi_stages=4`` gives the
4-stage ring back.

The ordered barrier is two named hardware barriers (``Barrier.MMA_TURN`` + w for warpgroup w), each
completed by 256 threads: the 128 of the waiting warpgroup (``bar.sync``) and the 128 of the
other (``bar.arrive``). Warpgroup 1 passes warpgroup 0 its first turn at the start; every tile
passes the turn on (whether the other warpgroup has a next tile is not known yet with a dynamic
scheduler), and the warpgroup that would own the item after the CTA's last takes that last turn
before it exits, so every arrive meets a wait.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline

from . import gemm_launch, sm90
from .barriers import Barrier, MmaTurn
from .hopper_gemm_persistent import PRODUCER_WARPGROUPS, WORK_SLOTS, PersistentHopperGemm

#: A warpgroup's tile: 64 rows (one wgmma's M) by 256 (the default), or 128x128 (module docstring).
TILES = ((64, 256), (128, 128))
EPI_TILE = (64, 32)
#: C buffers per warpgroup: 2, not the cooperative kernel's 4. The 16 KiB this frees buys the ring
#: a fifth stage (module docstring); with 4 buffers it has 4 stages.
EPI_STAGES = 2
#: Band height of the tile order, in 64-row tiles: 32, the same 2048 rows as the cooperative
#: kernel's 16 bands of 128.
GROUP_M = 32
#: Named barriers (``barriers.Barrier``): EPILOGUE + w is warpgroup w's epilogue, MMA_TURN + w its turn.
ORDER_BARRIER = Barrier.MMA_TURN


class PingPongHopperGemm(PersistentHopperGemm):
    """C = A @ B.T, persistent, warp-specialized, ping-pong (module docstring): the persistent
    kernel with one hook changed, ``consumers``: each consumer warpgroup takes every other work
    item of the scheduler's, through the same hooks (``make_epilogue`` for its own unit,
    ``enter_tile``, ``mainloop`` inside the warpgroup's turn, ``barriers.MmaTurn``, and
    ``store_tile``)."""

    TILES = TILES
    MMA_WARPGROUPS = 1
    C_BUFFER_SETS = 2
    TILE_MN, GROUP_M, EPI_TILE, MOST_EPI_STAGES = (64, 256), GROUP_M, EPI_TILE, EPI_STAGES

    @cute.jit
    def consumers(self, ring, scheduler, tiled_mma, tma_c, sA, sB, sC, gC, tidx, warp_idx, warpgroup_idx,
                  epilogue_args):
        """Each consumer warpgroup is a whole MMA unit with its own tile: same fragments, own
        accumulators; its own copy of the consumer loop (w is a compile-time constant)."""
        mma = sm90.make_mma(tiled_mma, 0, sA, sB, gC[(None, None, 0, 0)], self.acc_dtype)
        wtid = tidx % 128
        if warpgroup_idx == PRODUCER_WARPGROUPS:
            self._warpgroup(ring, scheduler, mma, tma_c, gC, sC, wtid, warp_idx, epilogue_args, 0)
        else:
            self._warpgroup(ring, scheduler, mma, tma_c, gC, sC, wtid, warp_idx, epilogue_args, 1)

    @cute.jit
    def _warpgroup(self, ring, scheduler, mma, tma_c, gC, sC, wtid, warp_idx, epilogue_args,
                   w: cutlass.Constexpr):
        """Warpgroup w: items w, w + 2, ... of the CTA's, taking turns on the tensor cores. It
        follows every item (the hand-over, if any, needs both warpgroups to read each slot) and
        skips the other's: their k-tiles in the ring (``count``: the ring position of its next
        k-tile) and their turn.

        It reads the next item only *after* its tile: a scheduler that hands items over (dynamic)
        publishes item t + 1 once the producer has issued every load of item t, and those loads
        wait for free stages that only this warpgroup's mainloop of item t frees. Reading item
        t + 1 first (to know whether the other warpgroup has a next tile) deadlocks as soon as a
        tile has more k-tiles than the ring has stages. So the turn is passed on after every
        tile, and the walk's end settles the account: the turns alternate item by item, and the
        warpgroup that would own the item after the last takes the turn that was passed to it,
        so no arrive is left over at exit."""
        epilogue = self.make_epilogue(tma_c, sC, mma, wtid, epilogue_args, unit=w)  # its own buffers, barrier
        if cutlass.const_expr(w == 1):  # warpgroup 0 goes first
            MmaTurn(w).pass_on()
        slot = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, WORK_SLOTS)
        scheduler = scheduler.start(slot)
        slot.advance()
        count = cutlass.Int32(0)
        walked = cutlass.Int32(0)  # items walked, both warpgroups': item i is warpgroup i % 2's
        if cutlass.const_expr(w == 1):  # the CTA's first item is warpgroup 0's
            if scheduler.active():
                first = scheduler.work_tile()
                count = first.k_end - first.k_begin
                scheduler.advance(first, slot)
                slot.advance()
                walked = walked + 1
        while scheduler.active():
            tile = scheduler.work_tile()
            self.enter_tile(scheduler, epilogue, tile, warp_idx)
            read = pipeline.PipelineState(self.stages, count, count % self.stages, (count // self.stages) % 2)
            # the mainloop inside warpgroup w's turn on the tensor cores
            read, _ = self.mainloop(ring, mma, read, read.clone(), scheduler, tile, MmaTurn(w))
            count = read.count
            self.store_tile(scheduler, epilogue, mma, gC, tile, wtid, warp_idx)
            scheduler.advance(tile, slot)  # now at the other warpgroup's next item, if any
            slot.advance()
            walked = walked + 1
            if scheduler.active():  # skip the other warpgroup's item
                other = scheduler.work_tile()
                count = count + other.k_end - other.k_begin
                scheduler.advance(other, slot)
                slot.advance()
                walked = walked + 1
        if walked % 2 == w:  # the item after the last would be mine: take the turn passed to me
            MmaTurn(w).wait()
        self.finish_stores(epilogue, warp_idx)


# ------------------------------------------------------------------------------------------
# Python entry points (gemm_launch.Entry)
# ------------------------------------------------------------------------------------------
ENTRY = gemm_launch.Entry(PingPongHopperGemm)
compile_target, validate, launcher, gemm = ENTRY.compile_target, ENTRY.validate, ENTRY.launcher, ENTRY.gemm
gemm_pingpong = gemm  # notebook 06's name; gemm is the one every dense module has

