"""The mixed-input GEMM kernel (int4 weights x bf16 or fp16 activations) and its host API.

On the CPU: the sm_90a PTX has register-sourced wgmmas, the lop3 conversion and no int -> float
``cvt``, TMA loads (and the large-M route's dequantize kernel the same conversion), for bf16 and
for fp16 (f16 wgmmas, fp16's magic number, f16x2 arithmetic); every bad input is refused with
what to change, x and scales of different dtypes too; the plan splits K where the grid is small.
On a Hopper GPU (``-m gpu``): y against x @ W'.T on shapes nobody picked, bf16 and fp16, and
one-hot rows of x that read W' back bit for bit. The quantization itself: test_quant_int4.py.
"""

import re

import pytest
import torch

from cutecourse.errors import CourseError, DeviceError, DTypeError, ShapeError
from cutecourse.kernels import mixed_input as mi
from cutecourse.quant import dequantize, quantize_int4

TARGET = "cutecourse.kernels.mixed_input:compile_target"



# -- what the compiler made (sm_90a, on any machine) ----------------------------------------------
INT_TO_FLOAT_CVT = re.compile(r"cvt(\.\w+)*\.(bf16|f16|f32)(x2)?\.(s|u)(4|8|16|32)\b")
#: per activation dtype: its PTX type, and the magic word its lop3s OR in (128.0 / 1024.0 twice)
PTX_TYPE = {"bfloat16": ("bf16", "0x43004300"), "float16": ("f16", "0x64006400")}


def register_a_wgmmas(ptx: str, ab: str = "bf16") -> list:
    """The N of each wgmma with A from registers and ``ab`` x ``ab`` -> f32 in ``ptx``."""
    return re.findall(rf"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16\.f32\.{ab}\.{ab} \{{[^}}]*\}}, \{{%r", ptx)


@pytest.mark.parametrize("params", [dict(tile_m=16), dict(tile_m=8, zero_point=True, group_size=64),
                                    dict(tile_m=64, split_k=True),
                                    dict(tile_m=16, warpgroups=2, split_k=True, zero_point=True, group_size=32),
                                    dict(tile_m=16, dtype="float16"),
                                    dict(tile_m=8, warpgroups=2, split_k=True, zero_point=True, group_size=64,
                                         dtype="float16")])
def test_ptx_register_wgmma_and_lop3_conversion(params):
    from cutecourse.inspect import compile_report

    r = compile_report(TARGET, **params)
    ptx = r.ptx
    ab, magic = PTX_TYPE[params.get("dtype", "bfloat16")]
    wgmmas = register_a_wgmmas(ptx, ab)
    assert len(wgmmas) == 16 and set(wgmmas) == {str(params["tile_m"])}, "16 register-A wgmmas per k-tile"
    assert "wgmma.mma_async" in ptx and ptx.count("wgmma.mma_async") == 16
    # 16 words a k-tile, 4 registers a word: one lop3, one sub, one mul each
    for op in ("lop3.b32", f"sub.rn.{ab}x2", f"mul.rn.{ab}x2"):
        assert ptx.count(op) == 64, op
    assert ptx.count(magic) == 64, "every lop3 ORs in the dtype's magic word"
    if ab == "f16":  # nothing of bf16 is left in the fp16 kernel
        assert "bf16" not in ptx
        assert params.get("zero_point") or "0x64086408" in ptx  # zero point 8: 1032.0 twice
    assert not INT_TO_FLOAT_CVT.search(ptx), INT_TO_FLOAT_CVT.search(ptx).group(0)
    assert ptx.count("cp.async.bulk.tensor.2d") >= 3 + params.get("zero_point", False)
    assert r.spill_bytes == 0
    assert "C7513" not in r.log, "ptxas serialized the wgmmas (A registers written while one is in flight)"
    assert "st.global.b16" in ptx  # bf16 y
    if params.get("split_k"):  # fp32 slices, the tile's counter, the last split reads the slices from L2
        assert "st.global.b32" in ptx and "atom.global.acq_rel" in ptx and "ld.global.cg" in ptx


@pytest.mark.parametrize("params", [dict(), dict(zero_point=True, group_size=32), dict(dtype="float16"),
                                    dict(zero_point=True, group_size=32, dtype="float16")])
