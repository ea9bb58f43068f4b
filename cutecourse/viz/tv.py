"""Thread-value (TV) layouts: who owns which element of a tile, and what a warp reads.

``cute.make_layout_tv(thr_layout, val_layout)`` returns a tile shape (the *tiler*) and a TV
layout, a map (thread, value) -> element of the tile. This module evaluates it with CuTe
(``cutecourse.layouts.make_layout_tv``) and draws it three ways:

* :func:`draw_tv`: the tile, each element coloured by the thread that owns it and labelled
  ``T<thread> V<value>`` as CuTe's own TV printouts are (large tiles: a window of it);
* :func:`draw_tv_overview`: the whole tile coloured by warp, so the block's split is visible;
* :func:`draw_warp_access`: for a tensor in memory, what one warp touches with each of its
  load instructions (which elements, how many bytes, how many 32-byte sectors), the picture
  behind "consecutive threads on consecutive addresses" and "128-bit loads".

The numbers behind the last picture (``address_map``, ``vector_width``, ``warp_accesses``) are
computed in :mod:`cutecourse.models.coalescing` and importable from here too.
"""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import colors as mcolors
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from .. import layouts
from ..layouts import LayoutTable, TVTable, layout_args, to_text
# The numbers these pictures draw (addresses, vector width, a warp's instructions) are
# cutecourse.models.coalescing; notebook 02 reaches them through this module, so they are re-exported.
from ..models.coalescing import (MAX_VECTOR_BYTES, SECTOR_BYTES, WARP, Access,  # noqa: F401
                                 address_map, tv_layout, vector_width, warp_accesses)
from .layout import MAX_WIDTH, draw_layout
from .widgets import show_error

#: Eight light colours, thread t gets THREAD_COLOURS[t % 8] (CuTe's printouts cycle 8 as well):
#: neighbouring threads always differ, and the T/V labels stay readable on all of them.
THREAD_COLOURS = ["#a6cee3", "#b2df8a", "#fb9a99", "#fdbf6f", "#cab2d6", "#ffff99", "#8dd3c7",
                  "#d9d9d9"]


def _tile_2d(a: np.ndarray) -> np.ndarray:
    return a if a.ndim == 2 else a.reshape(1, -1)


