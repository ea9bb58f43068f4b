"""Notebook 03's kernel exercises: the solutions (read from the solution notebook) pass; typical
wrong mainloops are rejected with a message that names the mistake; a compile error names the line."""

import pytest

from cutecourse.exercises import nb03
from solution_cells import SolutionCells

CELLS = SolutionCells("03_hopper_gemm_prefetch.ipynb", ("MyConsumer", "MyPrologue"))
learner = CELLS.learner


def test_the_consumer_solution_passes():
    r = nb03.check_consumer(learner("MyConsumer"))
    assert r, r.message
    assert "wait_group 1" in r.message and "CPU model" in r.message


@pytest.mark.parametrize("edits, words", [
    # released before the wgmmas reading it are known to be done
    ([("            warpgroup.wait_group(1)  # k-1's group is done; k's keeps the tensor cores busy\n", ""),
      ("                released.advance()\n", "                released.advance()\n            warpgroup.wait_group(1)\n")],
     "releases the stage before the wait_group"),
    # wait_group(0): correct but no overlap
    ([("warpgroup.wait_group(1)", "warpgroup.wait_group(0)")], "wait_group(1)"),
    # no consumer_wait: the MMAs read a stage whose bytes may not have landed
    ([("            ring.consumer_wait(cons)  # k-tile k has landed in stage cons.index\n", "")],
     "before any mbarrier wait"),
    # the current stage released instead of k-1's
    ([("ring.consumer_release(released)\n                released.advance()",
       "ring.consumer_release(cons)\n                released.advance()")], "hangs"),
    # wait_group(2): k-1's group may still run when its stage is released
    ([("warpgroup.wait_group(1)", "warpgroup.wait_group(2)")], "a race"),
    # cons never advances: every wait is on stage 0
    ([("            cons.advance()\n", "")], "cons.advance()"),
    # released never advances: every release goes to stage 0
    ([("                released.advance()\n", "")], "released.advance()"),
    # k-tile k's own stage released at k = 0 (no `if k > 0`)
    ([("            if k > 0:  # k-1's stage is no longer read: the producer may refill it\n"
       "                ring.consumer_release(released)\n                released.advance()",
       "            ring.consumer_release(released)\n            released.advance()")], "k-tile k-1"),
    # the drain's release left out: the last stage is never handed back
    ([("            ring.consumer_release(released)\n        # END", "            pass\n        # END")],
     "releases 7 stage(s)"),
    # no drain: the epilogue would read accumulators still being written
    ([("        warpgroup.wait_group(0)  # the last", "        # the last")], "wait_group(0) after the loop"),
])
def test_consumer_mistakes_are_named(edits, words):
    r = nb03.check_consumer(learner("MyConsumer", *edits))
    assert not r and words in r.message, r.message


def test_a_consumer_compile_error_names_the_line():
    r = nb03.check_consumer(learner("MyConsumer", ("warpgroup.wait_group(1)", "warpgroup.wait_group(k)")))
    assert not r and "line 15 of your cell" in r.message and "wait_group(k)" in r.message, r.message
    assert "MLIR" not in r.message and "Traceback" not in r.message and len(r.message) < 400


def test_the_stub_is_not_answered_yet():
    r = nb03.check_consumer(learner("MyConsumer", ("            ring.consumer_wait(cons)  # k-tile",
                                                   "            raise NotImplementedError()\n            # k-tile")))
    assert not r and "not answered yet" in r.message


def test_the_prologue_solution_passes():
    r = nb03.check_prologue(learner("MyPrologue"))
    assert r, r.message
    assert "wait, expect_tx, tma x2" in r.message


@pytest.mark.parametrize("edits, words", [
    ([("cutlass.min(self.stages - 1, k_tiles)", "cutlass.min(self.stages, k_tiles)")],
     "producer_acquire waits on empty[0]"),
    ([("cutlass.min(self.stages - 1, k_tiles)", "self.stages - 1")], "past the last one"),
    ([("                self._load(ring, loads, prod)\n                prod.advance()\n        for k",
       "                self._load(ring, loads, prod)\n        for k")], "hangs"),
    ([("cutlass.min(self.stages - 1, k_tiles)", "cutlass.min(1, k_tiles)")], "hides more TMA latency"),
    # every warp runs the prologue (no `if is_producer:`)
    ([("        if is_producer:\n            for _ in", "        if True:\n            for _ in")],
     "if is_producer:"),
])
def test_prologue_mistakes_are_named(edits, words):
    r = nb03.check_prologue(learner("MyPrologue", *edits))
    assert not r and words in r.message, r.message


def test_a_prologue_compile_error_names_the_line():
    r = nb03.check_prologue(learner("MyPrologue", ("ring.producer_acquire(prod)\n                self._load",
                                                   "ring.producer_acquire()\n                self._load")))
    assert not r and "line 9 of your cell" in r.message and "producer_acquire()" in r.message, r.message


def test_the_stages_lab_checks_the_prediction_and_measures():
    assert not nb03.check_stages_lab(2, 128)
    for wrong in (1, 5, 2.0):
        r = nb03.check_stages_lab(wrong, 48 * wrong)
        assert not r and "whole number from 2 to 4" in r.message, r.message
    r = nb03.check_stages_lab(2, 96)
    assert r, r.message
    assert "2 stages" in r.message and "4 stages" in r.message and "registers" in r.message


@pytest.mark.gpu
def test_the_consumer_runs_against_torch_on_the_gpu():
    r = nb03.check_consumer(learner("MyConsumer"))
    assert r and "matches torch" in r.message and "course kernel" in r.message, r.message
