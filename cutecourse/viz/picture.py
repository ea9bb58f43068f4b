"""Compact PNGs of matplotlib figures: for the course's widgets and for notebook figures.

Every widget of the course shows its picture in an ``ipywidgets.Image`` (CSS class
``cc-picture``), not in an ``Output`` area: an Image needs no matplotlib widget backend, its PNG
goes into the notebook's stored output through ``explorer.widget_bundle`` (so a reader without a
kernel still sees it), and a browser test can find it and watch it change. A widget that draws two
figures stacks them into one PNG here, so there is one picture to find.

Figures are flat colours and text, so a 256-colour palette PNG looks the same as an RGB one at a
third of the bytes: :func:`compact_figures` makes a notebook store its figures that way (a
notebook's stored outputs stay under 400 KB).
"""

from __future__ import annotations

import html
import io


def figure_png(fig, dpi: int = 72, tight: bool = False) -> bytes:
    """One figure as PNG bytes (``tight``: crop to what is drawn, as the notebook backend does)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, **({"bbox_inches": "tight"} if tight else {}))
    return buf.getvalue()


def stacked_png(figs, dpi: int = 72, tight: bool = False) -> bytes:
    """Several figures, one under the other, as one palette PNG (left-aligned, white background)."""
    from PIL import Image

    images = [Image.open(io.BytesIO(figure_png(f, dpi, tight))).convert("RGB") for f in figs]
    if len(images) == 1:
        out = images[0]
    else:
        out = Image.new("RGB", (max(i.width for i in images), sum(i.height for i in images)), "white")
        y = 0
        for i in images:
            out.paste(i, (0, y))
            y += i.height
    buf = io.BytesIO()
    # A palette PNG is a third of the size of an RGB one and looks the same for flat-coloured plots.
    out.quantize(colors=256, method=Image.Quantize.FASTOCTREE).save(buf, format="png", optimize=True)
    return buf.getvalue()


def error_html(what: str, fix: str = "") -> str:
    """A ``CourseError``'s two lines, red and monospace, for a widget's ``cc-message``."""
    fix_html = f"<br>&rarr; {html.escape(fix)}" if fix else ""
    return (f"<div style='color:#b00020; white-space:pre-wrap; font-family:monospace'>"
            f"{html.escape(what)}{fix_html}</div>")


def compact_figures(dpi: int = 80) -> None:
    """In a notebook: show every matplotlib figure as a palette PNG at ``dpi`` (call it once, after
    importing pyplot). Outside IPython it does nothing."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover
        return
    shell = get_ipython()
    if shell is None:
        return
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    # The notebook backend registers its own PNG formatter when it is first used: use it now,
    # so that ours, registered after, is the one that stays.
    plt.close(plt.figure())
    shell.display_formatter.formatters["image/png"].for_type(
        Figure, lambda fig: stacked_png([fig], dpi=dpi, tight=True))
