"""Pictures and a stepping widget for the smem pipeline of the Hopper GEMM.

``draw_state(event)`` draws one moment of a :class:`~cutecourse.models.pipeline.Trace`: the ring
of shared-memory stages (what each holds and whether it is empty, loading, full, being read by
the tensor cores, or read and waiting for release), each stage's ``full`` and ``empty``
mbarrier (phase bit, arrivals still expected, bytes still expected), and where the producer's
and the consumer's (count, index, phase) point. ``picture(...)`` puts a few moments side by side
(a static figure, for GitHub and nbval); :class:`PipelineWidget` steps through every event with
controls for the variant, stages, k-tiles and prefetch depth.
"""

from __future__ import annotations

from ..errors import CourseError, ShapeError
from ..models import pipeline as pm
from . import widgets

#: Stage status -> colour (white: free; amber: TMA bytes on their way; green: ready to read;
#: blue: the tensor cores are reading it; pale blue: read, waiting for consumer_release).
STATUS_COLORS = {
    "empty": "#ffffff",
    "loading": "#ffd54f",
    "full": "#81c784",
    "consuming": "#42a5f5",
    "consumed": "#bbdefb",
}
PRODUCER_COLOR, CONSUMER_COLOR = "#e65100", "#1565c0"
#: Title colours of a moment: red only where the run can never go on.
WAIT_COLOR = "#455a64"  # an ordinary wait: blue-grey, the pipeline doing its job
DEADLOCK_COLOR = "#c62828"  # a wait nothing will ever satisfy


