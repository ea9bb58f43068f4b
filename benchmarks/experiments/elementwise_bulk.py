"""Experiment (notebook 01 tuning): does the TMA bulk-copy engine beat plain vector loads for
C = A + B?

Asked because the vectorized kernel stops at about 1.01x torch.add; if a different copy engine
could move the bytes faster, the course kernel should use it. Answer: no (0.95-0.96x).

The course's vectorized kernel (notebook 01) moves every byte through the load/store units: each
thread issues ``ld.global`` for its piece of A and B and ``st.global`` for C. Here the loads go
through the Tensor Memory Accelerator instead:

* a **persistent grid** (``ctas_per_sm`` CTAs on every SM) walks the (M, N) tensor in row tiles
  of ``(rows, 256)`` elements; CTA b takes tiles b, b + grid, b + 2 grid, ...
* **warp 0 is the producer**: for each tile it waits for a free ring stage, then issues two TMA
  loads (``cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier``), one for A and one for B,
  which complete on that stage's "full" mbarrier (``PipelineTmaAsync``, transaction count =
  bytes of both tiles). With ``stages`` stages, up to ``stages`` tiles are in flight per CTA.
* **warps 1..8 consume**: wait on the stage's "full" barrier, read A and B from shared memory in
  16-byte vectors, add in registers, and write C either
  - ``store="st"``: straight to global memory with 16-byte ``st.global`` (LSU path for C), or
  - ``store="tma"``: back into the A buffer of the same stage, then one thread issues a TMA
    store (``cp.async.bulk.tensor.2d.global.shared::cta``). The stage may only be refilled once
    that store has *read* shared memory, so warp 1 releases stage i-1 after
    ``cp.async.bulk.wait_group.read 1`` in iteration i.

No swizzle: each thread reads 16 contiguous bytes and a warp reads 512 contiguous bytes of a
row, which is free of bank conflicts already.

Run on a GPU (H100):
    python benchmarks/experiments/elementwise_bulk.py [--out DIR] [--configs 0,1,...] [--name _run2]
Writes ``experiment_elementwise_bulk_<size><name>.json``. The committed ``..._run1.json``
(``--configs 0,1,2,3,4,5``) has row names without the view ("2d"/"flat"); ``..._run2.json`` is ``--name _run2 --configs 3,6,7,8,9,10,11``.
Inspect without one:
    cutecourse.inspect.compile_report(
        "benchmarks.experiments.elementwise_bulk:compile_target", "sm_90a", rows=32, stages=4)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cutecourse  # noqa: E402,F401
import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
import cutlass.pipeline as pipeline  # noqa: E402
from cutlass.cute.nvgpu import cpasync  # noqa: E402

from cutecourse import bench  # noqa: E402

#: Columns of one tile: 256 elements is the largest TMA box dimension (512 B of fp16 per row).
TILE_N = 256
#: Elements per thread access in shared memory and for st.global: 8 fp16 = 16 B.
VEC = 8
#: One producer warp + CONSUMER_WARPS consumer warps.
CONSUMER_WARPS = 8
CONSUMERS = CONSUMER_WARPS * 32
THREADS = 32 + CONSUMERS


@cute.kernel
def bulk_add_kernel(tma_a: cute.CopyAtom, tA: cute.Tensor, tma_b: cute.CopyAtom, tB: cute.Tensor,
                    tma_c: cute.CopyAtom, tC: cute.Tensor, mC: cute.Tensor,
                    s_layout: cute.Layout, rows: cutlass.Constexpr, stages: cutlass.Constexpr,
                    store: cutlass.Constexpr, shared_storage: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    grid, _, _ = cute.arch.grid_dim()
    warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())

    smem = cutlass.memory.SmemAllocator()
    storage = smem.allocate(shared_storage)
    sA = storage.sA.get_tensor(s_layout)  # (rows, TILE_N, stages)
    sB = storage.sB.get_tensor(s_layout)

    tile_bytes = rows * TILE_N * (mC.element_type.width // 8)
    # "full[s]" completes when both tiles' bytes have landed; "empty[s]" when the consumers are
    # done with stage s: one arrive per consumer warp (lane 0), or one from the storing warp.
    releasers = CONSUMER_WARPS if cutlass.const_expr(store == "st") else 1
    ring = pipeline.PipelineTmaAsync.create(
        barrier_storage=storage.barriers.data_ptr(), num_stages=stages,
        producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
        consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, releasers),
        tx_count=2 * tile_bytes, cta_layout_vmnk=cute.make_layout((1, 1, 1, 1)))

    # Tile views: (rows, TILE_N, tiles_m, tiles_n) of the TMA coordinate tensors, partitioned so
    # that tAgA[(None, tm, tn)] is one TMA box in global memory and tAsA[(None, s)] ring stage s.
    tiles_n = cute.size(tA, mode=[1]) // TILE_N
    tiles = (cute.size(tA, mode=[0]) // rows) * tiles_n
    tAsA, tAgA = cpasync.tma_partition(tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2),
                                       cute.group_modes(cute.local_tile(tA, (rows, TILE_N), (None, None)), 0, 2))
    tBsB, tBgB = cpasync.tma_partition(tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 2),
                                       cute.group_modes(cute.local_tile(tB, (rows, TILE_N), (None, None)), 0, 2))
    tCsA, tCgC = cpasync.tma_partition(tma_c, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2),
                                       cute.group_modes(cute.local_tile(tC, (rows, TILE_N), (None, None)), 0, 2))
    mine = (tiles - bidx + grid - 1) // grid  # tiles this CTA walks

    if warp_idx == 0:
        # -------- producer: keep up to `stages` tiles of A and B in flight ----------------
        cpasync.prefetch_descriptor(tma_a)
        cpasync.prefetch_descriptor(tma_b)
        prod = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, stages)
        for i in cutlass.range(mine, unroll=1):
            t = bidx + i * grid
            tm, tn = t // tiles_n, t % tiles_n
            ring.producer_acquire(prod)  # stage empty? then expect 2 * tile_bytes on full[s]
            bar = ring.producer_get_barrier(prod)
            cute.copy(tma_a, tAgA[(None, tm, tn)], tAsA[(None, prod.index)], tma_bar_ptr=bar)
            cute.copy(tma_b, tBgB[(None, tm, tn)], tBsB[(None, prod.index)], tma_bar_ptr=bar)
            prod.advance()
        ring.producer_tail(prod)  # do not exit while consumers may still arrive on our barriers
    else:
        # -------- consumers: add tile i from shared memory -------------------------------
        ctid = tidx - 32
        cons = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, stages)
        per_thread = rows * TILE_N // VEC // CONSUMERS
        vecs_per_row = TILE_N // VEC
        for i in cutlass.range(mine, unroll=1):
            t = bidx + i * grid
            tm, tn = t // tiles_n, t % tiles_n
            ring.consumer_wait(cons)
            vA = cute.zipped_divide(sA[(None, None, cons.index)], (1, VEC))  # ((1, VEC), (rows, 32))
            vB = cute.zipped_divide(sB[(None, None, cons.index)], (1, VEC))
            if cutlass.const_expr(store == "st"):
                gC = cute.zipped_divide(cute.local_tile(mC, (rows, TILE_N), (tm, tn)), (1, VEC))
                for k in cutlass.range_constexpr(per_thread):
                    j = ctid + k * CONSUMERS
                    coord = (None, (j // vecs_per_row, j % vecs_per_row))
                    gC[coord] = vA[coord].load() + vB[coord].load()
                ring.consumer_release(cons)  # lane 0 of each consumer warp arrives on empty[s]
            else:
                for k in cutlass.range_constexpr(per_thread):
                    j = ctid + k * CONSUMERS
                    coord = (None, (j // vecs_per_row, j % vecs_per_row))
                    vA[coord] = vA[coord].load() + vB[coord].load()  # C overwrites A in place
                # generic-proxy smem writes must be visible to the TMA (async proxy), and all
                # consumer warps must have written before one of them issues the store
                cute.arch.fence_proxy("async.shared", space="cta")
                cute.arch.barrier(barrier_id=1, number_of_threads=CONSUMERS)
                if warp_idx == 1:
                    cute.copy(tma_c, tCsA[(None, cons.index)], tCgC[(None, tm, tn)])
                    cute.arch.cp_async_bulk_commit_group()
                    # at most one store still reading smem: tile i-1's stage may be refilled
                    cute.arch.cp_async_bulk_wait_group(1, read=True)
                    if i > 0:
                        j = i - 1
                        ring.consumer_release(pipeline.PipelineState(stages, j, j % stages, (j // stages) % 2))
            cons.advance()
        if cutlass.const_expr(store == "tma"):
            if warp_idx == 1:
                cute.arch.cp_async_bulk_wait_group(0, read=True)
                if mine > 0:
                    j = mine - 1
                    ring.consumer_release(pipeline.PipelineState(stages, j, j % stages, (j // stages) % 2))


@cute.jit
def bulk_add(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, rows: cutlass.Constexpr,
             stages: cutlass.Constexpr, store: cutlass.Constexpr, grid: cutlass.Constexpr):
    dtype = mA.element_type
    # One ring stage of A (or B): a plain row-major (rows, TILE_N) tile, `stages` of them.
    s_layout = cute.make_layout((rows, TILE_N, stages), stride=(TILE_N, 1, rows * TILE_N))
    one = cute.slice_(s_layout, (None, None, 0))
    g2s = cpasync.CopyBulkTensorTileG2SOp()
    tma_a, tA = cpasync.make_tiled_tma_atom(g2s, mA, one, (rows, TILE_N))
    tma_b, tB = cpasync.make_tiled_tma_atom(g2s, mB, one, (rows, TILE_N))
    tma_c, tC = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileS2GOp(), mC, one, (rows, TILE_N))

    @cute.struct
    class SharedStorage:
        barriers: cute.struct.MemRange[cutlass.Int64, stages * 2]  # full[stages], empty[stages]
        sA: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(s_layout)], 1024]
        sB: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(s_layout)], 1024]

    bulk_add_kernel(tma_a, tA, tma_b, tB, tma_c, tC, mC, s_layout, rows, stages, store,
                    SharedStorage).launch(grid=(grid, 1, 1), block=(THREADS, 1, 1))


def check_shape(m: int, n: int, rows: int, stages: int) -> None:
    from cutecourse.errors import ShapeError

    if m % rows or n % TILE_N:
        raise ShapeError(f"({m}, {n}) is not tiled by ({rows}, {TILE_N})",
                         "use a shape whose rows divide by `rows` and columns by 256")
    if rows * TILE_N // VEC % CONSUMERS:
        raise ShapeError(f"rows = {rows}: a tile must hold a multiple of {CONSUMERS} vectors",
                         "use rows = 8, 16, 32, ...")
    if 2 * stages * rows * TILE_N * 2 > 200 * 1024:
        raise ShapeError(f"{stages} stages of {rows} rows do not fit in shared memory",
                         "use fewer stages or rows")


def compile_target(rows: int = 32, stages: int = 4, store: str = "st", grid: int = 132,
                   m: int = 4096, n: int = 4096):
    """``(jit_function, args, kwargs)`` for cutecourse.inspect: fake fp16 (m, n) tensors."""
    from cutlass.cute.runtime import make_fake_compact_tensor

    check_shape(m, n, rows, stages)
    t = make_fake_compact_tensor(cutlass.Float16, (m, n), stride_order=(1, 0), assumed_align=16)
    return bulk_add, (t, t, t), {"rows": rows, "stages": stages, "store": store, "grid": grid}


# (rows, stages, store, ctas_per_sm, view). view "2d": tiles of the (M, N) tensor, so a
# (rows, 256) tile is `rows` separate 512-byte pieces, N * 2 bytes apart. view "flat": the same
# memory seen as (M * N / 256, 256), so a tile is rows * 512 contiguous bytes.
# Run 1 (H100, 2d only): every configuration 2915-2935 GB/s = 0.95x torch.add (3075), against
# 3112 (1.012x) for the vectorized kernel: the TMA loads did not help.
# Run 2 (H100, configs 3 and 6-11): flat tiles 2920-2942 GB/s (best: flat r32 s4 st 1/SM,
# 2941.7 = 0.958x torch.add at 3071.3; vectorized 4x512 3111.8 = 1.013x). Contiguous tiles,
# TMA stores, depth and CTAs per SM all move it by < 1%: the bulk path sits ~5% below the LSU
# path and ~3% below a device-to-device copy (3026), so it is not the way to 1.02x.
CONFIGS = [(32, 4, "st", 1, "2d"), (16, 4, "st", 2, "2d"), (32, 3, "tma", 1, "2d"),
           (16, 4, "tma", 2, "2d"), (8, 4, "st", 3, "2d"), (32, 2, "st", 2, "2d"),
           (32, 4, "st", 1, "flat"), (16, 4, "st", 2, "flat"), (16, 4, "tma", 2, "flat"),
           (64, 2, "st", 1, "flat"), (32, 3, "tma", 1, "flat"), (8, 4, "st", 4, "flat")]


def cpu_check() -> int:
    """Compile two configurations for sm_90a (no GPU) and check the instructions that matter."""
    from cutecourse import inspect as ci

    target = "benchmarks.experiments.elementwise_bulk:compile_target"
    want = {"st": ["cp.async.bulk.tensor.2d.shared::cta.global", "mbarrier.arrive.expect_tx",
                   "ld.shared.v4", "st.global.v4"],
            "tma": ["cp.async.bulk.tensor.2d.shared::cta.global", "cp.async.bulk.tensor.2d.global.shared::cta",
                    "cp.async.bulk.wait_group.read", "st.shared.v4"]}
    failed = 0
    for store in ("st", "tma"):
        r = ci.compile_report(target, "sm_90a", rows=32, stages=4, store=store)
        missing = [w for w in want[store] if w not in r.ptx]
        failed += bool(missing) or r.spill_bytes > 0
        print(f"store={store}: {r.registers} registers, {r.spill_bytes} B spilled, "
              f"{'missing ' + str(missing) if missing else 'all expected instructions present'}")
    return 1 if failed else 0


def main() -> int:
    import argparse

    import torch
    from cutlass.cute.runtime import from_dlpack

    import cutecourse.kernels.elementwise as ew

    p = argparse.ArgumentParser()
    p.add_argument("--out", default=str(bench.RESULTS_DIR))
    p.add_argument("--size", type=int, default=32768)
    p.add_argument("--name", default="")
    p.add_argument("--configs", default="", help="comma-separated indices into CONFIGS (default all)")
    p.add_argument("--check-only", action="store_true", help="check against torch, do not time")
    p.add_argument("--cpu-check", action="store_true", help="no GPU: compile for sm_90a and "
                   "verify the PTX uses TMA loads (and, for store='tma', TMA stores)")
    args = p.parse_args()
    if args.cpu_check:
        return cpu_check()
    n = args.size
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.float16) for _ in range(2))
    c = torch.empty_like(a)
    ref = a + b
    cargs = tuple(from_dlpack(t, assumed_align=16) for t in (a, b, c))
    flat = tuple(from_dlpack(t.view(-1, TILE_N), assumed_align=16) for t in (a, b, c))
    configs = [CONFIGS[int(i)] for i in args.configs.split(",") if i] if args.configs else CONFIGS
    cases = [bench.Case("torch.add", lambda: torch.add(a, b, out=c))]
    fn, vargs = ew.compiled_kernel(a, b, c, "vectorized", 4, 512)
    cases.append(bench.Case("vectorized 4x512", fn, (vargs,)))
    checked = {}
    for rows, stages, store, per_sm, view in configs:
        name = f"bulk {view} r{rows} s{stages} {store} {per_sm}/SM"
        kargs = cargs if view == "2d" else flat
        try:
            check_shape(*((n, n) if view == "2d" else (n * n // TILE_N, TILE_N)), rows, stages)
            k = cute.compile(bulk_add, *kargs, rows=rows, stages=stages, store=store, grid=per_sm * sms)
            c.fill_(float("nan"))  # poison: a tile the kernel skips cannot pass
            k(*kargs)
            torch.cuda.synchronize()
            torch.testing.assert_close(c, ref, rtol=0, atol=0)
        except Exception as e:  # record and go on: one bad config must not lose the others
            checked[name] = f"FAILED: {type(e).__name__}: {str(e)[:300]}"
            print(name, checked[name], flush=True)
            continue
        checked[name] = "exact"
        print(name, "matches torch exactly", flush=True)
        cases.append(bench.Case(name, k, (kargs,)))
    if args.check_only:
        return 0 if all(v == "exact" for v in checked.values()) else 1
    res = bench.compare(f"elementwise add, TMA bulk loads vs LSU, fp16 {n}x{n}", cases,
                        bench.Work(bytes=3 * a.numel() * 2), "torch.add", iterations=50,
                        params={"checks": checked, "sms": sms, "configs": [list(x) for x in configs]})
    print(res.table())
    res.save(f"experiment_elementwise_bulk_{n}{args.name}", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
