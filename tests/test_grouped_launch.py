"""The one host layer for every GEMM: grouped launchers through ``grouped_launch.GroupedEntry``,
epilogue ops that describe their operands (checks, fakes, compile key), no per-row operand in a
grouped GEMM, and on an H100 an epilogue op through the grouped launchers."""

import re
import textwrap

import pytest
import torch

from cutecourse.errors import CourseError, DeviceError, DTypeError, ShapeError
from cutecourse.kernels import epilogue_op, gemm_launch, grouped, registry
from cutecourse.kernels.epilogue_op import AddBias, EpilogueOp, Operand, described


class Bias(EpilogueOp):
    """C = acc + bias[n], the bias of any dtype: one apply, the operand's dtype a parameter."""

    def __init__(self, dtype: str = "float32"):
        self.operands = (Operand("bias", dtype, "col"),)

    def apply(self, x, m, n, bias):
        import cutlass

        return x + bias[n].to(cutlass.Float32)


# -- an op describes its operands ---------------------------------------------------------------------
def test_an_operand_is_described_and_checked_when_declared():
    assert described(AddBias()) == (Operand("bias", "float32", "col", 4),)
    assert described(None) == ()

    class Named(EpilogueOp):
        operands = ("bias",)  # a bare name: fp32, one per column (what notebook 06 declares)

    assert described(Named()) == (Operand("bias"),) and Operand("s", "bfloat16").align == 2
    assert [Operand(k, kind=k).length(300, 256) for k in epilogue_op.KINDS] == [256, 300, 1]
    with pytest.raises(CourseError, match="dtype"):
        Operand("bias", "float64")
    with pytest.raises(CourseError, match="kind"):
        Operand("bias", kind="column")


def test_ops_whose_operands_differ_in_dtype_never_share_a_compiled_kernel(monkeypatch):
    import cutlass.cute as cute

    from cutecourse.kernels.hopper_gemm_persistent import PersistentHopperGemm

    fp32, bf16 = PersistentHopperGemm(epilogue_op=Bias()), PersistentHopperGemm(epilogue_op=Bias("bfloat16"))
    assert fp32.key() != bf16.key()
    assert fp32.key() == PersistentHopperGemm(epilogue_op=Bias("float32")).key()
    compiled = []
    monkeypatch.setattr(cute, "compile", lambda kernel, *args: compiled.append(kernel) or kernel)
    monkeypatch.setattr(gemm_launch, "_COMPILED", {})
    assert gemm_launch.compile_once(fp32, (), key=("f16",)) is fp32
    assert gemm_launch.compile_once(bf16, (), key=("f16",)) is bf16  # not fp32's kernel
    assert gemm_launch.compile_once(PersistentHopperGemm(epilogue_op=Bias()), (), key=("f16",)) is fp32
    assert compiled == [fp32, bf16]


def test_epilogue_operands_are_checked_against_their_description():
    """dtype, length and count, on any machine before the GPU; right ones reach the GPU check."""
    a, c = torch.zeros(256, 64).half(), torch.zeros(256, 128).half()
    persistent = registry.entry("persistent")
    with pytest.raises(DTypeError, match="bias.*bfloat16.*float32"):
        persistent.launcher(a, a[:128], c, epilogue_op=AddBias(), epilogue_args=(torch.zeros(128).bfloat16(),))
    with pytest.raises(ShapeError, match=r"per column of C \(N = 128\)"):
        persistent.launcher(a, a[:128], c, epilogue_op=AddBias(), epilogue_args=(torch.zeros(256),))
    with pytest.raises(ShapeError, match="reads 1 tensor"):
        persistent.launcher(a, a[:128], c, epilogue_op=Bias("bfloat16"))
    with pytest.raises(DeviceError):  # the checks passed: needs a Hopper GPU (or GPU tensors)
        persistent.launcher(a, a[:128], c, epilogue_op=Bias("bfloat16"), epilogue_args=(torch.zeros(128).bfloat16(),))


# -- the grouped launchers on the one host layer ----------------------------------------------------
def _packed(g=4, k=64, n=128):
    offs = torch.tensor([100, 100, 250, 300][:g], dtype=torch.int32)
    return torch.zeros(300, k).bfloat16(), torch.zeros(g, n, k).bfloat16().transpose(-2, -1), offs


