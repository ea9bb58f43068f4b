"""A variant of the mixed-input kernel (a ``HopperMixedGemm`` subclass overriding its hooks)
through the module's own launcher, ``mixed_input.launcher(..., kernel_class=)``: the same checks,
plan and split-K buffers as the course kernel. On the CPU: what it refuses; on a Hopper GPU
(``-m gpu``): a subclass that changes nothing gives the course kernel's bits, split or not."""

import textwrap

import pytest
import torch

from cutecourse.errors import DeviceError, DTypeError, ShapeError
from cutecourse.kernels import mixed_input as mi
from cutecourse.kernels.hopper_mixed_gemm import HopperMixedGemm
from cutecourse.quant import quantize_int4


class Same(HopperMixedGemm):
    """The course kernel under another name: a variant that overrides nothing."""


def _operands(m=3, n=128, k=256, group=128):
    packed, scales, _ = quantize_int4(torch.randn(n, k, generator=torch.Generator().manual_seed(3)), group)
    return torch.randn(m, k).bfloat16(), packed, scales


def test_the_fused_class_is_the_course_kernel_or_a_subclass():
    assert mi.fused_class() is HopperMixedGemm and mi.fused_class(Same) is Same
    for wrong in (object, HopperMixedGemm(), "HopperMixedGemm"):
        with pytest.raises(DTypeError, match="not a subclass of HopperMixedGemm"):
            mi.launcher(*_operands(), kernel_class=wrong)


def test_a_variant_runs_the_fused_route():
    with pytest.raises(ShapeError, match="runs the fused kernel.*dense GEMM"):
        mi.launcher(*_operands(), kernel_class=Same, route="dequantize")


@pytest.mark.no_gpu
def test_a_variant_is_checked_like_the_course_kernel():
    """Past the class's check, the launcher's own: CPU operands are a device error."""
    with pytest.raises(DeviceError, match="Hopper GPU"):
        mi.launcher(*_operands(), kernel_class=Same)


_GPU_CHECK = textwrap.dedent("""
    import json, sys, torch
    from cutecourse.kernels import mixed_input as mi
    from cutecourse.kernels.hopper_mixed_gemm import HopperMixedGemm
    from cutecourse.quant import quantize_int4

    class Same(HopperMixedGemm):
        pass

    torch.manual_seed(0)
    out = []
    for m, n, k, splits in json.loads(sys.argv[1]):
        packed, scales, _ = quantize_int4(torch.randn(n, k, device="cuda") * 0.02, 128)
        x = torch.randn(m, k, device="cuda").bfloat16()
        fn = mi.launcher(x, packed, scales, splits=splits, kernel_class=Same)
        fn()
        fn()  # twice: split-K's counters went back to zero
        course = mi.mixed_mm(x, packed, scales, splits=splits)
        same = torch.equal(fn.y.view(torch.int16), course.view(torch.int16))
        zeroed = getattr(fn, "counters", None) is None or int(fn.counters.abs().sum()) == 0
        out.append([m, n, k, fn.plan.splits, type(fn.kernel).__name__, same and zeroed])
    print("RESULT" + json.dumps(out))
""")


@pytest.mark.gpu
def test_a_variant_through_the_launcher_gives_the_course_kernels_bits(run_gpu_script):
    cases = [[1, 1024, 4096, 4], [16, 512, 2048, 1], [7, 320, 640, None]]
    results = run_gpu_script(_GPU_CHECK, cases)
    assert [r[4] for r in results] == ["Same"] * len(cases), results
    assert all(r[-1] for r in results), results
    assert results[0][3] == 4  # split-K: the launcher allocated the variant's buffers
