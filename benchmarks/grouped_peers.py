"""The grouped GEMMs against the best peers and their ceilings, in one run per problem.

    python benchmarks/grouped_peers.py [--rounds 3] [--problems "..."] [--kernels "..."] [--out DIR] [--tag _x]

Two families of problems:

* **FP8 block-scaled** (DeepSeek-V3's recipe: A per 1x128, B per 128x128 block, e4m3 + fp32
  scales): DeepGEMM's four grouped shapes (its README's "grouped contiguous" table) and an
  8-expert down projection. Rows: the course's FP8 kernel (1x1, 2x1); ``torch._scaled_grouped_mm``
  with rowwise scales (one per row of A and per column of B: a cheaper recipe, cuBLAS/CUTLASS);
  and the *dense twin*, all rows times one weight (same flops) by ``torch._scaled_mm`` rowwise and
  tensorwise: the FP8 ceiling of a single GEMM of that size. Baseline: the rowwise dense twin.
* **Fine-grained MoE** in bf16 (128 experts, N 1536, K 2048, uneven tokens, some experts empty):
  the course's bf16 grouped kernel (1x1, 2x1), ``torch._grouped_mm``, the dense twin
  (``torch.matmul`` of the packed A by one weight) and the course's FP8 kernel on the same data.
  Baseline: the dense twin.

The course's rows are configurations of its kernels (``COURSE_FP8``, ``COURSE_BF16``): the
defaults and the candidates the FP8 speed investigation tried (``docs/grouped_fp8_speed.md``);
``--kernels`` picks some of them (torch's rows always run: they are the peers and the baselines).

Every case is checked before it is timed (course FP8 against ``scaled_mm_reference``; torch's FP8
against the unquantized product with a looser bound, since rowwise quantization is coarser);
sustained protocol (``benchmarks/gemm.py``). Writes ``grouped_peers<tag>.json`` (a result set).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cutecourse  # noqa: E402
from cutecourse import bench  # noqa: E402
from cutecourse.kernels import grouped  # noqa: E402
from cutecourse.models import blockwise_fp8 as fp8b  # noqa: E402
from cutecourse.models import group_scheduler as gs  # noqa: E402

import gemm  # noqa: E402  (the protocols)
from result_sets import save_and_show  # noqa: E402
from row_checks import rel_err, torch_case  # noqa: E402

#: Fine-grained MoE: 128 experts, 0-512 tokens each (mean 256, seed 0), experts 5, 37 and 90 empty.
MOE_ROWS = [0 if g in (5, 37, 90) else m for g, (m, _, _) in enumerate(gs.moe_sizes(128, 1536, 2048, (0, 512)))]
#: name -> (rows per group, N, K, kind). DeepGEMM's grouped-contiguous shapes (README, H800).
PROBLEMS = {
    "dg 4x8192 n4096 k7168": ([8192] * 4, 4096, 7168, "fp8"),
    "dg 4x8192 n7168 k2048": ([8192] * 4, 7168, 2048, "fp8"),
    "dg 8x4096 n4096 k7168": ([4096] * 8, 4096, 7168, "fp8"),
    "dg 8x4096 n7168 k2048": ([4096] * 8, 7168, 2048, "fp8"),
    "down 8x4096 n4096 k14336": ([4096] * 8, 4096, 14336, "fp8"),
    "moe 128 n1536 k2048": (MOE_ROWS, 1536, 2048, "bf16"),
}
#: The course's rows: name -> the launcher's keywords (``grouped.fp8_kernel``'s, ``grouped.launcher``'s).
#: The FP8 candidates (docs/grouped_fp8_speed.md): one accumulator part per warpgroup
#: ("1part"), the warpgroups passing the turn to issue when their wgmmas are issued; and the wider
#: tiles one part makes room for.
COURSE_FP8 = {
    # the launchers' defaults: one part at 128x256 since 2026-11-27 (before: the two-part kernel, so in
    # older results "course fp8", "course fp8 1x1", "2x1", the bands and "1x2" rows are two parts);
    # 2x1 unless the groups are short (grouped.fp8_cluster)
    "course fp8": dict(),
    "course fp8 two parts": dict(parts=2),  # the kernel notebook 07 teaches
    "course fp8 1x1": dict(cluster=(1, 1)),
    "course fp8 2x1": dict(cluster=(2, 1)),
    "course fp8 1part 2x1": dict(tile=(128, 128), parts=1, cluster=(2, 1)),
    "course fp8 128x192 2x1": dict(tile=(128, 192), parts=1, cluster=(2, 1)),
    "course fp8 128x256 2x1": dict(tile=(128, 256), parts=1, cluster=(2, 1)),
    "course fp8 128x256 1x1": dict(tile=(128, 256), parts=1, cluster=(1, 1)),
    "course fp8 128x192 1x1": dict(tile=(128, 192), parts=1, cluster=(1, 1)),
    # Tile order inside a group: the default bands of 8 cluster rows (``fp8.GROUP_M``)
    # against whole columns (m fastest, 1 << 12) and narrower bands.
    # In grouped_peers_bands.json "course fp8 2x1" is the m-fastest kernel.
    "course fp8 2x1 m fastest": dict(cluster=(2, 1), group_m=1 << 12),
    "course fp8 2x1 bands 2": dict(cluster=(2, 1), group_m=2),
    "course fp8 2x1 bands 4": dict(cluster=(2, 1), group_m=4),
    "course fp8 2x1 bands 16": dict(cluster=(2, 1), group_m=16),
    "course fp8 1x2": dict(cluster=(1, 2)),  # pairs along N: A multicast instead of B
}
#: bf16, fine-grained MoE: 128x128 tiles make twice the work items of 128x256 (a shorter tail
#: over the 132 SMs), at 1.33x the bytes per flop.
COURSE_BF16 = {
    "course bf16 1x1": dict(tile=(128, 256)),
    "course bf16 2x1": dict(tile=(128, 256), cluster=(2, 1)),
    "course bf16 128x128 1x1": dict(tile=(128, 128)),
    "course bf16 128x128 2x1": dict(tile=(128, 128), cluster=(2, 1)),
}


#: torch's rows (always timed: the peers and the baselines).
TORCH_FP8 = ("torch._scaled_grouped_mm rowwise", "dense twin _scaled_mm rowwise",
             "dense twin _scaled_mm tensorwise")
TORCH_ROWS = (*TORCH_FP8, "torch._grouped_mm", "dense twin torch.matmul")
BASELINE_FP8 = TORCH_FP8[1]
#: The rowwise twin without cuBLAS's periodic fp32 promotion (``use_fast_accum=True``): not one of
#: this script's rows by default; pass it in ``torch_fp8_cases``' labels to time it (the FP8
#: investigation did: ``docs/grouped_fp8_speed.md``).
FAST_ACCUM = "dense twin _scaled_mm rowwise fast accum"


def rowwise(x):
    """e4m3 with one fp32 scale per row (amax / 448): torch's rowwise recipe."""
    import torch

    s = x.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-4) / 448.0
    return (x / s).to(torch.float8_e4m3fn), s


