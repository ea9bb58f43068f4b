"""The step-by-step comparison of a learner's mainloop with the course's (no compile: fast).

The exercises' parts are the course kernel's own hooks, replayed without a hang or race; a part
changed into a typical mistake parts from them at the step that shows it, and the message says
where."""

import pytest

from cutecourse.exercises.kernel_parts import CompilerParts, PrefetchParts
from cutecourse.exercises.learner_code import LearnerCode
from cutecourse.exercises.pipeline_replay import replay
from cutecourse.exercises.replay_compare import COMPARE_RUNS, first_mistake
from cutecourse.kernels.hopper_gemm import CompilerHopperGemm, HopperGemm, OverlapCompilerHopperGemm
from solution_cells import SolutionCells

CELLS = SolutionCells("03_hopper_gemm_prefetch.ipynb", ("MyConsumer", "MyPrologue"))


def _ops(trace):
    return [(op, arg) for op, arg, _ in trace.calls if op != "enter"]


@pytest.mark.parametrize("stages, k_tiles", COMPARE_RUNS)
def test_the_parts_are_the_course_kernels_own_hooks(stages, k_tiles):
    assert PrefetchParts is HopperGemm and CompilerParts is CompilerHopperGemm  # no copies
    for kernel in (HopperGemm, CompilerHopperGemm, OverlapCompilerHopperGemm):
        trace = replay(kernel, stages, k_tiles)  # the parts, followed through the hooks
        assert trace.deadlock is None and not trace.hazards, kernel
        assert sorted(c[1][0] for c in trace.calls if c[0] == "consumer_release") == list(range(k_tiles))
        assert any(c[0] == "enter" for c in trace.calls)


def test_the_solutions_agree_with_the_course():
    for name in ("MyConsumer", "MyPrologue"):
        assert first_mistake(CELLS.learner(name), PrefetchParts) is None


def test_a_drain_past_the_last_k_tile_is_named_at_the_learners_line():
    cls = CELLS.learner("MyConsumer", ("        if k_tiles > 0:\n            ring.consumer_release(released)",
                                       "        if k_tiles > 0:\n            released.advance()\n"
                                       "            ring.consumer_release(released)"))
    text = first_mistake(cls, PrefetchParts, code=LearnerCode(cls))
    assert "after the loop" in text and "k-tile 8 does not exist" in text and "never released" in text
    assert "line 18 of your cell" in text, text


def test_an_unguarded_drain_release_is_named():
    cls = CELLS.learner("MyConsumer", ("        if k_tiles > 0:\n            ring.consumer_release(released)",
                                       "        ring.consumer_release(released)"))
    text = first_mistake(cls, PrefetchParts)
    assert "0 k-tile(s)" in text and "if k_tiles > 0" in text, text


def test_a_release_of_another_index_with_the_right_stage_is_the_same_release():
    """A release acts on its stage's empty barrier only: a state with another count is the same."""
    cls = CELLS.learner("MyConsumer", ("            ring.consumer_release(released)\n            released.advance()",
                                       "            ring.consumer_release(pipeline.PipelineState(self.stages, k + "
                                       "self.stages - 1, released.index, released.phase))\n"
                                       "            released.advance()"))
    assert first_mistake(cls, PrefetchParts) is None
