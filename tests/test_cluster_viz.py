"""The cluster picture and widget, driven without a browser."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from cutecourse.errors import ShapeError  # noqa: E402
from cutecourse.viz.cluster import ClusterWidget, draw_cluster, summary  # noqa: E402


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


def test_big_cluster_uses_hex_masks():
    fig = draw_cluster((128, 128, 64), (4, 4), rank=5)
    assert "A 0x2222\nB 0x00f0" in _texts(fig)
    plt.close(fig)


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
