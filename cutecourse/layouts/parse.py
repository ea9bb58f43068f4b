"""The text form of layouts, tilers and int tuples (``"((2,2),(3,4)):((1,6),(2,12))"``, ``"(4,8)"``,
``"8:2"``), parsed with errors that point at the character, because a learner types these by hand
in the explorer; and the checks every entry point runs on a layout given as text or tuples."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..errors import LayoutError
from .int_tuple import IntTuple, compact_col_major, congruent, flatten, to_text


_TOKEN = re.compile(r"\s*(?:(-?\d+)|(.))")


def _caret(text: str, pos: int) -> str:
    return f"\n    {text}\n    {' ' * pos}^"


class _Parser:
    def __init__(self, text: str, what: str):
        self.text, self.what = text, what
        self.tokens: list[tuple[str, int]] = []
        for m in _TOKEN.finditer(text):
            if m.group(1) is not None:
                self.tokens.append((m.group(1), m.start(1)))
            elif m.group(2) is not None:
                self.tokens.append((m.group(2), m.start(2)))
        self.i = 0

    def peek(self) -> str | None:
        return self.tokens[self.i][0] if self.i < len(self.tokens) else None

    def pos(self) -> int:
        return self.tokens[self.i][1] if self.i < len(self.tokens) else len(self.text)

    def fail(self, msg: str, fix: str) -> LayoutError:
        return LayoutError(f"cannot read {self.what} {self.text!r}: {msg}{_caret(self.text, self.pos())}", fix)

    def int_tuple(self) -> IntTuple:
        tok = self.peek()
        if tok is None:
            raise self.fail("it ends too early", "close every '(' with ')' and give a number after ':'")
        if tok == "(":
            self.i += 1
            items = [self.int_tuple()]
            while self.peek() == ",":
                self.i += 1
                items.append(self.int_tuple())
            if self.peek() != ")":
                found = "the end" if self.peek() is None else repr(self.peek())
                raise self.fail(f"expected ',' or ')' but found {found}",
                                "check that every '(' has its ')' (mismatched nesting)")
            self.i += 1
            return tuple(items)
        if re.fullmatch(r"-?\d+", tok):
            self.i += 1
            return int(tok)
        raise self.fail(f"unexpected {tok!r}", "write integers, '(', ')', ',' and one ':' "
                        "between shape and stride, e.g. ((2,2),(3,4)):((1,6),(2,12))")

    def end(self) -> None:
        if self.peek() is not None:
            hint = ("there is a ')' without its '(' (mismatched nesting)" if self.peek() == ")"
                    else "write one layout: shape:stride")
            raise self.fail(f"unexpected {self.peek()!r} after the end", hint)


def parse_int_tuple(text: str, what: str = "the int tuple") -> IntTuple:
    """``"(2,(3,4))"`` -> ``(2, (3, 4))``."""
    p = _Parser(text, what)
    t = p.int_tuple()
    p.end()
    return t


def _split_top(text: str, sep: str) -> list[tuple[str, int]]:
    """Split ``text`` at ``sep`` outside parentheses, keeping each part's start position."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")"
        if ch == sep and depth == 0:
            parts.append((text[start:i], start))
            start = i + 1
    parts.append((text[start:], start))
    return parts


def parse_layout(text: str) -> tuple[IntTuple, IntTuple | None]:
    """``"((2,2),(3,4)):((1,6),(2,12))"`` -> (shape, stride); stride is None for ``"(4,8)"``."""
    if not isinstance(text, str) or not text.strip():
        raise LayoutError("the layout is empty", "write shape:stride, e.g. (4,8):(1,4)")
    parts = _split_top(text, ":")
    if len(parts) > 2:
        raise LayoutError(f"cannot read the layout {text!r}: more than one ':'"
                          f"{_caret(text, parts[2][1] - 1)}",
                          "a layout is one shape, ':', one stride, e.g. (4,8):(8,1)")
    p = _Parser(parts[0][0], "the shape")
    shape = p.int_tuple()
    p.end()
    stride = None
    if len(parts) == 2:
        p = _Parser(parts[1][0], "the stride")
        stride = p.int_tuple()
        p.end()
    return shape, stride


def check_layout(shape: Any, stride: Any = None) -> tuple[IntTuple, IntTuple]:
    """Validate shape and stride (nesting, positive extents, ints) and return them as tuples.

    Raises LayoutError with the offending mode named. A missing stride becomes CuTe's default,
    compact column-major.
    """
    shape = _as_int_tuple(shape, "shape")
    _check_extents(shape, shape)
    if stride is None:
        return shape, compact_col_major(shape)
    stride = _as_int_tuple(stride, "stride")
    if not congruent(shape, stride):
        raise LayoutError(
            f"the stride {to_text(stride)} does not have the nesting of the shape {to_text(shape)}"
            f"{_first_mismatch(shape, stride)}",
            "give one stride per shape entry, nested the same way, e.g. ((2,2),3):((1,4),2)")
    return shape, stride


def _first_mismatch(shape: IntTuple, stride: IntTuple, path: str = "") -> str:
    if isinstance(shape, tuple) and isinstance(stride, tuple):
        if len(shape) != len(stride):
            where = f"mode {path}" if path else "the layout"
            return f" ({where} has {len(shape)} shape entries but {len(stride)} strides)"
        for k, (a, b) in enumerate(zip(shape, stride)):
            msg = _first_mismatch(a, b, f"{path}{k}" if not path else f"{path}.{k}")
            if msg:
                return msg
        return ""
    if isinstance(shape, tuple) != isinstance(stride, tuple):
        return (f" (mode {path or '0'}: shape {to_text(shape)} but stride {to_text(stride)})")
    return ""


def _as_int_tuple(value: Any, what: str) -> IntTuple:
    if isinstance(value, str):
        return parse_int_tuple(value, f"the {what}")
    if isinstance(value, (list, tuple)):
        if len(value) == 0:
            raise LayoutError(f"the {what} has an empty mode ()", f"every mode of the {what} needs a number")
        return tuple(_as_int_tuple(v, what) for v in value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise LayoutError(f"the {what} contains {value!r}, which is not an integer",
                          f"write the {what} with integers only, e.g. (4,8)")
    return int(value)


def _check_extents(shape: IntTuple, whole: IntTuple) -> None:
    for s in flatten(shape):
        if s <= 0:
            raise LayoutError(f"the shape {to_text(whole)} has an extent {s}; every extent must be "
                              f"at least 1", "a mode of extent n has coordinates 0..n-1, so use n >= 1")
