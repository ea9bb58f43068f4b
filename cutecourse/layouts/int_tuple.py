"""Integer tuples (CuTe's IntTuple) in pure Python, independent of CuTe: sizes, coordinates,
indices, offsets. The tests cross-check CuTe's own evaluation against these."""

from __future__ import annotations

import itertools
import math
from typing import Union


#: A nested tuple of ints (CuTe's IntTuple): ``8``, ``(4, 8)``, ``((2, 2), (3, 4))``.
IntTuple = Union[int, tuple]


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
