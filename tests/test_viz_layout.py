"""cutecourse.viz.layout: the pictures show CuTe's table, cell by cell, with the nesting outlined."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

import cutecourse  # noqa: F401
from cutecourse import layouts
from cutecourse.viz import layout as vl


def _cell_texts(fig):
    """{(row, col): text} of the numbers drawn in the cells (data coordinates = cell centres)."""
    ax = fig.axes[0]
    out = {}
    for t in ax.texts:
        if t.get_transform() == ax.transData:
            x, y = t.get_position()
            out[(int(round(y)), int(round(x)))] = t.get_text()
    return out


@pytest.mark.parametrize("text", ["(4,8):(8,1)", "((2,2),(3,4)):((1,6),(2,12))", "8:2",
                                  "(2,3,4):(12,4,1)", "(4,8):(0,1)"])
def test_each_cell_shows_cutes_offset(text):
    t = layouts.evaluate(text)
    fig = vl.draw_layout(text)
    cells = _cell_texts(fig)
    g = t.grid()
    assert len(cells) == g.size
    for (r, c), label in cells.items():
        assert label == str(g[r, c])
    assert t.layout in fig.axes[0].get_title()


def test_labels_can_show_the_flat_index_instead():
    fig = vl.draw_layout("(4,8):(8,1)", labels="index")
    cells = _cell_texts(fig)
    assert cells[(1, 0)] == "1" and cells[(0, 1)] == "4"  # flat index runs down mode 0 first


def test_colour_follows_offset():
    fig = vl.draw_layout("(4,8):(8,1)")
    img = fig.axes[0].images[0].get_array()
    # offset 0 at (0,0) is the darkest cell, offset 31 at (3,7) the lightest
    lum = img[..., :3] @ np.array([0.299, 0.587, 0.114])
    assert np.unravel_index(lum.argmin(), lum.shape) == (0, 0)
    assert np.unravel_index(lum.argmax(), lum.shape) == (3, 7)


def test_nesting_outlines():
    assert vl.boundaries(8) == []  # a plain mode: only the frame
    assert vl.boundaries((2, 2)) == [(2, 1)]
    assert vl.boundaries((2, (2, 2))) == [(2, 1), (4, 2), (6, 1)]
    # the picture has a thick line every 2 rows of mode (2,2) and every 3 columns of (3,4)
    fig = vl.draw_layout("((2,2),(3,4)):((1,6),(2,12))")
    thick = [ln for ln in fig.axes[0].lines if ln.get_color() == "black"]
    xs = sorted(ln.get_xdata()[0] for ln in thick if ln.get_xdata()[0] == ln.get_xdata()[1])
    ys = sorted(ln.get_ydata()[0] for ln in thick if ln.get_ydata()[0] == ln.get_ydata()[1])
    assert xs == [2.5, 5.5, 8.5] and ys == [1.5]


def test_ticks_name_natural_coordinates():
    fig = vl.draw_layout("((2,2),(3,4)):((1,6),(2,12))")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["(0,0)", "(1,0)", "(0,1)", "(1,1)"]
    assert ax.get_xticklabels()[4].get_text() == "(1,1)"


def test_arrows_follow_offsets():
    fig = vl.draw_layout("(4,8):(8,1)", arrows=True)
    arrows = [p for p in fig.axes[0].patches if type(p).__name__ == "FancyArrowPatch"]
    assert len(arrows) == 31  # 0->1->...->31
    (x0, y0), (x1, y1) = arrows[0]._posA_posB
    assert (x0, y0, x1, y1) == (0, 0, 1, 0)  # offset 0 at (0,0) -> offset 1 at row 0, column 1


def test_operation_results_and_slices_draw():
    z = layouts.zipped_divide("(8,8):(8,1)", (2, 4))
    fig = vl.draw_layout(z)
    assert "zipped_divide" in fig.axes[0].get_title() and z.layout in fig.axes[0].get_title()
    s = layouts.slice_("((2,2),(3,4)):((1,6),(2,12))", (None, 5))
    fig = vl.draw_slice(s, selected=s.selected[0])
    ax = fig.axes[0]
    img = ax.images[0].get_array()
    grey = np.all(np.isclose(img[..., :3], 0.92), axis=-1)
    assert (~grey).sum() == s.size  # only the slice's cells keep their colour
    assert "starts at offset 16" in ax.get_title()
    red = [p for p in ax.patches if p.get_edgecolor()[:3] == pytest.approx((0.909, 0.0667, 0.176), abs=0.01)]
    assert len(red) == 1


def test_png_and_side_by_side():
    png = vl.to_png(vl.draw_layout("(4,8):(1,4)"))
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    fig = vl.draw_layouts(["(4,8):(1,4)", layouts.logical_divide("(4,8):(1,4)", (2, 4))])
    assert len(fig.axes) == 2


def test_large_layouts_drop_labels_but_still_draw():
    fig = vl.draw_layout((32, 64), (64, 1))
    assert len(_cell_texts(fig)) == 0  # cells too small for numbers; the colour carries it
    assert fig.get_size_inches()[0] <= vl.MAX_WIDTH
