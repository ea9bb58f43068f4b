"""DeepGEMM measured as the FP8 block-scaled peer: same GPU, same inputs, same harness.

    python benchmarks/deepgemm_peer.py [--rounds 3] [--shapes "dg 4x8192 n4096 k7168,..."] [--out DIR]
                                       [--kernels "course fp8,course fp8 128x192 2x1"]
    python benchmarks/deepgemm_peer.py --smoke      # one short round: everything builds and checks
    python benchmarks/deepgemm_peer.py --cpu-check  # here, no GPU: imports, layouts, the plan

DeepGEMM's README figures were taken on an H800 between idle gaps; they cannot be set beside the
course's sustained H100 numbers. This script times it in the course's harness instead, on
DeepGEMM's four grouped-contiguous shapes (``grouped_peers.PROBLEMS``' ``dg`` rows). The recipe
is DeepSeek-V3's: A per 1x128 block, B per 128x128 block, e4m3 data and fp32 scales. One set of
quantized inputs (``grouped.quantize_fp8``) feeds every row:

* ``DeepGEMM``: ``deep_gemm.m_grouped_fp8_gemm_nt_contiguous`` (the sm90 "1D2D" kernel, JIT-compiled
  by nvcc at its first call), on the groups packed into one (sum M, K) matrix with a group index
  per row, the weights stacked (G, N, K), B's scales stacked (G, N/128, K/128) and A's scales
  turned MN-major and TMA-aligned once, before timing (the layout its sm90 kernel reads);
* ``course fp8``: the course's grouped kernel, ``grouped.launcher_fp8`` with its defaults
  (``--kernels`` names other configurations of ``grouped_peers.COURSE_FP8`` to time beside it);
* ``cuBLAS blockwise dense twin`` (the baseline): ``F.scaled_mm`` with ``BlockWise1x128`` A scales
  and ``BlockWise128x128`` B scales on all rows times the first expert's weight: the same recipe
  and flops as one dense GEMM;
* torch's rowwise rows from ``grouped_peers.torch_fp8_cases`` (a cheaper recipe, for context).

Each row is checked before it is timed: DeepGEMM, the course and the twin against
``scaled_mm_reference`` (the exact fp32 sum of the scaled k-block products) within 1e-2 relative,
as the course's FP8 tests do. Sustained protocol, interleaved shuffled rounds (``bench.compare``).
Writes ``grouped_fp8_deepgemm.json`` under ``--out`` and, when the variable ``OUT`` is set, there
too; the JSON's ``summary`` holds each row's ratio to the best peer. DeepGEMM comes from
``tools/deepgemm_kit.py build`` (``/tmp/deepgemm``); a row that cannot be built or is wrong is left
out with a note, the others still count, and the exit status is 1.

DeepGEMM runs first in a child process (``deepgemm_probe.py``: the same imports, inputs and first
calls, on every shape, its JIT filling the shared cache): a crash there (a segmentation fault in
its extension, say) costs only DeepGEMM's rows, noted with how the child died; this process loads
DeepGEMM only for the shapes the child checked. Each shape's results are saved as soon as it is
timed, so a later failure cannot lose them. DeepGEMM's layout, call and import:
``deepgemm_call.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tools"))

from cutecourse import bench  # noqa: E402
from cutecourse.kernels import grouped  # noqa: E402
from cutecourse.models import blockwise_fp8 as fp8b  # noqa: E402

import deepgemm_build  # noqa: E402
import deepgemm_pack  # noqa: E402
import gemm  # noqa: E402  (the protocols)
import grouped_peers as peers  # noqa: E402
from deepgemm_call import (MAX_REL_ERR, deepgemm_call, deepgemm_inputs, deepgemm_kernels,  # noqa: E402
                           emulate_deepgemm, import_deepgemm, save_sass)
from deepgemm_probe import probe_deepgemm  # noqa: E402
from row_checks import rel_err  # noqa: E402

SHAPES = [name for name in peers.PROBLEMS if name.startswith("dg ")]
DEEPGEMM = "DeepGEMM"
COURSE = "course fp8"
TWIN = "cuBLAS blockwise dense twin"
#: torch's rowwise rows (grouped and dense): context, not the same recipe.
ROWWISE = (peers.TORCH_FP8[0], peers.TORCH_FP8[1])
PEERS = (DEEPGEMM, TWIN)
RESULT = "grouped_fp8_deepgemm"
SMOKE = dict(rounds=1, warmup=2, iterations=5, repeats=1, settle_s=0.05)


def blockwise_twin(qa, sa, qw, sw, reference):
    """(fn, how) for cuBLAS's blockwise FP8 GEMM of every row ``qa`` (scales ``sa``, 1x128) by one
    weight ``qw`` (scales ``sw``, 128x128) via ``F.scaled_mm``; torch has changed the scale layouts
    it takes, so each is tried against ``reference``. (None, why) when none computes it."""
    import torch
    import torch.nn.functional as F

    kind = getattr(F, "ScalingType", None)
    if kind is None or not hasattr(F, "scaled_mm"):
        return None, f"torch {torch.__version__} has no F.scaled_mm with ScalingType"
    tried = []
    for a_name, sa_ in (("sa M-major", sa.t().contiguous().t()), ("sa", sa.contiguous())):
        for b_name, sw_ in (("sw.t()", sw.t()), ("sw.t().contiguous()", sw.t().contiguous()), ("sw", sw)):
            def fn(sa_=sa_, sw_=sw_):
                return F.scaled_mm(qa, qw.t(), sa_, kind.BlockWise1x128, sw_, kind.BlockWise128x128,
                                   output_dtype=torch.bfloat16)
            try:
                err = rel_err(fn(), reference)
            except Exception as e:  # noqa: BLE001  (this layout refused: try the next)
                tried.append(f"{a_name}, {b_name}: {str(e).strip().splitlines()[0][:120]}")
                continue
            if err <= MAX_REL_ERR:
                return fn, f"{a_name}, {b_name}; relative error {err:.3g}"
            tried.append(f"{a_name}, {b_name}: relative error {err:.3g}")
    return None, "; ".join(tried)


def course_launcher(qA, SA, qB, SB, Cs, opts):
    """The course's FP8 launch closure through its public ``grouped.launcher_fp8`` (torch's order:
    data A, data B, then their scales). Passed by name, so that a reordered signature fails here
    as a TypeError instead of a dtype refusal on the GPU; its checks all run before any GPU is
    needed (a CPU test calls this)."""
    return grouped.launcher_fp8(As=qA, Bs=qB, SAs=SA, SBs=SB, Cs=Cs, **opts)


def shape_cases(name, dg, cases, errors, notes, course_rows=(COURSE,)):
    """Build and check every row of shape ``name`` (the course's: ``course_rows``, names of
    ``grouped_peers.COURSE_FP8``); return the flops of one launch, the rows, N and K."""
    import torch

    rows, n, k, _kind, x, w, offs, c = peers.problem_data(name)
    starts = [0] + offs.tolist()[:-1]
    qA, SA, qB, SB = grouped.quantize_fp8([x[s:s + m] for s, m in zip(starts, rows)], list(w))
    ref8 = torch.cat([fp8b.scaled_mm_reference(*q) for q in zip(qA, SA, qB, SB)])
    exact = torch.cat([x[s:s + m] @ wg.T for s, m, wg in zip(starts, rows, w)])
    a, sfa, b, sfb, m_indices = deepgemm_inputs(qA, SA, qB, SB, rows)

    def add(label, build, out, ref):
        t0 = time.perf_counter()
        try:
            cases.append(bench.checked_case(label, build(), out, ref, MAX_REL_ERR))
            errors[label] = rel_err(out, ref)
            print(f"  {label}: checked ({time.perf_counter() - t0:.0f} s, error {errors[label]:.3g})", flush=True)
        except Exception as e:  # noqa: BLE001  (a build or JIT failure, a wrong result: noted, not timed)
            notes[label] = f"not timed: {type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:240]}"
            print(f"  {label}: {notes[label]}", flush=True)

    if dg is not None:
        d = torch.empty(a.shape[0], n, device="cuda", dtype=torch.bfloat16)
        add(DEEPGEMM, lambda: deepgemm_call(dg, a, sfa, b, sfb, m_indices, d), d, ref8)
    Cs = [c[s:s + m] for s, m in zip(starts, rows)]
    for label in course_rows:
        opts = peers.COURSE_FP8[label]
        add(label, lambda opts=opts: course_launcher(qA, SA, qB, SB, Cs, opts), c, ref8)
    dense_ref = fp8b.scaled_mm_reference(a, sfa, qB[0], SB[0])
    fn, how = blockwise_twin(a, sfa, qB[0], SB[0], dense_ref)
    notes[TWIN] = how
    if fn is not None:
        errors[TWIN] = rel_err(fn(), dense_ref)
        cases.append(bench.Case(TWIN, fn))
    peers.torch_fp8_cases(x, w, offs, exact, cases, errors, notes, ROWWISE)
    return 2 * sum(rows) * n * k, rows, n, k


def summary(results: dict) -> dict:
    """Per shape: each row's TFLOP/s and ratio to the best peer (DeepGEMM or cuBLAS's twin,
    whichever is faster on that shape), and the course's ratio to each peer."""
    out = {}
    for name, res in results.items():
        speed = {r.name: r.tflops for r in res.rows}
        best = max((p for p in PEERS if p in speed), key=speed.get, default=None)
        entry = {"tflops": {k: round(v, 1) for k, v in speed.items()}, "best peer": best}
        if best:
            entry["ratio to best peer"] = {k: round(v / speed[best], 3) for k, v in speed.items()}
        entry["course / peer"] = {row: {p: round(speed[row] / speed[p], 3) for p in PEERS if p in speed}
                                  for row in speed if row.startswith("course")}
        out[name] = entry
    return out


