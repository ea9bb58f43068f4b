"""benchmarks/experiments/fp8_scales_ahead.py (issue 24): its variant still compiles for sm_90a like
the course kernel (same wgmmas, no spills), so the experiment can be rerun."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "experiments"))

import fp8_scales_ahead as exp  # noqa: E402


def test_variant_compiles_like_the_course_kernel():
    reports = exp.cpu_check()
    course, staged = reports[False], reports[True]
    assert staged.spill_bytes == 0 and course.spill_bytes == 0
    assert staged.ptx.count("wgmma.mma_async") == course.ptx.count("wgmma.mma_async") == 16
    # three more global loads: the staged k-tile's scales before the loop
    assert staged.ptx.count("ld.global") > course.ptx.count("ld.global")
