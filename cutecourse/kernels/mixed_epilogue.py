"""The mixed-input GEMM's epilogue: y.T tiles to y, and split-K's reduction by the last split.

The kernel computes y.T (weights on wgmma's M, tokens on N), so a CTA's accumulators are a
(64 weight rows) x (tile_m tokens) tile of y.T: element (n, m) goes to y[m, n]. y is (M, N)
row-major, so y.T is the (N, M) view with strides (1, N): no transpose is ever materialised.

Split-K (``store_split``): split s of a tile writes its fp32 sums into slice s of an (S, M, N)
buffer, then counts itself in the tile's counter (an atomic add, release). The split that finds
S - 1 splits before it is the last: it adds the S slices in order s = 0 .. S-1 (the same order
every run: the same bits every run, unlike atomic adds of floats), rounds to bf16 into y, and
sets the counter back to 0 for the next launch. One kernel, no second pass.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute

from .barriers import Barrier


def transposed_tile(mY, tile_mn, bn, bm):
    """(tile of y.T (rows, tile_m), its (n, m) coordinates, (N, M)): y (M, N) seen as y.T (N, M)."""
    yT = cute.make_tensor(mY.iterator, cute.select(mY.layout, mode=[1, 0]))
    gY = cute.local_tile(yT, tile_mn, (bn, bm))
    cY = cute.local_tile(cute.make_identity_tensor(yT.shape), tile_mn, (bn, bm))
    return gY, cY, yT.shape


@cute.jit
def inside(coord, limits):
    """(n, m) is a real element of y.T: tiles pad M (tokens) and, with 128-row tiles, N."""
    return coord[0] < limits[0] and coord[1] < limits[1]


@cute.jit
def store(mY, acc, thr_mma, tile_mn: cutlass.Constexpr, bn, bm, op: cutlass.Constexpr = None, operands=(),
          last=True):
    """acc -> y (bf16), skipping the elements past M and N that the tile pads (and all of them
    where ``last`` is false). ``op``: an ``epilogue_op.EpilogueOp`` applied to each sum first,
    with its row m and column n in y and its ``operands``. It runs outside the run-time ``if``
    (an op object used inside one would be carried through it), at coordinates clamped to y,
    so that a padded element reads a real operand element and is then not stored."""
    gY, cY, limits = transposed_tile(mY, tile_mn, bn, bm)
    tY, tC = thr_mma.partition_C(gY), thr_mma.partition_C(cY)
    for i in cutlass.range_constexpr(cute.size(acc)):
        value = acc[i]
        if cutlass.const_expr(op is not None):
            n, m = tC[i]
            value = op.apply(value, cutlass.min(m, limits[1] - 1), cutlass.min(n, limits[0] - 1), *operands)
        if inside(tC[i], limits) and last:
            tY[i] = value.to(mY.element_type)


@cute.jit
def store_split(mY, mP, counters, acc, thr_mma, tile_mn: cutlass.Constexpr, bn, bm, split, splits,
                tidx, last_flag, threads: cutlass.Constexpr, op: cutlass.Constexpr = None, operands=()):
    """Split ``split`` of ``splits``: write acc to slice ``split`` of the fp32 partial sums
    ``mP`` (S, M, N); the last split of this tile to arrive adds all slices into y (bf16),
    through ``op`` (:func:`store`). ``last_flag``: one Int32 of smem, to tell every thread what
    thread 0 saw; ``threads``: the consumer threads, which meet on a named barrier (the producer
    warp has finished its loads and takes no part)."""
    gP, cY, limits = transposed_tile(mP[(split, None, None)], tile_mn, bn, bm)
    tP, tC = thr_mma.partition_C(gP), thr_mma.partition_C(cY)
    for i in cutlass.range_constexpr(cute.size(acc)):
        if inside(tC[i], limits):
            tP[i] = acc[i]
    # Every thread's stores, then one release by thread 0: the barrier orders them before it.
    cute.arch.barrier(barrier_id=int(Barrier.EPILOGUE), number_of_threads=threads)
    counter = counters.iterator + (bn + bm * cute.arch.grid_dim()[0])
    if tidx == 0:
        cute.arch.fence_acq_rel_gpu()
        before = cute.arch.atomic_add(counter, cutlass.Int32(1), sem="acq_rel", scope="gpu")
        last_flag[0] = before
        if before == splits - 1:
            cute.arch.atomic_exch(counter, cutlass.Int32(0))  # zero again for the next launch
    cute.arch.barrier(barrier_id=int(Barrier.EPILOGUE), number_of_threads=threads)
    last = last_flag[0] == splits - 1
    total = cute.make_rmem_tensor_like(acc)
    total.fill(0.0)
    if last:
        cute.arch.fence_acq_rel_gpu()
        row = mP.layout.stride[1]  # elements between tokens m and m + 1 (N)
        for s in cutlass.range(splits, unroll=1):
            base = mP.iterator + s * mP.layout.stride[0]
            for i in cutlass.range_constexpr(cute.size(acc)):
                n, m = tC[i]
                if inside(tC[i], limits):
                    # .cg: from L2, where the other splits' stores are (not a stale L1 line)
                    total[i] += cute.arch.load(base + (m * row + n), cutlass.Float32, cop="cg")
    store(mY, total, thr_mma, tile_mn, bn, bm, op, operands, last)
