"""A layout and CuTe's value of it at every coordinate: :class:`LayoutTable`, made by
:func:`evaluate` in one host-side trace and cached per layout."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import LayoutError
from .int_tuple import IntTuple, flatten, idx2crd, size, to_text
from .parse import check_layout, parse_int_tuple, parse_layout
from .host_trace import run_on_host


@dataclass(frozen=True)
class LayoutTable:
    """A layout and CuTe's value of it at every coordinate.

    ``coords[i]`` is the natural coordinate of flat index ``i`` (mode 0 fastest) and
    ``offsets[i]`` what CuTe's ``layout(coords[i])`` returned. ``expr`` says how the layout was
    made (``"(4,8):(1,4)"``, ``"zipped_divide((8,8):(8,1), (2,4))"``); pictures use it as a title.
    """

    layout: str
    shape: IntTuple
    stride: IntTuple
    coords: tuple
    offsets: tuple[int, ...]
    expr: str = ""
    base: int = 0  # slices only: the offset of the slice's first element in the parent
    parent: "LayoutTable | None" = field(default=None, repr=False, compare=False)
    selected: tuple[int, ...] = field(default=(), repr=False, compare=False)  # flat indices in parent

    # --- sizes -------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return len(self.offsets)

    @property
    def cosize(self) -> int:
        """One past the largest offset: how much memory the layout spans."""
        return max(self.offsets) + 1 if self.offsets else 0

    @property
    def rank(self) -> int:
        return len(self.shape) if isinstance(self.shape, tuple) else 1

    @property
    def modes(self) -> tuple:
        """The top-level modes' shapes (a rank-1 layout has one)."""
        return self.shape if isinstance(self.shape, tuple) else (self.shape,)

    @property
    def is_injective(self) -> bool:
        """No two coordinates share an offset (no stride-0 broadcast, no overlap)."""
        return len(set(self.offsets)) == len(self.offsets)

    # --- one coordinate ------------------------------------------------------------------------
    def index_of(self, coord: Any) -> int:
        """Flat index of a coordinate: an int (flat index itself), or a natural coordinate.

        A coordinate may be hierarchical ``((1,0),(2,1))`` or per-mode flat ``(1, 5)`` (each
        mode's entry given as an index into that mode), as CuTe accepts both.
        """
        if isinstance(coord, str):
            coord = parse_int_tuple(coord, "the coordinate")
        if isinstance(coord, (int, np.integer)) and not isinstance(coord, bool):
            if not 0 <= coord < self.size:
                raise LayoutError(f"index {coord} is outside the layout {self.layout} "
                                  f"(it has {self.size} coordinates, 0..{self.size - 1})",
                                  "pick an index below the layout's size")
            return int(coord)
        return self._crd_index(coord, self.shape, "")

    def _crd_index(self, coord: Any, shape: IntTuple, path: str) -> int:
        where = f"mode {path}" if path else "the layout"
        if isinstance(coord, (int, np.integer)) and not isinstance(coord, bool):
            n = size(shape)
            if not 0 <= coord < n:
                raise LayoutError(f"coordinate {coord} is outside {where} of extent {n} "
                                  f"(layout {self.layout})", f"use 0..{n - 1} for {where}")
            return int(coord)
        if isinstance(coord, (tuple, list)) and isinstance(shape, tuple) and len(coord) == len(shape):
            index, scale = 0, 1
            for k, (c, s) in enumerate(zip(coord, shape)):
                index += self._crd_index(c, s, f"{path}.{k}" if path else str(k)) * scale
                scale *= size(s)
            return index
        raise LayoutError(f"the coordinate {coord!r} does not fit {where} of shape {to_text(shape)}",
                          f"give {'one entry per mode' if isinstance(shape, tuple) else 'an integer'}, "
                          f"e.g. {to_text(idx2crd(0, shape))}")

    def offset(self, coord: Any) -> int:
        """CuTe's value of the layout at ``coord`` (looked up in the table; bounds-checked)."""
        return self.offsets[self.index_of(coord)]

    # --- the rank-2 picture ----------------------------------------------------------------------
    @property
    def grid_shape(self) -> tuple[IntTuple, IntTuple]:
        """(row shape, column shape): mode 0 down, modes 1.. across; rank 1 is one row."""
        if self.rank == 1:
            return 1, self.modes[0]
        rest = self.modes[1] if self.rank == 2 else tuple(self.modes[1:])
        return self.modes[0], rest

    def grid(self) -> np.ndarray:
        """Offsets as a 2-D array: ``grid()[r, c]`` is the offset at row r (mode 0), column c."""
        rows, cols = (size(s) for s in self.grid_shape)
        # flat index = r + rows * c (mode 0 fastest), so a column-major reshape lays it out.
        return np.array(self.offsets, dtype=np.int64).reshape((rows, cols), order="F")

    def cell(self, row: int, col: int) -> tuple[Any, int, int]:
        """(natural coordinate, flat index, offset) of the grid cell at (row, col)."""
        rows, cols = (size(s) for s in self.grid_shape)
        if not (0 <= row < rows and 0 <= col < cols):
            raise LayoutError(f"cell ({row}, {col}) is outside the {rows}x{cols} grid of {self.layout}",
                              f"rows are 0..{rows - 1}, columns 0..{cols - 1}")
        i = row + rows * col
        return self.coords[i], i, self.offsets[i]

    def describe(self, coord: Any) -> str:
        """One line for a learner: ``coordinate ((1,0),(2,1)) = flat index 13 -> offset 17``."""
        i = self.index_of(coord)
        return (f"coordinate {to_text(self.coords[i])} = flat index {i} -> offset "
                f"{self.offsets[i]}" + (f" (address {self.base + self.offsets[i]} in the parent)"
                                        if self.parent is not None else ""))

    def text(self) -> str:
        """The grid as text, like CuTe's ``print_layout``: the layout, then one row per mode-0
        coordinate, one column per mode-1 coordinate, each cell its offset (deterministic,
        so notebooks can print it and nbval can compare it)."""
        g = self.grid()
        row_shape, col_shape = self.grid_shape
        rlab = [to_text(idx2crd(r, row_shape)) for r in range(g.shape[0])] if self.rank > 1 else [""]
        clab = [to_text(idx2crd(c, col_shape)) for c in range(g.shape[1])]
        w = max(len(x) for x in clab + [str(int(v)) for v in g.ravel()])
        lw = max(len(x) for x in rlab)
        sep = " " * (lw + 1) + "+" + "+".join("-" * (w + 2) for _ in clab) + "+"
        lines = [self.expr if self.expr == self.layout else f"{self.expr} = {self.layout}",
                 (" " * (lw + 2) + " ".join(f" {c:>{w}} " for c in clab)).rstrip(), sep]
        for r in range(g.shape[0]):
            lines.append(f"{rlab[r]:>{lw}} |" + "|".join(f" {int(v):>{w}} " for v in g[r]) + "|")
            lines.append(sep)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.layout


