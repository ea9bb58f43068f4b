"""Issue 24, mechanism first: what each grouped kernel would reach without the costs we suspect.

    python benchmarks/experiments/grouped_ceilings.py --cpu-check     # compile the variants, no GPU
    python benchmarks/experiments/grouped_ceilings.py [--rounds 3] [--problems ...] [--fp8-rows ...] [--tag _x]

Rows timed in one run per problem, against the same baseline, with ``grouped_peers.py``'s
protocol. Writes ``experiment_grouped_ceilings<tag>.json``; what each run found is in
``docs/notes/grouped_speed.md`` (section 7).

**FP8 (DeepGEMM's shapes, the down projection): what does the promotion cost, and can it hide?**
Baseline cuBLAS's rowwise dense twin (``torch._scaled_mm``, which promotes too), beside it the same
with ``use_fast_accum=True`` (no promotion) and ``torch._scaled_grouped_mm``. The course's rows
(``FP8_ROWS``) are its kernel and variants of it, each with one hook changed:

* measurements, not kernels (``fp8_ceiling_kernels.py``): no promotion at all; the promotion's
  FFMAs on registers no wgmma writes, with one or two batches queued ("free FFMAs"); m64n64
  wgmmas without promotion; no epilogue;
* candidates that compute the recipe, checked on ragged groups before they are timed: the
  warpgroups taking turns (``fp8_turns.py``), three half-batches in flight (``fp8_half_parts.py``),
  the epilogue under the next tile's wgmmas (``fp8_epilogue_overlap.py``), 128x96 tiles whose
  promotion could hold three parts, and 2x2 clusters (the persistent kernel offers 1x1, 2x1 and
  1x2; this script allows 2x2 for its own rows; a cluster of four needs four free SMs of one GPC,
  so the grid is 128 or 120 SMs).

**bf16 fine-grained MoE: what bounds it?** Baseline the dense twin (``torch.matmul`` of the
packed A by one weight); every row counted at the useful flops (2 x sum M x N x K):

* ``torch.matmul`` on each group's rows rounded up to 128 and to 64: the padding a tile of that
  height computes, at cuBLAS's efficiency;
* the course's dense persistent (128x256) and ping-pong (64x256) kernels on the packed A;
* the grouped kernel (``course bf16 1x1``), with 1x2 clusters (A multicast, pairs along N), and
  with every expert using the same weight (6 MB of weights instead of 805 MB);
* the DRAM floor: ``torch.sum`` over A and all the weights, each read once (926 MB).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ (grouped_peers, gemm)

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the variants' modules

import cutecourse  # noqa: E402  (fixes the DSL's architecture before cutlass loads)

from cutecourse.kernels import grouped  # noqa: E402
from cutecourse.kernels import hopper_gemm_persistent  # noqa: E402
from cutecourse.kernels import hopper_grouped_gemm_fp8 as fp8  # noqa: E402
from fp8_variants import compile_variant, describe, fake_target, ragged_check  # noqa: E402

FP8_PROBLEMS = ("dg 8x4096 n4096 k7168", "dg 4x8192 n7168 k2048", "dg 4x8192 n4096 k7168",
                "dg 8x4096 n7168 k2048", "down 8x4096 n4096 k14336")
MOE = "moe 128 n1536 k2048"
#: The persistent kernel's clusters, and 2x2 for this experiment's rows (module docstring).
hopper_gemm_persistent.CLUSTERS = (*hopper_gemm_persistent.CLUSTERS, (2, 2))


_course_fp8_kernel = grouped.fp8_kernel


def fp8_kernel(tile=(128, 128), cluster=fp8.CLUSTER, sms=None, promote: bool | str = True, **config):
    """``grouped.fp8_kernel``, or with ``promote=False`` the same configuration as ``NoPromotion``,
    ``promote="free"`` as ``FreeFFMAs``, ``"deep free"`` as ``DeepFreeFFMAs`` (these three also
    at 128x96)."""
    if promote is True:
        return _course_fp8_kernel(tile, cluster, sms, **config)
    from fp8_ceiling_kernels import DeepFreeFFMAs, FreeFFMAs, NoEpilogue, NoPromotion, NoPromotionHalves
    from fp8_epilogue_overlap import OverlappedEpilogue
    from fp8_half_parts import HalfParts
    from fp8_turns import TwoPartsInTurn

    cls = {"free": FreeFFMAs, "deep free": DeepFreeFFMAs, "turns": TwoPartsInTurn, "half": HalfParts,
           "halves": NoPromotionHalves, "no epilogue": NoEpilogue, "overlap": OverlappedEpilogue}.get(
        promote, NoPromotion)
    return cls(tuple(tile), tuple(cluster), grouped._sms("sm_90a", sms), group_m=config.get("group_m", fp8.GROUP_M))


#: The variants that compute the recipe (checked against it, and on ragged groups first).
RECIPE = (True, "turns", "half", "overlap")
FP8_ROWS = {  # label: (launcher keywords, promote)
    "course fp8 2x1": (dict(cluster=(2, 1)), True),
    "course fp8 2x1 no promotion": (dict(cluster=(2, 1)), False),
    "course fp8 1x1 no promotion": (dict(cluster=(1, 1)), False),
    "course fp8 2x1 free FFMAs": (dict(cluster=(2, 1)), "free"),
    "course fp8 2x1 free FFMAs 2 batches": (dict(cluster=(2, 1)), "deep free"),
    "course fp8 2x1 turns": (dict(cluster=(2, 1)), "turns"),
    "course fp8 2x1 half parts": (dict(cluster=(2, 1)), "half"),
    "course fp8 1x1 half parts": (dict(cluster=(1, 1)), "half"),
    "course fp8 2x1 m64n64 no promotion": (dict(cluster=(2, 1)), "halves"),
    "course fp8 2x1 no epilogue": (dict(cluster=(2, 1)), "no epilogue"),
    "course fp8 2x1 epilogue overlap": (dict(cluster=(2, 1)), "overlap"),
    "course fp8 1x1 epilogue overlap": (dict(cluster=(1, 1)), "overlap"),
    "course fp8 2x1 128x96 no promotion": (dict(cluster=(2, 1), tile=(128, 96)), False),
    "course fp8 2x1 128x96 free FFMAs 2 batches": (dict(cluster=(2, 1), tile=(128, 96)), "deep free"),
    "course fp8 2x2 128 SMs": (dict(cluster=(2, 2), sms=128), True),
    "course fp8 2x2 120 SMs": (dict(cluster=(2, 2), sms=120), True),
}


def target(promote: bool = False, cluster=(2, 1), tile=(128, 128)):
    """(kernel, fake_args) for ``cutecourse.inspect.compile_report("grouped_ceilings:target")``."""
    return fake_target(fp8_kernel(tuple(tile), tuple(cluster), 128, promote=promote))


def cpu_check() -> dict:
    """Compile the course kernel and every variant of ``FP8_ROWS`` for sm_90a (no GPU) and print
    what decides what each times (``fp8_variants.describe``)."""
    reports = {}
    for promote, cluster, tile in dict.fromkeys((p, c["cluster"], c.get("tile", (128, 128)))
                                                for c, p in FP8_ROWS.values()):
        r = reports[promote, cluster, tile] = compile_variant("grouped_ceilings:target", promote=promote,
                                                              cluster=cluster, tile=tile)
        print(f"promote={promote}, cluster {cluster}, tile {tile}: {describe(r)}", flush=True)
    return reports


def fp8_rows(name, cases, errors, only=None):
    """The FP8 problem's rows (the course rows named in ``only``; None: all); returns (flops,
    baseline, params)."""
    import torch

    import grouped_peers as gp
    from cutecourse import bench
    from cutecourse.models import blockwise_fp8 as fp8b

    rows, n, k, kind, x, w, offs, c = gp.problem_data(name)
    starts = [0] + offs.tolist()[:-1]
    As = [x[s:s + m] for s, m in zip(starts, rows)]
    qA, SA, qB, SB = grouped.quantize_fp8(As, list(w))
    Cs = [c[s:s + m] for s, m in zip(starts, rows)]
    ref8 = torch.cat([fp8b.scaled_mm_reference(*q) for q in zip(qA, SA, qB, SB)])
    unscaled = torch.cat([qa.float() @ qb.float().T for qa, qb in zip(qA, qB)])
    for label, (config, promote) in FP8_ROWS.items():
        if only is not None and label not in only:
            continue
        if promote in RECIPE[1:]:
            worst = ragged_check((config["cluster"],), promote=promote)
            errors[f"{label}, ragged groups"] = worst
            print(f"{label}: ragged groups, worst relative error {worst:.2e}", flush=True)
            if not worst < 1e-2:
                raise SystemExit(f"{label} is wrong on ragged groups: not timed")
        fn = grouped.launcher_fp8(qA, SA, qB, SB, Cs, promote=promote, **config)
        if promote == "no epilogue":  # writes no C: timed only
            cases.append(bench.Case(label, fn))
            continue
        # Without promotion the wgmmas sum all of K in their own reduced precision: the error
        # grows with K (1.3e-2 of the largest value at K 14336), which is why the recipe promotes.
        ref, bound = (ref8, 1e-2) if promote in RECIPE else (unscaled, 5e-2)
        cases.append(bench.checked_case(label, fn, c, ref, bound))
        errors[f"{label}, vs {'the recipe' if promote in RECIPE else 'qa @ qb.T'}"] = gp._err(c, ref)
    notes = {}
    gp.torch_fp8_cases(x, w, offs, torch.cat([a @ b.T for a, b in zip(As, w)]), cases, errors, notes,
                       (gp.TORCH_FP8[0], gp.BASELINE_FP8, gp.FAST_ACCUM))
    return 2 * sum(rows) * n * k, gp.BASELINE_FP8, dict(groups=len(rows), rows=rows, n=n, k=k, **notes)


def padded(rows, height):
    return sum(-(-m // height) * height for m in rows)


def moe_rows(cases, errors):
    """The bf16 MoE's rows; returns (flops, baseline, params)."""
    import torch

    import grouped_peers as gp
    from cutecourse import bench
    from cutecourse.kernels import hopper_gemm_persistent as persistent
    from cutecourse.kernels import hopper_gemm_pingpong as pingpong

    rows, n, k, kind, x, w, offs, c = gp.problem_data(MOE)
    a16, w16 = x.bfloat16(), w.bfloat16()
    exact = torch.cat([a @ b.T for a, b in zip(a16.split(rows), w16)]).float()
    b16 = w16.transpose(-2, -1)
    for label, cluster in (("course bf16 1x1", (1, 1)), ("course bf16 1x2", (1, 2))):
        cases.append(bench.checked_case(label, grouped.packed_launcher(
            a16, b16, offs, c, tile=(128, 256), cluster=cluster), c, exact, 1e-2))
    # every expert multiplies by w16[0]: the list form, one weight tensor for all groups
    As, Cs = a16.split(rows), c.split(rows)
    dense_ref = (a16 @ w16[0].T).float()  # every row times w16[0]: also the dense kernels' answer
    cases.append(bench.checked_case("course bf16 1x1, one weight for all", grouped.launcher(
        list(As), [w16[0]] * len(rows), list(Cs), tile=(128, 256)), c, dense_ref, 1e-2))
    dense = torch.empty_like(c)
    cases.append(bench.checked_case("dense twin torch.matmul", lambda: torch.matmul(a16, w16[0].T, out=dense),
                                    dense, dense_ref, 1e-2))
    for height in (128, 64):
        a_pad = torch.randn(padded(rows, height), k, device="cuda").bfloat16()
        out = torch.empty(a_pad.shape[0], n, device="cuda", dtype=torch.bfloat16)
        cases.append(bench.Case(f"torch.matmul, rows padded to {height}",
                                lambda a_pad=a_pad, out=out: torch.matmul(a_pad, w16[0].T, out=out)))
    cases.append(bench.checked_case("course dense persistent 128x256", persistent.launcher(
        a16, w16[0], dense, tile=(128, 256)), dense, dense_ref, 1e-2))
    cases.append(bench.checked_case("course dense ping-pong 64x256", pingpong.launcher(
        a16, w16[0], dense, tile=(64, 256)), dense, dense_ref, 1e-2))
    floor = bench.Case("DRAM floor: torch.sum of A and the weights", lambda: (a16.sum(), w16.sum()))
    cases.append(floor)
    params = dict(groups=len(rows), rows=sum(rows), n=n, k=k,
                  **{"bytes of A and the weights": a16.numel() * 2 + w16.numel() * 2},
                  **{f"rows padded to {h}": padded(rows, h) for h in (128, 64)})
    return 2 * sum(rows) * n * k, "dense twin torch.matmul", params


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--cpu-check", action="store_true")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--problems", default=",".join((*FP8_PROBLEMS, MOE)))
    p.add_argument("--fp8-rows", help=f"comma-separated course rows of FP8_ROWS (default: all): {list(FP8_ROWS)}")
    p.add_argument("--out", default=None)
    p.add_argument("--tag", default="")
    args = p.parse_args()
    only = args.fp8_rows and {r.strip() for r in args.fp8_rows.split(",")}
    if only and only - set(FP8_ROWS):
        raise SystemExit(f"--fp8-rows: unknown {sorted(only - set(FP8_ROWS))}; the rows are {list(FP8_ROWS)}")
    if args.cpu_check:
        cpu_check()
        return 0
    import torch

    import gemm
    from cutecourse import bench

    cutecourse.modes.require_gpu("sm_90a")
    grouped.fp8_kernel = fp8_kernel  # the launchers build their kernel through it
    torch.manual_seed(0)
    out, results = args.out or str(bench.RESULTS_DIR), {}
    for name in args.problems.split(","):
        cases, errors = [], {}
        flops, baseline, params = (moe_rows if name == MOE else lambda c, e: fp8_rows(name, c, e, only))(cases, errors)
        with bench.GpuMonitor() as monitor:
            res = bench.compare(f"issue 24 ceilings, {name}, normal data, sustained", cases, bench.Work(flops=flops),
                                baseline=baseline, monitor=monitor, progress=False,
                                **{**gemm.PROTOCOLS["sustained"], "rounds": args.rounds},
                                params={**params, "relative errors vs the exact product": errors})
        print(res.table(), flush=True)
        results[name] = res
        bench.save_set(f"experiment_grouped_ceilings{args.tag}", results, out)
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