def test_dequantize_kernel_converts_with_lop3_and_stores_pairs(params):
    """The large-M route's first kernel: a CTA converts 4 reorder blocks, each with one 16-byte
    load of 4 words a thread, 16 registers made by lop3 + sub + mul (no int -> float cvt; bf16x2,
    or f16x2 with fp16's magic word), staged in shared memory and stored as 16-byte rows of W';
    the scales read once per block when the group covers it, once per 16-column slice of two when
    it does not."""
    from cutecourse.inspect import compile_report
    from cutecourse.kernels.int4_dequantize import BLOCKS

    ptx = compile_report("cutecourse.kernels.int4_dequantize:compile_target", **params).ptx
    ab, magic = PTX_TYPE[params.get("dtype", "bfloat16")]
    assert ptx.count("ld.global.v4.b32") == BLOCKS
    for op in ("lop3.b32", f"sub.rn.{ab}x2", f"mul.rn.{ab}x2", "st.shared.b32", magic):
        assert ptx.count(op) == 16 * BLOCKS, op
    assert ptx.count("st.global.v4.b32") == 4 * BLOCKS and "st.global.b32" not in ptx
    assert not INT_TO_FLOAT_CVT.search(ptx)
    per_block = 8 if params.get("group_size") == 32 else 2  # (rows g and g + 8) x groups in the block
    assert ptx.count("ld.global.b16") + ptx.count("ld.global.nc.b16") == per_block * BLOCKS
    assert ptx.count("ld.global.b8") == (per_block * BLOCKS if params.get("zero_point") else 0)


def test_overlapping_conversion_with_wgmmas_makes_ptxas_serialize():
    """The counter-example of hopper_mixed_gemm.py's docstring (variant "overlap", IN_FLIGHT = 1):
    converting the next chunk while the previous chunk's wgmmas run is correct, but ptxas cannot
    prove it and serializes every wgmma (C7513). It also proves that the compile log carries
    ptxas's remarks, so the test above can see a C7513."""
    from cutecourse.inspect import compile_report

    r = compile_report(TARGET, tile_m=16, variant="overlap")
    assert "C7513" in r.log
    assert len(register_a_wgmmas(r.ptx)) == 16


def test_entry_fakes_the_operands_the_kernel_describes():
    """The compile target is the host layer's: fakes of x, packed, scales, y, the stream, then the
    split-K buffers and the zeros, from HopperMixedGemm.operands(); sizes are symbols."""
    kernel, args = mi.compile_target(tile_m=8, split_k=True, zero_point=True, group_size=64)
    assert isinstance(kernel, mi.HopperMixedGemm) and (kernel.split_k, kernel.group_size) == (True, 64)
    before, after = kernel.operands()
    assert [t.name for t in before + after] == ["x", "packed", "scales", "y", "partials", "counters", "zeros"]
    assert len(args) == 8 and [a.element_type.width for a in args[:4]] == [16, 32, 16, 16]
    assert len(mi.compile_target(tile_m=16)[1]) == 5  # no split, no zeros: nothing after the stream
    with pytest.raises(CourseError, match="HopperMixedGemm"):
        mi.compile_target(split=True)  # the constructor's name is split_k
    with pytest.raises(CourseError, match="in_dtype"):
        mi.compile_target("float16", tile_m=8)  # the description's dtypes: not silently ignored


def test_the_entry_has_every_entrys_verbs_on_the_described_operands():
    """validate, launcher and gemm take x, packed, scales (zeros) as mixed_input's functions do."""
    x, packed, scales, _ = _operands()
    assert mi.ENTRY.validate(x, packed, scales) == mi.check(x, packed, scales) == (3, 128, 256, 128)
    assert (mi.validate, mi.gemm) == (mi.check, mi.mixed_mm)  # the dense modules' names for them too
    with pytest.raises(DTypeError, match="bfloat16"):
        mi.ENTRY.validate(x.float(), packed, scales)
    for verb in (mi.ENTRY.launcher, mi.ENTRY.gemm):  # the checks first, then: no GPU here
        with pytest.raises(DTypeError, match="x is float32"):
            verb(x.float(), packed, scales)
    bare = mi.DescribedEntry(mi.HopperMixedGemm)
    with pytest.raises(CourseError, match="without a torch-facing launcher"):
        bare.launcher(x, packed, scales)


