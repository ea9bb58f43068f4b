"""The 128-byte swizzle of a shared-memory tile, as a picture.

A K-major fp16 tile 64 elements deep stores each row's 64 x 2 B = 128 B contiguously: eight
16-byte chunks, and 128 B is exactly one pass over shared memory's 32 banks of 4 B. Without a
swizzle, chunk ``c`` of every row lands on the same four banks, so reading one chunk column of
8 rows (a wgmma operand read, an ``stmatrix`` of the epilogue) hits the same banks eight times
over: an 8-way conflict. The 128-byte swizzle stores chunk ``c`` of row ``r`` at slot
``c XOR (r % 8)``: the same column of 8 rows now covers all 32 banks once. CuTe prints the course
kernel's A ring as ``S<3,4,3> o 0 o ((8,16),(64,1),(1,4)):...``: the functor ``Swizzle<3,4,3>``
(bits 4-6 of the byte address XOR bits 7-9) composed with the plain layout. TMA writes a tile in
that pattern and the wgmma descriptor names it, so both agree. The pattern repeats every 8 rows x 128 B = 1024 B, which is why a swizzled smem
buffer is 1024-byte aligned.

``swizzled_slot`` is that arithmetic on (row, chunk), ``swizzle_address`` CuTe's functor on an
address; ``draw_swizzle`` draws the tile both ways.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

#: 16-byte chunks per 128-byte row, and rows per repeat of the pattern (2**3 for S<3,4,3>).
CHUNKS = 8


def swizzled_slot(row: int, chunk: int, swizzle: bool = True) -> int:
    """The 16-byte slot of a 128-byte row where logical chunk ``chunk`` of row ``row`` is stored."""
    if not (0 <= chunk < CHUNKS) or row < 0:
        raise ValueError(f"chunk must be in 0..{CHUNKS - 1} and row >= 0, not row={row}, chunk={chunk}")
    return chunk ^ (row % CHUNKS) if swizzle else chunk


def swizzle_address(address: int, bits: int = 3, base: int = 4, shift: int = 3) -> int:
    """CuTe's ``Swizzle<B, M, S>`` (printed ``S<B,M,S>``; defaults: ``S<3,4,3>``) applied to an
    address: the ``B`` bits from bit ``M + S`` up are XORed into the ``B`` bits from bit ``M`` up;
    the lowest ``M`` bits (a ``2**M``-byte chunk) never move. On a byte address, ``S<3,4,3>`` XORs
    bits 7-9 (the 128-byte row, mod 8) into bits 4-6 (the 16-byte chunk): ``swizzled_slot``."""
    mask = (1 << bits) - 1
    return address ^ (((address >> (base + shift)) & mask) << base)


def banks_of_column(chunk: int, rows: int = CHUNKS, swizzle: bool = True) -> list[int]:
    """The first 4-byte bank of each row's ``chunk`` (a chunk covers 4 banks): what one column read hits."""
    return [swizzled_slot(r, chunk, swizzle) * 4 for r in range(rows)]


def draw_swizzle(rows: int = CHUNKS, highlight: int = 0) -> plt.Figure:
    """Two panels, no swizzle and 128-byte swizzle: each row of an fp16 tile (64 elements, 128 B)
    as its eight 16-byte slots, each slot labelled and coloured by the logical chunk stored there
    (elements 8c .. 8c+7 of the row); chunk ``highlight`` is outlined in every row."""
    cmap = plt.get_cmap("tab10")
    fig, axes = plt.subplots(1, 2, figsize=(9, 0.42 * rows + 1.3))
    for ax, swz in zip(axes, (False, True)):
        for r in range(rows):
            for c in range(CHUNKS):
                slot = swizzled_slot(r, c, swz)
                ax.add_patch(plt.Rectangle((slot, r), 1, 1, facecolor=cmap(c), alpha=0.35 + 0.45 * (c == highlight),
                                           edgecolor="black" if c == highlight else "white",
                                           linewidth=2.2 if c == highlight else 0.8))
                ax.text(slot + 0.5, r + 0.5, str(c), ha="center", va="center", fontsize=9)
        ax.set_xlim(0, CHUNKS)
        ax.set_ylim(rows, 0)
        ax.set_xticks([i + 0.5 for i in range(CHUNKS)], [f"{4 * i}-{4 * i + 3}" for i in range(CHUNKS)], fontsize=7)
        ax.set_yticks([r + 0.5 for r in range(rows)], [str(r) for r in range(rows)], fontsize=8)
        ax.set_xlabel("banks of the 16-byte slot (128 B = all 32 banks)")
        ax.set_ylabel("row of the tile")
        hit = len(set(banks_of_column(highlight, rows, swz)))
        ax.set_title(("no swizzle" if not swz else "128-byte swizzle: slot = chunk XOR row")
                     + f"\nchunk {highlight} of {rows} rows: {hit} distinct slot(s)", fontsize=10)
    fig.suptitle("Swizzling spreads a column of chunks over all 32 banks (numbers: the logical 16-byte chunk)",
                 fontsize=10)
    fig.tight_layout()
    return fig


def ring_layout(tile_mnk: tuple[int, int, int] = (128, 256, 64), stages: int = 4) -> str:
    """CuTe's own text for notebook 03's A ring: ``sm90.smem_layouts``, the kernel's call (fp16),
    traced in a tiny jit function (CuTe builds swizzled layouts only while tracing). The C
    buffers it also returns get a placeholder epilogue tile: only A is read."""
    import cutlass
    import cutlass.cute as cute

    from ..kernels import sm90

    found: list[str] = []

    @cute.jit
    def trace():
        ring_a, _, _ = sm90.smem_layouts(tile_mnk, cutlass.Float16, cutlass.Float16, stages,
                                         (tile_mnk[0], 32), 2)
        found.append(str(ring_a))

    trace()
    return found[0]
