"""Notebook 01's measurement: elementwise add against torch.add and a device copy, one run.

    python benchmarks/elementwise.py [--size 32768] [--dtype float16] [--out benchmarks/results]

Checks every kernel against torch first (output poisoned with NaN before each check), then times
all cases with cutecourse.bench and writes ``elementwise_add_<dtype>_<size>.json``. Bytes moved:
3 x size x itemsize for an add (read A, read B, write C), 2 x for the copy.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cutecourse  # noqa: E402  (sets the DSL's arch before cutlass is imported)
from cutecourse import bench  # noqa: E402
from cutecourse.kernels import elementwise as ew  # noqa: E402

#: (name, variant, bytes per thread or None for the kernel's default, threads per block)
CONFIGS = [
    ("naive", "naive", None, 256),
    ("vectorized 16B x 256", "vectorized", 16, 256),
    ("vectorized 8B x 512 (tuned)", "vectorized", ew.TUNED["vector_bytes"], ew.TUNED["threads"]),
    ("vectorized 16B x 512", "vectorized", 16, 512),
]


def main() -> int:
    import torch

    p = argparse.ArgumentParser()
    p.add_argument("--size", type=int, default=32768)
    p.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float32"])
    p.add_argument("--out", default=str(bench.RESULTS_DIR))
    p.add_argument("--iterations", type=int, default=50)
    args = p.parse_args()

    cutecourse.modes.require_gpu("any")
    dtype = getattr(torch, args.dtype)
    n = args.size
    a, b = (torch.randn(n, n, device="cuda", dtype=dtype) for _ in range(2))
    c = torch.empty_like(a)

    cases = [bench.Case("torch.add", lambda: torch.add(a, b, out=c)),
             bench.Case("device copy", lambda: c.copy_(a), work=bench.Work(bytes=2 * a.numel() * a.element_size()))]
    for name, variant, nbytes, threads in CONFIGS:
        elems = None if nbytes is None else nbytes // a.element_size()
        fn, cargs = ew.compiled_kernel(a, b, c, variant, elems, threads)
        cases.append(bench.checked_case(name, fn, c, a + b, args=cargs))  # fp16 adds are exact
    print(f"all {len(CONFIGS)} kernels match torch exactly at {n}x{n} {args.dtype}")

    work = bench.Work(bytes=3 * a.numel() * a.element_size())
    res = bench.compare(f"elementwise add, {args.dtype} {n}x{n}", cases, work, baseline="torch.add",
                        iterations=args.iterations,
                        params={"size": n, "dtype": args.dtype, "configs": CONFIGS})
    path = res.save(f"elementwise_add_{args.dtype}_{n}", args.out)
    print(res.table())
    print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