def test_the_entry_allocates_the_split_k_scratch_the_kernel_describes():
    """partials (S, M, N) fp32 and counters (tiles,) int32, zeroed: sizes from the given tensors and
    ``sizes``; a size in neither is named."""
    from cutecourse.kernels.operands import allocate_scratch

    x, packed, scales, _ = _operands()
    tensors = dict(x=x, packed=packed, scales=scales, y=torch.empty(3, 128).bfloat16())
    kernel = mi.ENTRY.kernel(tile_m=8, split_k=True)
    got = allocate_scratch(kernel, tensors, dict(S=4, tiles=2))
    assert {k: (tuple(t.shape), t.dtype) for k, t in got.items()} == {
        "partials": ((4, 3, 128), torch.float32), "counters": ((2,), torch.int32)}
    assert int(got["counters"].abs().sum()) == 0
    assert allocate_scratch(mi.ENTRY.kernel(tile_m=8), tensors) == {}  # no split: no scratch
    with pytest.raises(CourseError, match="'S' of partials"):
        allocate_scratch(kernel, tensors, dict(tiles=2))


def test_fp16_is_a_keyword_of_the_kernel_and_its_key():
    """fp16 activations are the kernel's ``dtype`` keyword (class default ``DTYPE``): part of the
    compile key, of the operands it describes (x, scales, y), and checked where it is built."""
    bf16, fp16 = mi.ENTRY.kernel(tile_m=16), mi.ENTRY.kernel(tile_m=16, dtype="float16")
    assert (bf16.dtype, mi.HopperMixedGemm.DTYPE) == ("bfloat16", "bfloat16") and bf16.key() != fp16.key()
    assert [t.dtype for t in fp16.operands()[0]] == ["float16", "int32", "float16", "float16"]
    _, args = mi.compile_target(tile_m=8, dtype="float16")
    assert [str(a.element_type) for a in args[:4]] == ["Float16", "Int32", "Float16", "Float16"]
    with pytest.raises(DTypeError, match="bfloat16 or float16"):
        mi.ENTRY.kernel(tile_m=16, dtype="float32")
    from cutecourse.kernels.int4_dequantize import ENTRY as DEQUANTIZE

    assert [t.dtype for t in DEQUANTIZE.kernel(dtype="float16").operands()[0]] == ["int32", "float16", "int32"]


# -- bad input -------------------------------------------------------------------------------------
def _operands(m=3, n=128, k=256, group=128, zero_point=False, dtype=torch.bfloat16):
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(6))
    packed, scales, zeros = quantize_int4(w, group, zero_point=zero_point, dtype=dtype)
    return torch.randn(m, k).to(dtype), packed, scales, zeros


def test_valid_operands_pass():
    assert mi.check(*_operands()) == (3, 128, 256, 128)
    assert mi.check(*_operands(group=64, zero_point=True)) == (3, 128, 256, 64)
    assert mi.check(*_operands(dtype=torch.float16)) == (3, 128, 256, 128)


def test_x_and_scales_of_different_dtypes_are_refused():
    """x's dtype picks the kernel; scales quantized for the other dtype are refused, and the fix
    names the quantize_int4 call that makes the right ones."""
    x, packed, scales, _ = _operands()
    with pytest.raises(DTypeError, match="x is float16 but the scales are bfloat16") as info:
        mi.check(x.half(), packed, scales)
    assert "quantize_int4(w, group_size, dtype=torch.float16)" in info.value.fix
    with pytest.raises(DTypeError, match="x is bfloat16 but the scales are float16") as info:
        mi.check(x, packed, scales.half())
    assert "dtype=torch.bfloat16" in info.value.fix


@pytest.mark.parametrize("change,error,match", [
    (lambda x, p, s, z: (x.float(), p, s, z), DTypeError, "bfloat16 or float16 activations"),
    (lambda x, p, s, z: (x, torch.randn(128, 256), s, z), DTypeError, "unquantized weights"),
    (lambda x, p, s, z: (x, torch.randint(0, 255, (128, 128), dtype=torch.uint8), s, z), DTypeError,
     "int32 words"),
    (lambda x, p, s, z: (x, torch.randint(0, 15, (128, 256), dtype=torch.int32), s, z), ShapeError,
     "not packed"),
    (lambda x, p, s, z: (x, p, s.T.contiguous(), z), ShapeError, "transposed"),
    (lambda x, p, s, z: (x, p, s.float(), z), DTypeError, "bfloat16 or float16 scales"),
    (lambda x, p, s, z: (x, p, torch.ones(3, 128, dtype=torch.bfloat16), z), ShapeError, "whole groups"),
    (lambda x, p, s, z: (x, p, s, torch.zeros(2, 128)), DTypeError, "uint8 zero"),
    (lambda x, p, s, z: (x[:, :128], p, s, z), ShapeError, "K = 256"),
    (lambda x, p, s, z: (x.T.contiguous().T, p, s, z), CourseError, "contiguous"),
    (lambda x, p, s, z: (x.to("meta"), p, s, z), DeviceError, "different devices"),
])
def test_bad_input_says_what_to_change(change, error, match):
    with pytest.raises(error, match=match) as info:
        mi.check(*change(*_operands()))
    assert info.value.fix


