"""The kernel-schedule model: resources never double-booked, work done once, the schedules'
signature behaviours (what each exposes), convergence, waves, and the pictures and widget."""

import math

import matplotlib
import pytest

matplotlib.use("Agg")

from cutecourse.errors import CourseError, ShapeError  # noqa: E402
from cutecourse.models import schedule_ranking as sr  # noqa: E402
from cutecourse.models import schedules as sc  # noqa: E402
from cutecourse.viz import schedule_widget as sw  # noqa: E402
from cutecourse.viz import schedules as vs  # noqa: E402

#: Loads keep up: an ample load port, a latency the ring covers. Here only MMAs set the pace.
FAST_LOADS = sc.Machine(load_port_bytes_per_clock=1e4, latency_ns=500)
# Small problems with several tiles per SM (and classes of SMs with different tile counts).
SMALL = [(2048, 2048, 512, (128, 256, 64)), (1536, 2560, 256, (128, 128, 64))]


@pytest.fixture(scope="module")
def runs():
    return {(s, *case[:3], case[3]): sc.simulate(s, *case[:3], tile=case[3], sms=8)
            for case in SMALL for s in sc.SCHEDULES}


def _overlaps(spans):
    spans = sorted(spans)
    return [(a, b) for a, b in zip(spans, spans[1:]) if b[0] < a[1] - 1e-9]


def test_tensor_cores_and_load_port_never_double_booked(runs):
    for key, r in runs.items():
        for s in range(r.sms):
            ivs = r.intervals(s)
            # One MMA at a time per SM, across ping-pong warpgroups and across the two CTAs too.
            assert not _overlaps([(iv.start, iv.end) for iv in ivs if iv.kind == "mma"]), key
            assert not _overlaps([(iv.start, iv.end) for iv in ivs if iv.kind == "load"]), key
            for lane in range(r.lanes):  # a lane does one thing at a time: MMA, epilogue or idle
                busy = [(iv.start, iv.end) for iv in ivs if iv.lane == lane and iv.kind != "load"]
                assert not _overlaps(busy), (key, s, lane)


def test_every_tile_computed_exactly_once_and_all_the_flops(runs):
    for (schedule, m, n, k, tile), r in runs.items():
        seen = [t for s in range(r.sms) for t in {iv.tile for iv in r.intervals(s) if iv.kind == "epilogue"}]
        assert sorted(seen) == list(range(r.tiles)), schedule
        tm, tn, _ = r.tile
        assert r.tiles == math.ceil(m / tm) * math.ceil(n / tn)
        assert r.mma_flops == 2 * m * n * k  # these shapes divide by every lane tile


def test_every_k_tile_is_loaded_before_it_is_multiplied(runs):
    r = runs[("cooperative", *SMALL[0][:3], SMALL[0][3])]
    for s in range(r.sms):
        ivs = r.intervals(s)
        for t in {iv.tile for iv in ivs if iv.kind == "mma"}:
            # (back-to-back loads are drawn as one bar: the first k-tile lands load_ns after it starts)
            landed = min(iv.start for iv in ivs if iv.kind == "load" and iv.tile == t) + r.load_ns / 1e3
            first_mma = min(iv.start for iv in ivs if iv.kind == "mma" and iv.tile == t)
            assert landed <= first_mma + 1e-9


def test_pingpong_exposes_only_the_last_epilogue():
    r = sc.simulate("pingpong", 4096, 4096, 1024, tile=(128, 128, 64))
    e = r.epilogue_ns / 1e3
    assert r.lanes == 2 and r.tile == (128, 128, 64)  # 128 accumulator registers: a whole tile each
    for s in (0, 50, 131):
        assert len(r.work[s]) >= 7
        assert r.exposed_epilogue_us(s) == pytest.approx(e, rel=1e-6)


