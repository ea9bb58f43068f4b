"""CPU references of block scaling: formats, scale rules, grouped references, error tables.

The Hopper FP8 blockwise reference: test_blockwise_fp8.py; the SF layout: test_sf_layout.py."""

import math

import pytest
import torch

from cutecourse.errors import CourseError, DTypeError, ShapeError
from cutecourse.models import block_scaling as bs
from cutecourse.models import blockwise_fp8 as fp8b

from block_data import randn

BLOCK_FORMATS = ("nvfp4", "mxfp4", "mxfp8")


def e4m3_positive_values():
    return torch.arange(0, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).float()  # 0 .. 448


def block_scales(sf, fmt, global_scale=None):
    f = bs.get_format(fmt)
    return sf.float().repeat_interleave(f.block, 1) * (global_scale or 1.0)


# ------------------------------------------------------------------------------ e2m1 ----

def test_e2m1_rounds_to_nearest_even_and_saturates():
    y = torch.tensor([0.0, 0.2, 0.25, 0.26, 0.75, 1.25, 1.75, 2.5, 2.6, 3.5, 5.0, 5.1, 6.0, 100.0, -0.75, -7.0])
    want = [0.0, 0.0, 0.0, 0.5, 1.0, 1.0, 2.0, 2.0, 3.0, 4.0, 4.0, 6.0, 6.0, 6.0, -1.0, -6.0]
    assert bs.e2m1_values(bs.e2m1_codes(y)).tolist() == want
    codes = torch.arange(16, dtype=torch.uint8)
    assert torch.equal(bs.e2m1_codes(bs.e2m1_values(codes)) & 7, codes & 7)  # grid survives


def test_e2m1_packing_low_nibble_first():
    codes = torch.tensor([[1, 2, 15, 0]], dtype=torch.uint8)
    packed = bs.pack_e2m1(codes)
    assert packed.dtype == torch.float4_e2m1fn_x2 and packed.shape == (1, 2)
    assert packed.view(torch.uint8).tolist() == [[0x21, 0x0F]]
    g = torch.Generator().manual_seed(1)
    many = torch.randint(0, 16, (8, 64), generator=g, dtype=torch.uint8)
    assert torch.equal(bs.unpack_e2m1(bs.pack_e2m1(many)), many)
    with pytest.raises(ShapeError):
        bs.pack_e2m1(torch.zeros(2, 3, dtype=torch.uint8))


# ---------------------------------------------------------------- quantize / dequantize ----

