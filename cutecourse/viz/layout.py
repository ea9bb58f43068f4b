"""Pictures of CuTe layouts: the coordinate grid, each cell labelled with its offset.

``draw_layout("((2,2),(3,4)):((1,6),(2,12))")`` draws the table CuTe computed
(``cutecourse.layouts.evaluate``) as a grid:

* row r is coordinate r of mode 0, column c coordinate c of mode 1 (modes 1, 2, ... of a
  rank-3 layout are folded into the columns, as CuTe folds them; a rank-1 layout is one row);
* the number in a cell is the offset CuTe returned for that coordinate, and its colour is the
  offset too (dark = low address, light = high), so memory order reads as a colour gradient;
* nested modes are outlined: a mode of shape (2,2) gets a thin line every 2 rows and the
  outer frame; deeper nesting gets thinner lines, so the hierarchy is visible at a glance;
* ticks name each row and column by its natural coordinate in that mode, e.g. ``(1,0)``;
* ``arrows=True`` draws the path through offsets 0, 1, 2, ...: the order memory is read in.

Every function returns a ``matplotlib.figure.Figure`` that is already closed to pyplot, so a
notebook cell shows it exactly once (as a PNG: fine for nbval, GitHub and PDF export).
"""

from __future__ import annotations

import io
from typing import Any, Iterable, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import colors as mcolors
from matplotlib.patches import FancyArrowPatch, Rectangle

from .. import layouts
from ..layouts import LayoutTable, flatten, idx2crd, size, to_text

#: Colour map for offsets: perceptually uniform, readable in grey (PDF print), colour-blind safe.
OFFSET_CMAP = "viridis"

#: Inches per cell at the default size: labels of up to 4 digits stay readable.
CELL_INCHES = 0.46

#: The widest figure (inches) that fits a notebook column without scrolling.
MAX_WIDTH = 11.0


def _table(layout: Any, stride: Any = None) -> LayoutTable:
    return layout if isinstance(layout, LayoutTable) else layouts.evaluate(layout, stride)


def boundaries(shape: Any) -> list[tuple[int, int]]:
    """(position, level) of the lines that outline a mode's nesting.

    The leaves of the mode's shape, in order, count like digits (first leaf fastest). A line
    sits wherever a digit other than the first rolls over; its level is how many digits roll
    over there (1 = the first sub-mode, more = an outer one). A plain mode has no inner lines.
    """
    leaves = flatten(shape)
    n = size(shape)
    steps = np.cumprod(leaves)[:-1]  # block sizes of each nesting level, innermost first
    out = []
    for p in range(1, n):
        level = sum(1 for s in steps if p % s == 0)
        if level:
            out.append((p, level))
    return out


def _tick_labels(shape: Any) -> list[str]:
    """The natural coordinate of each position in a mode: '3' for plain modes, '(1,0)' nested."""
    return [to_text(idx2crd(i, shape)) for i in range(size(shape))]


def _text_colour(rgba) -> str:
    r, g, b = rgba[:3]
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"


def _tick_step(n: int, room_inches: float, per_label: float = 0.32) -> int:
    """Label every k-th row/column so tick labels do not overlap.

    A column label may be as wide as ``(1,0)`` (0.32 in); a row label only needs a line's
    height (0.15 in at the ticks' font size), so rows are labelled more densely.
    """
    k = 1
    while n / k * per_label > room_inches and k < n:
        k *= 2
    return k


def figure_size(rows: int, cols: int, cell: float = CELL_INCHES) -> tuple[float, float, float]:
    """(width, height, cell size) in inches for a grid, shrinking cells to fit MAX_WIDTH."""
    cell = min(cell, (MAX_WIDTH - 1.8) / max(cols, 1))
    width = max(cols * cell + 1.8, 4.0)
    height = max(rows * cell + 1.9, 2.6)
    return width, height, cell


def title_of(t: LayoutTable) -> str:
    """What the picture shows: the expression and, if it differs, the layout CuTe made of it."""
    if t.expr and t.expr != t.layout:
        return f"{t.expr}\n= {t.layout}"
    return f"layout {t.layout}"


