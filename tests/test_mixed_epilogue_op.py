"""The mixed-input GEMM takes an epilogue op, as every course GEMM does (``epilogue_op.py``).

On the CPU: the op is part of the compiled kernel (its own compile key, its operand in the PTX's
parameters), and bad operands are refused in the learner's terms before anything runs. On a
Hopper GPU (``-m gpu``): ``mixed_mm(..., epilogue_op="AddBias", epilogue_args=(bias,))`` and
``"Relu"`` against torch, with and without split-K (the last split applies the op), on a batch
that does not fill its tile (the padded elements read a clamped operand and are not stored);
in bf16 and in fp16, whose large-M case runs the dequantize route (the dense GEMM applies the op).
"""

import re

import pytest
import torch

from cutecourse.errors import CourseError, DeviceError, DTypeError, ShapeError
from cutecourse.inspect import compile_report
from cutecourse.kernels import mixed_input as mi
from cutecourse.kernels.epilogue_op import AddBias
from cutecourse.quant import quantize_int4

TARGET = "cutecourse.kernels.mixed_input:compile_target"


def entry_params(ptx: str) -> int:
    """Parameters of the PTX's kernel entry."""
    head = ptx[ptx.index(".entry"):]
    return len(re.findall(r"\.param\b", head[:head.index(")")]))


@pytest.mark.parametrize("split_k", [False, True])
def test_the_op_is_compiled_in(split_k):
    plain = compile_report(TARGET, tile_m=16, split_k=split_k)
    bias = compile_report(TARGET, tile_m=16, split_k=split_k, epilogue_op="AddBias")
    relu = compile_report(TARGET, tile_m=16, split_k=split_k, epilogue_op="Relu")
    # AddBias reads one more tensor (its bias); Relu none, but changes the code
    assert entry_params(bias.ptx) > entry_params(plain.ptx) == entry_params(relu.ptx)
    assert relu.ptx != plain.ptx and bias.ptx != plain.ptx
    # Relu: a compare and a select per element (setp / selp), which the plain kernel has none of
    assert relu.ptx.count("selp.f32") > plain.ptx.count("selp.f32")


def test_ops_are_different_kernels():
    a = mi.ENTRY.kernel(tile_m=8, epilogue_op="AddBias")
    b = mi.ENTRY.kernel(tile_m=8, epilogue_op="Relu")
    c = mi.ENTRY.kernel(tile_m=8)
    assert len({a.key(), b.key(), c.key()}) == 3
    before, after = a.operands()
    assert [t.name for t in after] == ["bias"] and after[0].shape == ("N",)


def operands(m=3, n=128, k=256):
    packed, scales, zeros = quantize_int4(torch.randn(n, k) * 0.02, 128)
    return torch.randn(m, k).to(torch.bfloat16), packed, scales


@pytest.mark.parametrize("op, bias, error, match", [
    ("AddBias", (), ShapeError, r"reads 1 tensor\(s\) \('bias',\)"),
    ("AddBias", (torch.zeros(128, dtype=torch.bfloat16),), DTypeError, "bias.*bfloat16.*float32"),
    ("AddBias", (torch.zeros(127),), ShapeError, "one value per column of C"),
    ("Relu", (torch.zeros(128),), ShapeError, r"reads 0 tensor"),
    ("Gelu", (), CourseError, "not an op of cutecourse/kernels/epilogue_op.py"),
])
def test_bad_operands_are_refused_before_any_gpu(op, bias, error, match):
    x, packed, scales = operands()
    with pytest.raises(error, match=match):
        mi.launcher(x, packed, scales, epilogue_op=op, epilogue_args=bias)


def test_good_operands_get_as_far_as_the_device():
    x, packed, scales = operands()
    with pytest.raises(DeviceError, match="Hopper GPU"):
        mi.launcher(x, packed, scales, epilogue_op=AddBias(), epilogue_args=(torch.zeros(128),))


GPU_CHECK = """
import json, sys, torch
from cutecourse.kernels.mixed_input import mixed_mm
from cutecourse.quant import dequantize, quantize_int4
torch.manual_seed(0)
for m, n, k, splits, dtype in json.loads(sys.argv[1]):
    dt = getattr(torch, dtype)
    packed, scales, zeros = quantize_int4(torch.randn(n, k, device="cuda") * 0.02, 128, dtype=dt)
    wq = dequantize(packed, scales, zeros).float()
    x = torch.randn(m, k, device="cuda").to(dt)
    bias = torch.randn(n, device="cuda")
    acc = x.float() @ wq.T
    eps, tiny = (2**-8, 1e-30) if dt == torch.bfloat16 else (2**-11, 2**-25)  # y's rounding
    bound = eps * (acc + bias).abs() + 2 * k * 2**-24 * (x.float().abs() @ wq.abs().T) + tiny
    y = mixed_mm(x, packed, scales, splits=splits, epilogue_op="AddBias", epilogue_args=(bias,)).float()
    r = mixed_mm(x, packed, scales, splits=splits, epilogue_op="Relu").float()
    plain = mixed_mm(x, packed, scales, splits=splits)
    row = dict(case=[m, n, k, splits, dtype], bias=float(((y - acc - bias).abs() / bound).max()),
               relu=bool(torch.equal(r, plain.float().clamp(min=0))))
    print("FINISHED" + json.dumps(row), flush=True)
"""


@pytest.mark.gpu
def test_bias_and_relu_match_torch():
    """y = x @ W'.T + bias within the bound of test_mixed_input's check; Relu's y equals the
    plain kernel's y clamped at 0, bit for bit (the same sums, then max(., 0) before rounding);
    bf16 and fp16 activations."""
    from gpu.cases import run_cases  # the GPU checks' case runner: a hang is named by its case

    cases = [(3, 320, 640, 1, "bfloat16"), (5, 448, 1152, 3, "bfloat16"), (1, 8192, 8192, None, "bfloat16"),
             (5, 448, 1152, 3, "float16"), (1030, 320, 640, None, "float16")]
    rows = run_cases(GPU_CHECK, cases, [f"case {c} (M, N, K, splits, dtype)" for c in cases], first_s=240,
                     each_s=120)
    assert len(rows) == len(cases)
    bad = [r for r in rows if not (r["bias"] <= 1.0 and r["relu"])]
    assert not bad, bad
