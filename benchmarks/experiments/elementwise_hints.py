"""Experiment (notebook 01 tuning): do vector width, block size or cache hints move elementwise add?

Each variant is the vectorized kernel with one change. Run on a GPU:
    python benchmarks/experiments/elementwise_hints.py [--out DIR]

Writes ``experiment_elementwise_hints_<size>.json``. The three committed files,
``..._run1.json``, ``..._run2.json``, ``..._run3.json`` (renamed by hand), each ran other
``VARIANTS`` and ``ILP`` lists (the comment above ``VARIANTS`` lists those of ``_run1`` and
``_run2``; the lists as they stand are ``_run3``'s).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cutecourse  # noqa: E402,F401
import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402

from cutecourse import bench  # noqa: E402


@cute.kernel
def hinted_kernel(gA: cute.Tensor, gB: cute.Tensor, gC: cute.Tensor, hint: cutlass.Constexpr,
                  bits: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    bdim, _, _ = cute.arch.block_dim()
    i = bidx * bdim + tidx
    m, n_tiles = gA.shape[1]
    if i < m * n_tiles:
        mi, ni = i // n_tiles, i % n_tiles
        tA, tB, tC = gA[(None, (mi, ni))], gB[(None, (mi, ni))], gC[(None, (mi, ni))]
        mode = cute.nvgpu.LoadCacheMode.STREAMING if hint == "cs" else cute.nvgpu.LoadCacheMode.ALWAYS
        evict = {"noalloc": cute.nvgpu.CacheEvictionPriority.NO_ALLOCATE,
                 "last": cute.nvgpu.CacheEvictionPriority.EVICT_LAST}.get(
                     hint, cute.nvgpu.CacheEvictionPriority.EVICT_NORMAL)
        prefetch = {"l2pf128": cute.nvgpu.L2PrefetchSize.SIZE_128B,
                    "l2pf256": cute.nvgpu.L2PrefetchSize.SIZE_256B}.get(hint, cute.nvgpu.L2PrefetchSize.NONE)
        ld = cute.make_copy_atom(cute.nvgpu.CopyG2ROp(), gA.element_type, num_bits_per_copy=bits,
                                 load_cache_mode=mode, l1c_evict_priority=evict, l2_prefetch_size=prefetch)
        rA = cute.make_rmem_tensor_like(tA)
        rB = cute.make_rmem_tensor_like(tB)
        cute.copy(ld, tA, rA)
        cute.copy(ld, tB, rB)
        rC = cute.make_rmem_tensor_like(tC)
        rC.store(rA.load() + rB.load())
        st_mode = cute.nvgpu.StoreCacheMode.STREAMING if hint == "st_cs" else cute.nvgpu.StoreCacheMode.WRITE_BACK
        st = cute.make_copy_atom(cute.nvgpu.CopyR2GOp(), gA.element_type, num_bits_per_copy=bits,
                                 store_cache_mode=st_mode)
        cute.copy(st, rC, tC)


@cute.jit
def hinted_add(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, elems: cutlass.Constexpr,
               threads: cutlass.Constexpr, hint: cutlass.Constexpr):
    tiler = (1, elems)
    gA, gB, gC = (cute.zipped_divide(t, tiler) for t in (mA, mB, mC))
    n = cute.size(gC, mode=[1])
    bits = min(128, elems * mA.element_type.width)
    hinted_kernel(gA, gB, gC, hint, bits).launch(grid=((n + threads - 1) // threads, 1, 1),
                                                 block=(threads, 1, 1))


@cute.kernel
def ilp_kernel(gA: cute.Tensor, gB: cute.Tensor, gC: cute.Tensor, unroll: cutlass.Constexpr):
    """Each thread adds `unroll` tiles, one grid-width apart; all loads are issued before any store."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    bdim, _, _ = cute.arch.block_dim()
    gdim, _, _ = cute.arch.grid_dim()
    i = bidx * bdim + tidx
    m, n_tiles = gA.shape[1]
    loaded = []
    for k in cutlass.range_constexpr(unroll):
        j = i + k * gdim * bdim
        coord = (j // n_tiles, j % n_tiles)
        loaded.append((gA[(None, coord)].load(), gB[(None, coord)].load(), coord))
    for a, b, coord in loaded:
        gC[(None, coord)] = a + b


@cute.jit
def ilp_add(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, elems: cutlass.Constexpr,
            threads: cutlass.Constexpr, unroll: cutlass.Constexpr):
    tiler = (1, elems)
    gA, gB, gC = (cute.zipped_divide(t, tiler) for t in (mA, mB, mC))
    n = cute.size(gC, mode=[1])  # the experiment needs n % (threads * unroll) == 0
    ilp_kernel(gA, gB, gC, unroll).launch(grid=(n // (threads * unroll), 1, 1), block=(threads, 1, 1))


def compile_target(elems=8, threads=256, hint="none", m=1024, n=1024):
    from cutlass.cute.runtime import make_fake_compact_tensor

    t = make_fake_compact_tensor(cutlass.Float16, (m, n), stride_order=(1, 0), assumed_align=16)
    return hinted_add, (t, t, t), {"elems": elems, "threads": threads, "hint": hint}


# (elems, threads, cache hint) -- _run1.json: 4x512 none 3112 GB/s (1.014x torch.add),
# 8x256 none 3061, and the streaming / no-allocate hints cost 3% (2972).
# _run2.json: 8x512 3052, 4x1024 3055, 2x1024 2547; grid-stride ILP (2 or 4 tiles
# per thread, loads before stores) 3027-3049: none beat 4x512.
# _run3.json (the lists below): 4x384 3107, 4x768 2917; L2-prefetch, evict-last and
# streaming-store hints on 4x512 3104-3112 against its 3111 without: a tie at best.
VARIANTS = [(4, 512, "none"), (4, 384, "none"), (4, 768, "none"), (4, 512, "l2pf256"),
            (4, 512, "l2pf128"), (8, 256, "l2pf256"), (4, 512, "st_cs"), (4, 512, "last")]
# (elems, threads, unroll): the grid-stride ILP kernel.
ILP = []


def main() -> int:
    import argparse

    import torch
    from cutlass.cute.runtime import from_dlpack

    p = argparse.ArgumentParser()
    p.add_argument("--out", default=str(bench.RESULTS_DIR))
    p.add_argument("--size", type=int, default=32768)
    args = p.parse_args()
    n = args.size
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.float16) for _ in range(2))
    c = torch.empty_like(a)
    cargs = tuple(from_dlpack(t, assumed_align=16) for t in (a, b, c))
    cases = [bench.Case("torch.add", lambda: torch.add(a, b, out=c))]
    for elems, threads, hint in VARIANTS:
        fn = cute.compile(hinted_add, *cargs, elems=elems, threads=threads, hint=hint)
        c.fill_(float("nan"))
        fn(*cargs)
        torch.testing.assert_close(c, a + b, rtol=0, atol=0)
        cases.append(bench.Case(f"{elems}x{threads} {hint}", fn, (cargs,)))
    for elems, threads, unroll in ILP:
        fn = cute.compile(ilp_add, *cargs, elems=elems, threads=threads, unroll=unroll)
        c.fill_(float("nan"))
        fn(*cargs)
        torch.testing.assert_close(c, a + b, rtol=0, atol=0)
        cases.append(bench.Case(f"ilp {elems}x{threads} u{unroll}", fn, (cargs,)))
    res = bench.compare(f"elementwise add hints, fp16 {n}x{n}", cases,
                        bench.Work(bytes=3 * a.numel() * 2), "torch.add", iterations=50)
    print(res.table())
    res.save(f"experiment_elementwise_hints_{n}", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
