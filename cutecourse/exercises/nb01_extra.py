"""Checkers for the extra layout exercises of notebook 01 (``solutions/01b_layout_exercises``).

Each exercise asks for a layout as text (``"(6,4):(8,1)"``) and compares it with the intended
one as a *function*, evaluated by CuTe on the CPU: any spelling with the same offset at every
coordinate passes; a wrong one is answered with the first coordinate where the two differ.
"""

from __future__ import annotations

from .. import layouts
from . import Result, checker
from .layout_checks import compare

PADDED_HINT = ("a row-major matrix steps 1 element per column; one row down is one row pitch "
               "(the padded row length, 8 here), not the number of columns")


@checker("1b.1 padded rows", PADDED_HINT)
def check_padded_rows(layout) -> Result:
    """A 6 x 4 fp16 matrix, row-major, each row padded to 8 elements (16-byte aligned rows)."""
    return compare(layout, "(6,4):(8,1)", "1b.1 padded rows", PADDED_HINT, names=("row", "col"))


BLOCKED_HINT = ("split each mode in two, inner part first (CuTe counts it fastest): rows = (row "
                "within a block, which block row), columns = (column within a block, which block "
                "column). For each of the four parts ask: one step along it moves how many elements "
                "in memory?")


@checker("1b.2 a blocked matrix", BLOCKED_HINT)
def check_blocked(layout) -> Result:
    """A 4 x 8 matrix stored as 2 x 4 blocks: the four blocks one after another in row-major
    order (8 elements each), and each block row-major inside."""
    return compare(layout, "((2,2),(4,2)):((4,16),(1,8))", "1b.2 a blocked matrix", BLOCKED_HINT,
                   names=("row", "col"))


DIVIDE_HINT = ("inside a tile (mode 0) zipped_divide keeps the original strides; mode 1 steps from "
               "tile to tile: how many elements apart do the next tile down (2 rows further) and the "
               "next tile across (4 columns further) start?")


@checker("1b.3 predict a zipped_divide", DIVIDE_HINT)
def check_zipped_divide(layout) -> Result:
    """zipped_divide((8,16):(16,1), (2,4)): the layout CuTe returns, as a function."""
    intended = layouts.zipped_divide("(8,16):(16,1)", "(2,4)")
    return compare(layout, intended, "1b.3 predict a zipped_divide", DIVIDE_HINT,
                   names=("in-tile", "tile"))
