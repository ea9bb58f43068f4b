"""The FP8 block-scaled grouped GEMM with one fresh accumulator per warpgroup: DeepGEMM's promotion.

``hopper_grouped_gemm_fp8`` keeps two k-tiles' products in flight per consumer warpgroup
(``part0``, ``part1``), so each warpgroup's promotion FFMAs run under its own next wgmmas. That
costs registers: three 64 x N fp32 accumulators per warpgroup (acc, part0, part1) fit the
consumers' 232 registers only for N = 128. This variant (``docs/grouped_fp8_speed.md``)
keeps one: each k-tile's wgmmas write ``part``, the warpgroup waits for them (``wait_group(0)``)
and adds ``part * sa[row] * sb`` into ``acc``. Its own tensor-core work stops meanwhile, so the
tensor cores stay busy only if the *other* consumer warpgroup's wgmmas run during the promotion:
they take turns to issue, through two named barriers as in the ping-pong kernel
(``barriers.MmaTurn``: ``Barrier.MMA_TURN + w`` is warpgroup w's turn), passing the turn as soon
as their wgmmas are issued: both batches wait at the tensor cores, back to back if they run in the
order issued, and each warpgroup promotes while the other's batch runs. The turn is four hooks
(``first_turn``, ``wait_turn``, ``after_issue``, ``after_wait``): a subclass that overrides them
hands the turn over elsewhere, or not at all (notebook 07's exercise 11 compiles two such
variants, ``exercises/nb07_kernels.py``; what each measured: ``docs/grouped_measured.md``).

What one part buys is width: fewer shared-memory and L2 bytes per flop (a k-tile's A rows feed
more columns), the suspect for the 128x128 tile's shortfall against cuBLAS's FP8 GEMM:

* 128x192 (m64n192 wgmmas; acc and part 96 registers each): the tile's columns span two blocks of
  B's 128x128 scales. Tile t starts at column 192t, 0 or 64 columns into a block, so the second
  block starts at column 128 or 64 of the tile: two promotions, each with every register's scale
  of B fixed at compile time (the ``promote`` hook), picked per tile;
* 128x256 (acc 128 registers): one 64 x 256 part would leave no registers, so each k-tile is two
  batches of m64n128 wgmmas into a 64 x 128 part (``WGMMA_N[256] = 128``), each promoted into its half
  of ``acc`` (its 128 columns are one block of B's scales); the stage is freed after the second;
* 128x128: the same tile as the two-part kernel, to compare the promotions alone.

**The scales a k-tile ahead.** Each thread needs four scales per k-tile: sa of its two rows, sb
of the tile's (at most) two blocks of B. Loaded at the top of the k-tile, the products ``sa * sb``
the promotion uses would be computed before the first wgmma is issued (the compiler hoists them
there), so every k-tile's wgmmas would wait for a round trip to L2 or DRAM. Loaded right after
this k-tile's wgmmas are issued, for the next k-tile, they arrive while the tensor cores work. On
an H100 that took the 128x192 kernel from 0.75x to 0.83x cuBLAS's blockwise twin at K = 7168;
with turns and 128x256 tiles, 0.97-1.02x: the launchers' default (``grouped.fp8_kernel``;
``docs/grouped_measured.md``, "DeepGEMM on the same H100").

The producer, the group walk, the tensor maps, the epilogue and the scales' layout are the
two-part kernel's (``BlockScaledGroupedHopperGemm``, whose ``mainloop`` hook this one replaces).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import warpgroup

from ..models.gemm_plan import FP8_TILES
from .barriers import MmaTurn
from .hopper_gemm_persistent import PRODUCER_WARPGROUPS
from .hopper_grouped_gemm_fp8 import BLOCK, BlockScaledGroupedHopperGemm, group_scales, refuse_turn


class OnePartBlockScaledGroupedHopperGemm(BlockScaledGroupedHopperGemm):
    """The FP8 block-scaled grouped GEMM with one fresh accumulator per consumer warpgroup (module
    docstring). ``tile_mn``: one of ``FP8_TILES`` (128x128, 128x192, 128x256). The consumer
    warpgroups take turns to issue through the hooks ``first_turn``, ``wait_turn``,
    ``after_issue`` and ``after_wait``; each batch's product goes into ``acc`` through the hook
    ``promote``."""

    TILES = FP8_TILES
    TILE_MN = (128, 256)  # the launchers' default (module docstring: 1.10-1.13x the two-part kernel)
    WGMMA_N = {256: BLOCK}  # 128x256 tiles issue two batches of N = 128 (see the module docstring)

    @property
    def part_n(self):
        """The fresh accumulator's columns: the wgmma's N."""
        return self.WGMMA_N.get(self.tile_mn[1], self.tile_mn[1])

    @cute.jit
    def mainloop(self, ring, mma, read, release, groups, tile, turn=None):
        """acc = the sum over the tile's k-tiles k of (A_k @ B_k.T) * sa[row, k] * sb[k]. Per
        k-tile and per batch of wgmmas: wait for my turn (``wait_turn``), issue into ``part``,
        pass the turn (``after_issue``), wait for my wgmmas (then ``after_wait``), free the stage
        after the last batch, promote. Returns the advanced (read, release) ring states, as
        ``sm90.mma_tile`` does. ``turn``: the base hook's; only None (``refuse_turn``)."""
        refuse_turn(self, turn)
        sfa, sfb, m_rows, n_blocks = group_scales(groups, tile.group, tile.k_end)
        tidx, _, _ = cute.arch.thread_idx()
        wg = cute.arch.make_warp_uniform(tidx // 128 - PRODUCER_WARPGROUPS)  # consumer warpgroup 0 or 1
        part_mn = (self.tile_mn[0], self.part_n)
        thr = mma.tiled_mma.get_slice(tidx - 128 * PRODUCER_WARPGROUPS)
        rows = thr.partition_C(cute.make_identity_tensor(part_mn))  # each part register's row
        # thread 0's (row, column) of each register, compile-time numbers: every thread's registers
        # lie on the same two rows 8 apart, offset by its first row, and in the same 8-column groups
        # (its column is thread 0's plus 0..7, never across a block boundary)
        at0 = mma.tiled_mma.get_slice(0).partition_C(cute.make_identity_tensor(part_mn))
        n0 = tile.tile_n * self.tile_mn[1]  # the tile's first column: its first block of B's scales,
        scales = (sfa, sfb, rows, tile.tile_m * self.tile_mn[0], m_rows, cutlass.min(n0 // BLOCK, n_blocks - 1))
        second = cutlass.min(n0 // BLOCK + 1, n_blocks - 1)  # and the next (a CTA past N reads the last)
        part = cute.make_rmem_tensor(rows.shape, self.acc_dtype)
        tiled_mma, tCrA, tCrB, acc = mma.tiled_mma, mma.tCrA, mma.tCrB, mma.acc
        batches = cute.size(tCrB, mode=[1])  # 1, or 2 for 128x256
        acc.fill(0.0)
        self.first_turn(wg)
        # the next k-tile's scales are loaded while this k-tile's wgmmas run (two rows of A per
        # thread: ``lo``, ``hi``), so no global load sits between the full barrier and the wgmmas
        lo, hi, sb0, sb1 = _row_scales(scales, second, at0, 0)
        for k in cutlass.range(tile.k_end, unroll=1):
            ring.consumer_wait(read)
            for h in cutlass.range_constexpr(batches):
                self.wait_turn(wg)
                tiled_mma = _issue_batch(tiled_mma, tCrA, tCrB, read.index, h, batches, part)
                self.after_issue(wg, k + 1 < tile.k_end or h + 1 < batches)
                if cutlass.const_expr(h == 0):  # under the wgmmas just issued
                    nlo, nhi, nb0, nb1 = _row_scales(scales, second, at0,
                                                     cutlass.min(k + 1, tile.k_end - 1))
                warpgroup.wait_group(0)
                self.after_wait(wg, k + 1 < tile.k_end or h + 1 < batches)
                if cutlass.const_expr(h == batches - 1):
                    ring.consumer_release(release)
                acc_h = acc[(None, 0, h)]
                sab = (lo, hi, sb0, sb1)
                if cutlass.const_expr(self.tile_mn[1] % BLOCK == 0):  # each batch in one block
                    self.promote(acc_h, part, sab, at0, h * part_mn[1])
                elif n0 % BLOCK == 0:  # 128x192, even tiles: the second block from column 128
                    self.promote(acc_h, part, sab, at0, 0)
                else:  # odd tiles start 64 columns into a block: the second from column 64
                    self.promote(acc_h, part, sab, at0, self.tile_mn[1] % BLOCK)
            lo, hi, sb0, sb1 = nlo, nhi, nb0, nb1
            read.advance()
            release.advance()
        return read, release

    @staticmethod
    @cute.jit
    def promote(acc, part, sab, at0, first: cutlass.Constexpr):
        """Hook, once a batch's wgmmas are done and its stage is freed: acc += part * sa[row] * sb,
        with sa the scale of each register's row (``lo`` or ``hi``, chosen at compile time from
        thread 0's rows) and sb the scale of B's block of its column: the first block up to column
        128 - ``first`` of the part, the second after it (``first``: the part's offset past a block
        boundary), also chosen at compile time, per register. Static: it reads only its arguments
        (notebook 07's exercise 10 writes one)."""
        lo, hi, sb0, sb1 = sab
        for i in cutlass.range_constexpr(cute.size(part)):
            sa = lo if at0[i][0] == at0[0][0] else hi
            sb = sb0 if first + at0[i][1] < BLOCK else sb1
            acc[i] = acc[i] + part[i] * (sa * sb)

    # -- the turn to issue: the hooks ---------------------------------------------------------
    @cute.jit
    def first_turn(self, wg):
        """Hook, at a tile's start: warpgroup 1 hands the first turn to warpgroup 0."""
        if wg == 1:
            MmaTurn(1).pass_on()

    @cute.jit
    def wait_turn(self, wg):
        """Hook, before warpgroup ``wg`` issues a batch of wgmmas: wait for its turn."""
        MmaTurn(wg).wait()

    @cute.jit
    def after_issue(self, wg, more):
        """Hook, once the batch's wgmmas are issued: pass the turn on (``pass_turn``), so that the
        other warpgroup's batch queues behind this one while this one's runs. ``more``: whether
        this warpgroup has another batch in the tile."""
        self.pass_turn(wg, more)

    @cute.jit
    def after_wait(self, wg, more):
        """Hook, once the batch's wgmmas are done (``wait_group(0)``), before its promotion:
        nothing here (the turn has passed already)."""

    @cute.jit
    def pass_turn(self, wg, more):
        """Hand the turn to the other warpgroup; warpgroup 1's last batch of a tile does not
        (``more`` false): warpgroup 0 has none left, and the next tile starts with warpgroup 0's
        turn. What ``after_issue`` calls, and a variant's hook may call instead."""
        if wg == 0 or more:
            MmaTurn(wg).pass_on()


@cute.jit
def _issue_batch(tiled_mma, tCrA, tCrB, stage, h: cutlass.Constexpr, batches: cutlass.Constexpr, part):
    """Start part = A_tile @ (B_tile's columns of batch h).T from ring stage ``stage``; the first
    wgmma overwrites. Returns the MMA, whose field changed."""
    warpgroup.fence()
    for kb in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
        tiled_mma.set(warpgroup.Field.ACCUMULATE, kb != 0)
        b = tCrB[(None, None, kb, stage)]
        if cutlass.const_expr(batches > 1):  # batch h's wgmma descriptor, as a (1, 1) fragment
            b = cute.make_tensor(tCrB[(None, h, kb, stage)].iterator, cute.make_layout((1, 1)))
        cute.gemm(tiled_mma, part, tCrA[(None, None, kb, stage)], b, part)
    warpgroup.commit_group()
    return tiled_mma


@cute.jit
def _row_scales(scales, second, at0, k):
    """(sa of this thread's first row, sa of its second row, sb of the tile's first block of B's
    scales, sb of the next block) at k-tile ``k``. A thread's registers lie on two rows of the
    part, 8 apart (``at0``: thread 0's, compile-time numbers; ``rows``: this thread's)."""
    sfa, sfb, rows, first_row, m_rows, first_block = scales
    hi_i = next(i for i in range(cute.size(at0)) if at0[i][0] != at0[0][0])
    lo = sfa[(cutlass.min(first_row + rows[0][0], m_rows - 1), k)]
    hi = sfa[(cutlass.min(first_row + rows[hi_i][0], m_rows - 1), k)]
    return lo, hi, sfb[(first_block, k)], sfb[(second, k)]