def draw_tv(thr_layout: Any, val_layout: Any = None, *, rows: int | None = None,
            cols: int | None = None, max_cells: int = 512, title: str | None = None) -> plt.Figure:
    """The tile coloured by thread, each element labelled ``T<thread>`` / ``V<value>``.

    A tile with more than ``max_cells`` elements is shown as its top-left window of ``rows`` x
    ``cols`` elements (chosen to hold whole threads where possible); the title says so.
    """
    tv = tv_layout(thr_layout, val_layout)
    owner, value = _tile_2d(tv.owner), _tile_2d(tv.value)
    M, N = owner.shape
    if rows is None or cols is None:
        r, c = M, N
        while r * c > max_cells:
            if c >= r and c > 1:
                c = max(1, c // 2)
            else:
                r = max(1, r // 2)
        rows, cols = rows or r, cols or c
    rows, cols = min(rows, M), min(cols, N)
    o, v = owner[:rows, :cols], value[:rows, :cols]

    cell = min(0.55, (MAX_WIDTH - 1.4) / cols)
    fig, ax = plt.subplots(figsize=(max(cols * cell + 1.4, 4.5), rows * cell * 0.9 + 1.8))
    rgba = np.array([mcolors.to_rgba(THREAD_COLOURS[t % len(THREAD_COLOURS)]) for t in o.ravel()])
    ax.imshow(rgba.reshape(rows, cols, 4), interpolation="nearest", aspect=0.9)
    fs = max(4.5, min(8.0, cell * 72 * 0.26))
    if cell >= 0.3:
        for r in range(rows):
            for c in range(cols):
                ax.text(c, r, f"T{o[r, c]}\nV{v[r, c]}", ha="center", va="center", fontsize=fs,
                        linespacing=0.95, in_layout=False)
    # Outline each thread's elements: a line wherever the owner changes between neighbours.
    for r in range(rows):
        for c in range(cols):
            if c + 1 < cols and o[r, c] != o[r, c + 1]:
                ax.plot([c + 0.5, c + 0.5], [r - 0.5, r + 0.5], color="black", lw=1.2)
            if r + 1 < rows and o[r, c] != o[r + 1, c]:
                ax.plot([c - 0.5, c + 0.5], [r + 0.5, r + 0.5], color="black", lw=1.2)
    ax.add_patch(Rectangle((-0.5, -0.5), cols, rows, fill=False, lw=2, color="black"))
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    step = max(1, int(np.ceil(cols * 0.3 / (cols * cell))))
    ax.set_xticks(range(0, cols, step))
    ax.set_yticks(range(rows))
    ax.tick_params(length=0, labelsize=7)
    ax.set_xlabel("n (tile column)", fontsize=9)
    ax.set_ylabel("m (tile row)", fontsize=9)
    for s in ax.spines.values():
        s.set_visible(False)
    window = "" if (rows, cols) == (M, N) else f"; showing rows 0..{rows - 1}, columns 0..{cols - 1}"
    ax.set_title(title or (f"make_layout_tv({tv.thr.layout}, {tv.val.layout})\n"
                           f"tile {to_text(tv.tiler)}, TV layout {tv.tv.layout}{window}"), fontsize=10)
    ax.text(0, -0.02, "colour = thread (8 colours, cycling), T = thread, V = that thread's value index",
            transform=ax.transAxes, ha="left", va="top", fontsize=8, color="#444444")
    fig.tight_layout()
    plt.close(fig)
    return fig


def draw_tv_overview(thr_layout: Any, val_layout: Any = None, title: str | None = None) -> plt.Figure:
    """The whole tile coloured by warp (thread // 32): which part of the tile each warp covers."""
    tv = tv_layout(thr_layout, val_layout)
    warp = _tile_2d(tv.owner) // WARP
    M, N = warp.shape
    nwarps = int(warp.max()) + 1
    width = MAX_WIDTH if N > 64 else max(4.5, N * 0.2 + 1.5)
    fig, ax = plt.subplots(figsize=(width, min(6.0, max(2.2, width * M / N + 1.4))))
    cmap = plt.get_cmap("tab10" if nwarps <= 10 else "tab20", max(nwarps, 2))
    ax.imshow(warp, cmap=cmap, vmin=-0.5, vmax=max(nwarps, 2) - 0.5, interpolation="nearest",
              aspect="auto")
    for k in range(min(nwarps, 20)):
        rs, cs = np.nonzero(warp == k)
        ax.text(cs.mean(), rs.mean(), f"warp {k}", ha="center", va="center", fontsize=9,
                color="white", fontweight="bold")
    ax.set_xlabel("n (tile column)", fontsize=9)
    ax.set_ylabel("m (tile row)", fontsize=9)
    ax.set_title(title or f"tile {to_text(tv.tiler)}: {tv.threads} threads = {nwarps} warps, "
                 f"{tv.values} values each", fontsize=10)
    fig.tight_layout()
    plt.close(fig)
    return fig


def draw_warp_access(thr_layout: Any, val_layout: Any = None, *, tensor: Any, warp: int = 0,
                     elem_bytes: int = 2, block: int = 0, max_instructions: int = 4) -> plt.Figure:
    """What warp ``warp`` reads with each of its first instructions, on the tile and in memory.

    Left: the tile, the elements the warp loads coloured by instruction (grey: other warps).
    Right: for each instruction, the bytes it touches along the address line, 32-byte sectors
    marked: one unbroken run of full sectors is a coalesced access.
    """
    tv = tv_layout(thr_layout, val_layout)
    addr = address_map(tv, tensor=tensor, block=block)
    acc = warp_accesses(addr, tv.threads, warp=warp, elem_bytes=elem_bytes)
    shown = acc[:max_instructions]

    owner, value = _tile_2d(tv.owner), _tile_2d(tv.value)
    k = len(shown[0].values) if shown else 1
    instr = np.full(owner.shape, -1)
    in_warp = (owner // WARP) == warp
    instr[in_warp] = value[in_warp] // k
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(MAX_WIDTH, 4.2), gridspec_kw={"width_ratios": [1.1, 1]})
    palette = plt.get_cmap("tab10")
    rgba = np.ones(owner.shape + (4,)) * np.array([0.9, 0.9, 0.9, 1.0])
    for j in range(len(shown)):
        rgba[instr == j] = palette(j)
    rgba[(instr >= len(shown))] = (0.75, 0.75, 0.75, 1.0)
    ax0.imshow(rgba, interpolation="nearest", aspect="auto")
    ax0.set_title(f"tile {to_text(tv.tiler)}: elements warp {warp} loads\n(colour = instruction, "
                  f"grey = other warps or later instructions)", fontsize=9)
    ax0.set_xlabel("n (tile column)", fontsize=8)
    ax0.set_ylabel("m (tile row)", fontsize=8)
    ax0.tick_params(labelsize=7)
    for axis in (ax0.xaxis, ax0.yaxis):  # rows and columns are whole numbers: no ticks at 0.5
        axis.set_major_locator(MaxNLocator(integer=True))

    # Right: each instruction's 128-byte lines side by side (gaps between them collapsed), each
    # line as its four 32-byte sectors, the bytes the warp asked for coloured. Coalesced: a few
    # lines, all coloured. Strided: many lines, each mostly empty, yet every sector is moved.
    # 4 lines: what a coalesced 512-byte instruction touches; more would shrink each line until a
    # half-used sector (16 of its 32 bytes) is a few pixels wide
    gap, max_lines = 24, 4
    widest, notes = 0, []
    for j, a in enumerate(shown):
        y = len(shown) - 1 - j
        byte_addr = (a.addresses.ravel() * elem_bytes).astype(np.int64)
        line_ids = np.unique(byte_addr // 128)
        for i, line in enumerate(line_ids[:max_lines]):
            x0 = i * (128 + gap)
            for s in range(4):
                ax1.add_patch(Rectangle((x0 + s * SECTOR_BYTES, y - 0.35), SECTOR_BYTES, 0.7,
                                        fill=False, lw=0.6, color="#555555", zorder=3))
            used = np.zeros(128, dtype=bool)
            for x in byte_addr[(byte_addr // 128) == line]:
                used[x - line * 128: x - line * 128 + elem_bytes] = True
            runs = np.flatnonzero(np.diff(np.concatenate([[0], used.astype(int), [0]])))
            for s0, e0 in zip(runs[::2], runs[1::2]):
                ax1.add_patch(Rectangle((x0 + s0, y - 0.35), e0 - s0, 0.7, color=palette(j)))
        shown_lines = min(len(line_ids), max_lines)
        widest = max(widest, shown_lines * (128 + gap))
        more = f" (first {max_lines} drawn)" if len(line_ids) > max_lines else ""
        ax1.text(-10, y, f"instr {j}", va="center", ha="right", fontsize=8)
        notes.append((y, f"{a.vector_bits}-bit x {WARP} threads = {a.bytes_requested} B\n"
                       f"{len(line_ids)} lines, {a.sectors} sectors{more}: {a.efficiency:.0%} used"))
    for y, text in notes:
        ax1.text(widest + 10, y, text, va="center", fontsize=8)
    ax1.set_xlim(-70, widest * 1.0 + 10 + max(260, widest * 0.55))
    ax1.set_ylim(-0.8, len(shown) - 0.2)
    ax1.axis("off")
    shape, stride = layout_args(tensor)
    ax1.set_title(f"128-byte lines each instruction touches (boxes: 32-byte sectors)\n"
                  f"tensor {to_text(shape)}:{to_text(stride)}, {8 * elem_bytes}-bit elements", fontsize=9)
    fig.suptitle(f"warp {warp} of make_layout_tv({tv.thr.layout}, {tv.val.layout}): "
                 f"{len(acc)} instruction{'s' if len(acc) != 1 else ''} of {acc[0].vector_bits if acc else 0} bits per thread",
                 fontsize=10)
    fig.tight_layout()
    plt.close(fig)
    return fig


def draw_address_map(thr_layout: Any, val_layout: Any = None, *, tensor: Any, block: int = 0,
                     threads: int = 8) -> plt.Figure:
    """(thread, value) -> address as a grid: rows = threads, columns = values (first few threads)."""
    tv = tv_layout(thr_layout, val_layout)
    addr = address_map(tv, tensor=tensor, block=block)
    grid = np.array(addr.offsets).reshape((tv.threads, tv.values), order="F")[:threads] + addr.base
    sub = layouts.evaluate((grid.shape[0], grid.shape[1]))  # coordinate frame for the picture
    table = LayoutTable(addr.layout, sub.shape, sub.stride, sub.coords,
                        tuple(int(x) for x in grid.ravel(order="F")), addr.expr)
    fig = draw_layout(table, title=f"(thread, value) -> address: {addr.expr}\n= {addr.layout}"
                                   f"{f' + {addr.base}' if addr.base else ''}   (threads 0..{threads - 1})")
    ax = fig.axes[0]
    ax.set_ylabel("thread", fontsize=9)
    ax.set_xlabel("value index", fontsize=9)
    return fig


# --------------------------------------------------------------------------------------------
# The interactive view.
# --------------------------------------------------------------------------------------------

#: Element types a learner can pick, by their width in bits.
ELEMENTS = {"fp16 / bf16 (16-bit)": 16, "fp32 (32-bit)": 32, "fp8 (8-bit)": 8}

#: What the picture shows.
VIEWS = ("threads", "warps", "warp accesses", "addresses")


class TVExplorer:
    """Type a thread layout, a value layout and a tensor; see who owns what and what a warp reads.

    Views: ``threads`` (the tile coloured by thread, labelled T/V), ``warps`` (the whole tile by
    warp), ``warp accesses`` (one warp's load instructions: vector width, lines, sectors) and
    ``addresses`` ((thread, value) -> address for the first threads). The readout sums it up and
    lists the selected thread's values. Errors appear as a message; the picture keeps the last
    good state. Handlers (``update``, ``set``) can be called directly. CSS classes:
    ``cc-tv-explorer``, ``cc-tv-thr``, ``cc-tv-val``, ``cc-tv-tensor``, ``cc-tv-view``,
    ``cc-picture``, ``cc-message``, ``cc-readout``.
    """

    def __init__(self, thr: str = "(4,32):(32,1)", val: str = "(4,8):(8,1)",
                 tensor: str = "(64,512):(512,1)", elem_bits: int = 16, view: str = "threads"):
        import ipywidgets as w

        self.tv: TVTable | None = None
        self.addr: LayoutTable | None = None
        self.error: str | None = None
        self.png: bytes = b""
        self._quiet = False
        style = {"description_width": "110px"}
        box = w.Layout(width="380px")
        self.thr_text = w.Text(thr, description="thread layout", continuous_update=False, layout=box,
                               style=style)
        self.val_text = w.Text(val, description="value layout", continuous_update=False, layout=box,
                               style=style)
        self.tensor_text = w.Text(tensor, description="tensor layout", continuous_update=False,
                                  layout=box, style=style)
        self.elem = w.Dropdown(options=list(ELEMENTS.items()), value=elem_bits, description="element",
                               style=style)
        self.view = w.ToggleButtons(options=list(VIEWS), value=view)
        self.warp = w.IntSlider(0, min=0, max=0, description="warp", style=style)
        self.thread = w.IntSlider(0, min=0, max=0, description="thread", style=style)
        # align_self: a flex column would stretch the image to its width (blurry upscaling)
        self.picture = w.Image(format="png", layout=w.Layout(max_width="100%", align_self="flex-start"))
        self.message = w.HTML()
        self.readout = w.HTML()
        for widget, cls in [(self.thr_text, "cc-tv-thr"), (self.val_text, "cc-tv-val"),
                            (self.tensor_text, "cc-tv-tensor"), (self.view, "cc-tv-view"),
                            (self.picture, "cc-picture"), (self.message, "cc-message"),
                            (self.readout, "cc-readout")]:
            widget.add_class(cls)
        for c in (self.thr_text, self.val_text, self.tensor_text, self.elem, self.view, self.warp):
            c.observe(lambda ch: self.update(), names="value")
        self.thread.observe(lambda ch: self._read_out(), names="value")
        self.widget = w.VBox([
            w.HBox([w.VBox([self.thr_text, self.val_text]), w.VBox([self.tensor_text, self.elem])]),
            self.view, self.warp, self.message, self.picture, self.thread, self.readout])
        self.widget.add_class("cc-tv-explorer")
        self.update()

    def set(self, **values: Any) -> None:
        """Set several controls (thr, val, tensor, elem_bits, view, warp) and redraw once."""
        names = {"thr": self.thr_text, "val": self.val_text, "tensor": self.tensor_text,
                 "elem_bits": self.elem, "view": self.view, "warp": self.warp}
        self._quiet = True
        try:
            for k, v in values.items():
                names[k].value = v
        finally:
            self._quiet = False
        self.update()

    def update(self) -> None:
        if self._quiet:
            return
        try:
            tv = tv_layout(self.thr_text.value, self.val_text.value)
            addr = address_map(tv, tensor=self.tensor_text.value)
            elem_bytes = self.elem.value // 8
            nwarps = max(1, tv.threads // WARP)
            self._quiet = True
            self.warp.max = nwarps - 1
            self.thread.max = tv.threads - 1
            self._quiet = False
            warp = min(self.warp.value, nwarps - 1)
            view = self.view.value
            if view == "threads":
                fig = draw_tv(tv)
            elif view == "warps":
                fig = draw_tv_overview(tv)
            elif view == "warp accesses":
                fig = draw_warp_access(tv, tensor=self.tensor_text.value, warp=warp,
                                       elem_bytes=max(1, elem_bytes))
            else:
                fig = draw_address_map(tv, tensor=self.tensor_text.value)
            self.acc = warp_accesses(addr, tv.threads, warp=warp, elem_bytes=max(1, elem_bytes))
        except Exception as e:  # CourseError: its two lines; anything else: one line, no traceback
            self._quiet = False
            show_error(self, e, "check the three layouts")
            return
        from .layout import to_png

        self.tv, self.addr, self.error = tv, addr, None
        self.message.value = ""
        self.png = to_png(fig, dpi=80)
        self.picture.value = self.png
        self._read_out()

    def _read_out(self) -> None:
        tv, addr = self.tv, self.addr
        if tv is None or self.error:
            return
        a0 = self.acc[0]
        t = min(self.thread.value, tv.threads - 1)
        coords = [tv.coord_of(t, v) for v in range(tv.values)]
        addrs = [addr.base + addr.offsets[t + tv.threads * v] for v in range(tv.values)]
        show = 8
        pairs = ", ".join(f"V{v}: {to_text(c)} @ {a}" for v, (c, a) in
                          enumerate(zip(coords[:show], addrs[:show])))
        more = f", ... ({tv.values} values)" if tv.values > show else ""
        self.readout.value = (
            f"tile <b>{to_text(tv.tiler)}</b> · TV layout <b>{_esc(tv.tv.layout)}</b> · "
            f"{tv.threads} threads x {tv.values} values<br>"
            f"(thread, value) -> address: <b>{_esc(addr.layout)}</b><br>"
            f"each warp: {len(self.acc)} loads of <b>{a0.vector_bits} bits</b> per thread, "
            f"{a0.lines} lines / {a0.sectors} sectors per load, <b>{a0.efficiency:.0%}</b> of "
            f"fetched bytes used<br>thread {t}: {pairs}{more}")

    def _repr_mimebundle_(self, **kwargs: Any) -> dict:
        from .widgets import widget_bundle

        what = (f"make_layout_tv({self.tv.thr.layout}, {self.tv.val.layout}): tile "
                f"{to_text(self.tv.tiler)}, TV layout {self.tv.tv.layout}") if self.tv else self.error
        return widget_bundle(self.widget, self.png, f"TVExplorer: {what}")


def _esc(s: str) -> str:
    import html

    return html.escape(str(s))
