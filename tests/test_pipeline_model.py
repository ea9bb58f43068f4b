"""The CPU pipeline model: its state arithmetic against the DSL's, its barriers, its mainloops."""

import pytest

from cutecourse.errors import CourseError, ShapeError
from cutecourse.models import pipeline as pm


# -- (count, index, phase) against the DSL's own PipelineState ----------------------------------
WALKS = [(user, stages, 3 * stages + 2, by) for user in ("producer", "consumer")
         for stages in range(1, 9) for by in (1, 2, 3, 5)]


@pytest.fixture(scope="module")
def dsl_walks():
    # One host-only @cute.jit compile runs every walk through the DSL's PipelineState.
    return pm.dsl_state_walks(WALKS)


@pytest.mark.slow
def test_state_matches_dsl_advance(dsl_walks):
    for walk, dsl in zip(WALKS, dsl_walks):
        assert pm.model_state_walk(*walk) == dsl, walk


@pytest.mark.slow
def test_minimal_state_from_loop_index_matches_dsl(dsl_walks):
    # The compiler-pipelined loop computes (index, phase) from k alone: it must equal k advances.
    for (user, stages, steps, by), dsl in zip(WALKS, dsl_walks):
        if by != 1:
            continue
        for k, row in enumerate(dsl):
            assert pm.state_from_index(k, stages, user).as_tuple() == row, (user, stages, k)


def test_state_starts_like_make_pipeline_state():
    assert pm.make_pipeline_state("producer", 4).as_tuple() == (0, 0, 1)
    assert pm.make_pipeline_state("consumer", 4).as_tuple() == (0, 0, 0)


def test_phase_flips_every_stages_advances():
    s = pm.make_pipeline_state("consumer", 3)
    phases = []
    for _ in range(9):
        phases.append(s.phase)
        s.advance()
    assert phases == [0, 0, 0, 1, 1, 1, 0, 0, 0]


def test_state_errors():
    with pytest.raises(ShapeError):
        pm.make_pipeline_state("producer", 0)
    with pytest.raises(CourseError):
        pm.make_pipeline_state("both", 2)
    with pytest.raises(ShapeError):
        pm.make_pipeline_state("consumer", 2).advance(0)
    with pytest.raises(CourseError):
        pm.dsl_state_walks([("nobody", 2, 3, 1)])


# -- one mbarrier ------------------------------------------------------------------------------
def test_mbarrier_needs_arrivals_and_bytes():
    bar = pm.Mbarrier("full[0]", expected=1)
    assert not bar.test_wait(0) and bar.test_wait(1)  # phase 0 in progress; "phase 1" counts as done
    assert not bar.arrive(1, expect_tx=100)  # arrival in, bytes still due
    assert not bar.test_wait(0)
    assert bar.complete_tx(100)  # last byte: the phase completes, the bit flips
    assert bar.phase == 1 and bar.test_wait(0) and not bar.test_wait(1)
    assert bar.pending == 1 and bar.completed == 1


def test_mbarrier_bytes_before_expect():
    bar = pm.Mbarrier("full[0]", expected=1)
    assert not bar.complete_tx(64)  # bytes may land before the expect-tx arrival
    assert bar.arrive(1, expect_tx=64)


def test_mbarrier_counts_every_consumer_warp():
    bar = pm.Mbarrier("empty[0]", expected=4)
    bar.arrive(3)
    assert bar.phase == 0  # one warp missing: still phase 0
    bar.arrive(1)
    assert bar.phase == 1


# -- the mainloops -----------------------------------------------------------------------------
def _loads(trace):
    return [k for op, k in trace.ops() if op == "tma_load"]


def _mmas(trace):
    return [k for op, k in trace.ops() if op == "wgmma"]


@pytest.mark.parametrize("variant", pm.VARIANTS)
@pytest.mark.parametrize("stages", [2, 3, 4, 7])
@pytest.mark.parametrize("k_tiles", [1, 2, 5, 16])
def test_every_k_tile_loaded_and_multiplied_once_in_order(variant, stages, k_tiles):
    t = pm.simulate(variant, stages, k_tiles).check()
    assert _loads(t) == list(range(k_tiles))
    assert _mmas(t) == list(range(k_tiles))
    # Each full barrier completed once per k-tile that went through its stage.
    last = t.events[-1]
    for i in range(stages):
        assert last.full[i].completed == len(range(i, k_tiles, stages))
        assert last.empty[i].completed == len(range(i, k_tiles, stages))


@pytest.mark.parametrize("variant", pm.VARIANTS)
def test_no_stage_is_overwritten_before_release(variant):
    stages, k_tiles = 3, 10
    t = pm.simulate(variant, stages, k_tiles).check()
    released = set()
    for op, k in t.ops():
        if op == "consumer_release":
            released.add(k)
        if op == "producer_acquire" and k >= stages:
            assert k - stages in released, f"k-tile {k} acquired stage before {k - stages} was released"


def test_naive_has_one_load_in_flight_prefetch_has_depth():
    assert pm.simulate("naive", 4, 12).max_loads_in_flight() == 1
    for depth in (1, 2, 3):
        assert pm.simulate("prefetch", 4, 12, depth).max_loads_in_flight() == depth
        # The software-pipelined loop issues k+P at the top of iteration k, before waiting
        # for k: P+1 k-tiles can be on their way at once.
        assert pm.simulate("compiler", 4, 12, depth).max_loads_in_flight() == depth + 1


def test_naive_runs_even_with_one_stage():
    pm.simulate("naive", 1, 5).check()


