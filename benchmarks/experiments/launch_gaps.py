"""Experiment (notebook 06): where does a back-to-back GEMM loop spend its time: in the kernels or
between them?

    python benchmarks/experiments/launch_gaps.py [--out DIR] [--dtypes bfloat16]
                                                 [--shapes NAME|MxNxK,...] [--kernels ROW,...]

Asked because the course's best schedule trails torch.matmul by 0.5-1.4% in bf16 on 2048^3,
4096^3 and the MLP shapes of the schedules table while, in fp16, cuBLAS runs the course's own
geometry and loses to it. The harness times a loop of launches (CUDA events around it), so a
launch's share is its kernel's duration plus the idle time before the next kernel starts. The
CUDA profiler (torch.profiler, CUPTI) timestamps each kernel: per case we take the median
duration, the median period (start to start) and their difference, the gap. A negative gap
means that consecutive kernels overlap: programmatic dependent launch (PDL) lets the next kernel
start while the previous one finishes.

Protocol: per case, 0.5 s of back-to-back launches (no sync) so that the clock settles, then 40
profiled back-to-back launches; the first 5 are dropped. Every kernel is checked against torch
first. Writes ``experiment_launch_gaps.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cutecourse  # noqa: E402
from cutecourse import bench  # noqa: E402

import schedules  # noqa: E402  (benchmarks/schedules.py: its KERNELS, launcher and shapes)

SHAPES = ["2048^3", "4096^3", "mlp up 4096x14336x4096", "mlp down 4096x4096x14336"]
KERNELS = ["persistent 128x256", "persistent 128x256 2x1", "persistent 128x256 PDL",
           "persistent 128x256 2x1 PDL"]
SETTLE_S, LAUNCHES, DROP = 0.5, 40, 5


def profile_loop(fn) -> list[tuple[str, float, float]]:
    """(name, start us, end us) of every GPU activity of LAUNCHES back-to-back calls of ``fn``."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    t0 = time.perf_counter()
    while time.perf_counter() - t0 < SETTLE_S:
        for _ in range(20):
            fn()
    torch.cuda.synchronize()
    for _ in range(20):  # settle again, without a sync before the profiled launches
        fn()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(LAUNCHES):
            fn()
        torch.cuda.synchronize()
    events = [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()
              if e.device_type.name == "CUDA"]
    return sorted(events, key=lambda e: e[1])


def summarize(events) -> dict:
    """The GEMM kernel is the activity with the most total time; the others (cuBLAS's memsets)
    count towards the gaps."""
    total: dict[str, float] = {}
    for name, s, e in events:
        total[name] = total.get(name, 0.0) + (e - s)
    gemm = max(total, key=total.get)
    runs = [(s, e) for name, s, e in events if name == gemm][DROP:]
    durations = [e - s for s, e in runs]
    periods = [b[0] - a[0] for a, b in zip(runs, runs[1:])]
    overlaps = sum(b[0] < a[1] for a, b in zip(runs, runs[1:]))
    duration, period = statistics.median(durations), statistics.median(periods)
    return {"kernel": gemm[:160], "others": sorted(set(total) - {gemm}),
            "duration_us": duration, "period_us": period, "gap_us": period - duration,
            "overlapping": f"{overlaps}/{len(periods)}"}


def main() -> int:
    import torch

    p = argparse.ArgumentParser()
    p.add_argument("--out", default=str(bench.RESULTS_DIR))
    p.add_argument("--dtypes", default="bfloat16,float16")
    p.add_argument("--shapes", help="comma-separated names of the schedules table or MxNxK")
    p.add_argument("--kernels", help="comma-separated rows of benchmarks/schedules.py's KERNELS")
    args = p.parse_args()
    cutecourse.modes.require_gpu("sm_90a")
    shapes = schedules.pick_shapes(args.shapes.split(",") if args.shapes else SHAPES)
    kernels = args.kernels.split(",") if args.kernels else KERNELS
    result = {"environment": bench.environment(), "data": "random_(-2, 2)",
              "protocol": f"{SETTLE_S} s settle, {LAUNCHES} profiled back-to-back launches, "
                          f"first {DROP} dropped; medians", "rows": []}
    for dt in args.dtypes.split(","):
        dtype = getattr(torch, dt)
        for shape, (m, n, k) in shapes.items():
            a, b, c = schedules.operands(m, n, k, dtype)
            ref = a @ b.T
            cases = [("torch.matmul", lambda a=a, b=b, c=c: torch.matmul(a, b.T, out=c))]
            cases += [(name, schedules.checked_case(name, a, b, c, ref).fn) for name in kernels]
            for name, fn in cases:
                row = {"dtype": dt, "shape": shape, "case": name, **summarize(profile_loop(fn))}
                row["tflops_kernel"] = 2 * m * n * k / row["duration_us"] / 1e6
                row["tflops_loop"] = 2 * m * n * k / row["period_us"] / 1e6
                result["rows"].append(row)
                print(f"{dt:<9} {shape:<26} {name:<28} kernel {row['duration_us']:8.2f} us  "
                      f"period {row['period_us']:8.2f} us  gap {row['gap_us']:6.2f} us  "
                      f"overlap {row['overlapping']:>5}  {row['tflops_loop']:5.0f} TFLOP/s", flush=True)
    path = bench.save_json("experiment_launch_gaps", result, args.out)
    print("wrote", path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
