"""Pictures of block scaling (model: :mod:`cutecourse.models.block_scaling`).

* ``draw_tile(x, fmt)``: one tile of a weight-like matrix, twice. Top: ``|x|`` per element, so the
  outlier columns and rows stand out. Bottom: the same tile cut into the format's blocks (1x16 for
  NVFP4, 1x32 for MXFP8/MXFP4), each block coloured by its scale factor and labelled with it. A
  block that holds an outlier gets a large scale; its neighbours keep small ones: that is what a
  scale per block buys over one scale per tensor.
* ``draw_errors(x)``: the round-trip error of bf16, DeepSeek's fp8 (1x128 blocks), MXFP8, NVFP4
  (as used: a per-tensor fp32 scale, then e4m3 block scales), NVFP4 without its per-tensor scale,
  and fp4 with a single scale for the whole tensor, as bars (relative Frobenius error, log scale)
  and as a histogram of each element's relative error.
* ``draw_sf_layout(rows, kblocks, row, kblock)``: where Blackwell's interleaved scale-factor
  buffer keeps the scale of (row, k-block): left, the logical (row, k-block) grid cut into
  128x4 atoms; right, the 512 bytes of one atom as 32 lines of 16 bytes, each byte labelled with
  the (row, k-block) whose scale it holds.

The interactive picture (format, outliers and a chosen block) is
:func:`cutecourse.viz.block_scaling_widget.block_scaling_widget`; it imports this module, never
the other way round.

Every number drawn is computed by the model here (``quantize``, ``error_table``, ``sf_offset``).
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt  # headless (no display): matplotlib picks Agg by itself
import numpy as np
import torch
from matplotlib.collections import PatchCollection
from matplotlib.colors import LogNorm, Normalize
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from ..errors import ShapeError
from ..models import block_scaling as bs

#: Formats the tile picture and the widget offer (the block formats of the model).
TILE_FORMATS = ("nvfp4", "mxfp8", "mxfp4")
#: Formats of the error chart, from most bits to fewest; the last two are foils: NVFP4 without
#: its per-tensor scale (block scales only) and fp4 with one scale for the whole tensor.
ERROR_FORMATS = ("bf16", "fp8_blockwise", "mxfp8", "nvfp4", "nvfp4_block_only", "fp4_per_tensor")
LABELS = {"bf16": "bf16", "fp8_blockwise": "fp8 1x128\n(DeepSeek)", "mxfp8": "MXFP8",
          "nvfp4": "NVFP4", "nvfp4_block_only": "NVFP4\nno tensor\nscale", "mxfp4": "MXFP4",
          "mxfp8_e5m2": "MXFP8\ne5m2", "fp4_per_tensor": "fp4\none scale\n/tensor"}
_ERR_COLORS = {"bf16": "#4c72b0", "fp8_blockwise": "#64b5cd", "mxfp8": "#55a868", "mxfp8_e5m2": "#8fbc8f",
               "nvfp4": "#dd8452", "nvfp4_block_only": "#f2c5a5", "mxfp4": "#c44e52",
               "fp4_per_tensor": "#8c8c8c"}
#: Colours of the four row quarters (rows r, r+32, r+64, r+96 share one 16-byte line).
_QUARTER_COLORS = ("#a6cee3", "#b2df8a", "#fdbf6f", "#cab2d6")


# -------------------------------------------------------------------------------- the data ----


def block_scales(x: torch.Tensor, fmt: str) -> np.ndarray:
    """The stored scale factor of every block of ``x`` (rows, K / block) as float64: the model's,
    for the format as used (NVFP4: the e4m3 scales of ``x / global_scale``)."""
    return bs.quantize_as_used(x, fmt).sf.float().double().numpy()


def per_tensor_fp4_round_trip(x: torch.Tensor) -> torch.Tensor:
    """fp4 (e2m1) with ONE fp32 scale ``amax / 6`` for the whole tensor: the foil for block scaling.

    e2m1's smallest non-zero magnitude is 0.5, so anything below ``amax / 24`` rounds to zero:
    with one outlier 1000x the typical weight, nearly every weight is lost.
    """
    x = x.detach().float().cpu()
    amax = float(x.abs().max())
    s = amax / bs.E2M1_MAX if amax > 0 else 1.0
    return bs.e2m1_values(bs.e2m1_codes(x / s)) * s


def errors(x: torch.Tensor, formats=ERROR_FORMATS) -> dict[str, tuple[float, float]]:
    """``{format: (bits per value, relative Frobenius error)}`` from ``bs.error_table`` (and the
    per-tensor fp4 foil, 4 bits + one fp32 scale, computed the same way)."""
    out = {}
    model = [f for f in formats if f != "fp4_per_tensor"]
    for row in bs.error_table(x, tuple(model)):
        out[row.format] = (row.bits_per_value, row.rel_fro)
    if "fp4_per_tensor" in formats:
        xf = x.detach().float().cpu()
        d = per_tensor_fp4_round_trip(xf) - xf
        out["fp4_per_tensor"] = (4.0, float(d.norm() / xf.norm().clamp(min=1e-30)))
    return {f: out[f] for f in formats}


def _round_trip(x: torch.Tensor, fmt: str) -> torch.Tensor:
    return per_tensor_fp4_round_trip(x) if fmt == "fp4_per_tensor" else bs.round_trip(x, fmt)


# --------------------------------------------------------------------- (a) one tile, scales ----


def draw_tile(x: torch.Tensor, fmt: str = "nvfp4", highlight: tuple[int, int] | None = None,
              labels: bool | None = None, fig=None):
    """``|x|`` (top) and the scale factor of every block (bottom), colour on a log scale.

    ``highlight=(row, kblock)`` outlines one block in both panels. ``labels``: write each block's
    scale in it (default: when there are at most 160 blocks). Returns the Figure; the bottom axes
    holds one Rectangle per block, in row-major block order, and one text per block.
    """
    f = bs.get_format(fmt)
    rows, k = x.shape
    sf = block_scales(x, fmt)  # also checks shape (K a multiple of the block) and values
    kblocks = k // f.block
    if highlight is not None and not (0 <= highlight[0] < rows and 0 <= highlight[1] < kblocks):
        raise ShapeError(f"block (row {highlight[0]}, k-block {highlight[1]}) is outside the "
                         f"{rows} x {kblocks} blocks of this tile", "pick row < rows, k-block < K / block")
    labels = rows * kblocks <= 160 if labels is None else labels
    if fig is None:
        fig = plt.figure(figsize=(10, 5.6))
    fig.clear()
    ax_x, ax_s = fig.subplots(2, 1, sharex=True)

    mag = x.detach().abs().float().cpu().numpy()
    pos = mag[mag > 0]
    lo = float(pos.min()) if pos.size else 1e-3
    im = ax_x.imshow(mag, aspect="auto", cmap="magma", interpolation="nearest",
                     norm=LogNorm(vmin=max(lo, 1e-6), vmax=max(float(mag.max()), lo * 10)),
                     extent=(0, k, rows, 0))
    fig.colorbar(im, ax=ax_x, label="|x|", pad=0.01)
    for j in range(1, kblocks):  # block boundaries along K
        ax_x.axvline(j * f.block, color="white", linewidth=0.6, alpha=0.7)
    ax_x.set_ylabel("row")
    ax_x.set_title(f"the data: |x| of a {rows}x{k} tile (outlier columns and rows are bright)",
                   fontsize=10)

    pos_sf = sf[sf > 0]
    norm = LogNorm(vmin=float(pos_sf.min()), vmax=max(float(pos_sf.max()), float(pos_sf.min()) * 2)) \
        if pos_sf.size else Normalize(0, 1)
    cmap = plt.get_cmap("viridis")
    cells, colors = [], []
    for r in range(rows):
        for j in range(kblocks):
            cells.append(Rectangle((j * f.block, r), f.block, 1))
            colors.append(cmap(norm(sf[r, j])) if sf[r, j] > 0 else (0.85, 0.85, 0.85, 1.0))
    ax_s.add_collection(PatchCollection(cells, facecolors=colors, edgecolors="white", linewidths=0.8))
    if labels:
        for r in range(rows):
            for j in range(kblocks):
                v = sf[r, j]
                ax_s.text((j + 0.5) * f.block, r + 0.5, _fmt_scale(v, f.scale), ha="center",
                          va="center", fontsize=6,
                          color="white" if v > 0 and norm(v) < 0.55 else "black")
    sm = plt.cm.ScalarMappable(norm=norm, cmap=cmap)
    fig.colorbar(sm, ax=ax_s, label=f"scale factor ({f.scale})", pad=0.01)
    if highlight is not None:
        r, j = highlight
        for ax in (ax_x, ax_s):
            ax.add_patch(Rectangle((j * f.block, r), f.block, 1, fill=False, edgecolor="red",
                                   linewidth=2.0))
    ax_s.set_xlim(0, k)
    ax_s.set_ylim(rows, 0)
    ax_s.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax_s.set_xlabel(f"K (reduction dim); one block = {f.block} consecutive elements of a row")
    ax_s.set_ylabel("row")
    ratio = float(pos_sf.max() / pos_sf.min()) if pos_sf.size else 1.0
    gs = bs.quantize_as_used(x, fmt).global_scale
    of = f" of x / {gs:.3g} (per-tensor scale)" if f.name == "nvfp4" else ""
    ax_s.set_title(f"{f.name.upper()}: one {f.scale} scale per 1x{f.block} block{of}, "
                   f"{ratio:.3g}x apart: large where an outlier is", fontsize=9)
    fig.tight_layout()
    return fig


def _fmt_scale(v: float, scale: str) -> str:
    """A scale as the picture writes it: e8m0 as a power of two, e4m3 with 3 significant digits."""
    if v <= 0:
        return "0"
    if scale == "e8m0":
        return f"2^{int(round(math.log2(v)))}"
    return f"{v:.3g}"


# ----------------------------------------------------------------------- (b) the errors ----


def draw_errors(x: torch.Tensor, formats=ERROR_FORMATS, fig=None):
    """Left: relative Frobenius error per format (log scale), bits per value under each bar.
    Right: histogram of each non-zero element's relative error ``|x~ - x| / |x|`` (elements that
    come back exact are counted at the left edge). The title states the ratio NVFP4 / MXFP8."""
    errs = errors(x, formats)
    if fig is None:
        fig = plt.figure(figsize=(10, 4.2))
    fig.clear()
    ax_b, ax_h = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.35, 1]})
    names = list(errs)
    heights = [errs[n][1] for n in names]
    bars = ax_b.bar(range(len(names)), heights, color=[_ERR_COLORS[n] for n in names])
    for b, n in zip(bars, names):
        ax_b.text(b.get_x() + b.get_width() / 2, b.get_height() * 1.15, f"{errs[n][1]:.2%}",
                  ha="center", va="bottom", fontsize=8)
    ax_b.set_yscale("log")
    ax_b.set_ylim(min(heights) / 3, max(heights) * 4)
    ax_b.set_xticks(range(len(names)))
    ax_b.set_xticklabels([f"{LABELS.get(n, n)}\n{errs[n][0]:g} bits" for n in names], fontsize=7)
    ax_b.set_ylabel("relative error  ||x~ - x|| / ||x||")
    ax_b.set_title("whole-tensor error", fontsize=10)

    xf = x.detach().float().cpu()
    nz = xf != 0
    floor = 1e-5
    bins = np.logspace(math.log10(floor), 0.5, 40)
    for n in names:
        rel = ((_round_trip(xf, n) - xf).abs()[nz] / xf.abs()[nz]).numpy()
        ax_h.hist(np.clip(rel, floor, 3.0), bins=bins, histtype="step", linewidth=1.6,
                  color=_ERR_COLORS[n], label=LABELS.get(n, n).replace("\n", " "))
    ax_h.set_xscale("log")
    ax_h.set_xlabel("|x~ - x| / |x| of one element (exact: left edge)")
    ax_h.set_ylabel("elements")
    ax_h.legend(fontsize=7, frameon=False, loc="upper left")
    ax_h.set_title("per-element error", fontsize=10)
    fig.suptitle(_error_headline(errs, x), fontsize=9)
    fig.tight_layout()
    return fig


def zeroed_fraction(x: torch.Tensor, fmt: str) -> float:
    """The fraction of x's non-zero elements that come back as exactly 0 after the round trip."""
    xf = x.detach().float().cpu()
    nz = xf != 0
    return float((_round_trip(xf, fmt)[nz] == 0).float().mean()) if nz.any() else 0.0


