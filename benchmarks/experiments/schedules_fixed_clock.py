"""Experiment (notebook 06): cooperative vs ping-pong at a fixed clock, where the epilogue matters.

    python benchmarks/experiments/schedules_fixed_clock.py [--out DIR] [--shapes MxNxK,...]
                                                           [--kernels ROW,...] [--tag _x] [--bytes] [--lrc]

Asked because the sustained tables (``schedules_<dtype>_small_k.json``) show ping-pong within
1-3% of the cooperative kernel at K <= 2048 while ``nvidia-smi`` reads its SM clock 5-9% lower:
at the 700 W cap a kernel's clock depends on its energy per flop, so a sustained ratio mixes the
schedule with its power. Nsight Compute separates them: with ``--clock-control base`` it locks
the SM clock and times each launch alone (``gpu__time_duration``), too short for the power
controller to step in. The ratio at a fixed clock is the schedule's own; the ratio at the cap is
what a user gets.

Cases: the course's persistent cooperative kernel (128x256, 1x1 and 2x1) and ping-pong (64x256,
1x1 and 2x1) on 8192 x 8192 x K for K in 512 .. 8192 and 4096 x 4096 x 1024, fp16 and bf16, integer data.
Under ncu (one child process): each case one warm-up launch, then 3 profiled; the median of the
3. Writes ``experiment_schedules_fixed_clock.json``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cutecourse  # noqa: E402
from cutecourse import bench  # noqa: E402

import schedules  # noqa: E402  (benchmarks/schedules.py: its KERNELS, launcher and shapes)
from gemm_power import fixed_clock_command, ncu_kernels  # noqa: E402  (experiments/gemm_power.py)

SHAPES = [(8192, 8192, 512), (8192, 8192, 1024), (8192, 8192, 2048), (8192, 8192, 4096),
          (8192, 8192, 8192), (4096, 4096, 1024)]
#: rows of benchmarks/schedules.py's KERNELS timed by default
KERNELS = ["persistent 128x256", "persistent 128x256 2x1", "ping-pong 64x256", "ping-pong 64x256 2x1"]
DTYPES = ("float16", "bfloat16")
LAUNCHES = 4  # one warm-up, three measured
#: with --bytes: what each launch read from DRAM and moved through L2
BYTES_METRICS = ("dram__bytes_read.sum", "lts__t_bytes.sum")
#: with --lrc, also: read sectors requested from L2 and those the L2 request coalescer (LRC)
#: merged, by hardware (identical requests from different SMs) or programmatically (multicast),
#: and L2 throughput as a share of its peak
LRC_METRICS = {"lrc__request_sectors_op_read_coalescable.sum": "lrc_coalescable_sectors",
               "lrc__request_sectors_op_read_coalescing_achieved_type_hardware.sum": "lrc_hardware_sectors",
               "lrc__request_sectors_op_read_coalescing_achieved_type_programmatic.sum":
                   "lrc_programmatic_sectors",
               "lrc__lts2lrc_sectors_op_read.sum": "lts_to_lrc_sectors",
               "lrc__xbar2gpc_sectors_op_read.sum": "lrc_to_gpc_sectors",
               "lts__t_sectors.avg.pct_of_peak_sustained_elapsed": "l2_pct_of_peak"}


def plan(shapes=SHAPES, kernels=KERNELS) -> list[tuple[str, tuple[int, int, int], str]]:
    return [(dt, tuple(shape), name) for dt in DTYPES for shape in shapes for name in kernels]


def child(cases) -> None:
    """Under ncu: every case in order, LAUNCHES launches each, checked once first."""
    import torch

    for dt, (m, n, k), name in cases:
        a, b, c = schedules.operands(m, n, k, getattr(torch, dt))
        fn = schedules.checked_case(name, a, b, c, a @ b.T).fn
        for _ in range(LAUNCHES - 1):  # checked_case launched it once
            fn()
        torch.cuda.synchronize()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", default=str(bench.RESULTS_DIR))
    p.add_argument("--shapes", help="comma-separated MxNxK (default: SHAPES)")
    p.add_argument("--kernels", help="comma-separated rows of benchmarks/schedules.py's KERNELS "
                                     "(the first is the ratios' baseline; default: KERNELS)")
    p.add_argument("--tag", default="", help="appended to the file name")
    p.add_argument("--bytes", action="store_true", help="also record DRAM and L2 bytes per launch")
    p.add_argument("--lrc", action="store_true", help="--bytes, and the L2 request coalescer's sectors")
    args = p.parse_args()
    args.bytes |= args.lrc
    lrc = LRC_METRICS if args.lrc else {}
    extra = [*(BYTES_METRICS if args.bytes else ()), *lrc]
    shapes = list(schedules.pick_shapes(args.shapes.split(",")).values()) if args.shapes else SHAPES
    kernels = args.kernels.split(",") if args.kernels else KERNELS
    cases = plan(shapes, kernels)
    if args.child:
        child(cases)
        return 0
    from multicast import find_ncu

    cutecourse.modes.require_gpu("sm_90a")
    ncu = find_ncu()
    if not ncu:
        raise SystemExit("no ncu (Nsight Compute) on this machine")
    cmd = fixed_clock_command(ncu, [sys.executable, __file__, "--child",
                                    *(a for a in sys.argv[1:] if a not in ("--child", "--bytes", "--lrc"))])
    if extra:
        cmd[cmd.index("--metrics") + 1] += "," + ",".join(extra)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=540)
    launches = [k for k in ncu_kernels(proc.stdout) if "HopperGemm" in k["kernel"]]
    if len(launches) != LAUNCHES * len(cases):
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-8:]
        raise SystemExit(f"expected {LAUNCHES * len(cases)} GEMM launches, ncu reported "
                         f"{len(launches)}:\n" + "\n".join(tail))
    result = {"environment": bench.environment(), "data": "random_(-2, 2)",
              "protocol": "ncu --clock-control base, median of 3 launches after 1", "rows": []}
    for i, (dt, (m, n, k), name) in enumerate(cases):
        measured = launches[LAUNCHES * i + 1:LAUNCHES * (i + 1)]
        us = statistics.median(x["gpu__time_duration.sum"] for x in measured) / 1e3
        mhz = statistics.median(x["sm__cycles_elapsed.avg.per_second"] for x in measured) / 1e6
        result["rows"].append({"dtype": dt, "m": m, "n": n, "k": k, "kernel": name, "us": us,
                               "tflops": 2 * m * n * k / (us * 1e-6) / 1e12, "sm_mhz": round(mhz)})
        if args.bytes:
            result["rows"][-1].update(
                dram_mb=round(statistics.median(x["dram__bytes_read.sum"] for x in measured) / 1e6),
                l2_gb=round(statistics.median(x["lts__t_bytes.sum"] for x in measured) / 1e9, 2))
        for metric, key in lrc.items():
            result["rows"][-1][key] = statistics.median(x[metric] for x in measured)
    for row in result["rows"]:
        coop = next(r for r in result["rows"] if r["kernel"] == kernels[0]
                    and (r["dtype"], r["m"], r["n"], r["k"]) == (row["dtype"], row["m"], row["n"], row["k"]))
        row["vs_cooperative"] = coop["us"] / row["us"]  # kernels[0]: the cooperative kernel by default
        print(f"{row['dtype']:<9} {row['m']}x{row['n']}x{row['k']:<6} {row['kernel']:<24} "
              f"{row['tflops']:6.0f} TFLOP/s {row['vs_cooperative']:.3f}x cooperative  "
              f"{row['sm_mhz']} MHz" + (f"  DRAM {row['dram_mb']} MB, L2 {row['l2_gb']} GB"
                                        if args.bytes else "")
              + "".join(f"  {key} {row[key]:.3g}" for key in lrc.values()), flush=True)
    path = bench.save_json(f"experiment_schedules_fixed_clock{args.tag}", result, args.out)
    print("wrote", path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
