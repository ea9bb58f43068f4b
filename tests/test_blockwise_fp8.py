"""The Hopper FP8 blockwise reference (``models/blockwise_fp8.py``): DeepSeek-V3's 1x128 and
128x128 blocks, ragged edges, and the exact scaled product the FP8 grouped GEMMs are checked against."""

import pytest
import torch

from cutecourse.errors import DTypeError, ShapeError
from cutecourse.models import block_scaling as bs
from cutecourse.models import blockwise_fp8 as fp8b

from block_data import randn


def test_blockwise_fp8_scales_and_ragged_edges():
    x = randn(130, 200, seed=8, spread=2.0)
    qa, sa = fp8b.quantize_blockwise_fp8(x, (1, 128))
    assert qa.shape == (130, 200) and sa.shape == (130, 2) and sa.dtype == torch.float32
    assert torch.allclose(sa[:, 1], x[:, 128:].abs().amax(1) / 448)  # partial block: real elements
    qb, sb = fp8b.quantize_blockwise_fp8(x, (128, 128))
    assert sb.shape == (2, 2)
    assert torch.allclose(sb[1, 1], x[128:, 128:].abs().max() / 448)
    d = fp8b.dequantize_blockwise(qb, sb, (128, 128))
    assert ((d - x).abs() <= torch.maximum(x.abs() * 2**-4, sb.max() * 2**-10)).all()
    q0, s0 = fp8b.quantize_blockwise_fp8(torch.zeros(2, 128))
    assert (q0.float() == 0).all() and torch.allclose(s0, torch.full((2, 1), 1e-4 / 448))


@pytest.mark.parametrize("m,n,k", [(64, 256, 512), (70, 200, 200)])  # second: ragged N and K
def test_scaled_mm_reference_matches_dequantized_matmul(m, n, k):
    a = randn(m, k, seed=9, spread=2.0)
    w = bs.outlier_weights(n, k, seed=1)
    qa, sa = fp8b.quantize_blockwise_fp8(a, (1, 128))
    qb, sb = fp8b.quantize_blockwise_fp8(w, (128, 128))
    c = fp8b.scaled_mm_reference(qa, sa, qb, sb)
    ref = fp8b.dequantize_blockwise(qa, sa, (1, 128)) @ fp8b.dequantize_blockwise(qb, sb, (128, 128)).T
    scale = (a.abs() @ w.abs().T).max()
    assert (c - ref).abs().max() <= 1e-5 * scale  # same products, fp32 rounding apart
    assert ((c - a @ w.T).norm() / (a @ w.T).norm()).item() < 0.05  # and close to the exact GEMM
    assert fp8b.scaled_mm_reference(qa, sa, qb, sb, out_dtype=torch.bfloat16).dtype == torch.bfloat16
    with pytest.raises(ShapeError):
        fp8b.scaled_mm_reference(qa, sa[:, :1], qb, sb)
    with pytest.raises(DTypeError):
        fp8b.scaled_mm_reference(qa.float(), sa, qb, sb)


def test_bad_blocks_and_mismatched_k_raise_course_errors():
    with pytest.raises(ShapeError):
        fp8b.quantize_blockwise_fp8(torch.randn(4, 32), (0, 128))
    with pytest.raises(ShapeError, match="K differs"):
        fp8b.scaled_mm_reference(*fp8b.quantize_blockwise_fp8(torch.randn(4, 64)),
                               *fp8b.quantize_blockwise_fp8(torch.randn(4, 32), (128, 128)))
