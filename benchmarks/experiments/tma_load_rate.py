"""Experiment (notebook 06's schedule model): how many bytes per clock can TMA put into one SM's
shared memory, alone and with every SM loading at once?

Asked because ``cutecourse.models.schedules`` needs the *load port*: the rate at which a GEMM's
k-tiles stream from L2 into an SM's smem ring. NVIDIA publishes no figure. The model's first
guess (80 B/ns per SM) made the 64x256 ping-pong, which loads 1.67x the bytes per flop of a
128x256 tile, look load-bound at 0.61x the cooperative kernel, where the H100 runs it level with
it. Until this script has run, the model uses the lowest rate consistent with the GEMMs measured
at a fixed clock (``models/schedule_calibration.py``: 77 B per clock per SM).

The kernel does nothing but load, the way a GEMM's producer does:

* ``ctas`` CTAs (one per SM: the ring fills shared memory), each with a ring of ``stages``
  stages of one k-tile: an A box (``tile_m`` x 64) and a B box (``tile_n`` x 64) of fp16, 128B
  swizzled, exactly the TMA copies of the course's Hopper GEMMs (``make_smem_layout_a/b``);
* warp 0 (one elected thread) waits for a free stage, arms its full barrier with the stage's
  bytes and issues the two TMA loads, ``iterations`` times, cycling over ``span`` k-tiles;
* warp 1 waits for each stage to land and releases it at once (no MMA). So that the loads are
  proven, not assumed, lane 0 adds the first element of each A and B box to a checksum, which
  the host compares with the same sum in torch before anything is timed.

``mode="own"``: each CTA reads its own rows of A and B (nothing for the L2 request coalescer to
merge); ``mode="same"``: every CTA reads the same k-tiles in the same order (everything to
merge, as the CTAs of a GEMM band reading one B k-tile). The data stay in L2 (``span`` k-tiles:
at most 26 MB for 132 CTAs), so this is L2 -> SMEM, the path the model's port stands for.

Result: per CTA count, GB/s and **bytes per SM clock per SM** (``params.per_sm``; SM clock from
nvidia-smi during the case). Few CTAs: one SM's port; 132 CTAs: what all SMs get at once. Put the
132-CTA "own" figure of the GEMM's tile into ``schedules.Machine.load_port_bytes_per_clock``.

Run on an H100:
    python benchmarks/experiments/tma_load_rate.py [--out DIR] [--tiles 128x256,64x256]
        [--ctas 1,2,4,8,16,33,66,132] [--modes own,same] [--iterations 2000]
Writes ``experiment_tma_load_rate.json`` (a result set: one BenchResult per tile and mode).
Compile without a GPU (a CPU test does): ``python benchmarks/experiments/tma_load_rate.py
--cpu-check``, or ``cutecourse.inspect.compile_report(
"benchmarks.experiments.tma_load_rate:compile_target", "sm_90a", tile_m=64, tile_n=256)``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cutecourse  # noqa: E402,F401  (sets CUTE_DSL_ARCH before cutlass is imported)
import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
import cutlass.pipeline as pipeline  # noqa: E402
import cutlass.utils as utils  # noqa: E402
import cutlass.utils.hopper_helpers as sm90_utils  # noqa: E402
from cutlass.cute.nvgpu import cpasync  # noqa: E402

from cutecourse import bench  # noqa: E402
from cutecourse.errors import ShapeError  # noqa: E402

TILE_K = 64  # one 128-byte swizzled row of fp16, as in the course's GEMMs
SMEM_BUDGET = 232448 - 1024  # what a CTA may opt in to, minus the barriers
THREADS = 64  # warp 0: producer; warp 1: consumer
MODES = ("own", "same")
TILES = ((128, 256), (64, 256), (128, 128))
MAX_CTAS = 132


def stage_bytes(tile_m: int, tile_n: int) -> int:
    return (tile_m + tile_n) * TILE_K * 2


def stages_for(tile_m: int, tile_n: int) -> int:
    """As many stages as fit (the GEMMs keep 16-32 KiB for C; a load-only ring need not)."""
    return SMEM_BUDGET // stage_bytes(tile_m, tile_n)


@cute.kernel
def load_kernel(tma_a: cute.CopyAtom, tA: cute.Tensor, tma_b: cute.CopyAtom, tB: cute.Tensor,
                checksum: cute.Tensor, sA_layout: cute.ComposedLayout, sB_layout: cute.ComposedLayout,
                tile_m: cutlass.Constexpr, tile_n: cutlass.Constexpr, stages: cutlass.Constexpr,
                span: cutlass.Constexpr, same: cutlass.Constexpr, iterations: cutlass.Int32,
                shared_storage: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())

    smem = cutlass.utils.SmemAllocator()
    storage = smem.allocate(shared_storage)
    sA = storage.sA.get_tensor(sA_layout.outer, swizzle=sA_layout.inner)  # (tile_m, 64, stages)
    sB = storage.sB.get_tensor(sB_layout.outer, swizzle=sB_layout.inner)

    # full[s]: stage s's bytes (one A box + one B box) have landed; empty[s]: the consumer warp
    # has released it (one arrive).
    ring = pipeline.PipelineTmaAsync.create(
        barrier_storage=storage.barriers.data_ptr(), num_stages=stages,
        producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
        consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 1),
        tx_count=stage_bytes(tile_m, tile_n), cta_layout_vmnk=cute.make_layout((1, 1, 1, 1)))

    # (box, row tile, k-tile) views of A and B; ring stage s is tAsA[(None, s)]
    gA = cute.local_tile(tA, (tile_m, TILE_K), (None, None))
    gB = cute.local_tile(tB, (tile_n, TILE_K), (None, None))
    tAsA, tAgA = cpasync.tma_partition(tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2),
                                       cute.group_modes(gA, 0, 2))
    tBsB, tBgB = cpasync.tma_partition(tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 2),
                                       cute.group_modes(gB, 0, 2))
    row = 0 if cutlass.const_expr(same) else bidx  # "own": this CTA's rows of A and B

    if warp_idx == 0:
        cpasync.prefetch_descriptor(tma_a)
        cpasync.prefetch_descriptor(tma_b)
        prod = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, stages)
        for i in cutlass.range(iterations, unroll=1):
            k = i % span
            ring.producer_acquire(prod)  # a free stage; arm full[s] with the stage's bytes
            bar = ring.producer_get_barrier(prod)
            cute.copy(tma_a, tAgA[(None, row, k)], tAsA[(None, prod.index)], tma_bar_ptr=bar)
            cute.copy(tma_b, tBgB[(None, row, k)], tBsB[(None, prod.index)], tma_bar_ptr=bar)
            prod.advance()
        ring.producer_tail(prod)  # do not exit while the consumer may still arrive
    elif warp_idx == 1:
        cons = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, stages)
        total = cutlass.Float32(0.0)
        for i in cutlass.range(iterations, unroll=1):
            ring.consumer_wait(cons)
            # proof that the bytes arrived where they should: element (0, 0) of both boxes
            total += sA[(0, 0, cons.index)].to(cutlass.Float32) + sB[(0, 0, cons.index)].to(cutlass.Float32)
            ring.consumer_release(cons)
            cons.advance()
        if tidx == 32:
            checksum[bidx] = total


@cute.jit
def load_rate(mA: cute.Tensor, mB: cute.Tensor, checksum: cute.Tensor, iterations: cutlass.Int32,
              tile_m: cutlass.Constexpr, tile_n: cutlass.Constexpr, stages: cutlass.Constexpr,
              span: cutlass.Constexpr, same: cutlass.Constexpr, ctas: cutlass.Constexpr):
    dtype = mA.element_type
    tile_mnk = (tile_m, tile_n, TILE_K)
    sA_layout = sm90_utils.make_smem_layout_a(utils.LayoutEnum.ROW_MAJOR, tile_mnk, dtype, stages)
    sB_layout = sm90_utils.make_smem_layout_b(utils.LayoutEnum.ROW_MAJOR, tile_mnk, dtype, stages)
    g2s = cpasync.CopyBulkTensorTileG2SOp()
    tma_a, tA = cpasync.make_tiled_tma_atom(g2s, mA, cute.slice_(sA_layout, (None, None, 0)), (tile_m, TILE_K))
    tma_b, tB = cpasync.make_tiled_tma_atom(g2s, mB, cute.slice_(sB_layout, (None, None, 0)), (tile_n, TILE_K))

    @cute.struct
    class SharedStorage:
        barriers: cute.struct.MemRange[cutlass.Int64, stages * 2]  # full[stages], empty[stages]
        sA: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sA_layout)], 1024]
        sB: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sB_layout)], 1024]

    load_kernel(tma_a, tA, tma_b, tB, checksum, sA_layout, sB_layout, tile_m, tile_n, stages, span, same,
                iterations, SharedStorage).launch(grid=(ctas, 1, 1), block=(THREADS, 1, 1))


def check(tile_m: int, tile_n: int, ctas: int, mode: str, span: int) -> int:
    """Validate a configuration; return its stage count."""
    if (tile_m, tile_n) not in TILES:
        raise ShapeError(f"tile {tile_m}x{tile_n} is not one of {TILES}", "use a GEMM k-tile the course has")
    if not 1 <= ctas <= MAX_CTAS:
        raise ShapeError(f"{ctas} CTAs: one per SM, 1 to {MAX_CTAS}", "e.g. --ctas 1,8,132")
    if mode not in MODES:
        raise ShapeError(f"mode {mode!r}", f"use one of {MODES}")
    if span < 1:
        raise ShapeError(f"span {span}", "cycle over at least one k-tile")
    return stages_for(tile_m, tile_n)


def shapes(tile_m: int, tile_n: int, span: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """A is (132 tile_m, span x 64), B (132 tile_n, span x 64): room for every CTA's own rows."""
    return (MAX_CTAS * tile_m, span * TILE_K), (MAX_CTAS * tile_n, span * TILE_K)


