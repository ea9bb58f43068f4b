"""An interactive layout explorer for plain JupyterLab (ipywidgets only, no extensions).

``LayoutExplorer()`` shows, top to bottom:

* the layout, typed as text (``((2,2),(3,4)):((1,6),(2,12))``) or set with four sliders for a
  plain rank-2 layout (rows, columns, row stride, column stride: moving one rewrites the text);
* an operation applied to it: none, ``composition`` with a second layout, ``logical_divide`` /
  ``zipped_divide`` / ``tiled_divide`` by a tiler, or a slice such as ``(None,1)``;
* the picture of the result (``viz.layout.draw_layout``, rendered to a PNG image widget, so it
  needs no matplotlib widget backend) with the selected cell framed in red;
* a cell selector: a grid of buttons coloured like the picture (layouts up to 256 cells) and
  row/column sliders, with a readout ``coordinate ... · flat index ... · offset ...``.

Everything is computed by CuTe (``cutecourse.layouts``). Bad input (mismatched brackets, an
extent of 0, a tile that does not divide, a composition CuTe refuses) shows the error's two
lines in the widget; the picture keeps the last good layout.

The handlers are plain methods (``set_layout``, ``set_op``, ``select``, ``update``) so tests and
notebooks can drive the widget without a browser. Controls carry CSS classes
(``cc-explorer``, ``cc-layout-text``, ``cc-op``, ``cc-operand``, ``cc-picture``,
``cc-message``, ``cc-readout``, ``cc-cells``) for browser tests.
"""

from __future__ import annotations

import contextlib
import html
import re
from typing import Any

import ipywidgets as w
import matplotlib.colors as mcolors
import matplotlib.pyplot as plt

from .. import layouts
from ..errors import CourseError
from ..layouts import LayoutTable, size, to_text
from .layout import OFFSET_CMAP, draw_layout, draw_slice, frame_cell, to_png
from .widgets import error_html, widget_bundle  # noqa: F401 (widget_bundle: re-exported)

#: Operation name -> (what the second field means, an example for it).
OPERATIONS = {
    "none": ("", ""),
    "composition": ("second layout B (shows A o B)", "(4,2):(2,1)"),
    "logical_divide": ("tiler", "(2,2)"),
    "zipped_divide": ("tiler", "(2,2)"),
    "tiled_divide": ("tiler", "(2,2)"),
    "slice": ("coordinate, None keeps a mode", "(None,1)"),
}

#: The clickable cell grid is drawn for layouts up to this many cells (buttons are heavy).
MAX_BUTTONS = 256

_PLAIN_RANK2 = re.compile(r"^\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)\s*:\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)\s*$")


def compute(layout: str, op: str = "none", operand: str = "") -> LayoutTable:
    """The table an (layout, operation, operand) choice produces; LayoutError if it cannot."""
    if op == "none":
        return layouts.evaluate(layout)
    if not operand.strip():
        raise layouts.LayoutError(f"{op} needs a second input: the {OPERATIONS[op][0]}",
                                  f"type one, e.g. {OPERATIONS[op][1]}")
    if op == "composition":
        return layouts.composition(layout, operand)
    if op in layouts.DIVIDES:
        return layouts.DIVIDES[op](layout, operand)
    if op == "slice":
        return layouts.slice_(layout, operand)
    raise layouts.LayoutError(f"unknown operation {op!r}", f"choose one of {', '.join(OPERATIONS)}")