def layout_args(layout: Any, stride: Any = None) -> tuple[IntTuple, IntTuple]:
    """Any accepted spelling of a layout -> validated (shape, stride)."""
    if isinstance(layout, LayoutTable):
        return layout.shape, layout.stride
    if isinstance(layout, str):
        if stride is not None:
            return check_layout(layout, stride)
        return check_layout(*parse_layout(layout))
    if isinstance(layout, (int, np.integer, tuple, list)) and not isinstance(layout, bool):
        return check_layout(layout, stride)
    raise LayoutError(f"cannot make a layout from {type(layout).__name__} {layout!r}",
                      "pass text like '(4,8):(8,1)', a shape tuple and a stride tuple, or a cute.Layout")


#: Tables are for pictures and checks: beyond this many coordinates, scale the layout down
#: (the algebra does not change with the extents, and a picture of 65536 cells shows nothing).
MAX_COORDS = 1 << 16


def tabulate(L: Any, expr: str, **extra: Any) -> LayoutTable:
    """Inside a trace: evaluate CuTe layout ``L`` at every natural coordinate."""
    shape, stride = L.shape, L.stride
    if not all(isinstance(x, int) for x in flatten(shape) + flatten(stride)):
        raise LayoutError(f"the layout {L} has values only known when the kernel runs",
                          "draw layouts whose shape and stride are Python ints (compile-time constants)")
    if size(shape) > MAX_COORDS:
        raise LayoutError(f"the layout {L} has {size(shape)} coordinates, too many to tabulate "
                          f"(limit {MAX_COORDS})", "scale the extents down: the same strides on "
                          "a smaller shape show the same pattern")
    coords = tuple(idx2crd(i, shape) for i in range(size(shape)))
    offsets = []
    for c in coords:
        off = L(c)  # CuTe's crd2idx, folded while tracing
        if not isinstance(off, int):
            raise LayoutError(f"CuTe returned {off!r} for {L}({to_text(c)}), not a number",
                              "only layouts with static integer strides can be drawn")
        offsets.append(off)
    text = str(L)
    return LayoutTable(text, shape, stride, coords, tuple(offsets), expr or text, **extra)


def _make(shape: IntTuple, stride: IntTuple):
    import cutlass.cute as cute

    return cute.make_layout(shape, stride=stride)


@functools.lru_cache(maxsize=512)
def _evaluate_cached(shape: IntTuple, stride: IntTuple) -> LayoutTable:
    return run_on_host(lambda: tabulate(_make(shape, stride), ""))


def evaluate(layout: Any, stride: Any = None) -> LayoutTable:
    """CuTe's value of a layout at every coordinate.

    ``layout``: text (``"((2,2),(3,4)):((1,6),(2,12))"``, or a shape alone ``"(4,8)"``), a shape
    tuple with ``stride`` (omitted: compact column-major, CuTe's default), a LayoutTable, or
    (inside your own @cute.jit function) a ``cute.Layout``.
    """
    if _is_cute_layout(layout):
        return tabulate(layout, "")
    shape, stride = layout_args(layout, stride)
    return _evaluate_cached(shape, stride)


def _is_cute_layout(x: Any) -> bool:
    try:
        import cutlass.cute as cute
    except ImportError:  # pragma: no cover
        return False
    return isinstance(x, cute.Layout)
