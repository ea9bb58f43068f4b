"""The offline reorder: each thread's nibbles of one wgmma A fragment in one 32-bit word.

A wgmma whose A operand comes from registers wants, in every thread of the warpgroup, the 8
values of a 64 x 16 (M x K) slice that the MMA's thread-value layout gives that thread. For
bf16 that layout is, in CuTe's notation on the column-major 64 x 16 tile (offset = m + 64 k)::

    FRAGMENT = ((4,8,4),(2,2,2)):((128,1,16),(64,8,512))

Threads (4, 8, 4): lane % 4 picks the column pair (2 columns = 128), lane / 4 the row (1), the
warp a band of 16 rows (16). Values (2, 2, 2): the next column (64), the row 8 below (8), the
column 8 to the right (512). So a thread holds rows g and g + 8 and columns 2t, 2t+1, 2t+8, 2t+9.

In int4 those 8 values are 32 bits: one register, if they are stored together. The reorder
packs them so, for every 64 x 16 slice, offline (the weights are constant), and puts the 4 words
of one thread for 4 consecutive slices (K = 64) side by side: a thread loads 16 bytes with one
instruction and has the A operands of 4 wgmmas.

Inside a word, value v sits in nibble ``NIBBLE[v]`` = 0, 4, 1, 5, 2, 6, 3, 7: the conversion
(``convert.py``) turns nibbles j and j + 4 into the two bf16 halves of register j, and register
j must hold values 2j and 2j + 1 (wgmma's register order).

The packed tensor is int32 (N, K / 8), like the rows of W with 8 nibbles a word, but permuted
inside each block of 64 rows x 64 columns: word (r, c) of a block holds thread 2r + c // 4's
values of the block's 16-column slice c % 4. Hence N and K must be multiples of 64.
"""

from __future__ import annotations

import functools

#: The A fragment's thread-value layout (bf16, one 64 x 16 wgmma slice), as CuTe prints it.
FRAGMENT = "((4,8,4),(2,2,2)):((128,1,16),(64,8,512))"
FRAGMENT_SHAPE = ((4, 8, 4), (2, 2, 2))
FRAGMENT_STRIDE = ((128, 1, 16), (64, 8, 512))
#: The whole reorder block (64 x 64, offset m + 64 k) as one layout: (thread, 16-column slice,
#: value) -> where that value sits in W. The packed block stores it in that order: word
#: ``4 thread + slice`` (of the block's 512, row-major (64, 8)), nibble ``NIBBLE[value]``.
BLOCK_LAYOUT = "((4,8,4),4,(2,2,2)):((128,1,16),1024,(64,8,512))"
#: Value v of a thread's fragment lives in nibble NIBBLE[v] of its word.
NIBBLE = (0, 4, 1, 5, 2, 6, 3, 7)
#: The reorder's block: 64 rows (one warpgroup's wgmma M) by 64 columns (4 slices of K = 16).
BLOCK_N, BLOCK_K, SLICE_K = 64, 64, 16
THREADS = 128
SLICES = BLOCK_K // SLICE_K  # words per thread per block
VALUES = 8  # nibbles per word


def fragment_offset(thread: int, value: int) -> int:
    """FRAGMENT(thread, value): the offset m + 64 k in the 64 x 16 slice, by CuTe's rule (the
    first mode of each nested shape varies fastest)."""
    off = 0
    for idx, shape, stride in ((thread, FRAGMENT_SHAPE[0], FRAGMENT_STRIDE[0]),
                               (value, FRAGMENT_SHAPE[1], FRAGMENT_STRIDE[1])):
        for s, d in zip(shape, stride):
            off += (idx % s) * d
            idx //= s
    return off


def fragment_coord(thread: int, value: int) -> tuple[int, int]:
    """(row m, column k) in the 64 x 16 slice of ``thread``'s value ``value``."""
    off = fragment_offset(thread, value)
    return off % BLOCK_N, off // BLOCK_N


