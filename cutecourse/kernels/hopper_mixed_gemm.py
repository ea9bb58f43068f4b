"""Mixed-input GEMM on Hopper: y = x @ W'.T with W' int4 (group scales) and x, y bf16 (or fp16).

Only wgmma's A operand may come from registers, and the int4 weights must pass through
registers to become bf16; so the weights are A and the activations B, and the kernel computes
the transposed product y.T (N x M) = W' (N x K) @ x.T. That also puts the batch M on wgmma's N,
which can be as small as 8: a decode step with M = 1 wastes 7/8 of a narrow MMA, not 63/64 of
a 64-row one.

One CTA computes a ``rows`` x ``tile_m`` tile of y.T (weight rows x tokens) over its share of
K, with one consumer warpgroup per 64 weight rows (``warpgroups`` = 1 or 2) and one producer
warp. Per k-tile of 256:

* the producer warp TMA-loads the packed weights (``rows`` x 32 words: 8 KB per 64 rows), the x tile
  (``tile_m`` x 256 bf16), the group scales (and zero points) of those rows into one stage of a
  smem ring;
* each warpgroup waits for the stage; each thread reads its 16 words (``quant/reorder.py``: its
  nibbles of a wgmma A fragment are one word, 4 consecutive words per 64 columns), converts
  them to 64 bf16 registers (``int4_convert.py``: lop3, sub, mul; no cvt) and issues 16 wgmmas
  with A from those registers and B (x, shared by the warpgroups) from smem.

A k-tile is converted and multiplied in 4 chunks of 64 columns: convert a chunk (16 registers),
issue its 4 wgmmas, and wait for them before the next chunk's registers are written. Keeping one
chunk's wgmmas in flight while the next converts (``wait_group(1)``) is correct, but ptxas
cannot prove it: it reports "wgmma.mma_async instructions are serialized due to non wgmma
instructions defining input registers" (C7513) and makes every wgmma wait, which is slower
than waiting once per chunk. So the overlap comes from occupancy instead: at about 50 registers
a thread and at most a third of an SM's smem, 3 or 4 CTAs share an SM (2 at tile_m = 64), and
while one converts the others' wgmmas and TMA loads run. (CUTLASS's answer is warp specialization: one
warpgroup converts while the other's wgmmas run.) The counter-example is the variant "overlap"
(``mixed_variants.py``: ``IN_FLIGHT = 1``), compiled and read in tests/test_mixed_variants.py.

Split-K (``split_k=True``, the planner's splits > 1: ``mixed_input.plan``): the grid's third
dimension splits the k-tiles; each split writes its fp32 partial sums, and a tile's last split to
finish adds them into y (``mixed_epilogue.py``). The number of splits stays a run-time value (the
buffers' first size): one compiled kernel serves every split count. It stays an argument, not a
subclass: all it changes is two operands (``operands()``) and which store runs at the end, and a
subclass would need a build function to pick it from the plan.

Zero points (``zero_point=True``) stay an argument for the same reason: all that follows is one
more operand (``zeros``, uint8, one per group and weight row), its TMA load beside the scales',
and the register the conversion subtracts (the zero read from smem instead of 8); the quantizer
(``quant.int4``) decides it, not a kernel variant. So do fp16 activations (``dtype="float16"``:
x's dtype): x, the scales and y fp16, the wgmmas f16 x f16 -> f32, the conversion with fp16's
magic number (``int4_convert.py``); the bytes, the instruction counts and the loop are the same.
A variant that changes what the loop does is a subclass overriding a hook or setting a class
constant (``IN_FLIGHT``, ``CONVERT_MULTIPLIES``), named in ``mixed_variants.py``'s tables.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import cpasync, warpgroup

from ..quant.reorder import BLOCK_K, BLOCK_N, SLICE_K, SLICES
from . import int4_convert, mixed_epilogue
from .configured import Configured
from .epilogue_op import described
from .mixed_tiles import (BARRIER_BYTES, SM_SMEM, SMEM_BYTES, TILE_K, TILE_MS, WORDS_K,  # noqa: F401
                          check_group, groups_per_tile, stage_bytes, stage_smem)
from .operands import Tensor

#: A k-tile is converted and multiplied in 4 chunks of 64 columns (one reorder block each).
CHUNKS = TILE_K // BLOCK_K
#: Threads of a warpgroup; a CTA has 1 or 2 consumer warpgroups (``warpgroups``), each owning 64
#: weight rows, and one producer warp after them (``PRODUCER_THREADS``) that only issues TMA loads.
WG_THREADS = 128
PRODUCER_THREADS = 32


class HopperMixedGemm(Configured):
    """y = x @ W'.T, W' = int4 weights x group scales (``cutecourse.quant``), one or two
    consumer warpgroups.

    ``tile_m``: tokens per CTA (wgmma's N: 8 .. 256). ``group_size``: weights per scale (part
    of the compiled code: the scale index of each 16-column slice is a constant).
    ``zero_point``: the kernel reads uint8 zero points (else the zero is 8). ``split_k``: the
    grid splits K, and the kernel takes the split-K buffers (``mixed_epilogue.store_split``).
    ``warpgroups``: 64 weight rows each. ``stages``: ring depth (default: a third of an SM's
    smem). ``dtype``: x's, the scales' and y's, ``"bfloat16"`` or ``"float16"``. Its operands are
    not a dense GEMM's A, B, C: :meth:`operands` describes them. A keyword left None is the
    class's default (``TILE_M`` ...: ``configured.py``).

    Its hooks, each with the same signature in every subclass: ``weights`` (the packed weights'
    layout, on the host), ``load`` (one k-tile's TMA loads), ``convert`` (one chunk of int4 words
    to bf16 (fp16) registers) and ``mma`` (one chunk's wgmmas); ``consume`` is the loop that calls
    them; ``store_tile`` the epilogue. ``split_k``, ``zero_point`` and ``dtype`` stay keywords (the
    module docstring says why). A variant is named in ``mixed_variants.py`` (``variant=``).
    """

    #: wgmma batches (chunks) left in flight while the next chunk converts: 0, every chunk's
    #: wgmmas are done before its registers are rewritten (the module docstring says why not 1).
    IN_FLIGHT = 0
    #: ``convert`` multiplies by the group scales; False: q - zero (``mixed_deferred.py``).
    CONVERT_MULTIPLIES = True
    #: The defaults of the keywords left None (``configured.py``): a variant sets those it changes.
    TILE_M, GROUP_SIZE, ZERO_POINT, SPLIT_K, WARPGROUPS, DTYPE = 16, 128, False, False, 1, "bfloat16"

    def __init__(self, tile_m: int | None = None, *, group_size: int | None = None, zero_point: bool | None = None,
                 split_k: bool | None = None, warpgroups: int | None = None, stages: int | None = None,
                 epilogue_op=None, dtype: str | None = None):
        from ..errors import ShapeError

        a = self.arguments  # these arguments, a None replaced by the class's default (configured.py)
        tile_m, group_size, zero_point, split_k, warpgroups = (
            a[k] for k in ("tile_m", "group_size", "zero_point", "split_k", "warpgroups"))
        int4_convert.check_dtype(a["dtype"])
        self.dtype = a["dtype"]

        if tile_m not in TILE_MS:
            raise ShapeError(f"tile_m={tile_m} is not a wgmma N this kernel takes", f"use one of {TILE_MS}")
        check_group(group_size)
        self.tile_m, self.group_size, self.zero_point, self.split_k = tile_m, group_size, zero_point, split_k
        if warpgroups not in (1, 2):
            raise ShapeError(f"warpgroups={warpgroups}: the kernel has 1 or 2 consumer warpgroups", "use 1 or 2")
        self.warpgroups, self.rows, self.threads = warpgroups, BLOCK_N * warpgroups, WG_THREADS * warpgroups
        per = stage_smem(tile_m, group_size, zero_point, warpgroups)
        fit = (SMEM_BYTES - BARRIER_BYTES) // per
        self.gpt = groups_per_tile(group_size)
        # Default: the most stages (2 to 8) with which at least 3 CTAs share an SM (1 KB of its
        # smem reserved per CTA; 4 where 2 stages are that small, e.g. tile_m = 16 with two
        # warpgroups; at tile_m = 64 even 2 stages let only 2 share it): while one converts,
        # the others' wgmmas and loads run.
        self.stages = stages if stages is not None else 2
        while stages is None and self.stages < 8:
            self.stages += 1
            if 3 * (self.smem_bytes() + 1024) > SM_SMEM:
                self.stages -= 1
                break
        if not 2 <= self.stages <= fit:
            raise ShapeError(f"{self.stages} stages of {per} bytes do not fit {SMEM_BYTES} bytes of smem",
                             f"use 2 .. {fit} stages or a smaller tile_m")
        self.epilogue_op = epilogue_op  # applied to each fp32 sum of y before it becomes bf16 (fp16)

    def smem_bytes(self) -> int:
        """Shared memory one CTA takes, as ``SharedStorage`` lays it out (each buffer at its
        alignment), plus 1 KB for the alignment of the storage's start: what decides how many
        CTAs share an SM (``mixed_input.ctas_per_sm``)."""
        stages, rows, gpt = self.stages, self.rows, self.gpt
        fields = ((8, 16 * stages), (1024, rows * WORDS_K * 4 * stages), (1024, self.tile_m * TILE_K * 2 * stages),
                  (128, gpt * rows * 2 * stages), (128, (stages - 1) * max(128, gpt * rows) + gpt * rows), (4, 4))
        end = 0
        for align, size in fields:
            end = -(-end // align) * align + size
        return end + 1024

    def operands(self):
        """The tensors :meth:`__call__` takes, before and after the stream, as
        ``gemm_launch.Entry`` fakes and launches them: sizes are symbols (run-time values)."""
        before = (Tensor("x", self.dtype, ("M", "K")), Tensor("packed", "int32", ("N", "K8"), ("ldw",)),
                  Tensor("scales", self.dtype, ("groups", "N"), ("lds",)), Tensor("y", self.dtype, ("M", "N")))
        after = ()
        if self.split_k:  # scratch the entry allocates: fp32 slices, one per split, and a counter per tile
            after = (Tensor("partials", "float32", ("S", "M", "N"), ("ldp_split", "ldp"), scratch=True),
                     Tensor("counters", "int32", ("tiles",), scratch=True, zero=True))
        if self.zero_point:
            after += (Tensor("zeros", "uint8", ("groups", "N"), ("ldz",)),)
        # the epilogue op's operands (``epilogue_op.Operand``): one value per column of y (N),
        # per row (M) or one in all
        sizes = {"col": "N", "row": "M", "scalar": "one"}
        after += tuple(Tensor(o.name, o.dtype, (sizes[o.kind],)) for o in described(self.epilogue_op))
        return before, after

    # -- host side ---------------------------------------------------------------------------
    @cute.jit
    def __call__(self, x: cute.Tensor, w: cute.Tensor, scales: cute.Tensor, y: cute.Tensor, stream,
                 *extra):
        """x (M, K), w (N, K/8) int32 packed, scales (K/group, N), y (M, N): x, scales, y bf16 (fp16).
        ``extra``: with ``split_k``, the fp32 partial sums (S, M, N) and the tiles' counters (int32,
        zero, one per (N / 64) x (M / tile_m) tile); then, with ``zero_point``, zeros (K/group, N)
        uint8; then the epilogue op's operands."""
        w = self.weights(w)
        partials, counters, zeros = y, y, extra  # (y: placeholders the kernel does not touch)
        if cutlass.const_expr(self.split_k):
            partials, counters, zeros = extra[0], extra[1], extra[2:]
        ops = zeros[1 if self.zero_point else 0:]  # the epilogue op's operands
        ab = int4_convert.TYPES[self.dtype]  # x, the converted weights, the scales and y
        self.tiled_mma = sm90_utils.make_trivial_tiled_mma(
            ab, ab, warpgroup.OperandMajorMode.K, warpgroup.OperandMajorMode.K,
            cutlass.Float32, (self.warpgroups, 1, 1), tiler_mn=(BLOCK_N, self.tile_m),
            a_source=warpgroup.OperandSource.RMEM)
        row_major = utils.LayoutEnum.ROW_MAJOR
        # Packed weights: 64 rows x 32 words (128 B), 128-byte swizzled like any K-major operand.
        # Thread t reads row t / 2, 16 bytes at chunk 2 c + t % 2: a quarter-warp's 8 reads land
        # on 4 chunks, two each (a 2-way bank conflict, docs/mixed_measured.md).
        sW_layout = sm90_utils.make_smem_layout_a(row_major, (self.rows, self.tile_m, WORDS_K), cutlass.Int32,
                                                  self.stages)
        sX_layout = sm90_utils.make_smem_layout_b(row_major, (self.rows, self.tile_m, TILE_K), ab, self.stages)
        # Scales (and zeros): a (groups, 64) box of the (K/group, N) tensor, rows of 128 (64) B.
        sS_layout = cute.make_ordered_layout((self.gpt, self.rows, self.stages), order=(1, 0, 2))
        # uint8 zeros: a stage of one group is 64 bytes; TMA writes smem at 128-byte alignment
        sZ_layout = cute.make_layout((self.gpt, self.rows, self.stages),
                                     stride=(self.rows, 1, max(128, self.gpt * self.rows)))
        g2s = cpasync.CopyBulkTensorTileG2SOp()
        tma_w, gW = cpasync.make_tiled_tma_atom(g2s, w, cute.slice_(sW_layout, (None, None, 0)),
                                                (self.rows, WORDS_K))
        tma_x, gX = cpasync.make_tiled_tma_atom(g2s, x, cute.slice_(sX_layout, (None, None, 0)),
                                                (self.tile_m, TILE_K))
        tma_s, gS = cpasync.make_tiled_tma_atom(g2s, scales, cute.slice_(sS_layout, (None, None, 0)),
                                                (self.gpt, self.rows))
        tma_z, gZ = tma_s, gS
        if cutlass.const_expr(self.zero_point):
            tma_z, gZ = cpasync.make_tiled_tma_atom(g2s, zeros[0], cute.slice_(sZ_layout, (None, None, 0)),
                                                    (self.gpt, self.rows))
        self.tx_bytes = stage_bytes(self.tile_m, self.group_size, self.zero_point, self.warpgroups)

        @cute.struct
        class SharedStorage:
            barriers: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
            sW: cute.struct.Align[cute.struct.MemRange[cutlass.Int32, cute.cosize(sW_layout)], 1024]
            sX: cute.struct.Align[cute.struct.MemRange[ab, cute.cosize(sX_layout)], 1024]
            sS: cute.struct.Align[cute.struct.MemRange[ab, cute.cosize(sS_layout)], 128]
            sZ: cute.struct.Align[cute.struct.MemRange[cutlass.Uint8, cute.cosize(sZ_layout)], 128]
            last: cute.struct.MemRange[cutlass.Int32, 1]  # split-K: what the tile's counter said

        self.shared_storage = SharedStorage
        # One CTA per (64 weight rows, tile_m tokens, split): N / 64 x ceil(M / tile_m) x S.
        splits = partials.shape[0] if cutlass.const_expr(self.split_k) else 1
        grid = (cute.ceil_div(w.shape[0], self.rows), cute.ceil_div(x.shape[0], self.tile_m), splits)
        block = [self.threads + PRODUCER_THREADS, 1, 1]
        self.kernel(tma_w, gW, tma_x, gX, tma_s, gS, tma_z, gZ, y, partials, counters, self.tiled_mma,
                    sW_layout, sX_layout, sS_layout, sZ_layout, ops).launch(grid=grid, block=block, stream=stream)

    def weights(self, w):
        """The packed weights as TMA reads them: here (N, K/8) row-major words. A subclass may
        return another layout of the same (N, K/8) tensor (``cute.make_tensor(w.iterator, ...)``);
        ``mixed_variants.TiledMixedGemm`` stores each TMA box contiguously."""
        return w

    # -- device side -------------------------------------------------------------------------
    @cute.kernel
    def kernel(self, tma_w: cute.CopyAtom, mW: cute.Tensor, tma_x: cute.CopyAtom, mX: cute.Tensor,
               tma_s: cute.CopyAtom, mS: cute.Tensor, tma_z: cute.CopyAtom, mZ: cute.Tensor,
               mY: cute.Tensor, mP: cute.Tensor, mCounters: cute.Tensor, tiled_mma: cute.TiledMma,
               sW_layout: cute.ComposedLayout, sX_layout: cute.ComposedLayout, sS_layout: cute.Layout,
               sZ_layout: cute.Layout, ops):
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        is_producer = warp_idx == self.threads // 32  # the warp after the consumer warpgroups
        if is_producer:
            cpasync.prefetch_descriptor(tma_w)
            cpasync.prefetch_descriptor(tma_x)
            cpasync.prefetch_descriptor(tma_s)
            if cutlass.const_expr(self.zero_point):
                cpasync.prefetch_descriptor(tma_z)
        bn, bm, split = cute.arch.block_idx()
        _, _, splits = cute.arch.grid_dim()

        storage = utils.SmemAllocator().allocate(self.shared_storage)
        ring = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.barriers.data_ptr(), num_stages=self.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.threads // 32),
            tx_count=self.tx_bytes, cta_layout_vmnk=cute.make_layout((1, 1, 1, 1)), defer_sync=True)
        pipeline.pipeline_init_arrive(cluster_shape_mn=(1, 1), is_relaxed=True)
        sW = storage.sW.get_tensor(sW_layout.outer, swizzle=sW_layout.inner)
        sX = storage.sX.get_tensor(sX_layout.outer, swizzle=sX_layout.inner)
        sS = storage.sS.get_tensor(sS_layout)
        sZ = storage.sZ.get_tensor(sZ_layout)

        # This CTA's k-tiles of W and x, its scale rows; its share of K (split-K).
        gW = cute.local_tile(mW, (self.rows, WORDS_K), (bn, None))    # (rows, 32, k_tiles)
        gX = cute.local_tile(mX, (self.tile_m, TILE_K), (bm, None))   # (tile_m, 256, k_tiles)
        gS = cute.local_tile(mS, (self.gpt, self.rows), (None, bn))   # (gpt, rows, scale tiles)
        gZ = cute.local_tile(mZ, (self.gpt, self.rows), (None, bn))
        k_tiles = cute.size(gX, mode=[2])
        per_split = cute.ceil_div(k_tiles, splits)
        k_first = split * per_split
        k_count = cutlass.max(cutlass.min(k_first + per_split, k_tiles) - k_first, 0)

        one = cute.make_layout(1)
        tWs, tWg = cpasync.tma_partition(tma_w, 0, one, cute.group_modes(sW, 0, 2), cute.group_modes(gW, 0, 2))
        tXs, tXg = cpasync.tma_partition(tma_x, 0, one, cute.group_modes(sX, 0, 2), cute.group_modes(gX, 0, 2))
        tSs, tSg = cpasync.tma_partition(tma_s, 0, one, cute.group_modes(sS, 0, 2), cute.group_modes(gS, 0, 2))
        tZs, tZg = cpasync.tma_partition(tma_z, 0, one, cute.group_modes(sZ, 0, 2), cute.group_modes(gZ, 0, 2))

        # The MMA: A (weights) a register fragment, 64 registers (4 per 16-column slice);
        # B (x) smem descriptors.
        thr_mma = tiled_mma.get_slice(tidx)
        frag = tiled_mma.make_fragment_A(tiled_mma.partition_shape_A((self.rows, TILE_K)))  # (8, 1, 16)
        tCrX = tiled_mma.make_fragment_B(thr_mma.partition_B(sX))
        c_tile = cute.make_identity_tensor((self.rows, self.tile_m))
        acc = cute.make_rmem_tensor(thr_mma.partition_C(c_tile).shape, cutlass.Float32)
        acc.fill(0.0)
        tiled_mma.set(warpgroup.Field.ACCUMULATE, True)

        pipeline.pipeline_init_wait(cluster_shape_mn=(1, 1))

        prod = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        cons = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        loads = (tma_w, tWg, tWs, tma_x, tXg, tXs, tma_s, tSg, tSs, tma_z, tZg, tZs)
        if is_producer:
            # The producer warp only loads: it refills a stage the moment the consumers release
            # it, so every stage of the ring is in flight while they convert and multiply.
            for _ in cutlass.range(k_count, unroll=1):
                ring.producer_acquire(prod)
                self.load(ring, loads, prod, k_first)
                prod.advance()
        else:
            self.consume(ring, cons, k_count, sW, sS, sZ, frag, tiled_mma, tCrX, acc, tidx)
            split_k = None  # with split_k: what the split's store and the last split's reduction need
            if cutlass.const_expr(self.split_k):
                split_k = (mP, mCounters, split, splits, tidx, storage.last.get_tensor(cute.make_layout(1)))
            self.store_tile(acc, thr_mma, (bn, bm), mY, split_k, ops)

    @cute.jit
    def consume(self, ring, cons, k_count, sW, sS, sZ, frag, tiled_mma, tCrX, acc, tidx):
        """The consumer warpgroups: per k-tile, wait for its stage, then convert and multiply it
        chunk by chunk, releasing the previous k-tile's stage once its wgmmas are done."""
        # This thread's warpgroup owns rows 64 wg .. 64 wg + 63 of the tile; in them, row g of its
        # fragment (and g + 8) is (warp in the warpgroup) * 16 + lane / 4.
        wg, t = tidx // WG_THREADS, tidx % WG_THREADS
        lane_row = wg * BLOCK_N + (t // 32) * 16 + (t % 32) // 4
        released = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        in_flight = self.IN_FLIGHT  # wgmma batches (chunks) left running while converting
        for k in cutlass.range(k_count, unroll=1):
            ring.consumer_wait(cons)
            for chunk in cutlass.range_constexpr(CHUNKS):
                # The previous chunk's wgmmas are done before this chunk's registers are written
                # (with IN_FLIGHT = 1, all but the previous chunk's; see the module docstring).
                warpgroup.wait_group(in_flight)
                if cutlass.const_expr(chunk == in_flight):
                    if k > 0:  # every wgmma of k-tile k - 1 is done: its stage is free
                        ring.consumer_release(released)
                        released.advance()
                self.convert(sW, sS, sZ, cons.index, frag, wg, t, lane_row, chunk)
                self.mma(tiled_mma, frag, tCrX, acc, cons.index, chunk)
            cons.advance()
        warpgroup.wait_group(0)
        if k_count > 0:
            ring.consumer_release(released)

    # -- the steps: hooks a variant overrides (same signature) -------------------------------
    @cute.jit
    def store_tile(self, acc, thr_mma, tile, mY, split_k, ops):
        """The sums ``acc`` of this CTA's tile ``tile`` = (bn, bm) of y.T (weight rows x tokens) into y,
        through the epilogue op (its operands ``ops``): directly (``mixed_epilogue.store``), or with
        ``split_k`` = (partials, counters, split, splits, tidx, a smem flag) into the split's fp32
        slice, the tile's last split adding the slices into y (``mixed_epilogue.store_split``)."""
        bn, bm = tile
        tile_mn = (self.rows, self.tile_m)
        if cutlass.const_expr(self.split_k):
            mP, counters, split, splits, tidx, last = split_k
            mixed_epilogue.store_split(mY, mP, counters, acc, thr_mma, tile_mn, bn, bm, split, splits, tidx, last,
                                       self.threads, self.epilogue_op, ops)
        else:
            mixed_epilogue.store(mY, acc, thr_mma, tile_mn, bn, bm, self.epilogue_op, ops)

    @cute.jit
    def load(self, ring, loads, state, k_first):
        """TMA-load k-tile k_first + state.count (weights, x, scales, zeros) into stage state.index."""
        tma_w, tWg, tWs, tma_x, tXg, tXs, tma_s, tSg, tSs, tma_z, tZg, tZs = loads
        k = k_first + state.count
        bar = ring.producer_get_barrier(state)
        cute.copy(tma_w, tWg[(None, k)], tWs[(None, state.index)], tma_bar_ptr=bar)
        cute.copy(tma_x, tXg[(None, k)], tXs[(None, state.index)], tma_bar_ptr=bar)
        # Scale tile of k-tile k: k itself when a k-tile holds gpt groups, else the group it lies in.
        g = k if cutlass.const_expr(self.group_size <= TILE_K) else k * TILE_K // self.group_size
        cute.copy(tma_s, tSg[(None, g)], tSs[(None, state.index)], tma_bar_ptr=bar)
        if cutlass.const_expr(self.zero_point):
            cute.copy(tma_z, tZg[(None, g)], tZs[(None, state.index)], tma_bar_ptr=bar)

    @cute.jit
    def convert(self, sW, sS, sZ, stage, frag, wg, t, lane_row, chunk: cutlass.Constexpr[int]):
        """This thread's 4 words of 64-column block ``chunk`` -> 16 registers of its A fragment (bf16
        or fp16: ``dtype``)."""
        regs = cute.recast_tensor(frag, cutlass.Int32)  # 4 registers per 16-column slice
        sS16 = cute.recast_tensor(sS, cutlass.Uint16)  # the scales' bit patterns
        # the 4 consecutive words (16 bytes) of thread t: row t / 2, word column 8 chunk + 4 (t % 2)
        words = cute.make_rmem_tensor((1, SLICES), cutlass.Int32)
        src = cute.local_tile(sW[(None, None, stage)], (1, SLICES), (wg * BLOCK_N + t // 2, 2 * chunk + t % 2))
        cute.autovec_copy(src, words)
        rows = (lane_row, lane_row + 8)
        per_group = {}  # scale (and zero) registers, loaded once per group of this block
        for s in cutlass.range_constexpr(SLICES):
            kk = chunk * SLICES + s  # 16-column slice of the k-tile
            grp = (kk * SLICE_K) // self.group_size if cutlass.const_expr(self.gpt > 1) else 0
            if cutlass.const_expr(grp not in per_group):
                ss = None  # no scale: convert_word writes q - zero
                if cutlass.const_expr(self.CONVERT_MULTIPLIES):
                    ss = tuple(int4_convert.both_halves(sS16[(grp, r, stage)]) for r in rows)
                zz = int4_convert.symmetric_zero(self.dtype)  # 136.0 twice (fp16: 1032.0)
                if cutlass.const_expr(self.zero_point):
                    zz = tuple(int4_convert.zero_word(sZ[(grp, r, stage)], self.dtype) for r in rows)
                per_group[grp] = (zz, ss)
            zz, ss = per_group[grp]
            int4_convert.convert_word(words[0, s], zz, ss, regs, kk * 4, self.dtype)

    @cute.jit
    def mma(self, tiled_mma, frag, tCrX, acc, stage, chunk: cutlass.Constexpr[int]):
        """acc += the chunk's 4 wgmmas (64 columns of K): A from ``frag``, B from ring stage
        ``stage``; one commit group, so ``wait_group`` counts chunks."""
        warpgroup.fence()  # the A registers and the accumulators are written before the wgmmas read them
        for s in cutlass.range_constexpr(SLICES):
            kb = chunk * SLICES + s
            cute.gemm(tiled_mma, acc, frag[(None, None, kb)], tCrX[(None, None, kb, stage)], acc)
        warpgroup.commit_group()
