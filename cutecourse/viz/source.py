"""Show the code a notebook teaches: a function, a piece of one, or the diff of two, with file:line.

The course evolves one kernel at a time, so a lesson is often a piece of the kernel or the diff
between two versions of it. Notebooks never paste kernel code: they call

* ``show_source(fn)``: the function's source, line-numbered, under its ``file:first-last``;
  ``start=`` / ``stop=`` (substrings of lines) cut out a piece, e.g. the part of a kernel between
  ``"# The ring"`` and ``"sA = "``, so a long function can be walked in small pieces (a piece
  starts at column 0; ``dedent=False`` keeps its indentation in the function);
* ``show_diff(old, new)``: the unified diff of two functions (added lines green, removed red),
  under both locations.

Both display HTML in Jupyter (plain text elsewhere); ``snippet`` and ``diff_lines`` return the
text for tests and checkers.
A ``start``/``stop`` that matches no line is a ``ValueError``: a notebook whose piece moved fails
loudly instead of showing the wrong code.
"""

from __future__ import annotations

import difflib
import html
import linecache as _linecache
import inspect as _pyinspect
import os
import textwrap
from dataclasses import dataclass
from typing import Any, Callable

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _unwrap(obj: Any) -> Any:
    """The Python function behind a ``cute.jit`` / ``cute.kernel`` wrapper (or ``obj`` itself)."""
    fn = _pyinspect.unwrap(obj)
    for attr in ("_dsl_object", "func"):  # wrappers of some DSL releases keep it here
        inner = getattr(fn, attr, None)
        if _pyinspect.isfunction(inner) or _pyinspect.ismethod(inner):
            fn = _pyinspect.unwrap(inner)
    return fn


@dataclass(frozen=True)
class Snippet:
    """Some lines of a source file."""

    path: str  # relative to the repository root where possible
    first: int  # 1-based line number of the first line
    lines: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"{self.path}:{self.first}-{self.first + len(self.lines) - 1}"

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def numbered(self) -> str:
        return "\n".join(f"{self.first + i:4d}  {ln}" for i, ln in enumerate(self.lines))


def snippet(obj: Callable | str, start: str | None = None, stop: str | None = None,
            dedent: bool = True) -> Snippet:
    """The source of ``obj`` (decorators included), or the piece from the first line containing
    ``start`` up to, not including, the next line containing ``stop`` (the end, if ``None``).

    A piece starts at column 0 (``dedent=True``); ``dedent=False`` keeps its indentation within the
    function, as the whole listing shows it, so the tail of a function body still reads as a body."""
    if isinstance(obj, str):
        lines, first, path = obj.splitlines(), 1, "<text>"
    else:
        fn = _unwrap(obj)
        lines, first = _pyinspect.getsourcelines(fn)
        lines = [ln.rstrip("\n") for ln in lines]
        path = _pyinspect.getsourcefile(fn) or "<unknown>"
        # Once the DSL has compiled a function in this process, the function it keeps starts at its
        # `def` line: put the decorators back, so a listing is the same before and after a compile.
        text = _linecache.getlines(path)
        while first > 1 and text[first - 2].strip().startswith("@"):
            first -= 1
            lines.insert(0, text[first - 1].rstrip("\n"))
        if os.path.abspath(path).startswith(_ROOT + os.sep):
            path = os.path.relpath(path, _ROOT)
    lo, hi = 0, len(lines)
    if start is not None:
        found = [i for i, ln in enumerate(lines) if start in ln]
        if not found:
            raise ValueError(f"no line of {getattr(obj, '__qualname__', 'the text')} contains {start!r}")
        lo = found[0]
    if stop is not None:
        found = [i for i, ln in enumerate(lines) if stop in ln and i > lo]
        if not found:
            raise ValueError(f"no line after {start!r} in {getattr(obj, '__qualname__', 'the text')} "
                             f"contains {stop!r}")
        hi = found[0]
    body = lines[lo:hi]
    while body and not body[-1].strip():  # no trailing blank lines
        body = body[:-1]
    if dedent:  # a piece of a method starts at column 0
        body = textwrap.dedent("\n".join(body)).split("\n")
    else:  # only the function's own indentation goes (a method's 4 spaces): the piece keeps the rest
        margin = min(len(ln) - len(ln.lstrip()) for ln in lines if ln.strip())
        body = [ln[margin:] for ln in body]
    return Snippet(path, first + lo, tuple(body))


def source(obj: Callable | str) -> str:
    """The source text of a function (or the text itself), decorators included."""
    return snippet(obj).text + "\n"


def diff_lines(old: Callable | str, new: Callable | str, context: int = 3) -> list[str]:
    """Unified diff lines between two functions' source, without the file headers."""
    a, b = source(old).splitlines(), source(new).splitlines()
    lines = list(difflib.unified_diff(a, b, lineterm="", n=context))
    return lines[2:]  # drop the ---/+++ header


def _display(html_text: str, plain: str) -> None:
    try:
        from IPython import get_ipython
        from IPython.display import HTML, display
    except ImportError:  # pragma: no cover
        print(plain)
        return
    if get_ipython() is None:
        print(plain)
        return
    display(HTML(html_text))


def _head(title: str, where: str) -> str:
    return (f"<b>{html.escape(title)}</b> " if title else "") + f"<code>{html.escape(where)}</code>"


def show_source(obj: Any, title: str = "", start: str | None = None, stop: str | None = None,
                dedent: bool = True) -> None:
    """Display a function (or the piece between ``start`` and ``stop``) with its file:line;
    ``dedent=False`` keeps the piece's indentation (``snippet``)."""
    snip = snippet(obj, start, stop, dedent)
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer

        body = highlight(snip.text, PythonLexer(), HtmlFormatter(
            noclasses=True, nobackground=True, linenos="inline", linenostart=snip.first))
    except ImportError:  # pragma: no cover
        body = f"<pre>{html.escape(snip.numbered())}</pre>"
    plain = (f"{title}  " if title else "") + snip.where + "\n" + snip.numbered()
    _display(_head(title, snip.where) + body, plain)


def show_diff(old: Callable | str, new: Callable | str, context: int = 3, title: str = "") -> None:
    """Display the diff of two versions of a kernel (or of any two functions), coloured."""
    lines = diff_lines(old, new, context)
    where = f"{snippet(old).where} -> {snippet(new).where}"
    styles = {"+": "background:#e6ffec", "-": "background:#ffebe9", "@": "color:#6e7781"}
    body = "\n".join(f'<span style="{styles.get(ln[:1], "")}">{html.escape(ln)}</span>' for ln in lines)
    plain = (f"{title}  " if title else "") + where + "\n" + "\n".join(lines)
    _display(_head(title, where) + f"<pre style='font-size:12px;line-height:1.25'>{body}</pre>", plain)
