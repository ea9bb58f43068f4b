"""The pipeline widget and picture, driven without a browser."""

import matplotlib

matplotlib.use("Agg")

from cutecourse.models import pipeline as pm  # noqa: E402
from cutecourse.viz import pipeline as vp  # noqa: E402


def test_widget_steps_and_recomputes():
    w = vp.PipelineWidget("prefetch", stages=3, k_tiles=6, render=False)
    n = len(w.trace.events)
    assert w.step.max == n - 1
    w.move(+1)
    w.move(+1)
    assert w.step.value == 2
    w.move(-5)
    assert w.step.value == 0  # clamped
    w.step.value = w.step.max
    assert "done at" in w.status.value
    w.variant.value = "naive"  # recomputes the run, keeps the step in range
    assert w.trace.variant == "naive" and w.step.value <= w.step.max
    w.stages.value = 2
    assert w.trace.stages == 2 and len(w.event.stages) == 2


def test_widget_reports_deadlock():
    w = vp.PipelineWidget("compiler", stages=3, k_tiles=8, prefetch=3, render=False)
    w.step.value = w.step.max
    assert "deadlocks" in w.status.value and "empty[0]" in w.status.value
    assert w.event.op == "deadlock"


def test_widget_renders_into_output():
    w = vp.PipelineWidget("naive", stages=2, k_tiles=3, render=True)
    w.move(+3)
    box = w.show()
    assert w.out in box.children


def test_draw_state_marks_stages_and_pointers():
    t = pm.simulate("prefetch", 4, 8)
    e = next(e for e in t.events if e.op == "consumer_wait")
    ax = vp.draw_state(e)
    texts = [x.get_text() for x in ax.texts]
    assert any("k-tile 0" in s for s in texts)
    assert any(s.startswith("producer (count") for s in texts)
    assert any(s.startswith("consumer (count") for s in texts)
    assert len(ax.patches) >= 4  # the four stage boxes (plus the two pointer arrows)


def test_picture_includes_deadlock_panel():
    fig = vp.picture("prefetch", 3, 8, prefetch=3)
    titles = [ax.get_title() for ax in fig.axes]
    assert any("DEADLOCK" in t for t in titles)


def test_dataflow_shows_the_stage_sizes():
    ax = vp.draw_dataflow((128, 256, 64), stages=4)
    text = " ".join(t.get_text() for t in ax.texts)
    assert "16 KiB" in text and "32 KiB" in text and "48 KiB" in text  # A, B, one stage
    assert "128 per thread" in text  # 128*256 fp32 accumulators over 256 threads
