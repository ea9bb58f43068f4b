"""Experiment: the fine-grained bf16 MoE against its floors.

    python benchmarks/experiments/moe_rows.py [--rounds 3] [--out DIR] [--tag _x] [--ncu]

The problem is ``grouped_peers``' "moe 128 n1536 k2048": 128 experts of 0 to 505 tokens (29498 in
all, three experts empty), N 1536, K 2048, bf16. Its dense twin (all rows times one weight, the
same flops) runs at the GEMM's compute speed; the MoE cannot, for two reasons that the rows
isolate:

* **Padding.** wgmma computes 64 rows per warpgroup, so a tile's rows past its expert's M are work
  too: the rows padded to 128 per expert are 1.24x the real ones, padded to 64 1.13x.
  "torch.matmul, rows padded to 64/128": cuBLAS on a dense A of that many rows, times one weight
  (no DRAM cost), the compute floor of each padding. "course bf16 1x1, one weight for all": the
  course kernel with every expert multiplying by the same weight, so only its padding and its
  per-group work remain.
* **Bytes.** 128 weights of 6 MB are 805 MB that come from DRAM once; with A (121 MB) and C
  (91 MB, written) that is the DRAM floor: "read A and the weights" (``torch.sum`` of each) and
  "... and write C" (plus ``zero_`` of a C-sized tensor), timed as one case each. The floor reads
  all 128 weights; a grouped GEMM skips the three empty experts' 19 MB (2% of the bytes), so its
  own floor is about 2% below the second.

Rows: the course kernel (1x1, 2x1, 128x128), ``torch._grouped_mm``, the dense twin (baseline), the
padded matmuls and the two DRAM floors. Every GEMM row is checked against the exact product first;
sustained protocol (``benchmarks/gemm.py``), shuffled rounds. Writes ``experiment_moe_rows<tag>.json``
(a result set). ``--ncu``: the same rows, each launched once under Nsight Compute (base clock; the
helpers of ``fp8_deepgemm_ncu.py``): duration, DRAM and L2 throughput against their peaks, bytes
read from DRAM and by the SMs from L2, tensor pipe. Writes ``experiment_moe_rows_ncu.json``.

``experiment_moe_rows_skip*.json`` come from this script at commit 2a014ca, which also timed a
kernel variant whose consumer warpgroups skipped their wgmmas when all their 64 rows lay past the
group's M (``skip_empty``), and a probe of experts of exactly 64 rows (``--halves``); the variant
was not faster and is not in the kernel (``docs/grouped_measured.md``, "The fine-grained bf16 MoE
against its floors").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cutecourse  # noqa: E402
from cutecourse.kernels import grouped  # noqa: E402

import grouped_peers as gp  # noqa: E402
from row_checks import rel_err, torch_case  # noqa: E402

MOE = "moe 128 n1536 k2048"
#: The course's rows: label -> ``grouped.packed_launcher`` keywords.
COURSE = {
    "course bf16 1x1": dict(tile=(128, 256)),
    "course bf16 2x1": dict(tile=(128, 256), cluster=(2, 1)),
    "course bf16 128x128 1x1": dict(tile=(128, 128)),
}


def padded(rows, height: int) -> int:
    """Rows once each expert is padded to a multiple of ``height``."""
    return sum(-(-m // height) * height for m in rows)


def cases(errors: dict):
    """(cases, flops, baseline, params) of the MoE problem."""
    import torch

    from cutecourse import bench

    rows, n, k, _, x, w, offs, c = gp.problem_data(MOE)
    a16, w16 = x.bfloat16(), w.bfloat16()
    del x, w
    exact = torch.cat([a @ b.T for a, b in zip(a16.split(rows), w16)]).float()
    b16 = w16.transpose(-2, -1)
    out = []
    for label, opts in COURSE.items():
        out.append(bench.checked_case(label, grouped.packed_launcher(a16, b16, offs, c, **opts), c, exact, 1e-2))
        errors[label] = rel_err(c, exact)
    # every expert multiplies by w16[0]: only the padding and the per-group work remain
    dense_ref = (a16 @ w16[0].T).float()
    out.append(bench.checked_case("course bf16 1x1, one weight for all", grouped.launcher(
        list(a16.split(rows)), [w16[0]] * len(rows), list(c.split(rows)), tile=(128, 256)), c, dense_ref, 1e-2))
    torch_case(out, errors, "torch._grouped_mm", exact, lambda: torch._grouped_mm(a16, b16, offs=offs), 1e-2)
    dense = torch.empty_like(c)
    out.append(bench.checked_case("dense twin torch.matmul", lambda: torch.matmul(a16, w16[0].T, out=dense),
                                  dense, dense_ref, 1e-2))
    for height in (128, 64):
        a_pad = torch.randn(padded(rows, height), k, device="cuda").bfloat16()
        c_pad = torch.empty(a_pad.shape[0], n, device="cuda", dtype=torch.bfloat16)
        out.append(bench.Case(f"torch.matmul, rows padded to {height}",
                              lambda a_pad=a_pad, c_pad=c_pad: torch.matmul(a_pad, w16[0].T, out=c_pad)))
    c_floor = torch.empty_like(c)
    out.append(bench.Case("DRAM floor: read A and the weights", lambda: (a16.sum(), w16.sum())))
    out.append(bench.Case("DRAM floor: read A and the weights, write C",
                          lambda: (a16.sum(), w16.sum(), c_floor.zero_())))
    params = {"groups": len(rows), "rows": rows, "n": n, "k": k,
              "bytes read (A, weights)": (a16.numel() + w16.numel()) * 2, "bytes written (C)": c.numel() * 2,
              **{f"rows padded to {h}": padded(rows, h) for h in (128, 64)}}
    return out, 2 * sum(rows) * n * k, "dense twin torch.matmul", params


#: What ``--ncu`` asks for besides ``fp8_deepgemm_ncu.METRICS``.
NCU_METRICS = ("dram__bytes_write.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
               "lts__throughput.avg.pct_of_peak_sustained_elapsed", "lts__t_sectors_srcunit_tex_op_read.sum")


def ncu_child() -> int:
    """Under ncu: build and check every case, then launch each once while profiling."""
    import fp8_deepgemm_ncu as fn

    rows, *_ = cases({})
    return fn.profile_once(rows)


def ncu(out: str) -> int:
    """Every case once under ncu; per kernel launch its duration, throughputs and bytes."""
    import fp8_deepgemm_ncu as fn

    from cutecourse import bench

    cmd = ["ncu", "--profile-from-start", "off", "--csv", "--page", "raw", "--target-processes", "all",
           "--metrics", ",".join(fn.METRICS + NCU_METRICS), sys.executable, __file__, "--ncu-child"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=540)
    print(proc.stderr[-3000:], flush=True)
    names = fn.profiled_names(proc.stdout)
    kernels = []
    for rec in fn.records(proc.stdout):
        row = fn.summarise(rec)
        del row["stalls_per_issue"]  # not asked for: no WarpStateStats section
        row.update(dram_write_gb=rec.get("dram__bytes_write.sum", 0) / 1e9,
                   dram_pct=rec.get("dram__throughput.avg.pct_of_peak_sustained_elapsed"),
                   l2_pct=rec.get("lts__throughput.avg.pct_of_peak_sustained_elapsed"),
                   l2_read_by_sms_gb=rec.get("lts__t_sectors_srcunit_tex_op_read.sum", 0) * 32 / 1e9)
        kernels.append(row)
        print(json.dumps(row), flush=True)
    result = {"environment": {**bench.environment(), "command": " ".join(sys.argv)}, "problem": MOE,
              "cases": names, "kernels": kernels, "ncu": " ".join(cmd[:9]) + " ...",
              "clock": "ncu's default clock control (base clock)"}
    Path(out, "experiment_moe_rows_ncu.json").write_text(json.dumps(result, indent=1))
    return 0 if kernels else 1


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=None)
    p.add_argument("--tag", default="")
    p.add_argument("--ncu", action="store_true", help="each MoE row once under Nsight Compute")
    p.add_argument("--ncu-child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.ncu_child:
        return ncu_child()
    if args.ncu:
        return ncu(args.out or os.environ.get("OUT", "."))
    cutecourse.modes.require_gpu("sm_90a")
    import torch

    import gemm
    from cutecourse import bench

    torch.manual_seed(0)
    errors: dict = {}
    rows, flops, baseline, params = cases(errors)
    print(f"checked; errors {errors}", flush=True)
    with bench.GpuMonitor() as monitor:
        res = bench.compare(f"fine-grained MoE rows and floors, {MOE}, normal data, sustained", rows,
                            bench.Work(flops=flops), baseline=baseline, monitor=monitor, progress=False,
                            **{**gemm.PROTOCOLS["sustained"], "rounds": args.rounds},
                            params={**params, "relative errors vs the exact product": errors})
    print(res.table(), flush=True)
    path = bench.save_set(f"experiment_moe_rows{args.tag}", {MOE: res}, args.out or str(bench.RESULTS_DIR))
    print(f"wrote {path}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
