"""The ping-pong schedule: what the compiler made of it (two warpgroups' MMA loops, the ordered
barrier, setmaxnreg, no spills), its smem plan and errors, and on an H100 correctness against
torch (tests/test_dense_gemms.py)."""

import pytest

from cutecourse.errors import ShapeError
from cutecourse.inspect import compile_report
from cutecourse.kernels import hopper_gemm_pingpong as hpp

TARGET = "cutecourse.kernels.hopper_gemm_pingpong:compile_target"


def test_plan_has_two_sets_of_c_buffers_and_five_stages():
    plan = hpp.PingPongHopperGemm((64, 256)).plan("float16", "float16")
    assert plan.bytes_per_stage == (64 + 256) * 64 * 2  # 40 KiB
    assert plan.epi_bytes == 2 * 2 * 64 * 32 * 2  # two warpgroups x 2 buffers of 64x32 fp16
    assert plan.stages == 5 and plan.smem_bytes <= 232448 < plan.smem_bytes + plan.bytes_per_stage


def test_four_c_buffers_per_warpgroup_cost_a_stage():
    plan = hpp.PingPongHopperGemm((64, 256), epi_stages=4).plan("float16", "float16")
    assert plan.epi_bytes == 2 * 4 * 64 * 32 * 2 and plan.stages == 4
    r = compile_report(TARGET, epi_stages=4)
    assert r.spill_bytes == 0 and r.count("wgmma") == 8
    with pytest.raises(ShapeError, match="at least 2"):
        hpp.PingPongHopperGemm(epi_stages=1)
    with pytest.raises(ShapeError, match="multiple of the 3 C buffers"):
        hpp.PingPongHopperGemm(epi_stages=3)  # 8 sub-tiles of 64x32 per tile


def test_square_tile_compiles_two_m64n128_wgmmas_per_k_step():
    plan = hpp.PingPongHopperGemm((128, 128)).plan("float16", "float16")
    assert plan.bytes_per_stage == 32 * 1024 and plan.stages == 6
    r = compile_report(TARGET, tile=[128, 128])
    assert r.spill_bytes == 0 and r.count("setmaxnreg") == 2
    # per warpgroup and k-tile: 4 k-steps x 2 row blocks of m64n128k16; two warpgroups' copies
    assert r.count("wgmma") == 16 and "m64n256k16" not in r.ptx and "m64n128k16" in r.ptx
    assert r.count("TMA stores") == 16  # 8 sub-tiles of 64x32 per warpgroup


def test_errors():
    with pytest.raises(ShapeError, match="tile"):
        hpp.PingPongHopperGemm(tile_mn=(128, 256))  # 256 accumulator registers per thread
    with pytest.raises(ShapeError, match="stages"):
        hpp.PingPongHopperGemm(stages=6).plan("float16", "float16")
    with pytest.raises(ShapeError, match="stages"):
        hpp.PingPongHopperGemm(stages=5, epi_stages=4).plan("float16", "float16")


def test_cluster_pair_multicasts_b():
    r = compile_report(TARGET, cluster=[2, 1])
    assert r.count("TMA multicast loads") == 1 and r.spill_bytes == 0


def test_pdl_compiles():
    r = compile_report(TARGET, pdl=True)
    assert r.count("griddepcontrol.wait") == 1 and r.count("griddepcontrol.launch_dependents") == 1
    assert r.count("wgmma") == 8 and r.spill_bytes == 0


def test_compiles_two_alternating_warpgroups():
    r = compile_report(TARGET)
    assert r.spill_bytes == 0 and r.registers is not None
    assert r.count("setmaxnreg") == 2
    # each consumer warpgroup has its own copy of the loop: 4 m64n256k16 wgmmas per k-tile each
    assert r.count("wgmma") == 8 and r.count("TMA stores") == 16
    ptx = r.ptx
    # the ordered barrier: each warpgroup waits for its turn (256 = both warpgroups' threads) ...
    assert f"bar.sync \t{hpp.ORDER_BARRIER}, 256;" in ptx and f"bar.sync \t{hpp.ORDER_BARRIER + 1}, 256;" in ptx
    # ... and the other passes it on
    assert f"bar.arrive {hpp.ORDER_BARRIER}, 256;" in ptx and f"bar.arrive {hpp.ORDER_BARRIER + 1}, 256;" in ptx
    # each warpgroup waits for its turn twice in the code: before a tile's MMAs, and once after
    # its walk when the item after the CTA's last would be its own (the last turn passed to it)
    for w in (0, 1):
        assert ptx.count(f"bar.sync \t{hpp.ORDER_BARRIER + w}, 256;") == 2
    # the epilogues synchronise one warpgroup each, on their own barriers
    assert "bar.sync \t1, 128;" in ptx and "bar.sync \t2, 128;" in ptx


