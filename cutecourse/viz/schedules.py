"""Pictures and a widget for :mod:`cutecourse.models.schedules`: where the tensor cores wait.

``draw_timelines(results)`` puts the four schedules one above the other on one time axis: per SM
a TMA row (k-tiles streaming in) and one MMA row per unit that owns a tile (the consumers of a
CTA; the warpgroup for ping-pong; the CTA for 2 CTAs per SM; the model calls these *lanes*) with
MMA, epilogue and idle bars. ``draw_waves(result)`` shows every SM's tiles over the whole run, so
a partial last wave is an empty band on the right. Both state the model's clock: its TFLOP/s are
at the H100's 1830 MHz boost clock, not at a measured one. The interactive version is
:class:`cutecourse.viz.schedule_widget.ScheduleWidget`, which imports this module (never the
other way round).
``draw_measured(results)`` shows the measured table (``benchmarks/schedules.py``) beside them.
"""

from __future__ import annotations

from ..errors import CourseError
from ..models import schedules as sm

#: Colour per kind of interval (amber: TMA bytes arriving, as in viz.pipeline; blue: tensor
#: cores; purple: epilogue; grey: a row with nothing to do).
KIND_COLORS = {"load": "#ffd54f", "mma": "#42a5f5", "epilogue": "#ab47bc", "idle": "#eeeeee"}
#: What each picture shows (the title's point).
POINTS = {
    "one_cta": "every tile pays launch + ring fill, then its epilogue",
    "cooperative": "next tile's loads hide under the epilogue, which stays exposed",
    "pingpong": "epilogue hidden under the other warpgroup's MMAs",
    "two_cta": "two CTAs interleave; one's prologue/epilogue hides under the other",
}
SHAPES = (512, 1024, 2048, 4096, 6144, 8192, 14336, 16384)
TILES = ((128, 256, 64), (128, 128, 64), (256, 128, 64))


def clock_mhz(result) -> int:
    """The clock the model's times and TFLOP/s assume (``Machine.clock_ghz``), in MHz: 1830, the
    H100's boost clock, unless the model ran ``at_clock`` a measured one."""
    return round(result.clock_ghz * 1000)


def tile_owner(result) -> str:
    """What one MMA row of a timeline computes: ``64x256 per warpgroup`` for ping-pong, ``... per
    CTA`` for 2 CTAs per SM, ``... per CTA (2 consumer warpgroups)`` for the others."""
    who = {"pingpong": "warpgroup", "two_cta": "CTA"}.get(result.schedule, "CTA (2 consumer warpgroups)")
    return f"{result.tile[0]}x{result.tile[1]} per {who}"


def _as_list(results) -> list:
    if isinstance(results, sm.ScheduleResult):
        return [results]
    items = list(results.values()) if isinstance(results, dict) else list(results)
    if not items:
        raise CourseError("nothing to draw", "pass simulate_all(M, N, K) or a list of simulate(...) results")
    return items


def _auto_window(results, sm0: int) -> float:
    """Long enough for about three CTA-sized tiles on SM ``sm0`` in every schedule."""
    ends = []
    for r in results:
        spans = sorted(e for *_, e in r.tile_spans(sm0))
        ends.append(spans[min(len(spans), 3 * r.lanes) - 1] if spans else r.total_us)
    return max(ends) * 1.03


