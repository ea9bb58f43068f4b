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

**Variants with one part** (``parts=1``, DeepGEMM's promotion; issue 24 measures them against
the default, ``docs/notes/grouped_speed.md``). Each warpgroup has one fresh accumulator and waits
for its own wgmmas (``wait_group(0)``) before promoting; the tensor cores stay busy only if the
other warpgroup's wgmmas run meanwhile. Left alone (``turns=None``) the two warpgroups tend to run
in step, and promote at the same time. With ``turns`` they take turns to issue (two named
barriers, as in ping-pong), so each one's promotion runs under the other's wgmmas: ``"issue"``
passes the turn as soon as one's wgmmas are issued (both batches may be queued at the tensor
cores: no gap between them, if they run in the order issued), ``"done"`` once they have finished
(strict alternation, with a hand-over gap). One part frees the registers of the second, which buys
wider tiles:

* 128x192 (m64n192 wgmmas, 96 + 96 registers): a tile's columns span two blocks of B's scales,
  the boundary 128 or 64 columns in (``n0 % 128`` is 0 or 64): two versions of the promotion,
  each with its scale of B fixed per register at compile time, picked per tile;
* 128x256 (two m64n128 wgmma batches per k-tile into one 64-register part, 128 + 64).

Both move fewer bytes per flop through shared memory and L2 than 128x128 (a k-tile's A is read by
more columns), the suspect for the 128x128 tile's shortfall against cuBLAS's FP8 GEMM.

The host side (``grouped_gemm_fp8``, ``grouped_mm_fp8``, ``quantize_fp8``, the checks of the
scales) is in ``grouped.py``.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import warpgroup

from ..errors import ShapeError
from ..models.gemm_plan import EPI_TILE, FP8_DTYPES, FP8_TILES, check_tile, fp8_epi_stages, tile_k
from .group_walk import SFA, SFB, M, N, operand_pointer
from .hopper_gemm_persistent import PRODUCER_WARPGROUPS
from .hopper_grouped_gemm import GROUP_M, GroupedHopperGemm

#: Scale blocks: 1 x 128 of A, 128 x 128 of B (= one k-tile, = one tile's columns).
BLOCK = 128
#: The launchers' default cluster: pairs of CTAs along M share B's k-tiles by multicast.
#: Measured 1.03-1.05x the 1x1 launch (benchmarks/results/grouped_fp8.json).
CLUSTER = (2, 1)
#: Named barriers of the one-part mainloop's turns: ORDER_BARRIER + w is consumer warpgroup w's
#: turn to issue (0: the whole CTA, 1: the epilogue's).
ORDER_BARRIER = 2
#: When a warpgroup passes the turn on: not at all (no turns), its wgmmas issued, or done.
TURNS = (None, "issue", "done")


