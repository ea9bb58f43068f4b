"""Issue 24: the FP8 promotion with three half-batches in flight instead of one batch.

``grouped_ceilings.py`` measured where the promotion's cost comes from: 64 FFMAs per k-tile that
depend on no wgmma cost about as much as the course kernel's promotion (0.87-0.91x the rowwise
twin, the course kernel 0.85-0.90x) when one wgmma batch per warpgroup is queued while they run,
and less (0.95-0.98x) when two are. The course kernel cannot queue two: a third 64-register
part beside ``acc`` and ``part0``/``part1`` is 256 registers, over the consumers' 232.

``HalfParts`` queues one and a half batches in the same registers. Each k-tile is issued as two
half-batches of m64n64 wgmmas (columns 0-63, then 64-127 of the tile, ``WGMMA_N = 64``) into four
32-register half-parts used in turn (``j % 4`` for half-batch j = 2k + h). Half-batch j is
promoted once j + 3 is issued (``wait_group(3)``): three half-batches, 1.5 k-tiles of tensor work,
stay queued during its 32 FFMAs. The loop runs over pairs of k-tiles so that each half-part's
index is a compile-time number, and only while all four of the pair's next half-batches exist;
the last two or three k-tiles are drained after it with ``wait_group(0)``, one code path per
parity of the k-tile count, so that every ``wait_group`` has a count ptxas can check. (An
earlier draft issued conditionally and committed empty groups past the last k-tile: ptxas could
not prove the parts finished before the FFMAs read them and serialized every wgmma, C7514.) A
k-tile's stage is freed when its second half is promoted; its scales (two rows of sa and one sb
per thread) are loaded when the k-tile two before it is done with its set.

The price: twice the wgmmas, each reading the warpgroup's 64 rows of A from shared memory, so A is
read twice per k-tile.

**Measured, lost** (H100, 2026-11-26, ``experiment_grouped_ceilings_half_parts.json``): right on
ragged groups (3.4e-3 of the largest value), but 0.81-0.84x the rowwise
twin against the course kernel's 0.89-0.90x. Its skeleton is not the cause: with the same m64n64
wgmmas and no promotion the kernel runs 1.02-1.09x (``experiment_grouped_ceilings_no_epilogue.json``).

    python benchmarks/experiments/fp8_half_parts.py --cpu-check     # compile, count, no GPU
    (timed by grouped_ceilings.py, row "course fp8 2x1 half parts")
"""

from __future__ import annotations

import sys

import cutecourse  # noqa: F401  (fixes the DSL's architecture before cutlass loads)
import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import warpgroup

from cutecourse.kernels import hopper_grouped_gemm_fp8 as fp8
from cutecourse.kernels.hopper_gemm_persistent import PRODUCER_WARPGROUPS
from cutecourse.kernels.hopper_grouped_gemm_fp8_onepart import _issue_batch

HALF = 64  # the columns of a half-batch