class LayoutExplorer:
    """Type or slide a layout, apply an operation, click a cell. Display it to use it."""

    def __init__(self, layout: str = "(4,8):(8,1)", op: str = "none", operand: str = "",
                 arrows: bool = False):
        self.table: LayoutTable | None = None  # the result of the operation
        self.shown: LayoutTable | None = None  # what the picture draws (a slice's parent)
        self.error: str | None = None
        self.png: bytes = b""
        self.selected: tuple[int, int] = (0, 0)
        self._quiet_depth = 0  # > 0 while the explorer sets its own controls

        style = {"description_width": "80px"}
        self.layout_text = w.Text(value=layout, description="layout", continuous_update=False,
                                  layout=w.Layout(width="420px"), style=style)
        self.rows = w.IntSlider(4, min=1, max=16, description="rows", style=style)
        self.cols = w.IntSlider(8, min=1, max=16, description="columns", style=style)
        self.row_stride = w.IntSlider(8, min=0, max=64, description="row stride", style=style)
        self.col_stride = w.IntSlider(1, min=0, max=64, description="col stride", style=style)
        self.op = w.Dropdown(options=list(OPERATIONS), value=op, description="operation", style=style)
        self.operand = w.Text(value=operand, description="with", continuous_update=False,
                              layout=w.Layout(width="420px"), style=style)
        self.arrows = w.Checkbox(value=arrows, description="arrows through offsets 0, 1, 2, ... (memory order)",
                                  indent=False, layout=w.Layout(width="420px"))
        # align_self: a flex column would stretch the image to its width (blurry upscaling)
        self.picture = w.Image(format="png", layout=w.Layout(max_width="100%", align_self="flex-start"))
        self.message = w.HTML()
        self.readout = w.HTML()
        self.cell_row = w.IntSlider(0, min=0, max=0, description="cell row", style=style)
        self.cell_col = w.IntSlider(0, min=0, max=0, description="cell column", style=style)
        # One HBox per row of buttons: a row stays a row where JupyterLab, showing a notebook not
        # run yet, puts a "disconnected" icon in each container (in one grid it took a cell's slot).
        # Buttons are "auto" wide, at least 44px, so that icon does not truncate their numbers.
        self.cells = w.VBox(layout=w.Layout(grid_gap="1px"))
        self.buttons: list[w.Button] = []  # row-major, as the picture's cells

        for widget, cls in [(self.layout_text, "cc-layout-text"), (self.op, "cc-op"),
                            (self.operand, "cc-operand"), (self.picture, "cc-picture"),
                            (self.message, "cc-message"), (self.readout, "cc-readout"),
                            (self.cells, "cc-cells"), (self.rows, "cc-rows"), (self.cols, "cc-cols"),
                            (self.row_stride, "cc-row-stride"), (self.col_stride, "cc-col-stride")]:
            widget.add_class(cls)

        self.layout_text.observe(lambda ch: self.update(), names="value")
        self.operand.observe(lambda ch: self.update(), names="value")
        self.op.observe(self._on_op, names="value")
        self.arrows.observe(lambda ch: self.update(), names="value")
        for s in (self.rows, self.cols, self.row_stride, self.col_stride):
            s.observe(self._on_slider, names="value")
        self.cell_row.observe(self._on_cell_slider, names="value")
        self.cell_col.observe(self._on_cell_slider, names="value")

        sliders = w.VBox([w.HTML("<b>or slide a plain rank-2 layout</b>"),
                          w.HBox([self.rows, self.row_stride]), w.HBox([self.cols, self.col_stride])])
        self.widget = w.VBox([
            self.layout_text, sliders, w.HBox([self.op, self.operand]), self.arrows,
            self.message, self.picture,
            w.HTML("<b>pick a cell</b> (click, or use the sliders)"), self.cells,
            w.HBox([self.cell_row, self.cell_col]), self.readout,
        ])
        self.widget.add_class("cc-explorer")
        self._sync_sliders()
        self._update_operand_hint()
        self.update()

    # ---- handlers (called by the widgets; call them directly in tests) ----------------------
    def set_layout(self, text: str) -> None:
        self.layout_text.value = text  # observers call update()

    def set_op(self, op: str, operand: str | None = None) -> None:
        """Choose the operation (and its second input) and redraw once."""
        with self._quiet():
            self.op.value = op
            self.operand.value = operand if operand is not None else OPERATIONS[op][1]
        self._update_operand_hint()
        self.update()

    @property
    def _syncing(self) -> bool:
        return self._quiet_depth > 0

    @contextlib.contextmanager
    def _quiet(self):
        """Change controls without their observers redrawing (we redraw once afterwards)."""
        self._quiet_depth += 1
        try:
            yield
        finally:
            self._quiet_depth -= 1

    def _on_op(self, change: dict) -> None:
        if self._syncing:
            return
        self._update_operand_hint()
        # A tiler, a second layout and a slice coordinate are different things: start the new
        # operation from its example rather than from the last one's input.
        with self._quiet():  # one update below, not two
            self.operand.value = OPERATIONS[self.op.value][1]
        self.update()

    def _update_operand_hint(self) -> None:
        what, example = OPERATIONS[self.op.value]
        self.operand.placeholder = f"{what}, e.g. {example}" if what else "(not used)"
        self.operand.disabled = self.op.value == "none"

    def _on_slider(self, change: dict) -> None:
        if self._syncing:
            return
        self.layout_text.value = (f"({self.rows.value},{self.cols.value}):"
                                  f"({self.row_stride.value},{self.col_stride.value})")

    def _sync_sliders(self) -> None:
        """Typed text that is a plain rank-2 layout moves the sliders to match."""
        m = _PLAIN_RANK2.match(self.layout_text.value)
        if not m:
            return
        vals = [int(x) for x in m.groups()]
        sliders = (self.rows, self.cols, self.row_stride, self.col_stride)
        if all(s.min <= v <= s.max for s, v in zip(sliders, vals)):
            with self._quiet():
                for s, v in zip(sliders, vals):
                    s.value = v

    def _on_cell_slider(self, change: dict) -> None:
        if not self._syncing:
            self.select(self.cell_row.value, self.cell_col.value)

    def update(self) -> None:
        """Recompute from the controls and redraw; errors go to the message line."""
        if self._syncing:
            return
        self._sync_sliders()
        try:
            table = compute(self.layout_text.value, self.op.value, self.operand.value)
        except CourseError as e:
            self._show_error(e.what, e.fix)
            return
        except Exception as e:  # never a traceback in the widget
            self._show_error(f"{type(e).__name__}: {e}", "check the layout and the operation's input")
            return
        self.error = None
        self.message.value = ""
        self.table = table
        self.shown = table.parent if table.parent is not None else table
        rows, cols = (size(s) for s in self.shown.grid_shape)
        with self._quiet():
            self.cell_row.max, self.cell_col.max = rows - 1, cols - 1
        r, c = min(self.selected[0], rows - 1), min(self.selected[1], cols - 1)
        self._build_buttons()
        self.select(r, c)

    def select(self, row: int, col: int) -> None:
        """Select grid cell (row, col): readout, red frame in the picture, sliders in step."""
        if self.shown is None:
            return
        try:
            coord, index, offset = self.shown.cell(row, col)
        except CourseError as e:
            self._show_error(e.what, e.fix)
            return
        self.selected = (row, col)
        with self._quiet():
            self.cell_row.value, self.cell_col.value = row, col
        text = f"coordinate <b>{to_text(coord)}</b> · flat index <b>{index}</b> · offset <b>{offset}</b>"
        t = self.table
        if t is not None and t.parent is not None:
            if index in t.selected:
                k = t.selected.index(index)
                text += (f"<br>in the slice {html.escape(t.layout)}: coordinate "
                         f"<b>{to_text(t.coords[k])}</b> -> {t.offsets[k]}, plus the slice's start "
                         f"{t.base} = <b>{t.base + t.offsets[k]}</b>")
            else:
                text += "<br>(not in the slice)"
        self.readout.value = text
        self._redraw()
        for i, b in enumerate(self.buttons):
            b.style.font_weight = "bold" if i == row * _cols(self.shown) + col else ""
            b.icon = "check" if i == row * _cols(self.shown) + col else ""

    # ---- drawing -------------------------------------------------------------------------
    def _redraw(self) -> None:
        """Render the picture with the selected cell framed.

        The figure of one (result, arrows) choice is kept and only its red frame moves when the
        selection changes: rendering is the slow part (about 1 ms per labelled cell).
        """
        t = self.table
        key = (t.expr, t.layout, self.arrows.value)
        if getattr(self, "_fig_key", None) != key:
            if t.parent is not None:
                fig = draw_slice(t, arrows=self.arrows.value)
            else:
                fig = draw_layout(t, arrows=self.arrows.value)
            self._fig, self._fig_key = fig, key
            self._frame = frame_cell(fig.axes[0], *self.selected)
        self._frame.set_xy((self.selected[1] - 0.5, self.selected[0] - 0.5))
        self.png = to_png(self._fig, dpi=90)
        self.picture.value = self.png

    def _build_buttons(self) -> None:
        t = self.shown
        rows, cols = (size(s) for s in t.grid_shape)
        if rows * cols > MAX_BUTTONS:
            self.buttons = []
            self.cells.children = ()
            self.cells.layout.display = "none"
            return
        grid = t.grid()
        norm = mcolors.Normalize(vmin=int(grid.min()), vmax=max(int(grid.max()), int(grid.min()) + 1))
        cm = plt.get_cmap(OFFSET_CMAP)
        self.buttons = []
        # one Layout model shared by every button: a stored notebook keeps one copy, not 64
        button_layout = w.Layout(width="auto", min_width="44px", height="26px", padding="0px 4px")
        for r in range(rows):
            for c in range(cols):
                rgba = cm(norm(grid[r, c]))
                light = 0.299 * rgba[0] + 0.587 * rgba[1] + 0.114 * rgba[2] > 0.5
                b = w.Button(description=str(grid[r, c]), tooltip=f"row {r}, column {c}",
                             layout=button_layout)
                b.style.button_color = mcolors.to_hex(rgba)
                b.style.text_color = "black" if light else "white"
                b.on_click(lambda _b, r=r, c=c: self.select(r, c))
                self.buttons.append(b)
        row_layout = w.Layout(flex_flow="row nowrap", grid_gap="1px")
        self.cells.children = [w.HBox(self.buttons[r * cols:(r + 1) * cols], layout=row_layout)
                               for r in range(rows)]
        self.cells.layout.display = "flex"

    def _show_error(self, what: str, fix: str) -> None:
        self.error = what if not fix else f"{what}\n-> {fix}"
        self.message.value = error_html(what, fix)

    def _repr_mimebundle_(self, **kwargs: Any) -> dict:
        return widget_bundle(self.widget, self.png, f"LayoutExplorer: {self.describe()}")

    def describe(self) -> str:
        """One line: what is shown (the notebook's text output, stable for nbval)."""
        if self.table is None:
            return f"(no layout yet) {self.error or ''}"
        return f"{self.table.expr} = {self.table.layout}"


def _cols(t: LayoutTable) -> int:
    return size(t.grid_shape[1])


def explore(layout: str = "(4,8):(8,1)", op: str = "none", operand: str = "") -> LayoutExplorer:
    """Make a :class:`LayoutExplorer` (display it, or leave it as a cell's last expression)."""
    return LayoutExplorer(layout, op, operand)
