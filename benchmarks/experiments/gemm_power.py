"""Experiment (notebooks 03 and 05's GEMMs): the same GEMMs at a fixed clock, and after the GPU
idled.

    python benchmarks/experiments/gemm_power.py [--nvidia .ref/nv_dense_gemm.py]

``gemm_calibration.py`` showed every 8192^3 fp16 GEMM (cuBLAS, NVIDIA's CuTeDSL example, the
course's kernels) running at ~1600 MHz instead of 1980: the H100 is power-limited, so a sustained
comparison ranks kernels by energy per flop. Two other ways to measure, to separate the kernel
from the power controller:

* **fixed clock**: Nsight Compute locks the SM clock to the base clock (``--clock-control base``)
  and reports each kernel's duration (``gpu__time_duration``), so two kernels are compared at
  the same clock. Each case runs in a child process under ncu (one warm-up launch, 3 profiled).
* **burst after idle**: before each case the GPU idles for ``--idle`` seconds, then 100 launches
  are timed: the first milliseconds run at a high clock before the power controller reacts. This
  is how a single standalone script often measures (and how figures such as "808 TFLOP/s" can
  come out of one process and "763" out of another).

Data: small integers (``random_(-2, 2)``, as NVIDIA's examples). Writes
``experiment_gemm_power.json``.
"""

from __future__ import annotations

import argparse
import csv
import io
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ (multicast.find_ncu)
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cutecourse  # noqa: E402
from cutecourse import bench  # noqa: E402
from cutecourse.kernels import hopper_gemm_cluster as hc  # noqa: E402
from cutecourse.kernels import hopper_gemm_persistent as hp  # noqa: E402
from gemm import nvidia_kernel, operands  # noqa: E402  (benchmarks/gemm.py)

N = 8192
WIDE, SQUARE = (128, 256), (128, 128)
#: case name -> how to build it (see build())
CASES = ["torch.matmul", "prefetch 1x1", "prefetch 2x1", "persistent dynamic 1x1",
         "persistent 2x1 G=8", "prefetch 128x128 S=3 1x1", "prefetch 128x128 S=3 2x1",
         "nvidia example 1x1", "nvidia example 2x1"]


def build(name: str, a, b, c, nvidia: str | None):
    import torch

    if name == "torch.matmul":
        return lambda: torch.matmul(a, b.T, out=c)
    if name.startswith("nvidia example"):
        if not nvidia:
            return None
        return nvidia_kernel(nvidia, a, b, c, (2, 1) if name.endswith("2x1") else (1, 1))
    cluster = (2, 1) if "2x1" in name else (1, 1)
    if name.startswith("persistent"):
        return hp.launcher(a, b, c, WIDE, cluster=cluster, scheduler="static" if "G=8" in name else "dynamic",
                           **({"group_m": 8} if "G=8" in name else {}))
    if "128x128" in name:
        return hc.launcher(a, b, c, cluster, SQUARE, stages=3)
    return hc.launcher(a, b, c, cluster, WIDE)


def data(n: int):
    import torch

    a, b = operands("ints", n, torch.float16)
    return a, b, torch.empty(n, n, device="cuda", dtype=torch.float16)


def child(name: str, nvidia: str | None) -> None:
    """Under ncu: one warm-up launch (compiles), then 3 launches that ncu profiles."""
    import torch

    a, b, c = data(N)
    fn = build(name, a, b, c, nvidia)
    fn()
    torch.cuda.synchronize()
    for _ in range(3):
        fn()
    torch.cuda.synchronize()


def ncu_rows(text: str) -> list[dict]:
    start = text.find('"ID"')
    return list(csv.DictReader(io.StringIO(text[start:]))) if start >= 0 else []


#: What the fixed-clock runs read per kernel: its duration and the SM clock it ran at.
FIXED_CLOCK_METRICS = "gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second"


def fixed_clock_command(ncu: str, program: list[str]) -> list[str]:
    """ncu at the base clock, printing FIXED_CLOCK_METRICS of every kernel ``program`` launches."""
    return [ncu, "--clock-control", "base", "--metrics", FIXED_CLOCK_METRICS, "--csv",
            "--print-units", "base", *program]


