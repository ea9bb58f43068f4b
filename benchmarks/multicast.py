"""Notebook 05's measurement: the Hopper GEMM with clusters 1x1, 2x1, 1x2, 2x2, one run.

    python benchmarks/multicast.py [--size 8192] [--out benchmarks/results] [--ncu]

1. Correctness: every cluster shape against torch (fp32 reference), on a few shapes including a
   ragged K, and on the timed problem itself (output poisoned with NaN first).
2. Optional (``--ncu``): Nsight Compute reads the L2 and DRAM counters of one launch per cluster
   shape (``--clock-control none``), in a child process each; if it cannot (no ncu, no counter
   permission) the reason is recorded instead.
3. Timing: same harness (``cutecourse.bench.time_us``), same run, same kernel, fp16 size^3,
   tile 128x256: cluster 1x1 (the baseline), 2x1, 1x2, 2x2; 1x1 and 2x1 with L2 eviction hints
   both ways round; torch.matmul for reference. The cases are timed in interleaved rounds (a
   first run timed them one after the other and the GPU's clocks drifted by 2% between the
   first and the last case), each row the median over all rounds.

Writes ``multicast_fp16_<size>.json`` (cutecourse.bench format; counters and the planner's
predicted L2 bytes under ``params``).
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cutecourse  # noqa: E402  (sets the DSL's arch before cutlass is imported)
from cutecourse import bench  # noqa: E402
from cutecourse.kernels import hopper_gemm_cluster as hc  # noqa: E402
from cutecourse.models.multicast import l2_traffic, plan  # noqa: E402

TILE = (128, 256)
CHECK_SHAPES = [(1024, 2048, 512), (512, 1024, 1000), (2048, 2048, 4096)]
NCU_METRICS = ["lts__t_bytes.sum", "dram__bytes_read.sum", "lts__t_sectors_srcunit_tex_op_read.sum",
               "lts__t_sectors_op_read.sum", "gpu__time_duration.sum"]
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
        hc.launcher(a, b, c, cluster, TILE, **kernel)()
        torch.cuda.synchronize()
        ref = a.float() @ b.float().T
        err = ((c.float() - ref).abs().max() / ref.abs().max()).item()
        if not err < 1e-2:
            raise SystemExit(f"{name(cluster)} {m}x{n}x{k}: max relative error {err:.3g} vs torch")
        worst = max(worst, err)
    return worst


def ncu_child(cluster: tuple[int, int], n: int) -> None:
    """Run under ncu: one launch of the cluster kernel on the timed problem."""
    import torch

    torch.manual_seed(0)
    a = torch.randn(n, n, device="cuda").half()
    b = torch.randn(n, n, device="cuda").half()
    c = torch.empty(n, n, device="cuda", dtype=torch.float16)
    fn = hc.launcher(a, b, c, cluster, TILE)
    fn()
    torch.cuda.synchronize()


def gpu_clocks() -> str:
    """SM clock, power and temperature now (nvidia-smi), to explain drift between rounds."""
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                               "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=20).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"nvidia-smi failed: {e}"


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


def counters(n: int, clusters) -> dict:
    ncu = find_ncu()
    if ncu is None:
        return {"error": "ncu not found on this machine"}
    result = {"ncu": ncu, "metrics": {}}
    for cluster in clusters:
        for metrics in (NCU_METRICS, NCU_FALLBACK):
            cmd = [ncu, "--clock-control", "none", "--metrics", ",".join(metrics), "--csv",
                   "--print-units", "base", "-k", "regex:ClusterHopperGemm", "--launch-count", "1",
                   sys.executable, __file__, "--ncu-child", f"{cluster[0]}x{cluster[1]}",
                   "--size", str(n)]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
            except subprocess.TimeoutExpired:
                result.setdefault("errors", {})[name(cluster)] = "ncu timed out after 240 s"
                break
            values = parse_ncu_csv(proc.stdout)
            if values:
                result["metrics"][name(cluster)] = values
                break
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-6:]
            result.setdefault("errors", {})[name(cluster)] = " | ".join(tail)[-800:]
        print(f"  ncu {name(cluster)}: {result['metrics'].get(name(cluster), 'no counters')}",
              flush=True)
    return result


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--size", type=int, default=8192)
    p.add_argument("--out", default=str(bench.RESULTS_DIR))
    p.add_argument("--ncu", action="store_true", help="also read L2/DRAM counters with Nsight Compute")
    p.add_argument("--ncu-child", help=argparse.SUPPRESS)
    p.add_argument("--iterations", type=int, default=30)
    p.add_argument("--rounds", type=int, default=10)
    args = p.parse_args()
    n = args.size
    if args.ncu_child:
        ncu_child(tuple(int(v) for v in args.ncu_child.split("x")), n)
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
        for hints in hc.L2_HINTS:
            errors[f"{name(cluster)} + L2 hints {hints}"] = check(cluster, CHECK_SHAPES[:2],
                                                                  l2_hints=hints)
    print(f"every kernel matches torch on {CHECK_SHAPES}: {errors}", flush=True)

    # 2. counters
    traffic = counters(n, [(1, 1), (2, 1)]) if args.ncu else {"error": "not requested (--ncu)"}

    # 3. timing, interleaved: every round times every case once (in a rotated order), so that
    # a slow drift of the clocks (power, temperature) spreads over all cases instead of
    # favouring whichever ran first. Each row: the median over all rounds and repeats.
    a = torch.randn(n, n, device="cuda").half()
    b = torch.randn(n, n, device="cuda").half()
    c = torch.empty(n, n, device="cuda", dtype=torch.float16)
    ref = torch.matmul(a, b.T)
    kernels = [(name(cl), cl, None) for cl in hc.CLUSTERS]
    kernels += [(f"{name(cl)} + L2 hints {h}", cl, h) for cl in ((1, 1), (2, 1))
                for h in hc.L2_HINTS]
    cases = []
    for case_name, cluster, hints in kernels:
        fn = hc.launcher(a, b, c, cluster, TILE, l2_hints=hints)
        c.fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        err = ((c.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
        if not err < 1e-2:
            raise SystemExit(f"{case_name} at {n}^3: max relative error {err:.3g}")
        cases.append(bench.Case(case_name, fn))
    cases.append(bench.Case("torch.matmul", lambda: torch.matmul(a, b.T, out=c)))

    clocks = {"before": gpu_clocks()}
    repeats = {case.name: [] for case in cases}
    for r in range(args.rounds):
        order = cases[r % len(cases):] + cases[:r % len(cases)]
        for case in order:
            repeats[case.name] += bench.time_us(case, warmup=5, iterations=args.iterations,
                                                repeats=2)
    clocks["after"] = gpu_clocks()
    work = bench.Work(flops=2 * n * n * n)
    rows = [bench.Row(case.name, statistics.median(repeats[case.name]), repeats[case.name],
                      tflops=work.flops / (statistics.median(repeats[case.name]) * 1e-6) / 1e12)
            for case in cases]
    for row in rows:
        print(f"  {row.name:<34} {row.us:9.1f} us  spread {row.spread:.1%}", flush=True)

    predicted = {}
    for cluster in hc.CLUSTERS:
        t = l2_traffic(plan(tile=(*TILE, 64), cluster=cluster, problem=(n, n, n)))
        predicted[name(cluster)] = t["with_multicast"]
    res = bench.BenchResult(
        f"GEMM fp16 {n}x{n}x{n}, tile 128x256: TMA multicast clusters", work, "cluster 1x1", rows,
        {"m": n, "n": n, "k": n, "dtype": "float16", "tile": list(TILE), "variant": "prefetch",
         "timing": f"{args.rounds} interleaved rounds x 2 repeats x {args.iterations} launches",
         "check_shapes": CHECK_SHAPES, "max_rel_error": errors,
         "first_compile_and_check_s": compile_s, "gpu_clocks": clocks,
         "predicted_l2_to_smem_bytes": predicted, "ncu": traffic},
        bench.environment())
    base = res.speed(res.row("cluster 1x1"))
    for row in rows:
        row.ratio = res.speed(row) / base
    path = res.save(f"multicast_fp16_{n}", args.out)
    print(res.table())
    print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
