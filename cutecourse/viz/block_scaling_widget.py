"""The block-scaling widget: format, outliers and a chosen block; the tile and the error chart of
:mod:`cutecourse.viz.block_scaling` redraw, as one picture. In a notebook::

    from cutecourse.viz.block_scaling_widget import block_scaling_widget
    block_scaling_widget()  # NVFP4, outliers x1000: NVFP4's block scales alone would clip at 448
"""

from __future__ import annotations

import matplotlib.pyplot as plt  # headless (no display): matplotlib picks Agg by itself

from ..errors import ShapeError
from ..models import block_scaling as bs
from .block_scaling import TILE_FORMATS, describe_block, draw_errors, draw_tile


class BlockScalingWidget:
    """Format, outliers and a chosen block; redraws the tile and the error chart on change.

    The handler (``update``) is a plain method so tests drive it by setting control values;
    ``self.x``, ``self.text`` and ``self.png`` hold the state. The two figures are one PNG in an
    ``ipywidgets.Image``. CSS classes: ``cc-block-scaling-widget`` (root), ``cc-picture``,
    ``cc-message``, ``cc-readout`` (the block's line). The default outliers (x1000) are large
    enough that NVFP4's block scales alone would clip at e4m3's 448: the error chart shows what
    its per-tensor scale is for.
    """

    def __init__(self, fmt: str = "nvfp4", rows: int = 16, cols: int = 128, n_outliers: int = 4,
                 magnitude: float = 1000.0, row: int = 8, kblock: int = 0, seed: int = 0):
        import ipywidgets as w

        if fmt not in TILE_FORMATS:
            raise ShapeError(f"format {fmt!r}: the widget offers {', '.join(TILE_FORMATS)}",
                             "e.g. fmt='nvfp4'")
        if cols % 32 or not (1 <= rows <= 64) or not 0 <= row < rows or \
                not 0 <= kblock < cols // bs.get_format(fmt).block:
            raise ShapeError(f"a {rows}x{cols} tile, block ({row}, {kblock}): need 1..64 rows, cols a "
                             "multiple of 32, a block inside the tile", "e.g. rows=16, cols=128, row=8, kblock=0")
        if not 1 <= magnitude <= 1000:
            raise ShapeError(f"magnitude {magnitude}: the slider spans 1 to 1000", "e.g. magnitude=1000")
        self.rows, self.cols, self.seed = rows, cols, seed
        self.png: bytes = b""
        self.error: str | None = None
        self.fmt = w.Dropdown(options=list(TILE_FORMATS), value=fmt, description="format")
        self.n_outliers = w.IntSlider(value=n_outliers, min=0, max=16, description="outliers")
        self.magnitude = w.FloatLogSlider(value=magnitude, base=10, min=0, max=3, step=0.1,
                                          description="outlier x")
        self.row = w.IntSlider(value=row, min=0, max=rows - 1, description="block row")
        self.kblock = w.IntSlider(value=kblock, min=0, max=cols // 16 - 1, description="k-block")
        self.info = w.HTML()
        self.message = w.HTML()
        # align_self: a flex column would stretch the image to its width (blurry upscaling)
        self.picture = w.Image(format="png", layout=w.Layout(max_width="100%", align_self="flex-start"))
        for widget, cls in [(self.picture, "cc-picture"), (self.message, "cc-message"),
                            (self.info, "cc-readout"), (self.fmt, "cc-format"),
                            (self.magnitude, "cc-magnitude")]:
            widget.add_class(cls)
        self.fig_tile = plt.figure(figsize=(9, 4.6))
        self.fig_err = plt.figure(figsize=(9, 3.6))
        plt.close(self.fig_tile)  # rendered to the Image, not shown by pyplot
        plt.close(self.fig_err)
        for control in (self.fmt, self.n_outliers, self.magnitude, self.row, self.kblock):
            control.observe(self.update, names="value")
        self.box = w.VBox([w.HBox([self.fmt, self.n_outliers, self.magnitude]),
                           w.HBox([self.row, self.kblock]), self.message, self.info, self.picture])
        self.box.add_class("cc-block-scaling-widget")
        self.widget = self.box
        self.update()

    def update(self, change=None) -> None:
        """Rebuild the data from the controls and redraw (the handler of every control)."""
        if getattr(self, "_busy", False):  # setting kblock.max below may fire this handler again
            return
        from .picture import stacked_png
        from .widgets import show_error

        fmt = self.fmt.value
        block = bs.get_format(fmt).block
        self._busy = True
        try:
            self.kblock.max = self.cols // block - 1  # clamps the value when blocks get longer
        finally:
            self._busy = False
        try:
            x = bs.outlier_weights(self.rows, self.cols, self.seed, n_outliers=self.n_outliers.value,
                                   magnitude=float(self.magnitude.value))
            text = describe_block(x, fmt, self.row.value, self.kblock.value)
            # no numbers in the blocks: at a widget's size they would not be legible (the
            # readout gives the chosen block's)
            draw_tile(x, fmt, highlight=(self.row.value, self.kblock.value), labels=False, fig=self.fig_tile)
            draw_errors(x, fig=self.fig_err)
        except Exception as e:  # CourseError: its two lines; anything else: one line, no traceback
            show_error(self, e, "move the controls back")
            return
        self.x, self.text, self.error = x, text, None
        self.message.value = ""
        self.info.value = f"<p>{self.text}</p>"
        self.png = stacked_png([self.fig_tile, self.fig_err], dpi=66)
        self.picture.value = self.png

    def describe(self) -> str:
        return (f"BlockScalingWidget: {self.fmt.value}, {self.n_outliers.value} outliers x"
                f"{self.magnitude.value:g}, block ({self.row.value}, {self.kblock.value})")

    def _repr_mimebundle_(self, **kwargs):
        from .explorer import widget_bundle

        return widget_bundle(self.widget, self.png, self.describe())


def block_scaling_widget(**kwargs) -> BlockScalingWidget:
    """The interactive picture: ``block_scaling_widget(fmt="nvfp4", n_outliers=4, magnitude=1000)``
    (keywords: :class:`BlockScalingWidget`)."""
    return BlockScalingWidget(**kwargs)
