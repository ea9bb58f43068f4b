"""What issue 24's FP8 experiments share: compiling a variant for sm_90a on the CPU, and checking
one against the recipe's reference on ragged groups on the GPU.

A variant is a copy of the course's FP8 kernel with one hook changed, defined in one of the
experiment scripts beside this file and built by its ``target`` function (the ``module:target``
that ``cutecourse.inspect.compile_report`` compiles in a fresh process).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: Ragged groups (M, N, K): 1, 2, 3, 4, 6 and 9 k-tiles (each end of the variants' unrolled
#: loops), an N that ends inside a tile or below one scale block, K = 0 and M = 0.
RAGGED = [(300, 256, 128), (129, 384, 256), (7, 264, 384), (64, 200, 512), (100, 136, 768),
          (1000, 520, 1040), (64, 128, 0), (0, 256, 512)]


def compile_variant(target: str, **params):
    """``compile_report("module:target", arch="sm_90a", **params)`` for a module in this folder
    (the compiling process finds it on ``PYTHONPATH``, which is restored afterwards)."""
    from cutecourse.inspect import compile_report

    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(HERE) + os.pathsep + (before or "")
    try:
        return compile_report(target, arch="sm_90a", **params)
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before


def wait_groups(ptx: str) -> list[int]:
    """The distinct counts of the ``wgmma.wait_group`` instructions in ``ptx``, sorted."""
    return sorted(set(int(n) for n in re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", ptx)))


def fake_target(kernel):
    """(kernel, fake_args): what a script's ``target`` returns for ``compile_report``, for an FP8
    grouped kernel object (symbolic sizes, bf16 C, the five metadata columns)."""
    from cutecourse.kernels import grouped_targets
    from cutecourse.kernels.group_walk import OPERANDS

    return kernel, grouped_targets._hopper_arguments(kernel, "float8_e4m3fn", "bfloat16", len(OPERANDS))


def print_report(target: str, label: str):
    """Compile ``target`` (``compile_variant``), print ``label: describe(...)``, return the report."""
    r = compile_variant(target)
    print(f"{label}:", describe(r), flush=True)
    return r


def describe(report) -> str:
    """What decides whether a variant times what it claims: registers, spills, the wgmma shapes
    and ``wait_group`` counts, the FFMAs, and whether ptxas serialized the wgmmas (C7514)."""
    ptx = report.ptx
    shapes = sorted(set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)", ptx)))
    return (f"registers {report.registers}, spills {report.spill_bytes} B, wgmma {ptx.count('wgmma.mma_async')} "
            f"{shapes}, wait_group {wait_groups(ptx)}, fma.rn.f32 {ptx.count('fma.rn.f32')}, "
            f"global loads {ptx.count('ld.global')}, multicast loads {ptx.count('.multicast::cluster')}, "
            f"wgmma serialized: {'C7514' in report.log}")


def ragged_check(clusters=((2, 1), (1, 1)), **config) -> float:
    """``grouped.launcher_fp8(..., **config)`` on ``RAGGED`` at each cluster, against
    ``blockwise_fp8.scaled_mm_reference``; returns the worst error relative to the largest value
    (an empty group's C must be zero: its largest magnitude counts; C starts as NaN, so an element
    never written makes it infinite)."""
    import torch

    from cutecourse.kernels import grouped
    from cutecourse.models import blockwise_fp8 as fp8b

    torch.manual_seed(0)
    As = [torch.randn(m, k, device="cuda") for m, n, k in RAGGED]
    Bs = [torch.randn(n, k, device="cuda") for m, n, k in RAGGED]
    qA, SA, qB, SB = grouped.quantize_fp8(As, Bs)
    worst = 0.0
    for cluster in clusters:
        Cs = [torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda") for m, n, k in RAGGED]
        grouped.launcher_fp8(qA, SA, qB, SB, Cs, cluster=cluster, **config)()
        torch.cuda.synchronize()
        for c, qa, sa, qb, sb, (m, n, k) in zip(Cs, qA, SA, qB, SB, RAGGED):
            if m and k:
                ref = fp8b.scaled_mm_reference(qa, sa, qb, sb)
                err = ((c.float() - ref).abs().max() / ref.abs().max()).item()
            elif m:
                err = c.float().abs().max().item()
            else:
                continue
            worst = max(worst, err) if err == err else float("inf")  # NaN: an element never written
    return worst
