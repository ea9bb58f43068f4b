"""Exercise checkers: every check answers with a verdict a learner can act on.

A checker returns a :class:`Result` (green or red box in Jupyter, one line in a terminal), never
a stack trace: when the learner's code raises, ``@checker`` turns the exception into a red box
that names it and gives the hint. Checkers for notebook NN live in ``exercises/nbNN.py``.

Solutions are the source of truth: ``solutions/NN_*.ipynb`` holds the answers between
``# BEGIN SOLUTION`` / ``# END SOLUTION`` lines, and ``python -m cutecourse.exercises.build``
writes ``exercises/NN_*.ipynb`` with those regions blanked (tests keep the two in step).
"""

from __future__ import annotations

import functools
import html
from dataclasses import dataclass
from typing import Callable

from .. import progress


@dataclass
class Result:
    ok: bool
    title: str
    message: str = ""
    hint: str = ""

    def __bool__(self) -> bool:
        return self.ok

    def __repr__(self) -> str:
        mark = "PASS" if self.ok else "FAIL"
        text = f"[{mark}] {self.title}"
        if self.message:
            text += f": {self.message}"
        if self.hint and not self.ok:
            text += f"\n       hint: {self.hint}"
        return text

    def _repr_html_(self) -> str:
        color, mark = ("#2e7d32", "✔") if self.ok else ("#c62828", "✘")
        body = f"<b>{mark} {html.escape(self.title)}</b>"
        if self.message:
            body += f"<br><span style='white-space:pre-wrap'>{html.escape(self.message)}</span>"
        if self.hint and not self.ok:
            body += f"<br><i>Hint: {html.escape(self.hint)}</i>"
        return (f"<div style='border-left:4px solid {color};padding:4px 10px;margin:4px 0'>"
                f"{body}</div>")


def passed(title: str, message: str = "") -> Result:
    return Result(True, title, message)


def failed(title: str, message: str, hint: str = "") -> Result:
    return Result(False, title, message, hint)


def answered(value, name: str):
    """``value``, or NotImplementedError (which ``@checker`` reports as "not answered yet") if the
    learner left it as ``...`` or ``None``: for values a check computes from the learner's code."""
    if value is Ellipsis or value is None:
        raise NotImplementedError(name)
    return value


def checker(title: str, hint: str = "") -> Callable:
    """Decorate a check so that an exception in the learner's code becomes a red Result, and
    each verdict is recorded in the learner's progress file (``cutecourse.progress``)."""

    def wrap(fn: Callable[..., Result]) -> Callable[..., Result]:
        @functools.wraps(fn)
        def inner(*args, **kwargs) -> Result:
            result = verdict(*args, **kwargs)
            progress.record(fn.__module__, fn.__name__, title, bool(result))
            return result

        def verdict(*args, **kwargs) -> Result:
            unanswered = failed(title, "not answered yet: replace the `...` / NotImplementedError "
                                "in the exercise cell, run it, then run this check again.", hint)
            if any(a is Ellipsis for a in (*args, *kwargs.values())):
                return unanswered
            try:
                return fn(*args, **kwargs)
            except NotImplementedError:
                return unanswered
            except Exception as exc:  # the learner's code failed: say so, briefly
                first = (str(exc).strip().splitlines() or [""])[0][:300]
                return failed(title, f"your code raised {type(exc).__name__}: {first}", hint)

        return inner

    return wrap
