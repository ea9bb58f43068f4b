"""Ping-pong's ordered barrier on the CPU (models/ordered_barrier): the model is the kernel's loop
(its barrier ids are the ones in the PTX), the two warpgroups' MMAs never overlap and hide each
other's epilogues, programs that cannot pair up are refused with a reason, and the picture."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from cutecourse.errors import CourseError  # noqa: E402
from cutecourse.inspect import compile_report  # noqa: E402
from cutecourse.kernels import hopper_gemm_pingpong as hpp  # noqa: E402
from cutecourse.models import ordered_barrier as ob  # noqa: E402
from cutecourse.viz import schedules as vs  # noqa: E402


def test_the_model_uses_the_kernels_barriers():
    assert ob.ORDER_BARRIER == hpp.ORDER_BARRIER
    ptx = compile_report("cutecourse.kernels.hopper_gemm_pingpong:compile_target").ptx
    for w in (0, 1):
        for kind, b in ob.barrier_ops(w, 6):
            instruction = f"bar.sync \t{b}, 256;" if kind == "wait" else f"bar.arrive {b}, 256;"
            assert instruction in ptx, instruction


@pytest.mark.parametrize("tiles", range(1, 10))
def test_every_wait_meets_one_arrive(tiles):
    ops = ob.barrier_ops(0, tiles) + ob.barrier_ops(1, tiles)
    for b in (ob.ORDER_BARRIER, ob.ORDER_BARRIER + 1):
        assert ops.count(("wait", b)) == ops.count(("arrive", b))
    # warpgroup w waits only on its own barrier and arrives only on the other's
    for w in (0, 1):
        assert {b for k, b in ob.barrier_ops(w, tiles) if k == "wait"} <= {ob.ORDER_BARRIER + w}
        assert {b for k, b in ob.barrier_ops(w, tiles) if k == "arrive"} <= {ob.ORDER_BARRIER + 1 - w}
    assert ob.barrier_ops(1, tiles)[0] == ("arrive", ob.ORDER_BARRIER)  # WG0 goes first
    # every own tile passes the turn on; the owner of item `tiles` (the one after the last) ends
    # with one wait for it, the other ends with its last arrive
    for w in (0, 1):
        own = len(range(w, tiles, 2))
        assert sum(k == "arrive" for k, _ in ob.barrier_ops(w, tiles)) == own + (w == 1)
        assert ob.barrier_ops(w, tiles)[-1][0] == ("wait" if tiles % 2 == w else "arrive")
    ob.simulate(tiles)  # pairs up: no BarrierError


@pytest.mark.parametrize("tiles,epilogue", [(5, 0.45), (8, 0.9), (7, 0.0), (6, 1.7)])
def test_mmas_take_turns_and_hide_the_epilogue(tiles, epilogue):
    events = ob.simulate(tiles, mma=1.0, epilogue=epilogue)
    mmas = sorted((e for e in events if e.op.kind == "mma"), key=lambda e: e.start)
    assert [e.op.tile for e in mmas] == list(range(tiles))  # in tile order, each once
    assert all(e.op.warpgroup == e.op.tile % 2 for e in mmas)
    assert all(a.end <= b.start + 1e-12 for a, b in zip(mmas, mmas[1:]))  # never two at once
    for e in (e for e in events if e.op.kind == "wait"):  # each turn is passed by the other warpgroup
        assert (e.arrive.op.barrier, e.arrive.op.warpgroup) == (e.op.barrier, 1 - e.op.warpgroup)
        assert e.end == max(e.start, e.arrive.start)
    end = max(e.end for e in events)
    if epilogue <= 1.0:  # the epilogue fits under the other warpgroup's MMAs: no gap
        assert end == pytest.approx(tiles + epilogue)
        for a, b in zip(mmas, mmas[1:]):
            assert b.start == pytest.approx(a.end)
    else:  # a long epilogue shows: each warpgroup's own tiles are MMAs + epilogue apart
        assert end > tiles + epilogue


def test_turns_name_the_waiter_the_barrier_and_the_arriver():
    t = ob.turns(4)
    assert t[0] == ob.Turn(0, 0, ob.ORDER_BARRIER, 1, None)
    assert t[3] == ob.Turn(3, 1, ob.ORDER_BARRIER + 1, 0, 2)
    assert t[4] == ob.Turn(4, 0, ob.ORDER_BARRIER, 1, 3)  # the turn after the last tile, taken at the end
    assert len(t) == 5 and ob.turns(5)[-1].waiter == 1
    assert "WG1, at its start" in ob.table(4) and "after issuing tile 2's MMAs" in ob.table(4)
    assert "taken at the walk's end" in ob.table(4).splitlines()[-1]


def test_programs_that_do_not_pair_up_are_refused():
    no_start = {0: ob.program(0, 4), 1: ob.program(1, 4)[1:]}  # WG1 forgets WG0's first turn
    with pytest.raises(ob.BarrierError, match="waits forever on barrier 3 before tile 0"):
        ob.simulate(4, programs=no_start)
    extra = {0: ob.program(0, 3) + [ob.Op(0, "arrive", ob.ORDER_BARRIER + 1, 2)], 1: ob.program(1, 3)}
    with pytest.raises(ob.BarrierError, match="no wait"):
        ob.simulate(3, programs=extra)
    for tiles in (3, 4):  # the last turn not taken: an arrive left over at exit
        no_last = {w: ob.program(w, tiles) for w in (0, 1)}
        assert no_last[tiles % 2].pop().kind == "wait"
        with pytest.raises(ob.BarrierError, match="left half-full") as e:
            ob.simulate(tiles, programs=no_last)
        assert "item after the last" in e.value.fix
    with pytest.raises(CourseError):
        ob.program(2, 4)
    with pytest.raises(CourseError):
        ob.turns(0)


def test_picture():
    fig = vs.draw_ordered_barrier(tiles=5)
    ax = fig.axes[0]
    assert [t.get_text().split("\n")[0] for t in ax.get_yticklabels()] == ["WG0", "WG1"]
    assert "time" in ax.get_xlabel() and "epilogue" in ax.get_title(loc="left")
    arrows = [t for t in ax.texts if "arrives" in t.get_text()]
    assert len(arrows) == 6 and arrows[0].get_text().startswith("1: WG1 arrives")  # 5 tiles + the last turn
