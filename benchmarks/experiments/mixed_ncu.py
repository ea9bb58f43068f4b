"""Experiment (notebook 08): the mixed-input GEMM at decode sizes under Nsight Compute.

    python benchmarks/experiments/mixed_ncu.py [--shapes 28672x8192,8192x8192] [--ms 1,16]
                                               [--variants course,deferred_scales,loads_only] [--out DIR]

``mixed_ceilings.py`` places the time by leaving steps out; this asks the profiler where a
launch's cycles go. A child process builds, for each weight shape and batch M, the kernel of each
variant (``mixed_variants.py``: ``course``, the scale after the MMA ``deferred_scales``, the
stream alone ``loads_only``) as the planner runs it, warms each up, then launches each once
between ``cudaProfilerStart`` and ``Stop``; ``ncu`` (base clock: work per cycle compares; caches
flushed before each pass: the weights come from HBM, as in a decode step) profiles those launches
with the sections of ``fp8_deepgemm_ncu.py`` and per-instruction stall samples. Per launch it
prints the duration, DRAM throughput, issue slots used, the tensor pipe's active share, warp
instructions, the warp stall reasons and the instructions executed and sampled by opcode. Writes
``experiment_mixed_ncu.json`` (and the raw CSV pages) under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))

from cutecourse import bench  # noqa: E402
from fp8_deepgemm_ncu import SECTIONS, METRICS, profile_once, profiled_names, records, source_summary, summarise  # noqa: E402

EXTRA_METRICS = ("dram__throughput.avg.pct_of_peak_sustained_elapsed",)


def child(shapes, ms, variants) -> int:
    import torch

    from cutecourse.kernels import mixed_input
    from cutecourse.quant import quantize_int4

    cases = []
    for n, k in shapes:
        torch.manual_seed(0)
        packed, scales, zeros = quantize_int4(torch.randn(n, k, device="cuda") * 0.02, 128)
        for m in ms:
            x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
            for v in variants:
                fn = mixed_input.launcher(x, packed, scales, zeros, variant=v)
                p = fn.plan
                cases.append(types.SimpleNamespace(
                    name=f"{v} {n}x{k} M={m} (tile_m {p.tile_m}, {p.warpgroups} wg, {p.splits} splits)", fn=fn))
    return profile_once(cases)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="28672x8192,8192x8192")
    p.add_argument("--ms", default="1,16")
    p.add_argument("--variants", default="course,deferred_scales,loads_only")
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--child", action="store_true")
    args = p.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    ms = [int(v) for v in args.ms.split(",")]
    variants = args.variants.split(",")
    if args.child:
        return child(shapes, ms, variants)
    rep = Path(args.out, "mixed_ncu")
    cmd = ["ncu", "--profile-from-start", "off", "--csv", "--page", "raw", "--target-processes", "all",
           "--export", str(rep), "--force-overwrite"]
    for s in SECTIONS + ("MemoryWorkloadAnalysis", "SourceCounters"):
        cmd += ["--section", s]
    cmd += ["--metrics", ",".join(METRICS + EXTRA_METRICS), sys.executable, __file__, "--child",
            "--shapes", args.shapes, "--ms", args.ms, "--variants", args.variants]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=540)
    Path(args.out, "mixed_ncu.csv").write_text(proc.stdout)
    print(proc.stderr[-3000:], flush=True)
    names = profiled_names(proc.stdout)
    recs = []
    for name, rec in zip(names, records(proc.stdout)):
        s = summarise(rec)
        s["case"] = name
        s["dram_pct"] = rec.get(EXTRA_METRICS[0])
        s["pipes_pct"] = {key.split("_pipe_")[1].split(".")[0]: round(v, 1) for key, v in rec.items()
                          if "inst_executed_pipe_" in key and key.endswith("pct_of_peak_sustained_active") and v >= 1}
        recs.append(s)
    result = {"environment": {**bench.environment(), "command": " ".join(sys.argv)}, "cases": names,
              "kernels": recs, "clock": "ncu's default clock control (base clock), caches flushed per pass"}
    if Path(f"{rep}.ncu-rep").exists():
        src = subprocess.run(["ncu", "--import", f"{rep}.ncu-rep", "--page", "source", "--csv", "--print-source",
                              "sass"], capture_output=True, text=True, timeout=300)
        Path(f"{rep}.ncu-rep").unlink()
        result["source"] = [dict(s, case=c) for s, c in zip(source_summary(src.stdout), names)]
    Path(args.out, "experiment_mixed_ncu.json").write_text(json.dumps(result, indent=1))
    for r in recs:
        print(json.dumps({k: r[k] for k in ("case", "us", "dram_pct", "issue_pct", "tensor_pct", "pipes_pct",
                                            "stalls_per_issue")}), flush=True)
    return 0 if recs else 1


if __name__ == "__main__":
    raise SystemExit(main())
