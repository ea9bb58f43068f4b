"""The mixed-input kernel's variants by name (``mixed_variants.VARIANTS``, ``DEMO_VARIANTS``),
through the module's own entry: ``variant=`` of ``mixed_input.launcher``, ``mixed_mm`` and
``compile_target``, with the same checks, plan and split-K buffers as the course kernel. On the
CPU: each is a subclass that differs in hooks (or ``IN_FLIGHT``, ``CONVERT_MULTIPLIES``) only,
the entry builds it by its name and refuses another, and each compiles to what it says it does
(its ``PTX_STEPS``, read from the class: a new variant needs no edit of this file); on a Hopper
GPU (``-m gpu``): the correct variants give the course kernel's bits, split or not
("deferred_scales" rounds differently, by design: ``tests/test_mixed_deferred.py`` checks it)."""

import textwrap

import pytest
import torch

from cutecourse.errors import CourseError, DeviceError, ShapeError
from cutecourse.kernels import mixed_input as mi
from cutecourse.kernels import mixed_variants as mv
from cutecourse.kernels.hopper_mixed_gemm import HopperMixedGemm
from cutecourse.quant import quantize_int4

from test_mixed_input import TARGET, register_a_wgmmas

#: What a variant may override (docs/DEVELOPING.md, "The mixed-input kernel's hooks").
HOOKS = {"weights", "load", "convert", "mma", "consume", "store_tile"}
#: ... and the class constants it may set (``PTX_STEPS``: what its PTX lacks, read by this test).
CONSTANTS = {"IN_FLIGHT", "CONVERT_MULTIPLIES", "PTX_STEPS"}


def _operands(m=3, n=128, k=256, group=128):
    packed, scales, _ = quantize_int4(torch.randn(n, k, generator=torch.Generator().manual_seed(3)), group)
    return torch.randn(m, k).bfloat16(), packed, scales


def test_every_variant_is_a_subclass_that_overrides_hooks_only():
    classes = mv.all_variants()
    assert classes == {**mv.VARIANTS, **mv.DEMO_VARIANTS} and mv.VARIANTS == {"course": HopperMixedGemm}
    assert not set(mv.VARIANTS) & set(mv.DEMO_VARIANTS)
    assert len(set(classes.values())) == len(classes)
    for name, cls in classes.items():
        assert issubclass(cls, HopperMixedGemm), name
        own = {k for klass in cls.__mro__[:cls.__mro__.index(HopperMixedGemm)] for k in vars(klass)
               if not k.startswith("__")}
        extra = own - HOOKS - CONSTANTS
        assert not extra, (f"variant {name!r} defines {sorted(extra)}: a mixed-input variant overrides hooks "
                           f"({', '.join(sorted(HOOKS))}) or sets {' / '.join(sorted(CONSTANTS))}; the planner chooses "
                           "tile_m, warpgroups and the split, so a class default such as TILE_M is not a "
                           "variant's to set, and a helper belongs at module level")
        assert type(mi.ENTRY.kernel(variant=name)) is cls
        assert type(mi.compile_target(variant=name, tile_m=8)[0]) is cls
    assert HOOKS | (CONSTANTS - {"PTX_STEPS"}) <= set(vars(HopperMixedGemm)) and mv.OverlappingMixedGemm.IN_FLIGHT == 1
    with pytest.raises(CourseError, match="no_mma"):
        mi.ENTRY.kernel(variant="no-mma")


def test_the_compile_key_separates_the_variants():
    keys = {mi.ENTRY.kernel(variant=name).key() for name in mv.all_variants()}
    assert len(keys) == len(mv.all_variants())
    assert mi.ENTRY.kernel(tile_m=8).key() == HopperMixedGemm(8).key() == mi.ENTRY.kernel(variant="course",
                                                                                         tile_m=8).key()


