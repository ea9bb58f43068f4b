"""Notebooks 03/04's measurement: the Hopper GEMM variants against torch.matmul, one run.

    python benchmarks/gemm.py [--out benchmarks/results] [--only fp16_8192,...] [--nvidia PATH]

Every kernel is checked against torch (fp32 reference) before it is timed; compilation happens
before timing (``hopper_gemm.launcher``). Writes ``gemm_<problem>.json`` per problem through
``cutecourse.bench``. Work: 2*M*N*K flops.

**Data.** Small integers, ``random_(-2, 2)`` (-2, -1, 0, 1), as NVIDIA's CuTeDSL examples fill
their operands (``cutlass.torch``'s RANDOM init), except the ``_randn`` problem. The data sets the
power a GEMM draws, and an H100 at its 700 W cap lowers its clock: randn runs slower for
cuBLAS and for these kernels alike.

**Two protocols** (``cutecourse.bench.compare``), because a GEMM this size is power-limited:

* *sustained* (default): interleaved rounds, each case run for 0.5 s before it is timed so
  that the clock has settled for that kernel; the SM clock recorded per case: what a
  long-running program gets (~1600 MHz on integer data).
* *burst* (``_burst`` problems): 3 s idle before each case, then 100 launches: the boost clock
  (1980 MHz), as in a short standalone script. Reference figures quoted for this problem on an
  H100 (torch.matmul 763, NVIDIA's example 808 TFLOP/s) come from runs like this:
  benchmarks/experiments/gemm_power.py measures both protocols side by side.

``--nvidia PATH``: also time NVIDIA's CuTeDSL Hopper example (CUTLASS's
``examples/python/CuTeDSL/cute/hopper/kernel/dense_gemm/dense_gemm.py``, fetched separately and
never committed here) in the same rounds, as a reference point.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cutecourse  # noqa: E402  (sets the DSL's arch before cutlass is imported)
from cutecourse import bench  # noqa: E402
from cutecourse.kernels import hopper_gemm_cluster as hc  # noqa: E402
from cutecourse.models.gemm_plan import plan_stages  # noqa: E402

WIDE, SQUARE = (128, 256), (128, 128)

#: (case name, tile, variant, prefetch_stages[, stages[, cluster]])
ALL_8192 = [
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
    # TMA multicast (the multicast notebook's subject): a CTA pair shares B / A
    ("prefetch 128x256 cluster 2x1", WIDE, "prefetch", None, None, (2, 1)),
    ("compiler 128x256 cluster 2x1", WIDE, "compiler", None, None, (2, 1)),
    ("prefetch 128x256 cluster 1x2", WIDE, "prefetch", None, None, (1, 2)),
]
CORE = [c for c in ALL_8192 if c[0] in ("naive 128x256", "prefetch 128x256", "compiler 128x256",
                                         "compiler_overlap 128x256", "prefetch 128x256 cluster 2x1")]

#: problem -> (dtype, size, data, protocol, cases). data "ints" = random_(-2, 2), as NVIDIA's examples.
PROBLEMS = {
    "fp16_8192": ("float16", 8192, "ints", "sustained", ALL_8192),
    "fp16_8192_burst": ("float16", 8192, "ints", "burst", CORE),
    "fp16_8192_randn": ("float16", 8192, "randn", "sustained", CORE),
    "bf16_8192": ("bfloat16", 8192, "ints", "sustained", CORE),
    "fp16_4096": ("float16", 4096, "ints", "sustained", [
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
#: bench.compare settings per protocol
PROTOCOLS = {
    "sustained": dict(rounds=6, warmup=10, iterations=20, repeats=2, settle_s=0.5),
    "burst": dict(rounds=5, warmup=5, iterations=100, repeats=1, idle_s=3.0),
}


def operands(data: str, n: int, dtype):
    """A (n, n) and B (n, n): small integers as NVIDIA's examples (exact in fp16), or randn."""
    import torch

    torch.manual_seed(0)
    if data == "ints":
        return [torch.empty(n, n, device="cuda", dtype=dtype).random_(-2, 2) for _ in "ab"]
    return [torch.randn(n, n, device="cuda").to(dtype) for _ in "ab"]