def tensorwise(x):
    import torch

    s = x.abs().amax().float().clamp(min=1e-4) / 448.0
    return (x / s).to(torch.float8_e4m3fn), s.reshape(())


def select(names: str | None) -> set:
    """The rows ``--kernels`` names (comma-separated course rows) plus every torch row: all rows
    when None. An unknown name is an error that lists the known ones."""
    course = {**COURSE_FP8, **COURSE_BF16}
    if names is None:
        return set(course) | set(TORCH_ROWS)
    picked = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in picked if n not in course]
    if unknown:
        raise SystemExit(f"--kernels: unknown rows {unknown}; the course's rows are {list(course)}")
    return set(picked) | set(TORCH_ROWS)


def problem_data(name: str):
    """(rows, n, k, kind, x, w, offs, c) of problem ``name``: randn fp32 A (sum M, K) and weights
    (G, N, K), int32 cumulative row ends, a bf16 output, all on the GPU."""
    import torch

    rows, n, k, kind = PROBLEMS[name]
    x = torch.randn(sum(rows), k, device="cuda")
    w = torch.randn(len(rows), n, k, device="cuda")
    offs = torch.tensor(rows, dtype=torch.int64).cumsum(0).to(torch.int32).cuda()
    return rows, n, k, kind, x, w, offs, torch.empty(sum(rows), n, device="cuda", dtype=torch.bfloat16)


