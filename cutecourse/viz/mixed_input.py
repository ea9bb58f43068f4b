"""Pictures of notebook 08: the decode roofline, one int4 word becoming four registers, and which
thread of a warpgroup holds which weights after the offline reorder.

* :func:`draw_roofline`: time of y = x @ W.T against the batch M, bf16 and int4 weights, the
  two ceilings of ``models/decode_roofline`` and, where given, measured points;
* :func:`draw_word`: the 8 nibbles of a packed word, the value of the thread's fragment each
  holds, and the register (bf16 pair) each becomes;
* :func:`draw_reorder`: a 64 x 64 block of W coloured by warp, with some threads' 32 values
  marked, beside the packed block (64 rows x 8 words), where the same threads' 4 words sit.
"""

from __future__ import annotations

from ..models import decode_roofline as dr
from ..quant import reorder

#: One colour per case of the benchmark (and per bound drawn in the same colour, dashed).
CASE_COLORS = {"cuBLAS bf16": "#6e7781", "torch tinygemm int4": "#e36209", "course mixed_mm": "#2e7d32"}
WARP_COLORS = ("#dbe9f6", "#e6f4ea", "#fdf0d5", "#f3e5f5")
MARK_COLORS = ("#1565c0", "#c62828", "#6a1b9a", "#ef6c00")


def draw_roofline(n: int = 8192, k: int = 8192, group: int = 128, measured: dict | None = None,
                  ms=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)):
    """Microseconds against M (log-log): the bf16 and int4 bounds, and ``measured`` points
    ({case name: [(M, us)]}, ``decode_roofline.measured``) if any."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for bits, color, name in ((16, CASE_COLORS["cuBLAS bf16"], "bf16 weights"),
                              (4, CASE_COLORS["course mixed_mm"], "int4 weights")):
        us = [dr.bound(m, n, k, bits, group).us for m in ms]
        ax.plot(ms, us, "--", color=color, label=f"bound, {name}")
        ax.axvline(dr.crossover(bits), color=color, lw=0.6, alpha=0.6)
        # the label at the top of its line, clear of the x axis and of the curves below it
        ax.text(dr.crossover(bits), 0.97, f" M* = {dr.crossover(bits):.0f}", color=color, fontsize=8, va="top",
                transform=ax.get_xaxis_transform())
    for name, points in (measured or {}).items():
        xs, ys = zip(*points)
        ax.plot(xs, ys, "o-", ms=4, lw=1, color=CASE_COLORS.get(name, "#000000"), label=f"measured: {name}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("M (tokens in the batch)")
    ax.set_ylabel("time per GEMM (us)")
    where = "with the measured points" if measured else "the model alone"
    ratio = dr.bound(ms[0], n, k, 16, group).us / dr.bound(ms[0], n, k, 4, group).us  # the scales, x and y move too
    ax.set_title(f"W {n} x {k}: flat while the weights' bytes bind, int4 {ratio:.1f}x lower up to M* ({where})",
                 fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    return fig


def draw_word():
    """One packed word: nibble p holds fragment value NIBBLE^-1[p]; register j takes nibbles j
    (low bf16) and j + 4 (high bf16), i.e. values 2j and 2j + 1."""
    import matplotlib.pyplot as plt

    value_at = {p: v for v, p in enumerate(reorder.NIBBLE)}
    fig, ax = plt.subplots(figsize=(7.5, 2.6))
    colors = MARK_COLORS
    for p in range(8):  # bit 31 on the left, as a register is written
        x = 7 - p
        j = p % 4
        ax.add_patch(plt.Rectangle((x, 1.6), 1, 0.8, fc=colors[j], alpha=0.25, ec="black"))
        ax.text(x + 0.5, 2.0, f"v{value_at[p]}", ha="center", va="center", fontsize=10)
        ax.text(x + 0.5, 2.55, f"bits {4 * p + 3}-{4 * p}", ha="center", fontsize=6.5)
    for j in range(4):
        x = 0.2 + 2 * j
        ax.add_patch(plt.Rectangle((x, 0), 1.6, 0.7, fc=colors[j], alpha=0.25, ec="black"))
        ax.text(x + 0.8, 0.35, f"r{j}: (v{2 * j}, v{2 * j + 1})", ha="center", va="center", fontsize=8)
        for p in (j, j + 4):
            ax.annotate("", xy=(x + 0.8, 0.72), xytext=(7 - p + 0.5, 1.58),
                        arrowprops=dict(arrowstyle="->", color=colors[j], lw=0.8))
    ax.text(8.2, 2.0, "one 32-bit word\n(8 int4)", va="center", fontsize=8)
    ax.text(8.2, 0.35, "four bf16x2\nregisters", va="center", fontsize=8)
    ax.set_xlim(0, 10)
    ax.set_ylim(-0.1, 2.8)
    ax.axis("off")
    ax.set_title("Interleaved nibbles: register j is (word >> 4j) & 0x000F000F, one shift and one mask",
                 fontsize=9)
    fig.tight_layout()
    return fig


def draw_reorder(threads=(0, 5, 37, 127)):
    """Left: a 64 x 64 block of W (rows = N, columns = K), background by warp, the values of
    ``threads`` marked; middle: slice 0's first 32 rows enlarged, each value with its index (too
    small to read on the whole block); right: the packed block, each thread's 4 words."""
    import matplotlib.pyplot as plt

    fig, (ax, zx, bx) = plt.subplots(1, 3, figsize=(10, 4.9), gridspec_kw={"width_ratios": [64, 30, 8 * 3]})
    zoom_rows, zoom_cols = 28, 12  # slice 0, rows 0-27, k 0-11: threads 0, 5 and 37
    for warp in range(4):
        ax.add_patch(plt.Rectangle((0, 16 * warp), 64, 16, fc=WARP_COLORS[warp], ec="none"))
        ax.text(64.5, 16 * warp + 8, f"warp {warp}", va="center", fontsize=7)
    for color, t in zip(MARK_COLORS, threads):
        for s in range(reorder.SLICES):
            for v in range(reorder.VALUES):
                m, kk = reorder.fragment_coord(t, v)
                ax.add_patch(plt.Rectangle((16 * s + kk, m), 1, 1, fc=color, ec="none"))
                if s == 0 and m < zoom_rows and kk < zoom_cols:
                    zx.add_patch(plt.Rectangle((kk, m), 1, 1, fc=color, ec="none"))
                    zx.text(kk + 0.5, m + 0.5, str(v), fontsize=7, ha="center", va="center", color="white")
        r, c = reorder.word_position(t, 0)
        bx.add_patch(plt.Rectangle((c, r), 4, 1, fc=color, ec="black", lw=0.5))
        bx.text(c + 2, r - 0.5, f"thread {t}", ha="center", va="bottom", fontsize=7, color=color)
        g = 16 * (t // 32) + (t % 32) // 4
        ax.plot([], [], "s", color=color, label=f"thread {t}: rows {g}, {g + 8}")
    for warp in range(4):  # thread t's words are in packed row t / 2: warp w in rows 16 w .. 16 w + 15
        bx.add_patch(plt.Rectangle((0, 16 * warp), 8, 16, fc=WARP_COLORS[warp], ec="none", zorder=0))
    for warp in range(2):
        zx.add_patch(plt.Rectangle((0, 16 * warp), zoom_cols, 16, fc=WARP_COLORS[warp], ec="none", zorder=0))
    zx.set_xlim(0, zoom_cols)
    zx.set_ylim(zoom_rows, 0)
    zx.set_xticks(range(0, zoom_cols, 2))
    zx.set_xlabel("k in slice 0")
    zx.set_title(f"enlarged: rows 0-{zoom_rows - 1}, k 0-{zoom_cols - 1},\nvalue index", fontsize=9)
    for s in range(1, 4):
        ax.axvline(16 * s, color="black", lw=0.5)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=len(threads), frameon=False)
    ax.set_xlim(0, 64)
    ax.set_ylim(64, 0)
    ax.set_xlabel("k in the block (4 slices of 16: one wgmma each)")
    ax.set_ylabel("weight row n in the block")
    ax.set_title("W: each marked thread's 8 values in every slice", fontsize=9)
    bx.set_xlim(0, 8)
    bx.set_ylim(64, -3)
    bx.set_xticks(range(8))
    bx.set_xlabel("word column")
    bx.set_ylabel("packed row")
    bx.set_title("packed: 16 B a thread", fontsize=9)
    fig.suptitle("The offline reorder: a thread's 32 values of a 64 x 64 block are its 4 consecutive words",
                 fontsize=10)
    fig.tight_layout()
    return fig


