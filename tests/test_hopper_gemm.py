"""The Hopper GEMM: smem plan, input errors, what the compiler made of each variant (on an H100,
correctness against torch: tests/test_dense_gemms.py).

The compile tests run on any machine (sm_90a compile through cutecourse.inspect). They fail if a
variant loses its TMA loads or wgmmas, spills, or if the compiler stops pipelining the
``compiler`` variant: its PTX must keep a TMA prologue, a steady loop and a drain loop, and the
compile log must not carry the "pipelining skipped" warning. ``compiler_guarded`` is the
negative control: it must trigger that warning, proving the log capture works.
"""

import pytest
import torch

from cutecourse.errors import AlignmentError, CourseError, DeviceError, DTypeError, LayoutError, ShapeError
from cutecourse.inspect import compile_report
from cutecourse.kernels import hopper_gemm as hg
from cutecourse.models import gemm_plan as gp
from cutecourse.ptx_loops import loop_structure

TARGET = "cutecourse.kernels.hopper_gemm:compile_target"
SKIPPED = r"software pipelining.*skipped"


# -- shared-memory plan (the talk notes' formula) ------------------------------------------------------------
@pytest.mark.parametrize("tile,stages", [((128, 256), 4), ((128, 128), 7)])
def test_stage_count_is_the_most_that_fits(tile, stages):
    plan = gp.plan_stages(tile, "float16")
    assert plan.stages == stages
    per_stage = (tile[0] * 64 + tile[1] * 64) * 2
    assert plan.bytes_per_stage == per_stage
    budget = gp.SMEM_CAPACITY - gp.BARRIER_BYTES
    assert per_stage * plan.stages <= budget < per_stage * (plan.stages + 1)
    assert plan.smem_bytes <= gp.SMEM_CAPACITY
    assert plan.epi_bytes <= plan.a_ring_bytes  # the epilogue fits in the A ring it reuses


def test_too_many_stages_is_a_shape_error():
    with pytest.raises(ShapeError, match="stages"):
        gp.plan_stages((128, 256), "float16", stages=5)
    with pytest.raises(ShapeError, match="tile"):
        gp.plan_stages((256, 256), "float16")


# -- the variants: a subclass each, overriding the mainloop hook -------------------------------
#: The steps of the one-CTA mainloops a variant may override (docs/DEVELOPING.md, "The one-CTA
#: family's hooks"): the prefetch loop's three parts, the compiler loop's four, and the loop itself.
MAINLOOP_STEPS = {"mainloop", "fill_ring", "consume", "drain", "states", "produce", "retire", "retire_last"}


def test_every_variant_is_a_subclass_that_overrides_the_mainloop():
    classes = hg.all_variants()
    assert classes == {**hg.VARIANTS, **hg.DEMO_VARIANTS} and set(hg.VARIANTS) >= {"naive", "prefetch", "compiler"}
    assert not set(hg.VARIANTS) & set(hg.DEMO_VARIANTS)
    assert len(set(classes.values())) == len(classes) and all(issubclass(c, hg.HopperGemm) for c in classes.values())
    for name, cls in classes.items():  # each differs from its parent in mainloop steps, nothing else
        own = {k for k in vars(cls) if callable(vars(cls)[k]) and not k.startswith("__")}
        assert cls is hg.HopperGemm or own and own <= MAINLOOP_STEPS, (name, own - MAINLOOP_STEPS)
        assert type(hg.ENTRY.kernel(variant=name)) is cls
    assert MAINLOOP_STEPS - {"states", "produce", "retire", "retire_last"} <= set(vars(hg.HopperGemm))
    assert {"states", "produce", "retire", "retire_last"} <= set(vars(hg.CompilerHopperGemm))
    assert not any(k.startswith("mainloop_") and k != "mainloop_done" for k in vars(hg.HopperGemm))
    with pytest.raises(CourseError, match="compiler_overlap"):
        hg.ENTRY.kernel(variant="pipelined")


def test_the_compile_key_separates_the_variants():
    keys = {cls().key() for cls in hg.all_variants().values()}
    assert len(keys) == len(hg.all_variants())
    assert hg.ENTRY.kernel(variant="compiler", tile=[128, 128]).key() == hg.CompilerHopperGemm((128, 128)).key()


# -- defaults are class attributes, in every kernel class (kernels/configured.py) ---------------
def _kernel_classes():
    from cutecourse.kernels import (blackwell_grouped_gemm as bw, hopper_gemm_cluster as hc,
                                    hopper_gemm_persistent as hp, hopper_gemm_streamk as hs,
                                    hopper_grouped_gemm_fp8_onepart as f1, hopper_mixed_gemm as hm)
    return (hg.HopperGemm, hc.ClusterHopperGemm, hp.PersistentHopperGemm, hs.StreamKHopperGemm,
            bw.BlackwellGroupedBlockScaledGemm, hm.HopperMixedGemm, f1.OnePartBlockScaledGroupedHopperGemm)


