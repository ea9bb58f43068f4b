"""Pictures of the TV-layout tuning sweep (``benchmarks/elementwise_tv.py``'s JSON).

``draw_sweep(result)``: left, a heat map of GB/s over thread shape x rows of values (each row one
128-bit vector per thread), the grid the sweep walks; right, the variants that each teach one
thing (block order, vector width, values side by side, cache hints) next to torch.add, on an axis
that starts near the slowest of them so differences of a few per cent are visible.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ..results import BenchResult


def _configs(result: BenchResult) -> dict[str, dict]:
    return result.params.get("configs", {})


def grid(result: BenchResult) -> tuple[list[str], list[int], np.ndarray]:
    """(thread shapes, value rows, GB/s[thread shape, value rows]) for the plain configurations:
    row-major blocks along N, no cache hint, one 16-byte vector per value row."""
    cfg = _configs(result)
    plain = {n: c for n, c in cfg.items()
             if c["raster"] == "n" and not c.get("hint") and c["val"][1] == _vector_cols(cfg)}
    thrs = sorted({tuple(c["thr"]) for c in plain.values()}, key=lambda t: (t[0] * t[1], t[0]))
    rows = sorted({c["val"][0] for c in plain.values()})
    table = np.full((len(thrs), len(rows)), np.nan)
    for name, c in plain.items():
        table[thrs.index(tuple(c["thr"])), rows.index(c["val"][0])] = result.speed(result.row(name))
    return [f"({t[0]},{t[1]})" for t in thrs], rows, table


def _vector_cols(cfg: dict[str, dict]) -> int:
    """Elements in one 16-byte vector: the most common value-row width among the configs."""
    widths = [c["val"][1] for c in cfg.values()]
    return max(set(widths), key=widths.count) if widths else 8


def draw_sweep(result: BenchResult, lessons: list[tuple[str, str]] | None = None) -> plt.Figure:
    """Heat map of the thread x value grid, and the lesson variants against torch.add."""
    thrs, rows, table = grid(result)
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11.5, 4.4), gridspec_kw={"width_ratios": [1, 1.25]})
    im = ax0.imshow(table, cmap="viridis", aspect="auto")
    for i in range(len(thrs)):
        for j in range(len(rows)):
            if not np.isnan(table[i, j]):
                ax0.text(j, i, f"{table[i, j]:.0f}", ha="center", va="center", fontsize=8,
                         color="white" if table[i, j] < np.nanmean(table) else "black")
    ax0.set_xticks(range(len(rows)), [f"({r},{_vector_cols(_configs(result))})" for r in rows])
    ax0.set_yticks(range(len(thrs)), thrs)
    ax0.set_xlabel("value layout (rows, columns) per thread", fontsize=9)
    ax0.set_ylabel("thread layout (rows, columns)", fontsize=9)
    ax0.set_title("GB/s: fewer values per thread is faster here", fontsize=10)
    fig.colorbar(im, ax=ax0, fraction=0.04, pad=0.02)

    base = result.row(result.baseline)
    picks = lessons or default_lessons(result)
    names = [label for _, label in picks][::-1]
    speeds = [result.speed(result.row(n)) for n, _ in picks][::-1]
    colors = ["#9e9e9e" if n == result.baseline else "#2e7d32" for n, _ in picks][::-1]
    ax1.barh(names, speeds, color=colors)
    lo = min(speeds) * 0.97
    ax1.set_xlim(lo, max(speeds) * 1.012)
    for y, s in enumerate(speeds):
        ax1.text(s, y, f" {s:.0f} ({s / result.speed(base):.3f}x)", va="center", fontsize=8)
    ax1.axvline(result.speed(base), color="#616161", ls="--", lw=1)
    ax1.set_xlabel(f"{result.unit} (axis starts at {lo:.0f}, not 0)", fontsize=9)
    ax1.tick_params(labelsize=8)
    ax1.set_title("one change at a time, vs torch.add (dashed)", fontsize=10)
    env = result.environment
    fig.suptitle(f"{result.title} - {env.get('device', '?')}, {env.get('date', '')[:10]}", fontsize=10)
    fig.tight_layout()
    plt.close(fig)
    return fig


def default_lessons(result: BenchResult) -> list[tuple[str, str]]:
    """(row name, label) for the variants the notebook discusses, those present in ``result``."""
    have = {r.name for r in result.rows}
    best = next(r.name for r in sorted(result.rows, key=lambda r: -result.speed(r))
                if r.name != result.baseline)
    wanted = [
        (result.baseline, result.baseline),
        (best, f"best: {best}"),
        ("thr(1,256) val(1,8)", "(1,256) x (1,8): 128-bit"),
        ("thr(1,256) val(1,4)", "(1,256) x (1,4): 64-bit"),
        ("thr(1,256) val(1,2)", "(1,256) x (1,2): 32-bit"),
        ("thr(4,32) val(4,8)", "seed shapes, blocks along N"),
        ("thr(4,32) val(4,8) m-order", "seed shapes, blocks down M (seed)"),
        ("thr(4,32) val(1,16)", "(4,32) x (1,16): 2 vectors side by side"),
        ("thr(4,32) val(1,32)", "(4,32) x (1,32): 4 vectors side by side"),
        ("thr(1,256) val(1,8) nc", "(1,256) x (1,8), ld.global.nc"),
        ("thr(1,256) val(1,8) cs", "(1,256) x (1,8), ld.global.cs"),
    ]
    out, seen = [], set()
    for name, label in wanted:
        if name in have and name not in seen:
            out.append((name, label))
            seen.add(name)
    return out
