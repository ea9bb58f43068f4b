"""int4 weights with group scales: quantize, pack, and the dequantization every result is held to.

A weight matrix W (N, K), as torch's Linear holds it, becomes

* ``packed``: int32 (N, K / 8), eight 4-bit values q in [0, 15] a word, reordered for the
  kernel's registers (``reorder.py``);
* ``scales``: bf16 or fp16, the activations' dtype, (K / group, N): one scale per group of
  ``group_size`` consecutive weights of a row (the layout GPTQ and torch's int4 kernel use: a
  group's N scales are one contiguous row, which one TMA box loads);
* ``zeros``: None (symmetric: the zero point is 8, q - 8 in [-8, 7]) or uint8 (K / group, N) in
  [0, 15] (asymmetric: a group's range [min, max] maps onto [0, 15]).

and ``dequantize`` gives back W' = (q - zero) * scale, computed in fp32 and rounded once to the
scales' dtype. That one rounding is what the kernel's conversion does too (``convert.py``):
q - zero is exact in bf16 and fp16, the product is rounded once. So the kernel's weights equal
W' bit for bit, and a GEMM result is compared with ``x @ W'.T``, never with the unquantized W.
"""

from __future__ import annotations

from ..errors import DTypeError, ShapeError
from . import reorder

#: Symmetric quantization's zero point: q = round(w / s) + 8.
SYMMETRIC_ZERO = 8
QMAX = 15


def group_of(k: int, group_size) -> int:
    """The group size in columns (None or -1: one group per row, i.e. per channel), checked."""
    g = k if group_size in (None, -1) else group_size
    if not isinstance(g, int) or g <= 0 or g % reorder.SLICE_K or k % g:
        raise ShapeError(f"group_size={group_size!r} does not split K = {k} into groups of whole "
                         f"16-column wgmma slices",
                         "use a multiple of 16 that divides K (64 and 128 are common), or None for one "
                         "scale per row")
    return g


def _at_least(scale, dtype):
    """The smallest ``dtype`` number >= scale (as fp32): rounding a scale down would shrink the
    range the 16 steps cover, and the group's extreme weights would fall off it. Zero (an
    all-zero group) -> 1."""
    import torch

    rounded = scale.to(dtype)
    up = (rounded.view(torch.int16) + 1).view(dtype)  # the next number up (scales are positive)
    rounded = torch.where(rounded.float() < scale, up, rounded).float()
    return torch.where(rounded > 0, rounded, torch.ones_like(rounded))


def quantize_int4(w, group_size: int | None = 128, zero_point: bool = False, dtype=None):
    """Quantize W (N, K) (a float tensor, e.g. a Linear weight) to int4 with group scales.

    Returns ``(packed, scales, zeros)``: int32 (N, K/8), scales (K/group, N) in ``dtype`` (the
    activations' dtype: ``torch.bfloat16``, the default, or ``torch.float16``), and None or
    uint8 (K/group, N). Scales are rounded to ``dtype`` *before* q is chosen, so q is the best
    value for the scale the kernel will use, and rounded up, so that the 16 steps still cover
    the group's range. An all-zero group gets scale 1 (its q are all the zero point).
    """
    import torch

    dtype = torch.bfloat16 if dtype is None else dtype
    if dtype not in (torch.bfloat16, torch.float16):
        raise DTypeError(f"dtype={dtype}: the kernel's scales are bfloat16 or float16, the activations' dtype",
                         "pass dtype=torch.bfloat16 or dtype=torch.float16, the dtype of the x you will multiply by")
    if not isinstance(w, torch.Tensor) or not w.is_floating_point():
        raise DTypeError(f"w is {getattr(w, 'dtype', type(w).__name__)}; quantize_int4 takes a float tensor",
                         "pass the weight in float32, bfloat16 or float16, e.g. linear.weight.data")
    if w.dim() != 2:
        raise ShapeError(f"w has {w.dim()} dimensions; quantize_int4 takes W (N, K) like a Linear weight",
                         "reshape to 2-D")
    n, k = w.shape
    reorder.check_blocks(n, k)
    g = group_of(k, group_size)
    groups = w.detach().float().reshape(n, k // g, g)
    if zero_point:
        lo = groups.amin(-1).clamp(max=0)  # keep 0 representable: zeros padding stays exact
        hi = groups.amax(-1).clamp(min=0)
        scale = _at_least((hi - lo) / QMAX, dtype)
        zero = torch.clamp(torch.round(-lo / scale), 0, QMAX)
    else:
        scale = _at_least(groups.abs().amax(-1) / 7, dtype)
        zero = torch.full_like(scale, SYMMETRIC_ZERO)
    if not scale.isfinite().all():  # float16's largest is 65504: a group 7 x that wide has no scale
        raise DTypeError(f"w holds groups too wide for {str(dtype).replace('torch.', '')} scales (largest |w| "
                         f"{float(groups.abs().max()):.4g}: a scale above {torch.finfo(dtype).max:.6g})",
                         "quantize for bfloat16 activations (dtype=torch.bfloat16), or scale W down")
    q = torch.clamp(torch.round(groups / scale.unsqueeze(-1)) + zero.unsqueeze(-1), 0, QMAX)
    packed = reorder.pack(q.reshape(n, k).to(torch.uint8))  # on w's device
    scales = scale.T.contiguous().to(dtype).to(w.device)
    zeros = zero.T.contiguous().to(torch.uint8).to(w.device) if zero_point else None
    return packed, scales, zeros


def unpack(packed):
    """The int4 values q (N, K), uint8 in [0, 15], in W's own order (the reorder undone)."""
    return reorder.unpack(packed)


def dequantize(packed, scales, zeros=None):
    """W' (N, K) = (q - zero) * scale, in fp32, rounded once to the scales' dtype (bf16 or
    fp16): the weights the kernel multiplies by, bit for bit. The group size is K / scales.shape[0]."""
    import torch

    q = unpack(packed).float()
    n, k = q.shape
    g = k // scales.shape[0]
    s = scales.float().T.repeat_interleave(g, dim=1)
    z = (zeros.float().T.repeat_interleave(g, dim=1) if zeros is not None
         else torch.full_like(s, SYMMETRIC_ZERO))
    return ((q - z) * s).to(scales.dtype)