def provenance(dg) -> dict:
    info = {"rows": {DEEPGEMM: "deep_gemm.m_grouped_fp8_gemm_nt_contiguous, recipe (1, 128, 128), fp32 scales",
                     COURSE: "grouped.launcher_fp8, default configuration",
                     TWIN: "F.scaled_mm BlockWise1x128 x BlockWise128x128, all rows x expert 0's weight"},
            "check": f"max relative error <= {MAX_REL_ERR} against scaled_mm_reference"}
    if dg is not None:
        info["deep_gemm"] = getattr(dg, "__version__", "?")
        kit = deepgemm_build.DEST / "MANIFEST.json"
        if kit.exists():
            info["kit"] = {k: v for k, v in json.loads(kit.read_text()).items() if k != "files"}
        try:
            nvcc = Path(os.environ["CUDA_HOME"]) / "bin" / "nvcc"
            info["nvcc"] = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True).stdout.strip()
            info["nvcc"] = info["nvcc"].splitlines()[-1]
        except (OSError, KeyError, IndexError):
            pass
        info["kernels"] = deepgemm_kernels()
    return info


def run(shapes, protocol: dict, dg, why_not: str, course_rows=(COURSE,), skip=None,
        on_shape=None) -> tuple[dict, dict]:
    """Time every shape; ``skip`` (shape -> why) leaves DeepGEMM out of those shapes; ``on_shape``
    (results, notes) is called after each shape, to save what is measured so far."""
    import torch

    torch.manual_seed(0)
    results, all_notes, skip = {}, {}, skip or {}
    for name in shapes:
        t0 = time.perf_counter()
        print(f"{name}:", flush=True)
        dg_here = None if name in skip else dg
        cases, errors, notes = [], {}, {} if dg_here is not None else {DEEPGEMM: skip.get(name, why_not)}
        all_notes[name] = notes
        try:
            results[name] = _measure(name, dg_here, cases, errors, notes, course_rows, protocol, t0)
        except Exception as e:  # noqa: BLE001  (one shape failing leaves the others' numbers standing)
            notes["failed"] = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"
            print(f"  {name} failed: {notes['failed']}", flush=True)
        del cases
        torch.cuda.empty_cache()
        if on_shape is not None:
            on_shape(results, all_notes)
    return results, all_notes


