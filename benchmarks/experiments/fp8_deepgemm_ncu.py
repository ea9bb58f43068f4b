"""Experiment: DeepGEMM against the course's FP8 grouped kernel under Nsight Compute.

    python benchmarks/experiments/fp8_deepgemm_ncu.py [--shape "dg 8x4096 n4096 k7168"]
                                                      [--kernels "course fp8"] [--out DIR]

The course's default FP8 kernel (one part, 128x256, turns) runs 0.90-0.94x DeepGEMM on the same
H100 in the sustained protocol (``docs/grouped_measured.md``). Where do the cycles go? A child
process builds and checks DeepGEMM, the course rows named in ``--kernels`` (``grouped_peers
.COURSE_FP8``) and cuBLAS's blockwise dense twin on one shape (``deepgemm_peer.shape_cases``),
warms each up, then launches each once between ``cudaProfilerStart`` and ``Stop``; ``ncu``
(base clocks, so work per cycle compares) profiles those launches with the sections below. Per
kernel it prints the duration, the tensor pipe's active share, the issue slots used, warp
instructions, and the warp stall reasons (cycles per issued instruction). Writes the raw CSV and
``experiment_fp8_deepgemm_ncu.json`` under ``--out``; ``--source`` adds per-instruction stall
samples (``SourceCounters``), summed by opcode (``source_summary``). Needs ``tools/deepgemm_kit.py
build``.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))
sys.path.insert(0, str(HERE.parent))

from cutecourse import bench  # noqa: E402

SECTIONS = ("SpeedOfLight", "ComputeWorkloadAnalysis", "SchedulerStats", "WarpStateStats", "LaunchStats")
METRICS = ("gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second",
           "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
           "sm__inst_executed_pipe_uniform.avg.pct_of_peak_sustained_active",
           "smsp__issue_active.avg.pct_of_peak_sustained_active", "smsp__inst_executed.sum",
           "dram__bytes_read.sum", "lts__t_bytes.sum")
STALL = re.compile(r"^smsp__average_warps?_issue_stalled_(\w+?)_per_issue_active\.ratio$")


def child(shape: str, kernels: list[str]) -> int:
    import deepgemm_peer as dp
    from deepgemm_call import import_deepgemm

    dg, why = import_deepgemm()
    if dg is None:
        print(why, flush=True)
    cases, errors, notes = [], {}, {}
    dp.shape_cases(shape, dg, cases, errors, notes, course_rows=kernels)
    keep = [c for c in cases if c.name in ([dp.DEEPGEMM] + kernels + [dp.TWIN])]
    print("profiled, in order:", [c.name for c in keep], "errors", errors, notes, flush=True)
    return profile_once(keep)


def profile_once(cases) -> int:
    """The child's side of an ncu run: warm each case up, then launch each once between
    ``cudaProfilerStart`` and ``Stop`` (ncu runs with ``--profile-from-start off``); prints the
    cases' names, in order, after ``CHILD_DONE`` for ``profiled_names``."""
    import torch

    for c in cases:
        for _ in range(3):
            c.fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for c in cases:
        c.fn()
        torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    print("CHILD_DONE", json.dumps([c.name for c in cases]), flush=True)
    return 0


def profiled_names(stdout: str) -> list[str]:
    """The cases ``profile_once`` profiled, from the child's output."""
    return json.loads(next((ln.split(" ", 1)[1] for ln in stdout.splitlines() if ln.startswith("CHILD_DONE")), "[]"))


def records(text: str) -> list[dict]:
    """Each profiled kernel of an ``ncu --csv --page raw`` report: its name and numeric metrics."""
    start = text.find('"ID"')
    if start < 0:
        return []
    rows = list(csv.reader(io.StringIO(text[start:])))
    header, out = rows[0], []
    for row in rows[1:]:
        if len(row) != len(header) or not row[0].strip().isdigit():
            continue
        rec = {"kernel": row[header.index("Kernel Name")][:90]}
        for name, value in zip(header, row):
            try:
                rec[name] = float(value.replace(",", ""))
            except ValueError:
                pass
        out.append(rec)
    return out


def summarise(rec: dict) -> dict:
    stalls = {STALL.match(k).group(1): round(v, 3) for k, v in rec.items() if STALL.match(k) and v >= 0.05}
    get = rec.get
    return {"kernel": rec["kernel"], "us": get("gpu__time_duration.sum", 0) / 1e3,
            "sm_mhz": get("sm__cycles_elapsed.avg.per_second", 0) / 1e6,
            "tensor_pct": get("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"),
            "uniform_pct": get("sm__inst_executed_pipe_uniform.avg.pct_of_peak_sustained_active"),
            "issue_pct": get("smsp__issue_active.avg.pct_of_peak_sustained_active"),
            "warp_instructions": get("smsp__inst_executed.sum"), "dram_read_gb": get("dram__bytes_read.sum", 0) / 1e9,
            "l2_gb": get("lts__t_bytes.sum", 0) / 1e9, "registers": get("launch__registers_per_thread"),
            "stalls_per_issue": dict(sorted(stalls.items(), key=lambda kv: -kv[1]))}