def test_cooperative_exposes_one_epilogue_per_tile():
    r = sc.simulate("cooperative", 4096, 4096, 1024)
    e = r.epilogue_ns / 1e3
    for s in (0, 100, 131):
        assert r.exposed_epilogue_us(s) == pytest.approx(len(r.work[s]) * e, rel=1e-6)
        assert r.exposed_prologue_us(s) < 2 * e  # only the first tile waits for its ring fill


def test_one_cta_per_tile_exposes_the_prologue_of_every_tile():
    m = sc.H100
    r = sc.simulate("one_cta", 4096, 4096, 1024)
    prologue = (m.cta_launch_ns + m.latency_ns + r.load_ns) / 1e3  # launch, latency, first k-tile
    for s in (0, 131):
        assert r.exposed_prologue_us(s) == pytest.approx(len(r.work[s]) * prologue, rel=1e-6)
        assert r.exposed_epilogue_us(s) == pytest.approx(len(r.work[s]) * r.epilogue_ns / 1e3, rel=1e-6)
    coop = sc.simulate("cooperative", 4096, 4096, 1024)
    assert coop.total_us < r.total_us


@pytest.mark.parametrize("shape", [(2048, 2048, 16384), (4096, 4096, 16384)])
def test_long_k_converges_to_the_mainloop_bound(shape):
    # With the default machine each schedule runs at its own steady state (MMA, loads or ring).
    for r in sc.simulate_all(*shape).values():
        assert r.mainloop_bound_us <= r.total_us <= 1.03 * r.mainloop_bound_us, r.schedule
    # Where the loads keep up, that is the MMA bound, and all four schedules agree.
    fast = sc.simulate_all(*shape, machine=FAST_LOADS)
    for r in fast.values():
        assert r.mainloop_bound_us == pytest.approx(r.mma_bound_us)
        assert r.total_us <= 1.03 * r.mma_bound_us, r.schedule
    assert max(r.tflops for r in fast.values()) <= 1.03 * min(r.tflops for r in fast.values())


def test_tiny_k_pingpong_beats_cooperative():
    # Same tile for both (CUTLASS's 128x128, the seed's benchmark configuration): the epilogue
    # is a large share of a 4-k-tile tile, and only ping-pong hides it.
    res = sc.simulate_all(4096, 4096, 256, tile=(128, 128, 64), schedules=("cooperative", "pingpong"))
    assert res["pingpong"].tflops > 1.05 * res["cooperative"].tflops
    # 128x256 with fp16 accumulators fits a whole tile per warpgroup (128 registers): same story.
    res = sc.simulate_all(4096, 4096, 256, acc_bytes=2, schedules=("cooperative", "pingpong"))
    assert res["pingpong"].tile == (128, 256, 64)
    assert res["pingpong"].tflops > 1.05 * res["cooperative"].tflops


def test_pingpong_halves_a_tile_whose_fp32_accumulators_do_not_fit():
    # 128x256 fp32 in one warpgroup: 256 registers per thread, more than the 240 CUTLASS's heavy
    # split gives a consumer; the course's kernel (and the model) take 64x256 instead.
    assert sc.MAX_CONSUMER_REGISTERS == 240
    assert sc.lane_tile("pingpong", (128, 256, 64), acc_bytes=4) == (64, 256, 64)
    assert sc.lane_tile("pingpong", (128, 128, 64), acc_bytes=4) == (128, 128, 64)
    assert sc.lane_tile("cooperative", (128, 256, 64)) == (128, 256, 64)
    assert sc.lane_tile("two_cta", (128, 256, 64)) == (64, 256, 64)


def test_waves_8192_with_128x256_tiles():
    r = sc.simulate("cooperative", 8192, 8192, 8192)
    assert r.tiles == 2048
    assert r.waves == pytest.approx(2048 / 132) and round(r.waves, 1) == 15.5
    assert r.last_wave_utilisation == pytest.approx(2048 / 132 - 15)
    assert sorted({len(w) for w in r.work}) == [15, 16]
    assert sum(len(w) == 16 for w in r.work) == 2048 - 15 * 132  # 68 SMs run the 16th tile
    pp = sc.simulate("pingpong", 8192, 8192, 8192)  # 64x256 per warpgroup, 2 per SM
    assert pp.tiles == 4096 and pp.waves == pytest.approx(r.waves)
    one = sc.simulate("cooperative", 1024, 1024, 1024)
    assert one.tiles == 32 and one.last_wave_utilisation == pytest.approx(32 / 132)


