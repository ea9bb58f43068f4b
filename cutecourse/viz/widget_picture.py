"""The picture of a course widget: matplotlib figures as one compact PNG, and the HTML of an error.

Every widget of the course shows its picture in an ``ipywidgets.Image`` (CSS class
``cc-picture``), not in an ``Output`` area: an Image needs no matplotlib widget backend, its PNG
goes into the notebook's stored output through ``explorer.widget_bundle`` (so a reader without a
kernel still sees it), and a browser test can find it and watch it change. A widget that draws two
figures stacks them into one PNG here, so there is one picture to find.
"""

from __future__ import annotations

import html
import io


def figure_png(fig, dpi: int = 72) -> bytes:
    """One figure as PNG bytes (the figure is laid out already: no ``bbox_inches``)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def stacked_png(figs, dpi: int = 72) -> bytes:
    """Several figures, one under the other, as one PNG (left-aligned, white background)."""
    from PIL import Image

    images = [Image.open(io.BytesIO(figure_png(f, dpi))).convert("RGB") for f in figs]
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
    out.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(buf, format="png", optimize=True)
    return buf.getvalue()


def error_html(what: str, fix: str = "") -> str:
    """A ``CourseError``'s two lines, red and monospace, for a widget's ``cc-message``."""
    fix_html = f"<br>&rarr; {html.escape(fix)}" if fix else ""
    return (f"<div style='color:#b00020; white-space:pre-wrap; font-family:monospace'>"
            f"{html.escape(what)}{fix_html}</div>")
