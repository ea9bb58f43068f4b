"""Notebook 05's measurement: the Hopper GEMM with clusters 1x1, 2x1, 1x2, 2x2, one run.

    python benchmarks/multicast.py [--size 8192] [--out benchmarks/results] [--ncu] [--nvidia PATH]

1. Correctness: every cluster shape against torch (fp32 reference), on a few shapes including a
   ragged K, and on the timed problem itself (output poisoned with NaN first).
2. Optional (``--ncu``): Nsight Compute, one launch per kernel in a child process, at a fixed SM
   clock (``--clock-control base``): L2 and DRAM traffic, and the kernel's duration with the
   power controller taken out of the comparison. If ncu cannot read the counters, the reason is
   recorded instead.
3. Timing, same harness, same run, same kernel, fp16 size^3, small-integer data as NVIDIA's
   examples (``random_(-2, 2)``): tile 128x256 at cluster 1x1 (the baseline), 2x1, 1x2, 2x2, with
   L2 eviction hints both ways round; tile 128x128 (3 stages, two CTAs per SM) at 1x1 and 2x1,
   where each flop needs twice the operand bytes; the persistent warp-specialized schedule
   (``hopper_gemm_persistent``) at 1x1 and 2x1; torch.matmul; with ``--nvidia PATH``, NVIDIA's
   CuTeDSL example at 1x1 and 2x1. Two protocols (``cutecourse.bench.compare``): *sustained*,
   interleaved rounds, each case run 0.5 s before it is timed: the clock the GPU can hold
   at its power cap; *burst*, 3 s idle
   before each case, the boost clock. SM clock recorded per case.

Writes ``multicast_fp16_<size>.json`` (sustained) and ``multicast_fp16_<size>_burst.json``
(cutecourse.bench format; counters and the planner's predicted L2 bytes under ``params``).
"""

from __future__ import annotations

import argparse
import csv
import io
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/gemm.py

import cutecourse  # noqa: E402  (sets the DSL's arch before cutlass is imported)
from cutecourse import bench  # noqa: E402
from cutecourse.kernels import hopper_gemm_cluster as hc  # noqa: E402
from cutecourse.kernels import hopper_gemm_persistent as hp  # noqa: E402
from cutecourse.models.multicast import l2_traffic, plan  # noqa: E402
from gemm import nvidia_kernel, operands  # noqa: E402  (benchmarks/gemm.py)

TILE = (128, 256)
CHECK_SHAPES = [(1024, 2048, 512), (512, 1024, 1000), (2048, 2048, 4096)]
NCU_METRICS = ["lts__t_bytes.sum", "dram__bytes_read.sum", "lts__t_sectors_srcunit_tex_op_read.sum",
               "lts__t_sectors_op_read.sum", "gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second"]
NCU_FALLBACK = ["lts__t_bytes.sum", "dram__bytes_read.sum"]


def name(cluster) -> str:
    return f"cluster {cluster[0]}x{cluster[1]}"


def check(cluster, shapes, **kernel) -> float:
    import torch

    worst = 0.0
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda").half()
        b = torch.randn(n, k, device="cuda").half()
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
        hc.launcher(a, b, c, cluster=cluster, tile=TILE, **kernel)()
        torch.cuda.synchronize()
        ref = a.float() @ b.float().T
        err = ((c.float() - ref).abs().max() / ref.abs().max()).item()
        if not err < 1e-2:
            raise SystemExit(f"{name(cluster)} {m}x{n}x{k}: max relative error {err:.3g} vs torch")
        worst = max(worst, err)
    return worst


#: The kernels measured: name -> (tile, stages, cluster). 128x128 with 3 stages fits two CTAs per SM.
KERNELS = {f"cluster {m}x{n}": (TILE, None, (m, n)) for m, n in hc.CLUSTERS}
KERNELS.update({f"128x128 cluster {m}x{n}": ((128, 128), 3, (m, n)) for m, n in ((1, 1), (2, 1))})
#: The persistent, warp-specialized schedule (hopper_gemm_persistent, static tile order) at 1x1, 2x1.
PERSISTENT = {f"persistent cluster {m}x{n}": (m, n) for m, n in ((1, 1), (2, 1))}
#: What ncu profiles (at the base clock).
NCU_KERNELS = ["cluster 1x1", "cluster 2x1", "128x128 cluster 1x1", "128x128 cluster 2x1",
               *PERSISTENT]


