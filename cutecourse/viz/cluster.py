"""A cluster's multicast loads, drawn: who loads which slice of A and B, where it lands, the masks.

The picture follows the output matrix: the cluster's CTAs sit in a ``CM x CN`` grid, each on the
tile of C it computes. A's tiles run along the left (one per row of CTAs, shared by the ``CN``
CTAs of that row), B's along the top (one per column, shared by the ``CM`` CTAs of that column).
Each tile is cut into the slices the CTAs issue, coloured by the CTA that issues it; the
arrows leave the slices one CTA issues and end in every CTA that receives them (its mask).
A bar chart beside it shows the bytes each CTA reads from L2 per k-tile with and without
multicast.

``draw_cluster(...)`` is the static picture (what nbval sees); ``ClusterWidget`` adds controls
for the cluster shape, the tile and the highlighted CTA, and redraws through plain methods so
that tests can drive it without a browser.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, Rectangle

from ..errors import ShapeError
from ..models.multicast import Plan, fmt_mask, plan

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


def summary(p: Plan, rank: int) -> str:
    """One paragraph on one CTA: its masks, what it issues, what its barriers expect."""
    cm, cn = p.coord(rank)
    mine = {s.operand: s for s in p.issued(0, 0, rank)}
    a, b = mine["A"], mine["B"]
    width = max(4, p.cluster_size)
    return (f"CTA rank {rank} at (cm={cm}, cn={cn}) computes C tile {p.output_tile(0, 0, rank)}. "
            f"It issues A rows {a.rows[0]}:{a.rows[1]} (slice {a.index} of {a.count}, "
            f"{a.bytes // 1024} KiB) with mask {fmt_mask(a.mask, width)} and B rows "
            f"{b.rows[0]}:{b.rows[1]} (slice {b.index} of {b.count}, {b.bytes // 1024} KiB) with "
            f"mask {fmt_mask(b.mask, width)}. Its full barrier expects "
            f"{p.tx_bytes(0, 0, rank)} bytes per stage (whole A and B tiles); its empty barrier "
            f"collects releases from {p.empty_arrivals(0, 0, rank)} CTAs. L2 reads per k-tile: "
            f"{p.l2_bytes(0, 0, rank) // 1024} KiB with multicast, "
            f"{p.l2_bytes(0, 0, rank, multicast=False) // 1024} KiB without.")


def draw_cluster(tile=(128, 256, 64), cluster=(2, 2), rank: int | None = 0, elem_bytes: int = 2,
                 fig=None):
    """Draw one cluster's multicast loads for one k-tile; highlight ``rank``'s loads."""
    p = _plan_for(tuple(tile), tuple(cluster), elem_bytes)
    cm_size, cn_size = p.cluster
    if rank is not None and not 0 <= rank < p.cluster_size:
        raise ShapeError(f"rank {rank} is not in a {cm_size}x{cn_size} cluster",
                         f"pick a rank from 0 to {p.cluster_size - 1}")
    if fig is None:
        fig = plt.figure(figsize=(10, 4.6))
    fig.clear()
    ax, bars = fig.subplots(1, 2, gridspec_kw={"width_ratios": [2.2, 1]})
    loads = p.loads(0, 0)

    # geometry: CTA (cm, cn) occupies the unit cell at column cn, row cm (row 0 on top)
    def cell(cm, cn):
        return 1.0 + cn, -1.0 - cm

    # A tiles on the left, one per row of CTAs, cut into horizontal slices (rows of A)
    slice_boxes = {}
    for s in loads:
        if s.operand == "A":
            cm = s.tile[0]
            x, y = 0.1, -1.0 - cm
            h = 0.8 / s.count
            box = (x, y + 0.9 - (s.index + 1) * h, 0.6, h)
        else:
            cn = s.tile[0]
            w = 0.8 / s.count
            box = (1.0 + cn + 0.1 + s.index * w, 0.15, w, 0.6)
        slice_boxes[(s.operand, s.issuer)] = (box, s)
        hl = rank is not None and s.issuer == rank
        ax.add_patch(Rectangle(box[:2], box[2], box[3], facecolor=color_of(s.issuer),
                               edgecolor="black", lw=2.0 if hl else 0.6, alpha=1.0 if hl else 0.75))
        ax.text(box[0] + box[2] / 2, box[1] + box[3] / 2, f"r{s.issuer}", ha="center",
                va="center", fontsize=7 if s.count <= 2 else 5)
    for cm in range(cm_size):
        ax.text(0.4, -1.0 - cm + 0.95, f"A[{cm}]", ha="center", va="bottom", fontsize=8)
    for cn in range(cn_size):
        ax.text(1.0 + cn + 0.5, 0.8, f"B[{cn}]", ha="center", va="bottom", fontsize=8)

    # the CTAs, on their tiles of C; 16-bit masks of big clusters are written in hex
    big = max(cm_size, cn_size) > 2
    fs = 6 if big else 8

    def show(mask):
        return f"0x{mask:04x}" if p.cluster_size > 4 else fmt_mask(mask)
    for r in range(p.cluster_size):
        cm, cn = p.coord(r)
        x, y = cell(cm, cn)
        hl = r == rank
        ax.add_patch(Rectangle((x + 0.05, y + 0.05), 0.9, 0.9, facecolor=color_of(r),
                               alpha=0.35, edgecolor="black", lw=2.5 if hl else 0.8))
        ax.text(x + 0.5, y + 0.72, f"rank {r}" if big else f"rank {r} ({cm},{cn})",
                ha="center", fontsize=fs, weight="bold" if hl else "normal")
        ax.text(x + 0.5, y + 0.47, f"A {show(p.mask('A', 0, 0, r))}\n"
                f"B {show(p.mask('B', 0, 0, r))}", ha="center", va="center",
                fontsize=fs - 1, family="monospace")
        ax.text(x + 0.5, y + 0.14, f"tx {p.tx_bytes(0, 0, r) // 1024} KiB", ha="center",
                fontsize=fs - 1)

    # arrows: where the highlighted CTA's slices land
    if rank is not None:
        for op in "AB":
            box, s = slice_boxes[(op, rank)]
            start = (box[0] + box[2], box[1] + box[3] / 2) if op == "A" else \
                (box[0] + box[2] / 2, box[1])
            for dst in s.receivers:
                x, y = cell(*p.coord(dst))
                # A enters a CTA from the left (along its row), B from the top (down its column)
                end = (x + 0.05, y + 0.3) if op == "A" else (x + 0.25, y + 0.95)
                ax.add_patch(FancyArrowPatch(start, end, arrowstyle="->",
                                             mutation_scale=10, color=color_of(rank), lw=1.4,
                                             connectionstyle="arc3,rad=0.15"))

    ax.set_xlim(0, 1.2 + cn_size)
    ax.set_ylim(-0.1 - cm_size, 1.05)
    ax.set_aspect("equal")
    ax.axis("off")
    bm, bn, bk = p.tile
    who = f"; arrows: where rank {rank}'s slices land" if rank is not None else ""
    ax.set_title(f"cluster {cm_size}x{cn_size}, tile {bm}x{bn}x{bk}: each CTA issues a slice,\n"
                 f"every CTA sharing the tile receives it{who}", fontsize=9)

    # L2 bytes per CTA per k-tile, with and without multicast
    ranks = list(range(p.cluster_size))
    with_mc = [p.l2_bytes(0, 0, r) / 1024 for r in ranks]
    without = [p.l2_bytes(0, 0, r, multicast=False) / 1024 for r in ranks]
    xs = range(len(ranks))
    bars.bar([x - 0.2 for x in xs], without, 0.4, color="lightgray", edgecolor="black",
             label="without multicast")
    bars.bar([x + 0.2 for x in xs], with_mc, 0.4, color=[color_of(r) for r in ranks],
             edgecolor="black", label="with multicast")
    bars.set_xticks(list(xs), [str(r) for r in ranks], fontsize=8 if len(ranks) <= 8 else 6)
    bars.set_xlabel("CTA rank in the cluster")
    bars.set_ylabel("KiB read from L2 per k-tile")
    saved = 1 - sum(with_mc) / sum(without)
    bars.set_title(f"L2 reads: {saved:.0%} fewer with multicast", fontsize=9)
    bars.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


class ClusterWidget:
    """Controls for the cluster shape, the tile and the highlighted CTA; redraws on change.

    The handlers are plain methods (``update``), so tests drive the widget by setting control
    values without a browser; ``self.plan``, ``self.text`` and ``self.figure`` hold the state.
    """

    def __init__(self, tile: str = "128x256x64", cluster=(2, 2), rank: int = 0):
        import ipywidgets as w

        if tile not in TILES:
            raise ShapeError(f"tile {tile!r} is not one the widget offers",
                             f"choose one of {list(TILES)}")
        for side in cluster:
            if side not in CLUSTER_SIDES:
                raise ShapeError(f"cluster {tuple(cluster)}: each side must be one of "
                                 f"{CLUSTER_SIDES}", "e.g. cluster=(2, 1)")
        self.cluster_m = w.Dropdown(options=CLUSTER_SIDES, value=cluster[0], description="cluster M")
        self.cluster_n = w.Dropdown(options=CLUSTER_SIDES, value=cluster[1], description="cluster N")
        self.tile = w.Dropdown(options=list(TILES), value=tile, description="tile")
        self.rank = w.Dropdown(options=list(range(cluster[0] * cluster[1])), value=rank,
                               description="CTA rank")
        self.info = w.HTML()
        self.out = w.Output()
        self.figure = plt.figure(figsize=(10, 4.6))
        plt.close(self.figure)  # shown through the Output widget, not by pyplot
        for control in (self.cluster_m, self.cluster_n, self.tile, self.rank):
            control.observe(self.update, names="value")
        self.box = w.VBox([w.HBox([self.cluster_m, self.cluster_n]), w.HBox([self.tile, self.rank]),
                           self.info, self.out])
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
        self.plan = _plan_for(TILES[self.tile.value], cluster)
        self.text = summary(self.plan, self.rank.value)
        self.info.value = f"<p style='max-width:900px'>{self.text}</p>"
        draw_cluster(TILES[self.tile.value], cluster, self.rank.value, fig=self.figure)
        from IPython.display import display

        self.out.clear_output(wait=True)
        with self.out:
            display(self.figure)

    def _ipython_display_(self):
        from IPython.display import display

        display(self.box)


def cluster_widget(**kwargs) -> ClusterWidget:
    """The interactive picture: ``cluster_widget(tile="128x256x64", cluster=(2, 2))``."""
    return ClusterWidget(**kwargs)
