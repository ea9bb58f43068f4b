"""benchmarks/experiments/tma_load_rate.py compiles for sm_90a on the CPU: the load-only kernel
that measures the schedule model's load port on the H100 issues two TMA loads per stage into a
swizzled ring, arms each stage's barrier with its bytes, and does no MMA. (The tests of the
experiment scripts live in tests/experiments/ and import them as ``benchmarks.experiments.*``.)"""

import pytest

from cutecourse import inspect as ci
from cutecourse.errors import ShapeError

TARGET = "benchmarks.experiments.tma_load_rate:compile_target"


@pytest.fixture(scope="module")
def rate():
    import importlib

    return importlib.import_module("benchmarks.experiments.tma_load_rate")


@pytest.mark.parametrize("tile, mode", [((128, 256), "own"), ((64, 256), "same")])
def test_load_kernel_compiles_for_sm90a(rate, tile, mode):
    r = ci.compile_report(TARGET, "sm_90a", tile_m=tile[0], tile_n=tile[1], mode=mode)
    for must in rate.PTX_MUST:
        assert must in r.ptx, must
    for must_not in rate.PTX_MUST_NOT:
        assert must_not not in r.ptx
    # one A and one B load per stage, issued in one place each (the producer's loop)
    assert r.ptx.count("cp.async.bulk.tensor.2d.shared::cta.global") == 2
    assert r.spill_bytes == 0


def test_ring_depth_and_bytes(rate):
    assert rate.stage_bytes(128, 256) == 49152 and rate.stages_for(128, 256) == 4
    assert rate.stage_bytes(64, 256) == 40960 and rate.stages_for(64, 256) == 5
    (am, ak), (bn, bk) = rate.shapes(128, 256, 4)
    # every CTA's own rows, 4 k-tiles: 26 MB, inside the H100's 50 MB L2
    assert (am * ak + bn * bk) * 2 == 132 * 49152 * 4 < 50 * 2**20


@pytest.mark.parametrize("kw", [dict(tile_m=96), dict(ctas=0), dict(ctas=133), dict(mode="both"), dict(span=0)])
def test_bad_configurations_are_refused(rate, kw):
    with pytest.raises(ShapeError):
        rate.compile_target(**kw)
