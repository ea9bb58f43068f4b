"""The persistent, warp-specialized GEMM against torch.matmul and the one-CTA-per-tile prefetch
kernel, in one run.

    python benchmarks/gemm_persistent.py [--out benchmarks/results] [--only fp16_8192,...] [--tag _run2]

Every kernel is checked against torch.matmul before it is timed; compilation happens before
timing. Data and protocol as ``benchmarks/gemm.py``: small integers (``random_(-2, 2)``) unless
the problem says randn, the *sustained* protocol (interleaved shuffled rounds, each case run
0.5 s before it is timed, SM clock per case). Writes ``gemm_persistent_<problem>.json``.
Work: 2*M*N*K flops.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/gemm.py

import cutecourse  # noqa: E402  (sets the DSL's arch before cutlass is imported)
from cutecourse import bench  # noqa: E402
from cutecourse.kernels import hopper_gemm as hg  # noqa: E402
from cutecourse.kernels import hopper_gemm_persistent as hp  # noqa: E402

import gemm  # noqa: E402  (benchmarks/gemm.py: data and protocol)

WIDE, SQUARE = (128, 256), (128, 128)

#: (case name, kernel, options): kernel "prefetch" is hopper_gemm's, "persistent" this module's.
CASES = [
    ("prefetch 128x256", "prefetch", dict(tile=WIDE)),
    ("persistent 128x256", "persistent", dict(tile=WIDE)),  # group_m = 16
    ("persistent 128x256 dynamic", "persistent", dict(tile=WIDE, scheduler="dynamic")),
    ("persistent 128x256 dynamic G=8", "persistent", dict(tile=WIDE, scheduler="dynamic", group_m=8)),
    ("persistent 128x256 G=8", "persistent", dict(tile=WIDE, group_m=8)),
    ("persistent 128x256 G=32", "persistent", dict(tile=WIDE, group_m=32)),
    ("persistent 128x256 S=3", "persistent", dict(tile=WIDE, stages=3)),
    ("persistent 128x128", "persistent", dict(tile=SQUARE)),
    ("persistent 128x256 2x1", "persistent", dict(tile=WIDE, cluster=(2, 1))),
    ("persistent 128x256 2x1 G=8", "persistent", dict(tile=WIDE, cluster=(2, 1), group_m=8)),
    ("persistent 128x256 1x2", "persistent", dict(tile=WIDE, cluster=(1, 2))),
]
SHORT = [c for c in CASES if c[0] in ("prefetch 128x256", "persistent 128x256", "persistent 128x256 dynamic",
                                      "persistent 128x256 2x1")]

#: problem -> (dtype, size, data, cases). data: "randn" or "ints" (-2..2, as CUTLASS's examples).
PROBLEMS = {
    "fp16_8192": ("float16", 8192, "ints", CASES),
    "fp16_8192_randn": ("float16", 8192, "randn", SHORT),
    "bf16_8192": ("bfloat16", 8192, "ints", SHORT),
    "fp16_4096": ("float16", 4096, "ints", CASES),
}


def run(name: str, out: str, tag: str = "") -> bench.BenchResult:
    import torch

    dtype_name, n, data, configs = PROBLEMS[name]
    dtype = getattr(torch, dtype_name)
    a, b = gemm.operands(data, n, dtype)
    c = torch.empty(n, n, device="cuda", dtype=dtype)
    ref = torch.matmul(a, b.T)
    cases = [bench.Case("torch.matmul", lambda: torch.matmul(a, b.T, out=c))]
    compile_s = {}
    for case, kind, opts in configs:
        t0 = time.perf_counter()
        fn = hg.launcher(a, b, c, **opts, variant=kind) if kind == "prefetch" else hp.launcher(a, b, c, **opts)
        compile_s[case] = round(time.perf_counter() - t0, 2)
        cases.append(bench.checked_case(case, fn, c, ref, max_rel_err=1e-2))
    print(f"{name}: all {len(configs)} kernels match torch.matmul; compile seconds {compile_s}", flush=True)
    stages = {f"{t[0]}x{t[1]}": hp.plan_persistent(t, dtype_name).stages for t in (WIDE, SQUARE)}
    return gemm.time_and_save(f"gemm_persistent_{name}{tag}", cases, n, dtype_name, data, "sustained",
                              out, compile_s=compile_s, stages=stages)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=str(bench.RESULTS_DIR))
    p.add_argument("--only", default=",".join(PROBLEMS))
    p.add_argument("--tag", default="", help="suffix for the result files (a repeat run: _run2)")
    args = p.parse_args()
    cutecourse.modes.require_gpu("sm_90a")
    for name in args.only.split(","):
        run(name, args.out, args.tag)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
