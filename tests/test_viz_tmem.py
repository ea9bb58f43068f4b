"""The TMEM picture draws the plan's columns, and the plan's columns are CuTe's.

``blackwell_plan.Plan.tmem_regions`` says where the Blackwell kernel keeps its accumulators and
scale factors in tensor memory; here it is held to the column offsets CuTe gives the kernel's own
TMEM tensors (``sm100.sf_tmem_tensors`` over the accumulator of ``mma.make_fragment_C``), traced
on the host in a child process for sm_100a (the DSL reads its architecture once per process).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from cutecourse.errors import CourseError  # noqa: E402
from cutecourse.models import blackwell_plan as bp  # noqa: E402
from cutecourse.viz.tmem import draw_tmem  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = list(itertools.product(bp.FORMATS, bp.TILES))

_CUTE_COLUMNS = r'''
import json, sys
import cutecourse
from cutecourse.layouts import run_on_host

def build():
    import cutlass, cutlass.cute as cute
    from cutlass.cute.nvgpu import tcgen05
    from cutecourse.kernels import sm100
    from cutecourse.models import blackwell_plan as bp
    out = []
    for fmt, tile in json.loads(sys.argv[1]):
        p = bp.plan(fmt, tuple(tile))
        f = bp.check_format(fmt)
        data, scale = (getattr(cutlass, t) for t in f.cutlass_types)
        mma = sm100.tiled_mma(data, scale, f.block, tuple(tile))
        smem = sm100.smem_layouts(mma, p.tile_mnk, data, f.block, p.ab_stages, cutlass.Float16,
                                  bp.EPI_TILE, p.c_stages)
        layout = mma.make_fragment_C(cute.append(mma.partition_shape_C(tuple(tile)), p.acc_stages)).layout
        acc = cute.make_tensor(cute.make_ptr(cutlass.Float32, 0, cute.AddressSpace.tmem, assumed_align=16),
                               layout)
        sfa, sfb = sm100.sf_tmem_tensors(mma, p.tile_mnk, scale, f.block, smem, acc)
        out.append([tcgen05.find_tmem_tensor_col_offset(t) for t in (acc, sfa, sfb)])
    return out

print(json.dumps(run_on_host(build)))
'''


def test_plan_columns_are_cutes_columns():
    """Accumulator stages, SFA and SFB take the columns CuTe gives the kernel's TMEM tensors."""
    env = {**os.environ, "CUTE_DSL_ARCH": "sm_100a", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", _CUTE_COLUMNS, json.dumps(CONFIGS)], env=env,
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    cute_columns = json.loads(done.stdout.strip().splitlines()[-1])
    for (fmt, tile), (acc, sfa, sfb) in zip(CONFIGS, cute_columns):
        regions = bp.plan(fmt, tile).tmem_regions
        accs = [r for r in regions if r.name.startswith("accumulator")]
        by_name = {r.name: r for r in regions}
        assert sum(r.columns for r in accs) == acc, (fmt, tile)
        assert by_name["SFA"].first == acc and by_name["SFA"].columns == sfa, (fmt, tile)
        assert by_name["SFB"].first == acc + sfa and by_name["SFB"].columns == sfb, (fmt, tile)
        assert bp.plan(fmt, tile).tmem_columns == acc + sfa + sfb


@pytest.mark.parametrize("fmt, tile", CONFIGS)
def test_regions_tile_the_used_columns(fmt, tile):
    p = bp.plan(fmt, tile)
    first = 0
    for r in p.tmem_regions:  # back to back from column 0, nothing overlaps
        assert r.first == first and r.columns > 0
        first += r.columns
    assert first == p.tmem_columns <= bp.TMEM_COLUMNS
    names = [r.name for r in p.tmem_regions]
    assert names == [f"accumulator stage {s}" for s in range(p.acc_stages)] + ["SFA", "SFB"]
    # 4 columns per 512-byte atom: tcgen05.cp writes an atom to all four lane quarters
    assert [r.columns for r in p.tmem_regions[-2:]] == [bp.SF_COLUMNS_PER_ATOM * a for a in p.sf_atoms]


def test_two_stages_of_a_128x256_tile_do_not_fit():
    """The notebook's prediction: 2 x 256 accumulator columns + one k-tile of SF > 512."""
    for fmt in bp.FORMATS:
        p = bp.plan(fmt, (128, 256))
        sf = sum(r.columns for r in p.tmem_regions if r.name.startswith("SF"))
        assert 2 * 256 + sf > bp.TMEM_COLUMNS and p.acc_stages == 1


@pytest.mark.parametrize("fmt, tile", CONFIGS)
def test_picture_draws_each_region_at_its_columns(fmt, tile):
    p = bp.plan(fmt, tile)
    fig = draw_tmem(p)
    ax = fig.axes[0]
    drawn = {r.get_label(): (r.get_x(), r.get_width(), r.get_height())
             for r in ax.patches if isinstance(r, Rectangle)}
    for r in p.tmem_regions:
        assert drawn[r.name] == (r.first, r.columns, 128)
    assert drawn["allocated, unused"] == (0, bp.TMEM_COLUMNS, 128)
    assert f"{p.tmem_columns} of TMEM's 512 columns" in ax.get_title()
    assert ax.get_xlim() == (0, 512) and ax.get_ylim() == (128, 0)  # lane 0 at the top
    assert "column" in ax.get_xlabel() and "lane" in ax.get_ylabel()
    right = fig.axes[1]  # the lane quarters each epilogue warp may read
    assert [t.get_text() for t in right.get_yticklabels()] == [f"epilogue warp {w}" for w in range(4)]
    texts = " ".join(t.get_text() for t in ax.texts)
    assert f"{512 - p.tmem_columns} columns allocated, unused" in texts
    plt.close(fig)


def test_picture_rejects_what_is_not_a_plan():
    with pytest.raises(CourseError, match="blackwell_plan.plan"):
        draw_tmem(("nvfp4", (128, 128)))