def draw_state(event: pm.Event, ax=None, title: str | None = None):
    """Draw one event's snapshot of the ring onto ``ax`` (a new figure if None)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, Rectangle

    n = len(event.stages)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(5.0, 1.5 * n + 1.5), 3.3))
    ax.set_xlim(-1.3, n + 0.1)
    ax.set_ylim(-2.2, 2.15)
    ax.axis("off")
    for i, st in enumerate(event.stages):
        ax.add_patch(Rectangle((i + 0.05, 0), 0.9, 1, facecolor=STATUS_COLORS.get(st.status, "#eee"),
                               edgecolor="black", linewidth=1.2))
        label = st.status if st.tile is None else f"k-tile {st.tile}\n{st.status}"
        if st.status == "empty" and st.tile is not None:
            label = f"(k-tile {st.tile})\nempty"
        ax.text(i + 0.5, 0.5, label, ha="center", va="center", fontsize=8)
        ax.text(i + 0.5, 1.05, f"stage {i}", ha="center", va="bottom", fontsize=8)
        for row, bar in ((-0.42, event.full[i]), (-0.95, event.empty[i])):
            tx = f"\n+{bar.tx / 1024:g} KiB" if bar.tx else ""
            ax.text(i + 0.5, row, f"ph {bar.phase} need {bar.pending}{tx}", ha="center",
                    va="center", fontsize=6.5, family="monospace",
                    bbox=dict(boxstyle="round,pad=0.2", facecolor="#f5f5f5", edgecolor="#9e9e9e"))
    ax.text(-0.05, -0.45, "full", ha="right", va="center", fontsize=8)
    ax.text(-0.05, -0.95, "empty", ha="right", va="center", fontsize=8)
    ax.text(-0.05, 0.5, "smem\nring", ha="right", va="center", fontsize=8)

    def pointer(state, y, color, who):
        if state is None:
            return
        count, index, phase = state
        x = index + 0.5
        start, end = (x, y), (x, 1.35 if y > 0 else -1.25)
        ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=10, color=color))
        ax.text(x, y + (0.12 if y > 0 else -0.12), f"{who} (count {count}, idx {index}, ph {phase})",
                ha="center", va="bottom" if y > 0 else "top", fontsize=7.5, color=color)

    pointer(event.producer, 1.75, PRODUCER_COLOR, "producer")
    pointer(event.consumer, -1.65, CONSUMER_COLOR, "consumer")
    head = title if title is not None else f"t={event.time:.0f}  {event.actor}: {event.text}"
    # Red only for a wait nothing will ever satisfy; an ordinary wait is the pipeline at work.
    color = {"deadlock": DEADLOCK_COLOR, "blocked": WAIT_COLOR}.get(event.op, "black")
    ax.set_title(head, fontsize=9, color=color)
    return ax


def picture(variant: str = "prefetch", stages: int = 4, k_tiles: int = 8, prefetch: int | None = None,
            steps: list[int] | None = None, ops: tuple[str, ...] = ("consumer_wait",), columns: int = 2):
    """Several moments of one run, side by side: a static figure for a notebook or a README.

    ``steps``: event indices to draw; default: the events whose op is in ``ops`` for the first
    few k-tiles (and the deadlock, if the run has one).
    """
    import matplotlib.pyplot as plt

    trace = pm.simulate(variant, stages, k_tiles, prefetch)
    if steps is None:
        steps = [i for i, e in enumerate(trace.events) if e.op in ops and e.actor == "program"][:4]
        if trace.deadlock:
            steps = steps[:3] + [len(trace.events) - 1]
    if not steps:
        raise CourseError("no events to draw", "pass steps=[...] or other ops=(...)")
    columns = min(columns, len(steps))  # a run that deadlocks at once is one panel, not half a figure
    rows = (len(steps) + columns - 1) // columns
    fig, axes = plt.subplots(rows, columns, figsize=(columns * max(4.2, 1.1 * stages + 1.2), 2.7 * rows),
                             squeeze=False)
    for ax, i in zip(axes.flat, steps):
        e = trace.events[i]
        draw_state(e, ax, title=f"step {i}: {e.text}")
    for ax in list(axes.flat)[len(steps):]:
        ax.axis("off")
    what = "DEADLOCKS" if trace.deadlock else f"{k_tiles} k-tiles"
    fig.suptitle(f"{variant}: {stages} stages, prefetch {trace.prefetch}, {what}", fontsize=11)
    fig.tight_layout()
    return fig


def legend_text() -> str:
    return ("stage colours: white empty · amber loading (TMA in flight) · green full · "
            "blue being read by WGMMA · pale blue read, not yet released.  "
            "'ph' = barrier phase bit, 'need' = arrivals still expected, '+N KiB' = bytes still expected; "
            "when a phase completes the counters re-arm for the next one, so a full stage's "
            "'ph 1 need 1' is the next phase still waiting, not this one.")


class PipelineWidget:
    """Step through a mainloop, one event at a time.

    Controls: variant, stages, k-tiles, prefetch depth (recompute the run) and a step slider
    with previous/next buttons; the picture is :func:`draw_state` of the chosen step. The
    prefetch depth follows the ring: its slider ends at ``stages`` (a depth of ``stages`` is
    the deadlock the notebook asks about). The widget remembers the depth the learner chose:
    a ring too small for it gets the deepest depth that fits (``stages - 1``), and a ring
    grown back gets the chosen depth again, so moving only the stages slider never leaves a
    deadlock behind. The naive loop, which prefetches nothing, greys the slider out. A run that deadlocks says so, and why, at every step. Display the object (it is a
    course widget: :mod:`cutecourse.viz.widgets`); the callbacks are plain methods, so tests
    drive them without a browser (``render=False`` skips the picture).

    CSS classes: ``cc-pipeline-widget`` (root), ``cc-variant``, ``cc-stages``, ``cc-k-tiles``,
    ``cc-prefetch``, ``cc-step``, ``cc-prev``, ``cc-next``, ``cc-picture``, ``cc-readout``,
    ``cc-message``.
    """

    def __init__(self, variant: str = "prefetch", stages: int = 4, k_tiles: int = 8,
                 prefetch: int | None = None, render: bool = True):
        import ipywidgets as w

        if variant not in pm.VARIANTS:
            raise CourseError(f"unknown variant {variant!r}", f"use one of {list(pm.VARIANTS)}")
        for name, value, hi in (("stages", stages, 8), ("k_tiles", k_tiles, 24)):
            if not isinstance(value, int) or not 1 <= value <= hi:
                raise ShapeError(f"{name}={value!r}: the widget offers 1 to {hi}",
                                    f"pass {name}=1..{hi}")
        depth = max(stages - 1, _min_depth(variant)) if prefetch is None else prefetch
        if not isinstance(depth, int) or not _min_depth(variant) <= depth <= stages:
            raise ShapeError(f"prefetch={prefetch!r} with {stages} stages: the {variant} loop takes "
                                f"{_min_depth(variant)} to {stages}",
                                f"pass prefetch={max(stages - 1, _min_depth(variant))} (the deepest that "
                                f"fits), or {stages} to see the deadlock")

        self._render_enabled = render
        self._chosen = depth  # the depth the learner asked for (moving stages never changes it)
        self._quiet = 0  # > 0 while the widget sets its own controls
        self.png = b""
        self.variant = w.Dropdown(options=list(pm.VARIANTS), value=variant, description="variant")
        self.stages = w.IntSlider(value=stages, min=1, max=8, description="stages")
        self.k_tiles = w.IntSlider(value=k_tiles, min=1, max=24, description="k-tiles")
        self.prefetch = w.IntSlider(value=depth, min=_min_depth(variant), max=stages,
                                    description="prefetch")
        self.step = w.IntSlider(value=0, min=0, max=0, description="step", continuous_update=False)
        self.prev_button = w.Button(description="◀ prev", layout=w.Layout(width="auto", min_width="80px"))
        self.next_button = w.Button(description="next ▶", layout=w.Layout(width="auto", min_width="80px"))
        self.picture = widgets.picture()
        self.message = widgets.message()
        self.status = w.HTML()
        self.widget = w.VBox([
            w.HBox([self.variant, self.stages]), w.HBox([self.k_tiles, self.prefetch]),
            w.HBox([self.prev_button, self.step, self.next_button]),
            self.message, self.picture, self.status, w.HTML(f"<small>{legend_text()}</small>")])
        widgets.tag((self.widget, "cc-pipeline-widget"), (self.variant, "cc-variant"),
                    (self.stages, "cc-stages"), (self.k_tiles, "cc-k-tiles"),
                    (self.prefetch, "cc-prefetch"), (self.step, "cc-step"),
                    (self.prev_button, "cc-prev"), (self.next_button, "cc-next"),
                    (self.status, "cc-readout"))
        self.variant.observe(self._on_variant, names="value")
        self.stages.observe(self._on_stages, names="value")
        self.k_tiles.observe(self._on_config, names="value")
        self.prefetch.observe(self._on_prefetch, names="value")
        self.step.observe(self._on_step, names="value")
        self.prev_button.on_click(lambda _: self.move(-1))
        self.next_button.on_click(lambda _: self.move(+1))
        self.trace: pm.Trace | None = None
        self.prefetch.disabled = variant == "naive"
        self._recompute()

    # -- callbacks ----------------------------------------------------------------------------
    def _on_config(self, change=None) -> None:
        if not self._quiet:
            self._recompute()

    def _on_prefetch(self, change=None) -> None:
        if not self._quiet:  # the learner moved it: that is the depth to keep
            self._chosen = self.prefetch.value
            self._recompute()

    def _on_variant(self, change) -> None:
        """The naive loop prefetches nothing: grey the slider out. The prefetch loop needs at
        least one k-tile in its prologue (depth 0 waits for a k-tile nobody loads)."""
        if self._quiet:
            return
        self._quiet += 1
        try:
            self.prefetch.disabled = change["new"] == "naive"
            self.prefetch.min = min(_min_depth(change["new"]), self.prefetch.max)
        finally:
            self._quiet -= 1
        self._recompute()

    def _on_stages(self, change) -> None:
        """Keep the prefetch depth meaningful for the new ring.

        The learner's chosen depth is kept where it fits (``<= stages - 1``), else the deepest
        that does, so shrinking the ring never turns a working run into a deadlock, and growing
        it back restores the chosen depth. A chosen depth of ``stages`` (the deadlock on
        purpose) follows the ring. The one ring no depth fits is the prefetch loop's single
        stage: it gets depth 1 and the readout says the loop needs two stages.
        """
        if self._quiet:
            return
        old, new = change["old"], change["new"]
        self._quiet += 1
        try:
            lo = _min_depth(self.variant.value)
            if self._chosen == self.prefetch.value == old:
                depth = self._chosen = new  # the deadlock on purpose follows the ring
            else:
                depth = max(lo, min(self._chosen, new - 1))
            # The slider clamps its value to [min, max]: widen the range before moving the
            # value into it, and narrow it after.
            self.prefetch.max = max(new, self.prefetch.value)
            self.prefetch.value = depth
            self.prefetch.max = new
            self.prefetch.min = min(lo, new)
        finally:
            self._quiet -= 1
        self._recompute()

    def _on_step(self, change=None) -> None:
        if not self._quiet:
            self._render()

    def move(self, delta: int) -> None:
        """The prev/next buttons: one event back or forward (clamped to the run)."""
        self.step.value = min(max(self.step.value + delta, self.step.min), self.step.max)

    def _recompute(self) -> None:
        try:
            trace = pm.simulate(self.variant.value, self.stages.value, self.k_tiles.value,
                                self.prefetch.value)
        except CourseError as e:  # the controls keep the inputs valid; never a traceback
            self.message.value = widgets.error_html(e.what, e.fix)
            return
        self.message.value = ""
        self.trace = trace
        last = len(trace.events) - 1
        self._quiet += 1
        try:
            self.step.max = max(last, 0)
            self.step.value = min(self.step.value, self.step.max)
        finally:
            self._quiet -= 1
        self._render()

    @property
    def event(self) -> pm.Event:
        return self.trace.events[self.step.value]

    @property
    def deadlock_step(self) -> int | None:
        """The step at which the run deadlocks (its last event), or None."""
        return len(self.trace.events) - 1 if self.trace.deadlock else None

    def why_deadlock(self) -> str:
        """One line on why this run deadlocks, in terms of the controls ('' if it does not)."""
        t = self.trace
        if not t.deadlock:
            return ""
        if t.variant == "prefetch" and t.stages == 1:
            return ("the prefetch loop needs at least 2 stages: its prologue fills the only stage, "
                    "and the first refill waits for a stage nobody can release yet; add a stage")
        if t.variant != "naive" and t.prefetch >= t.stages:
            return (f"prefetch {t.prefetch} = stages {t.stages}: the loop refills a stage before "
                    f"anyone released it; a depth up to {t.stages - 1} fits")
        return f"{t.deadlock.op} on {t.deadlock.barrier} never returns"

    def describe(self) -> str:
        """The text under the picture: the run's outcome first, then this event and its wait."""
        e, t = self.event, self.trace
        if t.deadlock:
            lines = [f"<span style='color:{DEADLOCK_COLOR}'><b>This run deadlocks at step "
                     f"{self.deadlock_step}</b> ({self.why_deadlock()}): {t.deadlock.op} on "
                     f"{t.deadlock.barrier} (phase {t.deadlock.parity}). {t.deadlock.explanation}</span>"]
        else:
            lines = [f"run: {t.k_tiles} k-tiles, most loads in flight {t.max_loads_in_flight()}, "
                     f"done at t={t.time:.0f}" + _DEPTH_MEANS.get(t.variant, "")]
        lines.append(f"<b>step {self.step.value}/{self.step.max}</b> t={e.time:.0f} · {e.actor}: {e.text}")
        if e.waiting_on:
            color = DEADLOCK_COLOR if e.op == "deadlock" else WAIT_COLOR
            lines.append(f"<span style='color:{color}'>waiting: {e.waiting_on}</span>")
        return "<br>".join(lines)

    def describe_run(self) -> str:
        """One fixed line for the notebook's text output (what nbval compares)."""
        t = self.trace
        depth = "" if t.variant == "naive" else f", prefetch {t.prefetch}"
        end = (f"deadlocks at step {self.deadlock_step} ({self.why_deadlock()})" if t.deadlock
               else f"{len(t.events)} steps, done at t={t.time:.0f}")
        return f"PipelineWidget: {t.variant}, {t.stages} stages, {t.k_tiles} k-tiles{depth}: {end}"

    def _render(self) -> None:
        self.status.value = self.describe()
        if not self._render_enabled:
            return
        import matplotlib.pyplot as plt

        from .layout import to_png

        t, e = self.trace, self.event  # the run in the title: two runs may share a state at a step
        ax = draw_state(e, title=f"{t.variant}, {t.stages} stages, prefetch {t.prefetch}  |  t={e.time:.0f}  {e.actor}: {e.text}")
        if self.trace.deadlock and self.event.op != "deadlock":
            # Say it on every step, not only on the last: the run is doomed from the start.
            t = self.trace
            why = f" (prefetch {t.prefetch} = stages {t.stages})" if t.prefetch >= t.stages else ""
            ax.text(0.5, -0.02, f"this run deadlocks at step {self.deadlock_step}{why}",
                    transform=ax.transAxes, ha="center", va="top", fontsize=8, color=DEADLOCK_COLOR)
        self.png = to_png(ax.figure, dpi=90)
        plt.close(ax.figure)
        self.picture.value = self.png

    def show(self) -> "PipelineWidget":
        """The widget itself (display it); kept so that ``widget.show()`` cells still work."""
        return self

    def _repr_mimebundle_(self, **kwargs) -> dict:
        return widgets.widget_bundle(self.widget, self.png, self.describe_run())


