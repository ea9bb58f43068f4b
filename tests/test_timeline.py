"""The timeline model: its simulation agrees with its formula; speedups behave."""

import matplotlib
import pytest

matplotlib.use("Agg")

from cutecourse import bench  # noqa: E402
from cutecourse.errors import CourseError, ShapeError  # noqa: E402
from cutecourse.models import pipeline as pm  # noqa: E402
from cutecourse.models import timeline as tl  # noqa: E402

MACHINES = [tl.H100, tl.Machine(tma_latency_ns=200), tl.Machine(bytes_per_ns=30),
            tl.Machine(tma_latency_ns=2000, tflops_per_sm=20)]


def test_k_tile_costs_for_128x256_fp16():
    c = tl.k_tile_costs((128, 256), 64, 2)
    assert c.bytes == (128 + 256) * 64 * 2
    assert c.transfer == pytest.approx(c.bytes / tl.H100.bytes_per_ns)
    assert c.mma == pytest.approx(2 * 128 * 256 * 64 / (tl.H100.tflops_per_sm * 1e3))


@pytest.mark.parametrize("machine", MACHINES)
def test_naive_is_latency_plus_transfer_plus_mma_per_tile(machine):
    p = tl.predict("naive", 4, 32, machine=machine)
    c = p.costs
    assert p.mainloop_ns == pytest.approx(32 * (c.latency + c.transfer + c.mma))


@pytest.mark.parametrize("machine", MACHINES)
@pytest.mark.parametrize("variant", ["prefetch", "compiler"])
@pytest.mark.parametrize("depth", [1, 2, 3])
def test_pipelined_matches_steady_state_formula(machine, variant, depth):
    k = 96
    p = tl.predict(variant, 4, k, prefetch=depth, machine=machine)
    c = p.costs
    per = tl.steady_state_per_tile(variant, c, depth)
    # k tiles at the steady rate, plus at most one start-up round trip.
    assert k * per - 1e-6 <= p.mainloop_ns <= k * per + (c.latency + c.transfer + c.mma) + 1e-6


def test_speedup_grows_with_latency_and_vanishes_without_it():
    low = tl.speedup(machine=tl.Machine(tma_latency_ns=100))
    high = tl.speedup(machine=tl.Machine(tma_latency_ns=1500))
    assert 1.0 < low < high
    # No latency, bandwidth to spare: naive only loses the transfer time.
    free = tl.Machine(tma_latency_ns=0.0, bytes_per_ns=1e9)
    assert tl.speedup(machine=free) == pytest.approx(1.0, rel=1e-3)


def test_deeper_prefetch_is_never_slower():
    times = [tl.predict("prefetch", 8, 64, prefetch=d).mainloop_ns for d in range(1, 8)]
    assert all(b <= a + 1e-6 for a, b in zip(times, times[1:]))


def test_deadlocking_configuration_raises():
    with pytest.raises(pm.PipelineDeadlock):
        tl.predict("prefetch", 4, 16, prefetch=4)


def test_tensor_core_busy_fraction():
    p = tl.predict("naive", 4, 16)
    c = p.costs
    assert p.tensor_core_busy == pytest.approx(c.mma / (c.latency + c.transfer + c.mma))


def test_measured_speedup_reads_results(tmp_path):
    assert tl.measured_speedup("no_such_result", directory=tmp_path) is None
    res = bench.BenchResult("gemm", bench.Work(flops=10**12), "torch.matmul", [
        bench.Row("torch.matmul", 2.0, [2.0], tflops=500.0, ratio=1.0),
        bench.Row("course naive", 4.0, [4.0], tflops=250.0, ratio=0.5),
        bench.Row("course prefetch", 1.6, [1.6], tflops=625.0, ratio=1.25)])
    res.save("gemm_test", tmp_path)
    assert tl.measured_speedup("gemm_test", directory=tmp_path) == pytest.approx(2.5)
    with pytest.raises(CourseError, match="no row"):
        tl.measured_speedup("gemm_test", fast="warp-specialized", directory=tmp_path)


def test_gantt_draws_one_bar_per_k_tile_and_lane():
    ps = [tl.predict("naive", 4, 20), tl.predict("prefetch", 4, 20)]
    ax = tl.gantt(*ps, first=10)
    assert len(ax.patches) == 2 * 2 * 10
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "naive TMA", "naive MMA", "prefetch TMA", "prefetch MMA"]


def test_errors():
    with pytest.raises(ShapeError):
        tl.k_tile_costs((128, 0))
    with pytest.raises(CourseError):
        tl.k_tile_costs(machine=tl.Machine(bytes_per_ns=0))
    with pytest.raises(CourseError):
        tl.steady_state_per_tile("eager", tl.k_tile_costs(), 2)
    with pytest.raises(CourseError):
        tl.gantt()


def test_measured_per_tile_from_a_result(tmp_path):
    assert tl.measured_per_tile_ns("missing", "naive", directory=tmp_path) is None
    res = bench.BenchResult("gemm", bench.Work(flops=1), "torch.matmul",
                            [bench.Row("naive", 3000.0, [3000.0], tflops=1.0, ratio=1.0)],
                            params={"m": 8192, "n": 8192, "k": 8192})
    res.save("g", tmp_path)
    # 2048 CTAs of 128x256 on 132 SMs: 16 waves; 128 k-tiles each.
    assert tl.measured_per_tile_ns("g", "naive", directory=tmp_path) == pytest.approx(3000e3 / 16 / 128)
    bench.BenchResult("gemm", bench.Work(flops=1), "naive", res.rows).save("h", tmp_path)
    with pytest.raises(CourseError, match="problem size"):
        tl.measured_per_tile_ns("h", "naive", directory=tmp_path)


def test_calibrate_reproduces_its_two_measurements():
    m = tl.calibrate(1500.0, 830.0, latency_ns=400.0)
    assert tl.predict("prefetch", 4, 256, machine=m).per_tile_ns == pytest.approx(830.0, rel=0.01)
    assert tl.predict("naive", 4, 256, machine=m).per_tile_ns == pytest.approx(1500.0)
    with pytest.raises(CourseError, match="smaller latency"):
        tl.calibrate(1000.0, 830.0, latency_ns=400.0)


def test_warp_skew_slows_only_the_loop_that_refills_a_just_released_stage():
    import dataclasses

    base = tl.Machine(tma_latency_ns=400, bytes_per_ns=180, tflops_per_sm=5.0)
    skewed = dataclasses.replace(base, warp_skew_ns=80)

    def per_tile(variant, p, m):
        return tl.predict(variant, 4, 128, p, machine=m).per_tile_ns

    # compiler, P = stages-1: warp 0 refills the stage released at the end of the previous
    # iteration, with nothing in flight on the tensor cores: it eats the skew every k-tile.
    assert per_tile("compiler", 3, skewed) == pytest.approx(per_tile("compiler", 3, base) + 80, rel=0.02)
    # One stage of slack (P = stages-2), or the prefetch loop (its wgmma runs while warp 0
    # waits): no change.
    assert per_tile("compiler", 2, skewed) == pytest.approx(per_tile("compiler", 2, base), rel=1e-3)
    assert per_tile("prefetch", 3, skewed) == pytest.approx(per_tile("prefetch", 3, base), rel=1e-3)