def test_grouped_launchers_take_an_epilogue_op_and_check_its_operands():
    a, b, offs = _packed()
    with pytest.raises(ShapeError, match=r"per column of C \(N = 128\)"):
        grouped.grouped_mm(a, b, offs, epilogue_op=AddBias(), epilogue_args=(torch.zeros(300),))
    with pytest.raises(ShapeError, match="reads 1 tensor"):
        grouped.grouped_gemm([a[:100]], [b[0].T.contiguous()], epilogue_op="AddBias")
    with pytest.raises(DTypeError, match="bias"):
        grouped.packed_launcher(a, b, offs, torch.zeros(300, 128).bfloat16(), epilogue_op=AddBias(),
                                epilogue_args=(torch.zeros(128).half(),))
    with pytest.raises(DeviceError):  # the checks passed
        grouped.grouped_mm(a, b, offs, epilogue_op=AddBias(), epilogue_args=(torch.zeros(128),))


def test_grouped_keywords_go_through_the_entry():
    a, b, offs = _packed()
    with pytest.raises(CourseError, match="keyword"):  # not a bare TypeError
        grouped.grouped_mm(a, b, offs, tile_shape=(128, 256))
    kernel = grouped.HOPPER.kernel(tile=[128, 128], cluster=[2, 1], sms=132)
    assert (kernel.tile_mn, kernel.cluster_mn) == ((128, 128), (2, 1))
    # the FP8 launchers' cluster follows the groups' mean height unless one is named
    groups = grouped.ListGroups([torch.zeros(100, 128)] * 8, [torch.zeros(256, 128)] * 8)
    assert grouped.FP8.choose(groups) == {"cluster": (1, 1)}
    assert grouped.FP8.kernel(**grouped.FP8.choose(groups), sms=132).cluster_mn == (1, 1)


def test_every_launcher_builds_its_kernel_for_the_gpu(monkeypatch):
    """With a pretended 100-SM GPU, every launcher, dense and grouped, reaches the launch with its
    kernel built once for 100 SMs (where it takes ``sms``) and its templates in order."""
    from types import SimpleNamespace

    from cutecourse import modes

    launched = []
    monkeypatch.setattr(modes, "require_gpu", lambda arch=None: SimpleNamespace(sm_count=100))
    monkeypatch.setattr(gemm_launch, "_launch_compiled", lambda kernel, *templates, **kw: launched.append(
        (kernel, templates)) or kw.get("ctas"))
    a, b, c = torch.zeros(256, 64).half(), torch.zeros(128, 64).half(), torch.zeros(256, 128).half()
    for name in registry.DENSE:
        registry.entry(name).launcher(a, b, c)
    assert [getattr(k, "sms", 100) for k, _ in launched] == [100] * len(registry.DENSE)
    assert all(t == (a, b, c) for _, t in launched)
    launched.clear()
    assert grouped.launcher([a, a[:0]], [b, b], [c, c[:0]]) == 2  # two 128-row tiles: 2 CTAs
    pa, pb, offs = _packed()
    grouped.packed_launcher(pa, pb, offs, torch.zeros(300, 128).bfloat16())
    (qA, SA, qB, SB) = grouped.quantize_fp8([torch.randn(256, 128)], [torch.randn(128, 128)])
    grouped.launcher_fp8(qA, qB, SA, SB, [torch.zeros(256, 128).bfloat16()])
    quantized = grouped.quantize_blockscaled([torch.randn(128, 64)], [torch.randn(128, 64)], "nvfp4")
    grouped.launcher_blockscaled(quantized, "nvfp4")
    kernels = [type(k).__name__ for k, _ in launched]
    assert kernels == ["GroupedHopperGemm"] * 2 + ["OnePartBlockScaledGroupedHopperGemm",
                                                   "BlackwellGroupedBlockScaledGemm"]
    assert [k.sms for k, _ in launched] == [100] * 4 and launched[2][0].cluster_mn == (1, 1)  # 256 rows
    assert launched[3][1] == tuple(getattr(quantized[0], n) for n in ("a", "b", "c", "sfa", "sfb"))