def compile_target(tile_m: int = 128, tile_n: int = 256, ctas: int = 132, mode: str = "own", span: int = 4):
    """``(jit_function, args, kwargs)`` for cutecourse.inspect: fake fp16 A, B, fp32 checksums."""
    from cutlass.cute.runtime import make_fake_compact_tensor

    stages = check(tile_m, tile_n, ctas, mode, span)
    (am, ak), (bn, bk) = shapes(tile_m, tile_n, span)
    a = make_fake_compact_tensor(cutlass.Float16, (am, ak), stride_order=(1, 0), assumed_align=16)
    b = make_fake_compact_tensor(cutlass.Float16, (bn, bk), stride_order=(1, 0), assumed_align=16)
    out = make_fake_compact_tensor(cutlass.Float32, (ctas,), assumed_align=16)
    return load_rate, (a, b, out, cutlass.Int32(8)), dict(tile_m=tile_m, tile_n=tile_n, stages=stages,
                                                          span=span, same=mode == "same", ctas=ctas)


#: The instructions the compiled kernel must contain (checked without a GPU): the two TMA loads
#: per stage, the barrier armed with the byte count, the consumer's wait; and no MMA at all.
PTX_MUST = ("cp.async.bulk.tensor.2d.shared::cta.global.tile.mbarrier::complete_tx::bytes",
            "mbarrier.arrive.expect_tx", "mbarrier.try_wait.parity")