def median_error(x: torch.Tensor, fmt: str) -> float:
    """The median of the non-zero elements' relative errors ``|x~ - x| / |x|``: the typical
    weight's error. Large outliers own a whole-tensor (Frobenius) error; they cannot own this."""
    xf = x.detach().float().cpu()
    nz = xf != 0
    return float(((_round_trip(xf, fmt) - xf).abs()[nz] / xf.abs()[nz]).median()) if nz.any() else 0.0


def _error_headline(errs, x=None) -> str:
    parts = []
    if "nvfp4_block_only" in errs and "nvfp4" in errs and errs["nvfp4_block_only"][1] > 2 * errs["nvfp4"][1]:
        # the outliers are large enough that the block scales alone clip at 448: say so first, and
        # that the whole-tensor errors are now the outliers' (NVFP4 below MXFP8 there, not per weight)
        line = (f"NVFP4's per-tensor scale keeps its e4m3 block scales under 448: error "
                f"{errs['nvfp4'][1]:.1%} with it, {errs['nvfp4_block_only'][1]:.0%} without"
                + (f"; fp4 with one scale per tensor: {errs['fp4_per_tensor'][1]:.1%}"
                   if "fp4_per_tensor" in errs else ""))
        if x is not None and "mxfp8" in errs:
            line += ("\nthese whole-tensor errors are the outliers' errors; the median element errs "
                     f"{median_error(x, 'mxfp8'):.1%} in MXFP8, {median_error(x, 'nvfp4'):.0%} in NVFP4 (right)")
        return line
    if "nvfp4" in errs and "mxfp8" in errs:
        parts.append(f"NVFP4 ({errs['nvfp4'][0]:g} bits) errs {errs['nvfp4'][1] / errs['mxfp8'][1]:.1f}x "
                     f"more than MXFP8 ({errs['mxfp8'][0]:g} bits)")
    if "fp4_per_tensor" in errs and "nvfp4" in errs and x is not None:
        parts.append(f"fp4 with one scale per tensor rounds {zeroed_fraction(x, 'fp4_per_tensor'):.0%} "
                     f"of the values to 0 (NVFP4: {zeroed_fraction(x, 'nvfp4'):.0%})")
    return "; ".join(parts) or "round-trip error per format"


