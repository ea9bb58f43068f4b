"""Learner kernels with typical mistakes, for the notebook-01 exercise checker's tests."""

import cutlass.cute as cute


@cute.kernel
def _scalar_kernel(gA: cute.Tensor, gB: cute.Tensor, gC: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    bdim, _, _ = cute.arch.block_dim()
    i = bidx * bdim + tidx
    m, n = gA.shape
    if i < m * n:
        gC[i // n, i % n] = gA[i // n, i % n] + gB[i // n, i % n]


@cute.jit
def scalar_add(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor):
    """Forgot the zipped_divide: one element per thread."""
    m, n = mA.shape
    _scalar_kernel(mA, mB, mC).launch(grid=((m * n + 255) // 256, 1, 1), block=(256, 1, 1))


@cute.kernel
def _typo_kernel(gA: cute.Tensor, gB: cute.Tensor, gC: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    gC[(None, (0, tidx))] = gA[(None, (0, tidx))].load() + gB.load_wrong()


@cute.jit
def typo_add(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor):
    """Does not compile."""
    gA, gB, gC = (cute.zipped_divide(t, (1, 8)) for t in (mA, mB, mC))
    _typo_kernel(gA, gB, gC).launch(grid=(1, 1, 1), block=(32, 1, 1))