def draw_layout(
    layout: Any,
    stride: Any = None,
    *,
    ax: plt.Axes | None = None,
    arrows: bool = False,
    highlight: Iterable[int] | None = None,
    selected: int | None = None,
    title: str | None = None,
    labels: str = "offset",
    cmap: str = OFFSET_CMAP,
) -> plt.Figure:
    """Draw a layout as its coordinate grid, each cell labelled and coloured by its offset.

    ``layout``: anything ``layouts.evaluate`` accepts, or a table from ``layouts`` (a divide,
    a composition, ...). ``arrows``: trace offsets 0, 1, 2, ... through the grid.
    ``highlight``: flat indices to keep in colour (the rest greyed out). ``selected``: one flat
    index to frame in red (the explorer's selected cell). ``labels``: ``"offset"`` or
    ``"index"`` (the flat index instead, to show the coordinate order).
    """
    t = _table(layout, stride)
    row_shape, col_shape = t.grid_shape
    rows, cols = size(row_shape), size(col_shape)
    grid = t.grid()

    if ax is None:
        w, h, cell = figure_size(rows, cols)
        fig, ax = plt.subplots(figsize=(w, h))
    else:
        fig = ax.figure
        bbox = ax.get_window_extent().transformed(fig.dpi_scale_trans.inverted())
        cell = min(bbox.width / cols, bbox.height / rows)

    lo, hi = int(grid.min()), int(grid.max())
    norm = mcolors.Normalize(vmin=lo, vmax=max(hi, lo + 1))
    cm = plt.get_cmap(cmap)
    rgba = cm(norm(grid))
    keep = None
    if highlight is not None:
        keep = np.zeros(t.size, dtype=bool)
        keep[list(highlight)] = True
        keep = keep.reshape((rows, cols), order="F")
        grey = np.array([0.92, 0.92, 0.92, 1.0])
        rgba[~keep] = grey
    ax.imshow(rgba, interpolation="nearest", aspect="equal")

    # Cell labels: the offset (or flat index), sized to the cell.
    index_grid = np.arange(t.size).reshape((rows, cols), order="F")
    digits = max(len(str(int(x))) for x in (grid if labels == "offset" else index_grid).ravel())
    # a digit is about 0.6 em wide: keep the longest label inside 90% of the cell
    fontsize = max(5.0, min(10.0, cell * 72 * 0.42, cell * 72 * 0.9 / (0.62 * max(digits, 2))))
    if cell >= 0.17:
        for r in range(rows):
            for c in range(cols):
                value = grid[r, c] if labels == "offset" else index_grid[r, c]
                colour = "#999999" if keep is not None and not keep[r, c] else _text_colour(rgba[r, c])
                ax.text(c, r, str(value), ha="center", va="center", fontsize=fontsize, color=colour,
                        in_layout=False)  # inside the axes anyway: keeps tight_layout fast

    # Thin lines between all cells, then the nesting outlines on top, thicker for outer levels.
    for x in range(1, cols):
        ax.axvline(x - 0.5, color="white", lw=0.6)
    for y in range(1, rows):
        ax.axhline(y - 0.5, color="white", lw=0.6)
    for p, level in boundaries(col_shape):
        ax.axvline(p - 0.5, color="black", lw=0.4 + 1.3 * level)
    for p, level in boundaries(row_shape):
        ax.axhline(p - 0.5, color="black", lw=0.4 + 1.3 * level)
    ax.add_patch(Rectangle((-0.5, -0.5), cols, rows, fill=False, lw=2.6, color="black"))

    if selected is not None:
        frame_cell(ax, selected % rows, selected // rows)

    if arrows:
        _draw_offset_path(ax, t, rows)

    # Ticks: natural coordinates along each mode; column ticks on top, like a matrix printout.
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    cstep = _tick_step(cols, cols * cell)
    rstep = _tick_step(rows, rows * cell, per_label=0.15)
    ax.set_xticks(range(0, cols, cstep))
    ax.set_yticks(range(0, rows, rstep))
    small = max(6.0, min(9.0, fontsize))
    if t.rank == 1:
        ax.set_xticklabels(_tick_labels(col_shape)[::cstep], fontsize=small)
        ax.set_yticks([])
        ax.set_xlabel(f"mode 0: shape {to_text(col_shape)}", fontsize=9)
    else:
        xl = _tick_labels(col_shape)[::cstep]
        ax.set_xticklabels(xl, fontsize=small, rotation=90 if max(map(len, xl)) > 3 else 0)
        ax.set_yticklabels(_tick_labels(row_shape)[::rstep], fontsize=small)
        cname = "mode 1" if t.rank == 2 else f"modes 1..{t.rank - 1}"
        ax.set_xlabel(f"{cname}: shape {to_text(col_shape)}", fontsize=9)
        ax.set_ylabel(f"mode 0: shape {to_text(row_shape)}", fontsize=9)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)

    what = "offset" if labels == "offset" else "flat index"
    note = f"number = {what}, colour = offset (dark = low address)"
    if not t.is_injective:
        note += "; some offsets repeat (stride 0 or overlap)"
    ax.set_title(title if title is not None else title_of(t), fontsize=11, pad=8)
    ax.text(0.0, -0.02, note, transform=ax.transAxes, ha="left", va="top", fontsize=8, color="#444444")
    fig.tight_layout()
    plt.close(fig)  # shown once, by the notebook displaying the returned figure
    return fig