def test_the_launcher_refuses_a_wrong_variant_before_anything_else():
    with pytest.raises(CourseError, match="(?s)variant='fast' names no kernel class.*'overlap'"):
        mi.launcher(*_operands(), variant="fast")
    with pytest.raises(ShapeError, match="names a class of the fused kernel.*dense GEMM"):
        mi.mixed_mm(*_operands(), variant="overlap", route="dequantize")


@pytest.mark.no_gpu
def test_a_variant_is_checked_like_the_course_kernel():
    """Past the name's check, the launcher's own: CPU operands are a device error."""
    with pytest.raises(DeviceError, match="Hopper GPU"):
        mi.launcher(*_operands(), variant="overlap")


def test_the_tiled_weights_hold_each_box_contiguously():
    packed = torch.arange(256 * 64, dtype=torch.int32).view(256, 64)  # N = 256, K = 512
    tiled = mv.tiled_weights(packed, 128)
    assert torch.equal(tiled.flatten()[:4096].view(128, 32), packed[:128, :32])
    assert torch.equal(tiled.flatten()[4096:8192].view(128, 32), packed[:128, 32:])


#: The course kernel's (register-A wgmmas, bf16x2 multiplies of the conversion) at tile_m = 16, one
#: warpgroup: a variant's unless it sets ``PTX_STEPS`` (an experiment that leaves a step out).
COURSE_STEPS = (16, 64)


@pytest.mark.parametrize("variant", list(mv.all_variants()))
def test_each_variant_compiles_to_the_steps_it_keeps(variant):
    """Every class of the tables compiles for sm_90a; an experiment's PTX lacks the step it leaves
    out: the counts its class's ``PTX_STEPS`` gives (the course kernel's when it sets none), so a
    new variant needs no edit here."""
    from cutecourse.inspect import compile_report

    r = compile_report(TARGET, tile_m=16, variant=variant)
    expected = getattr(mv.variant_class(variant), "PTX_STEPS", COURSE_STEPS)
    assert (len(register_a_wgmmas(r.ptx)), r.ptx.count("mul.rn.bf16x2")) == expected
    assert ("C7513" in r.log) == (mv.variant_class(variant).IN_FLIGHT > 0)  # ptxas serializes those


_GPU_CHECK = textwrap.dedent("""
    import json, sys, torch
    from cutecourse.kernels import mixed_input as mi
    from cutecourse.kernels.mixed_variants import tiled_weights
    from cutecourse.quant import quantize_int4

    torch.manual_seed(0)
    out = []
    for variant, m, n, k, splits in json.loads(sys.argv[1]):
        packed, scales, _ = quantize_int4(torch.randn(n, k, device="cuda") * 0.02, 128)
        x = torch.randn(m, k, device="cuda").bfloat16()
        course = mi.mixed_mm(x, packed, scales, splits=splits, warpgroups=2)
        mine = tiled_weights(packed, 128) if variant == "tiled" else packed
        fn = mi.launcher(x, mine, scales, splits=splits, warpgroups=2, variant=variant)
        fn()
        fn()  # twice: split-K's counters went back to zero
        same = torch.equal(fn.y.view(torch.int16), course.view(torch.int16))
        zeroed = getattr(fn, "counters", None) is None or int(fn.counters.abs().sum()) == 0
        out.append([variant, fn.plan.splits, type(fn.kernel).__name__, same and zeroed])
    print("RESULT" + json.dumps(out))
""")


@pytest.mark.gpu
def test_the_correct_variants_give_the_course_kernels_bits(run_gpu_script):
    cases = [["overlap", 1, 1024, 4096, 4], ["overlap", 16, 512, 2048, 1], ["tiled", 7, 384, 1280, None],
             ["tiled", 1, 1024, 4096, 4]]
    results = run_gpu_script(_GPU_CHECK, cases)
    assert [r[2] for r in results] == [mv.variant_class(c[0]).__name__ for c in cases], results
    assert all(r[-1] for r in results), results
    assert results[0][1] == 4  # split-K: the entry allocated the variant's buffers