def launcher(kernel: str, a, b, c):
    """``fn()`` for a kernel of KERNELS or PERSISTENT on these operands (validated, compiled)."""
    if kernel in PERSISTENT:
        return hp.launcher(a, b, c, tile=TILE, cluster=PERSISTENT[kernel])
    tile, stages, cluster = KERNELS[kernel]
    return hc.launcher(a, b, c, cluster=cluster, tile=tile, stages=stages)


def ncu_child(kernel: str, n: int) -> None:
    """Run under ncu: one launch of a kernel of KERNELS on the timed problem."""
    import torch

    a, b = operands("ints", n, torch.float16)  # as NVIDIA's examples: random_(-2, 2)
    c = torch.empty(n, n, device="cuda", dtype=torch.float16)
    launcher(kernel, a, b, c)()
    torch.cuda.synchronize()


def find_ncu() -> str | None:
    for cand in (shutil.which("ncu"), "/usr/local/cuda/bin/ncu", *sorted(Path("/opt/nvidia").glob(
            "nsight-compute/*/ncu")), *sorted(Path("/usr/local").glob("cuda-*/bin/ncu"))):
        if cand and Path(cand).exists():
            return str(cand)
    return None


def parse_ncu_csv(text: str) -> dict[str, float]:
    """Metric name -> value from ``ncu --csv`` (one kernel profiled)."""
    start = text.find('"ID"')
    if start < 0:
        return {}
    out = {}
    for row in csv.DictReader(io.StringIO(text[start:])):
        metric, value = row.get("Metric Name"), row.get("Metric Value")
        if metric and value:
            try:
                out[metric] = float(value.replace(",", ""))
            except ValueError:
                pass
    return out


