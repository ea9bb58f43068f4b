"""The layout operations the course uses (composition, the divides, slicing). Each returns the
resulting layout's table, computed by CuTe; bad input raises a LayoutError that says what to fix."""

from __future__ import annotations

import functools
import itertools
import re
from typing import Any, Callable

import numpy as np

from ..errors import LayoutError
from .int_tuple import IntTuple, flatten, idx2crd, size, to_text
from .parse import _split_top, check_layout, parse_int_tuple, parse_layout
from .table import LayoutTable, layout_args, _make, tabulate, evaluate
from .host_trace import run_on_host


def _cute_failure(what: str, err: Exception, fix: str) -> LayoutError:
    """CuTe's complaint (an MLIR diagnostic) trimmed to its one informative line."""
    msg = str(err)
    lines = [ln.strip() for ln in msg.splitlines() if "error:" in ln]
    detail = lines[0].split("error:", 1)[1].strip() if lines else msg.strip().splitlines()[0]
    detail = detail.replace("unknown: ", "")
    # '!cute.layout<"(4,3):(3,1)">' -> (4,3):(3,1); '#cute.tile<"[3:1;5:1]">' -> [3:1;5:1]
    detail = re.sub(r"'?[!#]cute\.\w+<\"([^\"]*)\">'?", r"\1", detail)
    return LayoutError(f"{what}: CuTe says: {detail}", fix)


def run_op(what: str, fix: str, build: Callable[[], Any]) -> Any:
    """``build()`` (CuTe calls that end in :func:`tabulate`) in one host-side trace; if CuTe
    refuses, a LayoutError "``what``: CuTe says: <its one informative line>" with ``fix``."""
    try:
        return run_on_host(build)
    except LayoutError:
        raise
    except Exception as e:  # CuTe refused (MLIRError / ValueError from its builders)
        raise _cute_failure(what, e, fix) from None


@functools.lru_cache(maxsize=256)
def _composition_cached(a: tuple, b: tuple) -> LayoutTable:
    A, B = f"{to_text(a[0])}:{to_text(a[1])}", f"{to_text(b[0])}:{to_text(b[1])}"
    import cutlass.cute as cute

    def build():
        return tabulate(cute.composition(_make(*a), _make(*b)), f"{A} o {B}")

    return run_op(f"cannot compose {A} with {B}",
                   f"A o B feeds B's offsets into A as flat coordinates, so each mode of B must walk "
                   f"A's shape {to_text(a[0])} evenly: B's strides must divide, or be multiples of, "
                   f"the products of A's extents (here 1, "
                   f"{', '.join(str(x) for x in itertools.accumulate(flatten(a[0]), lambda p, q: p * q))})",
                   build)


def composition(a: Any, b: Any) -> LayoutTable:
    """``A o B``: the layout ``c -> A(B(c))`` (B's offsets become A's coordinates)."""
    return _composition_cached(layout_args(a), layout_args(b))


# A tiler is a layout (divides the layout as one 1-D function) or a tuple with one entry per
# mode, each an int (a tile of that many consecutive coordinates) or a layout.


def parse_tiler(tiler: Any) -> tuple:
    """Normalise a tiler to ``("layout", (shape, stride))`` or ``("modes", (entry, ...))``.

    Mode entries are ints or (shape, stride) pairs. Text: ``"(2,4)"`` = two modes of tiles 2
    and 4; ``"4:2"`` = a layout; ``"(2:1,4:8)"`` = per-mode layouts.
    """
    if isinstance(tiler, LayoutTable):
        return ("layout", (tiler.shape, tiler.stride))
    if isinstance(tiler, str):
        text = tiler.strip()
        if not text:
            raise LayoutError("the tiler is empty", "write a tile shape like (2,4) or a layout like 4:2")
        if len(_split_top(text, ":")) > 1:
            return ("layout", check_layout(*parse_layout(text)))
        inner = text
        if inner.startswith("(") and inner.endswith(")") and _balanced(inner[1:-1]):
            inner = inner[1:-1]
        else:
            return ("modes", (_tiler_entry(parse_int_tuple(text, "the tiler")),))
        entries = []
        for part, _ in _split_top(inner, ","):
            if ":" in part:
                entries.append(check_layout(*parse_layout(part.strip())))
            else:
                entries.append(_tiler_entry(parse_int_tuple(part.strip() or " ", "the tiler")))
        return ("modes", tuple(entries))
    if isinstance(tiler, (int, np.integer)) and not isinstance(tiler, bool):
        return ("modes", (_tiler_entry(int(tiler)),))
    if isinstance(tiler, (tuple, list)) and tiler:
        entries = []
        for t in tiler:
            if isinstance(t, LayoutTable):
                entries.append((t.shape, t.stride))
            elif isinstance(t, str):
                entries.append(check_layout(*parse_layout(t)) if ":" in t
                               else _tiler_entry(parse_int_tuple(t, "the tiler")))
            else:
                entries.append(_tiler_entry(t))
        return ("modes", tuple(entries))
    raise LayoutError(f"cannot read the tiler {tiler!r}",
                      "a tiler is a tile shape like (2,4) (one entry per mode) or a layout like 4:2")


