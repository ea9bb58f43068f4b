"""int4 weights x bf16 activations: the course's mixed-input GEMM against cuBLAS and tinygemm.

    python benchmarks/mixed_input.py [--quick] [--rounds 3] [--out DIR] [--tag _x]
                                     [--shapes 8192x8192,...] [--ms 1,16,...] [--group 128]

For each weight shape N x K (a Linear layer's (out, in): 8192 x 8192, 28672 x 8192, 8192 x 28672)
and each batch M (1, 2, 4, ..., 256, 1024, 4096), one interleaved comparison of

* ``cuBLAS bf16``: ``torch.matmul(x, w.T)`` with w the dequantized weights W' in bf16 (4x the
  bytes of the int4 ones: the baseline a quantized layer has to beat);
* ``torch tinygemm int4``: ``torch._weight_int4pack_mm`` on the same int4 values and scales,
  packed by ``torch._convert_weight_to_int4pack`` (torch's own int4 kernel);
* ``course mixed_mm``: ``cutecourse.kernels.mixed_input`` (its plan: batch tile, split-K).

and a floor that is no GEMM: ``torch.amax`` over the int4 weights (their bytes read once).

Every case is first checked against x @ W'.T (fp32) and then timed on cold operands: each case
cycles through copies of its weights that together exceed twice the L2, so that each launch
reads its weights from HBM, as a decode step does (32 MiB of int4 would otherwise stay in L2).
Every case is timed as replays of a CUDA graph, as a decode step runs (``bench.graph_time_us``:
a call through Python costs the host more than the kernel takes at M = 1).
Throughput is reported as TFLOP/s of 2 M N K; ``params`` records each case's compulsory bytes
(weights + scales + x + y), from which the achieved bandwidth follows.

``--quick``: one shape (8192 x 8192), M = 1, 16, 256, two rounds: about two minutes with the
compiles. ``--variant tile_m=128,warpgroups=2`` (repeatable): one more course row with those
launcher arguments instead of the planner's (a row the kernel refuses at some M is left out
there, with its reason printed). Writes ``mixed_input<tag>.json`` (``_quick`` added with ``--quick``): a result set,
``bench.load_set``, one problem per "N x K, M = m".
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cutecourse  # noqa: E402
from cutecourse import bench  # noqa: E402
from cutecourse.kernels import mixed_input  # noqa: E402
from cutecourse.quant import dequantize, quantize_int4, unpack  # noqa: E402

SHAPES = [(8192, 8192), (28672, 8192), (8192, 28672)]
MS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096]
QUICK = dict(shapes=[(8192, 8192)], ms=[1, 16, 256], rounds=2)
#: Timing budget of one case per repeat: iterations are chosen so that the slowest case of a
#: comparison takes about this long (tinygemm at M = 4096 takes tens of milliseconds a call).
REPEAT_S = 0.05


def tinygemm_operands(packed, scales, zeros, group: int, nibble_high_first: bool):
    """torch's int4 layout for the same values: q as uint8 (N, K/2), two per byte, packed by
    ``_convert_weight_to_int4pack``; scales and zeros (K/group, N, 2) with tinygemm's
    w = (q - 8) * scale + zero, so zero = (8 - our zero point) * scale gives the same W'."""
    import torch

    q = unpack(packed).to(torch.int32)
    pairs = (q[:, ::2] << 4 | q[:, 1::2]) if nibble_high_first else (q[:, 1::2] << 4 | q[:, ::2])
    w4 = torch._convert_weight_to_int4pack(pairs.to(torch.uint8).contiguous(), 8)
    z = (8 - zeros.float()) if zeros is not None else torch.zeros_like(scales, dtype=torch.float32)
    sz = torch.stack([scales.float(), z * scales.float()], dim=-1).to(torch.bfloat16).contiguous()
    return w4, sz


def tinygemm_case(x, packed, scales, zeros, group, ref, copies):
    """The tinygemm case, its nibble order found by checking (torch does not document it)."""
    import torch

    last = None
    for high_first in (True, False):
        w4, sz = tinygemm_operands(packed, scales, zeros, group, high_first)
        y = torch._weight_int4pack_mm(x, w4, group, sz)
        err = ((y.float() - ref).abs().max() / ref.abs().max()).item()
        if err < 2e-2:
            sets = [tinygemm_operands(p, s, z, group, high_first) for p, s, z in copies]
            return bench.Case("torch tinygemm int4", lambda w, s: torch._weight_int4pack_mm(x, w, group, s),
                              sets), err
        last = err
    print(f"skipped torch tinygemm: it does not reproduce x @ W'.T with either nibble order "
          f"(error {last:.3g})", flush=True)
    return None, last


def variant_case(name, opts, x, copies, y, ref):
    """A course row with launcher arguments ``opts``; None (and why) where the kernel refuses them."""
    from cutecourse.errors import CourseError

    import torch

    try:
        with torch.cuda.stream(bench.graph_stream()):  # a Launch keeps the stream it was built on
            launchers = [mixed_input.launcher(x, p, s, z, out=y, **opts) for p, s, z in copies]
    except CourseError as exc:
        print(f"skipped {name}: {exc.what}", flush=True)
        return None
    bench.checked_case(name, launchers[0], y, ref, 1e-2)
    return bench.Case(name, lambda fn: fn(), [(fn,) for fn in launchers])