def test_follows_any_scheduler_through_the_hooks():
    """Ping-pong walks the scheduler's interface, so the dynamic scheduler works there too: both
    warpgroups read every slot the producer publishes (each takes every other item)."""
    from cutecourse.inspect import compile_here
    from cutecourse.kernels import gemm_launch, tile_scheduler

    kernel = hpp.PingPongHopperGemm(scheduler=tile_scheduler.DynamicScheduler)
    r = compile_here(kernel, *gemm_launch.Entry(type(kernel)).fake_arguments(kernel))
    assert r.ptx.count("atom.global.add.u32") == 2 and r.ptx.count("atom.global.exch.b32") == 2
    assert r.count("wgmma") == 8 and r.spill_bytes == 0


# (on an H100: tests/test_dense_gemms.py runs every dense GEMM, this one too, against torch)


# -- the schedule, replayed on the CPU ------------------------------------------------------------
# The kernel's three roles as Python generators that yield what they wait for, run against each
# other until all finish or none can move (a hang on the GPU). It replays PingPongHopperGemm's
# order of operations: the producer's publishes (dynamic scheduler) and loads into the ring; each
# consumer warpgroup's slot reads, turn waits and passes, ring waits and releases at its ``count``.
# ``read_next_first`` replays the order that hung on the H100: a warpgroup read the next work item
# (to know whether the other warpgroup had a tile to pass the turn to) before its own mainloop.
def _replay(items, k_tiles, stages, handed_over, read_next_first=False):
    st = dict(loaded=set(), released=set(), published=set(), reads={}, arrives=[0, 0], waits=[0, 0],
              log=[])

    def take(j, w):  # a consumer reads work item j (j == items: "no more tiles")
        while handed_over and j not in st["published"]:
            yield f"warpgroup {w} waits for work item {j} to be published"
        st["reads"][j] = st["reads"].get(j, 0) + 1
        return j < items

    def producer():
        for j in range(items + 1):
            while handed_over and j >= 2 and st["reads"].get(j - 2, 0) < 2:  # WORK_SLOTS = 2
                yield f"producer waits for slot of item {j - 2} to be freed to publish item {j}"
            st["published"].add(j)
            if j == items:
                break
            for c in range(j * k_tiles, (j + 1) * k_tiles):
                while c >= stages and c - stages not in st["released"]:
                    yield f"producer waits for a free stage for k-tile {c} (item {j})"
                st["loaded"].add(c)
        while len(st["released"]) < items * k_tiles:
            yield "producer waits for the last stages to be released (producer_tail)"

    def turn_wait(w):
        while st["arrives"][w] <= st["waits"][w]:
            yield f"warpgroup {w} waits for its turn"
        st["waits"][w] += 1

    def mainloop(w, j, more):
        yield from turn_wait(w)
        for c in range(j * k_tiles, (j + 1) * k_tiles):
            while c not in st["loaded"]:
                yield f"warpgroup {w} waits for k-tile {c} (item {j})"
            # the mbarrier's phase parity tells loads one ring lap apart only
            assert c < stages or c - stages in st["loaded"], "a wait that a stale phase would pass"
            if c > j * k_tiles:
                st["released"].add(c - 1)
        if more:
            st["arrives"][1 - w] += 1
        st["released"].add((j + 1) * k_tiles - 1)
        st["log"].append((w, j))

    def warpgroup(w):
        if w == 1:
            st["arrives"][0] += 1  # warpgroup 0 goes first
        walked = 0
        active = yield from take(0, w)
        if w == 1 and active:
            active = yield from take(1, w)
            walked = 1
        while active:
            j = walked
            if read_next_first:  # the order that hung
                active = yield from take(j + 1, w)
                yield from mainloop(w, j, more=active)
            else:
                yield from mainloop(w, j, more=True)
                active = yield from take(j + 1, w)
            walked += 1
            if active:
                active = yield from take(j + 2, w)
                walked += 1
        if not read_next_first and walked % 2 == w:
            yield from turn_wait(w)

    roles = {"producer": producer(), "warpgroup 0": warpgroup(0), "warpgroup 1": warpgroup(1)}
    waiting = {}

    def progress():
        return (len(roles), len(st["loaded"]), len(st["released"]), len(st["published"]),
                sum(st["reads"].values()), tuple(st["arrives"]), tuple(st["waits"]))

    while roles:
        before = progress()
        for name, role in list(roles.items()):
            try:
                waiting[name] = next(role)
            except StopIteration:
                del roles[name]
        if progress() == before:  # a whole round in which no role could move
            return "deadlock: " + "; ".join(waiting[n] for n in roles)
    left_over = [st["arrives"][w] - st["waits"][w] for w in (0, 1)]
    if left_over != [0, 0]:
        return f"turn arrives left over at exit: {left_over}"
    assert sorted(st["log"], key=lambda e: e[1]) == [(j % 2, j) for j in range(items)]  # each item once, by its owner
    return "ok"


