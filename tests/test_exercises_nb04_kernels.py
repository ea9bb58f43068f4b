"""Notebook 04's kernel exercises and lab: the solutions (read from the solution notebook) pass;
typical wrong loops are rejected with a message that names the mistake; a compile error names the
learner's line."""

import pytest

from cutecourse.exercises import nb04
from solution_cells import SolutionCells

CELLS = SolutionCells("04_compiler_pipelining.ipynb", ("MyPipelined", "MyState"))
learner = CELLS.learner


COPY = "            self._load(ring, loads, prod, pred=producer_only)  # the copy at the top level\n"
ACQUIRE = ("            if is_producer:  # barrier bookkeeping may stay under the if\n"
           "                ring.producer_acquire(prod)\n")


#: MyState with its states made once and advance()d each iteration (a loop-carried state)
CARRIED = [
    ("        for k in cutlass.range(k_tiles, prefetch_stages=self.prefetch, unroll=1):\n",
     "        cons = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)\n"
     "        prod = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)\n"
     "        for k in cutlass.range(k_tiles, prefetch_stages=self.prefetch, unroll=1):\n"),
    ("            stage, phase = k % self.stages, (k // self.stages) % 2\n"
     "            cons = pipeline.PipelineState(self.stages, k, stage, phase)\n"
     "            prod = pipeline.PipelineState(self.stages, k, stage, phase ^ 1)  # empty barriers start free\n", ""),
    ("            ring.consumer_release(cons)",
     "            ring.consumer_release(cons)\n            cons.advance()\n            prod.advance()"),
]



def test_the_pipelined_solution_passes():
    r = nb04.check_pipelined(learner("MyPipelined"))
    assert r, r.message
    assert "pipelined: True" in r.message


@pytest.mark.parametrize("edits, words", [
    # the starting point: the copy inside `if is_producer`
    ([(ACQUIRE + COPY, "            if is_producer:\n                ring.producer_acquire(prod)\n"
                       "                self._load(ring, loads, prod)\n")], "did not pipeline"),
    # the copy at the top level but unpredicated: every warp issues it
    ([("pred=producer_only)", ")")], "every warp"),
    # no producer_acquire: nothing arms the full barrier
    ([(ACQUIRE, "")], "hangs"),
    # producer_acquire moved out of the `if` with the copy: every warp arms the full barrier
    ([(ACQUIRE, "            ring.producer_acquire(prod)\n")], "producer_acquire in every warp"),
    # a Boolean for pred=, not a predicate tensor: the DSL's error, with what pred= takes
    ([("pred=producer_only)", "pred=is_producer)")], "one-element Boolean register tensor"),
    # the copy before the acquire: the stage is not yet free, its barrier not armed
    ([(ACQUIRE + COPY, COPY + ACQUIRE)], "before its producer_acquire"),
])
def test_pipelining_mistakes_are_named(edits, words):
    r = nb04.check_pipelined(learner("MyPipelined", *edits))
    assert not r and words in r.message, r.message


def test_a_pipelining_compile_error_names_the_line():
    r = nb04.check_pipelined(learner("MyPipelined", ("producer_only[0] = is_producer",
                                                     "producer_only[0] = is_producr")))
    assert not r and "line 5 of your cell" in r.message and "is_producr" in r.message, r.message
    assert "MLIR" not in r.message and "Traceback" not in r.message and len(r.message) < 400


def test_the_state_solution_passes():
    r = nb04.check_state_in_kernel(learner("MyState"))
    assert r, r.message


@pytest.mark.parametrize("edits, words", [
    ([("phase ^ 1)", "phase)")], "your producer state (count, index, phase) is (0, 0, 0)"),  # same phase for both
    ([("(k // self.stages) % 2", "0")], "at k = 4 your producer state"),  # the phase never flips
    ([("stage, phase = k % self.stages", "stage, phase = k // self.stages")], "stage k % stages"),
    # the phase flips every iteration, not every lap of the ring
    ([("(k // self.stages) % 2", "k % 2")], "at k = 1 your producer state"),
    # the producer's phase never flips
    ([("phase ^ 1)", "1)")], "at k = 4 your producer state"),
])
def test_state_mistakes_are_named(edits, words):
    r = nb04.check_state_in_kernel(learner("MyState", *edits))
    assert not r and words in r.message, r.message


def test_a_carried_state_is_not_the_answer():
    """advance() instead of the state from k: the pipeliner of this DSL takes it (no diagnostic,
    a pipelined loop), but it is not what the exercise asks for, and the check says so."""
    r = nb04.check_state_in_kernel(learner("MyState", *CARRIED))
    assert not r and "carries `cons`" in r.message and "from k alone" in r.message, r.message


@pytest.mark.gpu
def test_a_carried_state_pipelines_correctly_on_the_gpu():
    """Notebook 04 says 4.8.1's pass also pipelines a state carried by advance(): this runs that
    loop, pipelined, against torch (in a child with a timeout)."""
    from cutecourse.exercises import kernel_check as kc

    cls = learner("MyState", *CARRIED)
    run = kc.run_on_gpu(kc.LearnerCode(cls), "MyState(tile_mn=(128, 256), variant='compiler')",
                        baseline="HopperGemm(tile_mn=(128, 256), variant='compiler')")
    assert run.ok and "matches torch" in run.message, run.message


def test_a_state_compile_error_names_the_line():
    r = nb04.check_state_in_kernel(learner("MyState", ("PipelineState(self.stages, k, stage, phase)\n",
                                                       "PipelineState(self.stages, k, stage)\n")))
    assert not r and "line 8 of your cell" in r.message, r.message


def test_the_prefetch_lab():
    assert not nb04.check_prefetch_lab(4, False)
    for p, hangs, words in [(3.5, False, "whole number"), ("3", False, "whole number"),
                            (0, False, "whole number"), (3, "no", "predict True")]:
        r = nb04.check_prefetch_lab(p, hangs)
        assert not r and words in r.message, r.message
    r = nb04.check_prefetch_lab(3, False)
    assert r and "P=3" in r.message and "P=2" in r.message, r.message


@pytest.mark.gpu
def test_the_pipelined_loop_runs_against_torch_on_the_gpu():
    r = nb04.check_pipelined(learner("MyPipelined"))
    assert r and "matches torch" in r.message, r.message