def run_problem(n: int, k: int, m: int, group: int, rounds: int, variants=()) -> bench.BenchResult:
    import torch

    torch.manual_seed(0)
    w = torch.randn(n, k, device="cuda") * 0.02
    packed, scales, zeros = quantize_int4(w, group)
    wq = dequantize(packed, scales, zeros)  # bf16 W', what every case multiplies by
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    ref = x.float() @ wq.float().T
    int4_bytes = packed.numel() * 4 + scales.numel() * 2
    # copies of the weights, cycled, so each launch reads them from HBM (bench.cold_l2_sets)
    copies = bench.cold_l2_sets(lambda: (packed.clone(), scales.clone(), None), int4_bytes)
    dense = bench.cold_l2_sets(lambda: (wq.clone(),), wq.numel() * 2)
    y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

    cases = [bench.checked_case("cuBLAS bf16", lambda: torch.matmul(x, wq.T, out=y), y, ref, 1e-2)]
    cases[0] = bench.Case("cuBLAS bf16", lambda b: torch.matmul(x, b.T, out=y), dense)
    tiny, tiny_err = tinygemm_case(x, packed, scales, zeros, group, ref, copies)
    if tiny is not None:
        cases.append(tiny)
    with torch.cuda.stream(bench.graph_stream()):  # a Launch keeps the stream it was built on
        launchers = [mixed_input.launcher(x, p, s, z, out=y) for p, s, z in copies]
    bench.checked_case("course mixed_mm", launchers[0], y, ref, 1e-2)
    cases.append(bench.Case("course mixed_mm", lambda fn: fn(), [(fn,) for fn in launchers]))
    plan = launchers[0].plan
    for opts in variants:
        label = "course " + ",".join(f"{key}={val}" for key, val in opts.items())
        case = variant_case(label, opts, x, copies, y, ref)
        if case is not None:
            cases.append(case)

    # the floor: the int4 weights' bytes read once by a plain reduction, no GEMM (what the int4
    # bytes allow at this size, launch ramp and tail included)
    cases.append(bench.Case("floor: read the int4 bytes", lambda p: torch.amax(p.view(torch.int64)),
                            [(p,) for p, _, _ in copies]))
    slowest = max(bench.time_us(c, 1, 2, 1)[0] for c in cases)
    iterations = max(3, min(100, int(REPEAT_S * 1e6 / slowest)))
    compulsory = {"cuBLAS bf16": n * k * 2 + (m * k + m * n) * 2,
                  "int4": int4_bytes + (m * k + m * n) * 2}
    with bench.GpuMonitor() as monitor:
        res = bench.compare(f"int4 x bf16, W {n} x {k}, M = {m}, group {group}: cold weights, interleaved",
                            cases, bench.Work(flops=2 * m * n * k), baseline="cuBLAS bf16", monitor=monitor,
                            progress=False, rounds=rounds, warmup=3, iterations=iterations, repeats=2, graph=True,
                            params={"m": m, "n": n, "k": k, "group": group, "compulsory_bytes": compulsory,
                                    "course_plan": {"route": plan.route, "tile_m": plan.tile_m,
                                                    "splits": plan.splits, "warpgroups": plan.warpgroups},
                                    "weight_copies": len(copies), "tinygemm_rel_err": tiny_err,
                                    "variants": [dict(v) for v in variants]})
    print(res.table(), flush=True)
    return res


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="8192 x 8192, M = 1, 16, 256, two rounds")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--shapes", help="comma-separated NxK (default: all three)")
    p.add_argument("--ms", help="comma-separated batch sizes (default: 1 .. 4096)")
    p.add_argument("--group", type=int, default=128)
    p.add_argument("--out", default=str(bench.RESULTS_DIR))
    p.add_argument("--tag", default="")
    p.add_argument("--variant", action="append", default=[],
                   help="launcher arguments of one more course row, e.g. tile_m=128,warpgroups=2")
    args = p.parse_args()
    cutecourse.modes.require_gpu("sm_90a")
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    ms = [int(v) for v in args.ms.split(",")] if args.ms else MS
    rounds = args.rounds
    tag = args.tag
    variants = [{key: int(val) if val.isdigit() else val for key, val in (kv.split("=") for kv in v.split(","))}
                for v in args.variant]
    if args.quick:
        shapes, ms, rounds, tag = QUICK["shapes"], QUICK["ms"], QUICK["rounds"], tag + "_quick"
    t0 = time.perf_counter()
    results = {}
    for n, k in shapes:
        for m in ms:
            results[f"{n} x {k}, M = {m}"] = run_problem(n, k, m, args.group, rounds, variants)
    path = bench.save_set(f"mixed_input{tag}", results, args.out)
    print(f"wrote {path} ({time.perf_counter() - t0:.0f} s)", flush=True)
    print(json.dumps({key: {r.name: f"{r.ratio:.2f}x, {r.us:.1f} us" for r in res.rows}
                      for key, res in results.items()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