def test_every_form_provides_what_the_entry_asks():
    """The forms state one contract (GroupForm): the Blackwell form too, so its entry's gemm runs
    the same path as the others' up to the missing GPU."""
    forms = (grouped.ListGroups, grouped.PackedGroups, grouped.QuantizedGroups)
    asked = ("params", "check", "allocate", "rows", "extent", "out_dtype", "metadata")
    for form in forms:
        assert issubclass(form, grouped.GroupForm)
        assert all(getattr(form, name) is not getattr(grouped.GroupForm, name) for name in asked[1:]), form
    quantized = grouped.quantize_blockscaled([torch.randn(128, 64)] * 2, [torch.randn(64, 64)] * 2, "mxfp8")
    form = grouped.QuantizedGroups(quantized, "mxfp8")
    form.check()
    assert form.params() == {"fmt": "mxfp8"} and form.rows() == (256, 2) and form.out_dtype() == torch.float16
    assert form.allocate() == [op.c for op in quantized]
    with pytest.raises(DTypeError, match="C are float16"):
        form.check(out_dtype=torch.bfloat16)
    with pytest.raises(DeviceError, match="Blackwell"):  # the checks passed
        grouped.BLACKWELL.gemm(form)


def test_the_grouped_entry_reads_the_kernels_inputs_and_plans_before_the_gpu():
    a, b = [torch.zeros(128, 64).half()], [torch.zeros(128, 64).half()]
    with pytest.raises(DTypeError, match="float16 or bfloat16"):  # GroupedHopperGemm.IN_DTYPES
        grouped.grouped_gemm([a[0].float()], b)
    with pytest.raises(DTypeError, match="float8_e4m3fn"):  # the FP8 kernels' IN_DTYPES
        grouped.FP8.gemm(grouped.ScaledListGroups(a, b, [torch.ones(128, 1)], [torch.ones(1, 1)]))
    with pytest.raises(CourseError, match="ScaledListGroups"):  # a form without scales does not fit FP8
        grouped.FP8.gemm(grouped.ListGroups(a, b))
    with pytest.raises(CourseError, match="ListGroups / PackedGroups"):  # nor one with scales the bf16 kernel
        grouped.HOPPER.gemm(grouped.ScaledPackedGroups(a[0], b[0][None], a[0], b[0], torch.tensor([128])))
    with pytest.raises(ShapeError, match="shared memory"):  # kernel.plan(), as the dense launcher
        grouped.grouped_gemm(a, b, stages=30)
    quantized = grouped.quantize_blockscaled([torch.randn(128, 64)], [torch.randn(64, 64)], "nvfp4")
    assert grouped.BLACKWELL.kernel(fmt="mxfp8").plan("float8_e4m3fn", "float16").tile_mnk == (128, 128, 128)
    with pytest.raises(DTypeError, match="nvfp4 data is float4_e2m1fn_x2, not float8_e4m3fn"):
        grouped.BLACKWELL.kernel(fmt="nvfp4").plan("float8_e4m3fn", "float16")
    assert grouped.BLACKWELL.kernel(**grouped.QuantizedGroups(quantized).params()).IN_DTYPES == ("float4_e2m1fn_x2",)


def test_grouped_compile_targets_share_one_signature():
    """(in_dtype, out_dtype, then keywords), each through its entry's compile_target; Blackwell's
    kernel takes the tile first, its format and band height as keywords."""
    import inspect

    from cutecourse.kernels import blackwell_grouped_gemm as bw, grouped_targets

    for target in (grouped_targets.hopper, grouped_targets.hopper_fp8, grouped_targets.blackwell):
        params = list(inspect.signature(target).parameters.values())
        assert [p.name for p in params[:2]] == ["in_dtype", "out_dtype"], target
        assert all(p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) for p in params[2:]), target
    kernel = bw.BlackwellGroupedBlockScaledGemm((128, 256), fmt="mxfp8", group_m=8)
    assert (kernel.tile_mn, kernel.format.name, kernel.group_m) == ((128, 256), "mxfp8", 8)
    assert kernel.key() != bw.BlackwellGroupedBlockScaledGemm((128, 256), fmt="mxfp8").key()
    assert grouped.BLACKWELL.kernel(fmt="mxfp8", group_m=8).group_m == 8


