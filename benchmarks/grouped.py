"""The course's Hopper grouped GEMM against torch._grouped_mm and a loop of torch.matmul.

    python benchmarks/grouped.py [--dtype bfloat16] [--rounds 3] [--out DIR] [--tag _x]
                                 [--problems NAME,...] [--kernels ROW,...] [--ceilings] [--nvidia PATH]

Problems (N = K = 4096, every group's B a (N, K) weight, as the experts of an MoE layer):

* ``8 mixed``: 8 groups with M in {256, 512, ..., 4096} in a shuffled order;
* ``32 x 256``: 32 groups of M = 256 (small experts: a loop of launches cannot fill the GPU);
* ``moe 64``: 64 groups, M drawn from 64..1024 (``models.group_scheduler.moe_sizes``, seed 0).

Every case computes the same products from the same memory: A packed (sum M, K), the weights
(G, N, K), C packed (sum M, N), so ``torch._grouped_mm(a, w.transpose(-2, -1), offs)`` and the
course's ``grouped_mm`` (the same call) read and write exactly what the loop does. Each case is
checked against torch.matmul on integer data before it is timed; the sustained protocol of
``benchmarks/gemm.py``. Writes ``grouped_<dtype><tag>.json`` (a result set, ``bench.load_set``).

``--ceilings``: also time, in the same run, what bounds any grouped kernel on this GPU:

* ``dense twin``: the packed A times *one* weight, ``(sum M, K) @ (K, N)``, with torch.matmul
  and the course's persistent 2x1 kernel: where every group's M is a multiple of 128 it is the
  same 128x256 tiles, the same flops, with B shared by all rows instead of one B per group (so
  fewer bytes): the dense GEMM a grouped kernel would have to match;
* ``HBM floor``: a device-to-device copy of the problem's compulsory bytes (A and the weights
  read once, C written once; copy bytes counted read plus write), rated at the problem's flops:
  no kernel that moves those bytes runs faster than the copy.

``--nvidia PATH``: also time NVIDIA's CuTeDSL Hopper grouped example (CUTLASS's
``examples/python/CuTeDSL/cute/hopper/kernel/grouped_gemm/grouped_gemm.py``, class
``HopperGroupedGemmPersistentKernel``, 128x256, 1x1) on the same tensors, loaded from PATH and
never copied into this repository. Its group count and tile total are compile-time constants, so
it is compiled once per problem.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cutecourse  # noqa: E402
from cutecourse import bench  # noqa: E402
from cutecourse.kernels import hopper_gemm_persistent as hp  # noqa: E402
from cutecourse.kernels import grouped  # noqa: E402
from cutecourse.models import group_scheduler as gs  # noqa: E402

import gemm  # noqa: E402  (the protocols)
from result_sets import save_and_show  # noqa: E402

N = K = 4096
MIXED = [256, 512, 768, 1024, 1536, 2048, 3072, 4096]
random.Random(0).shuffle(MIXED)
PROBLEMS = {
    "8 mixed": MIXED,
    "32 x 256": [256] * 32,
    "moe 64": [m for m, _, _ in gs.moe_sizes(64, N, K, (64, 1024), seed=0)],
}
#: course rows: launcher keywords. group_m: the order inside a group (m fastest, the default, or
#: bands of 16 tile-rows as in the dense persistent kernel). In grouped_bfloat16.json the rows
#: "course 128x256" and "... 2x1" are the banded ones, "... m fastest" the default.
KERNELS = {"course 128x256": dict(tile=(128, 256), group_m=16),
           "course 128x256 m fastest": dict(tile=(128, 256)),
           "course 128x256 2x1": dict(tile=(128, 256), cluster=(2, 1), group_m=16),
           "course 128x256 2x1 m fastest": dict(tile=(128, 256), cluster=(2, 1)),
           "course 128x256 1x2": dict(tile=(128, 256), cluster=(1, 2), group_m=16)}


def nvidia_grouped(path: str, views, tile=(128, 256)):
    """NVIDIA's example compiled for these groups [(A_g, B_g, C_g)]; ``fn()`` launches it."""
    import importlib.util

    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    import torch
    from cutlass.cute.runtime import from_dlpack

    spec = importlib.util.spec_from_file_location("nvidia_grouped_gemm", path)
    nv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(nv)
    dev = views[0][0].device
    # (rows, cols, L=1) templates with unit stride along cols (K-major A and B, N-major C): they
    # carry only dtype and majorness
    small = [torch.empty(1, 8, 8, dtype=views[0][0].dtype, device=dev).permute(1, 2, 0) for _ in range(3)]
    templates = [from_dlpack(t, assumed_align=16).mark_layout_dynamic(leading_dim=1) for t in small]
    sizes = [(x.shape[0], y.shape[0], x.shape[1], 1) for x, y, _ in views]
    meta = [torch.tensor(sizes, dtype=torch.int32, device=dev),
            torch.tensor([[[x.stride(0), 1], [y.stride(0), 1], [z.stride(0), 1]] for x, y, z in views],
                         dtype=torch.int32, device=dev),
            torch.tensor([[t.data_ptr() for t in v] for v in views], dtype=torch.int64, device=dev)]
    sms = torch.cuda.get_device_properties(dev).multi_processor_count if dev.type == "cuda" else 132
    workspace = torch.empty((sms, 3, 16), dtype=torch.int64, device=dev)
    args = [from_dlpack(t, assumed_align=16) for t in (*meta, workspace)]
    total = sum(-(-m // tile[0]) * -(-n // tile[1]) for m, n, _, _ in sizes)
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream if dev.type == "cuda" else 0)
    kernel = nv.HopperGroupedGemmPersistentKernel(cutlass.Float32, tile, (1, 1), swizzle_size=1,
                                                  raster_along_m=True)
    compiled = cute.compile(kernel, *templates, len(views), *args[:3], total, args[3], sms, stream)

    def fn():
        compiled(*templates, *args[:3], args[3], stream)

    fn.keep_alive = (small, meta, workspace)
    return fn


def ceiling_cases(a, w, c, compulsory_bytes: int) -> list:
    """The dense twin (torch and course) and the HBM floor (module docstring), checked."""
    import torch

    dense_ref = a @ w[0].T
    floor_src = torch.empty(compulsory_bytes // 2, dtype=torch.uint8, device=a.device)
    floor_dst = torch.empty_like(floor_src)
    floor = bench.Case("HBM floor (copy of the compulsory bytes)", lambda: floor_dst.copy_(floor_src))
    return [bench.checked_case("dense twin torch.matmul", lambda: torch.matmul(a, w[0].T, out=c), c,
                               dense_ref, 1e-2),
            bench.checked_case("dense twin course persistent 2x1",
                               hp.launcher(a, w[0], c, tile=(128, 256), cluster=(2, 1)), c, dense_ref,
                               1e-2),
            floor]


def run(dtype_name: str, rounds: int, problems=None, kernels=None, nvidia=None,
        ceilings: bool = False) -> dict[str, bench.BenchResult]:
    import torch

    dtype = getattr(torch, dtype_name)
    torch.manual_seed(0)
    out = {}
    for name, rows in PROBLEMS.items():
        if problems is not None and name not in problems:
            continue
        g, total = len(rows), sum(rows)
        a = torch.empty(total, K, device="cuda", dtype=dtype).random_(-2, 2)
        w = torch.empty(g, N, K, device="cuda", dtype=dtype).random_(-2, 2)
        c = torch.empty(total, N, device="cuda", dtype=dtype)
        offs = torch.tensor(rows, dtype=torch.int64).cumsum(0).to(torch.int32).cuda()
        starts = [0] + offs.tolist()[:-1]
        views = [(a[s:s + m], w[i], c[s:s + m]) for i, (s, m) in enumerate(zip(starts, rows))]
        ref = torch.cat([x @ y.T for x, y, _ in views])

        def loop():
            for x, y, z in views:
                torch.matmul(x, y.T, out=z)

        b = w.transpose(-2, -1)
        cases = [bench.checked_case("torch matmul loop", loop, c, ref, 1e-2),
                 bench.checked_case("torch._grouped_mm",
                                    lambda: c.copy_(torch._grouped_mm(a, b, offs=offs)), c, ref, 1e-2)]
        # torch._grouped_mm allocates its output; time it as torch users call it, without the copy
        cases[-1] = bench.Case("torch._grouped_mm", lambda: torch._grouped_mm(a, b, offs=offs))
        for label, opts in KERNELS.items():
            if kernels is not None and label not in kernels:
                continue
            cases.append(bench.checked_case(label, grouped.packed_launcher(a, b, offs, c, **opts), c,
                                            ref, 1e-2))
        if nvidia:
            cases.append(bench.checked_case("NVIDIA example 128x256", nvidia_grouped(nvidia, views), c,
                                            ref, 1e-2))
        compulsory = dtype.itemsize * (total * K + g * N * K + total * N)
        if ceilings:
            cases += ceiling_cases(a, w, c, compulsory)
        print(f"{dtype_name} {name}: every case matches torch.matmul", flush=True)
        flops = 2 * total * N * K
        with bench.GpuMonitor() as monitor:
            res = bench.compare(f"grouped GEMM {dtype_name} {name} ({g} groups, sum M = {total}, "
                                f"N = K = {N}), ints, sustained", cases, bench.Work(flops=flops),
                                baseline="torch._grouped_mm", monitor=monitor, progress=False,
                                **{**gemm.PROTOCOLS["sustained"], "rounds": rounds},
                                params={"groups": g, "rows": rows, "n": N, "k": K,
                                        "dtype": dtype_name, "data": "ints", "protocol": "sustained",
                                        "compulsory_bytes": compulsory,
                                        "kernels": {k: {o: list(v) if isinstance(v, tuple) else v for o, v in opts.items()}
                                                    for k, opts in KERNELS.items()}})
        print(res.table(), flush=True)
        out[name] = res
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--problems", help="comma-separated names of PROBLEMS (default: all)")
    p.add_argument("--kernels", help="comma-separated course rows of KERNELS (default: all)")
    p.add_argument("--out", default=str(bench.RESULTS_DIR))
    p.add_argument("--tag", default="")
    p.add_argument("--ceilings", action="store_true", help="also the dense twin and the HBM floor")
    p.add_argument("--nvidia", help="path to NVIDIA's CuTeDSL hopper grouped_gemm.py (reference rows)")
    args = p.parse_args()
    cutecourse.modes.require_gpu("sm_90a")
    t0 = time.perf_counter()
    results = run(args.dtype, args.rounds, args.problems and args.problems.split(","),
                  args.kernels and args.kernels.split(","), args.nvidia, args.ceilings)
    save_and_show(f"grouped_{args.dtype}{args.tag}", results, args.out, t0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
