"""Experiment (issue 24): what limits the FP8 block-scaled grouped GEMM, measured by Nsight Compute.

    python benchmarks/experiments/grouped_fp8_ncu.py [--problem NAME] [--kernels ROW,...]
                                                     [--clock none|base|both] [--source [CASE]]
                                                     [--out DIR] [--tag _x]

The course's FP8 kernel runs at 0.80-0.92x cuBLAS's rowwise FP8 GEMM of the same size (the *dense
twin*) at the H100's 700 W cap, and at the same clock the twin does ~25% more work per cycle
(``grouped_peers.json``). Where do the course kernel's cycles go? One launch of each case under
Nsight Compute answers, per kernel:

* **duration and SM clock**, and from them the work per SM cycle (the clock divided out) and its
  share of the FP8 tensor cores' peak (``FP8_FLOPS_PER_SM_CYCLE``);
* **tensor pipe active** (the wgmma pipe, % of peak cycles): the tensor cores' idle time;
* **issue slots used** and the **warp stall reasons** (WarpStateStats: cycles per issued
  instruction, by reason, averaged over the warps; in the course kernel 8 of its 9 working warps
  are the consumers: wgmma waits, promotion FFMAs, named barriers);
* **shared memory** (L1/smem throughput, bank reads and writes: TMA writes every stage, each
  warpgroup's wgmmas read its A rows and the whole B tile), **L2** throughput and bytes, **DRAM**
  bytes (against the problem's floor: A, B and C once).

Cases are rows of ``benchmarks/grouped_peers.py`` (course rows of ``COURSE_FP8`` and torch's FP8
rows), built and checked by its ``fp8_cases`` on one of its problems, default DeepGEMM's 8 x 4096,
N 4096, K 7168. A child process under ncu builds every case, launches each once (compile, warm-up,
check), then profiles one launch per case: ``cudaProfilerStart`` / ``Stop`` around a tiny marker
kernel (a fill, ``MARKER``) and the case's launch, so the CSV's kernels are split into cases at the
markers. ``--clock none`` (default): the GPU's own clock; each profiled launch runs alone and short,
so it starts near the boost clock rather than at the sustained cap. ``base``: locked at the base
clock (``--clock-control base``), as ``schedules_fixed_clock.py``; ``both``: two runs.
``--source [CASE]``: one more run (CASE only, default the first course row) with per-instruction
stall samples (``SourceCounters``), summed by instruction class (QGMMA, FFMA, BAR, SYNCS, ...).

Metrics asked for by name are first checked against ``ncu --query-metrics`` (an unknown name
would fail the whole run); the sections' own metrics need no check. Writes
``experiment_grouped_fp8_ncu<tag>.json`` (``rows``: one per case and clock) and prints a table.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ (grouped_peers, multicast)

import cutecourse  # noqa: E402
from cutecourse import bench  # noqa: E402

PROBLEM = "dg 8x4096 n4096 k7168"
KERNELS = ("course fp8 1x1", "course fp8 2x1", "dense twin _scaled_mm rowwise")
#: The kernel launched before each case's launch in the profiled range: ``torch.Tensor.fill_``.
MARKER = "FillFunctor"
#: H100 dense FP8 wgmma: 4096 multiply-adds per SM per cycle (989 TFLOP/s bf16 is 2048 at 1830 MHz).
FP8_FLOPS_PER_SM_CYCLE = 2 * 4096
HBM_BYTES_PER_S = 3.35e12  # H100 SXM HBM3, nominal
SECTIONS = ("LaunchStats", "SpeedOfLight", "ComputeWorkloadAnalysis", "MemoryWorkloadAnalysis",
            "SchedulerStats", "WarpStateStats")
#: Asked for by name, besides the sections' (each kept only if this ncu knows its base name).
METRICS = ("gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second", "sm__cycles_elapsed.max",
           "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
           "smsp__issue_active.avg.pct_of_peak_sustained_active",
           "l1tex__throughput.avg.pct_of_peak_sustained_active",
           "l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed",
           "l1tex__data_bank_writes.avg.pct_of_peak_sustained_elapsed",
           "l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed",
           "lts__throughput.avg.pct_of_peak_sustained_elapsed", "lts__t_bytes.sum",
           "dram__bytes_read.sum", "dram__bytes_write.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
           "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum", "smsp__inst_executed.sum")
#: A row's fields: name -> (metrics that may hold it, first present wins; factor to the row's unit).
FIELDS = {
    "us": (("gpu__time_duration.sum",), 1e-3),  # ns -> us
    "sm_mhz": (("sm__cycles_elapsed.avg.per_second",), 1e-6),
    "tensor_pct": (("sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
                    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
                    "sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_active"), 1.0),
    "issue_pct": (("smsp__issue_active.avg.pct_of_peak_sustained_active",), 1.0),
    "cycles_per_issue": (("smsp__average_warp_latency_per_inst_issued.ratio",
                          "smsp__average_warps_active_per_inst_issued.ratio"), 1.0),
    "smem_pct": (("l1tex__throughput.avg.pct_of_peak_sustained_active",), 1.0),
    "smem_reads_pct": (("l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed",), 1.0),
    "smem_writes_pct": (("l1tex__data_bank_writes.avg.pct_of_peak_sustained_elapsed",), 1.0),
    "lsu_smem_pct": (("l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed",), 1.0),
    "l2_pct": (("lts__throughput.avg.pct_of_peak_sustained_elapsed",), 1.0),
    "l2_gb": (("lts__t_bytes.sum",), 1e-9),
    "dram_read_mb": (("dram__bytes_read.sum",), 1e-6),
    "dram_write_mb": (("dram__bytes_write.sum",), 1e-6),
    "dram_pct": (("dram__throughput.avg.pct_of_peak_sustained_elapsed",), 1.0),
    "ffma": (("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",), 1.0),
    "instructions": (("smsp__inst_executed.sum",), 1.0),
    "registers": (("launch__registers_per_thread",), 1.0),
}
#: WarpStateStats' stall metrics: cycles per issued instruction spent stalled for each reason.
STALL = re.compile(r"^smsp__average_warps?_issue_stalled_(\w+?)_per_issue_active\.ratio$")


# -- parsing (CPU-testable: tests/test_grouped_fp8_ncu.py) --------------------------------------
def ncu_records(text: str) -> list[dict]:
    """The kernels of an ``ncu --csv`` report, in launch order, each a dict of ``kernel`` (its
    name) and every numeric metric. Reads both layouts: ``--page raw`` (one row per kernel, a
    column per metric, a units row under the header) and ``--page details`` (one row per metric)."""
    start = text.find('"ID"')
    if start < 0:
        return []
    table = list(csv.reader(io.StringIO(text[start:])))
    header, body = table[0], [r for r in table[1:] if len(r) == len(table[0])]
    at = {name: i for i, name in enumerate(header)}
    kernels: dict[str, dict] = {}
    for row in body:
        kid = row[at["ID"]].strip()
        if not kid.isdigit():  # the raw page's units row
            continue
        rec = kernels.setdefault(kid, {"kernel": row[at.get("Kernel Name", 0)]})
        pairs = ([(row[at["Metric Name"]], row[at["Metric Value"]])] if "Metric Name" in at
                 else zip(header, row))
        for name, value in pairs:
            if "__" not in name:  # ID, Process ID, ...: not metrics
                continue
            try:
                rec.setdefault(name, float(value.replace(",", "")))
            except ValueError:
                pass
    return [kernels[k] for k in sorted(kernels, key=int)]


def split_cases(records: list[dict], names: list[str]) -> dict[str, list[dict]]:
    """The kernels after each marker, up to the next, as ``names[i]``'s (the i-th marker's)."""
    groups: list[list[dict]] = []
    for rec in records:
        if MARKER in rec["kernel"]:
            groups.append([])
        elif groups:
            groups[-1].append(rec)
    if len(groups) != len(names):
        raise ValueError(f"{len(groups)} profiled ranges (markers) for {len(names)} cases {names}: "
                         "a case failed before its launch, or ncu skipped kernels")
    return dict(zip(names, groups))


def stalls(rec: dict, top: int = 6) -> dict[str, float]:
    """The ``top`` stall reasons (cycles per issued instruction), largest first; "selected" (the
    cycle a warp issues) is not a stall."""
    found = {m.group(1): v for name, v in rec.items() if (m := STALL.match(name)) and m.group(1) != "selected"}
    return dict(sorted(found.items(), key=lambda kv: -kv[1])[:top])


def summarize(kernels: list[dict], flops: float, sms: int = 132) -> dict:
    """One case's row: its longest kernel (the GEMM; the others, if any, are named) in FIELDS'
    units, the work per SM cycle and its share of the FP8 peak, and the top stall reasons."""
    if not kernels:
        return {"error": "no kernel in the profiled range"}
    main = max(kernels, key=lambda r: r.get("gpu__time_duration.sum", 0.0))
    row: dict = {"kernel": main["kernel"][:120]}
    for field, (names, factor) in FIELDS.items():
        value = next((main[n] for n in names if n in main), None)
        if value is not None:
            row[field] = round(value * factor, 3)
    if row.get("us") and row.get("sm_mhz"):
        row["tflops"] = round(flops / (row["us"] * 1e-6) / 1e12, 1)
        per_cycle = flops / (row["us"] * row["sm_mhz"]) / sms  # us * MHz = cycles
        row["flops_per_sm_cycle"] = round(per_cycle)
        row["of_fp8_peak"] = round(per_cycle / FP8_FLOPS_PER_SM_CYCLE, 3)
    row["stalls"] = stalls(main)
    if len(kernels) > 1:
        row["other_kernels"] = [k["kernel"][:60] for k in kernels if k is not main]
    return row


def table(rows: list[dict]) -> str:
    head = (f"{'case':<34}{'clock':>6}{'us':>8}{'MHz':>6}{'TFLOP/s':>8}{'peak':>6}{'tensor%':>8}{'issue%':>7}"
            f"{'smem%':>6}{'rd%':>5}{'wr%':>5}{'L2%':>5}{'DRAM MB':>8}  top stalls (cycles/instr)")
    lines = [head]
    for r in rows:
        def f(key, fmt):
            return format(r[key], fmt) if isinstance(r.get(key), (int, float)) else "-"
        top = ", ".join(f"{k} {v:.2f}" for k, v in list(r.get("stalls", {}).items())[:3])
        lines.append(f"{r['case'][:33]:<34}{r['clock']:>6}{f('us', '.0f'):>8}{f('sm_mhz', '.0f'):>6}"
                     f"{f('tflops', '.0f'):>8}{f('of_fp8_peak', '.2f'):>6}{f('tensor_pct', '.1f'):>8}"
                     f"{f('issue_pct', '.1f'):>7}{f('smem_pct', '.0f'):>6}{f('smem_reads_pct', '.0f'):>5}"
                     f"{f('smem_writes_pct', '.0f'):>5}{f('l2_pct', '.0f'):>5}{f('dram_read_mb', '.0f'):>8}  {top}"
                     + (f"  ERROR {r['error']}" if "error" in r else ""))
    return "\n".join(lines)


SASS_CLASSES = (("QGMMA", r"^\S*GMMA"), ("WARPGROUP", r"^WARPGROUP"), ("FFMA", r"^FFMA"), ("FMUL", r"^FMUL"),
                ("BAR", r"^BAR"), ("SYNCS", r"^SYNCS"), ("LDG", r"^LDG"), ("STSM/STS", r"^ST(SM|S)"),
                ("UTMA", r"^UTMA"))


def _source_tables(text: str) -> list[list[tuple[str, float]]]:
    """Each kernel's (SASS, stall samples) rows in ``--page source`` CSV output: a table starts
    at a header naming "Source" and a "Warp Stall Sampling (All ...)" column."""
    lines, tables = text.splitlines(), []
    starts = [i for i, ln in enumerate(lines) if '"Source"' in ln and "Stall Sampling (All" in ln] + [len(lines)]
    for a, b in zip(starts, starts[1:]):
        reader = csv.DictReader(io.StringIO("\n".join(lines[a:b])))
        samples = next(c for c in reader.fieldnames if "Stall Sampling (All" in c)
        rows = []
        for row in reader:
            try:
                rows.append((row["Source"].strip(), float(row[samples].replace(",", ""))))
            except (TypeError, ValueError, AttributeError):  # not a row of this table
                continue
        tables.append(rows)
    return tables


def source_stalls(text: str, top: int = 25) -> dict:
    """``--page source --print-source sass --csv``: of the kernel with the most stall samples
    (the GEMM, not the marker), the ``top`` SASS instructions and each instruction class's share
    of all samples (SASS_CLASSES)."""
    tables = _source_tables(text)
    if not tables:
        return {"error": "no source table in ncu's output", "head": text.splitlines()[:5]}
    counts = max(tables, key=lambda t: sum(c for _, c in t))
    total = sum(c for _, c in counts) or 1.0
    by_class: dict[str, float] = {}
    for sass, c in counts:
        op = re.sub(r"^@!?U?P\w+\s+", "", sass)  # a predicate is not the opcode
        name = next((n for n, rx in SASS_CLASSES if re.match(rx, op)), "other")
        by_class[name] = by_class.get(name, 0.0) + c / total
    by_class = dict(sorted(by_class.items(), key=lambda kv: -kv[1]))
    return {"samples": total, "by_class": {k: round(v, 3) for k, v in by_class.items()},
            "top": [[s, round(c / total, 4)] for s, c in sorted(counts, key=lambda sc: -sc[1])[:top]]}


def known_metrics(query_output: str) -> set[str]:
    """Base metric names in ``ncu --query-metrics``'s listing (its first column)."""
    return {m.group(1) for ln in query_output.splitlines() if (m := re.match(r"^([a-z0-9]+__\w+)\s", ln))}