def source_summary(text: str, top: int = 12) -> list[dict]:
    """Per kernel of an exported source page (``--page source --csv --print-source sass``): warp
    instructions executed and stall samples by opcode (the SASS mnemonic up to its first dot,
    predicates dropped), and the ``top`` instructions by samples with their main stall reasons."""
    out, blocks = [], re.split(r'^"Kernel Name",', text, flags=re.M)[1:]
    for block in blocks:
        name, _, body = block.partition("\n")
        rows = list(csv.reader(io.StringIO(body)))
        header, data = rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]
        at = {h: i for i, h in enumerate(header)}
        stall_cols = [h for h in header if h.startswith("stall_") and "(Not Issued)" not in h]
        num = lambda r, h: float((r[at[h]] or "0").replace(",", ""))  # noqa: E731
        by_op, hot = {}, []
        for r in data:
            sass = r[at["Source"]].strip()
            op = re.sub(r"^@!?U?P\w+\s+", "", sass).split(" ")[0].split(".")[0]
            d = by_op.setdefault(op, {"executed": 0.0, "samples": 0.0})
            d["executed"] += num(r, "Instructions Executed")
            d["samples"] += num(r, "Warp Stall Sampling (All Samples)")
            stalls = sorted(((num(r, h), h[6:]) for h in stall_cols), reverse=True)[:3]
            hot.append((num(r, "Warp Stall Sampling (All Samples)"), sass[:70],
                        [f"{n} {v:.0f}" for v, n in stalls if v]))
        total_x = sum(d["executed"] for d in by_op.values()) or 1
        total_s = sum(d["samples"] for d in by_op.values()) or 1
        ops = sorted(by_op.items(), key=lambda kv: -kv[1]["executed"])[:16]
        out.append({"kernel": name.strip('",')[:90],
                    "executed_by_opcode_pct": {k: round(100 * v["executed"] / total_x, 1) for k, v in ops},
                    "samples_by_opcode_pct": {k: round(100 * v["samples"] / total_s, 1) for k, v in
                                              sorted(by_op.items(), key=lambda kv: -kv[1]["samples"])[:12]},
                    "warp_instructions": total_x,
                    "hot": [{"samples_pct": round(100 * s_ / total_s, 1), "sass": t, "stalls": st}
                            for s_, t, st in sorted(hot, reverse=True)[:top]]})
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="dg 8x4096 n4096 k7168")
    p.add_argument("--kernels", default="course fp8")
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--source", action="store_true",
                   help="also sample stalls per SASS instruction (SourceCounters) and export the source page")
    p.add_argument("--child", action="store_true")
    args = p.parse_args()
    kernels = [k.strip() for k in args.kernels.split(",")]
    if args.child:
        return child(args.shape, kernels)
    cmd = ["ncu", "--profile-from-start", "off", "--csv", "--page", "raw", "--target-processes", "all"]
    for s in SECTIONS + (("SourceCounters",) if args.source else ()):
        cmd += ["--section", s]
    if args.source:  # keep the report: its source page (per SASS instruction) is exported below
        cmd += ["--export", str(Path(args.out, "fp8_deepgemm_ncu")), "--force-overwrite"]
    cmd += ["--metrics", ",".join(METRICS), sys.executable, __file__, "--child", "--shape", args.shape,
            "--kernels", args.kernels]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=540)
    Path(args.out, "fp8_deepgemm_ncu.csv").write_text(proc.stdout)
    print(proc.stderr[-3000:], flush=True)
    names = profiled_names(proc.stdout)
    recs = [summarise(r) for r in records(proc.stdout)]
    result = {"environment": {**bench.environment(), "command": " ".join(sys.argv)}, "shape": args.shape,
              "cases": names, "kernels": recs, "ncu": " ".join(cmd[:12]) + " ...",
              "clock": "ncu's default clock control (base clock)"}
    Path(args.out, "experiment_fp8_deepgemm_ncu.json").write_text(json.dumps(result, indent=1))
    rep = Path(args.out, "fp8_deepgemm_ncu.ncu-rep")
    if args.source and rep.exists():
        src = subprocess.run(["ncu", "--import", str(rep), "--page", "source", "--csv", "--print-source", "sass"],
                             capture_output=True, text=True, timeout=300)
        Path(args.out, "fp8_deepgemm_ncu_source.csv").write_text(src.stdout + src.stderr[-2000:])
        rep.unlink()
        result["source"] = source_summary(src.stdout)
        Path(args.out, "experiment_fp8_deepgemm_ncu.json").write_text(json.dumps(result, indent=1))
    for r in recs:
        print(json.dumps(r), flush=True)
    return 0 if recs else 1


if __name__ == "__main__":
    raise SystemExit(main())
