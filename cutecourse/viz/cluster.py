"""A cluster's multicast loads, drawn: who loads which slice of A and B, where it lands, the masks.

The picture follows the output matrix: the cluster's CTAs sit in a ``CM x CN`` grid, each on the
tile of C it computes. A's tiles run along the left (one per row of CTAs, shared by the ``CN``
CTAs of that row), B's along the top (one per column, shared by the ``CM`` CTAs of that column).
Each tile is cut into the slices the CTAs issue, coloured by the CTA that issues it; the
arrows leave the slices one CTA issues and end in every CTA that receives them (its mask),
running through the gaps between the boxes so that they never cross a label. Masks are
written in binary everywhere (bit 0 = rank 0, on the right), as ``Plan.table`` prints them.
A bar chart beside it shows the bytes each CTA reads from L2 per k-tile with and without
multicast.

``draw_cluster(...)`` is the static picture (what nbval sees); ``ClusterWidget`` adds controls
for the cluster shape, the tile and the highlighted CTA, and redraws through plain methods so
that tests can drive it without a browser.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, Rectangle

from ..errors import CourseError, ShapeError
from ..models.multicast import Plan, fmt_mask, plan
from . import widgets

#: Tiles (BM, BN, BK) the controls offer: the course's Hopper GEMM tiles.
TILES = {"128x256x64": (128, 256, 64), "128x128x64": (128, 128, 64), "256x128x64": (256, 128, 64),
         "64x256x64": (64, 256, 64)}
CLUSTER_SIDES = (1, 2, 4)

_COLORS = plt.get_cmap("tab20").colors


def color_of(rank: int):
    """One colour per CTA rank, used for its box, the slices it issues and its bars."""
    return _COLORS[(2 * rank) % 20 if rank < 10 else (2 * rank + 1) % 20]


def _plan_for(tile, cluster, elem_bytes=2) -> Plan:
    cm, cn = cluster
    # one cluster tile of work: the picture shows one cluster at one k-tile
    return plan(tile=tile, cluster=cluster, tiles=(cm, cn, 1), elem_bytes=elem_bytes)


def mask_text(p: Plan, mask: int) -> str:
    """A ctaMask as the course writes it everywhere (text, picture, ``Plan.table``): binary, one
    digit per CTA of the cluster (at least 4), bit 0 = rank 0 on the right."""
    return fmt_mask(mask, max(4, p.cluster_size))


def _load_text(p: Plan, s) -> str:
    rows = f"{s.operand} rows {s.rows[0]}:{s.rows[1]}"
    if len(s.receivers) == 1:  # only the issuer needs the tile: a plain TMA load
        return (f"loads {rows} itself ({s.bytes // 1024} KiB): a plain TMA load, no mask (the planner "
                f"marks its own bit, {mask_text(p, s.mask)})")
    return (f"issues {rows} (slice {s.index} of {s.count}, {s.bytes // 1024} KiB) with mask "
            f"{mask_text(p, s.mask)}, multicast to ranks {', '.join(map(str, s.receivers))}")


def summary(p: Plan, rank: int) -> str:
    """One paragraph on one CTA: its masks, what it issues, what its barriers expect."""
    cm, cn = p.coord(rank)
    mine = {s.operand: s for s in p.issued(0, 0, rank)}
    a, b = mine["A"], mine["B"]
    n = p.empty_arrivals(0, 0, rank)
    with_mc, without = p.l2_bytes(0, 0, rank) // 1024, p.l2_bytes(0, 0, rank, multicast=False) // 1024
    l2 = (f"{with_mc} KiB with multicast, {without} KiB without" if with_mc != without
          else f"{with_mc} KiB (no multicast)")
    head = (f"A 1x1 cluster has no multicast: its one CTA loads whole tiles itself. "
            if p.cluster_size == 1 else "")
    return (f"{head}CTA rank {rank} at (cm={cm}, cn={cn}) computes C tile {p.output_tile(0, 0, rank)}. "
            f"It {_load_text(p, a)}, and {_load_text(p, b)}. Its full barrier expects "
            f"{p.tx_bytes(0, 0, rank)} bytes per stage (whole A and B tiles); its empty barrier "
            f"collects releases from {n} CTA{'s' if n != 1 else ''}. L2 requests per k-tile: {l2}.")


def figure_size(cluster) -> tuple[float, float]:
    """Inches for a cluster's picture: each CTA box wide enough for its masks in binary (one
    digit per CTA: 20 characters of a 16-CTA cluster's mask need about 1.3 inches at 6 pt)."""
    cm, cn = cluster
    cell = 0.75 if cm * cn <= 4 else 0.85 if cm * cn <= 8 else 1.3
    # the left panel gets ~62% of the width; the grid is (cn + 1.2) x (cm + 1.15) cells
    return max(10.0, cell * (cn + 1.2) / 0.62), max(4.6, cell * (cm + 1.15) + 0.9)