def test_group_that_straddles_k_tiles_is_refused():
    x, packed, scales, _ = _operands(k=768, group=192)  # a k-tile of 256 would hold 1 1/3 groups
    with pytest.raises(ShapeError, match="k-tile"):
        mi.check(x, packed, scales)


def test_quantize_refuses_what_the_reorder_cannot_hold():
    with pytest.raises(ShapeError, match="multiples of 64"):
        quantize_int4(torch.randn(100, 256))
    with pytest.raises(ShapeError, match="group_size"):
        quantize_int4(torch.randn(64, 192), group_size=128)
    with pytest.raises(DTypeError, match="float tensor"):
        quantize_int4(torch.ones(64, 64, dtype=torch.int32))


@pytest.mark.no_gpu
def test_cpu_operands_are_a_device_error():
    with pytest.raises(DeviceError, match="Hopper GPU"):
        mi.launcher(*_operands())


def test_plan_splits_k_when_the_grid_is_small():
    # 64 CTAs of 32 k-tiles (8192 x 8192, two warpgroups): 4 splits put 2 CTAs of 8 k-tiles on
    # each SM, 16 + 4 splits; 6 splits 3 CTAs of 6 on the busiest, 18 + 6; 2 splits one CTA of 16
    # an SM, counted as two (no CTA to overlap its conversion with): 32 + 2
    assert [mi.split_cost(64, s, 32) for s in (1, 2, 3, 4, 6, 8)] == [65, 34, 25, 20, 24, 24]
    assert mi.split_cost(64, 2, 32, overlap=1) == 18  # an SM with one CTA as fast as with two
    # 224 CTAs (28672 x 8192): 896 CTAs with 4 splits, 7 on the busiest SM, 7 x 8 + 4
    assert mi.split_cost(224, 4, 32) == 60 and mi.split_cost(224, 7, 32) == 67
    # The measured cases (benchmarks/results/experiment_mixed_ceilings.json, H200, cold weights):
    # 4 splits is the fastest at M = 1 on all three weights and at M = 16 on 8192 x 8192; at M = 16
    # it is within 5% of the fastest (28672 x 8192: 3 splits, 4.6%; 8192 x 28672: 6 splits, 3.0%).
    for n, k in [(8192, 8192), (28672, 8192), (8192, 28672)]:
        for m in (1, 16):
            p = mi.plan(m, n, k, 128)
            assert (p.warpgroups, p.splits) == (2, 4), (m, n, k, p)
    p = mi.plan(1, 8192, 8192, 128)  # 64 CTAs of 128 rows
    assert (p.warpgroups, p.ctas, p.splits) == (2, 64, 4)
    assert mi.plan(1, 8256, 8192, 128).warpgroups == 1  # N = 129 x 64: 64-row tiles, none padded
    # where the grid alone fills each SM twice the fixed cost per split wins: 14336 x 4096, M = 1:
    # 112 CTAs of 16 k-tiles, 2 splits (2 CTAs an SM, 16 + 2), not 3 (3 x 6 + 3)
    assert mi.plan(1, 14336, 4096, 128).splits == 2
    assert mi.plan(1, 4096, 14336, 128).splits == 8  # 32 CTAs: 256 CTAs, 2 an SM, of 7 k-tiles
    # on an H100 PCIe's 114 SMs 4 splits put 3 CTAs on the busiest SM (3 x 8 + 4), 3 splits 2 (2 x 11 + 3)
    assert mi.plan(1, 8192, 8192, 128, sms=114).splits == 3
    for m, n, k in [(1, 28672, 8192), (16, 8192, 28672), (64, 8192, 8192), (4, 4096, 4096)]:
        p = mi.plan(m, n, k, 128)
        costs = {s: mi.split_cost(p.ctas, s, k // 256) for s in range(1, 9) if s * m * 32 <= k and s <= k // 512}
        assert costs[p.splits] == min(costs.values()), (m, n, k, p, costs)
    assert mi.plan(4096, 8192, 8192, 128).splits == 1  # the fp32 slices would outweigh the weights
    assert mi.plan(256, 8192, 8192, 128).splits == 1
    assert [mi.plan(m, 8192, 8192, 128).tile_m for m in (1, 9, 16, 33, 256)] == [8, 16, 16, 64, 64]
    assert mi.plan(4096, 8192, 8192, 128, route="fused").tile_m == 64


def test_large_m_dequantizes_once_then_runs_the_dense_gemm():
    """From DEQUANTIZE_M tokens on, the planner writes W' once and runs the dense GEMM, unless
    the fused kernel's tile or split is asked for; an unknown route is refused."""
    assert [mi.plan(m, 8192, 8192, 128).route for m in (1, 256, 1000, mi.DEQUANTIZE_M - 1)] == ["fused"] * 4
    assert [mi.plan(m, 8192, 8192, 128).route for m in (mi.DEQUANTIZE_M, 4096)] == ["dequantize"] * 2
    assert mi.plan(4096, 8192, 8192, 128, tile_m=64).route == "fused"
    assert mi.plan(4096, 8192, 8192, 128, splits=1).route == "fused"
    assert mi.plan(64, 8192, 8192, 128, route="dequantize").route == "dequantize"
    with pytest.raises(ShapeError, match="route='dense'"):
        mi.plan(64, 8192, 8192, 128, route="dense")
    with pytest.raises(ShapeError, match="splits"):
        mi.plan(1, 8192, 512, 128, splits=3)


# -- on a Hopper GPU -------------------------------------------------------------------------------
GPU_CHECK = """
import json, sys, torch
from cutecourse.kernels.mixed_input import launcher, mixed_mm
from cutecourse.quant import dequantize, quantize_int4
torch.manual_seed(0)
for m, n, k, group, zp, splits, wgs, dtype in json.loads(sys.argv[1]):
    dt = getattr(torch, dtype)  # x's, the scales', W''s and y's
    w = torch.randn(n, k, device="cuda") * 0.02
    packed, scales, zeros = quantize_int4(w, group, zero_point=zp, dtype=dt)
    wq = dequantize(packed, scales, zeros).float()
    x = torch.randn(m, k, device="cuda").to(dt)
    y = mixed_mm(x, packed, scales, zeros, splits=splits, warpgroups=wgs)
    assert y.dtype == dt, y.dtype
    y = y.float()
    ref = x.float() @ wq.T
    # y's rounding: half a unit in the last place (bf16 2^-8, fp16 2^-11 relative; fp16's
    # subnormals 2^-25 absolute)
    eps, tiny = (2**-8, 1e-30) if dt == torch.bfloat16 else (2**-11, 2**-25)
    bound = eps * ref.abs() + 2 * k * 2**-24 * (x.float().abs() @ wq.abs().T) + tiny
    # one-hot rows of x read single columns of W' back: exact, whatever the accumulation order
    cols = torch.randint(0, k, (m,), device="cuda")
    onehot = torch.zeros(m, k, device="cuda", dtype=dt)
    onehot[torch.arange(m), cols] = 1
    y1 = mixed_mm(onehot, packed, scales, zeros, splits=splits, warpgroups=wgs)
    exact = torch.equal(y1.view(torch.int16), wq.to(dt)[:, cols].T.contiguous().view(torch.int16))
    # a launcher run twice gives the same bits (split-K: the counters went back to zero)
    fn = launcher(x, packed, scales, zeros, splits=splits, warpgroups=wgs)
    fn()
    first = fn.y.clone()
    fn()
    again = torch.equal(first.view(torch.int16), fn.y.view(torch.int16)) and torch.equal(
        first.view(torch.int16), mixed_mm(x, packed, scales, zeros, splits=splits, warpgroups=wgs).view(torch.int16))
    if getattr(fn, "counters", None) is not None:
        again = again and int(fn.counters.abs().sum()) == 0
    if fn.plan.route == "dequantize":  # W' as the dequantize kernel wrote it: torch's, bit for bit
        exact = exact and fn.w.dtype == dt and torch.equal(fn.w.view(torch.int16), wq.to(dt).view(torch.int16))
    row = [m, n, k, group, zp, dtype, fn.plan.route, fn.plan.splits, fn.plan.warpgroups,
           float(((y - ref).abs() / bound).max()), exact and again]
    print("FINISHED" + json.dumps(row), flush=True)
"""

#: (M, N, K, group, zero points, splits, warpgroups; None: the planner's): odd M, N and K
#: multiples of 64 that no tile divides; two warpgroups on N = 64 x odd pad the last tile.
BF16_CASES = [
    (1, 192, 384, 64, False, None, None), (3, 320, 640, 128, True, None, 2), (17, 448, 1152, 64, True, 3, None),
    (45, 64, 256, 128, False, 1, None), (130, 576, 896, 128, False, None, 2), (9, 1088, 3200, 64, False, 5, 1),
    (250, 256, 512, 64, True, 2, None), (1000, 704, 1408, 128, True, None, None),
    (2, 512, 2048, 2048, False, 4, None), (7, 1024, 4096, 128, False, None, None),
    # from DEQUANTIZE_M tokens on: W' written once, then the dense GEMM
    (1030, 320, 640, 64, True, None, None), (1100, 1088, 3200, 128, False, None, None),
]
#: fp16 activations (and scales, W', y): the fused kernel with and without zeros, split-K, two
#: warpgroups, one group per row, and the dequantize route
FP16_CASES = [
    (1, 192, 384, 64, False, None, None), (3, 320, 640, 128, True, None, 2), (17, 448, 1152, 64, True, 3, None),
    (130, 576, 896, 128, False, None, 2), (2, 512, 2048, 2048, False, 4, None),
    (1030, 320, 640, 64, True, None, None), (1100, 1088, 3200, 128, False, None, None),
]
#: ... the same with the activations' dtype last
GPU_CASES = [(*c, "bfloat16") for c in BF16_CASES] + [(*c, "float16") for c in FP16_CASES]


def run_cases(cases, first_s=180, each_s=60):
    """Run GPU_CHECK on ``cases`` in a subprocess, one FINISHED line per case; a case that does
    not finish in its budget (the first one compiles) is named as a hang (``gpu/cases.py``): a
    pipeline whose barrier counts disagree waits forever, and must not take the whole GPU session
    with it."""
    from gpu.cases import run_cases as run_timed  # here: a compile child imports this module without tests/

    labels = [f"case {case} (M, N, K, group, zeros, splits, warpgroups, dtype)" for case in cases]
    return run_timed(GPU_CHECK, cases, labels, first_s, each_s)


def test_a_hanging_case_is_named(monkeypatch):
    """The GPU harness on the CPU: a check that finishes one case, then hangs, fails naming the
    second case within its budget."""
    monkeypatch.setitem(globals(), "GPU_CHECK",
                        'import json, time\nprint("FINISHED" + json.dumps([1]), flush=True)\ntime.sleep(30)\n')
    with pytest.raises(pytest.fail.Exception, match=r"case \(2, 64, 256, 64, True, None, 2, 'float16'\) .* a hang"):
        run_cases([(1, 64, 256, 64, False, None, None, "bfloat16"), (2, 64, 256, 64, True, None, 2, "float16")],
                  first_s=20, each_s=1)


@pytest.mark.gpu
def test_matches_torch_s_dequantized_product():
    """|y - x @ W'.T| <= 2^-8 |x @ W'.T| (y's bf16 rounding; fp16: 2^-11, and 2^-25 for its
    subnormals) + 2 K 2^-24 (|x| @ |W'|.T) (the worst case of two fp32 sums of K products in
    different orders, the kernel's and torch's) for every element; one-hot rows of x return
    columns of W' exactly (bit for bit: the conversion on the GPU, bf16 or fp16, is the one the
    CPU tests model); a launcher run twice gives the same bits."""
    rows = run_cases(GPU_CASES)
    assert len(rows) == len(GPU_CASES)
    bad = [r for r in rows if not (r[-2] <= 1.0 and r[-1])]
    assert not bad, "\n".join(map(str, bad))


def test_one_group_per_row_of_any_length_runs_the_fused_kernel():
    """Per-channel weights (``quantize_int4(w, None)``: group = K) with a K that no k-tile divides
    plan and build the fused kernel: it is compiled with the next multiple of the k-tile, so every
    k-tile of the row reads the row's one scale (group 0)."""
    from cutecourse.kernels.hopper_mixed_gemm import TILE_K

    for k in (640, 320, 1088):
        group = mi.kernel_group(k, k)
        assert group % TILE_K == 0 and group >= k
        assert all(t * TILE_K // group == 0 for t in range(-(-k // TILE_K)))
        mi.plan(5, 320, k, k)
        mi.ENTRY.kernel(tile_m=8, group_size=group)
    assert mi.kernel_group(128, 640) == 128 and mi.kernel_group(2048, 2048) == 2048
