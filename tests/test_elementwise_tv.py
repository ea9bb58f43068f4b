"""The TV-layout elementwise add: its layouts, its checks, what it compiles to, and (on a GPU)
that it computes a + b."""

import pytest
import torch

from cutecourse import inspect
from cutecourse.errors import AlignmentError, CourseError, DeviceError, DTypeError, LayoutError, ShapeError
from cutecourse.kernels import elementwise_tv as tv
from cutecourse.kernels.elementwise_tv import TVShape

TARGET = "cutecourse.kernels.elementwise_tv:compile_target"


# -- the layouts, evaluated by CuTe on the CPU ----------------------------------------------------
def tv_layout_of(thr, val):
    """(tiler_mn, tv_layout as text) exactly as the kernel's host function builds them, read
    while the DSL traces a host function (an empty kernel gives the compile a cubin to make)."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    seen = {}

    @cute.kernel
    def empty(x: cute.Tensor):
        pass

    @cute.jit
    def probe(x: cute.Tensor, thr: cutlass.Constexpr, val: cutlass.Constexpr):
        tiler, layout = cute.make_layout_tv(cute.make_ordered_layout(thr, order=(1, 0)),
                                            cute.make_ordered_layout(val, order=(1, 0)))
        seen["tiler"], seen["tv"] = tuple(tiler), str(layout)
        empty(x).launch(grid=[1, 1, 1], block=[32, 1, 1])

    inspect.compile_here(probe, make_fake_compact_tensor(cutlass.Float16, (8,)), thr=thr, val=val)
    return seen["tiler"], seen["tv"]


def test_seed_tv_layout_matches_the_seed_printout():
    # the CuTe DSL blog post on elementwise add printed: Tiler: (16, 256)  TV Layout: ((32,4),(8,4)):((128,4),(16,1))
    tiler, layout = tv_layout_of((4, 32), (4, 8))
    assert tiler == (16, 256) == TVShape((4, 32), (4, 8)).tile
    assert layout == "((32,4),(8,4)):((128,4),(16,1))"


@pytest.mark.parametrize("thr,val", [((1, 256), (1, 8)), ((2, 128), (4, 8)), ((8, 32), (2, 4))])
def test_tile_property_matches_make_layout_tv(thr, val):
    assert tv_layout_of(thr, val)[0] == TVShape(thr, val).tile


# -- configuration checks ----------------------------------------------------------------------
@pytest.mark.parametrize("thr,val,match", [
    ((4, 30), (4, 8), "whole number of 32-thread warps"),
    ((8, 256), (1, 8), "2048 threads"),
    ((4, 32), (16, 16), "512 bytes"),
    ((4,), (4, 8), "pair of positive integers"),
    ((4, 32), (0, 8), "pair of positive integers"),
])
def test_bad_configuration_is_a_shape_error(thr, val, match):
    with pytest.raises(ShapeError, match=match):
        tv.make_shape(thr, val)


def test_unknown_raster():
    with pytest.raises(CourseError, match="raster"):
        tv.make_shape(raster="diagonal")


def test_tile_must_divide_the_tensor():
    with pytest.raises(ShapeError, match="N \\(columns\\) = 1000 is not a multiple of 256") as e:
        tv.check_tile((64, 1000), TVShape((4, 32), (4, 8)))
    assert "divides (64, 1000)" in e.value.fix
    with pytest.raises(ShapeError, match="M \\(rows\\) = 40 is not a multiple of 16"):
        tv.check_tile((40, 256), TVShape((4, 32), (4, 8)))
    with pytest.raises(ShapeError, match="grid's y limit"):
        tv.check_tile((70000, 2048), TVShape((1, 256), (1, 8)))
    tv.check_tile((70000, 2048), TVShape((1, 256), (1, 8), "m"))  # the 1-D grid has no such limit


def test_operand_checks_on_cpu_tensors():
    s = TVShape()
    a = torch.zeros(32, 512, dtype=torch.float16)
    tv.check_operands(a, a.clone(), a.clone(), s, need_cuda=False)  # fine
    with pytest.raises(DTypeError):
        tv.check_operands(a, a.float(), a.clone(), s, need_cuda=False)
    with pytest.raises(DTypeError):
        tv.check_operands(a.int(), a.int(), a.int(), s, need_cuda=False)
    with pytest.raises(ShapeError):
        tv.check_operands(a, a[:16], a.clone(), s, need_cuda=False)
    with pytest.raises(LayoutError):
        t = torch.zeros(512, 32, dtype=torch.float16).t()
        tv.check_operands(t, t, t, s, need_cuda=False)
    misaligned = torch.zeros(32 * 512 + 1, dtype=torch.float16)[1:].view(32, 512)  # 2 bytes in
    with pytest.raises(AlignmentError):
        tv.check_operands(misaligned, a, a, s, need_cuda=False)
    with pytest.raises(DeviceError):
        tv.check_operands(a, a, a, s)  # need_cuda=True: CPU tensors are refused


@pytest.mark.no_gpu("any")
def test_add_without_gpu_says_so():
    a = torch.zeros(16, 256, dtype=torch.float16)
    with pytest.raises(DeviceError, match="launches"):
        tv.add(a, a)


# -- what it compiles to (any machine) ----------------------------------------------------------
def test_compile_target_uses_128_bit_loads_and_stores():
    r = inspect.compile_report(TARGET, thr=[4, 32], val=[4, 8], m=1024, n=1024)
    # (4, 8) fp16 values per thread: 4 rows of one 16-byte vector, for A, B (loads) and C (store)
    assert r.count("vector global loads") == 8
    assert r.count("vector global stores") == 4
    assert r.count("scalar global loads") == 0 and r.count("scalar global stores") == 0
    assert r.count(r"^ld\.global\.v4\.b32") == 8  # 4 x 32 bits = 128 bits each
    assert r.spill_bytes == 0


@pytest.mark.parametrize("hint,qualifier", [("L1::no_allocate", r"\.L1::no_allocate"), ("nc", r"\.nc"),
                                            ("cs", r"\.cs"), ("L2::256B", r"\.L2::256B")])
def test_load_hints_reach_the_ptx(hint, qualifier):
    r = inspect.compile_report(TARGET, thr=[1, 256], val=[2, 8], hint=hint, m=512, n=2048)
    assert r.count(r"^ld\.global" + qualifier + r"\.v4\.b32") == 4  # 2 vectors each of A and B
    assert r.count("scalar global loads") == 0


def test_bad_hints():
    with pytest.raises(CourseError, match="hint= one of"):
        tv.make_shape(hint="L3")
    with pytest.raises(ShapeError, match="whole 16-byte vectors"):
        tv.make_shape(val=(2, 4), hint="nc")  # 4 fp16 = 8 bytes


def test_fp32_uses_four_elements_per_vector():
    r32 = inspect.compile_report(TARGET, thr=[4, 32], val=[1, 4], dtype="float32", m=512, n=512)
    assert r32.count(r"^ld\.global\.v4\.b32") == 2 and r32.count(r"^add\.f32") == 4


def test_compile_target_rejects_a_tile_that_does_not_divide():
    with pytest.raises(ShapeError):
        tv.compile_target(m=100, n=4096)
    with pytest.raises(DTypeError, match="dtype"):
        tv.compile_target(dtype="int8")


# -- on a GPU: it computes a + b ------------------------------------------------------------------
@pytest.mark.gpu("any")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [TVShape(), TVShape((1, 256), (2, 8)), TVShape((4, 32), (4, 8), "m"),
                                   TVShape((2, 64), (1, 16)), TVShape((8, 32), (2, 8), "n", "cs"),
                                   TVShape((1, 128), (1, 8), "n", "nc")])
def test_add_matches_torch(dtype, shape):
    torch.manual_seed(1)
    m, n = 2 * shape.tile[0] * 3, shape.tile[1] * 5
    a = torch.randn(m, n, device="cuda", dtype=dtype)
    b = torch.randn(m, n, device="cuda", dtype=dtype)
    c = tv.add(a, b, thr=shape.thr, val=shape.val, raster=shape.raster, hint=shape.hint)
    torch.testing.assert_close(c, a + b)


@pytest.mark.gpu("any")
def test_add_on_gpu_refuses_a_ragged_shape_and_a_misaligned_view():
    a = torch.randn(16, 260, device="cuda", dtype=torch.float16)
    with pytest.raises(ShapeError, match="not a multiple of 256"):
        tv.add(a, a)
    base = torch.randn(16 * 256 + 8, device="cuda", dtype=torch.float16)
    v = base[1:1 + 16 * 256].view(16, 256)
    with pytest.raises(AlignmentError):
        tv.add(v, v)