@pytest.mark.parametrize("variant", ["prefetch", "compiler"])
def test_prefetch_as_deep_as_the_ring_deadlocks(variant):
    # The refill in the first step needs the stage k-tile 0 still occupies.
    t = pm.simulate(variant, 4, 10, prefetch=4)
    assert t.deadlock is not None
    assert t.deadlock.op == "producer_acquire"
    assert t.deadlock.barrier == "empty[0]" and t.deadlock.parity == 0
    assert "consumer_release" in t.deadlock.explanation
    # A prologue equal to the ring is not "deeper" than it: the message names the late release.
    assert "deeper than the ring" not in t.deadlock.explanation
    assert "at most `stages - 1`" in t.deadlock.explanation
    assert ("one k-tile late" if variant == "prefetch" else "released one iteration earlier") \
        in t.deadlock.explanation
    with pytest.raises(pm.PipelineDeadlock, match="empty\\[0\\], phase 0"):
        t.check()


def test_ring_deep_enough_for_all_k_tiles_does_not_deadlock():
    pm.simulate("prefetch", 4, 4, prefetch=4).check()  # nothing left to refill


def test_prefetch_zero_in_prefetch_loop_waits_for_nothing():
    t = pm.simulate("prefetch", 4, 6, prefetch=0)
    assert t.deadlock.op == "consumer_wait" and t.deadlock.barrier == "full[0]"
    assert "nobody loaded" in t.deadlock.explanation


def test_compiler_with_zero_prefetch_is_naive_order():
    t = pm.simulate("compiler", 4, 6, prefetch=0).check()
    assert t.max_loads_in_flight() == 1
    assert t.ops()[:5] == pm.simulate("naive", 4, 6).ops()[:5]


# -- loops from a list of steps (the exercises' engine) ----------------------------------------
GOOD = ["producer_acquire", "tma_load", "producer_commit", "consumer_wait", "wgmma",
        "commit_group", "wait_group", "consumer_release"]


def test_from_order_good_order_runs():
    t = pm.simulate(pm.from_order(GOOD), 3, 7).check()
    assert _mmas(t) == list(range(7))


def test_from_order_wait_before_acquire_deadlocks_on_full():
    order = ["consumer_wait"] + [s for s in GOOD if s != "consumer_wait"]
    t = pm.simulate(pm.from_order(order), 3, 7)
    assert t.deadlock.op == "consumer_wait" and t.deadlock.barrier == "full[0]"


def test_from_order_without_release_deadlocks_after_a_lap():
    t = pm.simulate(pm.from_order([s for s in GOOD if s != "consumer_release"]), 3, 7)
    assert t.deadlock.op == "producer_acquire"
    assert t.deadlock.barrier == "empty[0]" and t.deadlock.parity == 0
    assert len(_mmas(t)) == 3  # one lap of the ring, then stuck
    assert "a release is missing" in t.deadlock.explanation
    assert "stages - 1" not in t.deadlock.explanation  # no prologue here to blame


def test_from_order_rejects_unknown_steps():
    with pytest.raises(CourseError, match="unknown step"):
        pm.from_order(["producer_acquire", "tma_copy"])


def test_simulate_errors():
    with pytest.raises(ShapeError):
        pm.simulate("naive", 0, 4)
    with pytest.raises(ShapeError):
        pm.simulate("naive", 2, 0)
    with pytest.raises(ShapeError):
        pm.simulate("prefetch", 2, 4, prefetch=-1)
    with pytest.raises(CourseError, match="unknown variant"):
        pm.simulate("eager", 2, 4)


def test_trace_table_mentions_the_deadlock():
    text = pm.simulate("prefetch", 2, 5, prefetch=2).table()
    assert "DEADLOCK" in text and "producer_acquire" in text


# -- hazards: orders that do not hang but race -------------------------------------------------
@pytest.mark.parametrize("variant", pm.VARIANTS)
@pytest.mark.parametrize("stages,k_tiles", [(2, 3), (3, 9), (4, 20), (7, 2)])
def test_course_loops_have_no_hazards(variant, stages, k_tiles):
    assert pm.simulate(variant, stages, k_tiles).hazards == []


def test_release_before_wait_group_is_a_race():
    order = [s for s in GOOD if s != "wait_group"]
    t = pm.simulate(pm.from_order(order), 3, 5)
    assert t.deadlock is None
    assert "still read" in t.hazards[0]


def test_wait_group_before_commit_waits_for_nothing():
    order = GOOD[:5] + ["wait_group", "commit_group", "consumer_release"]
    assert "still read" in pm.simulate(pm.from_order(order), 3, 5).hazards[0]


def test_wgmma_without_consumer_wait_reads_unlanded_bytes():
    order = [s for s in GOOD if s != "consumer_wait"]
    t = pm.simulate(pm.from_order(order), 3, 5)
    assert "consumer_wait must come first" in t.hazards[0]


def test_consumer_try_wait_peeks_without_blocking():
    p = pm.PipelineModel(stages=2)
    trace = pm.Trace("peek", 2, 1, 0)
    peeks = []

    def program(p, k_tiles, prefetch):
        prod = pm.make_pipeline_state("producer", 2)
        cons = pm.make_pipeline_state("consumer", 2)
        peeks.append(p.consumer_try_wait(cons))  # nothing loaded: not ready, and no hang
        yield from p.producer_acquire(prod)
        p.tma_load(prod)
        yield from p.wait_group(0)  # nothing committed: returns; the TMA is still in flight
        yield from p.consumer_wait(cons)  # blocks until the bytes land
        peeks.append(p.consumer_try_wait(cons))
        yield from p.consumer_wait(cons, token=peeks[-1])  # token True: no wait at all

    p.run(program(p, 1, 0), trace)
    assert peeks == [False, True] and trace.deadlock is None
    assert [op for op, _ in trace.ops()].count("consumer_try_wait") == 2