def _arrow_path(op: str, box, dst: tuple[float, float], cm_src: int, cn_src: int):
    """The way a slice travels to a CTA that receives it, through the gaps between the boxes
    (never across a CTA's labels).

    A: out of the slice's right edge, down the gap between A's tiles and the first column, along
    the gap under the CTA row, up into the receiver's lower-left corner. B: out of the slice's
    bottom, along the gap above the first row, down the gap right of the CTA column, into the
    receiver's upper-right corner. Returns the vertices.
    """
    x, y = dst
    if op == "A":
        start = (box[0] + box[2], box[1] + box[3] / 2)
        gap_y = -1.0 - cm_src  # the gap under the row (boxes span y+0.05 .. y+0.95)
        return [start, (0.85, start[1]), (0.85, gap_y), (x + 0.15, gap_y), (x + 0.15, y + 0.25)]
    start = (box[0] + box[2] / 2, box[1])
    gap_x = 2.0 + cn_src  # the gap right of the column (boxes span x+0.05 .. x+0.95)
    return [start, (start[0], 0.05), (gap_x, 0.05), (gap_x, y + 0.85), (x + 0.75, y + 0.85)]


def draw_cluster(tile=(128, 256, 64), cluster=(2, 2), rank: int | None = 0, elem_bytes: int = 2,
                 fig=None):
    """Draw one cluster's multicast loads for one k-tile; highlight ``rank``'s loads."""
    from matplotlib.path import Path

    p = _plan_for(tuple(tile), tuple(cluster), elem_bytes)
    cm_size, cn_size = p.cluster
    if rank is not None and not 0 <= rank < p.cluster_size:
        raise ShapeError(f"rank {rank} is not in a {cm_size}x{cn_size} cluster",
                         f"pick a rank from 0 to {p.cluster_size - 1}")
    if fig is None:
        fig = plt.figure(figsize=figure_size(p.cluster))
    else:
        fig.set_size_inches(*figure_size(p.cluster))
    fig.clear()
    ax, bars = fig.subplots(1, 2, gridspec_kw={"width_ratios": [2.2, 1]})
    loads = p.loads(0, 0)
    big = max(cm_size, cn_size) > 2
    fs = 7 if big else 8

    # geometry: CTA (cm, cn) occupies the unit cell at column cn, row cm (row 0 on top)
    def cell(cm, cn):
        return 1.0 + cn, -1.0 - cm

    # A tiles on the left, one per row of CTAs, cut into horizontal slices (rows of A); B tiles
    # on top, one per column, cut into vertical slices. Each slice in its issuer's colour.
    slice_boxes = {}
    for s in loads:
        if s.operand == "A":
            y = -1.0 - s.tile[0]
            h = 0.75 / s.count
            box = (0.1, y + 0.8 - (s.index + 1) * h, 0.6, h)
        else:
            wd = 0.8 / s.count
            box = (1.0 + s.tile[0] + 0.1 + s.index * wd, 0.15, wd, 0.6)
        slice_boxes[(s.operand, s.issuer)] = (box, s)
        hl = rank is not None and s.issuer == rank
        ax.add_patch(Rectangle(box[:2], box[2], box[3], facecolor=color_of(s.issuer),
                               edgecolor="black", lw=2.0 if hl else 0.6, alpha=1.0 if hl else 0.75))
        ax.text(box[0] + box[2] / 2, box[1] + box[3] / 2, f"r{s.issuer}", ha="center",
                va="center", fontsize=7 if s.count <= 2 else 6)
    for cm in range(cm_size):
        ax.text(0.4, -1.0 - cm + 0.82, f"A[{cm}]", ha="center", va="bottom", fontsize=fs)
    for cn in range(cn_size):
        ax.text(1.0 + cn + 0.5, 0.8, f"B[{cn}]", ha="center", va="bottom", fontsize=fs)

    # the CTAs, on their tiles of C, with their masks (binary, as in the text and the tables)
    mask_labels = []
    for r in range(p.cluster_size):
        cm, cn = p.coord(r)
        x, y = cell(cm, cn)
        hl = r == rank
        ax.add_patch(Rectangle((x + 0.05, y + 0.05), 0.9, 0.9, facecolor=color_of(r),
                               alpha=0.35, edgecolor="black", lw=2.5 if hl else 0.8))
        ax.text(x + 0.5, y + 0.72, f"rank {r}" if big else f"rank {r} ({cm},{cn})",
                ha="center", fontsize=fs, weight="bold" if hl else "normal")
        masks = f"A {mask_text(p, p.mask('A', 0, 0, r))}\nB {mask_text(p, p.mask('B', 0, 0, r))}"
        mask_labels.append(ax.text(x + 0.5, y + 0.47, masks, ha="center", va="center",
                                   fontsize=fs - 1, family="monospace"))
        ax.text(x + 0.5, y + 0.14, f"tx {p.tx_bytes(0, 0, r) // 1024} KiB", ha="center",
                fontsize=fs - 1)

    # arrows: where the highlighted CTA's slices land, routed through the gaps between boxes
    if rank is not None:
        src = p.coord(rank)
        for op in "AB":
            box, s = slice_boxes[(op, rank)]
            for dst in s.receivers:
                verts = _arrow_path(op, box, cell(*p.coord(dst)), *src)
                ax.add_patch(FancyArrowPatch(path=Path(verts), arrowstyle="->", mutation_scale=10,
                                             color=color_of(rank), lw=1.4, zorder=4))

    ax.set_xlim(0, 1.2 + cn_size)
    ax.set_ylim(-0.1 - cm_size, 1.05)
    ax.set_aspect("equal")
    ax.axis("off")
    bm, bn, bk = p.tile
    if p.cluster_size == 1:
        ax.set_title(f"cluster 1x1, tile {bm}x{bn}x{bk}: no multicast,\n"
                     f"the one CTA loads whole A and B tiles itself", fontsize=9)
    else:
        who = f"; arrows: where rank {rank}'s slices land" if rank is not None else ""
        ax.set_title(f"cluster {cm_size}x{cn_size}, tile {bm}x{bn}x{bk}: each CTA issues a slice,\n"
                     f"every CTA sharing the tile receives it{who}", fontsize=9)

    # L2 bytes each CTA requests per k-tile, with and without multicast (requests: the planner
    # counts what TMA asks L2 for; what L2 then reads is what Nsight counts, notebook 05 section 6)
    ranks = list(range(p.cluster_size))
    with_mc = [p.l2_bytes(0, 0, r) / 1024 for r in ranks]
    without = [p.l2_bytes(0, 0, r, multicast=False) / 1024 for r in ranks]
    xs = range(len(ranks))
    if p.cluster_size == 1:
        bars.bar(list(xs), without, 0.5, color="lightgray", edgecolor="black")
        bars.set_title("L2 requests: a 1x1 cluster has no multicast", fontsize=9)
    else:
        bars.bar([x - 0.2 for x in xs], without, 0.4, color="lightgray", edgecolor="black",
                 label="without multicast")
        bars.bar([x + 0.2 for x in xs], with_mc, 0.4, color=[color_of(r) for r in ranks],
                 edgecolor="black", label="with multicast")
        saved = 1 - sum(with_mc) / sum(without)
        bars.set_title(f"L2 requests: {saved:.0%} fewer with multicast", fontsize=9)
        bars.set_ylim(0, max(without) * 1.3)  # room for the legend above the bars
        bars.legend(fontsize=7, loc="upper right", ncol=2)
    bars.set_xticks(list(xs), [str(r) for r in ranks], fontsize=8 if len(ranks) <= 8 else 6)
    bars.set_xlabel("CTA rank in the cluster")
    bars.set_ylabel("KiB requested from L2 per k-tile")
    fig.tight_layout()
    _fit(mask_labels, width=0.86)
    return fig


