"""Thread-value layouts: ``make_layout_tv(thr_layout, val_layout)`` evaluated by CuTe, as a
:class:`TVTable` (the tile the threads cover and which thread holds which element)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import LayoutError
from .int_tuple import idx2crd, size, to_text
from .table import LayoutTable, layout_args, _make, tabulate, evaluate
from .ops import run_op


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
        return tuple(int(x) for x in tiler), tabulate(tv, f"make_layout_tv({T}, {V})")

    tiler, tv = run_op(f"make_layout_tv({T}, {V}) failed",
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
    return _tv_cached(layout_args(thr_layout), layout_args(val_layout))
