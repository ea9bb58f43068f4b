"""Experiment (notebook 03's prefetch kernel against the 1.05x torch.matmul target): the tile
order's band height GROUP_M, under the sustained protocol.

    python benchmarks/experiments/gemm_group_m.py [--ncu]

At its power cap an H100 runs a GEMM at the clock its energy per flop allows, and DRAM traffic
costs energy. The band height sets how many A and B panels the ~132 CTAs in flight touch: with
128x256 tiles, GROUP_M = 8 covers 8 tile-rows x ~16.5 tile-columns (A 16 MiB + B 69 MiB of
K = 8192 panels), GROUP_M = 16 covers 16 x ~8.3 (32 + 35 MiB). Times the course's prefetch kernel
at several ``group_m`` (a constructor parameter of the kernel) against
torch.matmul; with ``--ncu``, also its DRAM reads and duration at the base clock.
Writes ``experiment_gemm_group_m.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cutecourse  # noqa: E402
from cutecourse import bench  # noqa: E402

N = 8192
GROUPS = (4, 8, 16, 32)


def build(group_m: int, a, b, c):
    from gemm_calibration import course_kernel

    return course_kernel(a, b, c, group_m=group_m)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ncu", action="store_true")
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    p.add_argument("--out", default=str(bench.RESULTS_DIR))
    args = p.parse_args()
    import torch

    from gemm import operands

    a, b = operands("ints", N, torch.float16)
    c = torch.empty(N, N, device="cuda", dtype=torch.float16)
    if args.child:
        build(args.child, a, b, c)()
        torch.cuda.synchronize()
        return 0
    cutecourse.modes.require_gpu("sm_90a")
    ref = torch.matmul(a, b.T)
    cases = [bench.Case("torch.matmul", lambda: torch.matmul(a, b.T, out=c))]
    cases += [bench.checked_case(f"prefetch G={g}", build(g, a, b, c), c, ref, 1e-2) for g in GROUPS]
    with bench.GpuMonitor() as mon:
        res = bench.compare(f"GEMM fp16 {N}^3 ints, prefetch 128x256: tile-order band height", cases,
                            bench.Work(flops=2 * N ** 3), "torch.matmul", progress=False, monitor=mon,
                            rounds=6, warmup=10, iterations=20, repeats=2, settle_s=0.5,
                            params={"groups": list(GROUPS)})
    print(res.table(), flush=True)
    if args.ncu:
        import subprocess

        from multicast import find_ncu, parse_ncu_csv

        ncu, counters = find_ncu(), {}
        for g in GROUPS if ncu else ():
            proc = subprocess.run([ncu, "--clock-control", "base", "--metrics",
                                   "dram__bytes_read.sum,gpu__time_duration.sum", "--csv",
                                   "--print-units", "base", "-k", "regex:HopperGemm", "--launch-count", "1",
                                   sys.executable, __file__, "--child", str(g)],
                                  capture_output=True, text=True, timeout=240)
            counters[f"G={g}"] = parse_ncu_csv(proc.stdout) or (proc.stdout + proc.stderr)[-400:]
            print(f"  ncu G={g}: {counters[f'G={g}']}", flush=True)
        res.params["ncu_base_clock"] = counters
    path = res.save("experiment_gemm_group_m", args.out)
    print("wrote", path, json.dumps(res.params.get("ncu_base_clock", {}))[:100])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