def test_stages_match_the_course_kernels():
    assert sc.simulate("one_cta", 1024, 1024, 1024).stages == 4  # plan_stages: 128x256 fp16
    assert sc.simulate("cooperative", 1024, 1024, 1024).stages == 4  # plan_persistent
    assert sc.simulate("cooperative", 1024, 1024, 1024, tile=(128, 128, 64)).stages == 6
    # ping-pong: 2 C buffers of 64x32 per warpgroup (hopper_gemm_pingpong.EPI_STAGES) leave room
    # for 5 stages of 64x256 and 6 of 128x128 (PingPongHopperGemm.plan)
    assert sc.simulate("pingpong", 1024, 1024, 1024).stages == 5
    assert sc.simulate("pingpong", 1024, 1024, 1024, tile=(128, 128, 64)).stages == 6


def test_predict_ranking_and_compare_with_measured():
    shapes = [(8192, 8192, 8192), (4096, 4096, 256)]
    ranks = sr.predict_ranking(shapes, tiles=[(128, 256, 64)])
    assert set(ranks) == {(s, (128, 256, 64)) for s in shapes}
    rk = ranks[((8192, 8192, 8192), (128, 256, 64))]
    assert sorted(rk.order) == sorted(sc.SCHEDULES) and str(rk).startswith("8192x8192x8192")
    same = sr.compare_with_measured(rk, dict(rk.tflops))
    assert same.spearman == pytest.approx(1.0) and same.kendall == pytest.approx(1.0) and not same.flips
    reverse = {s: float(i) for i, s in enumerate(rk.order)}  # measured order exactly reversed
    rev = sr.compare_with_measured(rk, reverse)
    assert rev.spearman == pytest.approx(-1.0) and len(rev.flips) == 6
    a = sr.compare_with_measured(["pingpong", "cooperative", "one_cta"],
                                 {"pingpong": 700.0, "cooperative": 790.0, "one_cta": 600.0})
    assert a.flips == [("pingpong", "cooperative")] and a.kendall == pytest.approx(1 / 3)
    assert "pingpong > cooperative" in str(a)
    with pytest.raises(CourseError):
        sr.compare_with_measured(rk, {"coop": 1.0, "pingpong": 2.0})
    with pytest.raises(CourseError):
        sr.compare_with_measured(rk, {"pingpong": 2.0})


def test_bad_inputs_raise_course_errors():
    with pytest.raises(CourseError):
        sc.simulate("stream_k", 1024, 1024, 1024)
    with pytest.raises(ShapeError):
        sc.simulate("cooperative", 0, 1024, 1024)
    with pytest.raises(ShapeError):
        sc.simulate("cooperative", 1024, 1024, 1024, tile=(64, 256, 64))
    with pytest.raises(ShapeError):
        sc.simulate("cooperative", 1024, 1024, 1024, tile=(256, 256, 512))  # one stage > smem


def test_draw_functions_return_figures():
    import matplotlib.pyplot as plt

    res = sc.simulate_all(2048, 2048, 1024)
    fig = vs.draw_timelines(res, sms=(0, 1))
    assert len(fig.axes) == 4 and "ping-pong" in fig.axes[2].get_title(loc="left")
    plt.close(fig)
    fig = vs.draw_timelines(res["pingpong"], sms=(3,), window="all")
    plt.close(fig)
    ax = vs.draw_waves(sc.simulate("cooperative", 8192, 8192, 512))
    assert "15.52 waves" in ax.get_title()
    plt.close(ax.figure)
    with pytest.raises(CourseError):
        vs.draw_timelines(res, sms=(500,))
    fig = vs.draw_stream_k(512, 132, 224, show=6)  # MLP down: 116 split tiles, 869 of 896 k-tiles
    assert "869 k-tiles" in fig.axes[0].get_title() and "896" in fig.axes[0].get_title()
    assert len(fig.axes[0].collections) > 6  # bars: whole tiles and pieces
    plt.close(fig)
    with pytest.raises(CourseError):
        vs.draw_stream_k(0, 132, 16)