@pytest.mark.parametrize("fmt", BLOCK_FORMATS)
def test_round_trip_within_the_format_bound(fmt):
    f = bs.get_format(fmt)
    # Rows spread over 10^+-3 (e8m0 spans 2^+-127); NVFP4's e4m3 scales span only 2^-6 .. 448 as
    # normals, so it gets 10^+-1.5 and the global scale that centres them.
    x = randn(64, 256, seed=2, spread=1.5 if fmt == "nvfp4" else 3.0)
    gs = bs.nvfp4_global_scale(x) if fmt == "nvfp4" else None
    q, sf = bs.quantize(x, fmt, gs)
    assert q.dtype == f.data_dtype and sf.dtype == f.scale_dtype
    assert q.shape == (64, 256 // 2 if f.data == "e2m1" else 256) and sf.shape == (64, 256 // f.block)
    d = bs.dequantize(q, sf, fmt, gs)
    s = block_scales(sf, fmt, gs)
    err, y = (d - x).abs(), x.abs() / s
    if f.data == "e2m1":  # half the grid step at |x|/s: .25 up to 2, .5 up to 4, 1 beyond
        bound = s * torch.where(y <= 2, 0.25, torch.where(y <= 4, 0.5, 1.0))
    else:  # e4m3: 3 mantissa bits -> relative 2^-4; subnormal half step 2^-10
        bound = torch.maximum(x.abs() * 2**-4, s * 2**-10)
    assert (err <= bound * (1 + 1e-6)).all()
    rel = ((d - x).norm() / x.norm()).item()
    assert rel < {"nvfp4": 0.12, "mxfp4": 0.16, "mxfp8": 0.04}[fmt]


@pytest.mark.parametrize("fmt", BLOCK_FORMATS)
def test_values_on_the_grid_survive_unchanged(fmt):
    f = bs.get_format(fmt)
    g = torch.Generator().manual_seed(3)
    rows, k = 8, 4 * f.block
    if f.data == "e2m1":
        codes = torch.randint(0, 16, (rows, k), generator=g, dtype=torch.uint8)
        codes[:, :: f.block] = 7  # every block holds the data max, so the scale is exactly s
        v = bs.e2m1_values(codes)
    else:
        v = e4m3_positive_values()[torch.randint(0, 127, (rows, k), generator=g)]
        v = v * torch.where(torch.rand(rows, k, generator=g) < 0.5, -1.0, 1.0)
        v[:, :: f.block] = 448.0
    if f.scale == "e8m0":
        s = 2.0 ** torch.randint(-20, 20, (rows, k // f.block), generator=g).float()
    else:
        s = e4m3_positive_values()[torch.randint(1, 127, (rows, k // f.block), generator=g)]
    x = v * s.repeat_interleave(f.block, 1)
    q, sf = bs.quantize(x, fmt)
    assert torch.equal(sf.float(), s)
    assert torch.equal(bs.dequantize(q, sf, fmt), x)


@pytest.mark.parametrize("fmt", ["mxfp8", "mxfp4"])
def test_e8m0_scale_is_the_smallest_power_of_two_that_fits(fmt):
    f = bs.get_format(fmt)
    x = randn(32, 128, seed=4, spread=8.0)
    x[0, : f.block] = 0.0  # a zero block
    _, sf = bs.quantize(x, fmt)
    exp = sf.view(torch.uint8).int() - 127
    s = sf.float()
    assert torch.equal(s.double(), 2.0 ** exp.double())  # byte = exponent + 127, value = 2^exponent
    amax = x.view(32, -1, f.block).abs().amax(-1)
    assert (amax / s <= f.data_max).all()  # nothing saturates
    assert ((amax / (s / 2) > f.data_max) | (exp == -127)).all()  # and half the scale would
    assert exp[0, 0] == -127  # zero block: the rule's smallest scale, byte 0


@pytest.mark.parametrize("fmt", ["mxfp8", "mxfp4", "mxfp8_e5m2"])
def test_ocp_rule_rounds_the_exponent_of_amax_down_and_clamps(fmt):
    """OCP MX v1.0: X = 2^(floor(log2 amax) - emax); then x / X is saturated. NVIDIA's rule is
    never smaller and at most twice as large, and never saturates."""
    f = bs.get_format(fmt)
    x = randn(32, 128, seed=14, spread=6.0)
    x[0, : f.block] = 0.0
    amax = x.view(32, -1, f.block).abs().amax(-1)
    q, sf = bs.quantize(x, fmt, mx_rule="ocp")
    exp = sf.view(torch.uint8).int() - 127
    want = torch.floor(torch.log2(amax.double())) - f.emax
    assert torch.equal(exp[amax > 0].double(), want[amax > 0]) and exp[0, 0] == -127
    assert 2.0 ** f.emax <= f.data_max < 2.0 ** (f.emax + 1)  # emax is data_max's exponent
    ocp, nv = sf.float(), bs.quantize(x, fmt)[1].float()
    assert ((nv == ocp) | (nv == 2 * ocp)).all()
    assert (nv == 2 * ocp).any()  # on these data the rules differ somewhere ...
    vals = bs.dequantize(q, sf, fmt).view(32, -1, f.block).abs().amax(-1)
    assert (vals <= ocp * f.data_max).all()  # ... and there the spec's rule clamps the block max
    assert (vals[nv == 2 * ocp] < amax[nv == 2 * ocp]).all()


def test_ocp_and_nvidia_rules_on_hand_checked_blocks():
    for fmt, amax, nvidia, ocp in [("mxfp4", 7.0, 2.0, 1.0), ("mxfp4", 5.0, 1.0, 1.0), ("mxfp4", 6.0, 1.0, 1.0),
                                   ("mxfp8", 448.0, 1.0, 1.0), ("mxfp8", 500.0, 2.0, 1.0),
                                   ("mxfp8_e5m2", 57344.0, 1.0, 1.0), ("mxfp8_e5m2", 60000.0, 2.0, 1.0)]:
        v = torch.zeros(1, 32)
        v[0, 5] = amax
        assert float(bs.quantize(v, fmt)[1].float()) == nvidia, (fmt, amax)
        assert float(bs.quantize(v, fmt, mx_rule="ocp")[1].float()) == ocp, (fmt, amax)
    with pytest.raises(CourseError, match="MX scale rule"):
        bs.quantize(torch.ones(1, 32), "mxfp8", mx_rule="down")


def test_mxfp8_e5m2_round_trip():
    f = bs.get_format("mxfp8_e5m2")
    assert f.data_dtype == torch.float8_e5m2 and f.bits_per_value == 8.25 and f.cutlass_types[0] == "Float8E5M2"
    x = randn(16, 128, seed=15, spread=3.0)
    q, sf = bs.quantize(x, f)
    d = bs.dequantize(q, sf, f)
    s = block_scales(sf, "mxfp8_e5m2")
    # 2 mantissa bits: relative 2^-3; subnormal half step 2^-17 of the scale
    assert ((d - x).abs() <= torch.maximum(x.abs() * 2**-3, s * 2**-17) * (1 + 1e-6)).all()
    e4m3 = bs.error_table(x, ("mxfp8", "mxfp8_e5m2"))
    assert e4m3[0].rel_fro < e4m3[1].rel_fro  # one mantissa bit less: larger error


def test_nvfp4_as_used_has_its_per_tensor_scale():
    """One outlier far out: without the per-tensor scale its block's scale clips at e4m3's 448
    and the error is large; with it (NVFP4 as used) the block scales fit and it beats fp4 with
    one scale per tensor."""
    x = bs.outlier_weights(16, 128, seed=0, magnitude=1000.0)
    used = bs.quantize_as_used(x, "nvfp4")
    assert used.global_scale == pytest.approx(float(x.abs().max()) / (448 * 6))
    assert used.sf.float().max() == 448.0 and torch.equal(used.dequantize(), bs.round_trip(x, "nvfp4"))
    _, block_only = bs.quantize(x, "nvfp4")
    assert (block_only.float() == 448.0).sum() > (used.sf.float() == 448.0).sum()  # clipped blocks
    err = {r.format: r.rel_fro for r in bs.error_table(x, ("nvfp4", "nvfp4_block_only"))}
    assert err["nvfp4"] < 0.03 and err["nvfp4_block_only"] > 0.4
    mx = bs.quantize_as_used(x, "mxfp8")
    assert mx.global_scale == 1.0 and mx.fmt == "mxfp8"
    with pytest.raises(CourseError, match="positive"):
        bs.quantize(x, "nvfp4", global_scale=0.0)


def test_nvfp4_scale_is_the_nearest_e4m3_per_16():
    x = randn(16, 160, seed=5, spread=1.5)
    _, sf = bs.quantize(x, "nvfp4")
    assert sf.shape == (16, 10)
    ideal = x.view(16, 10, 16).abs().amax(-1) / 6
    grid = e4m3_positive_values()
    nearest = grid[(ideal[..., None] - grid).abs().argmin(-1)]  # brute force over all 127 values
    assert torch.equal(sf.float(), nearest)


def test_saturation_never_gives_inf_or_nan():
    x = torch.zeros(2, 32)
    x[0, :16] = torch.linspace(-6.36, 6.36, 16)  # amax/6 = 1.06 -> e4m3 scale 1.0 -> 6.36 saturates
    x[1, :] = 3e38 * (-1.0) ** torch.arange(32)     # far beyond what e4m3 scales reach
    q, sf = bs.quantize(x, "nvfp4")
    assert sf[0, 0].float() == 1.0
    codes = bs.unpack_e2m1(q)
    assert codes[0, 0] == 15 and codes[0, 15] == 7  # -6 and +6
    for fmt in BLOCK_FORMATS:
        q, sf = bs.quantize(x, fmt)
        assert torch.isfinite(sf.float()).all() and (sf.view(torch.uint8) != 0xFF).all()  # 0xFF: NaN
        if fmt == "mxfp8":
            assert q.float().abs().max() <= 448
        # Dequantized in fp32, a value rounded up near fp32's max (3.4e38) may pass it; 1e38 does not.
        assert torch.isfinite(bs.dequantize(*bs.quantize(x / 3, fmt), fmt)).all()
    qf, sb = fp8b.quantize_blockwise_fp8(x, (1, 32))
    assert torch.isfinite(qf.float()).all() and qf.float().abs().max() <= 448


@pytest.mark.parametrize("fmt", BLOCK_FORMATS)
def test_zero_blocks_quantize_to_zero_and_leave_neighbours_alone(fmt):
    f = bs.get_format(fmt)
    x = randn(4, 3 * f.block, seed=6)
    x0 = x.clone()
    x0[:, f.block: 2 * f.block] = 0
    d, d0 = (bs.dequantize(*bs.quantize(t, fmt), fmt) for t in (x, x0))
    assert (d0[:, f.block: 2 * f.block] == 0).all()
    assert torch.equal(d0[:, : f.block], d[:, : f.block])
    assert torch.equal(d0[:, 2 * f.block:], d[:, 2 * f.block:])


def test_nvfp4_global_scale_rescues_tiny_tensors():
    x = randn(32, 64, seed=7) * 1e-4  # amax/6 ~ 6e-5: below e4m3's smallest scale 2^-9
    q, sf = bs.quantize(x, "nvfp4")
    assert (sf.float() == 0).all() and (bs.dequantize(q, sf, "nvfp4") == 0).all()
    gs = bs.nvfp4_global_scale(x)
    assert gs == pytest.approx(x.abs().max().item() / (448 * 6))
    q, sf = bs.quantize(x, "nvfp4", gs)
    assert sf.float().max() == 448  # the tensor's largest block uses the top of e4m3's range
    d = bs.dequantize(q, sf, "nvfp4", gs)
    assert ((d - x).norm() / x.norm()).item() < 0.12



def test_formats_name_real_cutlass_types():
    import cutlass

    for f in bs.FORMATS.values():
        data, scale = (getattr(cutlass, n) for n in f.cutlass_types)
        assert data.width == (4 if f.data == "e2m1" else 8) and scale.width == 8


# ------------------------------------------------------------------- grouped reference ----

@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp8", "mxfp4", "fp8_blockwise"])
def test_grouped_reference(fmt):
    shapes = [(128, 64, 256), (40, 200, 128), (256, 128, 384)]
    groups = [(randn(m, k, seed=i), randn(n, k, seed=10 + i)) for i, (m, n, k) in enumerate(shapes)]
    cs = bs.grouped_reference(groups, fmt)
    tol = {"nvfp4": 0.15, "mxfp4": 0.2, "mxfp8": 0.05, "fp8_blockwise": 0.05}[fmt]
    for (a, b), c, (m, n, _) in zip(groups, cs, shapes):
        assert c.shape == (m, n) and c.dtype == torch.float32
        exact = a @ b.T
        assert ((c - exact).norm() / exact.norm()).item() < tol
        if fmt != "fp8_blockwise":
            da = bs.dequantize(*bs.quantize(a, fmt), fmt)
            db = bs.dequantize(*bs.quantize(b, fmt), fmt)
            assert torch.equal(c, da @ db.T)
    with pytest.raises(ShapeError):
        bs.grouped_reference([(randn(8, 64), randn(8, 32))], fmt)


def test_grouped_reference_with_global_scale():
    a, b = randn(32, 64, seed=1) * 1e-4, randn(16, 64, seed=2) * 1e-3
    plain, scaled = bs.grouped_reference([(a, b)], "nvfp4")[0], bs.grouped_reference([(a, b)], "nvfp4", True)[0]
    exact = a @ b.T
    assert (plain == 0).all()  # a's block scales underflow e4m3 without the global scale
    assert ((scaled - exact).norm() / exact.norm()).item() < 0.15


# --------------------------------------------------------------- error table and outliers ----

def test_error_table_orders_formats_by_bits():
    w = bs.outlier_weights(128, 256, seed=0)
    rows = bs.error_table(w, ("bf16", "fp8_blockwise", "mxfp8", "nvfp4", "mxfp4"))
    err = {r.format: r for r in rows}
    assert [r.format for r in rows][:3] == ["bf16", "fp8_blockwise", "mxfp8"]
    assert err["bf16"].rel_fro < err["mxfp8"].rel_fro < err["nvfp4"].rel_fro < err["mxfp4"].rel_fro
    assert err["nvfp4"].bits_per_value == 4.5 and err["mxfp8"].bits_per_value == 8.25
    assert all(0 < r.rel_max < 1 for r in rows)


def test_outlier_weights_are_deterministic_and_have_outliers():
    w = bs.outlier_weights(64, 128, seed=3)
    assert torch.equal(w, bs.outlier_weights(64, 128, seed=3))
    assert not torch.equal(w, bs.outlier_weights(64, 128, seed=4))
    col = w.norm(dim=0)
    assert col.max() > 10 * col.median()


# ------------------------------------------------------------------------------ errors ----

def test_bad_input_raises_course_errors():
    with pytest.raises(ShapeError, match="multiple of the block size 16"):
        bs.quantize(torch.randn(4, 40), "nvfp4")
    with pytest.raises(ShapeError, match="dimensions"):
        bs.quantize(torch.randn(2, 4, 32), "mxfp8")
    with pytest.raises(DTypeError, match="unknown block-scaled format"):
        bs.quantize(torch.randn(4, 32), "fp6")
    with pytest.raises(DTypeError):
        bs.quantize(torch.ones(4, 32, dtype=torch.int32), "mxfp8")
    with pytest.raises(CourseError, match="inf or NaN"):
        bs.quantize(torch.full((1, 32), math.inf), "mxfp8")
    q, sf = bs.quantize(torch.randn(4, 32), "mxfp8")
    with pytest.raises(DTypeError):
        bs.dequantize(q, sf, "nvfp4")
    with pytest.raises(ShapeError):
        bs.dequantize(q, sf[:, :0], "mxfp8")
    with pytest.raises(DTypeError):
        bs.error_table(torch.randn(4, 32), ("bf16", "int3"))


def test_outlier_weights_without_outliers_has_none():
    """The widget's "outliers" slider at 0: no outlier row is left behind, so "outlier x" changes nothing."""
    assert torch.equal(bs.outlier_weights(16, 128, seed=0, n_outliers=0, magnitude=1000.0),
                       bs.outlier_weights(16, 128, seed=0, n_outliers=0, magnitude=1.0))
