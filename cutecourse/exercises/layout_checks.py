"""Compare a learner's layout with the intended one, as functions, and say where they differ.

Two layouts are the same *function* when they have the same domain (the same extent in every
top-level mode) and give the same offset at every coordinate; how the learner spells it does not
matter (``(4,8):(8,1)`` and ``(4,(2,4)):(8,(1,2))`` are equal). When they differ, the useful
message is the first coordinate where they disagree, with both offsets, and a picture-like
row of the two tables around it, so the learner can see *which* stride is off.

Both layouts are evaluated by CuTe itself (``cutecourse.layouts``) on the CPU.
"""

from __future__ import annotations

from typing import Any, Sequence

from .. import layouts
from ..errors import CourseError
from ..layouts import LayoutTable, size, to_text
from . import Result, failed, passed


def as_table(layout: Any, what: str = "your layout") -> LayoutTable:
    """A LayoutTable from text, (shape, stride), a table, or a CuTe layout's text."""
    if isinstance(layout, LayoutTable):
        return layout
    if isinstance(layout, tuple) and len(layout) == 2 and not isinstance(layout[0], int):
        return layouts.evaluate(*layout)
    if layout is Ellipsis or layout is None:
        raise NotImplementedError
    return layouts.evaluate(str(layout) if not isinstance(layout, (tuple, list)) else layout)


def _mode_extents(t: LayoutTable) -> tuple[int, ...]:
    return tuple(size(m) for m in t.modes)


def _coord_text(index: int, extents: Sequence[int], names: Sequence[str] | None) -> str:
    """Flat index -> per-mode indices (mode 0 fastest), named if names are given."""
    out, rest = [], index
    for n in extents:
        out.append(rest % n)
        rest //= n
    if names:
        return "(" + ", ".join(f"{nm}={c}" for nm, c in zip(names, out)) + ")"
    return "(" + ", ".join(str(c) for c in out) + ")" if len(out) > 1 else str(out[0])


def differences(mine: LayoutTable, intended: LayoutTable) -> list[int]:
    """Flat indices (mode 0 fastest) where the two tables' offsets differ (same extents)."""
    return [i for i, (a, b) in enumerate(zip(mine.offsets, intended.offsets)) if a != b]


def compare(mine: Any, intended: Any, title: str, hint: str = "",
            names: Sequence[str] | None = None, what: str = "layout") -> Result:
    """PASS when ``mine`` equals ``intended`` as a function of its (per-mode) coordinates.

    ``names``: what to call the modes in the message, e.g. ("row", "col") or ("thread", "value").
    """
    try:
        mt = as_table(mine)
    except CourseError as e:
        return failed(title, f"your {what} is not a layout CuTe accepts: {e.what}", e.fix or hint)
    it = as_table(intended)
    me, ie = _mode_extents(mt), _mode_extents(it)
    if len(me) != len(ie) or me != ie:
        labels = names or [f"mode {k}" for k in range(len(ie))]
        want = ", ".join(f"{n} {lbl}" for n, lbl in zip(ie, labels))
        return failed(title, f"your {what} {mt.layout} has {len(me)} mode(s) of extents "
                      f"{to_text(me)}; it should take {len(ie)} mode(s): {want} "
                      f"(size {it.size})", hint)
    diff = differences(mt, it)
    if not diff:
        return passed(title, f"{mt.layout} gives the intended offset at all {it.size} coordinates")
    i = diff[0]
    where = _coord_text(i, ie, names)
    lines = [f"{len(diff)} of {it.size} coordinates differ; the first is {where}: "
             f"yours gives {mt.offsets[i]}, the intended {what} gives {it.offsets[i]}."]
    # A few neighbours in flat order, so the pattern of the mistake shows.
    lo = max(0, i - 2)
    show = range(lo, min(it.size, lo + 6))
    lines.append("coordinate   " + "  ".join(f"{_coord_text(j, ie, None):>9}" for j in show))
    lines.append("yours        " + "  ".join(f"{mt.offsets[j]:>9}" for j in show))
    lines.append("intended     " + "  ".join(f"{it.offsets[j]:>9}" for j in show))
    return failed(title, "\n".join(lines), hint)
