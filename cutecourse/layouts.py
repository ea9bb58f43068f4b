"""CuTe layouts evaluated by CuTe itself, on the CPU, as tables a picture can be drawn from.

API (what notebooks 01/02 and ``cutecourse.viz`` use)::

    from cutecourse import layouts
    t = layouts.evaluate("((2,2),(3,4)):((1,6),(2,12))")  # text, as CuTe prints a layout
    t = layouts.evaluate((4, 8), (8, 1))                   # shape, stride (stride optional:
    t = layouts.evaluate("(4,8)")                          #   then compact column-major, as CuTe)
    t.layout          # '((2,2),(3,4)):((1,6),(2,12))'  CuTe's own printout of the layout
    t.shape, t.stride # nested tuples of ints
    t.coords[i]       # the natural coordinate of flat index i (mode 0 fastest)
    t.offsets[i]      # CuTe's layout(coords[i])
    t.offset(((1, 0), (2, 1)))  # one coordinate (bounds-checked)
    t.grid()          # numpy array: row = mode 0, column = mode 1 (modes 1.. folded)
    t.cell(r, c)      # (coordinate, flat index, offset) of one cell of that grid
    print(t.text())   # the grid as text, like CuTe's print_layout
    layouts.composition(a, b)          layouts.logical_divide(a, tiler)
    layouts.zipped_divide(a, tiler)    layouts.tiled_divide(a, tiler)
    layouts.slice_(a, (None, 1))       layouts.make_layout_tv(thr, val) -> TVTable
    layouts.evaluate(L)  # inside your own @cute.jit function, with a cute.Layout you built
    layouts.run_on_host(fn)  # run fn() inside a host-side @cute.jit trace, return its result
    layouts.trace(my_jit_fn, *args)  # trace your own @cute.jit function (its prints) without
                                     # compiling it: the way to print layouts on any machine

Anything a layout, a tiler or a coordinate can be is accepted in text form or as tuples; bad
input raises :class:`cutecourse.errors.LayoutError` saying what is wrong and what to try.

How CuTe evaluates a layout on a machine without a GPU
------------------------------------------------------
A ``@cute.jit`` function is Python that the DSL *traces*: it runs the body once, and every
CuTe operation it meets becomes an operation of CuTe's MLIR dialect. When a layout's shape and
stride are compile-time constants (plain Python ints) CuTe folds those operations while
tracing: ``L((1, 2))`` returns a Python ``int``, ``cute.zipped_divide(L, (2, 2))`` returns a
layout whose printout is already the answer. So one trace of one host function that builds a
layout and applies it to every coordinate gives the whole table, computed by CuTe's own
algebra. Nothing has to run on a GPU, and nothing even has to be compiled: the trace is all
we need, so the trace runs with the DSL's "dry run" switch on (the ``CUTE_DSL_DRYRUN``
setting: generate the IR, skip compilation). That also keeps these tables independent of
the artifact settings ``cutecourse`` chooses for kernels (``CUTE_DSL_KEEP``). One trace per
layout (about 60 µs per coordinate), and results are cached per layout.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Union

import numpy as np

from .errors import LayoutError

#: A nested tuple of ints (CuTe's IntTuple): ``8``, ``(4, 8)``, ``((2, 2), (3, 4))``.
IntTuple = Union[int, tuple]

# --------------------------------------------------------------------------------------------
# Integer tuples: pure Python, independent of CuTe (the tests cross-check CuTe against these).
# --------------------------------------------------------------------------------------------


def flatten(t: IntTuple) -> tuple[int, ...]:
    """The leaves of a nested tuple, left to right: ``((2,2),(3,4))`` -> ``(2, 2, 3, 4)``."""
    if isinstance(t, tuple):
        return tuple(x for e in t for x in flatten(e))
    return (t,)


def size(shape: IntTuple) -> int:
    """Number of coordinates in a shape: the product of its leaves."""
    return math.prod(flatten(shape))


def idx2crd(index: int, shape: IntTuple) -> IntTuple:
    """The natural (hierarchical) coordinate of a flat index, first mode fastest (colexicographic).

    ``idx2crd(5, ((2,2),(3,4)))`` -> ``((1, 0), (2, 0))``: 5 = 1 + 2*(0 + 2*(2 + 3*0)).
    """
    if isinstance(shape, tuple):
        out = []
        for s in shape:
            n = size(s)
            out.append(idx2crd(index % n, s))
            index //= n
        return tuple(out)
    return index


def crd2idx(coord: IntTuple, shape: IntTuple) -> int:
    """Inverse of :func:`idx2crd` (coordinate must be congruent with ``shape``)."""
    if isinstance(shape, tuple):
        index, scale = 0, 1
        for c, s in zip(coord, shape):
            index += crd2idx(c, s) * scale
            scale *= size(s)
        return index
    return coord


def inner_product(coord: IntTuple, stride: IntTuple) -> int:
    """A layout's definition: offset = sum over leaves of coordinate * stride."""
    return sum(c * d for c, d in zip(flatten(coord), flatten(stride)))


