"""Every dense GEMM of the registry (kernels/registry.py) through the one host layer: refusals on
any machine, and on an H100 correctness against torch, in one subprocess with a time budget per
case (a broken pipeline hangs, it does not fail: the test names the case that did not finish). A
new kernel in the registry needs rows here, nothing else."""

import textwrap

import pytest
import torch

from cutecourse.errors import CourseError, DeviceError, ShapeError
from cutecourse.kernels import registry
from conftest import far_from_torch
from gpu.cases import run_cases

NAMES = list(registry.DENSE)


# -- on any machine -------------------------------------------------------------------------------
@pytest.mark.no_gpu
@pytest.mark.parametrize("name", NAMES)
def test_no_hopper_gpu_is_a_device_error(name):
    a, b = torch.randn(256, 64).half(), torch.randn(256, 64).half()
    with pytest.raises(DeviceError, match="Hopper"):
        registry.entry(name).gemm(a, b)


@pytest.mark.parametrize("name", NAMES)
def test_launcher_refuses_a_tile_it_does_not_take_before_anything_else(name):
    a, c = torch.zeros(256, 64).half(), torch.zeros(256, 256).half()
    with pytest.raises(ShapeError, match="tile"):
        registry.entry(name).launcher(a, a, c, tile=(96, 96))  # on any machine, before the GPU check


@pytest.mark.parametrize("name", NAMES)
def test_an_unknown_option_is_a_course_error(name):
    a, c = torch.zeros(256, 64).half(), torch.zeros(256, 256).half()
    with pytest.raises(CourseError, match="keyword"):
        registry.entry(name).launcher(a, a, c, tile_shape=(128, 256))


def test_epilogue_operands_are_counted_before_the_launch():
    from cutecourse.kernels.epilogue_op import AddBias

    a, c = torch.zeros(256, 64).half(), torch.zeros(256, 256).half()
    with pytest.raises(ShapeError, match="reads 1 tensor"):
        registry.entry("persistent").launcher(a, a, c, epilogue_op=AddBias())


@pytest.mark.parametrize("name", NAMES)
def test_every_kernel_compiles_a_named_epilogue_op(name):
    from cutecourse.inspect import compile_report

    r = compile_report(registry.target(name), epilogue_op="Relu")
    assert r.ptx.count("max.f32") + r.ptx.count("selp.f32") >= 64 and r.spill_bytes == 0


def test_the_compile_key_is_the_constructor_arguments():
    from cutecourse.kernels.epilogue_op import AddBias, Relu
    from cutecourse.kernels.hopper_gemm_persistent import PersistentHopperGemm

    keys = {PersistentHopperGemm().key(), PersistentHopperGemm(tile_mn=(128, 256)).key()}
    assert len(keys) == 1  # defaults spelled out or not: one kernel
    keys |= {PersistentHopperGemm(pdl=True).key(), PersistentHopperGemm(epilogue_op=Relu()).key(),
             PersistentHopperGemm(epilogue_op=AddBias()).key()}
    assert len(keys) == 4


# -- on an H100 -------------------------------------------------------------------------------------
_GPU_CHECK = textwrap.dedent("""
    import json, sys, torch
    import cutecourse, cutlass
    from cutecourse.kernels import registry
    from cutecourse.kernels.epilogue_op import AddBias, EpilogueOp

    class BiasRelu(EpilogueOp):
        operands = ("bias",)

        def apply(self, x, m, n, bias):
            return cutlass.max(x + bias[n], cutlass.Float32(0.0))

    torch.manual_seed(0)
    out = []
    for name, m, n, k, ind, outd, opts in json.loads(sys.argv[1]):
        ind, outd = getattr(torch, ind), getattr(torch, outd)
        a = torch.randn(m, k, device="cuda").to(ind)
        b = torch.randn(n, k, device="cuda").to(ind)
        ref = a.float() @ b.float().T
        extra = {}
        if opts.pop("add_bias", False):  # the course's own op, bias read at clamped columns
            bias = torch.randn(n, device="cuda")
            ref = ref + bias
            extra = dict(epilogue_op=AddBias(), epilogue_args=(bias,))
        if opts.pop("bias_relu", False):
            bias = torch.randn(n, device="cuda")
            ref = (ref + bias).relu()
            extra = dict(epilogue_op=BiasRelu(), epilogue_args=(bias,))
        # C at the start of a longer buffer of NaN: a store past C lands in the rest
        buf = torch.full((m * n + 64 * n,), float("nan"), dtype=outd, device="cuda")
        c = buf[:m * n].view(m, n)
        fn = registry.entry(name).launcher(a, b, c, **opts, **extra)
        err = 0.0
        for _ in range(3):  # three launches: counters and flags must be back at 0 after each
            buf.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            err = max(err, ((c.float() - ref).abs().max() / ref.abs().max()).item())
            if not buf[m * n:].isnan().all():
                err = float("inf")  # a store outside C
        if hasattr(fn, "counters") and int(fn.counters.abs().sum()):
            err = float("inf")  # the next launch would start from stale tickets or flags
        out.append([name, m, n, str(ind), str(outd), opts, bool(extra), err])
        print("FINISHED" + json.dumps(out[-1]), flush=True)  # the parent times each case
    c = registry.entry("persistent").gemm(a, b, scheduler="dynamic")  # the one-call API too
    out.append(["gemm", m, n, str(ind), str(c.dtype), {}, False,
                ((c.float() - a.float() @ b.float().T).abs().max() / (a.float() @ b.float().T).abs().max()).item()])
    print("FINISHED" + json.dumps(out[-1]), flush=True)
    print("RESULT" + json.dumps(out))
""")

