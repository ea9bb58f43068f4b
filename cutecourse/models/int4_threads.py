"""The mixed-input kernel's view of its weights, on the CPU: every thread converts its own words.

``hopper_mixed_gemm._convert``: thread t of a warpgroup reads, for each 64 x 64 block of W, its 4
words (``reorder.word_position``), takes the scales (and zero points) of its two rows g and g + 8
(g = 16 warp + lane / 4), and turns each word into 8 bf16 values with the lop3 / sub / mul
conversion (``quant.convert``, bit for bit). :func:`kernel_weights` does that for every thread
of every block at once and puts each value where the A fragment's layout says it belongs
(``reorder.fragment_coord``). If the reorder and the conversion are right, the result is
``quant.dequantize(packed, scales, zeros)`` bit for bit: the weights the kernel multiplies by
are the ones torch's reference multiplies by.
"""

from __future__ import annotations

import functools

from ..quant import convert, reorder


@functools.lru_cache(maxsize=1)
def _tables():
    """(row in block, column in block) of each (thread, slice, value); (r, c) of each word."""
    import torch

    t, s, v = (torch.arange(n) for n in (reorder.THREADS, reorder.SLICES, reorder.VALUES))
    coord = torch.tensor([[reorder.fragment_coord(i, j) for j in range(reorder.VALUES)]
                          for i in range(reorder.THREADS)])  # (128, 8, 2)
    rows = coord[:, None, :, 0].expand(-1, len(s), -1)
    cols = coord[:, None, :, 1] + reorder.SLICE_K * s[None, :, None]
    word = torch.tensor([[reorder.word_position(i, j) for j in s.tolist()] for i in t.tolist()])  # (128, 4, 2)
    return rows, cols, word


def thread_rows(thread: int) -> tuple[int, int]:
    """The two rows of a 64-row block whose scales thread ``thread`` applies: g and g + 8."""
    g = 16 * (thread // 32) + (thread % 32) // 4
    return g, g + 8


def kernel_weights(packed, scales, zeros=None):
    """W' (N, K) as the kernel's threads make it, in the scales' dtype (bf16, or fp16 for fp16
    activations): each word converted by its thread with the scales (and zeros) of the thread's
    rows, each value scattered to its place in W."""
    import torch

    rows, cols, word = _tables()
    n, kw = packed.shape
    k = kw * reorder.VALUES
    reorder.check_blocks(n, k)
    group = k // scales.shape[0]
    nb, kb = n // reorder.BLOCK_N, k // reorder.BLOCK_K
    words = (packed.to(torch.int64) & 0xFFFFFFFF).reshape(nb, reorder.BLOCK_N, kb, 8).permute(0, 2, 1, 3)
    mine = words[:, :, word[..., 0], word[..., 1]]  # (NB, KB, 128 threads, 4 slices)
    base_n = reorder.BLOCK_N * torch.arange(nb)[:, None, None, None]
    base_k = reorder.BLOCK_K * torch.arange(kb)[None, :, None, None]
    slice_k = base_k + reorder.SLICE_K * torch.arange(reorder.SLICES)[None, None, None, :]
    g = torch.tensor([thread_rows(t)[0] for t in range(reorder.THREADS)])[None, None, :, None]
    per_row = []
    for row in (base_n + g, base_n + g + 8):  # the thread's rows g and g + 8, as W's rows
        s = scales[slice_k // group, row]
        z = zeros[slice_k // group, row].to(torch.int64) if zeros is not None else 8
        per_row.append((s, z))
    dtype = str(scales.dtype).replace("torch.", "")
    values = convert.fragment_values(mine, (per_row[0][0], per_row[1][0]), (per_row[0][1], per_row[1][1]), dtype)
    out = torch.empty(n, k, dtype=scales.dtype)
    m_idx = base_n[..., None] + rows[None, None]  # (NB, KB, 128, 4, 8)
    k_idx = base_k[..., None] + cols[None, None]
    out[m_idx, k_idx] = values
    return out