def counters(n: int, kernels) -> dict:
    ncu = find_ncu()
    if ncu is None:
        return {"error": "ncu not found on this machine"}
    result = {"ncu": ncu, "clock_control": "base", "metrics": {}}
    for kernel in kernels:
        for metrics in (NCU_METRICS, NCU_FALLBACK):
            cmd = [ncu, "--clock-control", "base", "--metrics", ",".join(metrics), "--csv",
                   "--print-units", "base", "-k", "regex:HopperGem", "--launch-count", "1",
                   sys.executable, __file__, "--ncu-child", kernel, "--size", str(n)]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
            except subprocess.TimeoutExpired:
                result.setdefault("errors", {})[kernel] = "ncu timed out after 240 s"
                break
            values = parse_ncu_csv(proc.stdout)
            if values:
                result["metrics"][kernel] = values
                break
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-6:]
            result.setdefault("errors", {})[kernel] = " | ".join(tail)[-800:]
        print(f"  ncu {kernel}: {result['metrics'].get(kernel, 'no counters')}", flush=True)
    return result


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--size", type=int, default=8192)
    p.add_argument("--out", default=str(bench.RESULTS_DIR))
    p.add_argument("--ncu", action="store_true", help="also read L2/DRAM counters with Nsight Compute")
    p.add_argument("--ncu-child", help=argparse.SUPPRESS)
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--nvidia", help="path to NVIDIA's CuTeDSL hopper dense_gemm.py (reference rows)")
    args = p.parse_args()
    n = args.size
    if args.ncu_child:
        ncu_child(args.ncu_child, n)
        return 0

    import torch

    cutecourse.modes.require_gpu("sm_90a")
    torch.manual_seed(0)

    # 1. correctness, every cluster shape
    errors, compile_s = {}, {}
    for cluster in hc.CLUSTERS:
        t0 = time.perf_counter()
        errors[name(cluster)] = check(cluster, CHECK_SHAPES)
        compile_s[name(cluster)] = round(time.perf_counter() - t0, 2)
    for variant in ("naive", "compiler"):  # the other mainloops multicast too
        for cluster in ((2, 1), (2, 2)):
            errors[f"{name(cluster)} {variant}"] = check(cluster, CHECK_SHAPES[:2], variant=variant)
    for cluster in ((1, 1), (2, 1)):
        for hints in hc.L2_HINT_PAIRS:
            errors[f"{name(cluster)} + L2 hints {hints}"] = check(cluster, CHECK_SHAPES[:2],
                                                                  l2_hints=hints)
    print(f"every kernel matches torch on {CHECK_SHAPES}: {errors}", flush=True)

    # 2. counters and fixed-clock durations
    traffic = counters(n, NCU_KERNELS) if args.ncu else {"error": "not requested (--ncu)"}

    # 3. timing: every case checked on the timed problem first (bench.checked_case)
    a, b = operands("ints", n, torch.float16)  # as NVIDIA's examples: random_(-2, 2)
    c = torch.empty(n, n, device="cuda", dtype=torch.float16)
    ref = torch.matmul(a, b.T)
    cases = {}
    for case_name in [*KERNELS, *PERSISTENT]:
        cases[case_name] = bench.checked_case(case_name, launcher(case_name, a, b, c), c, ref, 1e-2)
    for cluster in ((1, 1), (2, 1)):
        for h in hc.L2_HINT_PAIRS:
            case_name = f"{name(cluster)} + L2 hints {h}"
            cases[case_name] = bench.checked_case(
                case_name, hc.launcher(a, b, c, cluster=cluster, tile=TILE, l2_hints=h), c, ref, 1e-2)
    if args.nvidia:
        for cluster in ((1, 1), (2, 1)):
            case_name = f"NVIDIA example {cluster[0]}x{cluster[1]}"
            cases[case_name] = bench.checked_case(
                case_name, nvidia_kernel(args.nvidia, a, b, c, cluster), c, ref, 1e-2)
    cases["torch.matmul"] = bench.Case("torch.matmul", lambda: torch.matmul(a, b.T, out=c))

    predicted = {}
    for case_name, (tile, _, cluster) in KERNELS.items():
        t = l2_traffic(plan(tile=(*tile, 64), cluster=cluster, problem=(n, n, n)))
        predicted[case_name] = t["with_multicast"]
    for case_name, cluster in PERSISTENT.items():  # same tiles, other order: same bytes in total
        predicted[case_name] = l2_traffic(plan(tile=(*TILE, 64), cluster=cluster,
                                               problem=(n, n, n)))["with_multicast"]
    work = bench.Work(flops=2 * n * n * n)
    params = {"m": n, "n": n, "k": n, "dtype": "float16", "data": "random_(-2, 2)",
              "tile": list(TILE), "variant": "prefetch", "check_shapes": CHECK_SHAPES,
              "max_rel_error": errors, "first_compile_and_check_s": compile_s,
              "predicted_l2_to_smem_bytes": predicted, "ncu": traffic}
    burst_cases = ["cluster 1x1", "cluster 2x1", "128x128 cluster 1x1", "128x128 cluster 2x1",
                   *PERSISTENT, "NVIDIA example 1x1", "NVIDIA example 2x1", "torch.matmul"]
    for protocol, chosen, settings, suffix in [
            ("sustained", list(cases), dict(rounds=args.rounds, warmup=5, iterations=args.iterations,
                                            repeats=2, settle_s=0.5), ""),
            ("burst", [k for k in burst_cases if k in cases],
             dict(rounds=5, warmup=5, iterations=100, repeats=1, idle_s=3.0), "_burst")]:
        with bench.GpuMonitor() as monitor:
            res = bench.compare(f"GEMM fp16 {n}^3, TMA multicast clusters, {protocol}",
                                [cases[k] for k in chosen], work, "cluster 1x1", progress=False,
                                monitor=monitor, params={**params, "protocol": protocol}, **settings)
        print(res.table(), flush=True)
        print("wrote", res.save(f"multicast_fp16_{n}{suffix}", args.out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