PTX_MUST_NOT = ("wgmma",)


def cpu_check() -> int:
    from cutecourse import inspect as ci

    failed = 0
    for (tm, tn), mode in ((TILES[0], "own"), (TILES[1], "same")):
        r = ci.compile_report("benchmarks.experiments.tma_load_rate:compile_target", "sm_90a",
                              tile_m=tm, tile_n=tn, mode=mode)
        missing = [p for p in PTX_MUST if p not in r.ptx] + [p for p in PTX_MUST_NOT if p in r.ptx]
        failed += bool(missing)
        print(f"{tm}x{tn} {mode}: {r.registers} registers, "
              f"{'wrong: ' + str(missing) if missing else 'TMA loads, expect_tx, waits; no MMA'}")
    return 1 if failed else 0


def main() -> int:
    import argparse

    import torch
    from cutlass.cute.runtime import from_dlpack

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(bench.RESULTS_DIR))
    p.add_argument("--tiles", default="128x256,64x256,128x128")
    p.add_argument("--ctas", default="1,2,4,8,16,33,66,99,132")
    p.add_argument("--modes", default="own,same")
    p.add_argument("--span", type=int, default=4, help="k-tiles each CTA cycles over (data stay in L2)")
    p.add_argument("--iterations", type=int, default=2000, help="k-tiles each CTA loads per launch")
    p.add_argument("--tag", default="")
    p.add_argument("--cpu-check", action="store_true", help="no GPU: compile for sm_90a, check the PTX")
    args = p.parse_args()
    if args.cpu_check:
        return cpu_check()
    tiles = [tuple(int(v) for v in t.split("x")) for t in args.tiles.split(",")]
    counts = [int(c) for c in args.ctas.split(",")]
    modes = args.modes.split(",")
    sets, per_sm = {}, {}
    with bench.GpuMonitor() as mon:
        for tm, tn in tiles:
            (am, ak), (bn, bk) = shapes(tm, tn, args.span)
            g = torch.Generator(device="cuda").manual_seed(0)
            a = torch.randint(-4, 5, (am, ak), device="cuda", generator=g).half()
            b = torch.randint(-4, 5, (bn, bk), device="cuda", generator=g).half()
            for mode in modes:
                cases = []
                for ctas in counts:
                    stages = check(tm, tn, ctas, mode, args.span)
                    out = torch.full((ctas,), float("nan"), device="cuda")
                    targs = (from_dlpack(a, assumed_align=16), from_dlpack(b, assumed_align=16),
                             from_dlpack(out, assumed_align=16), cutlass.Int32(args.iterations))
                    fn = cute.compile(load_rate, *targs, tile_m=tm, tile_n=tn, stages=stages, span=args.span,
                                      same=mode == "same", ctas=ctas)
                    fn(*targs)
                    torch.cuda.synchronize()
                    # what the consumer should have summed: element (0, 0) of every box it received
                    rows = torch.zeros(ctas, dtype=torch.long, device="cuda") if mode == "same" else \
                        torch.arange(ctas, device="cuda")
                    ks = torch.arange(args.iterations, device="cuda") % args.span * TILE_K
                    want = (a[rows[:, None] * tm, ks[None, :]].float()
                            + b[rows[:, None] * tn, ks[None, :]].float()).sum(1)
                    if not torch.equal(out, want):
                        raise AssertionError(f"{tm}x{tn} {mode} {ctas} CTAs: checksums {out[:4].tolist()} "
                                             f"!= {want[:4].tolist()}: the loads did not land")
                    moved = ctas * args.iterations * stage_bytes(tm, tn)
                    cases.append(bench.Case(f"{ctas} CTAs", fn, (targs,), work=bench.Work(bytes=moved)))
                key = f"{tm}x{tn} {mode}"
                res = bench.compare(f"TMA loads only, k-tiles of {tm}x{tn}x64 fp16, {mode} rows", cases,
                                    cases[-1].work, cases[-1].name, iterations=20, monitor=mon,
                                    params={"tile": [tm, tn], "mode": mode, "span": args.span,
                                            "iterations": args.iterations, "stages": stages_for(tm, tn),
                                            "stage_bytes": stage_bytes(tm, tn)})
                rates = {}
                for row, ctas in zip(res.rows, counts):
                    mhz = row.sm_mhz or float("nan")
                    rates[row.name] = {"ctas": ctas, "gb_per_s_per_sm": row.gbps / ctas,
                                       "bytes_per_clock_per_sm": row.gbps * 1e9 / ctas / (mhz * 1e6)}
                res.params["per_sm"] = rates
                per_sm[key] = rates
                sets[key] = res
                print(res.table())
                for name, r in rates.items():
                    print(f"  {name:>9}: {r['gb_per_s_per_sm']:7.1f} GB/s per SM, "
                          f"{r['bytes_per_clock_per_sm']:6.1f} B per SM clock")
    bench.save_set(f"experiment_tma_load_rate{args.tag}", sets, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
