"""Checkers of notebooks 03 and 04: right answers pass, each kind of wrong answer fails usefully."""

import pytest

from cutecourse.exercises import nb03, nb04

GOOD = ["producer_acquire", "tma_load", "producer_commit", "consumer_wait", "wgmma",
        "commit_group", "wait_group", "consumer_release"]


def test_loop_order_right():
    assert nb03.check_loop_order(GOOD)
    assert nb03.check_loop_order([s for s in GOOD if s != "producer_commit"])  # a no-op for TMA


@pytest.mark.parametrize("order,words", [
    (["consumer_wait"] + [s for s in GOOD if s != "consumer_wait"], "hangs: consumer_wait"),
    (GOOD[:6] + ["consumer_release", "wait_group"], "races"),
    ([s for s in GOOD if s != "consumer_release"], "never calls"),
    (GOOD[:3] + ["wgmma", "consumer_wait"] + GOOD[5:], "consumer_wait must come first"),
    (GOOD + ["tma_copy"], "unknown step"),
])
def test_loop_order_wrong(order, words):
    r = nb03.check_loop_order(order)
    assert not r and words in r.message


def test_phase():
    assert nb03.check_phase(lambda user, stages, n: (user == "producer") ^ ((n // stages) % 2))
    r = nb03.check_phase(lambda user, stages, n: (n // stages) % 2)  # forgot the producer's start
    assert not r and "producer" in r.message
    r = nb03.check_phase(lambda user, stages, n: n % 2)  # flips every advance
    assert not r


def test_stages():
    assert nb03.check_stages(lambda m, n, k, eb, budget, res: (budget - res) // ((m + n) * k * eb))
    r = nb03.check_stages(lambda m, n, k, eb, budget, res: budget // ((m + n) * k * eb))
    assert not r and "gives" in r.message  # forgot the reserved bytes
    assert not nb03.check_stages(lambda m, n, k, eb, budget, res: (budget - res) // (m * n * eb))


def test_unanswered_is_a_red_box_not_a_traceback():
    r = nb03.check_phase(lambda user, stages, n: ...)
    assert not r and "not answered" in r.message
    assert "not answered" in nb03.check_loop_order([...]).message  # the exercise's stub
    assert not nb04.check_prefetch_stages(..., on_gpu=False)


def test_minimal_state():
    assert nb04.check_minimal_state(lambda k, s: (k % s, (k // s) % 2, 1 - (k // s) % 2))
    r = nb04.check_minimal_state(lambda k, s: (k % s, k % 2, 1 - k % 2))
    assert not r and "k=1" in r.message
    assert not nb04.check_minimal_state(lambda k, s: (k % s, (k // s) % 2, (k // s) % 2))


@pytest.mark.parametrize("stages", [2, 4, 7])
def test_prefetch_stages(stages):
    assert nb04.check_prefetch_stages(stages - 1, stages, on_gpu=False)
    r = nb04.check_prefetch_stages(stages, stages, on_gpu=False)
    assert not r and "hangs" in r.message and "empty[0]" in r.message
    r = nb04.check_prefetch_stages(stages - 2, stages, on_gpu=False)
    assert not r and "not the deepest" in r.message
    assert not nb04.check_prefetch_stages(-1, stages, on_gpu=False)


def test_isolated_run_reports_a_hang_instead_of_hanging():
    run = nb04.run_isolated("import time; print('started', flush=True); time.sleep(30)", timeout=3)
    assert run.status == "hang" and "started" in run.output
    assert nb04.run_isolated("raise SystemExit(3)").status == "error"
    assert nb04.run_isolated("print('fine')").output.strip() == "fine"


def test_hang_explanation_names_the_barrier():
    text = nb04._hang_explanation(4, 4)
    assert "empty[0]" in text and "never flips" in text


@pytest.mark.gpu("sm_90a")
def test_prefetch_stages_on_the_gpu():
    r = nb04.check_prefetch_stages(3, 4, on_gpu=True, timeout=300)
    assert r, r.message
    assert "matched torch" in r.message
