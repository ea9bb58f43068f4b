"""The course's FP8 block-scaled grouped GEMM against its bf16 grouped GEMM and torch.

    python benchmarks/grouped_fp8.py [--rounds 3] [--problems "8 mixed"] [--out DIR] [--tag _x]

The problems of ``benchmarks/grouped.py`` (N = K = 4096). The same random matrices (normal, as
activations and weights are), once in bf16 and once quantized the DeepSeek-V3 way (A per 1x128
block, B per 128x128 block, e4m3 + fp32 scales: ``models.blockwise_fp8.quantize_blockwise_fp8``).
Cases, all producing bf16 C:

* ``course bf16 grouped``: ``grouped.grouped_mm`` on the bf16 data: the baseline;
* ``torch._grouped_mm bf16``: torch's grouped kernel, same data;
* ``torch._scaled_mm loop``: one blockwise-scaled ``torch._scaled_mm`` per group (the scale
  layout torch takes is probed first; a torch without blockwise scaling on this GPU is reported);
* ``course fp8 ...``: ``grouped.launcher_fp8``, 1x1 and 2x1 clusters.

The FP8 cases are checked against ``scaled_mm_reference`` (the exact fp32 sum of the scaled
k-block products, computed on the GPU), the bf16 ones against torch.matmul; the relative error of
each is stored. Writes ``grouped_fp8<tag>.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cutecourse  # noqa: E402
from cutecourse import bench  # noqa: E402
from cutecourse.kernels import grouped  # noqa: E402
from cutecourse.models import blockwise_fp8 as fp8b  # noqa: E402

import gemm  # noqa: E402  (the protocols)
from grouped import K, N, PROBLEMS  # noqa: E402
from result_sets import save_and_show  # noqa: E402
from row_checks import rel_err  # noqa: E402

#: Both in bands of 8 cluster rows (``hopper_grouped_gemm_fp8.GROUP_M``); "m fastest" is the tile
#: order the FP8 kernel had before it took bands (whole columns of a group).
KERNELS = {"course fp8 1x1": dict(cluster=(1, 1)), "course fp8 2x1": dict(cluster=(2, 1)),
           "course fp8 2x1 m fastest": dict(cluster=(2, 1), group_m=1 << 12)}


#: How torch's blockwise ``_scaled_mm`` may want B's (N/128, K/128) scales: torch has changed
#: the layouts it accepts, so each is tried against the reference.
SB_LAYOUTS = {"sb.t()": lambda s: s.t(), "sb.t().contiguous()": lambda s: s.t().contiguous(), "sb": lambda s: s}


def torch_blockwise(qa, sa, qb, sb, layout):
    """``fn()``: qa * sa @ (qb * sb).T by ``torch._scaled_mm``, sa M-major, sb in ``layout``."""
    import torch

    sb_ = SB_LAYOUTS[layout](sb)
    return lambda: torch._scaled_mm(qa, qb.t(), sa, sb_, out_dtype=torch.bfloat16)


def find_torch_layout(qa, sa, qb, sb, ref):
    """(layout, "") of the first SB_LAYOUTS entry torch computes correctly, or (None, why not)."""
    import torch

    errors = []
    for layout in SB_LAYOUTS:
        try:
            out = torch_blockwise(qa, sa, qb, sb, layout)()
            torch.cuda.synchronize()
            err = rel_err(out, ref)
            if err < 1e-2:
                return layout, ""
            errors.append(f"{layout}: error {err:.3g}")
        except Exception as e:  # noqa: BLE001  (record what torch said, keep benchmarking)
            errors.append(f"{layout}: {str(e).splitlines()[0][:160]}")
    return None, "; ".join(errors)


def run(rounds: int, problems=None) -> tuple[dict, dict]:
    import torch

    torch.manual_seed(0)
    out, notes = {}, {}
    for name, rows in PROBLEMS.items():
        if problems is not None and name not in problems:
            continue
        g, total = len(rows), sum(rows)
        x = torch.randn(total, K, device="cuda")
        w = torch.randn(g, N, K, device="cuda")
        offs = torch.tensor(rows, dtype=torch.int64).cumsum(0).to(torch.int32).cuda()
        starts = [0] + offs.tolist()[:-1]
        As = [x[s:s + m] for s, m in zip(starts, rows)]
        qA, SA, qB, SB = grouped.quantize_fp8(As, list(w))
        c = torch.empty(total, N, device="cuda", dtype=torch.bfloat16)
        Cs = [c[s:s + m] for s, m in zip(starts, rows)]
        ref8 = torch.cat([fp8b.scaled_mm_reference(*q) for q in zip(qA, SA, qB, SB)])
        a16, w16 = x.bfloat16(), w.bfloat16()
        ref16 = torch.cat([a @ b.T for a, b in zip(a16.split(rows), w16)]).float()

        cases = [bench.checked_case("course bf16 grouped", grouped.packed_launcher(
            a16, w16.transpose(-2, -1), offs, c), c, ref16, 1e-2)]
        errors = {"course bf16 grouped": rel_err(c, ref16)}
        b16 = w16.transpose(-2, -1)
        errors["torch._grouped_mm bf16"] = rel_err(torch._grouped_mm(a16, b16, offs=offs), ref16)
        cases.append(bench.Case("torch._grouped_mm bf16", lambda: torch._grouped_mm(a16, b16, offs=offs)))
        layout, why = find_torch_layout(qA[0], SA[0], qB[0], SB[0], ref8[:rows[0]])
        notes[name] = {"torch._scaled_mm blockwise": f"sb as {layout}" if layout else f"unavailable: {why}"}
        if layout:
            calls = [torch_blockwise(*q, layout) for q in zip(qA, SA, qB, SB)]
            try:
                errors["torch._scaled_mm loop"] = max(rel_err(f(), r) for f, r in zip(calls, ref8.split(rows)))
            except RuntimeError as e:  # cuBLAS refuses some shapes (e.g. M not a multiple of 4)
                notes[name]["torch._scaled_mm blockwise"] += f"; refused here: {str(e).splitlines()[0][:120]}"
                calls = None
            if calls:
                def scaled_loop():
                    for f in calls:
                        f()
                cases.append(bench.Case("torch._scaled_mm loop", scaled_loop))
        for label, opts in KERNELS.items():
            fn = grouped.launcher_fp8(qA, qB, SA, SB, Cs, **opts)
            cases.append(bench.checked_case(label, fn, c, ref8, 1e-2))
            errors[label] = rel_err(c, ref8)
        print(f"{name}: every case matches its reference; errors {errors}; {notes[name]}", flush=True)
        notes[name]["relative errors"] = errors
        with bench.GpuMonitor() as monitor:
            res = bench.compare(
                f"grouped GEMM fp8 block-scaled vs bf16, {name} ({g} groups, sum M = {total}, "
                f"N = K = {N}), normal data, sustained", cases, bench.Work(flops=2 * total * N * K),
                baseline="course bf16 grouped", monitor=monitor, progress=False,
                **{**gemm.PROTOCOLS["sustained"], "rounds": rounds},
                params={"groups": g, "rows": rows, "n": N, "k": K, "data": "normal",
                        "protocol": "sustained", "blocks": "A 1x128, B 128x128, e4m3 + fp32",
                        **notes[name],
                        "kernels": {k: {o: list(v) if isinstance(v, tuple) else v for o, v in opts.items()}
                                    for k, opts in KERNELS.items()}})
        print(res.table(), flush=True)
        out[name] = res
    return out, notes


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--problems", help="comma-separated names of PROBLEMS (default: all)")
    p.add_argument("--out", default=str(bench.RESULTS_DIR))
    p.add_argument("--tag", default="")
    args = p.parse_args()
    cutecourse.modes.require_gpu("sm_90a")
    t0 = time.perf_counter()
    results, notes = run(args.rounds, args.problems and args.problems.split(","))
    save_and_show(f"grouped_fp8{args.tag}", results, args.out, t0)
    print(json.dumps(notes, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