def frame_cell(ax: plt.Axes, row: int, col: int) -> Rectangle:
    """Frame one grid cell in red (the selected cell); move it later with ``set_xy``."""
    return ax.add_patch(Rectangle((col - 0.5, row - 0.5), 1, 1, fill=False, lw=3, color="#e8112d",
                                  gid="selected-cell"))


def _draw_offset_path(ax: plt.Axes, t: LayoutTable, rows: int, max_steps: int = 64) -> None:
    """Arrows from the cell of offset k to the cell of offset k+1, for k = 0, 1, ..."""
    where: dict[int, int] = {}
    for i, off in enumerate(t.offsets):
        where.setdefault(off, i)  # first coordinate holding that offset
    lo = min(t.offsets)
    steps = 0
    for k in range(lo, lo + t.cosize):
        if steps >= max_steps:
            break
        if k in where and k + 1 in where:
            a, b = where[k], where[k + 1]
            (ra, ca), (rb, cb) = (a % rows, a // rows), (b % rows, b // rows)
            ax.add_patch(FancyArrowPatch((ca, ra), (cb, rb), arrowstyle="-|>", mutation_scale=9,
                                         color="#e8112d", lw=1.2, shrinkA=6, shrinkB=6, alpha=0.85,
                                         connectionstyle="arc3,rad=0.15"))
            steps += 1


def draw_slice(table: LayoutTable, **kw: Any) -> plt.Figure:
    """A slice drawn inside the layout it came from: the cells it keeps in colour, the rest grey."""
    if table.parent is None:
        return draw_layout(table, **kw)
    title = kw.pop("title", None) or (f"{table.expr} = {table.layout}\n"
                                      f"(starts at offset {table.base} of the parent)")
    return draw_layout(table.parent, highlight=table.selected, title=title, **kw)


def draw_layouts(items: Sequence[Any], *, titles: Sequence[str] | None = None, **kw: Any) -> plt.Figure:
    """Several layouts side by side (e.g. a layout and its divide), each as ``draw_layout``."""
    tables = [_table(x) for x in items]
    sizes = [figure_size(size(t.grid_shape[0]), size(t.grid_shape[1])) for t in tables]
    width = min(sum(s[0] for s in sizes), MAX_WIDTH * 1.3)
    height = max(s[1] for s in sizes)
    fig, axes = plt.subplots(1, len(tables), figsize=(width, height),
                             gridspec_kw={"width_ratios": [s[0] for s in sizes]})
    axes = np.atleast_1d(axes)
    for k, (t, ax) in enumerate(zip(tables, axes)):
        draw_layout(t, ax=ax, title=titles[k] if titles else None, **kw)
    fig.tight_layout()
    plt.close(fig)
    return fig


def to_png(fig: plt.Figure, dpi: int = 100) -> bytes:
    """The figure as PNG bytes (for an ipywidgets.Image, or to save)."""
    buf = io.BytesIO()
    # The figures are laid out already (tight_layout); bbox_inches="tight" would draw them twice.
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()