def word_position(thread: int, slice_: int) -> tuple[int, int]:
    """(row, word column) in a 64 x 8-word block of the packed tensor of ``thread``'s word for
    16-column slice ``slice_``: the thread's 4 words are consecutive (thread * 4 + slice)."""
    linear = thread * SLICES + slice_
    return linear // (BLOCK_K // VALUES), linear % (BLOCK_K // VALUES)


@functools.lru_cache(maxsize=1)
def _gather_index():
    return _build_gather_index()


def gather_index():
    """The reorder's table (below), built once."""
    return _gather_index().clone()


def _build_gather_index():
    """A (64, 8, 8) int64 tensor: for block word (r, c) and nibble p, the flat index m * 64 + k
    in the 64 x 64 block of the value stored there. ``pack`` gathers with it, ``unpack``
    scatters with it: the reorder is this one table, derived from FRAGMENT and NIBBLE."""
    import torch

    index = torch.empty(BLOCK_N, BLOCK_K // VALUES, VALUES, dtype=torch.int64)
    for t in range(THREADS):
        for s in range(SLICES):
            r, c = word_position(t, s)
            for v in range(VALUES):
                m, k = fragment_coord(t, v)
                index[r, c, NIBBLE[v]] = m * BLOCK_K + s * SLICE_K + k
    return index


def check_blocks(n: int, k: int, name: str = "W") -> None:
    from ..errors import ShapeError

    if n % BLOCK_N or k % BLOCK_K:
        raise ShapeError(f"{name} is ({n}, {k}); the int4 reorder works on blocks of {BLOCK_N} rows x "
                         f"{BLOCK_K} columns, so N and K must be multiples of 64",
                         "pad W with zero rows / columns (torch.nn.functional.pad) before quantizing")


def pack(q):
    """int4 values ``q`` (N, K) in [0, 15] (any integer dtype) -> int32 (N, K / 8), reordered."""
    import torch

    n, k = q.shape
    check_blocks(n, k)
    blocks = q.to(torch.int64).reshape(n // BLOCK_N, BLOCK_N, k // BLOCK_K, BLOCK_K).permute(0, 2, 1, 3)
    blocks = blocks.reshape(n // BLOCK_N, k // BLOCK_K, BLOCK_N * BLOCK_K)
    nibbles = blocks[:, :, gather_index().reshape(-1).to(q.device)].reshape(*blocks.shape[:2], BLOCK_N, 8, VALUES)
    shifts = 4 * torch.arange(VALUES, dtype=torch.int64, device=q.device)
    words = (nibbles << shifts).sum(-1)  # (N/64, K/64, 64, 8) in [0, 2^32)
    words = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)  # same bits, signed
    return words.permute(0, 2, 1, 3).reshape(n, k // VALUES).contiguous()


def unpack(packed):
    """The inverse of ``pack``: int32 (N, K / 8) -> uint8 (N, K) values in [0, 15]."""
    import torch

    n, kw = packed.shape
    k = kw * VALUES
    check_blocks(n, k, "the packed weights' unpacked shape")
    words = packed.to(torch.int64) & 0xFFFFFFFF
    words = words.reshape(n // BLOCK_N, BLOCK_N, k // BLOCK_K, 8).permute(0, 2, 1, 3)
    nibbles = (words.unsqueeze(-1) >> (4 * torch.arange(VALUES, device=packed.device))) & 0xF  # (.., 64, 8, 8)
    flat = torch.empty(*nibbles.shape[:2], BLOCK_N * BLOCK_K, dtype=torch.int64, device=packed.device)
    flat[:, :, gather_index().reshape(-1).to(packed.device)] = nibbles.reshape(*nibbles.shape[:2], -1)
    q = flat.reshape(n // BLOCK_N, k // BLOCK_K, BLOCK_N, BLOCK_K).permute(0, 2, 1, 3).reshape(n, k)
    return q.to(torch.uint8)