def python_offsets(shape: IntTuple, stride: IntTuple) -> list[int]:
    """Offsets of every flat index computed without CuTe (the tests' independent reference)."""
    return [inner_product(idx2crd(i, shape), stride) for i in range(size(shape))]


def compact_col_major(shape: IntTuple) -> IntTuple:
    """The stride CuTe's ``make_layout(shape)`` picks: compact, first mode fastest."""
    leaves = flatten(shape)
    strides = list(itertools.accumulate((1,) + leaves[:-1], lambda a, b: a * b))
    it = iter(strides)

    def rebuild(s):
        return tuple(rebuild(e) for e in s) if isinstance(s, tuple) else next(it)

    return rebuild(shape)


def to_text(t: IntTuple) -> str:
    """CuTe's spelling of an IntTuple: ``(2,(3,4))``, no spaces."""
    if isinstance(t, tuple):
        return "(" + ",".join(to_text(e) for e in t) + ")"
    return str(t)


def congruent(a: IntTuple, b: IntTuple) -> bool:
    """Same nesting (profile): both ints, or tuples of equal length whose modes are congruent."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(congruent(x, y) for x, y in zip(a, b))
    return not isinstance(a, tuple) and not isinstance(b, tuple)


# --------------------------------------------------------------------------------------------
# The text form: "((2,2),(3,4)):((1,6),(2,12))", "(4,8)", "8:2". Parsed here, with errors that
# point at the character, because a learner types these by hand in the explorer.
# --------------------------------------------------------------------------------------------

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


def _layout_args(layout: Any, stride: Any = None) -> tuple[IntTuple, IntTuple]:
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


# --------------------------------------------------------------------------------------------
# Running CuTe: one host-side @cute.jit trace.
# --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _trace_only():
    """Let a @cute.jit call trace (and fold) but not compile: the DSL's own dry-run switch.

    ``CUTE_DSL_DRYRUN=1`` makes the DSL generate IR and stop. The DSL reads it once, at import,
    into its settings object; we flip that setting for the duration of one call and put it back.
    """
    from cutlass.cutlass_dsl import CuTeDSL

    envar = CuTeDSL._get_dsl().envar
    saved = envar.dryrun
    envar.dryrun = True
    try:
        with warnings.catch_warnings():  # "cache is disabled ..." is about kernels, not us
            warnings.simplefilter("ignore", UserWarning)
            yield
    finally:
        envar.dryrun = saved


#: The job the host function traces next: (fn, box). A slot rather than arguments, because a
#: @cute.jit function's arguments must be values the DSL knows how to pass (tensors, numbers,
#: Constexpr), and ours is an arbitrary Python callable.
_JOB: list = []


def _capture() -> None:
    fn, box = _JOB[-1]
    try:
        box["value"] = fn()
    except Exception as e:  # handed back to the caller outside the trace
        box["error"] = e


@functools.lru_cache(maxsize=1)
def _host_function():
    import cutlass.cute as cute

    @cute.jit
    def host_trace():
        # Runs on the host, at trace time: every CuTe call inside the job is folded by CuTe.
        _capture()

    return host_trace


def in_jit() -> bool:
    """True while a @cute.jit function is being traced (CuTe objects can be made right here)."""
    try:
        from cutlass._mlir import ir

        ir.InsertionPoint.current  # raises outside a trace
        return True
    except Exception:
        return False


def trace(jit_fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """Trace your own ``@cute.jit`` function without compiling it; return what it returns.

    Its ``print(...)`` calls run (that is where compile-time values such as static layouts
    are printed) and CuTe folds its static layout algebra, but no code is generated: this works
    on any machine, and for host-only functions (no kernel launch) that have nothing to compile.
    """
    with _trace_only():
        return jit_fn(*args, **kwargs)


def run_on_host(fn: Callable[[], Any]) -> Any:
    """Call ``fn()`` inside a host-side ``@cute.jit`` trace and return what it returns.

    ``fn`` may build CuTe layouts and must return plain Python values (ints, tuples, strings):
    the CuTe objects do not outlive the trace. An exception raised by ``fn`` is re-raised here.
    Already inside a trace (your own ``@cute.jit`` function), ``fn`` is simply called.
    """
    if in_jit():
        return fn()
    box: dict = {}
    _JOB.append((fn, box))
    try:
        with _trace_only():
            _host_function()()
    finally:
        _JOB.pop()
    if "error" in box:
        raise box["error"]
    return box.get("value")


# --------------------------------------------------------------------------------------------
# Tables.
# --------------------------------------------------------------------------------------------


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


#: Tables are for pictures and checks: beyond this many coordinates, scale the layout down
#: (the algebra does not change with the extents, and a picture of 65536 cells shows nothing).
MAX_COORDS = 1 << 16


def _tabulate(L: Any, expr: str, **extra: Any) -> LayoutTable:
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
    return run_on_host(lambda: _tabulate(_make(shape, stride), ""))


def evaluate(layout: Any, stride: Any = None) -> LayoutTable:
    """CuTe's value of a layout at every coordinate.

    ``layout``: text (``"((2,2),(3,4)):((1,6),(2,12))"``, or a shape alone ``"(4,8)"``), a shape
    tuple with ``stride`` (omitted: compact column-major, CuTe's default), a LayoutTable, or
    (inside your own @cute.jit function) a ``cute.Layout``.
    """
    if _is_cute_layout(layout):
        return _tabulate(layout, "")
    shape, stride = _layout_args(layout, stride)
    return _evaluate_cached(shape, stride)


def _is_cute_layout(x: Any) -> bool:
    try:
        import cutlass.cute as cute
    except ImportError:  # pragma: no cover
        return False
    return isinstance(x, cute.Layout)


# --------------------------------------------------------------------------------------------
# The operations the course uses. Each returns the resulting layout's table, computed by CuTe.
# --------------------------------------------------------------------------------------------


def _cute_failure(what: str, err: Exception, fix: str) -> LayoutError:
    """CuTe's complaint (an MLIR diagnostic) trimmed to its one informative line."""
    msg = str(err)
    lines = [ln.strip() for ln in msg.splitlines() if "error:" in ln]
    detail = lines[0].split("error:", 1)[1].strip() if lines else msg.strip().splitlines()[0]
    detail = detail.replace("unknown: ", "")
    # '!cute.layout<"(4,3):(3,1)">' -> (4,3):(3,1); '#cute.tile<"[3:1;5:1]">' -> [3:1;5:1]
    detail = re.sub(r"'?[!#]cute\.\w+<\"([^\"]*)\">'?", r"\1", detail)
    return LayoutError(f"{what}: CuTe says: {detail}", fix)


def _run_op(what: str, fix: str, build: Callable[[], Any]) -> Any:
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
        return _tabulate(cute.composition(_make(*a), _make(*b)), f"{A} o {B}")

    return _run_op(f"cannot compose {A} with {B}",
                   f"A o B feeds B's offsets into A as flat coordinates, so each mode of B must walk "
                   f"A's shape {to_text(a[0])} evenly: B's strides must divide, or be multiples of, "
                   f"the products of A's extents (here 1, "
                   f"{', '.join(str(x) for x in itertools.accumulate(flatten(a[0]), lambda p, q: p * q))})",
                   build)


def composition(a: Any, b: Any) -> LayoutTable:
    """``A o B``: the layout ``c -> A(B(c))`` (B's offsets become A's coordinates)."""
    return _composition_cached(_layout_args(a), _layout_args(b))


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
        return _tabulate(fn(_make(*layout), _cute_tiler(tiler)), expr)

    return _run_op(f"{expr} failed", "the tile must divide the layout evenly, mode by mode", build)


def logical_divide(layout: Any, tiler: Any) -> LayoutTable:
    """Split each mode into (tile, rest): mode k becomes (tile_k, rest_k); the rank stays."""
    return _divide_cached("logical_divide", _layout_args(layout), parse_tiler(tiler))


def zipped_divide(layout: Any, tiler: Any) -> LayoutTable:
    """``((tile modes), (rest modes))``: mode 0 walks inside one tile, mode 1 picks the tile."""
    return _divide_cached("zipped_divide", _layout_args(layout), parse_tiler(tiler))


def tiled_divide(layout: Any, tiler: Any) -> LayoutTable:
    """``((tile modes), rest_0, rest_1, ...)``: like zipped_divide with the rest unpacked."""
    return _divide_cached("tiled_divide", _layout_args(layout), parse_tiler(tiler))


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
        return _tabulate(sub, f"{L}[{ctext}]", base=base)

    t = _run_op(f"cannot slice {L} at {ctext}", "use one entry per mode, None to keep a mode", tab)
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
    shape, stride = _layout_args(layout)
    coord = parse_slice(coord)
    if isinstance(coord, list):
        coord = tuple(coord)
    _slice_check(coord, shape, "", f"{to_text(shape)}:{to_text(stride)}")
    return _slice_cached((shape, stride), _normalize_slice(coord, shape))


# --------------------------------------------------------------------------------------------
# Thread-value layouts.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TVTable:
    """``make_layout_tv(thr_layout, val_layout)`` evaluated by CuTe.

    ``tiler``: the tile shape (M, N) the threads cover. ``tv``: the TV layout's table, a map
    (thread, value) -> linear index into the tile (column-major over ``tiler``, CuTe's
    convention). ``owner[m, n]`` / ``value[m, n]``: which thread and which of its values hold
    tile element (m, n). ``coord_of(t, v)``: the (m, n) that thread t's value v is.
    """

    thr: LayoutTable
    val: LayoutTable
    tiler: tuple[int, ...]
    tv: LayoutTable
    owner: np.ndarray
    value: np.ndarray

    @property
    def threads(self) -> int:
        return size(self.tv.modes[0])

    @property
    def values(self) -> int:
        return size(self.tv.modes[1])

    def coord_of(self, thread: int, value: int) -> tuple[int, ...]:
        """Tile coordinate (m, n) of thread ``thread``'s value ``value`` (flat indices)."""
        if not (0 <= thread < self.threads and 0 <= value < self.values):
            raise LayoutError(f"(thread {thread}, value {value}) is outside the TV layout "
                              f"{self.tv.layout}", f"threads are 0..{self.threads - 1}, values "
                              f"0..{self.values - 1}")
        idx = self.tv.offsets[thread + self.threads * value]
        return tuple(idx2crd(idx, self.tiler))

    def __str__(self) -> str:
        return f"tiler {to_text(self.tiler)}, TV layout {self.tv.layout}"


@functools.lru_cache(maxsize=128)
def _tv_cached(thr: tuple, val: tuple) -> TVTable:
    import cutlass.cute as cute

    T, V = f"{to_text(thr[0])}:{to_text(thr[1])}", f"{to_text(val[0])}:{to_text(val[1])}"
    thr_t, val_t = evaluate(*thr), evaluate(*val)
    for name, t in (("thread", thr_t), ("value", val_t)):
        if not t.is_injective or sorted(t.offsets) != list(range(t.size)):
            raise LayoutError(f"the {name} layout {t.layout} is not a one-to-one map onto "
                              f"0..{t.size - 1} (offsets {sorted(set(t.offsets))[:8]}...)",
                              f"make_layout_tv needs a compact {name} layout: strides that tile "
                              f"0..size-1 exactly, e.g. (4,32):(32,1)")

    def build():
        tiler, tv = cute.make_layout_tv(_make(*thr), _make(*val))
        return tuple(int(x) for x in tiler), _tabulate(tv, f"make_layout_tv({T}, {V})")

    tiler, tv = _run_op(f"make_layout_tv({T}, {V}) failed",
                        "give a thread layout and a value layout of the same rank", build)
    owner = np.full(tiler, -1, dtype=np.int64)  # owner[m, n]: the thread holding element (m, n)
    value = owner.copy()
    nthr = size(tv.modes[0])
    for i, idx in enumerate(tv.offsets):
        m = idx2crd(idx, tiler)
        owner[m] = i % nthr
        value[m] = i // nthr
    return TVTable(thr_t, val_t, tiler, tv, owner, value)


def make_layout_tv(thr_layout: Any, val_layout: Any) -> TVTable:
    """CuTe's ``make_layout_tv``: the tile a (thread layout, value layout) pair covers and the
    (thread, value) -> tile-element map, with who owns each element of the tile."""
    return _tv_cached(_layout_args(thr_layout), _layout_args(val_layout))
