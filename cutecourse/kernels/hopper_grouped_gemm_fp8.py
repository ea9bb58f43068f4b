"""FP8 grouped GEMM with block scales on Hopper: the recipe of DeepSeek-V3's training and DeepGEMM.

Each group multiplies e4m3 matrices that carry fp32 scales, one per block::

    A_g ~ qa * sa   one scale per 1 x 128 block of A (per token and 128 channels: activations)
    B_g ~ qb * sb   one scale per 128 x 128 block of B (weights)

so ``C_g = sum over k-blocks kb of (qa_kb @ qb_kb.T) * sa[:, kb] * sb[n // 128, kb]``
(``models/blockwise_fp8.scaled_mm_reference`` is this sum on the CPU). The scales change from one
k-block to the next, so they cannot be applied once at the end: every k-block's product must be
scaled on its own before it joins the sum. This is the grouped kernel of ``hopper_grouped_gemm``
(same roles, group walk, tensor maps and epilogue) with its ``mainloop`` hook changed, and these
choices:

* **e4m3 operands, K-major.** Hopper's 8-bit wgmma reads both operands K-major from smem, 32 k
  per instruction. A k-tile is still one 128-byte swizzled row, now 128 elements: exactly one
  scale block, so one k-tile = one scale per row of A and one per 128 columns of B.
* **128 x 128 tiles.** Each consumer warpgroup computes 64 x 128; a tile's 128 columns are one
  block of B's scales.
* **Promotion.** The wgmmas of k-tile k write a *fresh* accumulator (the first one overwrites:
  ``ACCUMULATE`` off); once they are done, the consumer frees the stage and adds that product,
  times ``sa[row] * sb``, to the fp32 accumulator ``acc`` with one FFMA per register. (The fp8
  wgmma also sums with fewer bits than fp32, so promoting every 128 k keeps its error from
  growing with K: DeepSeek-V3, section 3.3.)
* **Two k-tiles in flight.** With one fresh accumulator, each k-tile must wait for its wgmmas
  (``wait_group(0)``) before the FFMAs, and the tensor cores idle while they run: measured
  814-848 TFLOP/s on the H100. With two, ``part0`` and ``part1``, k-tile k + 1's wgmmas are
  issued before k's are waited for (``wait_group(1)``, as in the bf16 kernel), so the promotion
  of k runs under them: 970-1011 TFLOP/s. Three 64-register accumulators fit the consumers'
  232 registers; even and odd k-tiles alternate, so the loop runs over pairs of k-tiles.
* **The scales come from global memory.** Each consumer thread holds the accumulators of two rows
  of its tile, so it loads two values of ``sa`` and one of ``sb`` per k-tile, when it issues that
  k-tile: they arrive while the wgmmas run. ``sa`` is stored M-major (``(M, K/128)`` with stride
  ``(1, M)``, as DeepGEMM and ``torch._scaled_mm`` store it), so neighbouring threads read
  neighbouring addresses.

Variants with one fresh accumulator per warpgroup and wider tiles (DeepGEMM's promotion):
``hopper_grouped_gemm_fp8_onepart``. Its 128x256 kernel, which loads the scales a k-tile ahead,
is the launchers' default: 1.10-1.13x this kernel on an H100 (``docs/grouped_measured.md``).
The host side (``grouped_gemm_fp8``, ``grouped_mm_fp8``, ``quantize_fp8``, the checks of the
scales) is in ``grouped.py``.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import warpgroup

from ..errors import CourseError
from ..models.blockwise_fp8 import BLOCK
from ..models.gemm_plan import FP8_DTYPES, tile_k
from .group_walk import SFA, SFB, M, N, operand_pointer
from .hopper_gemm_persistent import PRODUCER_WARPGROUPS
from .hopper_grouped_gemm import GroupedHopperGemm

#: ``BLOCK`` (models/blockwise_fp8): scale blocks 1 x 128 of A, 128 x 128 of B (= one k-tile, one tile's columns).
#: The launchers' cluster for groups of 384 rows and more (``grouped.fp8_cluster``): pairs of CTAs
#: along M share B's k-tiles by multicast.
#: Measured 1.03-1.05x the 1x1 launch (benchmarks/results/grouped_fp8.json).
CLUSTER = (2, 1)
#: Order inside a group: bands of 8 cluster-tile rows (2048 rows of A at 2x1), not the bf16
#: kernel's whole columns. At K = 7168 a 128-row panel of A is 0.9 MB, so a column of a 4096-row
#: group is 29 MB of A, which each wave of 132 CTAs streamed through L2 again: 1.73 GB read from
#: DRAM for 0.47 GB of operands; bands of 8 read 1.05 GB and ran 1.02-1.11x faster at K 7168 and
#: 14336, the same at K 2048 (grouped_peers_bands.json, grouped_peers_final.json,
#: experiment_grouped_fp8_ncu_bands.json).
GROUP_M = 8


def refuse_turn(kernel, turn):
    """The FP8 mainloops take the base hook's ``turn`` (so that a combination calls them as it
    calls any mainloop) but cannot serve one: their consumer warpgroups split one tile, and the
    one-part kernel has turns of its own (``wait_turn`` ...). It runs while the kernel is traced:
    the compiled code holds nothing of it."""
    if turn is not None:
        raise CourseError(f"{type(kernel).__name__}.mainloop was given a turn on the tensor cores ({turn!r}): "
                          "its warpgroups share one tile, so units that take turns (ping-pong) do not combine "
                          "with it", "combine the FP8 mainloop with a kernel whose consumers pass no turn")


class BlockScaledGroupedHopperGemm(GroupedHopperGemm):
    """G products ``C_g = (qa_g * sa_g) @ (qb_g * sb_g).T``, e4m3 inputs, fp32 block scales.

    The grouped kernel (``GroupedHopperGemm``) with 128 x 128 x 128 tiles and one hook changed:
    the mainloop, which promotes each k-tile's product into fp32 with its scales (module
    docstring). Its metadata has five columns (A, B, C, SFA, SFB: ``group_walk.OPERANDS``).
    """

    TILES = ((128, 128),)
    IN_DTYPES = FP8_DTYPES
    TILE_K = tile_k("float8_e4m3fn")  # 128: one scale block
    TILE_MN, CLUSTER_MN, GROUP_M = (128, 128), CLUSTER, GROUP_M

    @cute.jit
    def mainloop(self, ring, mma, read, release, groups, tile, turn=None):
        """acc = the sum over the tile's k-tiles k of (A_k @ B_k.T) * sa[row, k] * sb[k]: each
        k-tile's wgmmas write a fresh accumulator (``part0`` for even k, ``part1`` for odd), which
        is then added to ``acc`` with its scales (``_promote``), while the next k-tile's wgmmas run.
        Returns the advanced (read, release) ring states, as ``sm90.mma_tile`` does. ``turn``: the
        base hook's; only None (``refuse_turn``)."""
        refuse_turn(self, turn)
        sfa, sfb, m_rows, n_blocks = group_scales(groups, tile.group, tile.k_end)
        # The tile row of each of this thread's accumulators (two distinct rows per thread).
        tidx, _, _ = cute.arch.thread_idx()
        thr = mma.tiled_mma.get_slice(tidx - 128 * PRODUCER_WARPGROUPS)
        rows = thr.partition_C(cute.make_identity_tensor(self.tile_mn))
        # (a cluster's CTA past the group's M or N reads the last row's or block's scales: its
        # results are never stored)
        scales = (sfa, sfb, rows, tile.tile_m * self.tile_mn[0], m_rows,
                  cutlass.min(tile.tile_n, n_blocks - 1))
        part0 = cute.make_rmem_tensor(mma.acc.shape, self.acc_dtype)
        part1 = cute.make_rmem_tensor(mma.acc.shape, self.acc_dtype)
        sa0 = cute.make_rmem_tensor(mma.acc.shape, self.acc_dtype)  # sa of each accumulator's row
        sa1 = cute.make_rmem_tensor(mma.acc.shape, self.acc_dtype)
        tiled_mma, tCrA, tCrB, acc, k_tiles = mma.tiled_mma, mma.tCrA, mma.tCrB, mma.acc, tile.k_end
        acc.fill(0.0)
        sb0 = _load_scales(scales, sa0, 0)
        sb1 = cutlass.Float32(0.0)
        tiled_mma = _issue(ring, read, tiled_mma, tCrA, tCrB, part0)
        read.advance()
        for pair in cutlass.range((k_tiles - 1) // 2, unroll=1):
            k = 2 * pair
            sb1 = _load_scales(scales, sa1, k + 1)
            tiled_mma = _issue(ring, read, tiled_mma, tCrA, tCrB, part1)
            read.advance()
            warpgroup.wait_group(1)  # k-tile k is done, k + 1 still running
            _promote(ring, release, acc, part0, sa0, sb0)
            release.advance()
            sb0 = _load_scales(scales, sa0, k + 2)
            tiled_mma = _issue(ring, read, tiled_mma, tCrA, tCrB, part0)
            read.advance()
            warpgroup.wait_group(1)
            _promote(ring, release, acc, part1, sa1, sb1)
            release.advance()
        if k_tiles % 2 == 0:  # the last k-tile is odd: issue it, then retire both
            sb1 = _load_scales(scales, sa1, k_tiles - 1)
            tiled_mma = _issue(ring, read, tiled_mma, tCrA, tCrB, part1)
            read.advance()
            warpgroup.wait_group(1)
            _promote(ring, release, acc, part0, sa0, sb0)
            release.advance()
            warpgroup.wait_group(0)
            _promote(ring, release, acc, part1, sa1, sb1)
            release.advance()
        else:
            warpgroup.wait_group(0)
            _promote(ring, release, acc, part0, sa0, sb0)
            release.advance()
        return read, release


@cute.jit
def _issue(ring, read, tiled_mma, tCrA, tCrB, part):
    """Wait for ring stage ``read``, then start part = its A_tile @ B_tile.T: ``sm90.issue_mma``,
    except that the first wgmma overwrites (ACCUMULATE off). Returns the MMA, whose field changed."""
    ring.consumer_wait(read)
    warpgroup.fence()
    for kb in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
        tiled_mma.set(warpgroup.Field.ACCUMULATE, kb != 0)
        cute.gemm(tiled_mma, part, tCrA[(None, None, kb, read.index)], tCrB[(None, None, kb, read.index)],
                  part)
    warpgroup.commit_group()
    return tiled_mma


@cute.jit
def _promote(ring, release, acc, part, sa, sb):
    """A finished k-tile: free its ring stage, then acc += part * sa[row] * sb (one FFMA each)."""
    ring.consumer_release(release)
    for i in cutlass.range_constexpr(cute.size(part)):
        acc[i] = acc[i] + part[i] * (sa[i] * sb)


@cute.jit
def _load_scales(scales, sa, k):
    """Fill ``sa`` with A's scale of each accumulator's row at k-tile ``k``; return B's scale of
    the tile's columns. (One per accumulator, but the compiler loads each distinct row once: two
    per thread.)"""
    sfa, sfb, rows, first_row, m_rows, tile_n = scales
    for i in cutlass.range_constexpr(cute.size(sa)):
        sa[i] = sfa[(cutlass.min(first_row + rows[i][0], m_rows - 1), k)]
    return sfb[(tile_n, k)]


def group_scales(groups, g, k_tiles):
    """(sfa, sfb, M_g, N_g/128) of group g: sfa (M_g, k-blocks) M-major, sfb (N_g/128, k-blocks)
    row-major (their ``strides`` columns: SFA's k-block stride, SFB's row stride)."""
    m_rows = groups.shapes[(g, M)]
    n_blocks = (groups.shapes[(g, N)] + BLOCK - 1) // BLOCK
    sfa = cute.make_tensor(operand_pointer(groups, g, SFA, cutlass.Float32, align=4),
                           cute.make_layout((m_rows, k_tiles), stride=(1, groups.strides[(g, SFA)])))
    sfb = cute.make_tensor(operand_pointer(groups, g, SFB, cutlass.Float32, align=4),
                           cute.make_layout((n_blocks, k_tiles), stride=(groups.strides[(g, SFB)], 1)))
    return sfa, sfb, m_rows, n_blocks


