"""Tune the TV-layout elementwise add over thread and value shapes, then confirm the winner.

Run on a GPU from the repository root:

    python benchmarks/elementwise_tv.py                 # fp16, 32768 x 32768: sweep + confirm
    python benchmarks/elementwise_tv.py --confirm-only  # only the headline comparison (TUNED)

Three steps, all in one process so that torch.add is measured next to the kernels:

1. **compile and check** every configuration (a tqdm bar): compile for these tensors, launch
   once, compare with ``a + b``. A configuration that fails is reported and left out.
2. **sweep**: time all of them and torch.add in one ``cutecourse.bench.compare`` run (GB/s,
   bytes = 3 x size x itemsize) -> ``elementwise_tv_sweep_<dtype>_<m>.json``.
3. **confirm**: time torch.add, ``tv.SEED`` (the configuration of the CuTe DSL blog post on
   elementwise add) and the sweep's best again with more repeats ->
   ``elementwise_tv_<dtype>_<m>.json``, the figure notebook 02 quotes.

A plot of the sweep (GB/s per configuration) is written beside the JSON files as a PNG.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

import cutecourse  # noqa: F401  (fixes the DSL's architecture before cutlass is imported)
from cutecourse import bench
from cutecourse.kernels import elementwise_tv as tv
from cutecourse.kernels.elementwise_tv import TVShape


def candidates(itemsize: int) -> list[TVShape]:
    """The configurations the sweep tries: 128..512 threads x 1..8 rows of one 16-byte vector,
    plus the lessons: narrower vectors (8 and 4 bytes), values that are not interleaved across
    threads (one thread owning 2 or 4 vectors side by side), the blog post's block order
    (``tv.SEED``, raster "m"), and cache hints on the loads."""
    vec = 16 // itemsize  # elements in one 128-bit vector
    out = [TVShape(thr, (rows, vec))
           for thr in [(1, 128), (4, 32), (1, 256), (2, 128), (8, 32), (1, 512), (4, 128)]
           for rows in (1, 2, 4, 8)]
    out += [TVShape((1, 256), (1, vec // 2)), TVShape((1, 256), (1, vec // 4)),  # 64, 32 bits
            TVShape((4, 32), (1, 2 * vec)), TVShape((4, 32), (1, 4 * vec)),  # not interleaved
            tv.SEED, TVShape((1, 256), (1, vec), "m"), TVShape((8, 32), (4, vec), "m")]
    out += [TVShape(thr, (1, vec), "n", hint) for thr in [(1, 128), (4, 128), (1, 256)]
            for hint in tv.LOAD_HINTS if hint]
    return out


def make_operands(m: int, n: int, dtype):
    import torch

    torch.manual_seed(0)
    a = torch.randn(m, n, device="cuda", dtype=dtype)
    b = torch.randn(m, n, device="cuda", dtype=dtype)
    return a, b, torch.empty_like(a), a + b


def compile_and_check(shapes: list[TVShape], a, b, c, ref, progress: bool = True):
    """[(shape, fn, args)] for the configurations that compile and compute a + b correctly."""
    import torch

    ok, failed = [], []
    for shape in _progress(shapes, "compile + check", progress):
        try:
            tv.check_operands(a, b, c, shape)
            fn, args = tv.compiled_kernel(a, b, c, shape)
            c.zero_()
            fn(*args)
            torch.cuda.synchronize()
            torch.testing.assert_close(c, ref)
            ok.append((shape, fn, args))
        except Exception as exc:  # report and go on: one bad configuration must not end the sweep
            failed.append((shape.name, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"))
    for name, why in failed:
        print(f"  left out {name}: {why}", file=sys.stderr)
    return ok, failed


def _progress(items: list, desc: str, show: bool):
    """A tqdm bar over ``items``; a line per item where tqdm is not installed (a bare GPU box)."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return ((show and print(f"  [{i + 1}/{len(items)}] {desc}", flush=True)) or x
                for i, x in enumerate(items))
    return tqdm(items, desc=desc, unit="config", disable=not show)


def torch_case(a, b, c):
    import torch

    return bench.Case("torch.add", lambda: torch.add(a, b, out=c))


