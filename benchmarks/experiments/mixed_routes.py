"""The large-M route of the mixed-input GEMM, in its two parts: the dequantize pass alone and the
dense GEMM alone, beside cuBLAS bf16 on the same W'.

    python benchmarks/experiments/mixed_routes.py [--out DIR] [--shapes 8192x8192,...] [--ms 512,4096]

For each weight shape N x K: ``int4_dequantize`` writing W' (bf16) from cold int4 weights, timed
as CUDA-graph replays (``bench.graph_time_us``), with its bandwidth (int4 + scales read, W'
written); and for each M the course's dense GEMM (``mixed_input.DENSE_GEMM``) and cuBLAS on
x @ W'.T, interleaved. Their sum against the whole route (``benchmarks/mixed_input.py``) says
where the route's time goes. Writes ``experiment_mixed_routes.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cutecourse  # noqa: E402,F401
from cutecourse import bench  # noqa: E402
from cutecourse.kernels import int4_dequantize, mixed_input, registry  # noqa: E402
from cutecourse.quant import dequantize, quantize_int4  # noqa: E402


def main() -> int:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(bench.RESULTS_DIR))
    ap.add_argument("--shapes", default="8192x8192,28672x8192,8192x28672")
    ap.add_argument("--ms", default="512,1024,4096")
    args = ap.parse_args()
    cutecourse.modes.require_gpu("sm_90a")
    rows = []
    for shape in args.shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        torch.manual_seed(0)
        packed, scales, _ = quantize_int4(torch.randn(n, k, device="cuda") * 0.02, 128)
        wq = dequantize(packed, scales)
        int4_bytes = packed.numel() * 4 + scales.numel() * 2
        copies = bench.cold_l2_sets(lambda: (packed.clone(), scales.clone()), int4_bytes)
        with torch.cuda.stream(bench.graph_stream()):
            fns = [int4_dequantize.launcher(p, s) for p, s in copies]
        fns[0]()
        torch.cuda.synchronize()
        assert torch.equal(fns[0].w.view(torch.int16), wq.view(torch.int16)), "W' differs from dequantize()"
        us = sorted(bench.graph_time_us(bench.Case("dequantize", lambda f: f(), [(f,) for f in fns]), 10, 20, 5))[2]
        moved = int4_bytes + n * k * 2
        rows.append(dict(n=n, k=k, part="dequantize", us=round(us, 1), tbps=round(moved / us / 1e6, 2)))
        print(json.dumps(rows[-1]), flush=True)
        del fns
        dense_copies = bench.cold_l2_sets(lambda: (wq.clone(),), wq.numel() * 2)
        for m in (int(v) for v in args.ms.split(",")):
            x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
            y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            with torch.cuda.stream(bench.graph_stream()):
                course = [registry.entry(mixed_input.DENSE_GEMM).launcher(x, w, y) for (w,) in dense_copies]
            cases = [bench.Case("cuBLAS bf16", lambda w: torch.matmul(x, w.T, out=y), dense_copies),
                     bench.Case(f"course {mixed_input.DENSE_GEMM}", lambda f: f(), [(f,) for f in course])]
            res = bench.compare(f"x @ W'.T, W' {n} x {k} bf16, M = {m}", cases, bench.Work(flops=2 * m * n * k),
                                baseline="cuBLAS bf16", rounds=3, warmup=3, iterations=10, repeats=2,
                                progress=False, graph=True)
            print(res.table(), flush=True)
            for r in res.rows:
                rows.append(dict(n=n, k=k, m=m, part=r.name, us=round(r.us, 1), ratio=round(r.ratio, 3)))
    out = bench.save_json("experiment_mixed_routes", {"environment": bench.environment(), "rows": rows}, args.out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
