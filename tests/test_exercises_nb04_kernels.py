"""Notebook 04's kernel exercises and lab: the solutions (read from the solution notebook) pass, and
so do other correct ways to write them; wrong loops and states are rejected with a message that
names the mistake; a compile error names the learner's line."""

import pytest

from cutecourse.exercises import nb04
from solution_cells import SolutionCells

CELLS = SolutionCells("04_compiler_pipelining.ipynb", ("MyPipelined", "MyState"))
learner = CELLS.learner


COPY = "            self.load(ring, loads, prod, pred=producer_only)  # the copy at the top level\n"
ACQUIRE = ("            if is_producer:  # barrier bookkeeping may stay under the if\n"
           "                ring.producer_acquire(prod)\n")


def test_the_pipelined_solution_passes():
    r = nb04.check_pipelined(learner("MyPipelined"))
    assert r, r.message
    assert "pipelined: True" in r.message and "Not checked here" in r.message


def test_the_load_given_the_consumer_state_passes():
    """cons and prod differ only in the phase, which a TMA load does not use: the same copy."""
    r = nb04.check_pipelined(learner("MyPipelined", ("self.load(ring, loads, prod, pred",
                                                     "self.load(ring, loads, cons, pred")))
    assert r, r.message


def test_a_predicate_built_in_the_loop_passes():
    r = nb04.check_pipelined(learner("MyPipelined", (
        COPY, "            pred = cute.make_rmem_tensor((1,), cutlass.Boolean)\n"
              "            pred[0] = is_producer\n"
              "            self.load(ring, loads, prod, pred=pred)\n")))
    assert r, r.message


@pytest.mark.parametrize("edits, words", [
    # the starting point: the copy inside `if is_producer`
    ([(ACQUIRE + COPY, "            if is_producer:\n                ring.producer_acquire(prod)\n"
                       "                self.load(ring, loads, prod)\n")], "did not pipeline"),
    # the copy at the top level but unpredicated: every warp issues it
    ([("pred=producer_only)", ")")], "every warp"),
    # a predicate that is True in every warp
    ([("producer_only[0] = is_producer", "producer_only[0] = True")], "predicate is True in every warp"),
    # a predicate that is False in warp 0 too: nothing is loaded
    ([("producer_only[0] = is_producer", "producer_only[0] = False")], "predicate is False in warp 0"),
    # the predicate inverted
    ([("producer_only[0] = is_producer", "producer_only[0] = not is_producer")], "predicate"),
    # no producer_acquire: nothing arms the full barrier
    ([(ACQUIRE, "")], "before its producer_acquire"),
    # producer_acquire moved out of the `if` with the copy: every warp arms the full barrier
    ([(ACQUIRE, "            ring.producer_acquire(prod)\n")], "producer_acquire in every warp"),
    # a Boolean for pred=, not a predicate tensor: the DSL's error, with what pred= takes
    ([("pred=producer_only)", "pred=is_producer)")], "one-element Boolean register tensor"),
    # the copy before the acquire: the stage is not yet free, its barrier not armed
    ([(ACQUIRE + COPY, COPY + ACQUIRE)], "before its producer_acquire"),
    # the producer's state given to the copy, the consumer's to the acquire
    ([("ring.producer_acquire(prod)", "ring.producer_acquire(cons)")], "producer_acquire is given"),
    # the acquire and the load of the next k-tile's stage
    ([("ring.producer_acquire(prod)", "ring.producer_acquire(pipeline.PipelineState(self.stages, k + 1, "
       "(k + 1) % self.stages, ((k + 1) // self.stages) % 2 ^ 1))")], "k = 0 your producer"),
    # prefetch_stages dropped: nothing to pipeline
    ([("cutlass.range(k_tiles, prefetch_stages=self.prefetch, unroll=1)",
       "cutlass.range(k_tiles, unroll=1)")], "Keep prefetch_stages="),
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
    assert "Not checked here" in r.message


def test_a_state_written_another_way_passes():
    r = nb04.check_state_in_kernel(learner("MyState", (
        "phase ^ 1)", "1 - phase)")))
    assert r, r.message


@pytest.mark.parametrize("edits, words", [
    ([("phase ^ 1)", "phase)")], "your producer state (count, index, phase) is (0, 0, 0)"),  # same phase for both
    ([("(k // self.stages) % 2", "0")], "at k = 4 your producer state"),  # the phase never flips
    ([("stage, phase = k % self.stages", "stage, phase = k // self.stages")], "stage k % stages"),
    # the phase flips every iteration, not every lap of the ring
    ([("(k // self.stages) % 2", "k % 2")], "at k = 1 your producer state"),
    # the producer's phase never flips
    ([("phase ^ 1)", "1)")], "at k = 4 your producer state"),
    # the states swapped in the return
    ([("        return cons, prod", "        return prod, cons")], "That is the consumer's state"),
    # the stage one ahead
    ([("stage, phase = k % self.stages", "stage, phase = (k + 1) % self.stages")], "at k = 0 your consumer state"),
    # count left at 0
    ([("PipelineState(self.stages, k, stage, phase)\n", "PipelineState(self.stages, 0, stage, phase)\n")],
     "at k = 1 your consumer state"),
    # the states not returned
    ([("        return cons, prod", "        pass")], "return cons, prod"),
])
def test_state_mistakes_are_named(edits, words):
    r = nb04.check_state_in_kernel(learner("MyState", *edits))
    assert not r and words in r.message, r.message


def test_a_state_compile_error_names_the_line():
    r = nb04.check_state_in_kernel(learner("MyState", ("PipelineState(self.stages, k, stage, phase)\n",
                                                       "PipelineState(self.stages, k, stage)\n")))
    assert not r and "line 5 of your cell" in r.message, r.message


def test_the_prefetch_lab():
    r = nb04.check_prefetch_lab(4, False)
    assert not r and "hangs" in r.message, r.message
    r = nb04.check_prefetch_lab(2, True)
    assert not r and "runs it" in r.message, r.message
    for p, hangs, words in [(3.5, False, "whole number"), ("3", False, "whole number"),
                            (0, False, "whole number"), (3, "no", "predict True")]:
        r = nb04.check_prefetch_lab(p, hangs)
        assert not r and words in r.message, r.message
    r = nb04.check_prefetch_lab(3, False)
    assert r and "P=3" in r.message and "P=2" in r.message and "Nothing was run or timed" in r.message, r.message
    r = nb04.check_prefetch_lab(4, True)
    assert r and "right: prefetch_stages=4 deadlocks" in r.message, r.message


@pytest.mark.gpu
def test_the_pipelined_loop_runs_against_torch_on_the_gpu():
    r = nb04.check_pipelined(learner("MyPipelined"))
    assert r and "matches torch" in r.message, r.message
