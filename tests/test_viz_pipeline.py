"""The pipeline widget and picture, driven without a browser."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from cutecourse.errors import ShapeError  # noqa: E402
from cutecourse.models import pipeline as pm  # noqa: E402
from cutecourse.viz import pipeline as vp  # noqa: E402
from widget_classes import classes_of  # noqa: E402


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


def test_widget_renders_its_picture_and_displays_as_a_course_widget():
    w = vp.PipelineWidget("naive", stages=2, k_tiles=3, render=True)
    first = w.picture.value
    assert first[:4] == b"\x89PNG"
    w.move(+3)
    assert w.picture.value != first and w.picture in w.widget.children
    assert w.show() is w  # `widget.show()` cells keep working
    bundle = w._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle and "image/png" in bundle
    assert bundle["text/plain"] == "PipelineWidget: naive, 2 stages, 3 k-tiles: " \
        f"{len(w.trace.events)} steps, done at t={w.trace.time:.0f}"
    classes = classes_of([w.widget])
    assert {"cc-pipeline-widget", "cc-picture", "cc-message", "cc-prefetch", "cc-stages",
            "cc-variant", "cc-step", "cc-next"} <= classes


def test_shrinking_the_ring_keeps_a_working_prefetch_depth():
    # Found by driving the widget: prefetch 3 fitted 4 stages; at 2 stages it deadlocked from
    # step 0 without saying why. A depth that fitted is clamped to the new stages - 1.
    w = vp.PipelineWidget("prefetch", stages=4, k_tiles=8, prefetch=3, render=False)
    w.stages.value = 2
    assert w.prefetch.value == 1 and w.prefetch.max == 2
    assert w.trace.deadlock is None and w.trace.prefetch == 1
    w.stages.value = 6  # growing the ring gives back the depth the learner chose
    assert w.prefetch.value == 3 and w.prefetch.max == 6
    w.variant.value = "compiler"
    w.stages.value = 1  # the compiler's depth 0 is the naive order: still runs
    assert w.prefetch.value == 0 and w.trace.deadlock is None


def test_deadlock_on_purpose_follows_the_ring_and_says_why_at_every_step():
    w = vp.PipelineWidget("prefetch", stages=4, k_tiles=8, prefetch=4, render=False)
    assert w.trace.deadlock is not None
    w.stages.value = 3
    assert w.prefetch.value == 3 and w.trace.deadlock is not None
    assert w.step.value == 0
    assert "This run deadlocks at step" in w.status.value
    assert "prefetch 3 = stages 3" in w.status.value
    with pytest.raises(ShapeError, match="prefetch=5 with 4 stages"):
        vp.PipelineWidget("prefetch", stages=4, prefetch=5)


def test_naive_variant_greys_out_the_prefetch_slider():
    w = vp.PipelineWidget("prefetch", stages=4, k_tiles=8, render=False)
    assert not w.prefetch.disabled
    w.variant.value = "naive"
    assert w.prefetch.disabled
    w.variant.value = "compiler"
    assert not w.prefetch.disabled
    assert vp.PipelineWidget("naive", render=False).prefetch.disabled


def test_ordinary_waits_are_calm_deadlocks_red():
    t = pm.simulate("prefetch", 4, 8, prefetch=4)
    blocked = next(e for e in t.events if e.op == "blocked")
    dead = t.events[-1]
    assert dead.op == "deadlock"
    calm = vp.draw_state(blocked).title.get_color()
    red = vp.draw_state(dead).title.get_color()
    assert calm == vp.WAIT_COLOR and red == vp.DEADLOCK_COLOR and calm != red
    w = vp.PipelineWidget("prefetch", stages=4, k_tiles=8, render=False)
    w.step.value = next(i for i, e in enumerate(w.trace.events) if e.op == "blocked")
    assert vp.DEADLOCK_COLOR not in w.status.value and vp.WAIT_COLOR in w.status.value


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


def test_picture_of_a_run_that_deadlocks_at_once_is_one_panel():
    # The compiler loop with prefetch = stages hangs before its first consumer_wait: the only
    # moment to draw is the deadlock, and the figure holds just that panel, no blank half.
    fig = vp.picture("compiler", 4, 12, prefetch=4)
    assert len(fig.axes) == 1 and "DEADLOCK" in fig.axes[0].get_title()


def test_dataflow_shows_the_stage_sizes():
    ax = vp.draw_dataflow((128, 256, 64), stages=4)
    text = " ".join(t.get_text() for t in ax.texts)
    assert "16 KiB" in text and "32 KiB" in text and "48 KiB" in text  # A, B, one stage
    assert "128 per thread" in text  # 128*256 fp32 accumulators over 256 threads


def test_stages_down_to_one_and_back_restore_the_default_run():
    """Moving only the stages slider 4 -> 1 -> 4 ends where it started: the default run, not a
    deadlock (the depth forced at 1 stage is not mistaken for the learner's choice); at 1 stage
    the prefetch loop's readout gives advice the controls can follow."""
    w = vp.PipelineWidget(render=False)  # the notebook's default: prefetch, 4 stages, depth 3
    default = w.describe_run()
    assert w.trace.deadlock is None and w.prefetch.value == 3
    w.stages.value = 1
    assert w.trace.deadlock is not None and w.prefetch.value == 1
    why = w.why_deadlock()
    assert "needs at least 2 stages" in why and "up to 0" not in why
    for stages in (2, 3, 4):  # the slider passes through every value on the way back
        w.stages.value = stages
        assert w.trace.deadlock is None and w.prefetch.value == stages - 1
    assert w.describe_run() == default
    w.variant.value = "compiler"  # the compiler's loop: depth 0 at 1 stage, its depth back at 4
    w.stages.value = 1
    assert w.prefetch.value == 0 and w.trace.deadlock is None
    w.stages.value = 4
    assert w.prefetch.value == 3 and w.trace.deadlock is None


def test_a_depth_the_learner_chose_survives_a_smaller_ring():
    w = vp.PipelineWidget("prefetch", stages=6, k_tiles=8, render=False)
    w.prefetch.value = 2  # the learner's choice
    w.stages.value = 2
    assert w.prefetch.value == 1
    w.stages.value = 8
    assert w.prefetch.value == 2 and w.trace.deadlock is None
    w.prefetch.value = 8  # the deadlock on purpose, then a smaller ring: it follows
    w.stages.value = 5
    assert w.prefetch.value == 5 and w.trace.deadlock is not None


def test_the_readout_says_what_the_depth_means_in_each_loop():
    w = vp.PipelineWidget("compiler", stages=4, k_tiles=8, prefetch=2, render=False)
    assert "most loads in flight 3" in w.status.value and "depth + 1 loads in flight" in w.status.value
    w.variant.value = "naive"
    assert "does not apply" in w.status.value
    w.variant.value = "prefetch"
    assert "prologue" in w.status.value
