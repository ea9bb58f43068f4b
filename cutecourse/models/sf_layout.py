"""Blackwell's scale-factor layout: where ``tcgen05.mma ... block_scale`` finds each block's scale.

The MMA reads scale factors in one fixed order: CuTe's ``BlockScaledBasicChunk``, the atom ``((32,4),(sf_vec,4)):((16,4),(0,1))``,
tiled over the matrix with the k-atoms fastest (``tile_atom_to_shape_SF``). One atom is 128 rows
x 4 k-blocks = 512 bytes; inside it, row r (0..127) starts at ``16*(r % 32) + 4*(r // 32)``, so each
16-byte chunk holds 4 scale factors of rows r, r+32, r+64, r+96: one of the 32 lanes x 128 bits
that ``tcgen05.cp.32x128b.warpx4`` (CuTe's ``Cp4x32x128bOp``) copies from smem to tensor memory.
One atom covers 4 x 16 = 64 K for NVFP4 (one fp4 MMA's K) and 4 x 32 = 128 K for MXFP8.
See :func:`sf_offset`; the tests compare it with CuTe's own layout at every coordinate.
"""

from __future__ import annotations

import math

import torch

from ..errors import ShapeError

ATOM_ROWS, ATOM_KBLOCKS, ATOM_BYTES = 128, 4, 512


def padded_sf_shape(rows: int, kblocks: int) -> tuple[int, int]:
    """Rows padded to 128, k-blocks to 4: the whole atoms the kernel's TMA reads."""
    return math.ceil(rows / ATOM_ROWS) * ATOM_ROWS, math.ceil(kblocks / ATOM_KBLOCKS) * ATOM_KBLOCKS


def sf_offset(row: int, kblock: int, rows: int, kblocks: int) -> int:
    """Byte offset of the scale factor of (row, k-block) in the interleaved tensor.

    Atoms are 512 bytes, k-atoms fastest: atom (row // 128, kblock // 4) starts at
    ``512 * ((row // 128) * ceil(kblocks / 4) + kblock // 4)``; inside it
    ``16 * (row % 32) + 4 * ((row // 32) % 4) + kblock % 4``.
    """
    if not (0 <= row < rows and 0 <= kblock < kblocks):
        raise ShapeError(f"(row {row}, k-block {kblock}) is outside {rows} x {kblocks}",
                         "rows index M (or N), k-blocks index K / block")
    atom = (row // 128) * math.ceil(kblocks / 4) + kblock // 4
    return ATOM_BYTES * atom + 16 * (row % 32) + 4 * ((row // 32) % 4) + kblock % 4


def to_interleaved(sf: torch.Tensor) -> torch.Tensor:
    """(rows, kblocks) scale factors -> 1-D tensor in the order :func:`sf_offset` gives, with
    rows padded to 128 and k-blocks to 4 by zero bytes (e4m3 0, e8m0 2^-127): they only ever
    scale padding, whose data the kernel's TMA fills with zeros."""
    if sf.dim() != 2 or sf.element_size() != 1:
        raise ShapeError(f"sf must be a 2-D one-byte tensor (e4m3/e8m0/uint8), got {sf.dtype} "
                         f"{tuple(sf.shape)}", "pass the sf that quantize returned")
    rows, kbl = sf.shape
    pr, pk = padded_sf_shape(rows, kbl)
    buf = torch.zeros(pr, pk, dtype=torch.uint8)
    buf[:rows, :kbl] = sf.view(torch.uint8)
    # row = 128*rm + 32*r4 + r32, kblock = 4*kq + k4  ->  memory order (rm, kq, r32, r4, k4)
    out = buf.view(pr // 128, 4, 32, pk // 4, 4).permute(0, 3, 2, 1, 4).reshape(-1)
    return out.view(sf.dtype)


def from_interleaved(buf: torch.Tensor, rows: int, kblocks: int) -> torch.Tensor:
    """Inverse of :func:`to_interleaved`: the (rows, kblocks) scale factors, padding dropped."""
    pr, pk = padded_sf_shape(rows, kblocks)
    if buf.numel() != pr * pk or buf.element_size() != 1:
        raise ShapeError(f"{rows} x {kblocks} scale factors take {pr * pk} bytes when interleaved, "
                         f"got {buf.numel()} of {buf.dtype}", "pass what to_interleaved returned")
    u = buf.reshape(-1).view(torch.uint8).view(pr // 128, pk // 4, 32, 4, 4)
    return u.permute(0, 3, 2, 1, 4).reshape(pr, pk)[:rows, :kblocks].contiguous().view(buf.dtype)
