"""Elementwise add: what the compiler makes of each variant (CPU), bad input, and (GPU) results."""

import pytest
import torch

from cutecourse import errors, inspect
from cutecourse.kernels import elementwise as ew

TARGET = "cutecourse.kernels.elementwise:compile_target"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_naive_issues_scalar_loads_vectorized_issues_128_bit(dtype):
    naive = inspect.compile_report(TARGET, variant="naive", dtype=dtype, m=512, n=512)
    vec = inspect.compile_report(TARGET, variant="vectorized", dtype=dtype, m=512, n=512)
    assert naive.count("scalar global loads") == 2 and naive.count("vector global loads") == 0
    assert vec.count("vector global loads") == 2 and vec.count("scalar global loads") == 0
    assert vec.count(r"^ld\.global(\.\w+)*\.v4\.b32") == 2  # 4 x 32 bits = 128 bits per load
    assert naive.spill_bytes == 0 and vec.spill_bytes == 0
    if vec.sass:  # the same fact in machine code
        assert vec.histogram("sass")["LDG.E.128"] == 2


def test_two_vectors_per_thread_doubles_the_loads():
    r = inspect.compile_report(TARGET, variant="vectorized", m=512, n=512, elems=16)
    assert r.count("vector global loads") == 4


def test_tuned_configuration_issues_64_bit_loads():
    elems = ew.TUNED["vector_bytes"] // 2
    r = inspect.compile_report(TARGET, variant="vectorized", m=512, n=512, elems=elems,
                               threads=ew.TUNED["threads"])
    assert r.count(r"^ld\.global(\.\w+)*\.v2\.b32") == 2  # 2 x 32 bits = 64 bits per load


def test_compiles_for_blackwell_too():
    r = inspect.compile_report(TARGET, arch="sm_100a", variant="vectorized", m=256, n=256)
    assert ".target sm_100a" in r.ptx and r.count("vector global loads") == 2


def _cpu(shape=(64, 64), dtype=torch.float16):
    return torch.zeros(shape, dtype=dtype)


def test_rejects_mixed_dtypes():
    with pytest.raises(errors.DTypeError, match="b is float32 but a is float16"):
        ew.check_operands(_cpu(), _cpu(dtype=torch.float32), _cpu(), need_cuda=False)


def test_rejects_unsupported_dtype():
    with pytest.raises(errors.DTypeError, match="handles float16, bfloat16, float32"):
        ew.check_operands(*(_cpu(dtype=torch.float64) for _ in range(3)), need_cuda=False)


def test_rejects_cpu_tensors_with_a_fix():
    with pytest.raises(errors.DeviceError, match="device='cuda'"):
        ew.check_operands(_cpu(), _cpu(), _cpu())


def test_rejects_shape_mismatch():
    with pytest.raises(errors.ShapeError, match=r"shape \(64, 32\)"):
        ew.check_operands(_cpu(), _cpu((64, 32)), _cpu(), need_cuda=False)


def test_rejects_columns_the_vector_does_not_divide():
    a = _cpu((64, 60))
    with pytest.raises(errors.ShapeError, match="not a multiple of 8") as e:
        ew.check_operands(a, a.clone(), a.clone(), need_cuda=False)
    assert "variant='naive'" in e.value.fix
    ew.check_operands(a, a.clone(), a.clone(), variant="naive", need_cuda=False)  # naive takes any N


def test_rejects_non_contiguous():
    a = _cpu((64, 64))
    with pytest.raises(errors.LayoutError, match="contiguous"):
        ew.check_operands(a.t(), a.clone(), a.clone(), need_cuda=False)


def test_rejects_misaligned_view():
    base = torch.zeros(64 * 64 + 1, dtype=torch.float16)
    a = base[1:].view(64, 64)  # starts 2 bytes into the allocation
    with pytest.raises(errors.AlignmentError, match="multiple of 16 bytes"):
        ew.check_operands(a, _cpu(), _cpu(), need_cuda=False)


def test_rejects_bad_parameters():
    with pytest.raises(errors.ShapeError, match="whole number of warps"):
        ew.compile_target(threads=100)
    with pytest.raises(errors.ShapeError, match="not a 4-, 8-, 16-"):
        ew.compile_target(elems=6)  # 6 fp16 = 12 bytes: no vector width
    with pytest.raises(errors.CourseError, match="variant"):
        ew.compile_target(variant="fast")


@pytest.mark.no_gpu("any")
def test_add_without_gpu_says_why():
    with pytest.raises(errors.DeviceError, match="compile-and-inspect"):
        ew.add(_cpu(), _cpu())


# ------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu("any")
@pytest.mark.parametrize("variant", ["naive", "vectorized"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [(1024, 1024), (333, 264), (1, 8), (4097, 136)])
def test_matches_torch(variant, dtype, shape):
    a, b = (torch.randn(shape, device="cuda", dtype=dtype) for _ in range(2))
    out = torch.full_like(a, float("nan"))  # poison: every element must be written
    ew.add(a, b, out=out, variant=variant)
    torch.testing.assert_close(out, a + b, rtol=0, atol=0)


@pytest.mark.gpu("any")
def test_naive_handles_odd_shapes_on_gpu():
    a, b = (torch.randn(37, 51, device="cuda") for _ in range(2))
    torch.testing.assert_close(ew.add(a, b, variant="naive"), a + b, rtol=0, atol=0)


@pytest.mark.gpu("any")
def test_misaligned_view_is_refused_on_gpu():
    base = torch.randn(64 * 64 + 1, device="cuda", dtype=torch.float16)
    a = base[1:].view(64, 64)
    with pytest.raises(errors.AlignmentError):
        ew.add(a, a.clone())
