"""The ping-pong schedule: the persistent, warp-specialized GEMM with one tile per warpgroup.

``PingPongHopperGemm`` is ``hopper_gemm_persistent.PersistentHopperGemm`` (same producer warp,
ring, tile scheduler, setmaxnreg split) with one change in the consumers. In the *cooperative*
kernel both consumer warpgroups work on one 128-row tile, so both run its epilogue at the same
time and the tensor cores idle meanwhile. Here each consumer warpgroup owns a *whole* tile, and
the two alternate:

* the CTA's work items are dealt out in turn: warpgroup 0 takes items 0, 2, 4 ..., warpgroup 1
  items 1, 3, 5 ...; the producer loads them all, in order, into the one ring, so each warpgroup
  reads its k-tiles at ring positions ``count``, skipping the other's (``2 * k_tiles`` per tile);
* an *ordered barrier* hands the tensor cores over: a warpgroup waits for its turn before its
  first MMA and passes the turn on after its last one is issued. So while warpgroup 1 multiplies
  its tile, warpgroup 0 runs its epilogue: the epilogue is hidden, not exposed once per tile;
* each warpgroup has its own C buffers in smem and its own TMA-store pipeline and barrier.

A warpgroup holds a whole tile's fp32 accumulators, so the tile is 64x256 (128 registers per
thread, as in the cooperative kernel), not 128x256 (256: more than a thread can have). A 64x256
tile loads (64 + 256) x 64 elements per k-tile for 64 x 256 x 64 MMAs: 1.67x the bytes per flop
of a 128x256 tile. Which effect wins is a measurement (benchmarks/schedules.py). The other tile
with 128 accumulator registers, 128x128 (CUTLASS's usual ping-pong tile: two m64n128 wgmmas per
k-step, 1.33x the bytes per flop, 6 stages of 32 KiB), is an option (``tile_mn=(128, 128)``): as
fast as the cooperative kernel at the base clock, but 0.75-0.89x torch.matmul at the 700 W cap:
it moves 1.55x the cooperative kernel's L2 traffic, and at a high clock it waits for L2
(docs/gpu_verification.md, fifth session).

The ring is deeper than the cooperative kernel's. A 40 KiB k-tile feeds half the MMAs of a 48 KiB
one, so the ring empties twice as fast, and 4 stages cover only half the load latency that the
cooperative kernel's 4 cover. So each warpgroup gets 2 C buffers (``EPI_STAGES``: one TMA store in
flight while it fills the other), not 4, and the 16 KiB saved makes a fifth stage: measured at
the 700 W cap, 1-8% faster on every shape with more than one wave of tiles, and ahead of the
cooperative kernel where the epilogue matters (docs/hopper_gemm.md, "Ping-pong schedule"). ``epi_stages=4`` gives the
4-stage ring back.

The ordered barrier is two named hardware barriers (``Barrier.MMA_TURN`` + w for warpgroup w), each
completed by 256 threads: the 128 of the waiting warpgroup (``bar.sync``) and the 128 of the
other (``bar.arrive``). Warpgroup 1 passes warpgroup 0 its first turn at the start; a turn is
passed on only if the other warpgroup has a next tile, so every arrive meets a wait.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass.cute.nvgpu import warpgroup

from . import gemm_launch, sm90, tile_scheduler
from .barriers import Barrier
from .hopper_gemm_persistent import PRODUCER_WARPGROUPS, PersistentHopperGemm, plan_persistent

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
    """C = A @ B.T, persistent, warp-specialized, ping-pong (module docstring). Static scheduler."""

    TILES = TILES
    MMA_WARPGROUPS = 1
    C_BUFFER_SETS = 2

    def __init__(self, tile_mn=(64, 256), cluster_mn=(1, 1), sms: int = 132, group_m: int = GROUP_M,
                 stages: int | None = None, epi_tile=EPI_TILE, epi_stages: int = EPI_STAGES,
                 pdl: bool = False, epilogue_op=None):
        super().__init__(tile_mn, cluster_mn, sms, group_m, stages, "static", epi_tile, epi_stages, pdl,
                         epilogue_op)

    @cute.jit
    def _consumers(self, ring, sched, tiled_mma, tma_c, sA, sB, sC, gC, tidx, warp_idx, warpgroup_idx,
                   epilogue_args):
        """Each consumer warpgroup is a whole MMA unit with its own tile: same fragments, own
        accumulators; its own copy of the consumer loop (w is a compile-time constant)."""
        mma = sm90.make_mma(tiled_mma, 0, sA, sB, gC[(None, None, 0, 0)], self.acc_dtype)
        wtid = tidx % 128
        if warpgroup_idx == PRODUCER_WARPGROUPS:
            self._pingpong(ring, sched, mma, tma_c, gC, sC, wtid, warp_idx, epilogue_args, 0)
        else:
            self._pingpong(ring, sched, mma, tma_c, gC, sC, wtid, warp_idx, epilogue_args, 1)

    @cute.jit
    def _pingpong(self, ring, sched, mma, tma_c, gC, sC, wtid, warp_idx, epilogue_args, w: cutlass.Constexpr):
        """Warpgroup w: tiles w, w + 2, ... of this CTA's work items, taking turns on the MMAs."""
        epilogue = sm90.Epilogue(tma_c, sC, mma.tiled_mma, mma.acc, wtid, self.c_dtype,
                                 self.epi_tile, self.epi_stages, 128, store_warp=4 * (PRODUCER_WARPGROUPS + w),
                                 barrier_threads=128, barrier_id=Barrier.EPILOGUE + w,
                                 first_buffer=w * self.epi_stages, op=self.epilogue_op, operands=epilogue_args)
        if cutlass.const_expr(w == 1):  # warpgroup 0 goes first
            cute.arch.barrier_arrive(barrier_id=ORDER_BARRIER, number_of_threads=256)
        k_tiles = sched.k_tiles
        count = k_tiles * w  # ring position of this warpgroup's first k-tile
        work = sched.first + sched.stride * w
        while work < sched.total:
            tile_m, tile_n = tile_scheduler.tile_of(sched, work)
            mma.acc.fill(0.0)
            cute.arch.barrier(barrier_id=ORDER_BARRIER + w, number_of_threads=256)  # my turn
            for k in cutlass.range(k_tiles, unroll=1):
                c = count + k
                ring.consumer_wait(pipeline.PipelineState(self.stages, c, c % self.stages,
                                                          (c // self.stages) % 2))
                sm90.issue_mma(mma, c % self.stages)
                warpgroup.wait_group(1)  # k-tile k-1's MMAs are done: release its stage
                if k > 0:
                    p = c - 1
                    ring.consumer_release(pipeline.PipelineState(self.stages, p, p % self.stages,
                                                                 (p // self.stages) % 2))
            if work + sched.stride < sched.total:  # the other warpgroup has a next tile: its turn
                cute.arch.barrier_arrive(barrier_id=ORDER_BARRIER + 1 - w, number_of_threads=256)
            warpgroup.wait_group(0)
            last = count + k_tiles - 1
            ring.consumer_release(pipeline.PipelineState(self.stages, last, last % self.stages,
                                                         (last // self.stages) % 2))
            count += 2 * k_tiles
            tile = tile_scheduler.WorkTile(work, tile_m, tile_n, 0, k_tiles, 0, False)
            self.store_tile(sched, epilogue, mma, gC, tile, wtid, warp_idx)
            work += 2 * sched.stride
        sm90.finish_stores(epilogue, warp_idx)


# ------------------------------------------------------------------------------------------
# Python entry points
# ------------------------------------------------------------------------------------------
def compile_target(tile=(64, 256), in_dtype: str = "float16", out_dtype: str = "float16",
                   cluster=(1, 1), sms: int = 132, group_m: int = GROUP_M, stages: int | None = None,
                   epi_stages: int = EPI_STAGES, pdl: bool = False):
    """(jit_fn, fake_args) for ``cutecourse.inspect.compile_report`` (symbolic M, N, K)."""
    plan_pingpong(tuple(tile), in_dtype, out_dtype, stages=stages, epi_stages=epi_stages)  # clear errors first
    kernel = PingPongHopperGemm(tuple(tile), tuple(cluster), sms, group_m, stages, epi_stages=epi_stages,
                                pdl=pdl)
    return kernel, gemm_launch.fake_persistent_arguments(in_dtype, out_dtype)


def plan_pingpong(tile_mn=(64, 256), in_dtype="float16", out_dtype="float16", stages: int | None = None,
                  epi_stages: int = EPI_STAGES):
    """The smem plan: the ring, and two sets of ``epi_stages`` C buffers (one per consumer
    warpgroup): 5 stages of 40 KiB and 16 KiB of C buffers by default, 4 stages with
    ``epi_stages=4``."""
    return plan_persistent(tile_mn, in_dtype, out_dtype, stages=stages, epi_tile=EPI_TILE,
                           c_buffer_sets=2, tiles=TILES, epi_stages=epi_stages)


def validate(a, b, out_dtype=None, tile=(64, 256), stages: int | None = None, c=None,
             epi_stages: int = EPI_STAGES):
    in_name, out_name = gemm_launch.check_operands(a, b, out_dtype, c)
    return plan_pingpong(tuple(tile), in_name, out_name, stages=stages, epi_stages=epi_stages)


def launcher(a, b, c, tile=(64, 256), cluster=(1, 1), group_m: int = GROUP_M,
             stages: int | None = None, sms: int | None = None, epi_stages: int = EPI_STAGES,
             pdl: bool = False):
    """Validated, compiled launch closure for benchmarks: ``fn()`` writes A @ B.T into ``c``."""
    from ..modes import require_gpu

    validate(a, b, c.dtype, tile, stages, c, epi_stages)
    sms = require_gpu("sm_90a").sm_count if sms is None else sms
    kernel = PingPongHopperGemm(tuple(tile), tuple(cluster), sms, group_m, stages, epi_stages=epi_stages,
                                pdl=pdl)
    return gemm_launch.counted_launcher(kernel, a, b, c)  # the counters go unused: static scheduler


def gemm_pingpong(a, b, out_dtype=None, **config):
    """C = A @ B.T on an H100 with the ping-pong kernel; returns C (M, N)."""
    return gemm_launch.run(launcher, a, b, out_dtype, **config)
