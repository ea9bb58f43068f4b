"""Pictures of the grouped GEMM's tile scheduler (model: :mod:`cutecourse.models.group_scheduler`).

``draw_groups(problem)`` puts every group's C matrix side by side, cut into its work items
(cluster tiles), each coloured by its group and labelled with its linear index: the order the
scheduler hands them out (down each column first, group after group; an empty group is a dashed
outline with nothing in it). ``draw_schedule(problem, ctas)`` is the persistent schedule: one row
per CTA (SM), one cell per work item it computes, coloured by group; a black bar on a cell's left
edge marks a tensor-map rewrite (the CTA's next item is in another group). ``schedule_widget()``
adds controls for the number of groups, the M range and the CTA count.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt  # headless (no display): matplotlib picks Agg by itself
import numpy as np
from matplotlib.collections import PatchCollection
from matplotlib.colors import ListedColormap
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from ..errors import ShapeError
from ..models import group_scheduler as gs

_COLORS = plt.get_cmap("tab10").colors + plt.get_cmap("Set2").colors


def color_of(group: int):
    """The colour of group ``group`` in every picture of this module."""
    return _COLORS[group % len(_COLORS)]


def draw_groups(problem: gs.GroupedProblem, fig=None):
    """Every group's C tile grid, side by side, tiles coloured by group and labelled by linear index.

    Widths and heights are in work items (cluster tiles), drawn at a common scale, so a group
    with twice the rows is twice as tall. Returns the Figure.
    """
    grids = problem.grids
    gap = 0.6
    width = sum(max(cn, 1) for _, cn in grids) + gap * (len(grids) - 1)
    height = max(max(cm for cm, _ in grids), 1)
    if fig is None:
        fig = plt.figure(figsize=(min(10.0, 1.2 + 0.55 * width), min(6.5, 1.6 + 0.45 * height)))
    fig.clear()
    ax = fig.add_subplot(1, 1, 1)
    # Pixels per work item at 72 dpi (the axes take ~85% of the figure's width): what fits in a cell
    unit_px = 0.85 * fig.get_figwidth() * 72 / (width + 0.4)
    numbers = problem.total <= 400 and unit_px >= 15  # each cell's linear index, if it is legible
    x0, centers = 0.0, []
    cells, colors = [], []  # one PatchCollection: thousands of tiles draw in milliseconds
    for g, ((cm, cn), first) in enumerate(zip(grids, problem.offsets)):
        if cm == 0:  # an empty group: an outline, no work items
            ax.add_patch(Rectangle((x0, 0), max(cn, 1), 1, fill=False, linestyle="--",
                                   edgecolor=color_of(g)))
        for i in range(cm * cn):
            r, c = i % cm, i // cm  # m fastest: the scheduler's order inside a group
            cells.append(Rectangle((x0 + c, r), 1, 1))
            colors.append(color_of(g))
            if numbers:
                ax.text(x0 + c + 0.5, r + 0.5, str(first + i), ha="center", va="center",
                        fontsize=7, color="black")
        centers.append(x0 + max(cn, 1) / 2)
        x0 += max(cn, 1) + gap
    _label_groups(ax, problem, centers, min(max(cn, 1) for _, cn in grids) * unit_px, (1 + gap) * unit_px)
    ax.add_collection(PatchCollection(cells, facecolors=colors, edgecolors="white", alpha=0.85,
                                      linewidths=1.0 if problem.total <= 500 else 0.0))
    ax.set_xlim(-0.2, width + 0.2)
    ax.set_ylim(height + 0.1, -1.3)  # row 0 (the top rows of C) at the top
    if width <= 4 * height + 20:  # square tiles unless that would squash the picture to a strip
        ax.set_aspect("equal")
    ax.set_yticks([])
    cmt, cnt, _ = problem.cluster_tile
    ax.set_xlabel(f"N, in work items of {cnt} columns (groups side by side)", fontsize=9)
    ax.set_ylabel(f"M ({cmt}-row items)", fontsize=9)
    ax.set_title(f"{plural(problem.groups, 'group')}, {plural(problem.total, 'work item')}: numbered "
                 "down each column, group after group", fontsize=10)
    fig.tight_layout()
    return fig


def _label_groups(ax, problem, centers, group_px: float, pitch_px: float) -> None:
    """Name the groups under the picture, as x ticks: "g3" and its M x N x K where that fits the
    narrowest group (about 70 px), else "g3" alone, rotated when even that does not fit, and then
    only every ``step``-th group so that labels stay 9 px apart (64 groups stay readable)."""
    names = [f"g{g}" for g in range(problem.groups)]
    if group_px >= 70:
        labels, rotation, step = [f"g{g}\n{m}x{n}x{k}" for g, (m, n, k) in enumerate(problem.sizes)], 0, 1
    elif group_px >= 22:
        labels, rotation, step = names, 0, 1
    else:
        labels, rotation, step = names, 90, max(1, math.ceil(9 / max(group_px + pitch_px * 0.6, 1e-6)))
    ax.set_xticks(centers[::step], labels[::step], rotation=rotation, fontsize=7 if step == 1 else 6)
    ax.tick_params(axis="x", length=2, pad=2)
    if step > 1:
        ax.text(1.0, -0.02, f"(every {step}{_ordinal(step)} group named)", transform=ax.transAxes,
                ha="right", va="top", fontsize=6, color="#555555")


def _ordinal(n: int) -> str:
    return "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


def plural(n: int, word: str) -> str:
    """``1 CTA``, ``2 CTAs``."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def draw_schedule(problem: gs.GroupedProblem, ctas: int, show_updates: bool = True, fig=None):
    """The static persistent schedule: x = step (the CTA's n-th item), y = CTA, colour = group.

    With ``show_updates``, a black bar at a cell's left edge marks a tensor-map rewrite; the title
    gives their total and the max/mean k-tile load. The x axis counts items, not time: an item
    of a group with a larger K takes longer (see :func:`~cutecourse.models.group_scheduler.balance`).
    """
    sched = gs.schedule(problem, ctas)
    ups = gs.tensormap_updates(sched)
    bal = gs.balance(sched)
    steps = max(len(items) for items in sched)
    rows = len(sched)
    if fig is None:
        fig = plt.figure(figsize=(min(10.0, 2.5 + 0.5 * steps), min(7.0, 1.8 + 0.16 * rows)))
    fig.clear()
    ax = fig.add_subplot(1, 1, 1)
    grid = np.full((rows, steps), np.nan)  # group of each (CTA, step) cell; NaN: no item
    for cta, items in enumerate(sched):
        for i, it in enumerate(items):
            grid[cta, i] = it.group
            if rows <= 24 and steps <= 24:
                ax.text(i + 0.5, cta + 0.5, str(it.linear), ha="center", va="center", fontsize=6)
    cmap = ListedColormap([color_of(g) for g in range(problem.groups)])
    mesh = ax.pcolormesh(np.ma.masked_invalid(grid), cmap=cmap, vmin=-0.5, vmax=problem.groups - 0.5,
                         edgecolors="white", linewidth=0)
    if show_updates:
        xs = [i + 0.04 for cta in range(rows) for i in ups.positions[cta]]
        ys = [cta for cta in range(rows) for _ in ups.positions[cta]]
        ax.vlines(xs, [y + 0.08 for y in ys], [y + 0.92 for y in ys], color="black",
                  linewidth=2 if rows <= 40 else 1)
    ax.set_xlim(0, steps)
    ax.set_ylim(rows, 0)
    # Cell (cta, i) spans [i, i + 1]: label steps and CTAs at the cells' centres, whole numbers
    # only (at the edges, 1 CTA would show a tick "1" for a CTA that does not exist).
    for axis, count in ((ax.xaxis, steps), (ax.yaxis, rows)):
        ticks = [t for t in MaxNLocator(integer=True).tick_values(0, count - 1) if 0 <= t < count]
        axis.set_ticks([t + 0.5 for t in ticks], labels=[str(int(t)) for t in ticks])
    ax.set_xlabel("step (the CTA's 1st, 2nd, ... work item)")
    ax.set_ylabel("CTA (one per SM)")
    handles = [Rectangle((0, 0), 1, 1, facecolor=color_of(g)) for g in range(problem.groups)
               if problem.tiles_per_group[g]]
    labels = [f"g{g}" for g in range(problem.groups) if problem.tiles_per_group[g]]
    if len(handles) <= 16:
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=7,
                  title="group", title_fontsize=7, frameon=False)
    what = f"{plural(ups.total, 'tensor-map rewrite')} (black bars)" if show_updates else \
        plural(problem.total, "work item")
    ax.set_title(f"{plural(len(sched), 'CTA')}, {what}; k-tile load max/mean = {bal.ratio:.2f}",
                 fontsize=10)
    fig.tight_layout()
    # White cell edges only where cells are large enough to keep their colour: an edge is drawn
    # at least 1 px wide whatever its width in points, so on cells under a few pixels (132 CTAs,
    # or one CTA with hundreds of items) the edges would cover the cells and leave them white.
    box = ax.get_position()
    cell_pt = min(box.width * fig.get_figwidth() / steps, box.height * fig.get_figheight() / rows) * 72
    if cell_pt >= MIN_EDGED_CELL_PT:
        mesh.set_linewidth(0.3)
    return fig