def _measure(name, dg, cases, errors, notes, course_rows, protocol, t0):
    """One shape: its rows built and checked (``shape_cases``), then timed together."""
    flops, rows, n, k = shape_cases(name, dg, cases, errors, notes, course_rows)
    if not any(c.name == TWIN for c in cases):
        print(f"  {TWIN}: unavailable ({notes.get(TWIN)}); baseline: {peers.BASELINE_FP8}", flush=True)
    baseline = TWIN if any(c.name == TWIN for c in cases) else peers.BASELINE_FP8
    print(f"  checked in {time.perf_counter() - t0:.0f} s; timing {[c.name for c in cases]}", flush=True)
    with bench.GpuMonitor() as monitor:
        res = bench.compare(
            f"FP8 block-scaled grouped GEMM against DeepGEMM, {name} ({len(rows)} groups, sum M = {sum(rows)}, "
            f"N = {n}, K = {k}), normal data, sustained", cases, bench.Work(flops=flops), baseline=baseline,
            monitor=monitor, progress=False, **protocol,
            params={"groups": len(rows), "rows": rows, "n": n, "k": k, "data": "normal",
                    "protocol": "sustained", "blocks": "A 1x128, B 128x128, e4m3 + fp32",
                    "relative errors vs scaled_mm_reference (rowwise rows: vs the exact product)": errors,
                    **notes})
    print(res.table(), flush=True)
    return res


