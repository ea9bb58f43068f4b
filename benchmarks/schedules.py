"""The course's GEMM schedules across problem shapes, against torch.matmul (the kernel-schedules
table): one CTA per tile (prefetch mainloop, 1x1 and 2x1 clusters, two tiles), the persistent
warp-specialized kernel (static and dynamic schedulers, 1x1 and 2x1, two tiles), ping-pong (4 or 5
ring stages, 1x1, 2x1, 1x2), the persistent kernels launched with programmatic dependent launch,
stream-K (the persistent kernel with its last partial wave split along K), and the persistent
kernel with a direct-store epilogue (registers straight to C instead of smem + TMA store).

    python benchmarks/schedules.py [--dtypes float16,bfloat16] [--rounds 3] [--out DIR]
                                   [--shapes NAME|MxNxK,...] [--kernels ROW,...] [--tag _x]

Shapes: square 1024, 2048, 4096, 8192, and three transformer-layer GEMMs with M = 4096 tokens:
the QKV projection (N = 6144, K = 4096), the MLP up projection (N = 14336, K = 4096) and the MLP
down projection (N = 4096, K = 14336). Every kernel is checked against torch (1e-2 relative)
before it is timed; data are small integers as in NVIDIA's examples; the sustained protocol of
``benchmarks/gemm.py`` (interleaved shuffled rounds, each case run 0.5 s before it is timed),
fewer rounds. Writes ``schedules_<dtype>.json``: one file per dtype holding every shape's
``BenchResult`` (``bench.load_set``), so that the shapes of one dtype come from one run.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/gemm.py

import cutecourse  # noqa: E402  (sets the DSL's arch before cutlass is imported)
from cutecourse import bench  # noqa: E402
from cutecourse.kernels import registry  # noqa: E402  (the dense GEMMs by name)

import gemm  # noqa: E402  (benchmarks/gemm.py: the protocol)

SHAPES = {"1024^3": (1024, 1024, 1024), "2048^3": (2048, 2048, 2048), "4096^3": (4096, 4096, 4096),
          "8192^3": (8192, 8192, 8192), "qkv 4096x6144x4096": (4096, 6144, 4096),
          "mlp up 4096x14336x4096": (4096, 14336, 4096), "mlp down 4096x4096x14336": (4096, 4096, 14336)}
WIDE, SQUARE, TALL = (128, 256), (128, 128), (256, 128)
#: (row name, kernel in kernels/registry.py, launcher keywords)
KERNELS = [
    ("one CTA/tile 128x256", "cluster", dict(tile=WIDE, cluster=(1, 1))),
    ("one CTA/tile 128x256 2x1", "cluster", dict(tile=WIDE, cluster=(2, 1))),
    ("one CTA/tile 128x128", "cluster", dict(tile=SQUARE, cluster=(1, 1))),
    ("persistent 128x256", "persistent", dict(tile=WIDE)),
    ("persistent 128x256 2x1", "persistent", dict(tile=WIDE, cluster=(2, 1))),
    ("persistent 128x256 dynamic", "persistent", dict(tile=WIDE, scheduler="dynamic")),
    ("persistent 128x128", "persistent", dict(tile=SQUARE)),
    # ping-pong with 4 C buffers per warpgroup and 4 ring stages (its default until 2026-11-23;
    # the committed tables' "ping-pong 64x256" rows), and with 2 buffers and 5 stages (the default)
    ("ping-pong 64x256", "pingpong", dict(epi_stages=4)),
    ("ping-pong 64x256 2x1", "pingpong", dict(cluster=(2, 1), epi_stages=4)),
    ("ping-pong 64x256 S=5", "pingpong", dict(epi_stages=2)),
    ("ping-pong 64x256 2x1 S=5", "pingpong", dict(cluster=(2, 1), epi_stages=2)),
    ("ping-pong 64x256 1x2 S=5", "pingpong", dict(cluster=(1, 2), epi_stages=2)),
    # group_m counts clusters: at 2x1 the default 32 makes bands of 4096 rows; 16 keeps 2048
    ("ping-pong 64x256 2x1 S=5 G=16", "pingpong", dict(cluster=(2, 1), epi_stages=2, group_m=16)),
    ("persistent 128x256 2x1 G=8", "persistent", dict(tile=WIDE, cluster=(2, 1), group_m=8)),
    # CUTLASS's usual ping-pong tile: 128x128 per warpgroup (two m64n128 wgmmas per k-step), 6 stages;
    # bands of 16 tile-rows = 2048 rows, as above
    ("ping-pong 128x128", "pingpong", dict(tile=SQUARE, group_m=16, epi_stages=2)),
    ("ping-pong 128x128 2x1", "pingpong", dict(tile=SQUARE, group_m=16, cluster=(2, 1), epi_stages=2)),
    # programmatic dependent launch: the next launch's prologue overlaps this one's tail
    ("persistent 128x256 PDL", "persistent", dict(tile=WIDE, pdl=True)),
    ("persistent 128x256 2x1 PDL", "persistent", dict(tile=WIDE, cluster=(2, 1), pdl=True)),
    ("ping-pong 64x256 S=5 PDL", "pingpong", dict(epi_stages=2, pdl=True)),
    # stream-K: the tiles of the last partial wave split along K (hopper_gemm_streamk)
    ("stream-K 128x256", "streamk", dict(tile=WIDE)),
    ("stream-K 128x256 PDL", "streamk", dict(tile=WIDE, pdl=True)),
    ("stream-K 128x256 2x1 PDL", "streamk", dict(tile=WIDE, cluster=(2, 1), pdl=True)),
    # 256x128: each consumer warpgroup 128x128 (cuBLAS's choice for bf16 on most of the table,
    # experiment_cublas_kernels.json: 256x128, 1x2 cluster)
    ("persistent 256x128", "persistent", dict(tile=TALL)),
    ("persistent 256x128 1x2", "persistent", dict(tile=TALL, cluster=(1, 2))),
    ("persistent 256x128 2x1", "persistent", dict(tile=TALL, cluster=(2, 1))),
    ("persistent 256x128 1x2 G=8", "persistent", dict(tile=TALL, cluster=(1, 2), group_m=8)),
    ("persistent 256x128 PDL", "persistent", dict(tile=TALL, pdl=True)),
    ("persistent 256x128 1x2 PDL", "persistent", dict(tile=TALL, cluster=(1, 2), pdl=True)),
    # the epilogue schedule: accumulators stored from registers (st.global, CUTLASS's no-smem
    # epilogue) instead of registers -> smem -> TMA store (hopper_gemm_direct_store)
    ("persistent 128x256 direct store", "directstore", dict(tile=WIDE)),
]


def launcher(kernel: str, a, b, c, opts: dict):
    """The launcher of registry kernel ``kernel`` (``cluster``: 1x1 is the one-CTA kernel itself)."""
    return registry.entry(kernel).launcher(a, b, c, **opts)


def operands(m: int, n: int, k: int, dtype):
    """A (M, K) and B (N, K) of small integers (as NVIDIA's examples) and an empty C (M, N), on the
    GPU: the data of every schedules table and experiment."""
    import torch

    a = torch.empty(m, k, device="cuda", dtype=dtype).random_(-2, 2)
    b = torch.empty(n, k, device="cuda", dtype=dtype).random_(-2, 2)
    return a, b, torch.empty(m, n, device="cuda", dtype=dtype)


def checked_case(name: str, a, b, c, ref) -> bench.Case:
    """The ``KERNELS`` row ``name`` compiled for these operands, checked against ``ref`` (1e-2)."""
    found = [(sched, opts) for row, sched, opts in KERNELS if row == name]
    if not found:
        raise SystemExit(f"unknown kernel row {name!r}: one of {[row for row, _, _ in KERNELS]}")
    schedule, opts = found[0]
    return bench.checked_case(name, launcher(schedule, a, b, c, opts), c, ref, 1e-2)


def pick_shapes(names=None) -> dict[str, tuple[int, int, int]]:
    """The named SHAPES, in table order (all by default), or shapes written ``MxNxK``."""
    if names is None:
        return dict(SHAPES)
    picked = {}
    for name in names:
        if name in SHAPES:
            picked[name] = SHAPES[name]
        elif re.fullmatch(r"\d+x\d+x\d+", name):
            picked[name] = tuple(int(x) for x in name.split("x"))
        else:
            raise SystemExit(f"unknown shape {name!r}: one of {list(SHAPES)} or MxNxK")
    return picked


def run(dtype_name: str, rounds: int, shapes=None, kernels=None) -> dict[str, bench.BenchResult]:
    import torch

    dtype = getattr(torch, dtype_name)
    torch.manual_seed(0)
    out = {}
    chosen = [kn for kn in KERNELS if kernels is None or kn[0] in kernels]
    for shape, (m, n, k) in pick_shapes(shapes).items():
        a, b, c = operands(m, n, k, dtype)
        ref = torch.matmul(a, b.T)
        cases = [bench.Case("torch.matmul", lambda a=a, b=b, c=c: torch.matmul(a, b.T, out=c))]
        t0 = time.perf_counter()
        for name, _, _ in chosen:
            cases.append(checked_case(name, a, b, c, ref))
        print(f"{dtype_name} {shape}: {len(chosen)} kernels match torch.matmul "
              f"({time.perf_counter() - t0:.0f} s with compiles)", flush=True)
        with bench.GpuMonitor() as monitor:
            res = bench.compare(f"GEMM {dtype_name} {shape} (M={m}, N={n}, K={k}), ints, sustained",
                                cases, bench.Work(flops=2 * m * n * k), baseline="torch.matmul",
                                monitor=monitor, progress=False,
                                **{**gemm.PROTOCOLS["sustained"], "rounds": rounds},
                                params={"m": m, "n": n, "k": k, "dtype": dtype_name, "data": "ints",
                                        "protocol": "sustained",
                                        "kernels": {name: opts for name, _, opts in chosen}})
        print(res.table(), flush=True)
        out[shape] = res
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--dtypes", default="float16,bfloat16")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=str(bench.RESULTS_DIR))
    p.add_argument("--shapes", help="comma-separated names of SHAPES or MxNxK (default: all SHAPES)")
    p.add_argument("--kernels", help="comma-separated row names of KERNELS (default: all)")
    p.add_argument("--tag", default="", help="appended to the file name")
    args = p.parse_args()
    cutecourse.modes.require_gpu("sm_90a")
    for dtype_name in args.dtypes.split(","):
        results = run(dtype_name, args.rounds, args.shapes and args.shapes.split(","),
                      args.kernels and args.kernels.split(","))
        path = bench.save_set(f"schedules_{dtype_name}{args.tag}", results, args.out)
        print(f"wrote {path}", flush=True)
        best = {s: max((r for r in res.rows if r.name != "torch.matmul"), key=lambda r: r.ratio)
                for s, res in results.items()}
        print(json.dumps({s: f"{r.name}: {r.ratio:.3f}x" for s, r in best.items()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