def fp8_cases(rows, n, k, x, w, offs, c, cases, errors, notes, only=None):
    """The FP8 problem's cases: the course's kernels, torch's grouped and dense FP8 GEMMs (the
    rows named in ``only``; None: all)."""
    import torch

    starts = [0] + offs.tolist()[:-1]
    As = [x[s:s + m] for s, m in zip(starts, rows)]
    qA, SA, qB, SB = grouped.quantize_fp8(As, list(w))
    Cs = [c[s:s + m] for s, m in zip(starts, rows)]
    ref8 = torch.cat([fp8b.scaled_mm_reference(*q) for q in zip(qA, SA, qB, SB)])
    exact = torch.cat([a @ b.T for a, b in zip(As, w)])
    for label, opts in COURSE_FP8.items():
        if only is None or label in only:
            _course_case(cases, errors, notes, label, lambda: grouped.launcher_fp8(qA, qB, SA, SB, Cs, **opts), c,
                         ref8, exact)
    torch_fp8_cases(x, w, offs, exact, cases, errors, notes,
                    TORCH_FP8 if only is None else [label for label in TORCH_FP8 if label in only])
    return BASELINE_FP8


def torch_fp8_cases(x, w, offs, exact, cases, errors, notes, labels=TORCH_FP8):
    """torch's FP8 rows named in ``labels``, on the packed rows ``x`` (sum M, K) and the weights
    ``w`` (G, N, K), fp32: ``torch._scaled_grouped_mm`` with rowwise scales (checked against
    ``exact``, the groups' products), and the dense twin, every row times ``w[0]``, by
    ``torch._scaled_mm`` rowwise (cuBLAS's default: partial sums promoted into fp32 every few
    k-steps), rowwise without that promotion (``FAST_ACCUM``) and tensorwise."""
    import torch

    if not labels:
        return
    # torch's grouped FP8 GEMM, rowwise scales: a (sum M, K) row-major, b (G, K, N) column-major
    qa, sa = rowwise(x)
    if TORCH_FP8[0] in labels:
        qw, sw = zip(*(rowwise(wg) for wg in w))  # one scale per row of w_g = per column of b_g
        qb = torch.stack(qw).transpose(-2, -1)
        sb = torch.stack([s.reshape(-1) for s in sw])
        try:
            torch_case(cases, errors, TORCH_FP8[0], exact, lambda: torch._scaled_grouped_mm(
                qa, qb, sa.reshape(-1), sb, offs=offs, out_dtype=torch.bfloat16))
        except RuntimeError as e:
            notes["torch._scaled_grouped_mm"] = f"refused: {str(e).splitlines()[0][:160]}"
    # the dense twin: every row times w[0], rowwise (with and without promotion) and tensorwise
    dense_exact = x @ w[0].T
    qd, sd = rowwise(w[0])
    qt, st = tensorwise(x)
    qdt, sdt = tensorwise(w[0])
    twins = {TORCH_FP8[1]: lambda: torch._scaled_mm(qa, qd.t(), sa, sd.t(), out_dtype=torch.bfloat16),
             FAST_ACCUM: lambda: torch._scaled_mm(qa, qd.t(), sa, sd.t(), out_dtype=torch.bfloat16,
                                                  use_fast_accum=True),
             TORCH_FP8[2]: lambda: torch._scaled_mm(qt, qdt.t(), st, sdt, out_dtype=torch.bfloat16)}
    for label, fn in twins.items():
        if label in labels:
            torch_case(cases, errors, label, dense_exact, fn)


