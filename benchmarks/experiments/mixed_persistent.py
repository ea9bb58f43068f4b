"""Experiment (notebook 08): a persistent mixed-input GEMM at decode batch sizes.

    python benchmarks/experiments/mixed_persistent.py [--out DIR] [--shapes 8192x8192,...] [--ms 1,16]
        [--splits 1,2,4,8] [--ctas 1,2,3]

Asked because the stream of int4 weights, measured alone (``mixed_ceilings.py``'s ``loads
only``), runs fastest with long streams per CTA (one split of K: no prologue per CTA, no fp32
partials) but then one CTA per (64 rows, split) leaves the SMs unbalanced (28672 x 8192: 224
CTAs of two warpgroups on 132 SMs) and nothing hides an SM's conversion work.

The persistent variant (:class:`Persistent`) launches ``ctas_per_sm`` x SMs CTAs (fewer when there
are fewer work units), each walking the work units (weight rows bn, tokens bm, split) in a
static round robin: unit ``cta``, ``cta + grid``, ... (bn fastest, then bm, then the split: the
launch order of the course kernel's grid). Its producer warp keeps the ring full ACROSS units: it
loads the next unit's first k-tiles while the consumers finish the current one and store it.
The consumers zero their accumulators per unit and store through the course kernel's epilogues
(``mixed_epilogue.store`` / ``store_split``: the last split of a tile to arrive adds the fp32
slices; no CTA waits for another, so a unit never waits on one that is not running). The
ring depth is the deepest that lets ``ctas_per_sm`` CTAs share an SM (:func:`stages_for`).

Each variant is timed beside its ``loads only`` twin (``mixed_ceilings.LoadsOnly``: no
conversion, no wgmma, so the time is the stream's), and the course kernel at its planned split
and at each split the persistent one runs. Every persistent result is checked against the
course kernel's y at the same split (the same k-tiles in the same order and the same reduction:
the same bits) before it is timed. Times are CUDA-graph replays over copies of the weights
larger than twice the L2 (``mixed_ceilings.graph_us``). Writes
``experiment_mixed_persistent.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
import cutlass.pipeline as pipeline  # noqa: E402
import cutlass.utils as utils  # noqa: E402
from cutlass.cute.nvgpu import cpasync, warpgroup  # noqa: E402

from benchmarks.experiments import mixed_ceilings  # noqa: E402
from cutecourse import bench  # noqa: E402
from cutecourse.kernels import hopper_mixed_gemm as hm  # noqa: E402
from cutecourse.kernels import mixed_epilogue, mixed_input  # noqa: E402
from cutecourse.kernels.operands import DescribedEntry  # noqa: E402

SHAPES = [(8192, 8192), (28672, 8192), (8192, 28672)]
SPLITS = (1, 2, 4, 8)
CTAS_PER_SM = (1, 2, 3)
#: the most stages the course kernel's constructor takes
MOST_STAGES = 8


class _PersistentLaunch:
    """What :meth:`Persistent.kernel` returns inside the course kernel's ``__call__``: its
    ``launch(grid=...)`` receives the course's grid (N / rows, M / tile_m, splits) and launches
    the persistent kernel on ``min(units, ctas_per_sm x SMs)`` CTAs instead, with the grid's
    three sizes as arguments. So the host code (TMA atoms, smem layouts, the storage) is the
    course kernel's own, not a copy of it."""

    def __init__(self, gemm, args):
        self.gemm, self.args = gemm, args

    def launch(self, grid, **options):
        n_tiles, m_tiles, splits = grid
        units = n_tiles * m_tiles * splits
        ctas = cutlass.min(units, self.gemm.CTAS_PER_SM * self.gemm.SMS)
        kernel = self.gemm.persistent(*self.args, n_tiles, m_tiles, cutlass.Int32(splits))
        kernel.launch(grid=(ctas, 1, 1), **options)