#: What the prefetch slider's number means in each loop (the readout says it: it differs).
_DEPTH_MEANS = {
    "naive": " (the naive loop loads each k-tile just before reading it: the prefetch slider "
             "does not apply)",
    "compiler": " (the compiler's loop issues k-tile k + depth's load before reading k: up to "
                "depth + 1 loads in flight)",
    "prefetch": " (the prefetch loop's depth is its prologue: the k-tiles loaded before the "
                "first MMA; each refill follows a release)",
}


def _min_depth(variant: str) -> int:
    """The shallowest prefetch a loop takes: the prefetch loop reads k-tile 0 before its first
    refill, so its prologue must load at least one; the compiler's depth 0 is the naive order."""
    return 1 if variant == "prefetch" else 0


def draw_dataflow(tile=(128, 256, 64), stages: int = 4, dtype_bytes: int = 2, warpgroups: int = 2,
                  ax=None):
    """The Hopper GEMM's data path, one box per level, with the sizes that matter at each.

    gmem --TMA--> smem ring --WGMMA (operands straight from smem)--> fp32 accumulators in
    registers --epilogue: convert, stmatrix--> smem --TMA store--> gmem.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    m, n, k = tile
    a_kib, b_kib = m * k * dtype_bytes / 1024, n * k * dtype_bytes / 1024
    threads = 128 * warpgroups
    boxes = [
        ("global memory", f"A: M x K\nB: N x K\n(K-major)", "#eeeeee"),
        ("smem ring", f"{stages} stages x\n(A {m}x{k}: {a_kib:g} KiB\n+ B {n}x{k}: {b_kib:g} KiB)",
         "#fff3c4"),
        ("tensor cores", f"WGMMA, {warpgroups} warpgroups\neach {m // warpgroups}x{n}x16\nper instruction",
         "#c8e6c9"),
        ("registers", f"fp32 accumulators\n{m}x{n} tile:\n{m * n // threads} per thread", "#bbdefb"),
        ("epilogue", "convert to out dtype\nstmatrix -> smem\nTMA store -> C", "#e1bee7"),
    ]
    arrows = [f"TMA load\n+ mbarrier\n({(a_kib + b_kib):g} KiB tx)", "smem\ndescriptors",
              "async,\nwait_group", "after the\nlast k-tile"]
    if ax is None:
        _, ax = plt.subplots(figsize=(12, 2.6))
    width, pitch = 1.7, 2.7  # a gap of 1.0 between boxes holds each arrow's label clear of both
    ax.set_xlim(0, len(boxes) * pitch - (pitch - width) + 0.2)
    ax.set_ylim(0, 2.2)
    ax.axis("off")
    for i, (head, body, color) in enumerate(boxes):
        x = i * pitch + 0.1
        ax.add_patch(FancyBboxPatch((x, 0.3), width, 1.5, boxstyle="round,pad=0.03", facecolor=color,
                                    edgecolor="black"))
        ax.text(x + width / 2, 1.65, head, ha="center", va="center", fontsize=9, weight="bold")
        ax.text(x + width / 2, 0.95, body, ha="center", va="center", fontsize=7.5)
        if i < len(arrows):
            ax.add_patch(FancyArrowPatch((x + width + 0.05, 1.05), (x + pitch - 0.05, 1.05),
                                         arrowstyle="-|>", mutation_scale=14, color="black"))
            ax.text(x + (width + pitch) / 2, 1.2, arrows[i], ha="center", va="bottom", fontsize=6.5)
    ax.set_title(f"One CTA's {m}x{n} tile of C: k-tiles of {k} stream through a {stages}-stage "
                 "ring into the tensor cores", fontsize=10)
    return ax