@pytest.mark.parametrize("cls", _kernel_classes(), ids=lambda c: c.__name__)
def test_every_keyword_with_a_class_default_reads_it(cls):
    """A keyword ``x`` whose class has ``X`` defaults to None, so that ``X`` is what it takes."""
    import inspect

    read = 0
    for name, p in inspect.signature(cls).parameters.items():
        if hasattr(cls, name.upper()):
            assert p.default is None, f"{cls.__name__}: {name}= defaults to {p.default!r}, so {name.upper()} is ignored"
            read += 1
    assert read >= 2


@pytest.mark.parametrize("attr, value, read", [
    ("TILE_MN", (128, 128), lambda k: k.tile_mn),
    ("GROUP_M", 4, lambda k: k.group_m),
    ("EPI_TILE", (64, 32), lambda k: k.epi_tile),
])
def test_a_variant_changes_a_default_by_its_class_attribute(attr, value, read):
    from cutecourse.kernels import hopper_gemm_cluster as hc

    for base in (hg.HopperGemm, hg.NaiveHopperGemm, hc.ClusterHopperGemm):
        variant = type("Variant", (base,), {attr: value})
        assert read(variant()) == value and read(base()) != value
        assert variant().key() == variant(**{attr.lower(): value}).key() != base().key()


def test_the_other_kernels_take_their_class_defaults_too():
    from cutecourse.kernels import (blackwell_grouped_gemm as bw, hopper_gemm_cluster as hc,
                                    hopper_gemm_persistent as hp, hopper_gemm_streamk as hs,
                                    hopper_grouped_gemm_fp8 as f2, hopper_grouped_gemm_fp8_onepart as f1,
                                    hopper_mixed_gemm as hm)

    assert type("C", (hc.ClusterHopperGemm,), {"CLUSTER_MN": (1, 2)})().cluster_mn == (1, 2)
    assert hc.ClusterHopperGemm().cluster_mn == (2, 1)
    k = type("P", (hp.PersistentHopperGemm,), {"SMS": 7, "PDL": True})()
    base = hp.PersistentHopperGemm()
    assert (k.sms, k.pdl) == (7, True) and (base.sms, base.pdl) == (132, False)
    assert type("S", (hs.StreamKHopperGemm,), {"MIN_SAVED": 3})().min_saved == 3
    assert type("B", (bw.BlackwellGroupedBlockScaledGemm,), {"FMT": "mxfp8"})().format.name == "mxfp8"
    assert type("M", (hm.HopperMixedGemm,), {"TILE_M": 8})().tile_m == 8 and hm.HopperMixedGemm().tile_m == 16
    # the FP8 kernels: the launchers' default tile of each is its class's
    assert f1.OnePartBlockScaledGroupedHopperGemm().tile_mn == (128, 256)
    assert f2.BlockScaledGroupedHopperGemm().tile_mn == (128, 128)


def test_the_constructor_sees_the_class_default_the_key_records():
    """A keyword left None reaches ``__init__`` as the class attribute, not only the compile key:
    a variant that sets STAGES, PREFETCH_STAGES or EPILOGUE_OP builds the kernel it says."""
    from cutecourse.kernels import hopper_gemm_cluster as hc
    from cutecourse.kernels.epilogue_op import Relu

    op = Relu()
    v = type("V", (hg.CompilerHopperGemm,), {"STAGES": 3, "PREFETCH_STAGES": 1, "EPILOGUE_OP": op})()
    assert (v.requested_stages, v.requested_prefetch, v.epilogue_op) == (3, 1, op)
    assert v.key()[1] == hg.CompilerHopperGemm(stages=3, prefetch_stages=1, epilogue_op=op).key()[1]
    c = type("C", (hc.ClusterHopperGemm,), {"L2_HINTS": next(iter(hc.L2_HINT_PAIRS)), "STAGES": 3})()
    assert (c.l2_hints, c.requested_stages) == (hc.L2_HINT_PAIRS[next(iter(hc.L2_HINT_PAIRS))], 3)  # a name: its pair


def test_a_class_default_that_would_be_ignored_fails_where_the_class_is_defined():
    from cutecourse.kernels.configured import Configured
    from cutecourse.kernels.hopper_gemm_streamk import StreamKHopperGemm

    class Fine(StreamKHopperGemm):
        MIN_SAVED = 2  # min_saved= defaults to None: read

    assert Fine().min_saved == 2
    with pytest.raises(TypeError, match=r"Bad\.STAGES would be ignored.*stages= defaults to 3"):
        class Bad(Configured):
            STAGES = 4

            def __init__(self, tile_mn=None, *, stages: int = 3):
                pass
    with pytest.raises(TypeError, match="TILE_MN would be ignored"):
        class Base(Configured):
            def __init__(self, tile_mn=(128, 256)):
                pass

        class Child(Base):  # the attribute on a subclass, the keyword on its parent
            TILE_MN = (128, 128)