def test_widget_redraws():
    w = sw.schedule_widget(m=2048, n=2048, k=1024, render=False)
    assert set(w.results) == set(sc.SCHEDULES) and "ping-pong" in w.table.value
    w.preset.value = "LLM 4096x14336x4096"
    assert (w.m.value, w.n.value, w.k.value) == (4096, 14336, 4096)
    assert w.results["cooperative"].problem == (4096, 14336, 4096)
    w.n.value = 6144  # by hand: no preset has this shape any more
    assert w.preset.value == "custom" and w.results["cooperative"].problem == (4096, 6144, 4096)
    w.n.value = 4096  # ... and this one is a preset again
    assert w.preset.value == "LLM 4096x4096x4096"
    w.schedules.value = ("pingpong",)
    assert list(w.results) == ["pingpong"]
    w.k.value = 1024
    w.tile.value = (128, 128, 64)
    assert w.results["pingpong"].tile == (128, 128, 64)
    w.schedules.value = ()  # nothing selected: the cooperative schedule, and the widget says so
    assert list(w.results) == ["cooperative"] and "no schedule is selected" in w.message.value
    w.schedules.value = ("pingpong",)
    assert w.message.value == "" and w.error is None



def test_widget_follows_the_course_widget_convention():
    """Root class, an Image with class cc-picture whose PNG changes with a control, a labelled
    toggle, errors in cc-message, and a mime bundle with the PNG and a stable text line."""
    import base64

    w = sw.ScheduleWidget(m=1024, n=1024, k=1024)
    assert "cc-schedule-widget" in w.widget._dom_classes
    assert "cc-picture" in w.picture._dom_classes and w.picture in w.widget.children
    assert "cc-message" in w.message._dom_classes and w.view.description
    first = bytes(w.picture.value)
    assert first.startswith(b"\x89PNG") and first == w.png
    w.view.value = "waves"
    assert bytes(w.picture.value) != first
    bundle = w._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert base64.b64decode(bundle["image/png"]) == w.png
    assert bundle["text/plain"] == "ScheduleWidget: 1024x1024x1024, tile 128x256x64, " \
        "one_cta, cooperative, pingpong, two_cta; view waves"
    with pytest.raises(CourseError):
        sw.ScheduleWidget(m=1000)



def test_widget_error_keeps_the_picture_and_says_why(monkeypatch):
    w = sw.ScheduleWidget(m=1024, n=1024, k=1024)
    png = w.png

    def refuse(*a, **kw):
        raise ShapeError("a stage does not fit", "use a smaller tile")

    monkeypatch.setattr(vs.sm, "simulate_all", refuse)
    w.tile.value = (256, 128, 64)
    assert "a stage does not fit" in w.message.value and "use a smaller tile" in w.message.value
    assert w.png == png and bytes(w.picture.value) == png
    monkeypatch.undo()
    w.tile.value = (128, 128, 64)
    assert w.message.value == "" and w.png != png


def test_widget_prints_the_models_error_beside_the_picture():
    w = sw.ScheduleWidget(m=8192, n=8192, k=512, render=False)
    assert "8192x8192x512 fp16" in w.accuracy.value and "measured 1.17x" in w.accuracy.value
    w.k.value = 4096 * 4
    assert "was not measured" in w.accuracy.value


