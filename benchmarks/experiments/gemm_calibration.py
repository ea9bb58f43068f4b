"""Experiment (notebooks 03 and 05's GEMMs): how far the measurement protocol moves the GEMM
ratios.

    python benchmarks/experiments/gemm_calibration.py [--nvidia .ref/nv_dense_gemm.py] [--rounds 12]

Questions, answered in one run on one GPU:

* **Data.** NVIDIA's CuTeDSL examples fill A and B with small integers (``random_(-2, 2)``:
  -2, -1, 0, 1); reference figures quoted for this problem on an H100 (torch.matmul 763 TFLOP/s,
  NVIDIA's example 808 / 837) were measured that way. ``randn`` data toggles more bits in the tensor cores: more power,
  and an H100 at its 700 W cap lowers its clock. Each data kind is timed separately.
* **Drift.** Cases are timed in interleaved rounds (``bench.compare(rounds=...)``) with the SM
  clock and power recorded per case (``bench.GpuMonitor``).
* **Calibration.** With ``--nvidia PATH`` (CUTLASS's ``examples/python/CuTeDSL/cute/hopper/
  kernel/dense_gemm/dense_gemm.py``, fetched separately and never committed here) NVIDIA's
  example runs in the same harness and the same rounds, 1x1 and 2x1, as a reference point.
* **Small kernel knobs** (constructor parameters of the course kernel): the tile-order band
  height ``group_m`` and the epilogue tile ``epi_tile``.

Writes ``experiment_gemm_calibration_<data><tag>.json`` per data kind (``--data nvidia,randn``;
``nvidia`` is the small-integer data). ``..._nvidia_knobs.json`` is ``--data nvidia --only
"prefetch 1x1,prefetch 1x1 epi 128x64,prefetch 1x1 epi 128x64 G=16,prefetch 1x1 G=16" --rounds 8
--settle 0.5 --tag _knobs``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/

import cutecourse  # noqa: E402  (sets the DSL's arch before cutlass is imported)
from cutecourse import bench  # noqa: E402
from cutecourse.kernels import hopper_gemm_cluster as hc  # noqa: E402
from cutecourse.kernels import hopper_gemm_persistent as hp  # noqa: E402
from gemm import nvidia_kernel  # noqa: E402  (benchmarks/gemm.py)

N = 8192
WIDE = (128, 256)


def course_kernel(a, b, c, cluster=(1, 1), group_m: int | None = None, epi_tile=None):
    """The course's prefetch kernel, with the tile order's band height and the epilogue tile set
    for this run (constructor parameters; defaults: the kernel's own)."""
    knobs = {k: v for k, v in (("group_m", group_m), ("epi_tile", epi_tile)) if v is not None}
    return hc.launcher(a, b, c, cluster, WIDE, "prefetch", **knobs)


def make_data(kind: str, n: int):
    import torch

    torch.manual_seed(0)
    if kind == "nvidia":  # as cutlass.torch's RANDOM init in NVIDIA's examples: random_(-2, 2)
        return [torch.empty(n, n, device="cuda", dtype=torch.float16).random_(-2, 2) for _ in "ab"]
    return [torch.randn(n, n, device="cuda").half() for _ in "ab"]


def main() -> int:
    import torch

    p = argparse.ArgumentParser()
    p.add_argument("--nvidia", help="path to CUTLASS's hopper dense_gemm.py (calibration)")
    p.add_argument("--data", default="nvidia,randn")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--out", default=str(bench.RESULTS_DIR))
    p.add_argument("--only", help="comma-separated case names (default: all)")
    p.add_argument("--settle", type=float, default=0.0, help="bench.compare settle_s (sustained protocol)")
    p.add_argument("--tag", default="")
    args = p.parse_args()
    cutecourse.modes.require_gpu("sm_90a")

    for kind in args.data.split(","):
        a, b = make_data(kind, N)
        c = torch.empty(N, N, device="cuda", dtype=torch.float16)
        ref = torch.matmul(a, b.T)
        builders = [
            ("prefetch 1x1", lambda: course_kernel(a, b, c)),
            ("prefetch 1x1 G=16", lambda: course_kernel(a, b, c, group_m=16)),
            ("prefetch 1x1 G=4", lambda: course_kernel(a, b, c, group_m=4)),
            ("prefetch 1x1 epi 128x64", lambda: course_kernel(a, b, c, epi_tile=(128, 64))),
            ("prefetch 1x1 epi 128x64 G=16", lambda: course_kernel(a, b, c, epi_tile=(128, 64),
                                                                   group_m=16)),
            ("prefetch 2x1", lambda: course_kernel(a, b, c, cluster=(2, 1))),
            ("prefetch 2x1 G=16", lambda: course_kernel(a, b, c, cluster=(2, 1), group_m=16)),
            ("persistent dynamic 1x1", lambda: hp.launcher(a, b, c, WIDE, scheduler="dynamic")),
            ("persistent 2x1 G=8", lambda: hp.launcher(a, b, c, WIDE, cluster=(2, 1), group_m=8)),
        ]
        if args.nvidia:
            builders += [(f"nvidia example {m}x{n}", lambda cl=(m, n): nvidia_kernel(args.nvidia, a, b, c, cl))
                         for m, n in ((1, 1), (2, 1))]
        if args.only:
            builders = [bd for bd in builders if bd[0] in args.only.split(",")]
        cases = [bench.Case("torch.matmul", lambda: torch.matmul(a, b.T, out=c))]
        compile_s, failed = {}, {}
        for name, build in builders:
            t0 = time.perf_counter()
            try:
                fn = build()
                cases.append(bench.checked_case(name, fn, c, ref, max_rel_err=1e-2))
            except Exception as e:  # one broken variant must not cost the whole device call
                failed[name] = f"{type(e).__name__}: {str(e)[:300]}"
                print(f"{name}: FAILED {failed[name]}", flush=True)
                continue
            compile_s[name] = round(time.perf_counter() - t0, 2)
        print(f"{kind}: compiled and checked {compile_s}", flush=True)
        with bench.GpuMonitor() as mon:
            res = bench.compare(f"GEMM fp16 {N}^3, {kind} data: protocol calibration", cases,
                                bench.Work(flops=2 * N ** 3), "torch.matmul", warmup=10,
                                iterations=args.iterations, repeats=2, rounds=args.rounds,
                                monitor=mon, progress=False, settle_s=args.settle,
                                params={"m": N, "n": N, "k": N, "data": kind, "compile_s": compile_s,
                                        "failed": failed, "nvidia_example": args.nvidia})
        print(res.table(), flush=True)
        print("wrote", res.save(f"experiment_gemm_calibration_{kind}{args.tag}", args.out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