#: name, m, n, k, in, out, launcher options (sms: small = many tiles per CTA; None: every SM)
GPU_CASES = [
    # one CTA per tile: square, tall, wide, K not a multiple of 64, M/N not multiples of the tile
    *[("one", 1024, 1024, 1024, "float16", "float16", {"variant": v}) for v in ("naive", "prefetch", "compiler")],
    ("one", 3000, 256, 520, "float16", "float32", {"variant": "compiler"}),
    ("one", 256, 3000, 1000, "bfloat16", "bfloat16", {"tile": (128, 128)}),
    ("one", 777, 1000, 72, "bfloat16", "float32", {"variant": "naive"}),
    ("one", 1000, 520, 4104, "float16", "bfloat16", {"tile": (128, 128), "variant": "compiler"}),
    ("one", 128, 256, 8, "float16", "float16", {}),  # a single, mostly empty k-tile
    ("one", 1500, 700, 1000, "float16", "float32", {"variant": "compiler_overlap"}),
    ("one", 1024, 1024, 128, "float16", "float16", {"variant": "compiler_guarded"}),
    ("one", 1000, 520, 200, "float16", "float32", {"bias_relu": True}),
    # clusters: 1100 rows = 9 tiles, the grid rounds up to whole clusters; 33 x 17 tiles
    ("cluster", 1100, 1000, 520, "float16", "float16", {"cluster": (2, 1)}),
    ("cluster", 1000, 1100, 1000, "bfloat16", "float32", {"cluster": (1, 2), "variant": "compiler"}),
    ("cluster", 2048, 2048, 2048, "float16", "float16", {"cluster": (2, 1), "tile": (128, 128)}),
    ("cluster", 4160, 4224, 520, "float16", "float16", {"cluster": (2, 1)}),
    ("cluster", 4160, 4224, 1000, "bfloat16", "float32", {"cluster": (2, 2), "variant": "compiler"}),
    ("cluster", 4160, 4224, 72, "float16", "float16", {"cluster": (1, 2), "variant": "naive"}),
    ("cluster", 1100, 1000, 520, "float16", "float16", {"cluster": (2, 1), "bias_relu": True}),
    # persistent, cooperative: static and dynamic schedulers, clusters, the tall tile
    ("persistent", 4096, 4096, 1024, "float16", "float16", {}),
    ("persistent", 3000, 256, 520, "float16", "float32", {}),
    ("persistent", 256, 3000, 1000, "bfloat16", "bfloat16", {"tile": (128, 128)}),
    ("persistent", 777, 1000, 72, "bfloat16", "float32", {"sms": 5}),
    ("persistent", 1000, 520, 4104, "float16", "bfloat16", {"tile": (128, 128), "sms": 3}),
    ("persistent", 128, 256, 8, "float16", "float16", {}),
    ("persistent", 2176, 1000, 256, "float16", "float16", {"tile": (128, 128), "sms": 7}),
    ("persistent", 1100, 1000, 520, "float16", "float16", {"cluster": (2, 1)}),
    ("persistent", 1000, 1100, 1000, "bfloat16", "float32", {"cluster": (1, 2), "sms": 6}),
    ("persistent", 4096, 4096, 1024, "float16", "float16", {"scheduler": "dynamic"}),
    ("persistent", 777, 1000, 72, "bfloat16", "float32", {"scheduler": "dynamic", "sms": 5}),
    ("persistent", 2176, 1000, 256, "float16", "bfloat16", {"scheduler": "dynamic", "tile": (128, 128), "sms": 7}),
    ("persistent", 128, 256, 8, "float16", "float16", {"scheduler": "dynamic"}),
    ("persistent", 4160, 4224, 520, "float16", "float16", {"cluster": (2, 1)}),
    ("persistent", 4160, 4224, 200, "bfloat16", "bfloat16", {"cluster": (1, 2), "sms": 10}),
    ("persistent", 1000, 1104, 1000, "bfloat16", "bfloat16", {"tile": (256, 128)}),
    ("persistent", 4160, 4224, 520, "bfloat16", "float32", {"tile": (256, 128), "cluster": (1, 2)}),
    ("persistent", 777, 1000, 72, "float16", "bfloat16", {"tile": (256, 128), "scheduler": "dynamic", "sms": 5}),
    ("persistent", 3000, 1000, 520, "float16", "float32", {"bias_relu": True, "sms": 7}),
    ("persistent", 4160, 4224, 520, "bfloat16", "bfloat16", {"bias_relu": True, "cluster": (2, 1)}),
    # ping-pong: odd and even tile counts per CTA, a CTA whose warpgroup 1 has no tile
    ("pingpong", 1024, 1024, 1024, "float16", "float16", {}),
    ("pingpong", 4096, 4096, 512, "float16", "float16", {}),
    ("pingpong", 3000, 1000, 520, "float16", "float32", {"sms": 7}),
    ("pingpong", 777, 520, 72, "bfloat16", "bfloat16", {"sms": 5}),
    ("pingpong", 64, 256, 8, "float16", "float16", {}),  # one tile: warpgroup 1 has none
    ("pingpong", 192, 256, 64, "float16", "float16", {"sms": 2}),  # 3 tiles on 2 CTAs
    ("pingpong", 4160, 4224, 1000, "bfloat16", "float32", {}),
    ("pingpong", 4160, 4224, 1000, "float16", "float16", {"cluster": (2, 1)}),
    ("pingpong", 1000, 520, 200, "bfloat16", "float32", {"cluster": (2, 1), "sms": 6}),
    ("pingpong", 3000, 1000, 520, "float16", "float32", {"epi_stages": 4, "sms": 7}),
    ("pingpong", 4096, 4096, 512, "bfloat16", "bfloat16", {"epi_stages": 4}),
    ("pingpong", 3000, 1000, 520, "bfloat16", "float32", {"pdl": True, "sms": 7}),
    ("pingpong", 1024, 1024, 1024, "float16", "float16", {"tile": (128, 128)}),
    ("pingpong", 3000, 1000, 520, "float16", "float32", {"tile": (128, 128), "sms": 7}),
    ("pingpong", 4160, 4224, 1000, "bfloat16", "bfloat16", {"tile": (128, 128), "cluster": (2, 1)}),
    ("pingpong", 4096, 4096, 512, "float16", "float16", {"scheduler": "dynamic"}),
    ("pingpong", 3000, 1000, 520, "float16", "float32", {"scheduler": "dynamic", "sms": 7}),
    ("pingpong", 64, 256, 8, "float16", "float16", {"scheduler": "dynamic"}),
    ("pingpong", 3000, 1000, 520, "float16", "float32", {"bias_relu": True, "sms": 7}),
    # stream-K (its exactness and flags: tests/test_hopper_gemm_streamk.py)
    ("streamk", 4096, 4096, 1024, "float16", "float16", {"min_saved": 1}),
    ("streamk", 3000, 3000, 520, "float16", "float32", {"min_saved": 1}),
    ("streamk", 777, 1000, 200, "bfloat16", "float32", {"min_saved": 1, "sms": 5}),
    ("streamk", 4096, 4096, 1024, "float16", "float16", {"min_saved": 1, "bias_relu": True}),
    # direct store: ragged edges (predicated pairs), tiles mostly outside C
    ("directstore", 4096, 4096, 1024, "float16", "float16", {}),
    ("directstore", 3000, 1000, 520, "float16", "float32", {"sms": 7}),
    ("directstore", 777, 520, 72, "bfloat16", "bfloat16", {"sms": 5}),
    ("directstore", 136, 264, 64, "float16", "float16", {}),
    ("directstore", 4160, 4224, 1000, "bfloat16", "float32", {"scheduler": "dynamic"}),
    ("directstore", 3000, 1000, 520, "bfloat16", "bfloat16", {"pdl": True, "sms": 7}),
    ("directstore", 3000, 1000, 520, "float16", "float32", {"bias_relu": True, "sms": 7}),
    # AddBias with N (264, 1000) not a multiple of the tile's: the padded columns' bias index is clamped
    ("one", 1000, 264, 200, "float16", "float32", {"add_bias": True}),
    ("cluster", 1100, 264, 520, "bfloat16", "bfloat16", {"cluster": (2, 1), "add_bias": True}),
    ("persistent", 3000, 264, 520, "float16", "float32", {"add_bias": True, "sms": 7}),
    ("pingpong", 777, 264, 200, "bfloat16", "float32", {"add_bias": True, "sms": 5}),
    ("streamk", 3000, 1000, 520, "float16", "float32", {"min_saved": 1, "add_bias": True}),
    ("directstore", 136, 264, 64, "float16", "float16", {"add_bias": True}),
]

