"""Experiment (notebook 08): what limits the mixed-input GEMM at decode batch sizes?

    python benchmarks/experiments/mixed_ceilings.py [--out DIR] [--shapes 8192x8192,...] [--ms 1,16]

Asked because at M <= 16 the kernel moves its int4 weights at 1.5-2.7 TB/s, well under the
H200's 4.8 TB/s, so it runs at 1.5-2.6x cuBLAS bf16 where the bytes allow about 5x. Each variant
leaves one stage of the work out (their results are wrong; only their times count), so the
differences place the time:

* ``course``: the kernel as the planner runs it; ``course 3 stages``: with a ring of 3 stages
  (the default is the deepest with which 3 CTAs share an SM: 2 at tile_m = 16, two warpgroups);
* ``no convert``: no int4 -> bf16 conversion (the wgmmas read whatever the registers hold);
* ``no mma``: the conversion, no wgmma;
* ``loads only``: neither: the consumers wait for each stage and release it, so the time is the
  TMA stream's alone (plus launch, prologue and the split-K epilogue);
* ``tiled weights`` / ``tiled loads only``: the same, with the packed weights stored so that each
  TMA box (128 rows x 128 bytes) is one contiguous 16 KB block instead of 128 rows 4 KB apart
  (``HopperMixedGemm.weights``): does DRAM locality limit the stream?

Each is a variant of the kernel by name (``cutecourse/kernels/mixed_variants.py``, the
launcher's ``variant=``).

and each at the planner's split of K and at 3, 4 and 8 splits. Times are CUDA-graph replays of
launches that cycle through copies of the weights larger than twice the L2 (each launch reads
its weights from HBM), so the host's launch cost (12-20 us a call through the DSL's Python
launcher) does not hide the kernel's; ``stream_us`` adds the same launches timed back to back
without a graph. Writes ``experiment_mixed_ceilings.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from cutecourse import bench  # noqa: E402
from cutecourse.kernels import mixed_input  # noqa: E402
from cutecourse.kernels.mixed_variants import TiledMixedGemm, tiled_weights, variant_class  # noqa: E402
from cutecourse.quant import quantize_int4  # noqa: E402

SHAPES = [(8192, 8192), (28672, 8192), (8192, 28672)]
SPLITS = (None, 3, 4, 6, 8)
REPLAYS = 20

#: row name -> (the kernel's variant, ``mixed_variants.py``; constructor arguments besides the plan's)
VARIANTS = {"course": ("course", {}), "course 3 stages": ("course", {"stages": 3}),
            "no convert": ("no_convert", {}), "no mma": ("no_mma", {}), "loads only": ("loads_only", {}),
            "tiled weights": ("tiled", {}), "tiled loads only": ("tiled_loads_only", {}),
            "deferred_scales": ("deferred_scales", {})}


def graph_us(fns, stream) -> float:
    """Microseconds per launch: one CUDA graph of every launch in ``fns``, replayed."""
    import torch

    with torch.cuda.stream(stream):
        for f in fns:
            f()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for f in fns:
            f()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):  # replays run on the current stream: the events' stream
        for _ in range(3):
            graph.replay()
        start.record(stream)
        for _ in range(REPLAYS):
            graph.replay()
        end.record(stream)
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / REPLAYS / len(fns)


def stream_us(fns, stream) -> float:
    """Microseconds per launch, launched back to back from Python (the launcher's cost included)."""
    import torch

    with torch.cuda.stream(stream):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        for _ in range(REPLAYS):
            for f in fns:
                f()
        end.record(stream)
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / REPLAYS / len(fns)


def launches(variant, kwargs, splits, x, copies, stream):
    """One launcher of ``variant`` per copy of the weights, through the course's own
    (``mixed_input.launcher``: its plan, its split-K buffers), each with its own y."""
    import torch

    with torch.cuda.stream(stream):
        fns = [mixed_input.launcher(x, packed, scales, splits=splits, variant=variant, **kwargs)
               for packed, scales in copies]
    return fns[0].plan, fns, [f.y for f in fns]


def main() -> int:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(bench.RESULTS_DIR))
    ap.add_argument("--shapes", help="comma-separated NxK (default: the benchmark's three)")
    ap.add_argument("--ms", default="1,16")
    ap.add_argument("--variants", help="comma-separated names of VARIANTS (default: all)")
    ap.add_argument("--splits", help="comma-separated splits of K, 0 for the planner's (default: 0,3,4,6,8)")
    args = ap.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    splits_list = [int(v) or None for v in args.splits.split(",")] if args.splits else SPLITS
    rows = []
    stream = torch.cuda.Stream()
    for n, k in shapes:
        torch.manual_seed(0)
        packed, scales, _ = quantize_int4(torch.randn(n, k, device="cuda") * 0.02, 128)
        int4_bytes = packed.numel() * 4 + scales.numel() * 2
        copies = bench.cold_l2_sets(lambda: (packed.clone(), scales.clone()), int4_bytes)
        tiled_copies = [(tiled_weights(p, 128), s) for p, s in copies]
        for m in [int(v) for v in args.ms.split(",")]:
            x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
            reference = {}
            for name, (variant, kwargs) in VARIANTS.items():
                if args.variants and name not in args.variants.split(","):
                    continue
                for splits in splits_list:
                    cps = tiled_copies if issubclass(variant_class(variant), TiledMixedGemm) else copies
                    p, fns, ys = launches(variant, kwargs, splits, x, cps, stream)
                    us = graph_us(fns, stream)
                    row = dict(n=n, k=k, m=m, variant=name, splits=p.splits, tile_m=p.tile_m,
                               stages=fns[0].kernel.stages,
                               warpgroups=p.warpgroups, planned=splits is None, graph_us=round(us, 2),
                               stream_us=round(stream_us(fns, stream), 2),
                               int4_tbps=round(int4_bytes / us / 1e6, 2))
                    if name == "course":
                        reference[p.splits] = ys[0].clone()
                    if name == "tiled weights" and p.splits in reference:  # the same weights: the same bits
                        row["same_bits_as_course"] = bool(torch.equal(ys[0], reference[p.splits]))
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    out = bench.save_json("experiment_mixed_ceilings", {"environment": bench.environment(), "rows": rows}, args.out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
