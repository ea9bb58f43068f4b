"""benchmarks/experiments/mixed_persistent.py: the persistent mixed-input GEMM.

On the CPU (sm_90a PTX from fakes, as tests/test_mixed_input.py compiles the course kernel): the
producer's TMA loads sit in a k-tile loop inside a loop over work units, which the course
kernel's do not; the consumers' k-tile loop keeps one wgmma commit group per chunk (16 register-A
wgmmas, 4 groups, each waited at depth 0) and sits in a unit loop that also stores each unit's
tile (split-K: the counter's atomic and the slices' reads); the loads-only twin issues no wgmma;
the ring is the deepest that lets the asked number of CTAs share an SM. On a Hopper GPU (``-m
gpu``): the persistent kernel's y is the course kernel's at the same split, bit for bit, with
many units per CTA (a grid of a few SMs), padded tiles and several token tiles (the counters'
shifted view), with and without zero points.
"""

import re

import pytest

from cutecourse.kernels import hopper_mixed_gemm as hm
from cutecourse.kernels import mixed_input as mi
from cutecourse.ptx_loops import loops, mainloop, wait_group_depths

TARGET = "benchmarks.experiments.mixed_persistent:compile_target"


@pytest.fixture(scope="module")
def persistent():
    import importlib

    return importlib.import_module("benchmarks.experiments.mixed_persistent")


def enclosing(inner, found):
    """The loops of ``found`` that contain loop ``inner``."""
    return [lp for lp in found if lp.start < inner.start and lp.end > inner.end]


def load_loop(ptx):
    """The innermost loop holding every TMA load of the kernel."""
    found = loops(ptx)
    total = max(lp.tma_loads for lp in found)
    return min((lp for lp in found if lp.tma_loads == total), key=lambda lp: len(lp.lines)), found


@pytest.mark.parametrize("params", [dict(tile_m=16, warpgroups=2, split_k=True),
                                    dict(tile_m=8, zero_point=True, group_size=64)])
