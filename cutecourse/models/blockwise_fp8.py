"""FP8 with fp32 block scales, the Hopper recipe (DeepSeek-V3, DeepGEMM), on the CPU or a GPU.

Hopper has no block-scaled MMA: its fp8 wgmma multiplies e4m3 data, and the kernel applies the
scales itself. Activations A carry one fp32 scale per 1 x 128 block (per token and 128
channels), weights B one per 128 x 128 block, ``s = amax / 448`` unrounded. Since the scales
change from one 128-wide k-block to the next, the kernel scales each k-block's product on its own
before adding it to an fp32 accumulator (*promotion*: ``kernels/hopper_grouped_gemm_fp8.py``);
:func:`scaled_mm_reference` is that sum, the reference the kernel is checked against.
"""

from __future__ import annotations

import math

import torch

from ..errors import DTypeError, ShapeError
from .float_formats import E4M3_MAX
from .float_formats import as_matrix as _matrix

#: Scale blocks: 1 x 128 of A, 128 x 128 of B (one k-tile of the FP8 kernels, one tile's columns).
BLOCK = 128
#: DeepGEMM's floor on a block's amax, so a zero block gets a finite scale (1e-4 / 448).
AMAX_FLOOR = 1e-4


def quantize_blockwise_fp8(x: torch.Tensor, block: tuple[int, int] = (1, 128)):
    """(rows, K) -> ``(q, s)``: e4m3 data (rows, K) and fp32 scales (ceil(rows/br), ceil(K/bk)).

    ``s = max(amax, 1e-4) / 448`` per block, not rounded (fp32). ``(1, 128)``: per token and
    k-block, for activations A. ``(128, 128)``: for weights B. A ragged edge (K or rows not a
    multiple of the block) is a partial block: its amax is over the real elements, as if padded
    with zeros, which is what TMA delivers for out-of-bounds boxes.
    """
    if len(block) != 2 or not all(isinstance(b, int) and b > 0 for b in block):
        raise ShapeError(f"block {block!r} is not (rows, k) of positive ints", "use (1, 128) or (128, 128)")
    br, bk = block
    x = _matrix(x, "x", device=x.device)  # on a GPU, quantized there
    rows, k = x.shape
    nr, nk = math.ceil(rows / br), math.ceil(k / bk)
    xp = torch.zeros(nr * br, nk * bk, device=x.device)
    xp[:rows, :k] = x
    blocks = xp.view(nr, br, nk, bk)
    s = blocks.abs().amax(dim=(1, 3)).clamp(min=AMAX_FLOOR) / E4M3_MAX
    y = (blocks / s[:, None, :, None]).clamp(-E4M3_MAX, E4M3_MAX).view(nr * br, nk * bk)
    return y[:rows, :k].to(torch.float8_e4m3fn), s


def dequantize_blockwise(q: torch.Tensor, s: torch.Tensor, block: tuple[int, int] = (1, 128)):
    rows, k = q.shape
    full = s.repeat_interleave(block[0], 0).repeat_interleave(block[1], 1)[:rows, :k]
    return q.float() * full


def scaled_mm_reference(qa, sa, qb, sb, *, block_k: int = 128, block_n: int = 128,
                        out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """C = A @ B.T the way the Hopper kernel computes it: per 128-wide k-block kb,
    ``acc += (qa_kb @ qb_kb.T) * (sa[:, kb] * sb[n // 128, kb])`` in fp32.

    Why per k-block: the scales differ between k-blocks, so they cannot be applied after the
    whole sum; and Hopper's fp8 WGMMA accumulates with ~14 bits of precision, so DeepGEMM
    promotes every 128 k into fp32 registers anyway. Ragged K is padded with zeros to a
    multiple of 128 (zeros add nothing), as TMA's out-of-bounds fill does.
    """
    for name, t in (("qa", qa), ("qb", qb)):
        if t.dtype != torch.float8_e4m3fn or t.dim() != 2:
            raise DTypeError(f"{name} must be a 2-D float8_e4m3fn tensor, got {t.dtype} {tuple(t.shape)}",
                             "use quantize_blockwise_fp8")
    (m, k), (n, kb_) = qa.shape, qb.shape
    if k != kb_:
        raise ShapeError(f"A is {m}x{k} but B is {n}x{kb_}: K differs", "B is (N, K), K-major like A")
    nk = math.ceil(k / block_k)
    if tuple(sa.shape) != (m, nk) or tuple(sb.shape) != (math.ceil(n / block_n), nk):
        raise ShapeError(f"scales {tuple(sa.shape)}, {tuple(sb.shape)} do not fit A {m}x{k}, B {n}x{k}",
                         f"expect sa ({m}, {nk}) from block (1,{block_k}) and sb "
                         f"({math.ceil(n / block_n)}, {nk}) from block ({block_n},{block_k})")
    dev = qa.device  # the same arithmetic on a GPU, for large references
    a = torch.zeros(m, nk * block_k, device=dev)
    b = torch.zeros(n, nk * block_k, device=dev)
    a[:, :k], b[:, :k] = qa.float(), qb.float()
    sa = sa.to(dev)
    sb_rows = sb.to(dev).float().repeat_interleave(block_n, 0)[:n]  # (N, nk): each row's weight scale
    acc = torch.zeros(m, n, device=dev)
    for kb in range(nk):
        ks = slice(kb * block_k, (kb + 1) * block_k)
        acc += (a[:, ks] @ b[:, ks].T) * (sa[:, kb, None].float() * sb_rows[None, :, kb])
    return acc.to(out_dtype)
