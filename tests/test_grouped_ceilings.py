"""benchmarks/experiments/grouped_ceilings.py and its variants (issue 24) still compile for sm_90a
into what each measurement claims to time, so the measurements can be rerun: no promotion means
no FFMAs, the "free" FFMAs are really FFMAs with one or two wgmma batches queued, and the two
candidate kernels keep the wgmma pipeline (ptxas serializes every wgmma when it cannot prove an
accumulator finished before other instructions read it: warning C7514)."""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "experiments"))

from fp8_variants import compile_variant as report, wait_groups as waits  # noqa: E402


def serialized(r):
    return "C7514" in r.log


def test_no_promotion_and_free_ffmas():
    course = report("grouped_ceilings:target", promote=True)
    none = report("grouped_ceilings:target", promote=False)
    free = report("grouped_ceilings:target", promote="free")
    deep = report("grouped_ceilings:target", promote="deep free")
    assert course.ptx.count("fma.rn.f32") > 0 and none.ptx.count("fma.rn.f32") == 0
    # 64 FFMAs per k-tile (one part's registers), not folded into adds of a constant
    assert free.ptx.count("fma.rn.f32") == deep.ptx.count("fma.rn.f32") == 64
    assert waits(free.ptx) == [0, 1] and waits(deep.ptx) == [0, 2]
    assert all(r.spill_bytes == 0 and not serialized(r) for r in (course, none, free, deep))


def test_candidates_keep_the_wgmma_pipeline():
    """(The first draft of the half parts issued conditionally and committed empty groups past the
    last k-tile: ptxas reported C7514 and serialized every wgmma.)"""
    half = report("fp8_half_parts:target")
    overlap = report("fp8_epilogue_overlap:target")
    turns = report("grouped_ceilings:target", promote="turns")
    assert "m64n64k32" in half.ptx and waits(half.ptx) == [0, 3]
    assert "m64n128k32" in overlap.ptx and waits(overlap.ptx) == [0, 1]
    # the turns: named-barrier waits with a computed id (2 + warpgroup) before each issue, and
    # the arrive that gives warpgroup 0 the first turn (the course kernel has only bar.sync 1)
    assert re.search(r"bar\.sync\s+%r", turns.ptx) and "bar.arrive 2, 256" in turns.ptx
    assert all(r.spill_bytes == 0 and not serialized(r) for r in (half, overlap, turns))