def _pingpong_cases():
    """(case, items per CTA, k-tiles per item, stages, handed over) for every ping-pong GPU case."""
    from test_dense_gemms import GPU_CASES

    for case in (c for c in GPU_CASES if c[0] == "pingpong"):
        _, m, n, k, ind, outd, opts = case
        tm, tn = opts.get("tile", (64, 256))
        cm, cn = opts.get("cluster", (1, 1))
        plan = hpp.PingPongHopperGemm((tm, tn), epi_stages=opts.get("epi_stages", hpp.EPI_STAGES)).plan(ind, outd)
        total = -(-(-(-m // tm)) // cm) * -(-(-(-n // tn)) // cn)  # cluster-sized work items
        grid = min(total, opts.get("sms", 132) // (cm * cn))
        dynamic = opts.get("scheduler") == "dynamic"
        # static: cluster i takes items i, i + grid ...; dynamic: one CTA takes them all, or with
        # several, a CTA may take any number, none too (the others were faster)
        counts = {len(range(i, total, grid)) for i in range(grid)}
        if dynamic and grid > 1:
            counts = set(range(0, min(total, 7) + 1))
        for items in sorted(counts):
            yield case, items, -(-k // 64), plan.stages, dynamic


def test_replay_of_every_gpu_case_finishes_with_no_turn_left_over():
    import inspect

    # the order replayed is the kernel's: its tile's mainloop, then the next item; the turn always
    # passed on (MmaTurn's default), the last one taken after the walk
    src = inspect.getsource(hpp.PingPongHopperGemm._warpgroup)
    assert src.index("self.mainloop(") < src.index("scheduler.advance(tile, slot)"), "next item read first"
    assert "MmaTurn(w))" in src and "walked % 2 == w" in src
    for case, items, k_tiles, stages, dynamic in _pingpong_cases():
        assert _replay(items, k_tiles, stages, dynamic) == "ok", (case, items)


def test_reading_the_next_item_before_the_mainloop_hangs_the_dynamic_scheduler():
    """The order that hung on the H100: with a hand-over, item t + 1 is published only once every
    load of item t is issued, which needs stages that only item t's mainloop frees. (And a CTA
    that the dynamic scheduler gives no item kept warpgroup 1's first pass of the turn.)"""
    assert _replay(4, 8, 5, True, read_next_first=True).startswith("deadlock")
    assert _replay(0, 8, 5, True, read_next_first=True).startswith("turn arrives left over")
    assert _replay(4, 5, 5, True, read_next_first=True) == "ok"  # fits in the ring: no hang
    assert _replay(4, 8, 5, False, read_next_first=True) == "ok"  # static: nothing to wait for
    hung = {c[:1] + c[1:4] + (str(c[6]),) for c, i, kt, s, d in _pingpong_cases()
            if _replay(i, kt, s, d, read_next_first=True) != "ok"}
    assert hung == {("pingpong", 4096, 4096, 512, "{'scheduler': 'dynamic'}"),
                    ("pingpong", 3000, 1000, 520, "{'scheduler': 'dynamic', 'sms': 7}"),
                    ("pingpong", 1100, 1000, 520, "{'scheduler': 'dynamic', 'sms': 6}")}


def test_the_turns_pair_up_in_the_course_model_too():
    """The kernel's turn protocol in models/ordered_barrier's simulator: every tile passes the
    turn on, and the owner of the item after the last takes that last turn, so no arrive is left."""
    from cutecourse.models import ordered_barrier as ob

    for tiles in range(1, 10):
        programs = {w: [ob.Op(1, "arrive", ob.ORDER_BARRIER)] if w == 1 else [] for w in (0, 1)}
        for t in range(tiles):
            w = t % 2
            programs[w] += [ob.Op(w, "wait", ob.ORDER_BARRIER + w, t), ob.Op(w, "mma", None, t),
                            ob.Op(w, "arrive", ob.ORDER_BARRIER + 1 - w, t), ob.Op(w, "epilogue", None, t)]
        programs[tiles % 2].append(ob.Op(tiles % 2, "wait", ob.ORDER_BARRIER + tiles % 2))
        ob.simulate(tiles, programs=programs)  # a BarrierError if a wait or an arrive is unpaired
        assert _replay(tiles, 3, 5, True) == "ok"
        programs[tiles % 2].pop()  # without the last wait: an arrive left over at exit
        with pytest.raises(ob.BarrierError, match="left half-full"):
            ob.simulate(tiles, programs=programs)
