"""Notebook 03's kernel exercises: the solutions (read from the solution notebook) pass, and so do
other correct ways to write them; wrong parts of the prefetch mainloop are rejected with a message
that names the mistake (the stage, the k-tile, where in the loop); a compile error names the line."""

import pytest

from cutecourse.exercises import nb03
from solution_cells import SolutionCells

CELLS = SolutionCells("03_hopper_gemm_prefetch.ipynb", ("MyConsumer", "MyPrologue"))
learner = CELLS.learner

WAIT = "        ring.consumer_wait(cons)  # k-tile k has landed in stage cons.index\n"
MMA = "        sm90.issue_mma(mma, cons.index)  # its wgmmas: one committed group\n"
GROUP = "        warpgroup.wait_group(1)  # k-1's group is done; k's keeps the tensor cores busy\n"
ADVANCE = "        cons.advance()\n"
RELEASE = ("        if k > 0:  # k-1's stage is no longer read: the producer may refill it\n"
           "            ring.consumer_release(released)\n            released.advance()\n")
DRAIN = ("        warpgroup.wait_group(0)  # the last k-tile's MMAs: the epilogue reads the accumulators\n"
         "        if k_tiles > 0:\n            ring.consumer_release(released)  # the last k-tile's stage\n")


def test_the_consumer_solution_passes():
    r = nb03.check_consumer(learner("MyConsumer"))
    assert r, r.message
    assert "wait_group 1" in r.message and "CPU model" in r.message and "Not checked here" in r.message


@pytest.mark.parametrize("edits", [
    [("sm90.issue_mma(mma, cons.index)", "sm90.issue_mma(mma, k % self.stages)")],  # the index from k
    [(MMA + GROUP + ADVANCE, "        stage = cons.index\n        cons.advance()\n"
      "        sm90.issue_mma(mma, stage)\n" + GROUP)],  # advance first, the stage kept
    [("if k > 0:", "if k >= 1:")],
])
def test_other_correct_consumers_pass(edits):
    r = nb03.check_consumer(learner("MyConsumer", *edits))
    assert r, r.message


@pytest.mark.parametrize("edits, words", [
    # the drain releases a state advanced past the last k-tile (what releasing `cons` does)
    ([("        if k_tiles > 0:\n            ring.consumer_release(released)",
       "        if k_tiles > 0:\n            released.advance()\n            ring.consumer_release(released)")],
     "does not exist"),
    # the drain's release without `if k_tiles > 0`
    ([("        if k_tiles > 0:\n            ring.consumer_release(released)",
       "        ring.consumer_release(released)")], "if k_tiles > 0"),
    # the wait on the wrong state: `released` instead of `cons`
    ([("ring.consumer_wait(cons)", "ring.consumer_wait(released)")], "waits on stage 0"),
    # the MMAs read the wrong stage
    ([("sm90.issue_mma(mma, cons.index)", "sm90.issue_mma(mma, released.index)")], "your wgmmas read stage 0"),
    # the MMAs read the next stage: cons advanced before issue_mma
    ([(MMA + GROUP + ADVANCE, ADVANCE + MMA + GROUP)], "your wgmmas read stage 1"),
    # advance before the wait: k-tile 0 is waited for in stage 1
    ([(WAIT, ADVANCE + WAIT), (GROUP + ADVANCE, GROUP)], "k-tile 0 lies in stage 0"),
    # the current stage released instead of k-1's
    ([("ring.consumer_release(released)\n            released.advance()",
       "ring.consumer_release(cons)\n            released.advance()")], "may still run"),
    # released before the wait_group that proves its wgmmas are done
    ([(GROUP + ADVANCE + RELEASE, ADVANCE + RELEASE + GROUP)], "before the wait_group"),
    # wait_group(0) in the loop: correct but no overlap
    ([("warpgroup.wait_group(1)", "warpgroup.wait_group(0)")], "wait_group(1)"),
    # wait_group(2): k-1's group may still run when its stage is released
    ([("warpgroup.wait_group(1)", "warpgroup.wait_group(2)")], "a race"),
    # cons never advances
    ([(ADVANCE, "")], "Wait on `cons` and advance it"),
    # released never advances: k-tile 0's stage released again
    ([("            released.advance()\n", "")], "already released"),
    # no `if k > 0`: a release at k = 0
    ([(RELEASE, "        ring.consumer_release(released)\n        released.advance()\n")], "at k = 0"),
    # `if k > 1`: k-tile 0's stage is never released in the loop
    ([("if k > 0:", "if k > 1:")], "does not release stage 0"),
    # the drain's release left out
    ([("        if k_tiles > 0:\n            ring.consumer_release(released)  # the last k-tile's stage\n",
       "        pass\n")], "after the loop your loop does not release"),
    # no wait_group(0) in the drain
    ([("        warpgroup.wait_group(0)  # the last", "        # the last")], "wait_group"),
    # wait_group(1) in the drain: the last group still runs
    ([("        warpgroup.wait_group(0)  # the last", "        warpgroup.wait_group(1)  # the last")],
     "leaves the last k-tile's wgmmas running"),
    # the states not handed back
    ([("        return cons, released\n", "")], "return cons, released"),
])
def test_consumer_mistakes_are_named(edits, words):
    r = nb03.check_consumer(learner("MyConsumer", *edits))
    assert not r and words in r.message, r.message


