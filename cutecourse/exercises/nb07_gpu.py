"""Notebook 07's kernel exercises on an H100: the runners ``kernel_check.run_on_gpu`` calls in its
child process (a search that never ends hangs the GPU; the parent's timeout stops it).

Each takes ``(kernel, baseline)``: the learner's kernel (the course's with the learner's hook,
``nb07_kernels.with_search`` or ``with_promote``) and the course's, runs the learner's against
torch on grouped problems with empty groups, and, if it is right, times both. Returns ``{"ok", "message", ...}`` in the learner's terms.
"""

from __future__ import annotations

#: Experts of the grouped problems: mixed sizes, two empty, one shorter than a tile.
ROWS = (512, 0, 1000, 128, 37, 0, 2048, 700)
N, K = 4096, 2048


def _time(fn) -> float:
    """Median microseconds per launch of ``fn``."""
    from .. import bench

    return sorted(bench.time_us(bench.Case("kernel", fn), repeats=3))[1]


def _passed(fn, launch, baseline, lead: str) -> dict:
    """The result of a right kernel: ``lead`` (what was checked), then its speed on the problem
    (``fn``: the learner's launch closure) and, with a ``baseline``, the course kernel's, launched
    through the same ``launch``."""
    flops = 2 * N * K * sum(ROWS)
    mine = _time(fn)
    text = f"{lead}; {flops / mine / 1e6:.0f} TFLOP/s"
    if baseline is not None:
        theirs = _time(launch(baseline)[0])
        text += f", {theirs / mine:.2f}x the course kernel's speed ({flops / theirs / 1e6:.0f} TFLOP/s)"
    return {"ok": True, "message": text, "us": mine}


def search_runner(kernel, baseline=None) -> dict:
    """The packed bf16 problem of notebook 07 (``torch._grouped_mm`` as the reference), and each
    CTA's items and groups entered against ``models.group_scheduler``."""
    import torch

    from ..kernels import grouped
    from ..models import group_scheduler as gs

    torch.manual_seed(0)
    rows = torch.tensor(ROWS)
    offs = torch.cumsum(rows, 0).to(torch.int32).cuda()
    a = torch.randn(int(rows.sum()), K, device="cuda").bfloat16()
    w = torch.randn(len(ROWS), N, K, device="cuda").bfloat16()
    ref = torch._grouped_mm(a, w.transpose(-2, -1), offs=offs).float()

    def launch(k):
        c = torch.full((a.shape[0], N), float("nan"), device="cuda", dtype=torch.bfloat16)
        fn = grouped.HOPPER.launch(k, grouped.PackedGroups(a, w.transpose(-2, -1), offs, c))
        fn()
        torch.cuda.synchronize()
        return fn, c

    fn, c = launch(kernel)
    err = ((c.float() - ref).abs() / ref.abs().max()).nan_to_num(float("inf"))
    if not bool((err < 2e-2).all()):
        bad = (err >= 2e-2).any(dim=1).nonzero().flatten()
        ends = offs.cpu().tolist()
        g = next(i for i, e in enumerate(ends) if int(bad[0]) < e)
        return {"ok": False, "message": f"wrong result: {len(bad)} rows of C differ from "
                f"torch._grouped_mm, the first row {int(bad[0])} (group {g}): its tiles went to "
                "another group, or were never computed"}
    model = gs.schedule(gs.GroupedProblem([(int(m), N, K) for m in ROWS]), fn.ctas)
    ups = gs.tensormap_updates(model).per_cta
    got = fn.trace[:fn.ctas].tolist()
    want = [[len(s), u] for s, u in zip(model, ups)]
    if got != want:
        cta = next(i for i, (x, y) in enumerate(zip(got, want)) if x != y)
        return {"ok": False, "message": f"C is right, but CTA {cta} took {got[cta][0]} items and "
                f"entered {got[cta][1]} groups; the model: {want[cta][0]} items, {want[cta][1]} "
                "groups (tensor-map rewrites)"}
    return _passed(fn, launch, baseline, f"your search matches torch._grouped_mm on {len(ROWS)} experts "
                   "(two empty) and every CTA's items and rewrites match the model")


def fp8_runner(kernel, baseline=None) -> dict:
    """The FP8 kernel ``kernel`` on grouped FP8 problems against ``scaled_mm_reference``; timed
    beside ``baseline``."""
    import torch

    from ..kernels import grouped
    from ..models import blockwise_fp8 as fp8b

    torch.manual_seed(0)
    As = [torch.randn(m, K, device="cuda") for m in ROWS]
    Ws = [torch.randn(N, K, device="cuda") for _ in ROWS]
    qA, SA, qW, SW = grouped.quantize_fp8(As, Ws)
    sas = [grouped.checks.m_major(sa) for sa in SA]

    def launch(k):
        Cs = [torch.full((a.shape[0], N), float("nan"), device="cuda", dtype=torch.bfloat16) for a in qA]
        fn = grouped.FP8.launch(k, grouped.ScaledListGroups(qA, qW, sas, SW, Cs))
        fn()
        torch.cuda.synchronize()
        return fn, Cs

    fn, Cs = launch(kernel)
    for g, (c, q) in enumerate(zip(Cs, zip(qA, SA, qW, SW))):
        if c.shape[0] == 0:
            continue
        ref = fp8b.scaled_mm_reference(*q)
        err = ((c.float() - ref).abs().max() / ref.abs().max()).nan_to_num(float("inf")).item()
        if err > 1e-2:
            return {"ok": False, "message": f"wrong result: expert {g} (M = {c.shape[0]}) is "
                    f"{err:.1e} of its largest value away from the recipe's reference "
                    "(fp8b.scaled_mm_reference): check the scales you multiply by"}
    return _passed(fn, launch, baseline, f"matches the recipe's reference on {len(ROWS)} experts (two "
                   f"empty), N = {N}, K = {K}")


def promote_runner(kernel, baseline=None) -> dict:
    """Exercise 10 on the GPU: the FP8 kernel with the learner's promotion."""
    out = fp8_runner(kernel, baseline)
    if out["ok"]:
        out["message"] = "your promotion " + out["message"]
    return out