def ncu_kernels(text: str) -> list[dict]:
    """ncu's CSV as one dict per profiled kernel, in launch order: ``kernel`` (its name) and
    each metric's value as a float."""
    per_kernel: dict[str, dict] = {}
    for row in ncu_rows(text):
        try:
            per_kernel.setdefault(row["ID"], {"kernel": row.get("Kernel Name", "")})[
                row["Metric Name"]] = float(row["Metric Value"].replace(",", ""))
        except (KeyError, ValueError):
            continue
    return list(per_kernel.values())


def fixed_clock(names, nvidia, ncu: str) -> dict:
    """Median duration (us) and SM clock (MHz) of each case's long kernels at ncu's base clock."""
    out = {}
    for name in names:
        cmd = fixed_clock_command(ncu, [sys.executable, __file__, "--child", name])
        if nvidia:
            cmd += ["--nvidia", nvidia]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        # the GEMM launches: long kernels (data generation and copies take far less than 200 us)
        gemms = [k for k in ncu_kernels(proc.stdout) if k.get("gpu__time_duration.sum", 0) > 200e3]
        if not gemms:
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
            out[name] = {"error": " | ".join(tail)[-600:]}
        else:
            us = statistics.median(k["gpu__time_duration.sum"] for k in gemms[-3:]) / 1e3
            mhz = statistics.median(k.get("sm__cycles_elapsed.avg.per_second", 0) for k in gemms[-3:]) / 1e6
            out[name] = {"us": us, "tflops": 2 * N ** 3 / (us * 1e-6) / 1e12, "sm_mhz": round(mhz),
                         "kernel": gemms[-1]["kernel"][:80]}
        print(f"  fixed clock {name}: {out[name]}", flush=True)
    base = out.get("torch.matmul", {}).get("us")
    for v in out.values():
        if base and "us" in v:
            v["ratio"] = base / v["us"]
    return out


def burst(cases, idle: float, rounds: int, monitor) -> dict:
    """Each case: idle, then 5 warm-up and 100 timed launches; per-round TFLOP/s."""
    res = {c.name: [] for c in cases}
    for r in range(rounds):
        for case in cases[r % len(cases):] + cases[:r % len(cases)]:
            time.sleep(idle)
            with monitor.window(case.name):
                us = bench.time_us(case, warmup=5, iterations=100, repeats=1)[0]
            res[case.name].append(2 * N ** 3 / (us * 1e-6) / 1e12)
    out = {}
    for case in cases:
        mhz, watts = monitor.summary(case.name)
        out[case.name] = {"tflops_rounds": [round(t, 1) for t in res[case.name]],
                          "tflops": statistics.median(res[case.name]), "sm_mhz": mhz, "power_w": watts}
    base = out["torch.matmul"]["tflops"]
    for name, v in out.items():
        v["ratio"] = v["tflops"] / base
        print(f"  burst {name:<28} {v['tflops']:7.1f} TFLOP/s {v['ratio']:.3f}x  {v['sm_mhz']} MHz", flush=True)
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--nvidia")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--idle", type=float, default=3.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=str(bench.RESULTS_DIR))
    args = p.parse_args()
    if args.child:
        child(args.child, args.nvidia)
        return 0
    import torch

    from multicast import find_ncu

    cutecourse.modes.require_gpu("sm_90a")
    names = [n for n in CASES if args.nvidia or not n.startswith("nvidia")]
    a, b, c = data(N)
    ref = torch.matmul(a, b.T)
    cases = [bench.checked_case(n, build(n, a, b, c, args.nvidia), c, ref, 1e-2) for n in names]
    result = {"environment": bench.environment(), "m": N, "n": N, "k": N, "data": "random_(-2, 2)",
              "nvidia_example": args.nvidia}
    with bench.GpuMonitor() as mon:
        result["burst"] = burst(cases, args.idle, args.rounds, mon)
    del cases
    ncu = find_ncu()
    result["fixed_clock"] = fixed_clock(names, args.nvidia, ncu) if ncu else {"error": "no ncu"}
    path = bench.save_json("experiment_gemm_power", result, args.out)
    print("wrote", path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