def nvidia_kernel(path: str, a, b, c, cluster=(1, 1), tile=WIDE):
    """NVIDIA's CuTeDSL Hopper example compiled for these tensors; ``fn()`` launches it."""
    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    import torch
    from cutlass.cute.runtime import from_dlpack

    spec = importlib.util.spec_from_file_location("nvidia_dense_gemm", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # NVIDIA's kernel takes (M, K, L) tensors: add a batch mode of 1.
    args = [from_dlpack(t.unsqueeze(-1), assumed_align=16).mark_layout_dynamic(leading_dim=1)
            for t in (a, b, c)]
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    compiled = cute.compile(module.HopperWgmmaGemmKernel(cutlass.Float32, tile, cluster), *args, stream)
    return lambda: compiled(*args, stream)


def run(name: str, out: str, nvidia: str | None = None) -> bench.BenchResult:
    import torch

    dtype_name, n, data, protocol, configs = PROBLEMS[name]
    dtype = getattr(torch, dtype_name)
    a, b = operands(data, n, dtype)
    c = torch.empty(n, n, device="cuda", dtype=dtype)
    ref = torch.matmul(a, b.T)
    cases = [bench.Case("torch.matmul", lambda: torch.matmul(a, b.T, out=c))]
    compile_s = {}
    for case, tile, variant, depth, *more in configs:
        stages, cluster = (list(more) + [None, (1, 1)][len(more):])[:2]
        t0 = time.perf_counter()
        fn = hc.launcher(a, b, c, cluster=cluster, tile=tile, variant=variant, prefetch_stages=depth, stages=stages)
        compile_s[case] = round(time.perf_counter() - t0, 2)
        cases.append(bench.checked_case(case, fn, c, ref, max_rel_err=1e-2))
    if nvidia and dtype_name == "float16" and n == 8192:
        for cluster in ((1, 1), (2, 1)):
            case = f"NVIDIA example {cluster[0]}x{cluster[1]}"
            cases.append(bench.checked_case(case, nvidia_kernel(nvidia, a, b, c, cluster), c, ref, 1e-2))
    print(f"{name}: all {len(cases) - 1} kernels match torch.matmul; compile seconds {compile_s}", flush=True)
    stages = {f"{t[0]}x{t[1]}": plan_stages(t, dtype_name).stages for t in (WIDE, SQUARE)}
    return time_and_save(f"gemm_{name}", cases, n, dtype_name, data, protocol, out,
                         compile_s=compile_s, stages=stages)


def time_and_save(file: str, cases, n: int, dtype_name: str, data: str, protocol: str, out: str,
                  **params) -> bench.BenchResult:
    """Time ``cases`` (torch.matmul among them: the baseline) on an n^3 GEMM under ``protocol``,
    with the SM clock monitored; print the table and save it as ``<out>/<file>.json``."""
    with bench.GpuMonitor() as monitor:
        res = bench.compare(f"GEMM {dtype_name} {n}x{n}x{n}, {data} data, {protocol} (C = A @ B.T)",
                            cases, bench.Work(flops=2 * n * n * n), baseline="torch.matmul",
                            monitor=monitor, progress=False, **PROTOCOLS[protocol],
                            params={"m": n, "n": n, "k": n, "dtype": dtype_name, "data": data,
                                    "protocol": protocol, **params})
    print(res.table(), flush=True)
    print(f"wrote {res.save(file, out)}", flush=True)
    return res


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=str(bench.RESULTS_DIR))
    p.add_argument("--only", default=",".join(PROBLEMS))
    p.add_argument("--nvidia", help="path to NVIDIA's CuTeDSL hopper dense_gemm.py (reference rows)")
    args = p.parse_args()
    cutecourse.modes.require_gpu("sm_90a")
    for name in args.only.split(","):
        run(name, args.out, args.nvidia)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