def _balanced(s: str) -> bool:
    depth = 0
    for ch in s:
        depth += ch == "("
        depth -= ch == ")"
        if depth < 0:
            return False
    return depth == 0


def _tiler_entry(t: Any) -> Any:
    if isinstance(t, (int, np.integer)) and not isinstance(t, bool):
        if t <= 0:
            raise LayoutError(f"the tiler has a tile of extent {t}", "tile extents must be at least 1")
        return int(t)
    if isinstance(t, tuple) and len(t) == 2 and not isinstance(t[0], bool):
        return check_layout(*t)
    raise LayoutError(f"cannot read the tiler entry {t!r}",
                      "each entry of a tiler is a tile extent (int) or a layout (shape, stride)")


def tiler_text(tiler: tuple) -> str:
    kind, val = tiler
    if kind == "layout":
        return f"{to_text(val[0])}:{to_text(val[1])}"
    parts = [str(e) if isinstance(e, int) else f"{to_text(e[0])}:{to_text(e[1])}" for e in val]
    return "(" + ",".join(parts) + ")"


def _check_divides(shape: IntTuple, tiler: tuple, op: str) -> None:
    """Readable errors for the divides CuTe would reject (or silently pad)."""
    kind, val = tiler
    modes = shape if isinstance(shape, tuple) else (shape,)
    if kind == "layout":
        n, t = size(shape), size(val[0])
        if n % t:
            raise LayoutError(f"{op}: the tile {tiler_text(tiler)} has {t} elements, which does not "
                              f"divide the layout's {n}", f"use a tile whose size divides {n}: "
                              f"{_divisors(n)}")
        return
    if len(val) > len(modes):
        raise LayoutError(f"{op}: the tiler {tiler_text(tiler)} has {len(val)} modes but the layout "
                          f"{to_text(shape)} has only {len(modes)}",
                          "give at most one tile entry per mode of the layout")
    for k, (entry, mode) in enumerate(zip(val, modes)):
        n = size(mode)
        t = entry if isinstance(entry, int) else size(entry[0])
        if n % t:
            raise LayoutError(f"{op}: a tile of {t} does not divide mode {k} of the layout, which has "
                              f"extent {n}", f"choose a tile extent that divides {n}: {_divisors(n)}")


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def _cute_tiler(tiler: tuple):
    kind, val = tiler
    if kind == "layout":
        return _make(*val)
    return tuple(e if isinstance(e, int) else _make(*e) for e in val)


@functools.lru_cache(maxsize=256)
def _divide_cached(op: str, layout: tuple, tiler: tuple) -> LayoutTable:
    import cutlass.cute as cute

    L = f"{to_text(layout[0])}:{to_text(layout[1])}"
    expr = f"{op}({L}, {tiler_text(tiler)})"
    _check_divides(layout[0], tiler, op)
    fn = getattr(cute, op)

    def build():
        return tabulate(fn(_make(*layout), _cute_tiler(tiler)), expr)

    return run_op(f"{expr} failed", "the tile must divide the layout evenly, mode by mode", build)


def logical_divide(layout: Any, tiler: Any) -> LayoutTable:
    """Split each mode into (tile, rest): mode k becomes (tile_k, rest_k); the rank stays."""
    return _divide_cached("logical_divide", layout_args(layout), parse_tiler(tiler))


def zipped_divide(layout: Any, tiler: Any) -> LayoutTable:
    """``((tile modes), (rest modes))``: mode 0 walks inside one tile, mode 1 picks the tile."""
    return _divide_cached("zipped_divide", layout_args(layout), parse_tiler(tiler))


def tiled_divide(layout: Any, tiler: Any) -> LayoutTable:
    """``((tile modes), rest_0, rest_1, ...)``: like zipped_divide with the rest unpacked."""
    return _divide_cached("tiled_divide", layout_args(layout), parse_tiler(tiler))


DIVIDES = {"logical_divide": logical_divide, "zipped_divide": zipped_divide, "tiled_divide": tiled_divide}