def draw_timelines(results, sms=(0, 1, 2), window=None, label_tiles: bool = True):
    """One panel per schedule, shared time axis (µs), rows per SM: TMA, then each consumer lane.

    ``window``: ``(start_us, end_us)``, ``"all"`` (the whole run) or None (the first few tiles).
    Returns the figure.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    results = _as_list(results)
    sms = tuple(sms)
    if not sms or any(not 0 <= s < r.sms for s in sms for r in results):
        raise CourseError(f"SMs {sms} are not all on the machine", "pick SMs in 0..sms-1, e.g. sms=(0, 1)")
    if window == "all":
        window = (0.0, max(r.total_us for r in results) * 1.01)
    elif window is None:
        window = (0.0, _auto_window(results, sms[0]))
    lo, hi = window
    rows = [len(sms) * (r.lanes + 1) for r in results]
    fig, axes = plt.subplots(len(results), 1, sharex=True, squeeze=False,
                             figsize=(10, 0.9 + sum(0.32 * n + 0.55 for n in rows)),
                             gridspec_kw={"height_ratios": rows})
    for ax, r in zip(axes[:, 0], results):
        yticks, ylabels, y = [], [], 0.0
        for s in sms:
            ivs = r.intervals(s, lo, hi)
            lane_name = {"pingpong": "WG", "two_cta": "CTA"}.get(r.schedule)
            lane_rows = {ln: y - 1 - ln for ln in range(r.lanes)}
            for kind in sm.KINDS:
                if kind == "load":
                    spans = [(iv.start, iv.end - iv.start) for iv in ivs if iv.kind == kind]
                    ax.broken_barh(spans, (y - 0.3, 0.6), facecolors=KIND_COLORS[kind], edgecolor="#8d6e00",
                                   linewidth=0.2)
                    continue
                for ln, row in lane_rows.items():
                    spans = [(iv.start, iv.end - iv.start) for iv in ivs if iv.kind == kind and iv.lane == ln]
                    ax.broken_barh(spans, (row - 0.38, 0.76), facecolors=KIND_COLORS[kind], linewidth=0.3,
                                   edgecolor={"idle": "none", "mma": "#1565c0"}.get(kind, "black"))
            if label_tiles:  # a tile's MMAs, first to last, labelled where the bar is wide enough
                spans = {}
                for iv in ivs:
                    if iv.kind == "mma":
                        a, b, _ = spans.get(iv.tile, (iv.start, iv.end, iv.lane))
                        spans[iv.tile] = (min(a, iv.start), max(b, iv.end), iv.lane)
                for t, (a, b, ln) in spans.items():
                    a, b = max(a, lo), min(b, hi)
                    if b - a > 0.05 * (hi - lo):
                        ax.text((a + b) / 2, lane_rows[ln], f"t{t}", ha="center", va="center", fontsize=7)
            yticks += [y] + list(lane_rows.values())
            ylabels += [f"SM {s} TMA"] + [f"SM {s} " + (f"{lane_name}{ln}" if lane_name else "MMA")
                                          for ln in range(r.lanes)]
            y -= r.lanes + 1.4
        ax.set_yticks(yticks, ylabels, fontsize=7.5)
        ax.set_ylim(y + 0.8, 0.7)
        # the figures first: a long title is clipped at the right edge, never its numbers
        ax.set_title(f"{r.name}, {tile_owner(r)}: {r.total_us:.0f} µs, {r.tflops:.0f} TFLOP/s. "
                     f"{POINTS[r.schedule]}", fontsize=9, loc="left")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("time (µs)")
    m, n, k = results[0].problem
    fig.legend(handles=[Patch(facecolor=c, edgecolor="black", label=k_) for k_, c in KIND_COLORS.items()],
               loc="upper right", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(f"C = A @ B.T, {m}x{n}x{k} on {results[0].sms} SMs, model at {clock_mhz(results[0])} MHz: "
                 "what the tensor cores wait for",
                 fontsize=10, x=0.01, ha="left")
    fig.tight_layout()
    return fig


def draw_waves(result, ax=None):
    """Every SM's tiles over the run (x: µs, y: SM), coloured by wave; the last wave in red."""
    import matplotlib.pyplot as plt

    r = result
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 4.2))
    slots = r.sms * r.lanes
    last = (r.tiles - 1) // slots
    colors = ("#90caf9", "#1e88e5")
    h = 1.0 / r.lanes
    for s in range(r.sms):
        bars = {}
        for t, ln, a, b in r.tile_spans(s):
            wave = t // slots
            color = "#e53935" if wave == last and r.last_wave_utilisation < 1 else colors[wave % 2]
            bars.setdefault(color, {}).setdefault(ln, []).append((a, b - a))
        for color, by_lane in bars.items():
            for ln, spans in by_lane.items():
                ax.broken_barh(spans, (s - 0.5 + ln * h, h), facecolors=color, edgecolor="none",
                               antialiased=False)
    ax.axvline(r.total_us, color="black", linewidth=0.8)
    ax.set_xlim(0, r.total_us * 1.02)
    ax.set_ylim(r.sms, -1)
    ax.set_xlabel("time (µs): one bar per tile, first MMA to end of epilogue; waves alternate blue, "
                  "the last (partial) wave red", fontsize=8)
    ax.set_ylabel("SM")
    m, n, k = r.problem
    lanes = f" x {r.lanes} {'warpgroups' if r.schedule == 'pingpong' else 'CTAs'}" if r.lanes > 1 else ""
    ax.set_title(f"{r.name} (model at {clock_mhz(r)} MHz), {m}x{n}x{k}, {r.tile[0]}x{r.tile[1]} tiles: "
                 f"{r.tiles} tiles = "
                 f"{r.waves:.2f} waves on {r.sms} SMs{lanes}; last wave {r.last_wave_utilisation:.0%} full",
                 fontsize=9)
    ax.figure.tight_layout()
    return ax


