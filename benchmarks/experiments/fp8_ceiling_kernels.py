"""Issue 24: the FP8 kernel with one cost taken out, to measure what that cost is.

Each class is the course's FP8 kernel (``hopper_grouped_gemm_fp8``) with one hook changed. None
computes the recipe, so none is a kernel to use: they are the measurements behind
``docs/notes/grouped_speed.md``, timed by ``grouped_ceilings.py``.

* ``NoPromotion``: the bf16 kernel's mainloop (the wgmmas add into one fp32 accumulator): no
  scales, no FFMAs; computes ``qa @ qb.T`` and is checked against it. ``NoPromotionHalves``: the
  same with two m64n64 wgmmas per k32 step (the skeleton of ``fp8_half_parts``).
* ``FreeFFMAs``: ``NoPromotion`` plus 64 FFMAs per k-tile that wait for no wgmma, after one batch
  is issued (as the course's promotion); ``DeepFreeFFMAs``: after two batches are issued.
* ``NoEpilogue``: the course kernel writing no C (timed, never checked).
"""

from __future__ import annotations

import cutecourse  # noqa: F401  (fixes the DSL's architecture before cutlass loads)
import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import warpgroup

from cutecourse.kernels import hopper_grouped_gemm_fp8 as fp8
from cutecourse.kernels import sm90
from cutecourse.kernels.hopper_gemm_persistent import PersistentHopperGemm


class NoPromotion(fp8.BlockScaledGroupedHopperGemm):
    """The course's FP8 kernel with the bf16 kernel's mainloop: ``qa @ qb.T``, no scales."""

    mainloop = PersistentHopperGemm.mainloop
    #: 128x96 as well: the widest tile whose promotion could keep two batches in flight (an
    #: accumulator and three 48-register parts: 192 registers; at 128x128 that is 256 > 232).
    TILES = ((128, 128), (128, 96))

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.config = ("no_promotion", *self.config)


class NoPromotionHalves(NoPromotion):
    """``NoPromotion`` with ``fp8_half_parts``' wgmmas: m64n64, two per k32 step (each reads the
    warpgroup's A rows again): the skeleton the half-part promotion runs on."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.WGMMA_N = 64


class NoEpilogue(fp8.BlockScaledGroupedHopperGemm):
    """The course kernel without its epilogue: ``store_tile`` writes no C (timed, never checked),
    what the tensor cores lose while both consumer warpgroups store each tile. The sum of the
    accumulators decides a store that never happens, so the compiler keeps the promotion."""

    @cute.jit
    def store_tile(self, groups, epilogue, mma, gC, tile, c_map, ctid, warp_idx):
        total = cutlass.Float32(0.0)
        for i in cutlass.range_constexpr(cute.size(mma.acc)):
            total = total + mma.acc[i]
        if total == cutlass.Float32(-1.25e38):  # never
            trace = groups.trace
            trace[(groups.cta, 0)] = cutlass.Int32(-1)


class FreeFFMAs(NoPromotion):
    """``NoPromotion`` plus the promotion's FFMAs on registers no wgmma writes: after each k-tile's
    wgmmas are issued, ``y[i] += x[i] * s`` for the 64 values of a part, as many FFMAs reading as
    many registers as the course kernel's promotion, but waiting for nothing. ``x`` is zero at run
    time (the ``shapes`` column that holds a 1, minus 1, times distinct numbers: the compiler
    cannot fold it, and ``s`` changes every k-tile, so the products stay FFMAs), so the
    result is still ``qa @ qb.T``. As slow as the course kernel: the FFMAs cost by running beside
    the wgmmas (a cost any promotion pays); as fast as ``NoPromotion``: the cost is the course
    kernel's waiting for its parts, which a better schedule could hide."""

    #: wgmma batches in flight while the FFMAs run: 1 as in the course kernel (``wait_group(1)``:
    #: the batch just issued); 2 keeps one more queued (``DeepFreeFFMAs``).
    DEPTH = 1

    @cute.jit
    def mainloop(self, ring, mma, read, release, groups, tile):
        zero = cutlass.Float32(groups.shapes[(tile.group, 3)] - 1)
        s = cutlass.Float32(groups.shapes[(tile.group, 3)])
        x = cute.make_rmem_tensor(mma.acc.shape, self.acc_dtype)
        y = cute.make_rmem_tensor(mma.acc.shape, self.acc_dtype)
        tidx, _, _ = cute.arch.thread_idx()
        for i in cutlass.range_constexpr(cute.size(x)):  # 64 distinct values, all zero at run time
            x[i] = zero * cutlass.Float32(tidx + i)
        y.fill(zero)
        mma.acc.fill(0.0)
        for k in cutlass.range(tile.k_end, unroll=1):
            ring.consumer_wait(read)
            sm90.issue_mma(mma, read.index)
            warpgroup.wait_group(self.DEPTH)
            if k >= self.DEPTH:
                ring.consumer_release(release)
                release.advance()
            read.advance()
            for i in cutlass.range_constexpr(cute.size(y)):
                y[i] = y[i] + x[i] * s
            s = s + y[0]  # a new scale each k-tile, as the course kernel's (still 1)
        warpgroup.wait_group(0)
        for _ in cutlass.range(cutlass.min(tile.k_end, self.DEPTH), unroll=1):
            ring.consumer_release(release)
            release.advance()
        for i in cutlass.range_constexpr(cute.size(y)):
            mma.acc[i] = mma.acc[i] + y[i]
        return read, release


class DeepFreeFFMAs(FreeFFMAs):
    """``FreeFFMAs`` with two wgmma batches in flight during the FFMAs (``wait_group(2)``): if the
    FFMAs cost because the next batch is issued only after them, this hides them; the recipe's
    promotion could not do the same (a third 64-register part does not fit the 232 registers)."""

    DEPTH = 2