def test_a_consumer_compile_error_names_the_line():
    r = nb03.check_consumer(learner("MyConsumer", ("warpgroup.wait_group(1)", "warpgroup.wait_group(k)")))
    assert not r and "line 6 of your cell" in r.message and "wait_group(k)" in r.message, r.message
    assert "MLIR" not in r.message and "Traceback" not in r.message and len(r.message) < 400


def test_the_stub_is_not_answered_yet():
    r = nb03.check_consumer(learner("MyConsumer", (WAIT, "        raise NotImplementedError()\n" + WAIT)))
    assert not r and "not answered yet" in r.message


def test_the_prologue_solution_passes():
    r = nb03.check_prologue(learner("MyPrologue"))
    assert r, r.message
    assert "wait, expect_tx, tma x2" in r.message and "Not checked here" in r.message


@pytest.mark.parametrize("edits, words", [
    ([("cutlass.min(self.stages - 1, k_tiles)", "cutlass.min(self.stages, k_tiles)")], "stages - 1"),
    ([("cutlass.min(self.stages - 1, k_tiles)", "self.stages - 1")], "past the last one"),
    # prod never advances: k-tile 0 acquired again
    ([("                prod.advance()\n", "")], "Advance `prod`"),
    ([("cutlass.min(self.stages - 1, k_tiles)", "cutlass.min(1, k_tiles)")], "hides more TMA latency"),
    # every warp runs the prologue (no `if is_producer:`)
    ([("        if is_producer:\n", "        if True:\n")], "if is_producer:"),
    # the load before the acquire
    ([("                ring.producer_acquire(prod)\n                self.load(ring, loads, prod)\n",
       "                self.load(ring, loads, prod)\n                ring.producer_acquire(prod)\n")],
     "before its producer_acquire"),
    # no acquire at all
    ([("                ring.producer_acquire(prod)\n", "")], "producer_acquire"),
    # two stages fewer: stages - 2
    ([("cutlass.min(self.stages - 1, k_tiles)", "cutlass.min(self.stages - 2, k_tiles)")], "3 fit"),
    # prod not handed back
    ([("        return prod", "        pass")], "return prod"),
])
def test_prologue_mistakes_are_named(edits, words):
    r = nb03.check_prologue(learner("MyPrologue", *edits))
    assert not r and words in r.message, r.message


def test_a_prologue_compile_error_names_the_line():
    r = nb03.check_prologue(learner("MyPrologue", ("ring.producer_acquire(prod)\n                self.load",
                                                   "ring.producer_acquire()\n                self.load")))
    assert not r and "line 6 of your cell" in r.message and "producer_acquire()" in r.message, r.message


def test_the_stages_lab_checks_the_prediction_and_measures():
    for stages, kib, words in [(2, 128, "the ring takes 96 KiB"), (3, 145, "counts the barriers"),
                               (2, "96", "number of KiB"), (3, 48, "144 KiB")]:
        r = nb03.check_stages_lab(stages, kib)
        assert not r and words in r.message, r.message
    for wrong in (1, 5, 2.0):
        r = nb03.check_stages_lab(wrong, 48 * wrong)
        assert not r and "whole number from 2 to 4" in r.message, r.message
    r = nb03.check_stages_lab(2, 96)
    assert r, r.message
    assert "2 stages" in r.message and "4 stages" in r.message and "registers" in r.message
    assert "a 96 KiB ring" in r.message and "barriers" in r.message and "Nothing was timed" in r.message


@pytest.mark.gpu
def test_the_consumer_runs_against_torch_on_the_gpu():
    r = nb03.check_consumer(learner("MyConsumer"))
    assert r and "matches torch" in r.message and "course kernel" in r.message, r.message
