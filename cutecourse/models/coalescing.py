"""Coalescing: which addresses one warp's memory instructions touch, for a TV layout over a tensor.

A kernel that loads a tile with a TV layout composes the block's tile of the tensor with the TV
layout and slices it at its thread: a map (thread, value) -> address. :func:`address_map`
computes that map with CuTe (``zipped_divide``, ``slice_``, ``composition``, as the kernel
does); :func:`vector_width` finds how many of a thread's values one vector load can carry (at
most 128 bits, consecutive and aligned addresses); :func:`warp_accesses` groups a warp's loads
into instructions and counts the bytes requested against the 32-byte sectors and 128-byte lines
they touch: the numbers behind "consecutive threads on consecutive addresses" and "128-bit
loads". ``cutecourse.viz.tv`` draws them; the notebook 02 checker grades with them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import layouts
from ..errors import LayoutError
from ..layouts import LayoutTable, TVTable, layout_args, run_op, size, tabulate, to_text

#: Threads per warp: the unit that issues one memory instruction for 32 threads at once.
WARP = 32
#: The widest load one thread can issue: 128 bits (ld.global.v4.b32, 8 fp16 values).
MAX_VECTOR_BYTES = 16
#: Memory moves in 32-byte sectors; a fully used one is 32 useful bytes.
SECTOR_BYTES = 32


def tv_layout(thr_layout: Any, val_layout: Any) -> TVTable:
    """``layouts.make_layout_tv`` (a TVTable passes through)."""
    if isinstance(thr_layout, TVTable):
        return thr_layout
    return layouts.make_layout_tv(thr_layout, val_layout)


def address_map(thr_layout: Any, val_layout: Any = None, *, tensor: Any, block: int = 0) -> LayoutTable:
    """(thread, value) -> element offset in ``tensor`` for one block's tile, computed by CuTe.

    ``tensor``: the tensor's layout (``"(64,512):(512,1)"``, row-major 64x512), divisible by
    the tile. The kernel's steps, all by CuTe: ``zipped_divide(tensor, tiler)`` -> tiles,
    slice ``((None, None), block)`` -> that block's tile (M, N) -> offset, then
    ``composition(tile, tv_layout)`` -> (thread, value) -> offset. The result's ``base`` is the
    tile's first element (CuTe's slice drops it; a tensor slice adds it to the pointer).
    """
    tv = tv_layout(thr_layout, val_layout)
    shape, stride = layout_args(tensor)
    modes = shape if isinstance(shape, tuple) else (shape,)
    if len(modes) != len(tv.tiler):
        raise LayoutError(f"the tensor {to_text(shape)}:{to_text(stride)} has rank {len(modes)} but "
                          f"the tile {to_text(tv.tiler)} has rank {len(tv.tiler)}",
                          "give the tensor one mode per tile mode, e.g. (M,N):(N,1)")
    for k, (n, t) in enumerate(zip(modes, tv.tiler)):
        if size(n) % t:
            raise LayoutError(f"the tile {to_text(tv.tiler)} does not divide the tensor {to_text(shape)} "
                              f"(mode {k}: {size(n)} is not a multiple of {t})",
                              f"make mode {k} of the tensor a multiple of {t}")
    blocks = size(shape) // size(tv.tiler)
    if not 0 <= block < blocks:
        raise LayoutError(f"block {block} does not exist: the tensor has {blocks} tiles",
                          f"use 0..{blocks - 1}")
    T = f"{to_text(shape)}:{to_text(stride)}"

    def build():
        import cutlass.cute as cute

        tiles = cute.zipped_divide(cute.make_layout(shape, stride=stride), tv.tiler)
        tile = cute.slice_(tiles, ((None,) * len(tv.tiler), block))
        base = tiles((layouts.idx2crd(0, tiles.shape[0]), layouts.idx2crd(block, tiles.shape[1])))
        tv_cute = cute.make_layout(tv.tv.shape, stride=tv.tv.stride)
        return tabulate(cute.composition(tile, tv_cute),
                                 f"composition(tile {block} of {T}, TV layout)", base=base)

    return run_op(f"cannot map the TV layout onto {T}", "check the tensor's layout", build)


@dataclass(frozen=True)
class Access:
    """One memory instruction of one warp: each thread loads ``vector`` consecutive values."""

    index: int  # instruction number within the thread's values
    values: tuple[int, ...]  # the value indices this instruction loads, per thread
    vector_bits: int  # bits per thread per instruction
    addresses: np.ndarray  # [thread in warp, value in vector] -> element offset
    bytes_requested: int
    sectors: int  # distinct 32-byte sectors touched
    lines: int  # distinct 128-byte lines touched

    @property
    def efficiency(self) -> float:
        """Useful bytes / bytes moved: 1.0 when every fetched sector is fully used."""
        return self.bytes_requested / (self.sectors * SECTOR_BYTES)

    def __str__(self) -> str:
        return (f"instruction {self.index}: values {self.values[0]}..{self.values[-1]}, "
                f"{self.vector_bits}-bit per thread, {self.bytes_requested} B in {self.sectors} "
                f"sectors / {self.lines} lines ({self.efficiency:.0%} of fetched bytes used)")


def vector_width(addr: LayoutTable, threads: int, elem_bytes: int) -> int:
    """Values per load: the largest power of two k (k * elem_bytes <= 16 B) such that every
    thread's values j*k .. j*k+k-1 sit at consecutive, k-aligned addresses: what the compiler
    can turn into one vector load (with the tensor's base 16-byte aligned)."""
    values = addr.size // threads
    grid = np.array(addr.offsets).reshape((threads, values), order="F") + addr.base
    k = 1
    while 2 * k * elem_bytes <= MAX_VECTOR_BYTES and values % (2 * k) == 0:
        kk = 2 * k
        g = grid.reshape(threads, values // kk, kk)
        contiguous = np.all(np.diff(g, axis=2) == 1)
        aligned = np.all(g[:, :, 0] % kk == 0)
        if not (contiguous and aligned):
            break
        k = kk
    return k


def warp_accesses(addr: LayoutTable, threads: int, *, warp: int = 0, elem_bytes: int = 2) -> list[Access]:
    """The memory instructions of warp ``warp``, each covering ``vector_width`` values."""
    values = addr.size // threads
    if not 0 <= warp < max(1, threads // WARP):
        raise LayoutError(f"warp {warp} does not exist: {threads} threads make "
                          f"{max(1, threads // WARP)} warps", "pick a smaller warp index")
    grid = np.array(addr.offsets).reshape((threads, values), order="F") + addr.base
    lanes = grid[warp * WARP:(warp + 1) * WARP]
    k = vector_width(addr, threads, elem_bytes)
    out = []
    for j in range(values // k):
        a = lanes[:, j * k:(j + 1) * k]
        byte_addr = a * elem_bytes
        starts = byte_addr.ravel()
        sectors = {b // SECTOR_BYTES for s in starts for b in (s, s + elem_bytes - 1)}
        lines = {b // 128 for s in starts for b in (s, s + elem_bytes - 1)}
        out.append(Access(j, tuple(range(j * k, (j + 1) * k)), 8 * elem_bytes * k, a,
                          a.size * elem_bytes, len(sectors), len(lines)))
    return out