def run(m: int, n: int, dtype_name: str, out_dir: Path, confirm_only: bool, sweep_iters: int,
        confirm_iters: int, confirm_repeats: int) -> dict:
    import torch

    dtype = getattr(torch, dtype_name)
    a, b, c, ref = make_operands(m, n, dtype)
    work = bench.Work(bytes=3 * a.numel() * a.element_size())
    tag = f"{dtype_name.replace('float', 'fp')}_{m}" if m == n else f"{dtype_name}_{m}x{n}"
    shapes = [tv.TUNED, tv.SEED] if confirm_only else candidates(a.element_size())
    ok, failed = compile_and_check(shapes, a, b, c, ref)
    if not ok:
        raise SystemExit("no configuration compiled and passed the check")
    params = {"m": m, "n": n, "dtype": dtype_name}
    summary: dict = {"left_out": failed}

    if confirm_only:
        best = tv.TUNED
    else:
        cases = [torch_case(a, b, c)] + [bench.Case(s.name, fn, [args]) for s, fn, args in ok]
        sweep = bench.compare(f"TV-layout add sweep, {dtype_name} {m}x{n}", cases, work,
                              baseline="torch.add", iterations=sweep_iters, repeats=3,
                              params={**params, "configs": {s.name: _describe(s) for s, _, _ in ok},
                                      "left_out": failed})
        sweep.rows.sort(key=lambda r: -(r.gbps or 0))
        path = sweep.save(f"elementwise_tv_sweep_{tag}", out_dir)
        print(sweep.table())
        print("wrote", path)
        _plot(sweep, out_dir / f"elementwise_tv_sweep_{tag}.png")
        best_name = next(r.name for r in sweep.rows if r.name != "torch.add")
        best = next(s for s, _, _ in ok if s.name == best_name)
        summary["sweep_best"] = best_name

    # Confirmation: torch.add first, then the blog post's configuration (tv.SEED) and the winner,
    # more repeats.
    chosen = {s.name: (s, fn, args) for s, fn, args in ok}
    names = [tv.SEED.name] + ([best.name] if best.name != tv.SEED.name else [])
    cases = [torch_case(a, b, c)] + [bench.Case(nm, chosen[nm][1], [chosen[nm][2]]) for nm in names]
    final = bench.compare(f"TV-layout add, {dtype_name} {m}x{n}", cases, work, baseline="torch.add",
                          iterations=confirm_iters, repeats=confirm_repeats,
                          params={**params, "tuned": _describe(best), "seed": _describe(tv.SEED)})
    # The kernel wrote into c during timing: it must still hold a + b.
    torch.testing.assert_close(c, ref)
    path = final.save(f"elementwise_tv_{tag}", out_dir)
    print(final.table())
    print("wrote", path)
    row = final.row(best.name)
    summary.update(best=best.name, gbps=row.gbps, ratio=row.ratio,
                   torch_gbps=final.row("torch.add").gbps)
    print(f"tuned {best.name}: {row.gbps:.0f} GB/s, {row.ratio:.3f} x torch.add")
    return summary


def _describe(s: TVShape) -> dict:
    return {"thr": list(s.thr), "val": list(s.val), "raster": s.raster, "hint": s.hint,
            "tile": list(s.tile), "threads": s.threads}


def _plot(result: bench.BenchResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ax = result.plot()
    ax.figure.tight_layout()
    ax.figure.savefig(path, dpi=90)
    plt.close(ax.figure)
    print("wrote", path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--m", type=int, default=32768)
    p.add_argument("--n", type=int, default=32768)
    p.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float32"])
    p.add_argument("--out", type=Path, default=bench.RESULTS_DIR, help="where the JSON goes")
    p.add_argument("--confirm-only", action="store_true", help="skip the sweep, confirm TUNED")
    p.add_argument("--sweep-iters", type=int, default=40)
    p.add_argument("--confirm-iters", type=int, default=100)
    p.add_argument("--confirm-repeats", type=int, default=7)
    args = p.parse_args(argv)
    cutecourse.modes.require_gpu("any")
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        summary = run(args.m, args.n, args.dtype, args.out, args.confirm_only, args.sweep_iters,
                      args.confirm_iters, args.confirm_repeats)
    except Exception:
        traceback.print_exc()
        return 1
    print("summary:", summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
