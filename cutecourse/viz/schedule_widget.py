"""The kernel-schedule widget: pick a problem, a tile and schedules; see where the tensor cores
wait (:mod:`cutecourse.viz.schedules`' pictures of :mod:`cutecourse.models.schedules`) and how far
the model is from the H100 (:mod:`cutecourse.models.schedule_calibration`)."""

from __future__ import annotations

from ..errors import CourseError
from ..models import schedules as sm
from .schedules import SHAPES, TILES, clock_mhz, draw_timelines, draw_waves, tile_owner


class ScheduleWidget:
    """Pick M, N, K (or an LLM shape), a tile and schedules; the timelines and a table redraw.

    Below the picture, the model against the H100 (``models.schedule_calibration``): for a shape in
    the committed fixed-clock table, ping-pong / cooperative measured and modelled and the model's
    error; for any other shape, how far off the model is on the measured ones. Callbacks are plain
    methods, so tests drive it without a browser (``render=False`` skips the picture). In a
    notebook the object displays itself: the live widget in JupyterLab, its PNG elsewhere. CSS
    classes: ``cc-schedule-widget`` (root), ``cc-picture`` (the Image), ``cc-message`` (errors),
    ``cc-accuracy`` (model vs H100), ``cc-table``.
    """

    PRESETS = {"custom": None, **{f"LLM {m}x{n}x{k}": (m, n, k) for m, n, k in sm.LLM_SHAPES}}
    VIEWS = ("first tiles", "whole run", "waves")

    def __init__(self, m: int = 4096, n: int = 4096, k: int = 4096, tile=(128, 256, 64),
                 schedules=sm.SCHEDULES, render: bool = True, view: str = "first tiles"):
        import ipywidgets as w

        for name, v in (("M", m), ("N", n), ("K", k)):
            if v not in SHAPES:
                raise CourseError(f"{name} = {v} is not one of the widget's sizes {SHAPES}",
                                  "pick one of them, or call models.schedules.simulate for any shape")
        if tuple(tile) not in TILES or view not in self.VIEWS:
            raise CourseError(f"tile {tile} / view {view!r}: the widget offers tiles {TILES} and "
                              f"views {self.VIEWS}", "e.g. tile=(128, 256, 64), view='first tiles'")
        self._render_enabled = render
        self._quiet = False
        self.png: bytes = b""
        self.error: str | None = None
        self.preset = w.Dropdown(options=list(self.PRESETS), value="custom", description="shape")
        self.m, self.n, self.k = (w.Dropdown(options=SHAPES, value=v, description=d, layout=w.Layout(width="160px"))
                                  for v, d in ((m, "M"), (n, "N"), (k, "K")))
        self.tile = w.Dropdown(options=[(f"{a}x{b}x{c}", (a, b, c)) for a, b, c in TILES], value=tuple(tile),
                               description="tile")
        self.schedules = w.SelectMultiple(options=[(sm.TITLES[s], s) for s in sm.SCHEDULES],
                                          value=tuple(schedules), description="schedules", rows=4)
        self.view = w.ToggleButtons(options=list(self.VIEWS), value=view, description="show",
                                    tooltips=["about three tiles per MMA row on SMs 0 and 1", "SMs 0 and 1, "
                                              "start to end", "every SM's tiles, coloured by wave"])
        # align_self: a flex column would stretch the image to its width (blurry upscaling)
        self.picture = w.Image(format="png", layout=w.Layout(max_width="100%", align_self="flex-start"))
        self.message = w.HTML()
        self.accuracy = w.HTML()
        self.table = w.HTML()
        for widget, cls in [(self.picture, "cc-picture"), (self.message, "cc-message"),
                            (self.accuracy, "cc-accuracy"), (self.table, "cc-table"),
                            (self.preset, "cc-preset"), (self.view, "cc-view")]:
            widget.add_class(cls)
        self.preset.observe(self._on_preset, names="value")
        for c in (self.m, self.n, self.k):
            c.observe(self._on_shape, names="value")
        for c in (self.tile, self.schedules, self.view):
            c.observe(self.redraw, names="value")
        # rows no wider than a notebook's default column (~670 px): shape + tile, then M N K
        self.widget = w.VBox([w.HBox([self.preset, self.tile]), w.HBox([self.m, self.n, self.k]),
                              self.schedules, self.view, self.message, self.picture, self.table, self.accuracy])
        self.widget.add_class("cc-schedule-widget")
        self.results: dict = {}
        self._sync_preset()
        self.redraw()

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.m.value, self.n.value, self.k.value

    def _on_preset(self, change=None) -> None:
        shape = self.PRESETS[self.preset.value]
        if self._quiet or shape is None:
            return
        self._quiet = True  # one redraw, not three
        try:
            self.m.value, self.n.value, self.k.value = shape
        finally:
            self._quiet = False
        self.redraw()

    def _on_shape(self, change=None) -> None:
        if self._quiet:
            return
        self._sync_preset()
        self.redraw()

    def _sync_preset(self) -> None:
        """A shape typed by hand shows the preset it equals, or "custom" (never a stale name)."""
        name = next((p for p, shape in self.PRESETS.items() if shape == self.shape), "custom")
        self._quiet = True
        try:
            self.preset.value = name
        finally:
            self._quiet = False

    def redraw(self, change=None) -> None:
        if self._quiet:
            return
        from ..models import schedule_calibration as cal
        from .picture import error_html
        from .widgets import show_error

        chosen = self.schedules.value or ("cooperative",)
        try:
            self.results = sm.simulate_all(*self.shape, tile=self.tile.value, schedules=chosen)
        except CourseError as e:  # keep the last good picture, say what is wrong
            show_error(self, e, "")
            return
        self.error = None
        # nothing selected is not an error, but the picture must say what it shows
        self.message.value = "" if self.schedules.value else error_html(
            "no schedule is selected: the picture shows the cooperative one",
            "ctrl-click (cmd-click on a Mac) the schedules to compare")
        if self.view.value == "waves" and len(self.results) > 1:
            self.message.value = (f"<i>The waves view draws one schedule, the first selected "
                                  f"({next(iter(self.results.values())).name}); pick another view to "
                                  "compare them.</i>")
        best = max(r.tflops for r in self.results.values())
        rows = "".join(
            f"<tr><td>{r.name}</td><td>{tile_owner(r)}</td><td>{r.total_us:.1f}</td>"
            f"<td>{'<b>' if r.tflops == best else ''}{r.tflops:.0f}</td><td>{r.waves:.2f}</td>"
            f"<td>{r.exposed_epilogue_us():.1f}</td><td>{r.exposed_prologue_us():.1f}</td>"
            f"<td>{r.stall_us():.1f}</td><td>{r.handover_us():.1f}</td></tr>"
            for r in self.results.values())
        mhz = clock_mhz(next(iter(self.results.values())))
        self.table.value = (f"<table><tr><th>schedule</th><th>tile</th><th>µs at {mhz} MHz</th>"
                            f"<th>TFLOP/s at {mhz} MHz</th>"
                            "<th>waves</th><th colspan=4>µs per SM the tensor cores wait for: epilogue / "
                            f"prologue / loads / hand-over</th></tr>{rows}</table>")
        self.accuracy.value = "<br>".join([f"<b>model vs H100</b> (the table above is the model at {mhz} "
                                           "MHz, the H100's boost clock; here the model runs at each "
                                           "measurement's own fixed clock. At the 700 W cap the H100 "
                                           "clocks lower, ping-pong 5-9% lower than cooperative):"]
                                          + cal.error_lines(self.shape, self.tile.value))
        if not self._render_enabled:
            return
        import matplotlib.pyplot as plt

        from .picture import stacked_png

        if self.view.value == "waves":
            fig = draw_waves(next(iter(self.results.values()))).figure
        else:
            fig = draw_timelines(self.results, sms=(0, 1), window="all" if self.view.value == "whole run" else None)
        self.png = stacked_png([fig], dpi=80)  # row labels ~7 px tall: readable
        plt.close(fig)
        self.picture.value = self.png

    def describe(self) -> str:
        m, n, k = self.shape
        t = self.tile.value
        return (f"ScheduleWidget: {m}x{n}x{k}, tile {t[0]}x{t[1]}x{t[2]}, "
                f"{', '.join(self.schedules.value)}; view {self.view.value}")

    def show(self):
        return self.widget

    def _repr_mimebundle_(self, **kwargs):
        from .explorer import widget_bundle

        return widget_bundle(self.widget, self.png, self.describe())


def schedule_widget(**kw) -> ScheduleWidget:
    """``schedule_widget()`` in a notebook cell: controls, the timelines, the model's error and a
    table (:class:`ScheduleWidget`; keywords as its constructor)."""
    return ScheduleWidget(**kw)
