"""Compact pictures: stacked palette PNGs for widgets, the notebook figure formatter, error HTML."""

import io

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from PIL import Image  # noqa: E402

from cutecourse.viz import picture  # noqa: E402


def _figs():
    a, ax = plt.subplots(figsize=(4, 2))
    ax.plot([0, 1, 4])
    b, ax = plt.subplots(figsize=(3, 1))
    ax.imshow([[0, 1], [2, 3]], cmap="magma")
    return a, b


def test_stacked_png_is_one_palette_image_of_both_figures():
    a, b = _figs()
    png = picture.stacked_png([a, b], dpi=50)
    im = Image.open(io.BytesIO(png))
    assert im.mode == "P" and im.size == (200, 150)  # widest figure x both heights, at 50 dpi
    rgb = picture.figure_png(a, dpi=50)
    assert len(png) < len(rgb) + len(picture.figure_png(b, dpi=50))
    plt.close("all")


def test_compact_figures_makes_the_notebook_store_palette_pngs():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        picture.compact_figures(dpi=50)
        fig, _ = _figs()
        data, _ = shell.display_formatter.format(fig)
        assert Image.open(io.BytesIO(data["image/png"])).mode == "P"
        assert data["text/plain"].startswith("<Figure size 400x200")
    finally:
        InteractiveShell.clear_instance()
        plt.close("all")


def test_compact_figures_outside_ipython_does_nothing(monkeypatch):
    from IPython import get_ipython

    assert get_ipython() is None  # pytest is no IPython shell (the test above clears its own)
    opened = []
    monkeypatch.setattr(plt, "figure", lambda *a, **k: opened.append(a))
    assert picture.compact_figures() is None
    assert opened == []  # it returned before touching pyplot: no backend, no formatter set up
    assert get_ipython() is None  # and it did not start a shell to register one in


def test_error_html_escapes_and_shows_both_lines():
    html = picture.error_html("a < b", "use b")
    assert "a &lt; b" in html and "&rarr; use b" in html and "#b00020" in html