def test_the_compile_key_holds_the_value_used():
    assert hg.HopperGemm().key() == hg.HopperGemm((128, 256), group_m=hg.GROUP_M).key()
    assert hg.HopperGemm().key() != hg.HopperGemm((128, 128)).key() != hg.HopperGemm(group_m=4).key()
    assert hg.HopperGemm().arguments["tile_mn"] == hg.HopperGemm.TILE_MN


# -- input errors (CPU tensors: validation runs before any GPU work) --------------------------
def _ab(m=256, n=256, k=128, dtype=torch.float16):
    return torch.randn(m, k).to(dtype), torch.randn(n, k).to(dtype)


def test_valid_inputs_pass_validation():
    a, b = _ab(k=72)  # K not a multiple of the tile's 64, rows still 16-byte aligned
    assert hg.validate(a, b, torch.float32).stages == 4


def test_wrong_dtype():
    a, b = _ab(dtype=torch.float32)
    with pytest.raises(DTypeError, match="float16 or bfloat16"):
        hg.validate(a, b)
    a, b = _ab()
    with pytest.raises(DTypeError, match="same dtype"):
        hg.validate(a, b.bfloat16())
    with pytest.raises(DTypeError, match="out_dtype"):
        hg.validate(a, b, torch.int32)


def test_wrong_major():
    a, b = _ab()
    with pytest.raises(LayoutError, match="not K-major"):
        hg.validate(a, b.T.contiguous().T)  # shape (N, K) but N-major memory (strides (1, N))


def test_misaligned_rows_and_pointer():
    a, b = _ab(k=100)  # 200-byte rows
    with pytest.raises(AlignmentError, match="16 bytes"):
        hg.validate(a, b)
    base = torch.randn(256 * 128 + 1).half()
    a = base[1:].view(256, 128)  # starts 2 bytes into the allocation
    with pytest.raises(AlignmentError, match="16-byte aligned"):
        hg.validate(a, _ab()[1])
    a, b = _ab(n=100)  # C rows of 100 fp16 = 200 bytes
    with pytest.raises(AlignmentError, match="TMA store"):
        hg.validate(a, b)


def test_shape_errors():
    a, _ = _ab(k=128)
    _, b = _ab(k=64)
    with pytest.raises(ShapeError, match="K"):
        hg.validate(a, b)
    with pytest.raises(ShapeError, match="tile"):
        hg.validate(*_ab(), tile=(64, 64))
    with pytest.raises(ShapeError, match="stages"):
        hg.validate(*_ab(), stages=9)
    with pytest.raises(CourseError, match="variant"):
        hg.validate(*_ab(), variant="fast")


# -- what the compiler made -------------------------------------------------------------------
def _report(variant, **params):
    return compile_report(TARGET, arch="sm_90a", variant=variant, **params)


@pytest.mark.parametrize("variant", hg.all_variants())
def test_each_variant_keeps_tma_wgmma_and_registers(variant):
    r = _report(variant)
    assert not r.diagnostics("serialized")  # ptxas: "wgmma.mma_async instructions are serialized"
    s = loop_structure(r.ptx)
    # 4 x m64n256k16 per k-tile (TILE_K = 64); the compiler's drain loop is a second copy
    assert r.count("wgmma") == (8 if variant in ("compiler", "compiler_overlap") else 4)
    assert s.tma_loads >= 2  # A and B
    assert r.count("mbarrier waits") > 0
    assert r.count("TMA stores") == 8  # 128x256 tile in 128x32 epilogue sub-tiles
    assert r.spill_bytes == 0
    assert r.registers is not None and 0 < r.registers <= 255


@pytest.mark.parametrize("variant", hg.all_variants())
def test_each_variant_neither_hangs_nor_races_on_the_cpu_model(variant):
    """The CPU pipeline model (``exercises.pipeline_checks.model_verdict``, what the mainloop
    exercises run on a learner's loop) replays the class's mainloop on several ring sizes: no
    wait that never ends, no stage handed back while a wgmma still reads it. Every class of the
    tables passes, the counter-examples too (theirs is what the compiler makes of them)."""
    from cutecourse.exercises.pipeline_checks import model_verdict

    assert model_verdict(hg.variant_class(variant)) is None