def test_the_producer_and_the_consumers_loop_over_units(params):
    from cutecourse.inspect import compile_report

    r = compile_report(TARGET, ctas_per_sm=2, **params)
    ptx = r.ptx
    loads, found = load_loop(ptx)
    assert loads.tma_loads >= 3 + params.get("zero_point", False) and loads.wgmmas == 0
    units = [lp for lp in enclosing(loads, found) if lp.wgmmas == 0]
    assert units, "the producer's k-tile loop is not inside a loop over work units"
    main = mainloop(r)
    assert main.wgmmas == 16 and main.tma_loads == 0
    assert sum("wgmma.commit_group" in ln for ln in main.lines) == 4, "one commit group per chunk"
    assert wait_group_depths(main.lines) == [0] * 4
    outer = [lp for lp in enclosing(main, found) if lp.tma_loads == 0]
    assert outer, "the consumers' k-tile loop is not inside a loop over work units"
    stores = [ln for ln in outer[0].lines if ln.startswith("st.global")]
    assert stores, "the unit loop stores its tile"
    if params.get("split_k"):
        assert any("atom.global.acq_rel" in ln for ln in outer[0].lines)
        assert any("ld.global.cg" in ln for ln in outer[0].lines)
    assert r.spill_bytes == 0
    assert "C7513" not in r.log
    # 3 CTAs (the most the experiment asks) fit an SM's 64 K registers: all of the grid is resident
    regs = int(re.search(r"Used (\d+) registers", r.log).group(1))
    warps = (params.get("warpgroups", 1) * hm.WG_THREADS + hm.PRODUCER_THREADS) // 32
    assert 3 * warps * 32 * -(-regs // 8) * 8 <= 65536, regs


def test_the_course_kernel_has_no_unit_loop():
    """The contrast that makes the test above mean something: the course kernel's load loop is
    outermost (one CTA, one unit)."""
    from cutecourse.inspect import compile_report

    ptx = compile_report(mi.__name__ + ":compile_target", tile_m=16, warpgroups=2, split_k=True).ptx
    loads, found = load_loop(ptx)
    assert not enclosing(loads, found)


def test_the_loads_only_twin_streams_in_the_same_loops_without_wgmma():
    from cutecourse.inspect import compile_report

    ptx = compile_report(TARGET, ctas_per_sm=1, loads_only=True, tile_m=16, warpgroups=2).ptx
    loads, found = load_loop(ptx)
    assert enclosing(loads, found)
    assert "wgmma.mma_async" not in ptx


def test_ring_depth_for_ctas_per_sm(persistent):
    # tile_m = 16, two warpgroups: a stage is 16 KB of weights, 8 KB of x, 256 B of scales
    assert [persistent.stages_for(c, 16) for c in (1, 2, 3, 4)] == [8, 4, 2, 2]
    assert persistent.stages_for(3, 64) is None  # not even 2 stages of 64 tokens: 3 a SM do not fit
    for c in (1, 2, 3):
        stages = persistent.stages_for(c, 8)
        kernel = hm.HopperMixedGemm(8, warpgroups=2, stages=stages)
        assert c * (kernel.smem_bytes() + 1024) <= hm.SM_SMEM
        if stages < persistent.MOST_STAGES:
            deeper = hm.HopperMixedGemm(8, warpgroups=2, stages=stages + 1)
            assert c * (deeper.smem_bytes() + 1024) > hm.SM_SMEM


def test_one_class_per_configuration(persistent):
    two = persistent.persistent_class(2)
    assert two is persistent.persistent_class(2) and two.CTAS_PER_SM == 2 and two.SMS == mi.SMS
    assert issubclass(persistent.persistent_class(2, loads_only=True), persistent.mixed_ceilings.LoadsOnly)
    assert persistent.persistent_class(2, sms=4) is not two
    assert two(16).key() != persistent.persistent_class(3)(16).key()


GPU_CHECK = """
import json, sys, torch
from benchmarks.experiments.mixed_persistent import persistent_class, stages_for
from cutecourse.kernels.mixed_input import launcher
from cutecourse.quant import dequantize, quantize_int4
torch.manual_seed(0)
for m, n, k, group, zp, splits, ctas, sms in json.loads(sys.argv[1]):
    packed, scales, zeros = quantize_int4(torch.randn(n, k, device="cuda") * 0.02, group, zero_point=zp)
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    course = launcher(x, packed, scales, zeros, splits=splits, warpgroups=2)
    course()
    p = course.plan
    stages = stages_for(ctas, p.tile_m, group, 2, zp)
    fn = launcher(x, packed, scales, zeros, splits=splits, warpgroups=2, stages=stages,
                  kernel_class=persistent_class(ctas, False, sms))
    fn.y.fill_(float("nan"))
    fn()
    first = fn.y.clone()
    fn()  # again: the counters went back to zero
    ref = x.float() @ dequantize(packed, scales, zeros).float().T
    err = float(((first.float() - ref).abs().max() / ref.abs().max()))
    same = torch.equal(first.view(torch.int16), course.y.view(torch.int16)) and torch.equal(first, fn.y)
    counters = getattr(fn, "counters", None)
    zeroed = counters is None or int(counters.abs().sum()) == 0
    print("FINISHED" + json.dumps([m, n, k, group, zp, p.splits, ctas, sms, err, same and zeroed]), flush=True)
"""

#: (M, N, K, group, zero points, splits, CTAs per SM, SMs), two warpgroups: a grid of 2-4 SMs
#: makes each CTA walk many units; N = 64 x odd pads the last 128-row tile; M = 100 has two token
#: tiles of 64; 132 SMs, more CTAs than units.
CASES = [(1, 1088, 3200, 64, False, 1, 1, 2), (1, 1088, 3200, 64, False, 3, 2, 3),
         (16, 4096, 2048, 128, True, 4, 3, 4), (100, 576, 1536, 128, False, 3, 1, 2),
         (100, 576, 1536, 128, True, 1, 2, 3), (3, 320, 640, 128, True, 2, 1, 132)]


@pytest.mark.gpu
def test_persistent_matches_the_course_kernel_bit_for_bit():
    from gpu.cases import run_cases

    labels = [f"case {c} (M, N, K, group, zeros, splits, ctas per SM, SMs)" for c in CASES]
    rows = run_cases(GPU_CHECK, CASES, labels)
    bad = [r for r in rows if not (r[-2] <= 1e-2 and r[-1])]
    assert len(rows) == len(CASES) and not bad, "\n".join(map(str, bad))