def test_every_entry_has_the_same_verbs():
    """One verb per level, the same names at every entry: compile_target, validate (any machine),
    gemm, launcher (checked) and launch (a kernel object, no checks); each operand kind is a
    subclass of Entry, which gives every verb its operands (the dense validate reads A and B)."""
    from cutecourse.kernels import mixed_input, operands, registry

    entries = [registry.entry("persistent"), grouped.HOPPER, grouped.FP8, grouped.BLACKWELL, mixed_input.ENTRY]
    assert isinstance(mixed_input.ENTRY, operands.DescribedEntry)
    for entry in entries:
        assert isinstance(entry, gemm_launch.Entry)
        for verb in ("compile_target", "validate", "gemm", "launcher", "launch", "kernel", "fake_arguments"):
            assert callable(getattr(entry, verb)), (entry, verb)
        assert type(entry).validate is not gemm_launch.Entry.validate or type(entry) is gemm_launch.Entry
    assert not hasattr(gemm_launch, "launcher")  # the compile-and-wrap step is the host layer's own


def test_all_empty_groups_launch_nothing():
    kernel = grouped.HOPPER.kernel(sms=132)
    As, Bs = [torch.zeros(0, 64).half()] * 2, [torch.zeros(128, 64).half()] * 2
    fn = grouped.HOPPER.launch(kernel, grouped.ListGroups(As, Bs, [torch.zeros(0, 128).half()] * 2))
    assert isinstance(fn, gemm_launch.Launch) and fn.ctas == 0 and fn.trace is None
    assert fn.metadata.work_bound == 0 and fn() is None


def test_a_grouped_compile_target_applies_a_per_column_bias():
    from cutecourse.inspect import compile_report

    r = compile_report("cutecourse.kernels.grouped_targets:hopper", arch="sm_90a", tile=[128, 128],
                       epilogue_op="AddBias")
    # every accumulator of a 128x128 tile (64 per consumer thread) gets its column's bias, read
    # from global memory (32-bit loads); without the op the kernel has no add.f32 at all
    assert r.ptx.count("add.f32") >= 64 and re.search(r"^\s*ld\.global\.b32", r.ptx, re.M)
    assert r.spill_bytes == 0


class Scale(EpilogueOp):
    """C = acc * scale[m]: a bf16 value per row of C."""

    operands = (Operand("scale", "bfloat16", "row"),)

    def apply(self, x, m, n, scale):
        import cutlass

        return x * scale[m].to(cutlass.Float32)


def test_a_grouped_gemm_refuses_a_per_row_operand_in_every_form():
    """The grouped kernels give ``apply`` the row inside the group, so a per-row tensor would be
    read at the wrong rows of every group after the first (a per-token scale of a packed batch):
    every grouped launcher and compile target refuses it, whatever its length, and says what to do."""
    k, n = 64, 128
    rows = [100, 200]
    a, w = torch.zeros(sum(rows), k).bfloat16(), torch.zeros(2, n, k).bfloat16()
    offs = torch.tensor([100, 300], dtype=torch.int32)
    As = [a[:100], a[100:]]
    for length in (sum(rows), max(rows)):  # what either form's extent would have let through
        scale = torch.ones(length).bfloat16()
        with pytest.raises(CourseError, match=r"per row of C.*grouped GEMM") as e:
            grouped.grouped_mm(a, w.transpose(-2, -1), offs, epilogue_op=Scale(), epilogue_args=(scale,))
        assert "scale the rows of A" in str(e.value)
        with pytest.raises(CourseError, match=r"per row of C.*grouped GEMM"):
            grouped.grouped_gemm(As, list(w), epilogue_op=Scale(), epilogue_args=(scale,))
    for entry in (grouped.HOPPER, grouped.FP8, grouped.BLACKWELL):
        with pytest.raises(CourseError, match=r"per row of C.*grouped GEMM"):
            entry.compile_target(epilogue_op=Scale())
    # per column and scalar operands stay: the same for every group
    kernel, _ = grouped.HOPPER.compile_target(epilogue_op=AddBias())
    assert isinstance(kernel.epilogue_op, AddBias)