class BlockScaledGroupedHopperGemm(GroupedHopperGemm):
    """G products ``C_g = (qa_g * sa_g) @ (qb_g * sb_g).T``, e4m3 inputs, fp32 block scales.

    The grouped kernel (``GroupedHopperGemm``) with k-tiles of 128 and one hook changed: the
    mainloop, which promotes each k-tile's product into fp32 with its scales (module docstring).
    Its metadata has five columns (A, B, C, SFA, SFB: ``group_walk.OPERANDS``). ``parts``: fresh
    accumulators per warpgroup, 2 (128x128 only) or 1; ``turns`` (one part): when the consumer
    warpgroups hand the turn to issue wgmmas on (``TURNS``).
    """

    TILES = FP8_TILES
    IN_DTYPES = FP8_DTYPES

    def __init__(self, tile_mn=(128, 128), cluster_mn=CLUSTER, sms: int = 132, *,
                 group_m: int = GROUP_M, stages: int | None = None, epi_tile=EPI_TILE, parts: int = 2,
                 turns: str | None = "issue"):
        tile_mn = check_tile(tile_mn, self.TILES)
        if parts not in (1, 2) or (parts == 2 and tile_mn[1] != BLOCK):
            raise ShapeError(f"parts={parts} with a {tile_mn[0]}x{tile_mn[1]} tile: two parts hold two "
                             f"k-tiles' products next to the fp32 sum (3 x {tile_mn[1] // 2} registers "
                             "per thread); only 128x128 leaves room for that",
                             "use parts=1 for the wider tiles, or tile (128, 128)")
        if turns not in TURNS:
            raise ShapeError(f"turns={turns!r} is not one of {TURNS}",
                             "None (the warpgroups run freely), 'issue' or 'done'")
        super().__init__(tile_mn, cluster_mn, sms, group_m=group_m, stages=stages, epi_tile=epi_tile,
                         epi_stages=fp8_epi_stages(tile_mn))
        self.tile_mnk = (*self.tile_mn, tile_k("float8_e4m3fn"))  # 128: one scale block
        self.parts, self.turns = parts, turns
        # 128x256: the part holds 64 x 128 (two wgmma batches per k-tile), not 64 x 256 (128
        # registers next to acc's 128 would leave none)
        self.WGMMA_N = BLOCK if tile_mn[1] > 192 else None
        self.part_n = self.WGMMA_N or tile_mn[1]
        self.config = ("fp8_blockwise", parts, turns, *self.config)

    def mainloop(self, ring, mma, read, release, groups, tile):
        """acc = the sum over the tile's k-tiles k of (A_k @ B_k.T) * sa[row, k] * sb[k]; returns
        the advanced (read, release) ring states, as ``sm90.mma_tile`` does."""
        loop = self._two_parts if self.parts == 2 else self._one_part
        return loop(ring, mma, read, release, groups, tile)

    @cute.jit
    def _two_parts(self, ring, mma, read, release, groups, tile):
        """Each k-tile's wgmmas write a fresh accumulator (``part0`` for even k, ``part1`` for
        odd), which is then added to ``acc`` with its scales (``_promote``), while the next
        k-tile's wgmmas run."""
        sfa, sfb, m_rows, n_blocks = _group_scales(groups, tile.group, tile.k_end)
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
    def _one_part(self, ring, mma, read, release, groups, tile):
        """Per k-tile and per batch of wgmmas (128x256: two, one per 128 columns): issue into the
        one fresh accumulator ``part`` (in turn with the other warpgroup: ``turns``), wait
        for it, free the stage after the last batch, promote into ``acc``."""
        sfa, sfb, m_rows, n_blocks = _group_scales(groups, tile.group, tile.k_end)
        tidx, _, _ = cute.arch.thread_idx()
        wg = cute.arch.make_warp_uniform(tidx // 128 - PRODUCER_WARPGROUPS)  # consumer warpgroup 0 or 1
        part_mn = (self.tile_mn[0], self.part_n)
        thr = mma.tiled_mma.get_slice(tidx - 128 * PRODUCER_WARPGROUPS)
        rows = thr.partition_C(cute.make_identity_tensor(part_mn))  # each part register's row
        # each register's column, less the thread's offset inside its 8-column group (compile time)
        cols = mma.tiled_mma.get_slice(0).partition_C(cute.make_identity_tensor(part_mn))
        n0 = tile.tile_n * self.tile_mn[1]  # the tile's first column; its first block of B's scales:
        scales = (sfa, sfb, rows, tile.tile_m * self.tile_mn[0], m_rows, cutlass.min(n0 // BLOCK, n_blocks - 1))
        second = cutlass.min(n0 // BLOCK + 1, n_blocks - 1)
        part = cute.make_rmem_tensor(thr.partition_C(cute.make_identity_tensor(part_mn)).shape, self.acc_dtype)
        sa = cute.make_rmem_tensor(part.shape, self.acc_dtype)
        tiled_mma, tCrA, tCrB, acc = mma.tiled_mma, mma.tCrA, mma.tCrB, mma.acc
        batches = cute.size(tCrB, mode=[1])  # 1, or 2 for 128x256
        acc.fill(0.0)
        if cutlass.const_expr(self.turns is not None):
            if wg == 1:  # warpgroup 0 issues first
                cute.arch.barrier_arrive(barrier_id=ORDER_BARRIER, number_of_threads=256)
        for k in cutlass.range(tile.k_end, unroll=1):
            sb0 = _load_scales(scales, sa, k)
            sb1 = sfb[(second, k)]
            ring.consumer_wait(read)
            for h in cutlass.range_constexpr(batches):
                if cutlass.const_expr(self.turns is not None):
                    cute.arch.barrier(barrier_id=ORDER_BARRIER + wg, number_of_threads=256)  # my turn
                tiled_mma = _issue_batch(tiled_mma, tCrA, tCrB, read.index, h, batches, part)
                if cutlass.const_expr(self.turns == "issue"):
                    _pass_turn(wg, k + 1 < tile.k_end or h + 1 < batches)
                warpgroup.wait_group(0)
                if cutlass.const_expr(self.turns == "done"):
                    _pass_turn(wg, k + 1 < tile.k_end or h + 1 < batches)
                if cutlass.const_expr(h == batches - 1):
                    ring.consumer_release(release)
                acc_h = acc[(None, 0, h)]
                if cutlass.const_expr(self.tile_mn[1] % BLOCK == 0):  # each batch in one block
                    _promote_columns(acc_h, part, sa, sb0, sb1, cols, h * part_mn[1])
                elif n0 % BLOCK == 0:  # 128x192, even tiles: the second block from column 128
                    _promote_columns(acc_h, part, sa, sb0, sb1, cols, 0)
                else:  # odd tiles start 64 columns into a block: the second from column 64
                    _promote_columns(acc_h, part, sa, sb0, sb1, cols, self.tile_mn[1] % BLOCK)
            read.advance()
            release.advance()
        return read, release


@cute.jit
def _pass_turn(wg, more):
    """Hand the turn to the other warpgroup; warpgroup 1's last batch of a tile does not (``more``
    false): warpgroup 0 has none left, and the next tile starts with warpgroup 0's turn."""
    if wg == 0 or more:
        cute.arch.barrier_arrive(barrier_id=ORDER_BARRIER + 1 - wg, number_of_threads=256)


@cute.jit
def _issue_batch(tiled_mma, tCrA, tCrB, stage, h: cutlass.Constexpr, batches: cutlass.Constexpr, part):
    """Start part = A_tile @ (B_tile's columns of batch h).T from ring stage ``stage``; the first
    wgmma overwrites. Returns the MMA, whose field changed."""
    warpgroup.fence()
    for kb in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
        tiled_mma.set(warpgroup.Field.ACCUMULATE, kb != 0)
        b = tCrB[(None, None, kb, stage)]
        if cutlass.const_expr(batches > 1):
            b = cute.make_tensor(tCrB[(None, h, kb, stage)].iterator, cute.make_layout((1, 1)))
        cute.gemm(tiled_mma, part, tCrA[(None, None, kb, stage)], b, part)
    warpgroup.commit_group()
    return tiled_mma


@cute.jit
def _promote_columns(acc, part, sa, sb0, sb1, cols, first: cutlass.Constexpr):
    """acc += part * sa[row] * sb, with sb the scale of B's block of each register's column: the
    first block up to column 128 - ``first`` of the part, the second after it (``first``: the
    part's offset past a block boundary). The choice is made at compile time, per register."""
    for i in cutlass.range_constexpr(cute.size(part)):
        sb = sb0 if first + cols[i][1] < BLOCK else sb1
        acc[i] = acc[i] + part[i] * (sa[i] * sb)


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


def _group_scales(groups, g, k_tiles):
    """(sfa, sfb, M_g, N_g/128) of group g: sfa (M_g, k-blocks) M-major, sfb (N_g/128, k-blocks)
    row-major (their ``strides`` columns: SFA's k-block stride, SFB's row stride)."""
    m_rows = groups.shapes[(g, M)]
    n_blocks = (groups.shapes[(g, N)] + BLOCK - 1) // BLOCK
    sfa = cute.make_tensor(operand_pointer(groups, g, SFA, cutlass.Float32, align=4),
                           cute.make_layout((m_rows, k_tiles), stride=(1, groups.strides[(g, SFA)])))
    sfb = cute.make_tensor(operand_pointer(groups, g, SFB, cutlass.Float32, align=4),
                           cute.make_layout((n_blocks, k_tiles), stride=(groups.strides[(g, SFB)], 1)))
    return sfa, sfb, m_rows, n_blocks