def save(results: dict, extra: dict, out_dirs) -> list[Path]:
    body = {"set": {k: r.to_dict() for k, r in results.items()}, **extra}
    return [bench.save_json(RESULT, body, d) for d in out_dirs]


def cpu_check(shapes) -> int:
    """No GPU: the imports, DeepGEMM's packing of the course's quantized groups checked against the
    course's reference on small groups, the kit's manifest, and the plan."""
    import torch

    torch.manual_seed(0)
    rows, n, k = [128, 256, 128], 256, 384  # small, with DeepGEMM's 128-row alignment
    As = [torch.randn(m, k) for m in rows]
    Ws = [torch.randn(n, k) for _ in rows]
    qA, SA, qB, SB = grouped.quantize_fp8(As, Ws)
    a, sfa, b, sfb, m_indices = deepgemm_inputs(qA, SA, qB, SB, rows)
    ref = torch.cat([fp8b.scaled_mm_reference(*q) for q in zip(qA, SA, qB, SB)])
    err = rel_err(emulate_deepgemm(a, sfa, b, sfb, m_indices), ref)
    print(f"packing: a {tuple(a.shape)} {a.dtype}, sfa {tuple(sfa.shape)}, b {tuple(b.shape)}, sfb {tuple(sfb.shape)}, "
          f"m_indices {m_indices.tolist()[::128]} per 128 rows; emulated DeepGEMM vs scaled_mm_reference: {err:.2e}")
    if not err <= 1e-5:
        print("CPU_CHECK failed: the DeepGEMM packing does not compute the groups' products")
        return 1
    import torch.nn.functional as F

    has_twin = hasattr(F, "scaled_mm") and hasattr(getattr(F, "ScalingType", None), "BlockWise128x128")
    print(f"torch {torch.__version__}: F.scaled_mm blockwise {'present' if has_twin else 'MISSING'} "
          "(the GPU machine's torch is the one that counts)")
    kit = deepgemm_pack.KIT
    if kit.exists():
        m = deepgemm_pack.manifest(kit)
        missing = [p for p in deepgemm_pack.REQUIRED if p not in m["files"]]
        print(f"kit {kit.relative_to(HERE.parent)}: {kit.stat().st_size / 2**20:.2f} MiB, "
              f"DeepGEMM {m['deepgemm'][:7]}, CUTLASS {m['cutlass'][:7]}, fmt {m['fmt'][:7]}, {len(m['files'])} files"
              + (f"; MISSING {missing}" if missing else ""))
        if missing:
            return 1
    else:
        print(f"kit {kit} not packed yet: python tools/deepgemm_kit.py pack")
    print("plan (on the H100): python tools/deepgemm_kit.py build, then this script:")
    for name in shapes:
        r, nn, kk, _ = peers.PROBLEMS[name]
        print(f"  {name}: {len(r)} groups x {r[0]} rows, {2 * sum(r) * nn * kk / 1e12:.2f} TFLOP per launch; rows "
              f"{DEEPGEMM}, {COURSE}, {TWIN} (baseline), {', '.join(ROWWISE)}")
    also = " and $OUT" if os.environ.get("OUT") else ""
    print(f"  writes {RESULT}.json to {bench.RESULTS_DIR.relative_to(HERE.parent)}{also}")
    print("CPU_CHECK ok")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--shapes", help=f"comma-separated, of {SHAPES} (default: all)")
    p.add_argument("--out", default=str(bench.RESULTS_DIR))
    p.add_argument("--kernels", default=COURSE, help="the course's rows: comma-separated names of "
                   "grouped_peers.COURSE_FP8 (default: the launcher's defaults, 'course fp8')")
    p.add_argument("--smoke", action="store_true", help="one short round: builds and checks everything")
    p.add_argument("--cpu-check", action="store_true", help="no GPU: imports, packing, kit manifest, plan")
    p.add_argument("--no-deepgemm", action="store_true", help="time the other rows only")
    p.add_argument("--probe-timeout", type=float, default=480,
                   help="seconds for DeepGEMM's first calls on every shape (its JIT compiles), in a child process")
    args = p.parse_args()
    shapes = [s.strip() for s in args.shapes.split(",")] if args.shapes else SHAPES
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        raise SystemExit(f"--shapes: unknown {unknown}; the shapes are {SHAPES}")
    course_rows = [k.strip() for k in args.kernels.split(",") if k.strip()]
    if [k for k in course_rows if k not in peers.COURSE_FP8] or not course_rows:
        raise SystemExit(f"--kernels: {course_rows}; the course's FP8 rows are {list(peers.COURSE_FP8)}")
    if args.cpu_check:
        return cpu_check(shapes)
    import cutecourse

    cutecourse.modes.require_gpu("sm_90a")
    protocol = SMOKE if args.smoke else {**gemm.PROTOCOLS["sustained"], "rounds": args.rounds}
    t0 = time.perf_counter()
    outs = [args.out] + ([os.environ["OUT"]] if os.environ.get("OUT") else [])
    skip = ({s: "left out (--no-deepgemm)" for s in shapes} if args.no_deepgemm
            else probe_deepgemm(shapes, args.probe_timeout, outs[1:]))
    dg, why_not = (None, "left out") if all(skip.values()) else import_deepgemm()
    if dg is None:
        print(f"{DEEPGEMM}: {why_not}", flush=True)

    def checkpoint(results, notes):  # what is measured so far, in case a later shape takes the process down
        save(results, {"summary": summary(results), "notes": notes, "partial": True,
                       "protocol": "smoke" if args.smoke else protocol}, outs)

    results, notes = run(shapes, protocol, dg, why_not, course_rows, {k: v for k, v in skip.items() if v},
                         checkpoint)
    table = summary(results)
    extra = {"summary": table, "deepgemm": provenance(dg), "protocol": "smoke" if args.smoke else protocol,
             "notes": notes}
    for path in save(results, extra, outs):
        print(f"wrote {path}", flush=True)
    if dg is not None and os.environ.get("OUT"):
        print(f"DeepGEMM's SASS: {save_sass(os.environ['OUT'])}", flush=True)
    print(f"{'shape':<24} {'row':<28} {'TFLOP/s':>8} {'/ DeepGEMM':>11} {'/ twin':>8}")
    for name, e in table.items():
        for row, tf in e["tflops"].items():
            vs = [tf / e["tflops"][p] if p in e["tflops"] else float("nan") for p in PEERS]
            print(f"{name:<24} {row[:28]:<28} {tf:8.0f} {vs[0]:11.3f} {vs[1]:8.3f}")
    missing = [s for s in shapes if s not in results or DEEPGEMM not in {row.name for row in results[s].rows}]
    print(f"DEEPGEMM_PEER {'ok' if not missing else 'incomplete: no DeepGEMM row on ' + str(missing)} "
          f"({time.perf_counter() - t0:.0f} s)", flush=True)
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