def _course_case(cases, errors, notes, label, build, out, ref, exact):
    """A course row: built, checked against ``ref`` (1e-2 relative), then timed. A candidate that
    does not compile or computes a wrong result is left out with a note: the other rows of the
    run still count."""
    try:
        cases.append(bench.checked_case(label, build(), out, ref, 1e-2))
        errors[label] = rel_err(out, exact)
    except Exception as e:  # noqa: BLE001  (a compile error, a wrong result: reported, not timed)
        first_line = (str(e).strip().splitlines() or [""])[0]
        notes[label] = f"not timed: {type(e).__name__}: {first_line[:200]}"
        print(f"{label}: {notes[label]}", flush=True)


def bf16_cases(rows, n, k, x, w, offs, c, cases, errors, notes, only=None):
    """The bf16 MoE problem's cases: the course's grouped kernels, torch, the dense twin, FP8."""
    import torch

    a16, w16 = x.bfloat16(), w.bfloat16()
    exact = torch.cat([a @ b.T for a, b in zip(a16.split(rows), w16)]).float()
    for label, opts in COURSE_BF16.items():
        if only is None or label in only:
            build = lambda: grouped.packed_launcher(a16, w16.transpose(-2, -1), offs, c, **opts)  # noqa: E731
            _course_case(cases, errors, notes, label, build, c, exact, exact)
    b16 = w16.transpose(-2, -1)
    torch_case(cases, errors, "torch._grouped_mm", exact, lambda: torch._grouped_mm(a16, b16, offs=offs), 1e-2)
    dense = torch.empty_like(c)
    twin = lambda: torch.matmul(a16, w16[0].T, out=dense)  # noqa: E731
    cases.append(bench.checked_case("dense twin torch.matmul", twin, dense, (a16 @ w16[0].T).float(), 1e-2))
    fp8_cases(rows, n, k, x, w, offs, torch.empty_like(c), cases, errors, notes, only)  # the FP8 rows too
    return "dense twin torch.matmul"


def run(rounds: int, problems=None, only=None, save=None) -> dict:
    """Every problem (or those named in ``problems``, in that order), each with the rows in
    ``only`` (None: all); ``save(results)`` after each problem (a run cut short keeps its start)."""
    import torch

    torch.manual_seed(0)
    out = {}
    for name in problems or PROBLEMS:
        rows, n, k, kind, x, w, offs, c = problem_data(name)
        g, total = len(rows), sum(rows)
        cases, errors, notes = [], {}, {}
        baseline = (fp8_cases if kind == "fp8" else bf16_cases)(rows, n, k, x, w, offs, c, cases, errors, notes,
                                                                only)
        print(f"{name}: checked; errors {errors}; {notes}", flush=True)
        with bench.GpuMonitor() as monitor:
            res = bench.compare(
                f"grouped GEMM peers, {name} ({g} groups, sum M = {total}, N = {n}, K = {k}), normal data, "
                "sustained", cases, bench.Work(flops=2 * total * n * k), baseline=baseline, monitor=monitor,
                progress=False, **{**gemm.PROTOCOLS["sustained"], "rounds": rounds},
                params={"groups": g, "rows": rows, "n": n, "k": k, "kind": kind, "data": "normal",
                        "protocol": "sustained", "relative errors vs the exact product": errors, **notes})
        print(res.table(), flush=True)
        out[name] = res
        if save is not None:
            save(out)
        del x, w, c
        torch.cuda.empty_cache()
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--problems", help="comma-separated names of PROBLEMS (default: all)")
    p.add_argument("--kernels", help="comma-separated course rows of COURSE_FP8 / COURSE_BF16 to time "
                                     "(default: all; torch's rows always run)")
    p.add_argument("--out", default=str(bench.RESULTS_DIR))
    p.add_argument("--tag", default="")
    args = p.parse_args()
    only = select(args.kernels)
    problems = args.problems and [p.strip() for p in args.problems.split(",")]
    unknown = [p for p in problems or () if p not in PROBLEMS]
    if unknown:
        raise SystemExit(f"--problems: unknown {unknown}; the problems are {list(PROBLEMS)}")
    cutecourse.modes.require_gpu("sm_90a")
    t0 = time.perf_counter()
    def save(results):
        return bench.save_set(f"grouped_peers{args.tag}", results, args.out)

    results = run(args.rounds, problems, only, save=save)
    save_and_show(f"grouped_peers{args.tag}", results, args.out, t0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