# -- on an H100 -------------------------------------------------------------------------------------
_GPU_CHECK = textwrap.dedent("""
    import json, sys, torch
    from cutecourse.kernels import grouped
    from cutecourse.kernels.epilogue_op import AddBias
    from cutecourse.models import blockwise_fp8 as fp8b
    torch.manual_seed(0)
    out = []
    g, n, k = 8, 512, 256
    rows = torch.randint(0, 300, (g,))
    rows[2] = 0
    offs = torch.cumsum(rows, 0).to(torch.int32).cuda()
    a = torch.randn(int(rows.sum()), k, device="cuda").bfloat16()
    w = torch.randn(g, n, k, device="cuda").bfloat16()
    bias = torch.randn(n, device="cuda")
    ref = torch._grouped_mm(a, w.transpose(-2, -1), offs=offs).float() + bias
    c = grouped.grouped_mm(a, w.transpose(-2, -1), offs, epilogue_op=AddBias(), epilogue_args=(bias,))
    out.append(["packed + bias", ((c.float() - ref).abs().max() / ref.abs().max()).item()])
    As = [a[s:e] for s, e in zip([0] + offs.tolist()[:-1], offs.tolist())]
    Cs = grouped.grouped_gemm(As, list(w), epilogue_op=AddBias(), epilogue_args=(bias,))
    err = max(((c_.float() - (x.float() @ y.float().T + bias)).abs().max() / 16).item() if len(x) else 0.0
              for c_, x, y in zip(Cs, As, w))
    out.append(["list + bias", err])
    qA, SA, qW, SW = grouped.quantize_fp8([x.float() for x in As], [y.float() for y in w])
    Cs = grouped.grouped_gemm_fp8(qA, qW, SA, SW, epilogue_op=AddBias(), epilogue_args=(bias,))
    err = max(((c_.float() - (fp8b.scaled_mm_reference(*q) + bias)).abs().max() / 16).item() if len(c_) else 0.0
              for c_, q in zip(Cs, zip(qA, SA, qW, SW)))
    out.append(["fp8 list + bias", err])
    print("RESULT" + json.dumps(out))
""")


@pytest.mark.gpu
def test_an_epilogue_op_runs_through_the_grouped_launchers_on_the_gpu(run_gpu_script):
    results = run_gpu_script(_GPU_CHECK, [])
    assert len(results) == 3
    bad = [r for r in results if not r[1] < 5e-2]
    assert not bad, bad


def test_a_grouped_entry_validates_its_groups_on_any_machine():
    """validate, the verb of every entry, takes the entry's operands: here a form of groups."""
    from cutecourse.errors import ShapeError

    As, Bs = [torch.zeros(128, 64).half(), torch.zeros(64, 64).half()], [torch.zeros(256, 64).half()] * 2
    plan = grouped.HOPPER.validate(grouped.ListGroups(As, Bs))
    assert plan.stages == grouped.HOPPER.kernel().plan("float16", "float16").stages
    with pytest.raises(ShapeError):
        grouped.HOPPER.validate(grouped.ListGroups(As, [torch.zeros(256, 32).half()] * 2))
    with pytest.raises(CourseError, match="ScaledListGroups"):
        grouped.FP8.validate(grouped.ListGroups(As, Bs))


def test_the_scaled_forms_are_their_bases_with_two_hooks_overridden():
    """The list and packed forms know nothing of scales: their FP8 subclasses override the hooks
    (``check_scales`` and ``scale_columns``, the same names in both forms), with no attribute to branch on."""
    from cutecourse.kernels import group_forms as gf

    for base, scaled, hooks in ((gf.ListGroups, gf.ScaledListGroups, {"check_scales", "scale_columns"}),
                                (gf.PackedGroups, gf.ScaledPackedGroups, {"check_scales", "scale_columns"})):
        assert not hasattr(base, "scales") and hooks <= set(vars(base)) and hooks <= set(vars(scaled))
        assert {k for k in vars(scaled) if callable(vars(scaled)[k])} == hooks | {"__init__"}
    As, Bs = [torch.zeros(128, 64).half()], [torch.zeros(128, 64).half()]
    assert gf.ListGroups(As, Bs).scale_columns() == []