class Persistent(hm.HopperMixedGemm):
    """The course's mixed-input GEMM as a persistent kernel: ``CTAS_PER_SM`` x ``SMS`` CTAs walk
    the work units in round robin (the module docstring). ``load``, ``convert``, ``mma`` and the
    epilogues are the course kernel's; the k-tile loop is its ``consume`` with the releases
    carried from one unit to the next (``consume`` starts its release state at stage 0, which only
    a CTA's first unit does)."""

    CTAS_PER_SM = 1
    SMS = mixed_input.SMS  # an H100's / H200's: 132

    def kernel(self, *args):
        """Not a kernel here: the launch the course's ``__call__`` makes, redirected (:class:`_PersistentLaunch`)."""
        return _PersistentLaunch(self, args)

    @cute.jit
    def unit(self, unit, n_tiles, m_tiles, splits, k_tiles):
        """Work unit ``unit`` -> (bn, bm, split, its first k-tile, its k-tiles): bn fastest."""
        bn = unit % n_tiles
        bm = (unit // n_tiles) % m_tiles
        split = unit // (n_tiles * m_tiles)
        per_split = cute.ceil_div(k_tiles, splits)
        k_first = split * per_split
        k_count = cutlass.max(cutlass.min(k_first + per_split, k_tiles) - k_first, 0)
        return bn, bm, split, k_first, k_count

    @cute.jit
    def partitions(self, tmas, sW, sS, sZ, sX, mW, mX, mS, mZ, bn, bm):
        """The TMA views of unit (bn, bm): ``load``'s ``loads`` tuple, as the course kernel makes it."""
        tma_w, tma_x, tma_s, tma_z = tmas
        gW = cute.local_tile(mW, (self.rows, hm.WORDS_K), (bn, None))
        gX = cute.local_tile(mX, (self.tile_m, hm.TILE_K), (bm, None))
        gS = cute.local_tile(mS, (self.gpt, self.rows), (None, bn))
        gZ = cute.local_tile(mZ, (self.gpt, self.rows), (None, bn))
        one = cute.make_layout(1)
        tWs, tWg = cpasync.tma_partition(tma_w, 0, one, cute.group_modes(sW, 0, 2), cute.group_modes(gW, 0, 2))
        tXs, tXg = cpasync.tma_partition(tma_x, 0, one, cute.group_modes(sX, 0, 2), cute.group_modes(gX, 0, 2))
        tSs, tSg = cpasync.tma_partition(tma_s, 0, one, cute.group_modes(sS, 0, 2), cute.group_modes(gS, 0, 2))
        tZs, tZg = cpasync.tma_partition(tma_z, 0, one, cute.group_modes(sZ, 0, 2), cute.group_modes(gZ, 0, 2))
        return (tma_w, tWg, tWs, tma_x, tXg, tXs, tma_s, tSg, tSs, tma_z, tZg, tZs)

    @cute.kernel
    def persistent(self, tma_w: cute.CopyAtom, mW: cute.Tensor, tma_x: cute.CopyAtom, mX: cute.Tensor,
                   tma_s: cute.CopyAtom, mS: cute.Tensor, tma_z: cute.CopyAtom, mZ: cute.Tensor,
                   mY: cute.Tensor, mP: cute.Tensor, mCounters: cute.Tensor, tiled_mma: cute.TiledMma,
                   sW_layout: cute.ComposedLayout, sX_layout: cute.ComposedLayout, sS_layout: cute.Layout,
                   sZ_layout: cute.Layout, ops, n_tiles: cutlass.Int32, m_tiles: cutlass.Int32,
                   splits: cutlass.Int32):
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        is_producer = warp_idx == self.threads // 32
        if is_producer:
            cpasync.prefetch_descriptor(tma_w)
            cpasync.prefetch_descriptor(tma_x)
            cpasync.prefetch_descriptor(tma_s)
            if cutlass.const_expr(self.zero_point):
                cpasync.prefetch_descriptor(tma_z)
        cta, _, _ = cute.arch.block_idx()
        ctas, _, _ = cute.arch.grid_dim()
        units = n_tiles * m_tiles * splits

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
        k_tiles = cute.ceil_div(mX.shape[1], hm.TILE_K)

        thr_mma = tiled_mma.get_slice(tidx)
        frag = tiled_mma.make_fragment_A(tiled_mma.partition_shape_A((self.rows, hm.TILE_K)))
        tCrX = tiled_mma.make_fragment_B(thr_mma.partition_B(sX))
        acc = cute.make_rmem_tensor(thr_mma.partition_C(cute.make_identity_tensor((self.rows, self.tile_m))).shape,
                                    cutlass.Float32)
        tiled_mma.set(warpgroup.Field.ACCUMULATE, True)

        pipeline.pipeline_init_wait(cluster_shape_mn=(1, 1))

        prod = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        cons = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        released = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        if is_producer:
            # The ring's state runs on from unit to unit: the next unit's first k-tiles load as
            # soon as the consumers free stages of this one, epilogue or not. Its count restarts
            # per unit, since ``load`` reads k-tile k_first + count.
            for unit in cutlass.range(cta, units, ctas, unroll=1):
                bn, bm, split, k_first, k_count = self.unit(unit, n_tiles, m_tiles, splits, k_tiles)
                loads = self.partitions((tma_w, tma_x, tma_s, tma_z), sW, sS, sZ, sX, mW, mX, mS, mZ, bn, bm)
                prod.reset_count()
                for _ in cutlass.range(k_count, unroll=1):
                    ring.producer_acquire(prod)
                    self.load(ring, loads, prod, k_first)
                    prod.advance()
        else:
            wg, t = tidx // hm.WG_THREADS, tidx % hm.WG_THREADS
            lane_row = wg * hm.BLOCK_N + (t // 32) * 16 + (t % 32) // 4
            tile_mn = (self.rows, self.tile_m)
            for unit in cutlass.range(cta, units, ctas, unroll=1):
                bn, bm, split, k_first, k_count = self.unit(unit, n_tiles, m_tiles, splits, k_tiles)
                acc.fill(0.0)  # every wgmma of the previous unit is done (its wait_group(0))
                for k in cutlass.range(k_count, unroll=1):
                    ring.consumer_wait(cons)
                    for chunk in cutlass.range_constexpr(hm.CHUNKS):
                        warpgroup.wait_group(self.IN_FLIGHT)
                        if cutlass.const_expr(chunk == self.IN_FLIGHT):
                            if k > 0:  # k-tile k - 1's wgmmas are done: its stage is free
                                ring.consumer_release(released)
                                released.advance()
                        self.convert(sW, sS, sZ, cons.index, frag, wg, t, lane_row, chunk)
                        self.mma(tiled_mma, frag, tCrX, acc, cons.index, chunk)
                    cons.advance()
                warpgroup.wait_group(0)
                if k_count > 0:
                    ring.consumer_release(released)
                    released.advance()
                if cutlass.const_expr(self.split_k):
                    # store_split finds the tile's counter at bn + bm x (grid's x size): the course
                    # grid's N / rows, here the persistent grid's CTAs; the view shifted by
                    # bm x (n_tiles - ctas) puts it at bn + bm x n_tiles, where the launcher's
                    # counters have it. ``last`` and the epilogue's named barrier are reused unit
                    # after unit: thread 0 writes ``last`` only after the next unit's first
                    # barrier, which every consumer thread reaches after reading it.
                    counters = cute.make_tensor(mCounters.iterator + bm * (n_tiles - ctas), mCounters.layout)
                    mixed_epilogue.store_split(mY, mP, counters, acc, thr_mma, tile_mn, bn, bm, split, splits, tidx,
                                               storage.last.get_tensor(cute.make_layout(1)), self.threads,
                                               self.epilogue_op, ops)
                else:
                    mixed_epilogue.store(mY, acc, thr_mma, tile_mn, bn, bm, self.epilogue_op, ops)


class PersistentLoadsOnly(Persistent, mixed_ceilings.LoadsOnly):
    """The persistent kernel's stream alone: no conversion, no wgmma (its y is not a product)."""


_CLASSES: dict = {}


def persistent_class(ctas_per_sm: int, loads_only: bool = False, sms: int = mixed_input.SMS) -> type:
    """The persistent class (or its loads-only twin) for ``ctas_per_sm`` CTAs on each of ``sms``
    SMs: a class of its own per value (the compile cache keys on the class)."""
    base = PersistentLoadsOnly if loads_only else Persistent
    key = (ctas_per_sm, loads_only, sms)
    if key not in _CLASSES:
        name = f"{base.__name__}{ctas_per_sm}x{sms}"
        _CLASSES[key] = type(name, (base,), {"CTAS_PER_SM": ctas_per_sm, "SMS": sms, "__module__": __name__})
    return _CLASSES[key]


def stages_for(ctas_per_sm: int, tile_m: int, group_size: int = 128, warpgroups: int = 2,
               zero_point: bool = False) -> int | None:
    """The deepest ring (2 .. 8 stages) with which ``ctas_per_sm`` CTAs share an SM's smem (1 KB
    of it reserved per CTA, as ``mixed_input.ctas_per_sm`` counts); None if not even 2 fit."""
    for stages in range(MOST_STAGES, 1, -1):
        try:
            kernel = hm.HopperMixedGemm(tile_m, group_size=group_size, zero_point=zero_point,
                                        warpgroups=warpgroups, stages=stages)
        except Exception:  # more stages than one CTA's smem holds
            continue
        if ctas_per_sm * (kernel.smem_bytes() + 1024) <= hm.SM_SMEM:
            return stages
    return None


def compile_target(ctas_per_sm: int = 1, loads_only: bool = False, **params):
    """(kernel, fake arguments) of the persistent class for ``cutecourse.inspect.compile_report``:
    the course entry's fakes; ``params``: the constructor's keywords."""
    return DescribedEntry(persistent_class(ctas_per_sm, loads_only)).compile_target(**params)


def main() -> int:
    import torch

    from cutecourse.quant import quantize_int4

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(bench.RESULTS_DIR))
    ap.add_argument("--shapes", help="comma-separated NxK (default: the benchmark's three)")
    ap.add_argument("--ms", default="1,16")
    ap.add_argument("--splits", default=",".join(map(str, SPLITS)))
    ap.add_argument("--ctas", default=",".join(map(str, CTAS_PER_SM)), help="CTAs per SM of the persistent kernel")
    ap.add_argument("--tag", default="", help="suffix of the JSON file's name (a run narrowed by the options)")
    args = ap.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    splits_list = [int(v) for v in args.splits.split(",")]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows, failed = [], []
    stream = torch.cuda.Stream()
    for n, k in shapes:
        torch.manual_seed(0)
        packed, scales, _ = quantize_int4(torch.randn(n, k, device="cuda") * 0.02, 128)
        int4_bytes = packed.numel() * 4 + scales.numel() * 2
        copies = bench.cold_l2_sets(lambda: (packed.clone(), scales.clone()), int4_bytes)
        for m in [int(v) for v in args.ms.split(",")]:
            x = torch.randn(m, k, device="cuda").to(torch.bfloat16)

            def build(cls, splits, **kwargs):
                """The launchers of one variant (one per copy of the weights), each run once."""
                p, fns, ys = mixed_ceilings.launches(cls, kwargs, splits, x, copies, stream)
                ys[0].fill_(float("nan"))  # an element the kernel never writes cannot pass the check
                with torch.cuda.stream(stream):
                    fns[0]()
                torch.cuda.synchronize()
                return p, fns, ys

            def timed(variant, p, fns, ctas_per_sm=None, **extra):
                us = mixed_ceilings.graph_us(fns, stream)
                row = dict(n=n, k=k, m=m, variant=variant, splits=p.splits, ctas_per_sm=ctas_per_sm,
                           stages=fns[0].kernel.stages, tile_m=p.tile_m, warpgroups=p.warpgroups,
                           graph_us=round(us, 2), int4_tbps=round(int4_bytes / us / 1e6, 2), **extra)
                rows.append(row)
                print(json.dumps(row), flush=True)

            reference = {}  # splits -> the course kernel's y
            for splits in [None, *splits_list]:
                if splits in reference:  # the planned split, timed already
                    continue
                p, fns, ys = build(hm.HopperMixedGemm, splits)
                reference[p.splits] = ys[0].clone()
                timed("course", p, fns, planned=splits is None)
                if splits is None:  # the stream alone, at the planned split
                    timed("loads only", *build(mixed_ceilings.LoadsOnly, splits)[:2], planned=True)
            for splits in splits_list:
                for ctas_per_sm in [int(v) for v in args.ctas.split(",")]:
                    plan = mixed_input.plan(m, n, k, 128, sms, splits=splits)
                    stages = stages_for(ctas_per_sm, plan.tile_m, warpgroups=plan.warpgroups)
                    if stages is None:
                        print(f"skipped: {ctas_per_sm} CTAs of tile_m {plan.tile_m} do not share an SM", flush=True)
                        continue
                    p, fns, ys = build(persistent_class(ctas_per_sm, False, sms), splits, stages=stages)
                    ref = reference[p.splits]
                    err = ((ys[0].float() - ref.float()).abs().max() / ref.float().abs().max()).item()
                    check = dict(same_bits_as_course=bool(torch.equal(ys[0], ref)), max_rel_err=err,
                                 units=p.ctas * p.splits, ctas=min(p.ctas * p.splits, ctas_per_sm * sms))
                    if not err <= 1e-2:  # (NaN too) a wrong kernel is not timed
                        failed.append(dict(n=n, k=k, m=m, splits=p.splits, ctas_per_sm=ctas_per_sm, **check))
                        print(f"WRONG: {json.dumps(failed[-1])}", flush=True)
                        continue
                    timed("persistent", p, fns, ctas_per_sm, **check)
                    p, fns, _ = build(persistent_class(ctas_per_sm, True, sms), splits, stages=stages)
                    timed("persistent loads only", p, fns, ctas_per_sm, units=check["units"], ctas=check["ctas"])
    out = bench.save_json(f"experiment_mixed_persistent{args.tag}", {"environment": bench.environment(), "rows": rows},
                          args.out)
    print(f"wrote {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
