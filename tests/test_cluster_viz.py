"""The cluster picture and widget, driven without a browser."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from cutecourse.errors import ShapeError  # noqa: E402
from cutecourse.viz.cluster import ClusterWidget, draw_cluster, summary  # noqa: E402
from widget_classes import classes_of  # noqa: E402


def _texts(fig):
    return [t.get_text() for ax in fig.axes for t in ax.texts] + [ax.get_title() for ax in fig.axes]


def test_static_picture_shows_masks_slices_and_bytes():
    fig = draw_cluster((128, 256, 64), (2, 2), rank=1)
    texts = _texts(fig)
    # rank 1 = (cm 1, cn 0): A shared with rank 3 (0b1010), B with rank 0 (0b0011)
    assert "A 0b1010\nB 0b0011" in texts
    assert any("50% fewer" in t for t in texts)  # 2x2: each CTA reads half of A and of B
    assert sum(t.startswith("tx 48 KiB") for t in texts) == 4
    # rank 1 issues one slice of A[1] and one of B[0]; its arrows reach ranks 1, 3 (A) and 0, 1 (B)
    arrows = [p for p in fig.axes[0].patches if type(p).__name__ == "FancyArrowPatch"]
    assert len(arrows) == 4
    bars = fig.axes[1].patches
    heights = sorted({round(b.get_height()) for b in bars})
    assert heights == [24, 48]
    plt.close(fig)


def test_masks_are_binary_in_the_text_and_the_picture():
    # Found by driving the widget: the text said 0b..., the picture of a big cluster 0x....
    fig = draw_cluster((128, 128, 64), (4, 4), rank=5)
    a, b = "0b0010001000100010", "0b0000000011110000"  # A: ranks 1, 5, 9, 13; B: ranks 4..7
    assert f"A {a}\nB {b}" in _texts(fig)
    assert not any("0x" in t for t in _texts(fig))
    w = ClusterWidget(tile="128x128x64", cluster=(4, 4), rank=5, render=False)
    assert f"mask {a}" in w.text and f"mask {b}" in w.text
    plt.close(fig)


def _label_boxes(ax, renderer):
    return [(t.get_text(), t.get_window_extent(renderer)) for t in ax.texts if t.get_text()]


def _points(path, transform, step_px=1.5):
    """Points every ~step_px along a path (curves flattened), in display coordinates."""
    for poly in path.to_polygons(transform=transform, closed_only=False):
        for p0, p1 in zip(poly[:-1], poly[1:]):
            n = max(1, int(np.hypot(*(p1 - p0)) / step_px))
            for t in np.linspace(0, 1, n + 1):
                yield p0 + t * (p1 - p0)


@pytest.mark.parametrize("cluster", [(2, 2), (1, 4), (4, 1), (2, 4), (4, 2), (4, 4)])
def test_arrows_never_cross_a_label(cluster):
    # Found by driving the widget: arrows ran straight across other CTAs' rank and mask labels.
    size = cluster[0] * cluster[1]
    for rank in sorted({0, 1, size // 2 + 1, size - 1} & set(range(size))):  # corners, middle
        fig = draw_cluster((128, 128, 64), cluster, rank=rank)
        ax = fig.axes[0]
        renderer = fig.canvas.get_renderer()
        boxes = _label_boxes(ax, renderer)
        arrows = [p for p in ax.patches if type(p).__name__ == "FancyArrowPatch"]
        assert arrows
        for arrow in arrows:
            for x, y in _points(arrow.get_path(), ax.transData):
                for text, bb in boxes:
                    assert not (bb.x0 + 1 < x < bb.x1 - 1 and bb.y0 + 1 < y < bb.y1 - 1), \
                        f"{cluster} rank {rank}: an arrow crosses the label {text!r}"
        plt.close(fig)


def test_a_1x1_cluster_is_not_called_a_multicast():
    fig = draw_cluster((128, 256, 64), (1, 1), rank=0)
    texts = " | ".join(_texts(fig))
    assert "no multicast" in texts and "fewer with multicast" not in texts
    assert fig.axes[1].get_legend() is None  # no "with multicast" bars
    w = ClusterWidget(cluster=(1, 1), render=False)
    assert "no multicast" in w.text and "with multicast" not in w.text
    assert "releases from 1 CTA." in w.text
    w.cluster_m.value = 2  # 2x1: B is multicast to both, A is each CTA's own
    assert "multicast to ranks 0, 1" in w.text and "loads A rows 0:128 itself" in w.text
    plt.close(fig)


def test_widget_displays_as_a_course_widget():
    w = ClusterWidget(tile="128x256x64", cluster=(2, 1), rank=0)
    bundle = w._repr_mimebundle_()
    assert bundle["text/plain"] == "ClusterWidget: cluster 2x1, tile 128x256x64, rank 0"
    assert "application/vnd.jupyter.widget-view+json" in bundle and "image/png" in bundle
    assert w.picture.value == w.png and w.png[:4] == b"\x89PNG"
    before = w.png
    w.rank.value = 1
    assert w.png != before and w.picture.value == w.png
    assert {"cc-cluster-widget", "cc-picture", "cc-message", "cc-cluster-m", "cc-cluster-n",
            "cc-tile", "cc-rank"} <= classes_of([w.box])


def test_bad_rank():
    with pytest.raises(ShapeError, match="rank 4 is not in a 2x2 cluster"):
        draw_cluster((128, 256, 64), (2, 2), rank=4)


def test_widget_handlers_update_plan_text_and_rank_choices():
    w = ClusterWidget(tile="128x256x64", cluster=(2, 2), rank=3)
    assert w.plan.cluster == (2, 2) and "rank 3" in w.text
    w.cluster_n.value = 1  # 2x1: rank 3 no longer exists, the rank control falls back to 0
    assert list(w.rank.options) == [0, 1] and w.rank.value == 0
    assert w.plan.cluster == (2, 1)
    assert "B rows 0:128 (slice 0 of 2, 16 KiB) with mask 0b0011" in w.text
    assert "32 KiB with multicast, 48 KiB without" in w.text
    w.rank.value = 1
    assert "B rows 128:256 (slice 1 of 2" in w.text
    w.tile.value = "128x128x64"
    assert w.plan.tile == (128, 128, 64) and "tx" in "".join(_texts(w.figure))
    assert "32768 bytes per stage" in w.info.value


def test_widget_rejects_unknown_choices():
    with pytest.raises(ShapeError, match="tile"):
        ClusterWidget(tile="100x100x64")
    with pytest.raises(ShapeError, match="each side"):
        ClusterWidget(cluster=(3, 1))


def test_summary_counts_empty_arrivals():
    w = ClusterWidget(cluster=(4, 2))
    assert "collects releases from 5 CTAs" in summary(w.plan, 0)
