"""The grouped GEMM tile scheduler's pictures and widget (``viz/group_schedule.py``), drawn from
the model of ``models/group_scheduler.py`` (``tests/test_group_scheduler.py`` tests the model)."""

import pytest

from cutecourse.errors import ShapeError
from cutecourse.models import group_scheduler as gs
from cutecourse.models.group_scheduler import GroupedProblem, moe_sizes

# 5 groups: a 3x2 grid, an empty group, one tile with a long K, a tall 8x2 grid, a 1x1x1 crumb.
MIXED = [(300, 512, 100), (0, 512, 64), (128, 256, 640), (1000, 300, 64), (1, 1, 1)]


def _mixed(**kw):
    return GroupedProblem(MIXED, **kw)


# -- pictures -----------------------------------------------------------------------------------
def test_drawings_return_figures():
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    from cutecourse.viz import group_schedule as vz

    p = _mixed(cluster=(2, 1))
    for fig in (vz.draw_groups(p), vz.draw_schedule(p, 6), vz.draw_schedule(p, 6, show_updates=False),
                vz.draw_groups(GroupedProblem(moe_sizes(40, 4096, 512, (0, 2048)))),
                vz.draw_schedule(GroupedProblem(moe_sizes(40, 4096, 512, (0, 2048))), 132)):
        assert isinstance(fig, Figure) and fig.axes[0].get_title()
        plt.close(fig)
    assert "10 tensor-map rewrites" in vz.draw_schedule(_mixed(), 4).axes[0].get_title()


def test_widget_redraws_on_change():
    pytest.importorskip("ipywidgets")  # the GPU machine has no ipywidgets
    from cutecourse.viz.group_schedule import schedule_widget

    w = schedule_widget(groups=4, m_range=(64, 512), ctas=8)
    before = w.text
    w.groups.value = 12
    assert w.problem.groups == 12 and w.text != before
    w.m_range.value = (0, 0)  # every expert empty: the widget keeps one 1-row expert to draw, and says so
    assert w.problem.total == w.problem.tiles_per_group[0] >= 1 and sum(w.problem.tiles_per_group[1:]) == 0
    assert "every expert drew M = 0" in w.text
    with pytest.raises(ShapeError, match="groups"):
        schedule_widget(groups=0)


def test_widget_follows_the_course_widget_convention():
    pytest.importorskip("ipywidgets")
    import base64

    from cutecourse.viz.group_schedule import schedule_widget

    w = schedule_widget(groups=8, m_range=(0, 1024), ctas=16)
    assert "cc-group-widget" in w.widget._dom_classes
    assert "cc-picture" in w.picture._dom_classes and w.picture in w.widget.children
    assert "cc-message" in w.message._dom_classes
    first = bytes(w.picture.value)
    assert first.startswith(b"\x89PNG") and first == w.png
    w.ctas.value = 1
    assert bytes(w.picture.value) != first
    assert "on 1 CTA;" in w.text  # not "1 CTAs"
    bundle = w._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert base64.b64decode(bundle["image/png"]) == w.png
    assert bundle["text/plain"] == "ScheduleWidget: 8 groups, M in [0, 1024], N 1024, K 512, 1 CTA"


