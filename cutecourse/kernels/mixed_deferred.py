"""The mixed-input kernel with its group scales applied after the MMA (variant "deferred_scales").

The course kernel converts each register with three packed operations (``int4_convert.py``):
``lop3`` (128 + q), ``sub`` (q - zero, exact) and ``mul`` by the group's scale (rounded to bf16).
At decode sizes the SM's conversion and wgmma issue limit the kernel, not the bytes
(``docs/mixed_measured.md``), so an operation less per register is time. The scale is one number
per weight row and group, and the sum over a group factors it out:

    y[n, m] = sum over groups g of  s[g, n] * (sum over k in g of (q[n, k] - z[g, n]) * x[m, k])

so the wgmmas can multiply the unscaled q - z (a whole number in [-15, 15]: exact in bf16 and
fp16) and each group's sum be scaled once, in fp32, as the FP8 block-scaled kernel promotes its
fresh accumulator (``hopper_grouped_gemm_fp8_onepart.py``). Per register: lop3 and sub (the
course kernel's ``convert`` with ``CONVERT_MULTIPLIES = False``: ``int4_convert.convert_word``
given no scales); per group and accumulator register: one FFMA (``acc += s * part``), 2 scales
a thread read from the stage's smem. At tile_m = 16 and groups of 128 that is 8 FFMAs per 32
registers converted, in place of 32 packed multiplies.

The weights the product uses are then s * (q - z) exactly, not W' = bf16(s * (q - z)): y
differs from ``x @ W'.T`` by W's rounding (half a bf16 unit per weight), and is no worse than
the course kernel's y against the exact weights. A one-hot row of x still reads W' back bit for
bit: its one group sum is q - z exactly, the FFMA s * (q - z) + 0 is exact in fp32 (8 + 4
significant bits), and the epilogue rounds it to bf16 once, as ``quant.dequantize`` does.

The loop is the course kernel's (``consume``: a chunk of 64 columns converted, its wgmmas
issued, waited for before the next chunk's registers are written) with a promotion after the
wait that ends a group: once a chunk of a group of 64, every second chunk for 128, once per
k-tile for groups of 256 or more (one group per row included: the k-tile's scale is the same
each time). Groups of 32 would end inside a chunk's one wgmma batch: the variant refuses them.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass.cute.nvgpu import warpgroup

from ..quant.reorder import BLOCK_K, BLOCK_N, SLICES
from .hopper_mixed_gemm import CHUNKS, WG_THREADS, HopperMixedGemm


class DeferredScalesMixedGemm(HopperMixedGemm):
    """Group scales applied to each group's fp32 sum after its wgmmas (the module docstring):
    the conversion is lop3 and sub (the course kernel's ``convert`` without its multiply:
    ``CONVERT_MULTIPLIES``), and one FFMA per accumulator register and group promotes."""

    CONVERT_MULTIPLIES = False  # the registers hold q - zero, exact; the scales wait for the sums
    PTX_STEPS = (16, 0)  # the wgmmas; no bf16x2 multiply (the scales are fp32 FFMAs after them)

    def __init__(self, tile_m: int | None = None, *, group_size: int | None = None, **options):
        if group_size is not None and group_size < BLOCK_K:
            from ..errors import ShapeError

            raise ShapeError(f"group_size={group_size}: the variant 'deferred_scales' scales a group's sum once its "
                             f"chunk of {BLOCK_K} columns is done, so a group must span whole chunks",
                             f"use a group size of {BLOCK_K} or more, or the course kernel (variant='course')")
        super().__init__(tile_m, group_size=group_size, **options)

    @cute.jit
    def consume(self, ring, cons, k_count, sW, sS, sZ, frag, tiled_mma, tCrX, acc, tidx):
        """The course kernel's loop with each chunk's wgmmas into ``part``, promoted into ``acc``
        once a group's are done (after the ``wait_group(0)`` of the next chunk, or of the next
        k-tile, before its stage is released: the scales are read from it)."""
        wg, t = tidx // WG_THREADS, tidx % WG_THREADS
        lane_row = wg * BLOCK_N + (t // 32) * 16 + (t % 32) // 4
        rows = (lane_row, lane_row + 8)  # the two rows of this thread's accumulator registers
        # thread 0's (row, column) of each register, compile-time numbers: register i is of a
        # thread's first row where thread 0's is row 0, of its second (8 below) where it is row 8
        at0 = tiled_mma.get_slice(0).partition_C(cute.make_identity_tensor((self.rows, self.tile_m)))
        part = cute.make_rmem_tensor(acc.shape, cutlass.Float32)  # the fresh sum of one group
        last = _group(self, CHUNKS - 1)  # the group of a k-tile's last chunk
        released = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        for k in cutlass.range(k_count, unroll=1):
            ring.consumer_wait(cons)
            for chunk in cutlass.range_constexpr(CHUNKS):
                warpgroup.wait_group(0)  # the previous chunk's wgmmas are done: ``part`` holds its sum
                if cutlass.const_expr(chunk == 0):
                    if k > 0:  # k-tile k - 1 is done: promote its last group, then free its stage
                        promote(acc, part, sS, released.index, last, rows, at0)
                        ring.consumer_release(released)
                        released.advance()
                elif cutlass.const_expr(_ends_group(self, chunk - 1)):
                    promote(acc, part, sS, cons.index, _group(self, chunk - 1), rows, at0)
                self.convert(sW, sS, sZ, cons.index, frag, wg, t, lane_row, chunk)
                self.mma(tiled_mma, frag, tCrX, part, cons.index, chunk)
            cons.advance()
        warpgroup.wait_group(0)
        if k_count > 0:
            promote(acc, part, sS, released.index, last, rows, at0)
            ring.consumer_release(released)

    @cute.jit
    def mma(self, tiled_mma, frag, tCrX, acc, stage, chunk: cutlass.Constexpr[int]):
        """acc += the chunk's 4 wgmmas, ``acc`` (the group's ``part``) starting from zero at a
        group's first chunk; one commit group, as the course kernel's."""
        if cutlass.const_expr(_starts_group(self, chunk)):
            acc.fill(0.0)  # the wgmmas are done (wait_group(0)) and the previous sum promoted
        warpgroup.fence()
        for s in cutlass.range_constexpr(SLICES):
            kb = chunk * SLICES + s
            cute.gemm(tiled_mma, acc, frag[(None, None, kb)], tCrX[(None, None, kb, stage)], acc)
        warpgroup.commit_group()


# -- where the groups end, at compile time (a k-tile is CHUNKS chunks of BLOCK_K columns) ----------
def _group(gemm, chunk: int) -> int:
    """The scale row in the stage of chunk ``chunk``'s group (0 where a group spans the k-tile)."""
    return chunk * BLOCK_K // gemm.group_size if gemm.gpt > 1 else 0


def _starts_group(gemm, chunk: int) -> bool:
    """Whether chunk ``chunk`` starts a sum: a group's first chunk, or the k-tile's (a group of
    256 or more is promoted once per k-tile, with the k-tile's copy of its scale)."""
    return chunk * BLOCK_K % gemm.group_size == 0 if gemm.gpt > 1 else chunk == 0


def _ends_group(gemm, chunk: int) -> bool:
    """Whether the sum is promoted after chunk ``chunk``: the last of its group or of the k-tile."""
    return chunk == CHUNKS - 1 or _starts_group(gemm, chunk + 1)


@cute.jit
def promote(acc, part, sS, stage, grp: cutlass.Constexpr[int], rows, at0):
    """acc += part * scale, each register's scale that of its row (``rows``: this thread's two;
    ``at0``: which of them each register is on, at compile time), group ``grp`` of ring stage
    ``stage``: one FFMA per register, in fp32."""
    lo = sS[(grp, rows[0], stage)].to(cutlass.Float32)
    hi = sS[(grp, rows[1], stage)].to(cutlass.Float32)
    for i in cutlass.range_constexpr(cute.size(part)):
        s = lo if at0[i][0] == at0[0][0] else hi
        acc[i] = acc[i] + part[i] * s

