"""Notebooks 03/04's measurement: the Hopper GEMM variants against torch.matmul, one run.

    python benchmarks/gemm.py [--out benchmarks/results] [--only fp16_8192,...]

Every kernel is checked against torch (fp32 reference) before it is timed; compilation happens
before timing (``hopper_gemm.launcher``), and the harness warms up before it measures. Writes
``gemm_<dtype>_<size>.json`` per problem through ``cutecourse.bench``. Work: 2*M*N*K flops.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cutecourse  # noqa: E402  (sets the DSL's arch before cutlass is imported)
from cutecourse import bench  # noqa: E402
from cutecourse.kernels import hopper_gemm as hg  # noqa: E402

WIDE, SQUARE = (128, 256), (128, 128)

#: problem name -> (dtype, size, [(case name, tile, variant, prefetch_stages[, stages[, cluster]])])
PROBLEMS = {
    "fp16_8192": ("float16", 8192, [
        ("naive 128x256", WIDE, "naive", None),
        ("prefetch 128x256", WIDE, "prefetch", None),
        ("compiler 128x256", WIDE, "compiler", None),
        ("compiler P=1 128x256", WIDE, "compiler", 1),
        ("compiler P=3 128x256", WIDE, "compiler", 3),
        ("compiler_guarded 128x256", WIDE, "compiler_guarded", None),
        ("compiler_overlap 128x256", WIDE, "compiler_overlap", None),
        ("naive 128x128", SQUARE, "naive", None),
        ("prefetch 128x128", SQUARE, "prefetch", None),
        ("compiler 128x128", SQUARE, "compiler", None),
        # 3 stages (97 KiB, 90 registers): two CTAs share an SM, one's epilogue hides under the other's MMAs
        ("prefetch 128x128 S=3", SQUARE, "prefetch", None, 3),
        ("compiler 128x128 S=3", SQUARE, "compiler", None, 3),
        # experimental TMA multicast (the multicast notebook's subject): a CTA pair shares B / A
        ("prefetch 128x256 cluster 2x1", WIDE, "prefetch", None, None, (2, 1)),
        ("compiler 128x256 cluster 2x1", WIDE, "compiler", None, None, (2, 1)),
        ("prefetch 128x256 cluster 1x2", WIDE, "prefetch", None, None, (1, 2)),
    ]),
    # The same problem with small-integer data (-2..2, as CUTLASS's examples use): fewer bit flips
    # in the tensor cores, less power, higher clocks. Shows how much the data alone moves the figures.
    "fp16_8192_ints": ("float16", 8192, [
        ("naive 128x256", WIDE, "naive", None),
        ("prefetch 128x256", WIDE, "prefetch", None),
        ("compiler 128x256", WIDE, "compiler", None),
        ("compiler_overlap 128x256", WIDE, "compiler_overlap", None),
        ("prefetch 128x256 cluster 2x1", WIDE, "prefetch", None, None, (2, 1)),
        ("compiler 128x256 cluster 2x1", WIDE, "compiler", None, None, (2, 1)),
    ]),
    "bf16_8192": ("bfloat16", 8192, [
        ("naive 128x256", WIDE, "naive", None),
        ("prefetch 128x256", WIDE, "prefetch", None),
        ("compiler 128x256", WIDE, "compiler", None),
        ("compiler_overlap 128x256", WIDE, "compiler_overlap", None),
    ]),
    "fp16_4096": ("float16", 4096, [
        ("naive 128x256", WIDE, "naive", None),
        ("prefetch 128x256", WIDE, "prefetch", None),
        ("compiler 128x256", WIDE, "compiler", None),
        ("compiler P=3 128x256", WIDE, "compiler", 3),
        ("compiler_overlap 128x256", WIDE, "compiler_overlap", None),
        ("prefetch 128x128", SQUARE, "prefetch", None),
        ("compiler 128x128", SQUARE, "compiler", None),
        ("prefetch 128x128 S=3", SQUARE, "prefetch", None, 3),
    ]),
}


def run(name: str, out: str) -> bench.BenchResult:
    import torch

    dtype_name, n, configs = PROBLEMS[name]
    dtype = getattr(torch, dtype_name)
    torch.manual_seed(0)
    if name.endswith("_ints"):
        a = torch.randint(-2, 3, (n, n), device="cuda").to(dtype)
        b = torch.randint(-2, 3, (n, n), device="cuda").to(dtype)
    else:
        a = torch.randn(n, n, device="cuda").to(dtype)
        b = torch.randn(n, n, device="cuda").to(dtype)
    c = torch.empty(n, n, device="cuda", dtype=dtype)
    ref = torch.matmul(a, b.T)
    cases = [bench.Case("torch.matmul", lambda: torch.matmul(a, b.T, out=c))]
    compile_s = {}
    for case, tile, variant, depth, *more in configs:
        stages, cluster = (list(more) + [None, (1, 1)][len(more):])[:2]
        t0 = time.perf_counter()
        fn = hg.launcher(a, b, c, tile=tile, variant=variant, prefetch_stages=depth, stages=stages,
                         cluster=cluster)
        compile_s[case] = round(time.perf_counter() - t0, 2)
        cases.append(bench.checked_case(case, fn, c, ref, max_rel_err=1e-2))
    print(f"{name}: all {len(configs)} kernels match torch.matmul; compile seconds {compile_s}", flush=True)
    res = bench.compare(f"GEMM {dtype_name} {n}x{n}x{n} (C = A @ B.T)", cases,
                        bench.Work(flops=2 * n * n * n), baseline="torch.matmul",
                        params={"m": n, "n": n, "k": n, "dtype": dtype_name, "compile_s": compile_s,
                                "stages": {f"{t[0]}x{t[1]}": hg.plan_stages(t, dtype_name).stages
                                           for t in (WIDE, SQUARE)}})
    print(res.table(), flush=True)
    path = res.save(f"gemm_{name}", out)
    print(f"wrote {path}", flush=True)
    return res


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=str(bench.RESULTS_DIR))
    p.add_argument("--only", default=",".join(PROBLEMS))
    args = p.parse_args()
    cutecourse.modes.require_gpu("sm_90a")
    for name in args.only.split(","):
        run(name, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