# ------------------------------------------------------------- (c) the interleaved layout ----


def atom_bytes(rows: int, kblocks: int, atom_row: int, atom_k: int) -> list[tuple[int, int] | None]:
    """The 512 bytes of SF atom (atom_row, atom_k) in memory order: the (row, k-block) whose scale
    each byte holds, or None for padding (rows padded to 128, k-blocks to 4). By :func:`bs.sf_offset`."""
    pr, pk = bs.padded_sf_shape(rows, kblocks)
    if not (0 <= atom_row < pr // 128 and 0 <= atom_k < pk // 4):
        raise ShapeError(f"atom ({atom_row}, {atom_k}) is outside the {pr // 128} x {pk // 4} atoms "
                         f"of {rows} rows x {kblocks} k-blocks", "atoms are 128 rows x 4 k-blocks")
    base = bs.ATOM_BYTES * (atom_row * (pk // 4) + atom_k)
    out: list = [None] * bs.ATOM_BYTES
    for r in range(128 * atom_row, 128 * atom_row + 128):
        for kb in range(4 * atom_k, 4 * atom_k + 4):
            # padding positions follow the same formula on the padded shape
            off = bs.sf_offset(r, kb, pr, pk) - base
            out[off] = (r, kb) if r < rows and kb < kblocks else None
    return out


def draw_sf_layout(rows: int = 256, kblocks: int = 8, row: int = 70, kblock: int = 5, fig=None):
    """Which byte of the SF buffer holds the scale of (row, kblock).

    Left: the logical (row, k-block) grid, coloured by the 512-byte atom each scale lands in
    (atoms are numbered in memory order, k fastest). Right: the bytes of the atom that holds
    (row, kblock), 32 lines of 16 bytes, each labelled "row,k-block"; colour = row // 32 % 4.
    The red cell is (row, kblock) on both sides.
    """
    off = bs.sf_offset(row, kblock, rows, kblocks)  # also checks the coordinates
    pr, pk = bs.padded_sf_shape(rows, kblocks)
    n_k_atoms = pk // 4
    if fig is None:
        fig = plt.figure(figsize=(10, 7.2))
    fig.clear()
    ax_l, ax_r = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 3.2]})

    atom_of = np.array([[(r // 128) * n_k_atoms + kb // 4 for kb in range(pk)] for r in range(pr)],
                       dtype=float)
    atom_of[rows:, :] = np.nan
    atom_of[:, kblocks:] = np.nan
    cmap = plt.get_cmap("tab20")
    ax_l.pcolormesh(np.ma.masked_invalid(atom_of), cmap=cmap, vmin=-0.5, vmax=19.5)
    for a_r in range(pr // 128):
        for a_k in range(n_k_atoms):
            ax_l.add_patch(Rectangle((4 * a_k, 128 * a_r), 4, 128, fill=False, edgecolor="black",
                                     linewidth=1.0))
            ax_l.text(4 * a_k + 2, 128 * a_r + 64, f"atom\n{a_r * n_k_atoms + a_k}", ha="center",
                      va="center", fontsize=7)
    ax_l.add_patch(Rectangle((kblock, row), 1, 1, facecolor="red", edgecolor="red", linewidth=2))
    ax_l.plot([kblock + 0.5], [row + 0.5], marker="o", markersize=12, markerfacecolor="none",
              markeredgecolor="red", markeredgewidth=2)
    ax_l.set_xlim(0, pk)
    ax_l.set_ylim(pr, 0)
    ax_l.set_xlabel("k-block")
    ax_l.set_ylabel("row (of A: M, of B: N)")
    ax_l.set_title(f"{rows} rows x {kblocks} k-blocks\n(padded to {pr} x {pk})", fontsize=9)

    a_r, a_k = row // 128, kblock // 4
    atom = a_r * n_k_atoms + a_k
    content = atom_bytes(rows, kblocks, a_r, a_k)
    cells, colors = [], []
    for i, who in enumerate(content):
        line, col = divmod(i, 16)
        cells.append(Rectangle((col, line), 1, 1))
        colors.append(_QUARTER_COLORS[(who[0] // 32) % 4] if who else (0.92, 0.92, 0.92))
        ax_r.text(col + 0.5, line + 0.5, f"{who[0]},{who[1]}" if who else "pad", ha="center",
                  va="center", fontsize=5.2)
    ax_r.add_collection(PatchCollection(cells, facecolors=colors, edgecolors="white", linewidths=0.5))
    line, col = divmod(off - bs.ATOM_BYTES * atom, 16)
    ax_r.add_patch(Rectangle((col, line), 1, 1, fill=False, edgecolor="red", linewidth=2))
    for c in (4, 8, 12):
        ax_r.axvline(c, color="black", linewidth=0.8)
    ax_r.set_xlim(0, 16)
    ax_r.set_ylim(32, 0)
    ax_r.set_xticks([2, 6, 10, 14])
    ax_r.set_xticklabels([f"rows r+{32 * q}\nk-blocks 0-3" for q in range(4)], fontsize=7)
    ax_r.set_yticks([0, 8, 16, 24, 31])
    ax_r.set_xlabel("byte within a 16-byte line (each cell: row,k-block)")
    ax_r.set_ylabel("line = row % 32 (one TMEM lane's 128 bits)")
    ax_r.set_title(f"atom {atom}, bytes {bs.ATOM_BYTES * atom}..{bs.ATOM_BYTES * (atom + 1) - 1}: "
                   f"byte {off} = 512*{atom} + 16*{row % 32} + 4*{(row // 32) % 4} + {kblock % 4} "
                   f"holds (row {row}, k-block {kblock})", fontsize=9)
    fig.suptitle("Blackwell's scale-factor layout: 128x4 atoms, k fastest; a 16-byte line holds "
                 "4 k-blocks of rows r, r+32, r+64, r+96", fontsize=10)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------- (d) widget ----


def describe_block(x: torch.Tensor, fmt: str, row: int, kblock: int) -> str:
    """One line on block (row, kblock): its amax, the ideal scale, the stored one (and for an MX
    format what the other rounding rule would store), its error, its byte in the SF buffer."""
    f = bs.get_format(fmt)
    rows, k = x.shape
    blk = x[row, kblock * f.block:(kblock + 1) * f.block].float()
    amax = float(blk.abs().max())
    used = bs.quantize_as_used(x, fmt)
    stored = float(used.sf[row, kblock].float())
    err = float(((used.dequantize() - x.float())[row, kblock * f.block:(kblock + 1) * f.block]).norm()
                / blk.norm().clamp(min=1e-30))
    if f.name == "nvfp4":
        gs = used.global_scale
        rule = (f"per-tensor scale gs = amax(x) / (448 x 6) = {gs:.4g}; amax / (6 gs) = {amax / (6 * gs):.4g}, "
                f"rounded to the nearest e4m3 -> {_fmt_scale(stored, f.scale)}; the MMA multiplies by "
                f"{_fmt_scale(stored, f.scale)}, the epilogue by gs (in alpha): {stored * gs:.4g} in all")
    elif f.scale == "e4m3":
        rule = f"amax/{f.data_max:g} = {amax / f.data_max:.4g}, nearest e4m3 -> {_fmt_scale(stored, f.scale)}"
    else:
        spec = float(bs.quantize(x, fmt, mx_rule="ocp")[1][row, kblock].float())
        rule = (f"amax/{f.data_max:g} = {amax / f.data_max:.4g}, rounded UP to a power of two (NVIDIA's "
                f"rule, as the course's model) -> {_fmt_scale(stored, f.scale)}; the OCP spec's "
                f"2^(floor(log2 amax) - {f.emax}) = {_fmt_scale(spec, f.scale)}"
                + ("" if spec == stored else f", which clamps values above {spec * f.data_max:.4g}"))
    return (f"{f.name.upper()} block (row {row}, k-block {kblock}): amax {amax:.4g}; {rule}; "
            f"block error {err:.2%}; its byte in the interleaved SF buffer: "
            f"{bs.sf_offset(row, kblock, rows, k // f.block)}")


def __getattr__(name: str):
    # The widget imports this module, so this module does not import it back; a cell that looks
    # for the widget here is told where it is instead of getting a bare AttributeError.
    if name in ("block_scaling_widget", "BlockScalingWidget"):
        raise AttributeError(f"{name} is in cutecourse.viz.block_scaling_widget: "
                             f"from cutecourse.viz.block_scaling_widget import {name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