def _fit(texts, width: float) -> None:
    """Shrink each text whose drawn width exceeds ``width`` data units (its box) to fit."""
    if not texts:
        return
    ax = texts[0].axes
    renderer = ax.figure.canvas.get_renderer()
    box_px = abs(ax.transData.transform((width, 0))[0] - ax.transData.transform((0, 0))[0])
    for t in texts:
        drawn = t.get_window_extent(renderer).width
        if drawn > box_px:
            t.set_fontsize(t.get_fontsize() * box_px / drawn)


class ClusterWidget:
    """Controls for the cluster shape, the tile and the highlighted CTA; redraws on change.

    The handlers are plain methods (``update``), so tests drive the widget by setting control
    values without a browser; ``self.plan``, ``self.text``, ``self.figure`` and ``self.png``
    hold the state. Display the object (a course widget: :mod:`cutecourse.viz.widgets`). CSS
    classes: ``cc-cluster-widget`` (root), ``cc-cluster-m``, ``cc-cluster-n``, ``cc-tile``,
    ``cc-rank``, ``cc-readout``, ``cc-picture``, ``cc-message``.
    """

    def __init__(self, tile: str = "128x256x64", cluster=(2, 2), rank: int = 0, render: bool = True):
        import ipywidgets as w

        if tile not in TILES:
            raise ShapeError(f"tile {tile!r} is not one the widget offers",
                             f"choose one of {list(TILES)}")
        for side in cluster:
            if side not in CLUSTER_SIDES:
                raise ShapeError(f"cluster {tuple(cluster)}: each side must be one of "
                                 f"{CLUSTER_SIDES}", "e.g. cluster=(2, 1)")
        if not 0 <= rank < cluster[0] * cluster[1]:
            raise ShapeError(f"rank {rank} is not in a {cluster[0]}x{cluster[1]} cluster",
                             f"pick a rank from 0 to {cluster[0] * cluster[1] - 1}")
        self._render_enabled = render
        self.png = b""
        self.figure = None
        self.cluster_m = w.Dropdown(options=CLUSTER_SIDES, value=cluster[0], description="cluster M")
        self.cluster_n = w.Dropdown(options=CLUSTER_SIDES, value=cluster[1], description="cluster N")
        self.tile = w.Dropdown(options=list(TILES), value=tile, description="tile")
        self.rank = w.Dropdown(options=list(range(cluster[0] * cluster[1])), value=rank,
                               description="CTA rank")
        self.info = w.HTML()
        self.picture = widgets.picture()
        self.message = widgets.message()
        for control in (self.cluster_m, self.cluster_n, self.tile, self.rank):
            control.observe(self.update, names="value")
        self.box = w.VBox([w.HBox([self.cluster_m, self.cluster_n]), w.HBox([self.tile, self.rank]),
                           self.info, self.message, self.picture])
        widgets.tag((self.box, "cc-cluster-widget"), (self.cluster_m, "cc-cluster-m"),
                    (self.cluster_n, "cc-cluster-n"), (self.tile, "cc-tile"), (self.rank, "cc-rank"),
                    (self.info, "cc-readout"))
        self.update()

    def update(self, change=None) -> None:
        """Rebuild the plan from the controls and redraw (the handler of every control)."""
        cluster = (self.cluster_m.value, self.cluster_n.value)
        size = cluster[0] * cluster[1]
        if list(self.rank.options) != list(range(size)):
            keep = self.rank.value if self.rank.value is not None and self.rank.value < size else 0
            self.rank.unobserve(self.update, names="value")
            self.rank.options = list(range(size))
            self.rank.value = keep
            self.rank.observe(self.update, names="value")
        try:
            self.plan = _plan_for(TILES[self.tile.value], cluster)
            self.text = summary(self.plan, self.rank.value)
            if self._render_enabled:
                fig = draw_cluster(TILES[self.tile.value], cluster, self.rank.value)
        except CourseError as e:  # the controls only offer valid choices; never a traceback
            self.message.value = widgets.error_html(e.what, e.fix)
            return
        self.message.value = ""
        self.info.value = f"<p style='max-width:900px'>{self.text}</p>"
        if self._render_enabled:
            from .layout import to_png

            plt.close(fig)  # shown as the image widget's PNG, not by pyplot
            self.figure = fig
            self.png = to_png(fig, dpi=90)
            self.picture.value = self.png

    def describe(self) -> str:
        """One fixed line for the notebook's text output (what nbval compares)."""
        cm, cn = self.plan.cluster
        bm, bn, bk = self.plan.tile
        return f"ClusterWidget: cluster {cm}x{cn}, tile {bm}x{bn}x{bk}, rank {self.rank.value}"

    def _repr_mimebundle_(self, **kwargs) -> dict:
        return widgets.widget_bundle(self.box, self.png, self.describe())


def cluster_widget(**kwargs) -> ClusterWidget:
    """The interactive picture: ``cluster_widget(tile="128x256x64", cluster=(2, 2))``."""
    return ClusterWidget(**kwargs)
