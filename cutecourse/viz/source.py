"""Show kernel source, and the difference between two versions of a kernel, in a notebook.

The course evolves one kernel at a time; a lesson is the diff. ``show_diff(old, new)`` renders
the unified diff of two functions' source (added lines green, removed lines red) so a notebook
shows exactly what changed instead of a second copy of the kernel.
"""

from __future__ import annotations

import difflib
import html
import inspect as _pyinspect
from typing import Any, Callable


def source(obj: Callable | str) -> str:
    """The source text of a function (or the text itself), decorators included."""
    if isinstance(obj, str):
        return obj
    fn = getattr(obj, "__wrapped__", obj)
    fn = getattr(fn, "_dsl_object", fn)  # cute.jit / cute.kernel wrappers keep the function
    fn = getattr(fn, "func", fn)
    return _pyinspect.getsource(fn)


def diff_lines(old: Callable | str, new: Callable | str, context: int = 3) -> list[str]:
    """Unified diff lines between two functions' source, without the file headers."""
    a, b = source(old).splitlines(), source(new).splitlines()
    lines = list(difflib.unified_diff(a, b, lineterm="", n=context))
    return lines[2:]  # drop the ---/+++ header


def _display(html_text: str, plain: str) -> None:
    try:
        from IPython.display import HTML, display
    except ImportError:  # pragma: no cover
        print(plain)
        return
    display(HTML(html_text))


def show_diff(old: Callable | str, new: Callable | str, context: int = 3, title: str = "") -> None:
    """Display the diff of two versions of a kernel, coloured."""
    lines = diff_lines(old, new, context)
    styles = {"+": "background:#e6ffec", "-": "background:#ffebe9", "@": "color:#6e7781"}
    body = "\n".join(f'<span style="{styles.get(ln[:1], "")}">{html.escape(ln)}</span>' for ln in lines)
    head = f"<b>{html.escape(title)}</b>" if title else ""
    _display(f"{head}<pre style='font-size:12px;line-height:1.25'>{body}</pre>",
             (title + "\n" if title else "") + "\n".join(lines))


def show_source(obj: Any, title: str = "") -> None:
    """Display a function's source with Python highlighting where pygments is available."""
    text = source(obj)
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer

        body = highlight(text, PythonLexer(), HtmlFormatter(noclasses=True, nobackground=True))
    except ImportError:  # pragma: no cover
        body = f"<pre>{html.escape(text)}</pre>"
    head = f"<b>{html.escape(title)}</b>" if title else ""
    _display(head + body, (title + "\n" if title else "") + text)