def test_a_stage_released_under_its_wgmmas_fails_the_cpu_model():
    """The control of the test above: a consumer that hands each stage back in its own iteration
    without waiting for the wgmmas that read it (docs/DEVELOPING.md's mainloop, less its wait)."""
    import cutlass.cute as cute

    from cutecourse.exercises.pipeline_checks import model_verdict
    from cutecourse.kernels import sm90

    class ReleasedUnderItsWgmmas(hg.HopperGemm):
        @cute.jit
        def consume(self, ring, mma, k, cons, released):
            ring.consumer_wait(cons)
            sm90.issue_mma(mma, cons.index)
            ring.consumer_release(cons)
            cons.advance()
            return cons, released

        @cute.jit
        def drain(self, ring, k_tiles, released):
            pass

    assert "race" in (model_verdict(ReleasedUnderItsWgmmas) or "")


def test_naive_has_no_prologue():
    s = loop_structure(_report("naive").ptx)
    assert s.prologue_tma_loads == 0 and not s.pipelined
    assert s.kinds() == ["steady"]  # one loop: load, wait, compute


def test_prefetch_has_a_hand_written_prologue():
    s = loop_structure(_report("prefetch").ptx)
    assert s.prologue_tma_loads == 2 and s.pipelined
    assert s.kinds() == ["prologue", "steady"]


@pytest.mark.parametrize("depth", [None, 1])
def test_compiler_really_pipelines(depth):
    r = _report("compiler", prefetch_stages=depth)
    assert not r.diagnostics(SKIPPED), r.diagnostics(SKIPPED)
    s = loop_structure(r.ptx)
    # the compiler wrote a prologue (loads before the MMA loop), a steady loop that overlaps the
    # loads of tile k + P with the MMAs of tile k, and a drain loop for the last P tiles
    # (with depth 1 the prologue is one straight-line load, not a loop)
    assert s.prologue_tma_loads == 2 and s.pipelined
    assert s.kinds()[-2:] == ["steady", "drain"]


@pytest.mark.parametrize("cluster", [(2, 1), (1, 2)])
def test_multicast_pairs_compile_with_multicast_loads(cluster):
    r = compile_report("cutecourse.kernels.hopper_gemm_cluster:compile_target", variant="compiler",
                       cluster=list(cluster))
    assert r.count("TMA multicast loads") == 2  # the shared operand, prologue + steady loop
    assert loop_structure(r.ptx).pipelined and not r.diagnostics(SKIPPED)


def test_guarded_loop_is_not_pipelined_and_says_so():
    r = _report("compiler_guarded")
    assert r.diagnostics(SKIPPED), "the pipelining warning was not captured"
    s = loop_structure(r.ptx)
    assert not s.pipelined and s.kinds() == ["steady"]


@pytest.mark.parametrize("tile,in_dtype,out_dtype",
                         [((128, 128), "float16", "float16"), ((128, 256), "bfloat16", "float32")])
def test_other_tiles_and_dtypes_compile(tile, in_dtype, out_dtype):
    r = _report("compiler", tile=list(tile), in_dtype=in_dtype, out_dtype=out_dtype)
    assert r.spill_bytes == 0 and not r.diagnostics(SKIPPED)
    assert loop_structure(r.ptx).pipelined
    assert r.count("wgmma") == 8


# (on an H100: tests/test_dense_gemms.py runs every dense GEMM against torch)
def test_operands_on_two_devices_are_a_device_error():
    a = torch.zeros(256, 64, dtype=torch.float16)
    b = torch.empty(256, 64, dtype=torch.float16, device="meta")
    with pytest.raises(DeviceError, match="same GPU"):
        hg.validate(a, b)


# -- the epilogue is a hook, as in the persistent and Blackwell kernels ---------------------------
def test_every_family_has_the_three_epilogue_hooks():
    from cutecourse.kernels import blackwell_grouped_gemm as bw, hopper_gemm_persistent as hp

    for cls in (hg.HopperGemm, hp.PersistentHopperGemm, bw.BlackwellGroupedBlockScaledGemm):
        for hook in ("make_epilogue", "store_tile", "finish_stores"):
            assert hook in vars(cls), (cls.__name__, hook)


def test_the_one_cta_epilogue_is_its_store_tile_hook():
    """A subclass whose store_tile stores nothing compiles to a kernel with no TMA store: the
    kernel reaches C only through the hook."""
    from cutecourse.inspect import compile_here
    from cutecourse.kernels import gemm_launch

    class NoStores(hg.HopperGemm):
        def store_tile(self, epilogue, mma, gC, tile, warp_idx):
            pass

    def compiled(kernel):
        return compile_here(kernel, *gemm_launch.Entry(type(kernel)).fake_arguments(kernel))

    assert compiled(hg.HopperGemm()).count("TMA stores") > 0
    assert compiled(NoStores()).count("TMA stores") == 0