def draw_measured(results: dict, title: str = "", kernels=None, ax=None):
    """A measured result set (``bench.load_set("schedules_float16")``): for every shape, each
    kernel's speed relative to torch.matmul in the same run (1.0 = as fast as cuBLAS)."""
    import matplotlib.pyplot as plt
    import numpy as np

    shapes = list(results)
    names = kernels or [r.name for r in next(iter(results.values())).rows if r.name != "torch.matmul"]
    if ax is None:
        _, ax = plt.subplots(figsize=(11, 3.6))
    width = 0.8 / len(names)
    cmap = plt.get_cmap("tab10")
    for i, name in enumerate(names):
        ratios = [results[s].row(name).ratio for s in shapes]
        ax.bar(np.arange(len(shapes)) + (i - (len(names) - 1) / 2) * width, ratios, width,
               label=name, color=cmap(i % 10))
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(range(len(shapes)), [s.replace(" 4096x", "\n4096x", 1) for s in shapes], fontsize=8)
    ax.set_ylabel("speed / torch.matmul")
    ax.set_ylim(0.5, max(1.1, max(r.ratio for res in results.values() for r in res.rows) + 0.05))
    ax.set_title(title or "measured on the H100, same run per shape: which schedule wins where")
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.2))
    return ax


def draw_stream_k(tiles: int, ctas: int, k_tiles: int, show: int = 10, fixup: float = 0.0,
                  min_saved: int | None = None, ax=None):
    """The stream-K schedule of ``models/stream_k``: the first ``show`` CTAs' units over time (x:
    k-tiles of work), whole tiles grey, pieces of split tiles coloured by tile. A piece that ends
    before its tile's last k-tile writes partial sums (an open square); the CTA of the tail piece
    adds them (a filled square) and runs the epilogue. ``fixup``: k-tiles charged per save and per add."""
    import matplotlib.pyplot as plt

    from ..models import stream_k

    min_saved = stream_k.MIN_SAVED if min_saved is None else min_saved
    if tiles < 1 or ctas < 1 or k_tiles < 1 or show < 1:
        raise CourseError(f"tiles={tiles}, ctas={ctas}, k_tiles={k_tiles}, show={show}: all must be >= 1")
    dp, _, _ = stream_k.plan(tiles, ctas, k_tiles, min_saved)
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 0.35 * min(show, ctas) + 1.4))
    palette = plt.get_cmap("tab20")
    whole = -(-tiles // ctas) * k_tiles
    for cta in range(min(show, ctas, tiles)):
        t = 0.0
        for tile, k0, k1 in stream_k.units(cta, ctas, tiles, k_tiles, min_saved):
            split = tile >= dp
            color = palette((tile - dp) % 20) if split else "#bdbdbd"
            ax.broken_barh([(t, k1 - k0)], (cta - 0.4, 0.8), facecolors=color, edgecolor="white")
            if split:
                ax.text(t + (k1 - k0) / 2, cta, f"t{tile} k{k0}-{k1 - 1}", ha="center", va="center",
                        fontsize=6)  # inclusive, as the notebook prints ranges
            t += k1 - k0
            # A save or an add costs ``fixup`` k-tiles (0 unless asked; a few would be a pixel or
            # two at this scale), so a square marks where it happens: open a save, filled an add.
            if split and k1 < k_tiles:  # a head or middle piece: its partial sums go to the workspace
                ax.broken_barh([(t, fixup)], (cta - 0.4, 0.8), facecolors="#6d4c41")
                ax.plot(t + fixup / 2, cta, marker="s", markersize=5, markerfacecolor="white",
                        markeredgecolor="#6d4c41", linestyle="none")
                t += fixup
            elif split and k0 > 0:  # a tail: add the others' partial sums, then the epilogue
                ax.broken_barh([(t, fixup)], (cta - 0.4, 0.8), facecolors="#6d4c41")
                ax.plot(t + fixup / 2, cta, marker="s", markersize=5, color="#6d4c41", linestyle="none")
                t += fixup
    ax.axvline(whole, color="#e53935", linewidth=1, linestyle="--")
    ax.text(whole, -0.9, "end without the split ", color="#e53935", fontsize=7, va="bottom", ha="right")
    ax.set_xlim(max(0, (dp // ctas - 1) * k_tiles), whole * 1.01)  # the last whole tile, then the split
    ax.set_ylim(min(show, ctas, tiles) - 0.5, -1.2)
    ax.set_ylabel("CTA")
    ax.set_xlabel("k-tiles of work (grey: whole tiles; colour: pieces of split tiles; open square: save "
                  "partial sums; filled: add them)", fontsize=8)
    span = stream_k.makespan(tiles, ctas, k_tiles, fixup, min_saved)
    ax.set_title(f"Stream-K, {tiles} tiles on {ctas} CTAs: the partial last wave shared out, "
                 f"{span:.0f} k-tiles of work for the busiest CTA instead of {whole}", fontsize=9)
    return ax.figure


def draw_ordered_barrier(tiles: int = 5, mma: float = 1.0, epilogue: float = 0.45, ax=None):
    """Ping-pong's ordered barrier (``models/ordered_barrier``) over time: per consumer warpgroup
    its MMAs, epilogues and waits; an arrow per hand-over, from the ``bar.arrive`` of one
    warpgroup to the ``bar.sync`` of the other that it completes, numbered in turn order."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    from ..models import ordered_barrier as ob

    events = ob.simulate(tiles, mma, epilogue)
    if ax is None:
        _, ax = plt.subplots(figsize=(9.5, 2.9))
    row = {0: 1.0, 1: 0.0}  # warpgroup 0 on top
    colors = {"mma": KIND_COLORS["mma"], "epilogue": KIND_COLORS["epilogue"], "wait": "#e0e0e0"}
    for e in events:
        w, kind = e.op.warpgroup, e.op.kind
        if kind in colors and e.end > e.start:
            ax.broken_barh([(e.start, e.end - e.start)], (row[w] - 0.3, 0.6), facecolors=colors[kind],
                           edgecolor="#616161" if kind == "wait" else "black", linewidth=0.5,
                           hatch="//" if kind == "wait" else None)
            label = {"mma": f"t{e.op.tile} MMAs", "epilogue": f"t{e.op.tile} epi", "wait": "waits"}[kind]
            if e.end - e.start > 0.25:
                ax.text((e.start + e.end) / 2, row[w], label, ha="center", va="center", fontsize=7)
    # one arrow per hand-over: the arrive that completed each wait, in the order the turns came
    waits = sorted((e for e in events if e.op.kind == "wait"), key=lambda e: e.end)
    for step, wait in enumerate(waits, start=1):
        b, arrive = wait.op.barrier, wait.arrive
        a_w, s_w = arrive.op.warpgroup, wait.op.warpgroup
        y0 = row[a_w] + (0.32 if row[a_w] < row[s_w] else -0.32)
        y1 = row[s_w] + (-0.32 if row[a_w] < row[s_w] else 0.32)
        ax.annotate("", xy=(wait.end, y1), xytext=(arrive.start, y0),
                    arrowprops={"arrowstyle": "-|>", "color": "#2e7d32", "lw": 1.3})
        ax.text((arrive.start + wait.end) / 2 + 0.03, 0.5, f"{step}: WG{a_w} arrives\non barrier {b}",
                fontsize=6.5, color="#2e7d32", ha="left", va="center")
    ax.set_yticks([row[0], row[1]], ["WG0\n(tiles 0, 2, ...)", "WG1\n(tiles 1, 3, ...)"], fontsize=8)
    ax.set_ylim(-0.55, 1.8)
    end = max(e.end for e in events)
    ax.set_xlim(-0.05, end * 1.02)
    ax.set_xlabel("time (one tile's MMAs = 1)\ngreen arrow: one warpgroup's bar.arrive on barrier b "
                  "completes the other's bar.sync b (its turn)", fontsize=8)
    ax.legend(handles=[Patch(facecolor=c, edgecolor="black", hatch="//" if k == "wait" else None, label=k)
                       for k, c in colors.items()], loc="upper right", ncol=3, fontsize=7, frameon=False)
    ax.set_title(f"Ping-pong's ordered barrier, {tiles} tiles: one warpgroup's MMAs run during the "
                 "other's epilogue", fontsize=9, loc="left")
    ax.figure.tight_layout()
    return ax.figure