def test_group_labels_stay_readable_at_64_groups():
    """64 groups: the group names are x ticks, rotated (or thinned) so that they are at least
    9 px apart at 72 dpi, never one overlapping band; few wide groups get their sizes too."""
    import matplotlib.pyplot as plt

    from cutecourse.viz import group_schedule as vz

    for mr in ((0, 128), (64, 1024), (1024, 4096)):
        p = GroupedProblem(moe_sizes(64, 1024, 512, mr, seed=0))
        fig = vz.draw_groups(p)
        fig.canvas.draw()
        ax = fig.axes[0]
        labels = [t for t in ax.get_xticklabels() if t.get_text()]
        assert labels and all(t.get_text().startswith("g") for t in labels)
        boxes = sorted((t.get_window_extent().x0, t.get_window_extent().x1) for t in labels)
        assert all(a[1] <= b[0] for a, b in zip(boxes, boxes[1:]))  # no two labels overlap
        assert min(b[0] - a[0] for a, b in zip(boxes, boxes[1:])) >= 9 * fig.dpi / 72 - 1e-6
        assert all(t.get_rotation() == 90 for t in labels)
        plt.close(fig)
    few = vz.draw_groups(GroupedProblem([(300, 1024, 512), (128, 1024, 512)]))
    assert [t.get_text() for t in few.axes[0].get_xticklabels()] == ["g0\n300x1024x512", "g1\n128x1024x512"]
    plt.close(few)


def test_titles_count_in_the_singular_and_plural():
    import matplotlib.pyplot as plt

    from cutecourse.viz import group_schedule as vz

    one = GroupedProblem([(100, 200, 64)])
    assert vz.draw_groups(one).axes[0].get_title().startswith("1 group, 1 work item:")
    assert vz.draw_schedule(one, 1).axes[0].get_title().startswith("1 CTA, 1 tensor-map rewrite ")
    plt.close("all")
    assert vz.plural(2, "CTA") == "2 CTAs" and vz.plural(1, "CTA") == "1 CTA"


def _blank_schedule_cells(w) -> tuple[int, int]:
    """Render the widget's schedule figure as the widget does (66 dpi) and look at the pixels:
    (cells whose middle half is mostly white, cells with a work item)."""
    import io

    import numpy as np
    from PIL import Image

    from cutecourse.viz.picture import figure_png

    fig = w.fig_sched
    img = np.asarray(Image.open(io.BytesIO(figure_png(fig, 66))).convert("RGB")).astype(int)
    ax = fig.axes[0]
    fig.canvas.draw()  # same layout as the PNG's (figure_png draws the same figure)
    box = ax.get_window_extent()
    scale = 66 / fig.dpi  # window extents are at the figure's dpi
    x0, x1, y_top = box.x0 * scale, box.x1 * scale, img.shape[0] - box.y1 * scale
    rows, steps = ax.get_ylim()[0], ax.get_xlim()[1]
    cw, ch = (x1 - x0) / steps, (box.height * scale) / rows
    sched = gs.schedule(w.problem, int(rows))
    blank = filled = 0
    for cta, items in enumerate(sched):
        for i in range(len(items)):
            # the cell's middle half, where neither its edge nor a rewrite bar (left edge) lies
            xa, xb = int(x0 + (i + 0.3) * cw), int(x0 + (i + 0.8) * cw) + 1
            ya, yb = int(y_top + (cta + 0.25) * ch), int(y_top + (cta + 0.75) * ch) + 1
            patch = img[ya:yb, xa:xb].reshape(-1, 3)
            white = (patch.min(axis=1) >= 240).mean()
            filled += 1
            blank += white > 0.5
    return blank, filled


def test_schedule_cells_keep_their_colour_when_small():
    """The widget at its slider's maximum, 132 CTAs, and at 1 CTA with ~300 items: every cell of
    the schedule shows its group's colour (white edges once swamped cells under ~2 px)."""
    pytest.importorskip("ipywidgets")
    from cutecourse.viz.group_schedule import schedule_widget

    many = schedule_widget(groups=32, m_range=(0, 2048), ctas=132)
    assert len(gs.schedule(many.problem, 132)) == 132
    one = schedule_widget(groups=20, m_range=(0, 1024), ctas=1)
    assert 250 <= one.problem.total <= 400, one.problem.total
    for w in (many, one, schedule_widget(groups=8, m_range=(0, 1024), ctas=16)):
        blank, filled = _blank_schedule_cells(w)
        assert filled and blank == 0, f"{w.describe()}: {blank} of {filled} schedule cells drawn blank"