class HalfParts(fp8.BlockScaledGroupedHopperGemm):
    """The course's FP8 kernel, its promotion fed by four half-parts (module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.WGMMA_N = HALF
        self.config = ("half parts", *self.config)

    @cute.jit
    def mainloop(self, ring, mma, read, release, groups, tile):
        sfa, sfb, m_rows, n_blocks = fp8._group_scales(groups, tile.group, tile.k_end)
        tidx, _, _ = cute.arch.thread_idx()
        thr = mma.tiled_mma.get_slice(tidx - 128 * PRODUCER_WARPGROUPS)
        rows = thr.partition_C(cute.make_identity_tensor((self.tile_mn[0], HALF)))
        # value i of a half-part lies on rows[0] when (i // 2) % 2 == 0, else on rows[2]
        first = tile.tile_m * self.tile_mn[0]
        r0 = cutlass.min(first + rows[0][0], m_rows - 1)
        r1 = cutlass.min(first + rows[2][0], m_rows - 1)
        bn = cutlass.min(tile.tile_n, n_blocks - 1)
        tiled_mma, tCrA, tCrB, acc, k_tiles = mma.tiled_mma, mma.tCrA, mma.tCrB, mma.acc, tile.k_end
        p0 = cute.make_rmem_tensor(rows.shape, self.acc_dtype)
        p1 = cute.make_rmem_tensor(rows.shape, self.acc_dtype)
        p2 = cute.make_rmem_tensor(rows.shape, self.acc_dtype)
        p3 = cute.make_rmem_tensor(rows.shape, self.acc_dtype)
        acc.fill(0.0)
        e, o = (acc[(None, 0, 0)], acc[(None, 0, 1)])  # the halves of acc each half-batch adds to
        ea, eb, es = sfa[(r0, 0)], sfa[(r1, 0)], sfb[(bn, 0)]  # k-tile 0's scales (the even set)
        if k_tiles == 1:
            ring.consumer_wait(read)
            tiled_mma = _issue_batch(tiled_mma, tCrA, tCrB, read.index, 0, 2, p0)
            tiled_mma = _issue_batch(tiled_mma, tCrA, tCrB, read.index, 1, 2, p1)
            read.advance()
            warpgroup.wait_group(0)
            _promote_half(e, p0, ea * es, eb * es)
            _promote_half(o, p1, ea * es, eb * es)
            ring.consumer_release(release)
            release.advance()
        else:
            oa, ob, os_ = sfa[(r0, 1)], sfa[(r1, 1)], sfb[(bn, 1)]  # k-tile 1's (the odd set)
            # prologue: half-batches 0, 1 (k-tile 0) and 2 (k-tile 1, first half)
            ring.consumer_wait(read)
            tiled_mma = _issue_batch(tiled_mma, tCrA, tCrB, read.index, 0, 2, p0)
            tiled_mma = _issue_batch(tiled_mma, tCrA, tCrB, read.index, 1, 2, p1)
            read.advance()
            ring.consumer_wait(read)
            tiled_mma = _issue_batch(tiled_mma, tCrA, tCrB, read.index, 0, 2, p2)
            # pairs of k-tiles whose four next half-batches all exist: each step issues half-batch
            # j + 3 and promotes j, three half-batches in flight
            for pair in cutlass.range((k_tiles - 2) // 2, unroll=1):
                tiled_mma = _issue_batch(tiled_mma, tCrA, tCrB, read.index, 1, 2, p3)  # k-tile 2p+1
                read.advance()
                warpgroup.wait_group(3)
                _promote_half(e, p0, ea * es, eb * es)
                ring.consumer_wait(read)
                tiled_mma = _issue_batch(tiled_mma, tCrA, tCrB, read.index, 0, 2, p0)  # k-tile 2p+2
                warpgroup.wait_group(3)
                _promote_half(o, p1, ea * es, eb * es)
                ring.consumer_release(release)  # k-tile 2p is done
                release.advance()
                ea, eb, es = sfa[(r0, 2 * pair + 2)], sfa[(r1, 2 * pair + 2)], sfb[(bn, 2 * pair + 2)]
                tiled_mma = _issue_batch(tiled_mma, tCrA, tCrB, read.index, 1, 2, p1)  # k-tile 2p+2
                read.advance()
                warpgroup.wait_group(3)
                _promote_half(e, p2, oa * os_, ob * os_)
                ring.consumer_wait(read)
                tiled_mma = _issue_batch(tiled_mma, tCrA, tCrB, read.index, 0, 2, p2)  # k-tile 2p+3
                warpgroup.wait_group(3)
                _promote_half(o, p3, oa * os_, ob * os_)
                ring.consumer_release(release)  # k-tile 2p+1 is done
                release.advance()
                oa, ob, os_ = sfa[(r0, 2 * pair + 3)], sfa[(r1, 2 * pair + 3)], sfb[(bn, 2 * pair + 3)]
            # the last two or three k-tiles: e holds k-tile 2P's scales, o 2P+1's (P pairs done)
            tiled_mma = _issue_batch(tiled_mma, tCrA, tCrB, read.index, 1, 2, p3)  # k-tile 2P+1
            read.advance()
            if k_tiles % 2 == 1:  # one more k-tile, 2P+2, into p0 and p1 once they are promoted
                warpgroup.wait_group(3)
                _promote_half(e, p0, ea * es, eb * es)
                ring.consumer_wait(read)
                tiled_mma = _issue_batch(tiled_mma, tCrA, tCrB, read.index, 0, 2, p0)
                warpgroup.wait_group(3)
                _promote_half(o, p1, ea * es, eb * es)
                ring.consumer_release(release)
                release.advance()
                ea, eb, es = sfa[(r0, k_tiles - 1)], sfa[(r1, k_tiles - 1)], sfb[(bn, k_tiles - 1)]
                tiled_mma = _issue_batch(tiled_mma, tCrA, tCrB, read.index, 1, 2, p1)
                read.advance()
                warpgroup.wait_group(0)
                _promote_half(e, p2, oa * os_, ob * os_)
                _promote_half(o, p3, oa * os_, ob * os_)
                ring.consumer_release(release)
                release.advance()
                _promote_half(e, p0, ea * es, eb * es)
                _promote_half(o, p1, ea * es, eb * es)
                ring.consumer_release(release)
                release.advance()
            else:
                warpgroup.wait_group(0)
                _promote_half(e, p0, ea * es, eb * es)
                _promote_half(o, p1, ea * es, eb * es)
                ring.consumer_release(release)
                release.advance()
                _promote_half(e, p2, oa * os_, ob * os_)
                _promote_half(o, p3, oa * os_, ob * os_)
                ring.consumer_release(release)
                release.advance()
        return read, release


@cute.jit
def _promote_half(acc, part, s0, s1):
    """acc += part * scale: ``s0`` for the values on the thread's first row, ``s1`` on its second."""
    for i in cutlass.range_constexpr(cute.size(part)):
        acc[i] = acc[i] + part[i] * (s1 if (i // 2) % 2 else s0)


def target(cluster=(2, 1)):
    """(kernel, fake_args) for ``cutecourse.inspect.compile_report("fp8_half_parts:target")``."""
    from fp8_variants import fake_target

    return fake_target(HalfParts((128, 128), tuple(cluster), 132))


def cpu_check():
    """Compile for sm_90a (no GPU) and print what decides what it times (``fp8_variants.describe``)."""
    from fp8_variants import print_report

    return print_report("fp8_half_parts:target", "half parts")


if __name__ == "__main__":
    if "--cpu-check" in sys.argv:
        cpu_check()