# -- the child, under ncu -------------------------------------------------------------------------
def child(problem: str, names: list[str]) -> None:
    """Build and check every case (``grouped_peers.fp8_cases``), then profile one launch of each
    after a marker kernel. Prints the cases it profiled after ``CHILD``."""
    import torch

    import grouped_peers as gp

    torch.manual_seed(0)
    rows, n, k, kind, x, w, offs, c = gp.problem_data(problem)
    cases, errors, notes = [], {}, {}
    gp.fp8_cases(rows, n, k, x, w, offs, c, cases, errors, notes, only=set(names))
    by_name = {case.name: case for case in cases}
    profiled = [name for name in names if name in by_name]
    marker = torch.zeros(1, dtype=torch.int32, device="cuda")
    for i, name in enumerate(profiled):
        by_name[name].fn()  # warm again, outside the profiled range
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        marker.fill_(i)
        by_name[name].fn()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    print("CHILD" + json.dumps({"profiled": profiled, "errors": errors, "notes": notes}), flush=True)


def child_program(problem: str, names: list[str]) -> list[str]:
    """The child's arguments: build and profile the cases ``names`` of ``problem``."""
    return ["--child", "--problem", problem, "--kernels", ",".join(names)]


def ncu_command(ncu: str, clock: str, metrics, program: list[str], source: bool = False) -> list[str]:
    cmd = [ncu, "--profile-from-start", "off", "--csv", "--print-units", "base", "--clock-control", clock]
    if source:
        cmd += ["--section", "SourceCounters", "--page", "source", "--print-source", "sass", "--launch-count", "2"]
    else:
        cmd += ["--page", "raw", *[a for s in SECTIONS for a in ("--section", s)]]
        cmd += ["--metrics", ",".join(metrics)] if metrics else []
    return cmd + [sys.executable, str(Path(__file__).resolve()), *program]


