"""Experiment (notebooks 06 and 07): which kernel does torch run for each table's GEMM?

Asked because the course's best schedule beats torch.matmul in fp16 on every shape of the
schedules table but falls 0.3-1.4% short in bf16 on four of them: if cuBLAS picks a different
tile, cluster or schedule for bf16, its kernel name says so (cuBLAS's Hopper kernels are named
after their tile, e.g. ``..._tilesize128x256x64_cluster2x1x1_...``, CUTLASS's after
``128x256x64_2x1x1_..._warpspecialized_cooperative``).

Run on a GPU (H100):
    python benchmarks/experiments/cublas_kernels.py [--out DIR]
Writes ``experiment_cublas_kernels.json``: per dtype and shape, the names of the kernels one call
launched (torch.profiler).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cutecourse import bench  # noqa: E402

import grouped  # noqa: E402
import schedules  # noqa: E402


def kernels_of(fn) -> list[str]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})


def main() -> int:
    import torch

    p = argparse.ArgumentParser()
    p.add_argument("--out", default=str(bench.RESULTS_DIR))
    args = p.parse_args()
    found = {"environment": bench.environment()}
    for dtype in (torch.float16, torch.bfloat16):
        per = found[str(dtype).removeprefix("torch.")] = {}
        for name, (m, n, k) in schedules.SHAPES.items():
            a = torch.randn(m, k, device="cuda", dtype=dtype)
            b = torch.randn(n, k, device="cuda", dtype=dtype)
            per[name] = kernels_of(lambda: torch.matmul(a, b.T))
        for name, rows in grouped.PROBLEMS.items():
            a = torch.randn(sum(rows), grouped.K, device="cuda", dtype=dtype)
            w = torch.randn(len(rows), grouped.N, grouped.K, device="cuda", dtype=dtype)
            offs = torch.tensor(rows).cumsum(0).to(torch.int32).cuda()
            per[f"torch._grouped_mm {name}"] = kernels_of(
                lambda: torch._grouped_mm(a, w.transpose(-2, -1), offs=offs))
            per[f"dense twin {name}"] = kernels_of(lambda: torch.matmul(a, w[0].T))
    path = bench.save_json("experiment_cublas_kernels", found, args.out)
    print(json.dumps(found, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
