"""What every course widget shares: class names, a picture widget, an error line, a display bundle.

A course widget (``LayoutExplorer``, ``TVExplorer``, ``PipelineWidget``, ``ClusterWidget``, ...)
is a plain object that holds ipywidgets controls and a picture. Three conventions make it read
the same in a live JupyterLab, in a notebook opened before it is run, on a static site, and in
tests:

* **CSS classes.** The root box carries the widget's name (``cc-explorer``,
  ``cc-pipeline-widget``), the picture ``cc-picture``, the error line ``cc-message`` and each
  control ``cc-<control>``. Browser tests (``tests/test_browser.py``) find the parts by them.
* **The picture is a PNG in an** ``ipywidgets.Image`` (:func:`picture`; ``viz.picture`` makes
  compact PNGs of figures), not a figure displayed into an ``Output`` widget: its bytes are part
  of the widget's state, so a notebook saved with its widget state
  (``tools/execute_notebooks.py``) draws it before any cell runs.
* **Display** is :func:`widget_bundle`: the live view for JupyterLab, the current PNG for
  viewers that cannot run widgets, and a fixed ``text/plain`` line that nbval compares.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from .picture import error_html  # noqa: F401 (the message line's HTML: one copy, in viz.picture)

if TYPE_CHECKING:  # ipywidgets is imported where a widget is made: the pictures and models
    import ipywidgets as w  # need no Jupyter (the GPU machine's tests run without it)


def tag(*pairs: tuple[w.Widget, str]) -> None:
    """Give each widget its CSS class: ``tag((slider, "cc-stages"), (box, "cc-pipeline-widget"))``."""
    for widget, cls in pairs:
        widget.add_class(cls)


def picture() -> w.Image:
    """The picture of a widget: a PNG image widget with the class ``cc-picture``.

    ``align_self``: in a flex column the image would be stretched to the column's width, and a
    stretched PNG is a blurry one; ``max_width`` lets a narrow window shrink it instead.
    """
    import ipywidgets as w

    image = w.Image(format="png", layout=w.Layout(max_width="100%", align_self="flex-start"))
    image.add_class("cc-picture")
    return image


def message() -> w.HTML:
    """The widget's error line (class ``cc-message``): empty while all is well."""
    import ipywidgets as w

    line = w.HTML()
    line.add_class("cc-message")
    return line


def show_error(widget: Any, exc: Exception, fix: str) -> None:
    """Put ``exc`` on ``widget.message`` and in ``widget.error`` (the tests read it): a
    CourseError's two lines (what is wrong, how to fix it), anything else one line with ``fix``;
    never a traceback."""
    what = getattr(exc, "what", f"{type(exc).__name__}: {exc}")
    fix = getattr(exc, "fix", fix)
    widget.error = f"{what}\n-> {fix}"
    widget.message.value = error_html(what, fix)


def widget_bundle(widget: w.Widget, png: bytes, text: str) -> dict[str, Any]:
    """The widget for JupyterLab, plus its current picture for everything else.

    JupyterLab renders the live widget (its mime type ranks first); GitHub, nbconvert's PDF and
    HTML exports and a kernel-less viewer cannot run widgets and fall back to the PNG, so the
    course reads well there too. ``text/plain`` is a fixed line, so nbval can compare it.
    """
    bundle = dict(widget._repr_mimebundle_() or {})
    if png:
        bundle["image/png"] = base64.b64encode(png).decode("ascii")
    bundle["text/plain"] = text
    return bundle

