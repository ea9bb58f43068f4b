"""The block-scaling pictures and widget: they draw what they claim, with the model's numbers."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.collections import PatchCollection  # noqa: E402

from cutecourse.errors import ShapeError  # noqa: E402
from cutecourse.models import block_scaling as bs  # noqa: E402
from cutecourse.viz import block_scaling as vb  # noqa: E402
from cutecourse.viz import block_scaling_widget as vbw  # noqa: E402

X = bs.outlier_weights(16, 128, seed=0)


def _blocks(ax) -> int:
    return sum(len(c.get_paths()) for c in ax.collections if isinstance(c, PatchCollection))


@pytest.mark.parametrize("fmt, block", [("nvfp4", 16), ("mxfp8", 32), ("mxfp4", 32)])
def test_tile_draws_one_block_per_scale_with_the_models_value(fmt, block):
    fig = vb.draw_tile(X, fmt)
    ax_s = fig.axes[1]  # axes: |x|, scales, then the two colorbars
    kblocks = 128 // block
    assert _blocks(ax_s) == 16 * kblocks
    sf = bs.quantize_as_used(X, fmt).sf  # NVFP4: the e4m3 scales of X / its per-tensor scale
    labels = [t.get_text() for t in ax_s.texts]
    assert len(labels) == 16 * kblocks
    f = bs.get_format(fmt)
    want = [vb._fmt_scale(float(v), f.scale) for v in sf.float().flatten()]
    assert labels == want  # row-major block order, the stored scale of each block
    if f.scale == "e8m0":
        assert all(t.startswith("2^") for t in labels)
    assert f"1x{block} block" in ax_s.get_title()
    assert ("per-tensor scale" in ax_s.get_title()) == (fmt == "nvfp4")
    assert ax_s.get_xlabel().startswith("K") and ax_s.get_ylabel() == "row"
    plt.close(fig)


def test_tile_scales_are_exact_and_outlier_blocks_are_largest():
    sf = vb.block_scales(X, "nvfp4")
    amax = X.abs().view(16, 8, 16).amax(-1)
    # NVFP4 as used: amax / (6 gs) rounded to the nearest e4m3, gs = amax(X) / (448 * 6)
    gs = float(X.abs().max()) / (448 * 6)
    assert torch.equal(torch.from_numpy(sf).float(), (amax / (6 * gs)).to(torch.float8_e4m3fn).float())
    assert sf.max() == 448.0  # the tensor's largest block fills e4m3's range, and no block clips
    # the block holding the tile's largest value has the largest scale
    r, c = divmod(int(X.abs().argmax()), 128)
    assert sf[r, c // 16] == sf.max()


def test_tile_highlight_and_bad_block():
    fig = vb.draw_tile(X, "nvfp4", highlight=(3, 5))
    red = [p for ax in fig.axes[:2] for p in ax.patches if p.get_edgecolor()[:3] == (1.0, 0.0, 0.0)]
    assert len(red) == 2 and red[0].get_xy() == (80, 3) and red[0].get_width() == 16
    plt.close(fig)
    with pytest.raises(ShapeError, match="outside"):
        vb.draw_tile(X, "mxfp8", highlight=(0, 4))  # 128 / 32 = 4 k-blocks: 0..3
    with pytest.raises(ShapeError):
        vb.draw_tile(torch.zeros(4, 40), "nvfp4")  # K not a multiple of 16


def test_many_blocks_are_drawn_without_labels():
    fig = vb.draw_tile(bs.outlier_weights(64, 256), "nvfp4")
    assert _blocks(fig.axes[1]) == 64 * 16 and not fig.axes[1].texts
    plt.close(fig)


def test_error_bars_are_the_models_errors_and_the_title_states_the_ratio():
    fig = vb.draw_errors(X)
    ax_b, ax_h = fig.axes[:2]
    table = {r.format: r.rel_fro for r in bs.error_table(X, ("bf16", "fp8_blockwise", "mxfp8", "nvfp4"))}
    heights = [b.get_height() for b in ax_b.patches]
    assert len(heights) == len(vb.ERROR_FORMATS)
    for fmt, h in zip(vb.ERROR_FORMATS, heights):
        if fmt in table:
            assert h == pytest.approx(table[fmt], rel=1e-12)
    assert heights == sorted(heights)  # fewer bits, more error, per-tensor fp4 worst
    title = fig._suptitle.get_text()
    ratio = table["nvfp4"] / table["mxfp8"]
    assert f"errs {ratio:.1f}x more than MXFP8" in title
    assert f"{vb.zeroed_fraction(X, 'fp4_per_tensor'):.0%} of the values to 0" in title
    assert ax_b.get_yscale() == "log" and ax_b.get_ylabel() and ax_h.get_xlabel()
    # one histogram outline per format, each counting every non-zero element
    assert len(ax_h.patches) == len(vb.ERROR_FORMATS)
    plt.close(fig)


def test_per_tensor_fp4_loses_the_small_weights():
    assert vb.zeroed_fraction(X, "fp4_per_tensor") > 0.9
    assert vb.zeroed_fraction(X, "mxfp8") == 0.0
    y = vb.per_tensor_fp4_round_trip(torch.tensor([[6.0, 3.0, 0.2, -1.0]]))
    assert y.tolist() == [[6.0, 3.0, 0.0, -1.0]]


def _byte_labels(ax) -> dict[int, str]:
    """Byte index within the atom (16 * line + column) -> the label drawn there."""
    out = {}
    for t in ax.texts:
        x, y = t.get_position()
        out[16 * int(y) + int(x)] = t.get_text()
    return out


@pytest.mark.parametrize("rows, kblocks, row, kblock", [(256, 8, 70, 5), (200, 6, 130, 4), (128, 4, 0, 0)])
def test_sf_layout_bytes_are_where_sf_offset_says(rows, kblocks, row, kblock):
    fig = vb.draw_sf_layout(rows, kblocks, row, kblock)
    ax_r = fig.axes[1]
    labels = _byte_labels(ax_r)
    assert len(labels) == 512 and _blocks(ax_r) == 512
    _, pk = bs.padded_sf_shape(rows, kblocks)
    atom = (row // 128) * (pk // 4) + kblock // 4
    for i, text in labels.items():
        if text == "pad":
            continue
        r, k = map(int, text.split(","))
        assert bs.sf_offset(r, k, rows, kblocks) == 512 * atom + i
    off = bs.sf_offset(row, kblock, rows, kblocks)
    assert labels[off - 512 * atom] == f"{row},{kblock}"
    assert f"byte {off} =" in ax_r.get_title()
    # padding: the rows past `rows` and k-blocks past `kblocks` of this atom
    real = sum(1 for r in range(128 * (row // 128), 128 * (row // 128) + 128) if r < rows) * \
        sum(1 for k in range(4 * (kblock // 4), 4 * (kblock // 4) + 4) if k < kblocks)
    assert sum(t != "pad" for t in labels.values()) == real
    plt.close(fig)


def test_atom_bytes_match_to_interleaved():
    rows, kblocks = 200, 6
    codes = torch.arange(rows * kblocks, dtype=torch.int64)
    sf = (codes % 251 + 1).to(torch.uint8).view(rows, kblocks)  # non-zero, to tell from padding
    buf = bs.to_interleaved(sf)
    for a_r, a_k in [(0, 0), (0, 1), (1, 0), (1, 1)]:
        start = 512 * (a_r * 2 + a_k)
        for i, who in enumerate(vb.atom_bytes(rows, kblocks, a_r, a_k)):
            got = int(buf[start + i])
            assert got == (int(sf[who]) if who else 0)
    with pytest.raises(ShapeError, match="atom"):
        vb.atom_bytes(rows, kblocks, 2, 0)
    with pytest.raises(ShapeError):
        vb.draw_sf_layout(128, 4, 128, 0)


def test_describe_block_uses_the_models_numbers():
    text = vb.describe_block(X, "mxfp8", 3, 2)
    blk = X[3, 64:96]
    assert f"amax {float(blk.abs().max()):.4g}" in text and "rounded UP to a power of two" in text
    assert "OCP spec's 2^(floor(log2 amax) - 8)" in text  # both rules, named
    assert f"byte in the interleaved SF buffer: {bs.sf_offset(3, 2, 16, 4)}" in text
    nv = vb.describe_block(X, "nvfp4", 3, 2)
    assert f"gs = amax(x) / (448 x 6) = {float(X.abs().max()) / 2688:.4g}" in nv


def test_describe_block_says_when_the_spec_rule_clamps():
    x = torch.zeros(1, 32)
    x[0, 0] = 7.0  # MXFP4: NVIDIA's rule 2^ceil(log2(7/6)) = 2; the spec's 2^(2 - 2) = 1, 7 -> 6
    text = vb.describe_block(x, "mxfp4", 0, 0)
    assert "-> 2^1" in text and "2^(floor(log2 amax) - 2) = 2^0, which clamps values above 6" in text


def test_widget_redraws_on_change():
    pytest.importorskip("ipywidgets")
    w = vbw.block_scaling_widget(fmt="nvfp4", row=2, kblock=7, magnitude=40)
    assert "NVFP4 block (row 2, k-block 7)" in w.text
    assert _blocks(w.fig_tile.axes[1]) == 16 * 8
    w.fmt.value = "mxfp8"  # 32-wide blocks: only 4 k-blocks, the k-block control is clamped
    assert w.kblock.max == 3 and w.kblock.value == 3
    assert "MXFP8 block (row 2, k-block 3)" in w.text and _blocks(w.fig_tile.axes[1]) == 16 * 4
    before = w.x.clone()
    w.n_outliers.value = 0
    w.magnitude.value = 1.0
    assert not torch.equal(w.x, before)
    assert w.x.abs().max() < 0.2  # no outliers left: N(0, 0.02) weights only
    with pytest.raises(ShapeError, match="format"):
        vbw.block_scaling_widget(fmt="int8")


def test_widget_default_shows_what_the_per_tensor_scale_is_for():
    """Default outliers (x1000): NVFP4's block scales alone would clip at 448 and err ~50%; with its
    per-tensor scale NVFP4 beats fp4 with one scale per tensor; the headline says so."""
    w = vbw.block_scaling_widget()
    errs = vb.errors(w.x)
    assert errs["nvfp4"][1] < errs["fp4_per_tensor"][1] < 0.1 < 0.4 < errs["nvfp4_block_only"][1]
    assert float(bs.quantize(w.x, "nvfp4")[1].float().max()) == 448.0  # clipped without gs
    assert "per-tensor scale keeps its e4m3 block scales under 448" in w.fig_err._suptitle.get_text()
    assert "per-tensor scale gs" in w.text


def test_widget_default_says_whose_error_the_bars_show():
    """At x1000 the outliers own the whole-tensor error, and NVFP4's bar falls below MXFP8's; the
    headline gives the typical (median) element's error, where MXFP8 stays far ahead."""
    w = vbw.block_scaling_widget()
    errs = vb.errors(w.x)
    assert errs["nvfp4"][1] < errs["mxfp8"][1]  # the bars alone would teach the wrong order
    assert vb.median_error(w.x, "mxfp8") < 0.05 < 0.1 < vb.median_error(w.x, "nvfp4")
    assert "the median element errs" in w.fig_err._suptitle.get_text()


def test_widget_follows_the_course_widget_convention():
    import base64

    w = vbw.block_scaling_widget()
    assert "cc-block-scaling-widget" in w.widget._dom_classes
    assert "cc-picture" in w.picture._dom_classes and w.picture in w.widget.children
    assert "cc-message" in w.message._dom_classes
    first = bytes(w.picture.value)
    assert first.startswith(b"\x89PNG") and first == w.png
    w.fmt.value = "mxfp8"
    assert bytes(w.picture.value) != first
    bundle = w._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert base64.b64decode(bundle["image/png"]) == w.png
    assert bundle["text/plain"] == "BlockScalingWidget: mxfp8, 4 outliers x1000, block (8, 0)"
    with pytest.raises(ShapeError):
        vbw.block_scaling_widget(magnitude=5000)


def test_widget_error_keeps_the_picture(monkeypatch):
    w = vbw.block_scaling_widget(magnitude=40)
    png = w.png

    def boom(*a, **kw):
        raise ShapeError("no tile today", "try again")

    monkeypatch.setattr(vbw, "draw_tile", boom)
    w.row.value = 3
    assert "no tile today" in w.message.value and w.png == png