#: The smallest cell side (points) that gets a white edge: 6 pt is 5.5 px at the widget's 66 dpi.
MIN_EDGED_CELL_PT = 6.0


class ScheduleWidget:
    """Controls for groups, M range and CTAs over MoE-like sizes; redraws both pictures on change.

    The handler (``update``) is a plain method, so tests drive it by setting control values;
    ``self.problem``, ``self.text`` and ``self.png`` (both figures, one under the other, shown in
    an ``ipywidgets.Image``) hold the state. CSS classes: ``cc-group-widget`` (root),
    ``cc-picture``, ``cc-message``, ``cc-readout``.
    """

    def __init__(self, groups: int = 8, m_range=(64, 1024), ctas: int = 32, n: int = 1024,
                 k: int = 512, tile=(128, 256), cluster=(1, 1), seed: int = 0):
        import ipywidgets as w

        if not 1 <= groups <= 64:
            raise ShapeError(f"groups={groups}: the widget offers 1 to 64", "e.g. groups=8")
        if not 1 <= ctas <= 132:
            raise ShapeError(f"ctas={ctas}: the widget offers 1 to 132 (one per SM)", "e.g. ctas=32")
        self.n, self.k, self.tile, self.cluster, self.seed = n, k, tuple(tile), tuple(cluster), seed
        self.png: bytes = b""
        self.error: str | None = None
        self.groups = w.IntSlider(value=groups, min=1, max=64, description="groups")
        self.m_range = w.IntRangeSlider(value=tuple(m_range), min=0, max=4096, step=32,
                                        description="M range")
        self.ctas = w.IntSlider(value=ctas, min=1, max=132, description="CTAs")
        self.info = w.HTML()
        self.message = w.HTML()
        # align_self: a flex column would stretch the image to its width (blurry upscaling)
        self.picture = w.Image(format="png", layout=w.Layout(max_width="100%", align_self="flex-start"))
        for widget, cls in [(self.picture, "cc-picture"), (self.message, "cc-message"),
                            (self.info, "cc-readout"), (self.groups, "cc-groups"), (self.ctas, "cc-ctas")]:
            widget.add_class(cls)
        self.fig_groups = plt.figure(figsize=(9, 3.2))
        self.fig_sched = plt.figure(figsize=(9, 4.0))
        plt.close(self.fig_groups)  # rendered to the Image, not shown by pyplot
        plt.close(self.fig_sched)
        for control in (self.groups, self.m_range, self.ctas):
            control.observe(self.update, names="value")
        self.box = w.VBox([w.HBox([self.groups, self.m_range, self.ctas]), self.message, self.info,
                           self.picture])
        self.box.add_class("cc-group-widget")
        self.widget = self.box
        self.update()

    def update(self, change=None) -> None:
        """Rebuild the problem from the controls and redraw (the handler of every control)."""
        from .picture import stacked_png
        from .widgets import show_error

        lo, hi = self.m_range.value
        try:
            sizes = gs.moe_sizes(self.groups.value, self.n, self.k, (lo, hi), self.seed)
            note = ""
            if all(m == 0 for m, _, _ in sizes):
                # nothing to launch: keep one 1-row expert so there is something to draw, and say so
                sizes[0] = (1, self.n, self.k)
                note = " (every expert drew M = 0, which launches nothing: group 0 given 1 row to draw)"
            problem = gs.GroupedProblem(sizes, self.tile, self.cluster)
            ctas = max(self.ctas.value // problem.cluster_size, 1) * problem.cluster_size
            sched = gs.schedule(problem, ctas)
            draw_groups(problem, fig=self.fig_groups)
            draw_schedule(problem, ctas, fig=self.fig_sched)
        except Exception as e:  # CourseError: its two lines; anything else: one line, no traceback
            show_error(self, e, "move the controls back")
            return
        ups, bal = gs.tensormap_updates(sched), gs.balance(sched)
        self.problem, self.error, self.message.value = problem, None, ""
        launched = plural(len(sched), "CTA") + (f" (of {ctas}: no more items than that)" if len(sched) < ctas else "")
        self.text = (f"{plural(problem.total, 'work item')} on {launched}; "
                     f"{plural(ups.total, 'tensor-map rewrite')}; k-tile load max/mean {bal.ratio:.2f}{note}")
        self.info.value = f"<p>{self.text}</p>"
        self.png = stacked_png([self.fig_groups, self.fig_sched], dpi=66)
        self.picture.value = self.png

    def describe(self) -> str:
        lo, hi = self.m_range.value
        return (f"ScheduleWidget: {self.groups.value} groups, M in [{lo}, {hi}], N {self.n}, K {self.k}, "
                f"{plural(self.ctas.value, 'CTA')}")

    def _repr_mimebundle_(self, **kwargs):
        from .explorer import widget_bundle

        return widget_bundle(self.widget, self.png, self.describe())


def schedule_widget(**kwargs) -> ScheduleWidget:
    """The interactive picture: ``schedule_widget(groups=8, m_range=(64, 1024), ctas=32)``."""
    return ScheduleWidget(**kwargs)
