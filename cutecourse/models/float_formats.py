"""The narrow float formats the scaled GEMMs quantize to, and the check every quantizer runs first.

Largest finite values: e4m3 448 (1.75 x 2^8), e2m1 6 (1.5 x 2^2), e5m2 57344 (1.75 x 2^15); e2m1's
eight magnitudes are listed in ``E2M1_VALUES``. Both the block formats of
:mod:`cutecourse.models.block_scaling` (Blackwell) and the blockwise FP8 recipe of
:mod:`cutecourse.models.blockwise_fp8` (Hopper) build on these, so they live below both.
"""

from __future__ import annotations

import math

import torch

from ..errors import CourseError, DTypeError, ShapeError

E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # codes 0..7; code | 8 is the negative
E4M3_MAX, E2M1_MAX, E5M2_MAX = 448.0, 6.0, 57344.0


def as_matrix(x, name: str, block_k: int | None = None, device=None) -> torch.Tensor:
    """``x`` as a float32 2-D tensor on ``device`` (default: the CPU), after checking what
    quantizing it needs: two dimensions, a float dtype, K a multiple of ``block_k``, finite values."""
    if x.dim() != 2:
        raise ShapeError(f"{name} has {x.dim()} dimensions; block scaling here takes (rows, K)",
                         f"reshape it, e.g. {name}.reshape(-1, {name}.shape[-1])")
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        raise DTypeError(f"{name} is {x.dtype}; quantize takes a float32/float16/bfloat16 tensor",
                         f"convert it, e.g. {name}.float()")
    if block_k is not None and x.shape[1] % block_k:
        raise ShapeError(f"{name} has K = {x.shape[1]}, not a multiple of the block size {block_k}",
                         f"pad K with zeros to {math.ceil(x.shape[1] / block_k) * block_k}")
    x = x.detach().to(device or "cpu", torch.float32)
    if not torch.isfinite(x).all():
        raise CourseError(f"{name} holds inf or NaN", "block scaling is defined for finite values")
    return x