def draw_ampere_tiles():
    """The two data paths side by side: Ampere (weights as mma.sync's B, both operands from
    registers, batch on M >= 16) and Hopper (weights as wgmma's A from registers, x as B from
    smem, batch on N >= 8)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 2.8))
    steps = {
        "Ampere, CUTLASS 2.x": ["cp.async: W (int4), x, scales -> smem", "ldmatrix: W -> registers",
                                "convert + scale in registers (lop3, sub, mul)", "mma.sync m16n8k16: x (A, regs),\nW (B, regs): batch on M >= 16"],
        "Hopper, CUTLASS 3.x (and this course)": ["TMA: W (int4), x, scales -> smem", "ld.shared: W -> registers",
                                                  "convert + scale in registers (lop3, sub, mul)", "wgmma m64nNk16: W (A, regs),\nx (B, smem): batch on N >= 8"],
    }
    for ax, (title, labels) in zip(axes, steps.items()):
        for i, label in enumerate(labels):
            y = 3 - i
            ax.add_patch(plt.Rectangle((0, y), 6, 0.75, fc="#e6f4ea" if "convert" in label else "#f6f8fa", ec="black"))
            ax.text(3, y + 0.37, label, ha="center", va="center", fontsize=7.5)
            if i:
                ax.annotate("", xy=(3, y + 0.77), xytext=(3, y + 1.0), arrowprops=dict(arrowstyle="->"))
        ax.set_xlim(-0.2, 6.2)
        ax.set_ylim(-0.1, 3.9)
        ax.axis("off")
        ax.set_title(title, fontsize=9)
    fig.suptitle("Both convert int4 in registers; only the MMA's operands differ", fontsize=10)
    fig.tight_layout()
    return fig