def _child_info(stdout: str) -> dict:
    line = next((ln for ln in stdout.splitlines() if ln.startswith("CHILD")), None)
    return json.loads(line[len("CHILD"):]) if line else {}


def profile(cmd: list[str], clock: str, flops: float) -> tuple[list[dict], dict]:
    """Run one ncu command; (its rows, the child's report). A failure becomes a row with an
    ``error`` (the output's last lines), so the runs before and after it still count."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return [{"case": "*", "clock": clock, "error": "ncu ran past 300 s"}], {}
    info = _child_info(proc.stdout)
    try:
        if not info:
            raise ValueError("the child did not finish")
        per_case = split_cases(ncu_records(proc.stdout), info["profiled"])
    except ValueError as e:
        tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-6:])
        return [{"case": "*", "clock": clock, "error": f"{e}: {tail[-900:]}"}], info
    rows = [{"case": name, "clock": clock, **summarize(kernels, flops)} for name, kernels in per_case.items()]
    return rows, info


def main() -> int:
    import grouped_peers as gp

    p = argparse.ArgumentParser()
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--problem", default=PROBLEM,
                   help=f"an FP8 problem of grouped_peers.PROBLEMS (default {PROBLEM!r})")
    p.add_argument("--kernels", default=",".join(KERNELS),
                   help="comma-separated rows: COURSE_FP8's and torch's FP8 rows of grouped_peers.py")
    p.add_argument("--clock", choices=("none", "base", "both"), default="none")
    p.add_argument("--source", nargs="?", const="", metavar="CASE",
                   help="also the stall samples per SASS instruction of CASE (default: the first course row)")
    p.add_argument("--out", default=str(bench.RESULTS_DIR))
    p.add_argument("--tag", default="")
    args = p.parse_args()
    names = [n.strip() for n in args.kernels.split(",") if n.strip()]
    known = [*gp.COURSE_FP8, *gp.TORCH_FP8]
    fp8_problems = [name for name, v in gp.PROBLEMS.items() if v[3] == "fp8"]
    if [n for n in names + [args.source or names[0]] if n not in known] or args.problem not in fp8_problems:
        raise SystemExit(f"--kernels must name rows of {known}; --problem one of "
                         f"{fp8_problems}")
    if args.child:
        child(args.problem, names)
        return 0
    from multicast import find_ncu

    cutecourse.modes.require_gpu("sm_90a")
    ncu = find_ncu()
    if not ncu:
        raise SystemExit("no ncu (Nsight Compute) on this machine")
    query = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=60).stdout
    have = known_metrics(query)
    metrics = [m for m in METRICS if m.split(".")[0] in have]
    rows_m, n, k, _ = gp.PROBLEMS[args.problem]
    flops = 2 * sum(rows_m) * n * k
    floor = sum(rows_m) * k + len(rows_m) * n * k + 2 * sum(rows_m) * n  # A, B (e4m3), C (bf16) once
    result = {"environment": bench.environment(),
              "ncu": subprocess.run([ncu, "--version"], capture_output=True, text=True).stdout.strip()[-80:],
              "problem": {"name": args.problem, "groups": len(rows_m), "rows": sum(rows_m), "n": n, "k": k,
                          "flops": flops, "min_bytes": floor,
                          "hbm_floor_us": round(floor / HBM_BYTES_PER_S * 1e6)},
              "protocol": "one launch per case under ncu after a warm-up launch; randn data",
              "metrics_asked": metrics, "metrics_unknown": [m for m in METRICS if m not in metrics], "rows": []}
    program = child_program(args.problem, names)
    name = f"experiment_grouped_fp8_ncu{args.tag}"
    for clock in (("none", "base") if args.clock == "both" else (args.clock,)):
        rows, info = profile(ncu_command(ncu, clock, metrics, program), clock, flops)
        result["rows"] += rows
        result.setdefault("relative errors vs the exact product", info.get("errors"))
        result.setdefault("notes", info.get("notes"))
        bench.save_json(name, result, args.out)  # kept if a later run is cut short
    if args.source is not None:
        first = args.source or next((nm for nm in names if nm.startswith("course")), names[0])
        try:
            proc = subprocess.run(ncu_command(ncu, "none", (), child_program(args.problem, [first]), source=True),
                                  capture_output=True, text=True, timeout=300)
            result["source"] = {"case": first, **source_stalls(proc.stdout)}
        except subprocess.TimeoutExpired:
            result["source"] = {"case": first, "error": "ncu ran past 300 s"}
    print(table(result["rows"]), flush=True)
    if "source" in result:
        print(f"stall samples by instruction class, {result['source']['case']}:",
              result["source"].get("by_class", result["source"]), flush=True)
    print("wrote", bench.save_json(name, result, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
