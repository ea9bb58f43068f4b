"""A picture of Blackwell's tensor memory as the course's block-scaled GEMM uses it.

``draw_tmem(plan)``: TMEM as what it is, 128 lanes (rows, down) x 512 columns (across) of 32 bits,
with the column ranges of :attr:`cutecourse.models.blackwell_plan.Plan.tmem_regions` drawn on it:
the accumulator stages (blue: the MMA warp writes one while the epilogue reads the other), one
k-tile's scale factors of A and B (orange, green: ``tcgen05.cp`` writes them, the MMA reads
them), and the columns allocated but unused (grey). The four lane quarters are marked with the
epilogue warp that may read them: a warp's ``tcgen05.ld`` reaches only lanes 32 (w % 4) .. +31.

Every number drawn comes from the plan (``models/blackwell_plan.py``), which the tests hold to
CuTe's own TMEM tensors of the kernel.
"""

from __future__ import annotations

import matplotlib.pyplot as plt  # headless (no display): matplotlib picks Agg by itself
from matplotlib.patches import Rectangle

from ..errors import CourseError
from ..models.blackwell_plan import TMEM_COLUMNS, Plan

LANES = 128
#: Lanes a warp's tcgen05.ld / tcgen05.st can reach: warp w gets quarter w % 4.
LANES_PER_WARP = 32
_ACC_COLORS = ("#4c72b0", "#8fa8d8")
_SF_COLORS = {"SFA": "#dd8452", "SFB": "#55a868"}
_UNUSED = "#e6e6e6"


def _color(name: str, stage: int) -> str:
    return _SF_COLORS.get(name, _ACC_COLORS[stage % len(_ACC_COLORS)])


def draw_tmem(plan: Plan, fig=None):
    """TMEM's 128 lanes x 512 columns with the plan's accumulator stages and scale-factor columns.

    Returns the figure. Axes: column (x, 0..511), lane (y, 0 at the top)."""
    if not isinstance(plan, Plan):
        raise CourseError(f"draw_tmem takes a blackwell_plan.Plan, got {type(plan).__name__}",
                          "pass blackwell_plan.plan(fmt, tile_mn)")
    fig = fig or plt.figure(figsize=(10, 3.6))
    ax = fig.add_subplot(1, 1, 1)
    ax.add_patch(Rectangle((0, 0), TMEM_COLUMNS, LANES, facecolor=_UNUSED, edgecolor="#999999",
                           hatch="//", linewidth=0.8, label="allocated, unused"))
    stage = 0
    labels_right = []  # narrow regions get their label outside the box
    for region in plan.tmem_regions:
        color = _color(region.name, stage)
        ax.add_patch(Rectangle((region.first, 0), region.columns, LANES, facecolor=color,
                               edgecolor="white", linewidth=1.0, label=region.name))
        last = region.first + region.columns - 1
        if region.name.startswith("accumulator"):
            ax.text(region.first + region.columns / 2, LANES / 2,
                    f"{region.name}\n{LANES} x {region.columns} fp32\ncolumns {region.first}-{last}\n"
                    "MMA writes, epilogue reads",
                    ha="center", va="center", fontsize=9, color="white", fontweight="bold")
            stage += 1
        else:
            labels_right.append((region, last))
    y = 40
    for region, last in labels_right:  # narrow: labelled in the free columns, with an arrow
        ax.annotate(f"{region.name} of one k-tile: columns {region.first}-{last}",
                    xy=(region.first + region.columns / 2, y), xytext=(plan.tmem_columns + 16, y),
                    fontsize=9, va="center", arrowprops={"arrowstyle": "->", "color": "#333333"},
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})
        y += 24
    free = TMEM_COLUMNS - plan.tmem_columns
    ax.text((plan.tmem_columns + TMEM_COLUMNS) / 2, 108, f"{free} columns allocated, unused",
            ha="center", va="center", fontsize=9, color="#555555",
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})
    for q in range(1, LANES // LANES_PER_WARP):
        ax.axhline(q * LANES_PER_WARP, color="black", linewidth=0.8, linestyle=":")
    right = ax.twinx()  # which epilogue warp may read each lane quarter (tcgen05.ld)
    right.set_ylim(LANES, 0)
    right.set_yticks([q * LANES_PER_WARP + LANES_PER_WARP / 2 for q in range(LANES // LANES_PER_WARP)])
    right.set_yticklabels([f"epilogue warp {q}" for q in range(LANES // LANES_PER_WARP)], fontsize=8)
    right.tick_params(length=0)
    ax.set_xlim(0, TMEM_COLUMNS)
    ax.set_ylim(LANES, 0)
    ax.set_xticks(range(0, TMEM_COLUMNS + 1, 64))
    ax.set_yticks(range(0, LANES + 1, LANES_PER_WARP))
    ax.set_xlabel("TMEM column (32 bits each; the kernel allocates all 512)")
    ax.set_ylabel("TMEM lane = tile row")
    m, n, _ = plan.tile_mnk
    stages = f"{plan.acc_stages} accumulator stage{'s' if plan.acc_stages > 1 else ''}"
    ax.set_title(f"{plan.fmt.upper()}, {m}x{n} tile: {stages} and one k-tile's scale factors "
                 f"use {plan.tmem_columns} of TMEM's {TMEM_COLUMNS} columns", fontsize=10)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=5, fontsize=8, frameon=False)
    fig.tight_layout()
    return fig