#: The kernels whose cases above run on clusters: their scheduler cases run on a 2x1 one.
CLUSTERED = ("persistent", "pingpong")


def _scheduler_cases():
    """Every name of each dense kernel's scheduler table (its class's ``SCHEDULERS``), on a C of
    partial tiles: an order added by "Adding a scheduler" (docs/DEVELOPING.md) runs here with no
    edit of this file, on a 2x1 cluster where the kernel takes one and the order serves clusters."""
    cases = []
    for name in NAMES:
        for order, cls in getattr(type(registry.entry(name).kernel()), "SCHEDULERS", {}).items():
            opts = {"scheduler": order, "sms": 6}
            if name in CLUSTERED and cls.PER_CTA is None:
                opts["cluster"] = (2, 1)
            if name == "streamk":
                opts["min_saved"] = 1  # as its cases above: split the k-tiles
            cases.append((name, 1100, 1000, 520, "float16", "float32", opts))
    return cases


GPU_CASES += _scheduler_cases()


#: Seconds a case may take in the GPU check: the first one imports torch and the DSL and starts
#: CUDA; each compiles its kernel (seconds) and runs it three times (milliseconds). A case that
#: takes longer hangs: a pipeline whose waits and arrives do not pair up.
FIRST_CASE_S, CASE_S = 180, 60


