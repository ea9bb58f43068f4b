"""``int4_dequantize.ENTRY`` has every entry's verbs: ``validate`` holds the int4 weights' checks
(the mixed-input GEMM's ``check`` calls them: one place), ``launcher`` and ``gemm`` (W') check
first, then launch."""

from __future__ import annotations

import pytest
import torch

from cutecourse.errors import CourseError, DTypeError, ShapeError
from cutecourse.kernels import int4_dequantize as dq
from cutecourse.kernels import mixed_input as mi
from cutecourse.quant import quantize_int4


def _weights(n=128, k=256, group=128, zero_point=False):
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(3))
    return quantize_int4(w, group, zero_point=zero_point)


def test_validate_gives_the_shape_and_group_the_mixed_check_gives():
    packed, scales, zeros = _weights(group=64, zero_point=True)
    assert dq.ENTRY.validate(packed, scales, zeros) == dq.validate(packed, scales, zeros) == (128, 256, 64)
    x = torch.randn(5, 256).to(torch.bfloat16)
    assert mi.check(x, packed, scales, zeros) == (5, *dq.validate(packed, scales, zeros))


@pytest.mark.parametrize("change,error,match", [
    (lambda p, s, z: (torch.randn(128, 256), s, z), DTypeError, "unquantized weights"),
    (lambda p, s, z: (p[0], s, z), ShapeError, "2-D"),
    (lambda p, s, z: (p, s.T.contiguous(), z), ShapeError, "transposed"),
    (lambda p, s, z: (p, s.float(), z), DTypeError, "bfloat16 or float16 scales"),
    (lambda p, s, z: (p, s, torch.zeros(2, 128)), DTypeError, "uint8 zero"),
    (lambda p, s, z: (p[:100], s[:, :100], z), ShapeError, "multiples of 64"),
])
def test_bad_weights_say_what_to_change_in_every_verb(change, error, match):
    operands = change(*_weights())
    for verb in (dq.ENTRY.validate, dq.ENTRY.launcher, dq.ENTRY.gemm):
        with pytest.raises(error, match=match) as info:
            verb(*operands)
        assert info.value.fix


@pytest.mark.no_gpu
def test_the_launcher_is_the_entrys_own():
    """No longer "built without a torch-facing launcher": on a machine without a GPU the verbs get
    past the checks to the launch, which says what it needs."""
    packed, scales, _ = _weights()
    for verb in (dq.ENTRY.launcher, dq.ENTRY.gemm):
        with pytest.raises(CourseError) as info:
            verb(packed, scales)
        assert "torch-facing" not in str(info.value)