def parse_slice(coord: Any) -> Any:
    """Text ``"(_,1)"`` / ``"(None,1)"`` / ``"(:,1)"`` -> ``(None, 1)``; tuples pass through."""
    if isinstance(coord, str):
        text = re.sub(r"\b(None|_)\b|(?<=[(,\s]):(?=[,)\s])", "-1000000007", coord.strip())
        if text.strip() in {":", "_", "None"}:
            return None
        t = parse_int_tuple(text, "the slice coordinate")

        def back(x):
            if isinstance(x, tuple):
                return tuple(back(e) for e in x)
            return None if x == -1000000007 else x

        return back(t)
    return coord


def _slice_check(coord: Any, shape: IntTuple, path: str, whole: str) -> None:
    where = f"mode {path}" if path else "the layout"
    if coord is None:
        return
    if isinstance(coord, (int, np.integer)) and not isinstance(coord, bool):
        n = size(shape)
        if not 0 <= coord < n:
            raise LayoutError(f"slice coordinate {coord} is outside {where} of extent {n} ({whole})",
                              f"use 0..{n - 1}, or None (':') to keep the whole mode")
        return
    if isinstance(coord, tuple) and isinstance(shape, tuple) and len(coord) == len(shape):
        for k, (c, s) in enumerate(zip(coord, shape)):
            _slice_check(c, s, f"{path}.{k}" if path else str(k), whole)
        return
    raise LayoutError(f"the slice coordinate {coord!r} does not fit {where} of shape {to_text(shape)}",
                      "give one entry per mode: an index to fix it or None to keep it, e.g. (None, 1)")


def _fill(coord: Any, shape: IntTuple, value_of_none: Callable) -> Any:
    """Replace each None in coord by value_of_none(sub-shape)."""
    if coord is None:
        return value_of_none(shape)
    if isinstance(coord, tuple):
        return tuple(_fill(c, s, value_of_none) for c, s in zip(coord, shape))
    return coord


@functools.lru_cache(maxsize=256)
def _slice_cached(layout: tuple, coord: Any) -> LayoutTable:
    import cutlass.cute as cute

    shape, stride = layout
    L = f"{to_text(shape)}:{to_text(stride)}"
    _slice_check(coord, shape, "", L)
    ctext = _slice_text(coord)

    def build():
        lay = _make(shape, stride)
        sub = cute.slice_(lay, coord) if coord is not None else lay
        # The slice's own layout starts at 0; where it starts in the parent is the parent's
        # offset at the coordinate with every None replaced by 0 (what a tensor slice adds to
        # its pointer).
        base = lay(_fill(coord, shape, lambda s: idx2crd(0, s)))
        return sub, base

    def tab():
        sub, base = build()
        return tabulate(sub, f"{L}[{ctext}]", base=base)

    t = run_op(f"cannot slice {L} at {ctext}", "use one entry per mode, None to keep a mode", tab)
    parent = evaluate(shape, stride)
    # The parent's flat indices the slice keeps: coordinates that agree with every fixed entry.
    keep = tuple(i for i, c in enumerate(parent.coords) if _matches(coord, c))
    return LayoutTable(t.layout, t.shape, t.stride, t.coords, t.offsets, t.expr, t.base, parent, keep)


def _matches(pattern: Any, coord: Any) -> bool:
    if pattern is None:
        return True
    if isinstance(pattern, tuple):
        if not isinstance(coord, tuple):
            return False
        return all(_matches(p, c) for p, c in zip(pattern, coord))
    if isinstance(coord, tuple):  # an int fixing a nested mode: compare flat indices
        return False
    return pattern == coord


def _slice_text(coord: Any) -> str:
    if coord is None:
        return "None"
    if isinstance(coord, tuple):
        return "(" + ",".join(_slice_text(c) for c in coord) + ")"
    return str(coord)


def _normalize_slice(coord: Any, shape: IntTuple) -> Any:
    """An int that fixes a nested mode becomes that mode's natural coordinate (CuTe does this)."""
    if coord is None:
        return None
    if isinstance(coord, tuple) and isinstance(shape, tuple):
        return tuple(_normalize_slice(c, s) for c, s in zip(coord, shape))
    if isinstance(coord, (int, np.integer)) and isinstance(shape, tuple):
        return idx2crd(int(coord), shape)
    return coord


def slice_(layout: Any, coord: Any) -> LayoutTable:
    """``layout[coord]`` with ``None`` keeping a mode: the sub-layout over the kept modes.

    The result's ``base`` is where the slice starts in the parent (a tensor slice adds it to
    its pointer), ``parent`` the sliced layout's table and ``selected`` the parent's flat
    indices the slice covers, so a picture can highlight them.
    """
    shape, stride = layout_args(layout)
    coord = parse_slice(coord)
    if isinstance(coord, list):
        coord = tuple(coord)
    _slice_check(coord, shape, "", f"{to_text(shape)}:{to_text(stride)}")
    return _slice_cached((shape, stride), _normalize_slice(coord, shape))