def _run_timed(cases, script=_GPU_CHECK, first_case_s=FIRST_CASE_S, case_s=CASE_S):
    """Run the GPU check ``script`` on ``cases`` in a subprocess and return its rows (one per case,
    then the one-call gemm's). Fail naming the first case that did not finish within its budget
    (``gpu/cases.py``: the child prints a FINISHED line as each one finishes)."""
    labels = [f"{c[0]} case {tuple(c[1:4])} {c[4]} -> {c[5]} {c[6]}" for c in cases] + ["the one-call gemm"]
    return run_cases(script, cases, labels, first_case_s, case_s)


def test_a_case_that_hangs_is_named():
    """The timing of the GPU check, on the CPU: a child that finishes its first case and then
    hangs on the second fails the test with the second case's name, within its budget."""
    fake = textwrap.dedent("""
        import json, sys, time
        print("FINISHED" + json.dumps(["pingpong", 1, 2, "a", "b", {}, False, 0.0]), flush=True)
        time.sleep(60)
    """)
    cases = [("pingpong", 64, 256, 8, "float16", "float16", {}),
             ("pingpong", 4096, 4096, 512, "float16", "float16", {"scheduler": "dynamic"})]
    with pytest.raises(pytest.fail.Exception, match=r"pingpong case \(4096, 4096, 512\) float16 -> float16 "
                       r"\{'scheduler': 'dynamic'\} did not finish in 1 s"):
        _run_timed(cases, script=fake, first_case_s=30, case_s=1)


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
def test_matches_torch_on_the_gpu(name):
    cases = [c for c in GPU_CASES if c[0] == name]
    results = _run_timed(cases)
    assert len(results) == len(cases) + 1
    bad = far_from_torch(results)
    assert not bad, "\n".join(map(str, bad))