def pingpong_vs_cooperative(fixed_clock: dict, sustained: dict,
                            row: str = "ping-pong 64x256") -> dict[str, list[tuple[int, float]]]:
    """Ping-pong's speed over the cooperative kernel's (both 1x1) on 8192 x 8192 x K, per K.

    ``fixed_clock``: the parsed ``experiment_schedules_fixed_clock*.json`` (Nsight Compute, SM
    clock locked); ``sustained``: ``{dtype: {shape: BenchResult}}``, result sets of
    ``benchmarks/schedules.py`` (700 W cap); ``row``: the ping-pong row (``"ping-pong 64x256"``:
    the 4-stage ring, ``"ping-pong 64x256 S=5"``: 5 stages). Returns
    ``{"<dtype> <how>": [(K, ratio), ...]}``.
    """
    series: dict[str, list[tuple[int, float]]] = {}
    for dt in ("float16", "bfloat16"):
        rows = [r for r in fixed_clock["rows"] if r["dtype"] == dt and r["m"] == r["n"] == 8192
                and r["kernel"] == row]
        series[f"{dt} fixed clock"] = sorted((r["k"], r["vs_cooperative"]) for r in rows)
        points = {}
        for res in sustained.get(dt, {}).values():
            p = res.params
            if p["m"] == p["n"] == 8192 and any(r.name == row for r in res.rows):
                points[p["k"]] = res.row(row).tflops / res.row("persistent 128x256").tflops
        series[f"{dt} at the power cap"] = sorted(points.items())
    return series


def test_pingpong_vs_cooperative_series_from_synthetic_results():
    """The series divides ping-pong by the cooperative kernel per K, keeps only 8192 x 8192,
    and sorts by K, for both the fixed-clock rows and the sustained result sets."""
    from cutecourse import bench

    def result(m, n, k, pp, coop):
        rows = [bench.Row("ping-pong 64x256", 1.0, [1.0], tflops=pp, ratio=1.0),
                bench.Row("persistent 128x256", 1.0, [1.0], tflops=coop, ratio=1.0)]
        return bench.BenchResult("t", bench.Work(flops=1), "persistent 128x256", rows,
                                 params={"m": m, "n": n, "k": k})

    fixed = {"rows": [{"dtype": "float16", "m": 8192, "n": 8192, "k": k, "kernel": name, "vs_cooperative": r}
                      for k, r in [(2048, 1.04), (512, 1.13)]
                      for name in ("ping-pong 64x256", "persistent 128x256")]
             + [{"dtype": "float16", "m": 4096, "n": 4096, "k": 1024, "kernel": "ping-pong 64x256",
                 "vs_cooperative": 9.0}]}
    sustained = {"float16": {"a": result(8192, 8192, 1024, 600.0, 800.0),
                             "b": result(8192, 8192, 512, 500.0, 500.0),
                             "c": result(4096, 4096, 1024, 1.0, 100.0)}}
    series = pingpong_vs_cooperative(fixed, sustained)
    assert series["float16 fixed clock"] == [(512, 1.13), (2048, 1.04)]
    assert series["float16 at the power cap"] == [(512, 1.0), (1024, 0.75)]
    assert series["bfloat16 fixed clock"] == [] and series["bfloat16 at the power cap"] == []


def test_pingpong_vs_cooperative_on_the_committed_measurements():
    """The committed H100 files: at a fixed clock ping-pong leads where K is small and trails at
    K = 8192 (what notebook 06 says); the series covers K = 512 .. 8192."""
    import json

    from cutecourse import bench

    fixed = json.loads((bench.RESULTS_DIR / "experiment_schedules_fixed_clock.json").read_text())
    sustained = {dt: {**bench.load_set(f"schedules_{dt}_small_k"), **bench.load_set(f"schedules_{dt}_noattr_full")}
                 for dt in ("float16", "bfloat16")}
    series = pingpong_vs_cooperative(fixed, sustained)
    for dt in ("float16", "bfloat16"):
        at_fixed = dict(series[f"{dt} fixed clock"])
        assert sorted(at_fixed) == [512, 1024, 2048, 4096, 8192]
        assert at_fixed[512] > 1.0 > at_fixed[8192]
        assert sorted(dict(series[f"{dt} at the power cap"])) == [512, 1024, 2048, 8192]
