"""The grouped GEMM tile scheduler model: counts, order, schedule, costs, and agreement
with the DSL's own scheduler (cutlass.utils.StaticPersistentGroupTileScheduler and the older
GroupedGemmTileSchedulerHelper).

Where the DSL is checked: its group search is warp code (a prefix sum over shuffles, a ballot, a
popc over 32 groups per step, reading problem_shape_mnkl from global memory), so it cannot run
on the host. On the host we run the helper's own per-group arithmetic (tile counts, the (m, n)
split inside a group, via CuTe's layout) against the model and check the group index on a
hand-checked table; on a GPU, a probe kernel runs the whole helper, both APIs, and every CTA's
list of work items must equal ``schedule(...)``. Its pictures: ``test_group_scheduler_pictures.py``.
"""

import json
import os
import subprocess
import sys
import tempfile
import warnings
from types import SimpleNamespace

import pytest

from cutecourse.errors import ShapeError
from cutecourse.models.group_scheduler import (GroupedProblem, WorkItem, balance, locate,
                                               moe_sizes, schedule, tensormap_updates)

# 5 groups: a 3x2 grid, an empty group, one tile with a long K, a tall 8x2 grid, a 1x1x1 crumb.
MIXED = [(300, 512, 100), (0, 512, 64), (128, 256, 640), (1000, 300, 64), (1, 1, 1)]


def _mixed(**kw):
    return GroupedProblem(MIXED, **kw)


# -- counting -----------------------------------------------------------------------------------
def test_counts_offsets_and_k_tiles_hand_checked():
    p = _mixed()  # tile 128 x 256, k-tile 64
    assert p.grids == [(3, 2), (0, 2), (1, 1), (8, 2), (1, 1)]
    assert p.tiles_per_group == [6, 0, 1, 16, 1]
    assert p.offsets == [0, 6, 6, 7, 23]  # the empty group starts where the next one does
    assert p.total == 24
    assert p.k_tiles == [2, 1, 10, 1, 1]  # K = 100 -> 2 (K need not divide by 64), 640 -> 10


@pytest.mark.parametrize("k, tiles", [(1, 1), (63, 1), (64, 1), (65, 2), (100, 2), (4096, 64)])
def test_k_need_not_be_a_multiple_of_tile_k(k, tiles):
    p = GroupedProblem([(128, 256, k)])
    assert p.k_tiles == [tiles]
    assert p.locate(0).k_tiles == tiles


def test_clusters_count_cluster_tiles():
    p = _mixed(cluster=(2, 1))  # one work item = a 256 x 256 block of C, two CTA tiles
    assert p.cluster_tile == (256, 256, 64)
    assert p.tiles_per_group == [2 * 2, 0, 1 * 1, 4 * 2, 1]
    assert p.total == 14
    # item 1 is group 0's second cluster tile along M: CTA tiles 2 (leader) and 3 (its partner)
    assert p.locate(1, (0, 0))[:3] == (0, 2, 0)
    assert p.locate(1, (1, 0))[:3] == (0, 3, 0)
    assert p.locate(2, (1, 0))[:3] == (0, 1, 1)


# -- locate -------------------------------------------------------------------------------------
HAND = {  # linear -> (group, tile_m, tile_n, k_tiles) for MIXED, tile 128 x 256
    0: (0, 0, 0, 2), 1: (0, 1, 0, 2), 2: (0, 2, 0, 2), 3: (0, 0, 1, 2), 5: (0, 2, 1, 2),
    6: (2, 0, 0, 10), 7: (3, 0, 0, 1), 14: (3, 7, 0, 1), 15: (3, 0, 1, 1), 22: (3, 7, 1, 1),
    23: (4, 0, 0, 1),
}


def test_locate_hand_checked_table():
    p = _mixed()
    for w, want in HAND.items():
        assert p.locate(w) == WorkItem(*want, w), w


def test_order_within_a_group_is_m_fastest():
    p = _mixed()
    got = [p.locate(w)[1:3] for w in range(7, 23)]  # group 3: 8 rows x 2 columns of tiles
    assert got == [(m, n) for n in range(2) for m in range(8)]


@pytest.mark.parametrize("cluster", [(1, 1), (2, 1), (1, 2), (2, 2)])
def test_locate_is_a_bijection_onto_all_tiles(cluster):
    p = GroupedProblem(MIXED + [(2000, 1000, 64)], tile=(128, 128), cluster=cluster)
    seen = [tuple(p.locate(w, (a, b))[:3]) for w in range(p.total)
            for a in range(cluster[0]) for b in range(cluster[1])]
    want = {(g, m, n) for g, (gm, gn) in enumerate(p.grids)
            for m in range(gm * cluster[0]) for n in range(gn * cluster[1])}
    assert len(seen) == len(set(seen)) == p.total * p.cluster_size
    assert set(seen) == want


def test_empty_groups_own_nothing():
    p = GroupedProblem([(0, 256, 64), (100, 256, 64), (0, 256, 64), (0, 512, 64), (300, 256, 64),
                        (0, 256, 64)])
    assert p.tiles_per_group == [0, 1, 0, 0, 3, 0]
    assert [it.group for it in p.items()] == [1, 4, 4, 4]


def test_locate_traces_in_the_dsl():
    """The same function, fed DSL Int32s inside a host trace, folds to the same answers."""
    import cutlass

    from cutecourse.layouts import run_on_host

    p = _mixed(cluster=(2, 1))

    def traced():
        shapes = [tuple(cutlass.Int32(x) for x in s) for s in p.sizes]
        out = []
        for w in range(p.total):
            it = locate(cutlass.Int32(w), shapes, p.cluster_tile, p.cluster, (1, 0),
                        int_=cutlass.Int32)
            out.append(tuple(x if isinstance(x, int) else x.value for x in it))
        return out

    assert run_on_host(traced) == [tuple(p.locate(w, (1, 0))) for w in range(p.total)]


@pytest.mark.parametrize("cluster", [(1, 1), (2, 1), (1, 2)])
def test_per_group_arithmetic_matches_the_dsl_helper_on_host(cluster):
    """The helper's own tile count and (m, n) split (CuTe's layout), run in a host trace."""
    import cutlass.utils as utils

    from cutecourse.layouts import run_on_host

    p = _mixed(cluster=cluster)
    params = SimpleNamespace(_has_distinct_fallback=False, cluster_shape_mn=cluster)
    new = SimpleNamespace(params=params, cluster_tile_shape_mnk=p.cluster_tile)
    old = SimpleNamespace(tile_sched_params=params, cluster_tile_shape_mnk=p.cluster_tile)
    new_api, old_api = utils.StaticPersistentGroupTileScheduler, utils.GroupedGemmTileSchedulerHelper

    def helper():
        counts = [int(new_api._get_cluster_tile_count_mn(new, (m, n, k, 1))) for m, n, k in p.sizes]
        out = []
        for w in range(p.total):
            g = p.locate(w).group  # the group search is warp code: checked on the GPU below
            cm, cn = p.grids[g]
            for cta in [(a, b) for b in range(cluster[1]) for a in range(cluster[0])]:
                for api, me in ((new_api, new), (old_api, old)):
                    m, n = api._compute_cta_tile_coord(me, w - p.offsets[g], cta, cm, cn)
                    out.append((w, cta, m.value, n.value))
        return counts, out

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        counts, got = run_on_host(helper)
    assert counts == p.tiles_per_group
    want = [(w, cta, *p.locate(w, cta)[1:3]) for w in range(p.total)
            for cta in [(a, b) for b in range(cluster[1]) for a in range(cluster[0])]
            for _ in range(2)]
    assert got == want


# -- schedule and its costs -------------------------------------------------------------------
@pytest.mark.parametrize("cluster, ctas", [((1, 1), 4), ((1, 1), 132), ((2, 1), 6), ((1, 2), 7),
                                           ((2, 2), 16)])
def test_schedule_covers_every_item_exactly_once(cluster, ctas):
    p = GroupedProblem(moe_sizes(12, 1024, 512, (0, 700), seed=3), cluster=cluster)
    sched = schedule(p, ctas)
    clusters = min(ctas // p.cluster_size, p.total)
    assert len(sched) == clusters * p.cluster_size
    cells = [(it.linear, it.group, it.tile_m, it.tile_n) for items in sched for it in items]
    assert len(cells) == len(set(cells)) == p.total * p.cluster_size
    assert sorted({c[0] for c in cells}) == list(range(p.total))
    for cta, items in enumerate(sched):  # cluster c takes c, c + P, c + 2P, ...
        c = cta // p.cluster_size
        assert [it.linear for it in items] == list(range(c, p.total, clusters))


def test_tensormap_updates_hand_checked():
    sched = schedule(_mixed(), 4)
    # CTA 0: items 0 4 8 12 16 20 -> groups 0 0 3 3 3 3; CTA 2: 2 6 10 ... -> 0 2 3 3 3 3;
    # CTA 3: 3 7 11 15 19 23 -> 0 3 3 3 3 4. The first item always loads real maps.
    assert [[it.group for it in items] for items in sched] == [
        [0, 0, 3, 3, 3, 3], [0, 0, 3, 3, 3, 3], [0, 2, 3, 3, 3, 3], [0, 3, 3, 3, 3, 4]]
    ups = tensormap_updates(sched)
    assert ups.positions == [[0, 2], [0, 2], [0, 1, 2], [0, 1, 5]]
    assert ups.per_cta == [2, 2, 3, 3]
    assert ups.total == 10
    one = tensormap_updates(schedule(GroupedProblem([(4096, 4096, 64)]), 8))
    assert one.per_cta == [1] * 8  # a single group: one write per CTA, never again


def test_balance_sums_k_tiles():
    bal = balance(schedule(_mixed(), 4))
    assert bal.steps == [8, 8, 16, 7]  # CTA 2 got group 2's 10-step tile
    assert bal.max == 16 and bal.mean == 39 / 4
    assert bal.ratio == pytest.approx(16 / 9.75)
    assert balance(schedule(GroupedProblem([(1024, 1024, 640)]), 8)).ratio == 1.0


def test_moe_sizes_are_seeded_and_in_range():
    a = moe_sizes(16, 2048, 1024, (0, 512), seed=7)
    assert a == moe_sizes(16, 2048, 1024, (0, 512), seed=7)
    assert a != moe_sizes(16, 2048, 1024, (0, 512), seed=8)
    assert all(0 <= m <= 512 and (n, k) == (2048, 1024) for m, n, k in a)
    assert moe_sizes(3, 256, 64, (100, 100)) == [(100, 256, 64)] * 3


# -- errors -------------------------------------------------------------------------------------
@pytest.mark.parametrize("make, match", [
    (lambda: GroupedProblem([]), "no groups"),
    (lambda: GroupedProblem([(-1, 256, 64)]), "M must be >= 0"),
    (lambda: GroupedProblem([(128, 0, 64)]), "N and K > 0"),
    (lambda: GroupedProblem([(128, 256, 0)]), "N and K > 0"),
    (lambda: GroupedProblem([(128, 256)]), "three ints"),
    (lambda: GroupedProblem([(128.0, 256, 64)]), "three ints"),
    (lambda: GroupedProblem([(0, 256, 64), (0, 256, 64)]), "every group is empty"),
    (lambda: GroupedProblem([(128, 256, 64)], tile=(0, 256)), "tile="),
    (lambda: GroupedProblem([(128, 256, 64)], cluster=(2,)), "cluster="),
    (lambda: GroupedProblem([(128, 256, 64)], tile_k=0), "tile_k"),
    (lambda: _mixed().locate(24), "outside"),
    (lambda: _mixed().locate(-1), "outside"),
    (lambda: _mixed().locate(0, (1, 0)), "cta_in_cluster"),
    (lambda: schedule(_mixed(cluster=(2, 2)), 3), "whole cluster"),
    (lambda: balance([]), "no CTAs"),
    (lambda: moe_sizes(0, 256, 64), "groups"),
    (lambda: moe_sizes(4, 256, 64, (10, 5)), "m_range"),
    (lambda: moe_sizes(4, 0, 64), "positive"),
])
def test_errors_say_what_and_how(make, match):
    with pytest.raises(ShapeError, match=match) as e:
        make()
    assert e.value.fix


# -- the DSL's scheduler on a GPU ----------------------------------------------------------------
_PROBE = r'''
"""Run the DSL's grouped tile scheduler (both APIs) on the GPU; print each CTA's items as JSON."""
import json, sys, warnings
warnings.simplefilter("ignore")
import cutecourse  # noqa: F401  (fixes the DSL arch)
import torch
import cutlass
import cutlass.cute as cute
import cutlass.utils as utils
from cutlass.cute.runtime import from_dlpack
from cutecourse.models.group_scheduler import GroupedProblem, schedule


@cute.jit
def record(out: cute.Tensor, cta, step, lane, r, linear):
    """Lane 0 writes one work item: (group, tile m, tile n, k-tile count, linear index)."""
    if lane == 0:
        out[cta, step, 0] = r.group_idx
        out[cta, step, 1] = r.cta_tile_idx_m
        out[cta, step, 2] = r.cta_tile_idx_n
        out[cta, step, 3] = r.cta_tile_count_k
        out[cta, step, 4] = linear


@cute.kernel
def probe(shapes: cute.Tensor, out: cute.Tensor, params: utils.PersistentTileSchedulerParams,
          cluster_tile: cutlass.Constexpr, group_count: cutlass.Constexpr,
          old_api: cutlass.Constexpr):
    bidx, bidy, bidz = cute.arch.block_idx()
    gdim = cute.arch.grid_dim()
    cta = bidz * gdim[0] * gdim[1] + bidy * gdim[0] + bidx  # the tensor-map workspace index
    lane = cute.arch.lane_idx()
    step = cutlass.Int32(0)
    if cutlass.const_expr(old_api):  # StaticPersistentTileScheduler + helper.delinearize_z
        sched = utils.StaticPersistentTileScheduler.create(params, (bidx, bidy, bidz), gdim)
        helper = utils.GroupedGemmTileSchedulerHelper(group_count, params, cluster_tile,
                                                      utils.create_initial_search_state())
        work = sched.initial_work_tile_info()
        while work.is_valid_tile:
            record(out, cta, step, lane, helper.delinearize_z(work.tile_idx, shapes), work.tile_idx[2])
            step = step + 1
            sched.advance_to_next_work()
            work = sched.get_current_work()
    else:  # StaticPersistentGroupTileScheduler: the search is inside get_current_work
        sched = utils.StaticPersistentGroupTileScheduler.create(
            params, (bidx, bidy, bidz), gdim, cluster_tile, utils.create_initial_search_state(),
            group_count, shapes)
        work = sched.initial_work_tile_info()
        while work.is_valid_tile:
            record(out, cta, step, lane, work.group_search_result, work.tile_idx[2])
            step = step + 1
            sched.advance_to_next_work()
            work = sched.get_current_work()


@cute.jit
def launch(shapes: cute.Tensor, out: cute.Tensor, cluster: cutlass.Constexpr,
           cluster_tile: cutlass.Constexpr, group_count: cutlass.Constexpr,
           total: cutlass.Constexpr, clusters: cutlass.Constexpr, old_api: cutlass.Constexpr):
    # as the grouped examples do: the "problem" is (cluster_m, cluster_n, total work items)
    params = utils.PersistentTileSchedulerParams((cluster[0], cluster[1], total),
                                                 (cluster[0], cluster[1], 1))
    probe(shapes, out, params, cluster_tile, group_count, old_api).launch(
        grid=(cluster[0], cluster[1], clusters), block=(32, 1, 1),
        cluster=(cluster[0], cluster[1], 1))


def run(case):
    p = GroupedProblem(case["sizes"], tuple(case["tile"]), tuple(case["cluster"]))
    clusters = min(case["ctas"] // p.cluster_size, p.total)
    steps = -(-p.total // clusters)
    shapes = torch.tensor([[m, n, k, 1] for m, n, k in p.sizes], dtype=torch.int32, device="cuda")
    res = {"model": [[list(it) for it in items] for items in schedule(p, case["ctas"])]}
    for api in ("new", "old"):
        out = torch.full((clusters * p.cluster_size, steps, 5), -1, dtype=torch.int32,
                         device="cuda")
        launch(from_dlpack(shapes), from_dlpack(out), p.cluster, p.cluster_tile, p.groups,
               p.total, clusters, api == "old")
        torch.cuda.synchronize()
        res[api] = [[r for r in rows if r[0] != -1] for rows in out.cpu().tolist()]
    return res


print("RESULT" + json.dumps([run(c) for c in json.loads(sys.argv[1])]))
'''

GPU_CASES = [
    {"sizes": MIXED, "tile": [128, 256], "cluster": [1, 1], "ctas": 4},
    {"sizes": MIXED, "tile": [128, 256], "cluster": [2, 1], "ctas": 6},
    {"sizes": MIXED, "tile": [128, 128], "cluster": [1, 2], "ctas": 132},
    # 40 groups (some empty): the warp's 32-group search window must move on, and its cached
    # state carry across items
    {"sizes": moe_sizes(40, 1024, 520, (0, 700), seed=1), "tile": [128, 256], "cluster": [1, 1],
     "ctas": 7},
    {"sizes": moe_sizes(40, 1024, 520, (0, 700), seed=1), "tile": [128, 128], "cluster": [2, 1],
     "ctas": 132},
    {"sizes": [(0, 256, 64)] * 33 + [(200, 256, 64)], "tile": [128, 256], "cluster": [1, 1],
     "ctas": 2},
]


def run_dsl_probe(cases=GPU_CASES, timeout=300):
    """Run the probe in a subprocess (a hang becomes a TimeoutExpired, not a stuck test run).

    The DSL compiles from source, so the probe goes into a file first (not ``python -c``).
    """
    with tempfile.TemporaryDirectory(prefix="group-probe-") as tmp:
        script = os.path.join(tmp, "group_probe.py")
        with open(script, "w") as f:
            f.write(_PROBE)
        proc = subprocess.run([sys.executable, script, json.dumps(cases)], capture_output=True,
                              text=True, timeout=timeout, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.split("RESULT", 1)[1])


@pytest.mark.gpu("sm_90a", "sm_100a")  # clusters: Hopper or Blackwell
def test_schedule_matches_the_dsl_scheduler_on_the_gpu():
    for case, res in zip(GPU_CASES, run_dsl_probe()):
        assert res["new"] == res["model"], case
        assert res["old"] == res["model"], case


def test_banded_order_inside_a_group():
    # group_m: the dense persistent kernel's bands of tile-rows, inside each group; every tile once
    sizes = [(1000, 1024, 64), (0, 1024, 64), (3000, 512, 64)]
    for group_m in (1, 2, 3, 16):
        p = GroupedProblem(sizes, tile=(128, 256), group_m=group_m)
        seen = [p.locate(w)[:3] for w in range(p.total)]
        assert sorted(seen) == sorted(GroupedProblem(sizes, tile=(128, 256)).locate(w)[:3]
                                      for w in range(p.total))
        first = p.offsets[2]
        from cutecourse.models.tile_order import band_coord
        assert [s[1:] for s in seen[first:]] == [band_coord(w, 24, 2, group_m) for w in range(48)]
    # a band at least as tall as the group is the m-fastest order
    assert GroupedProblem(sizes, group_m=64).items() == GroupedProblem(sizes).items()
    with pytest.raises(ShapeError, match="group_m"):
        GroupedProblem(sizes, group_m=0)


def test_the_walk_searches_through_its_find_group_hook(monkeypatch):
    """The walk (on ints) searches through its hook ``find_group``: a subclass's search is the one that runs."""
    from cutecourse.kernels import group_walk
    monkeypatch.setattr(group_walk, "cutlass", SimpleNamespace(Int32=int, const_expr=bool))  # Python ints
    shapes = {(g, col): v for g, size in enumerate(MIXED) for col, v in enumerate((*size, 1))}
    p, clusters, searched = _mixed(), 5, []

    class Counted(group_walk.GroupScheduler):
        def find_group(self, work, group, first):  # the course's search in plain Python: a compiled
            searched.append(work)  # kernel leaves the DSL's rewrite of group_walk.find_group behind
            while group < self.count and work >= first + (n := group_walk.group_items(self, group)):
                first, group = first + n, group + 1  # (each item once, and once past the last)
            return group, first

    class Nowhere(group_walk.GroupScheduler):
        def find_group(self, work, group, first):
            return self.count, first  # every item past the last group: the walk ends at once

    def walk(scheduler, c):
        got, w = [], scheduler(shapes=shapes, ptrs=None, strides=None, count=len(MIXED), cluster_mn=(1, 1), group_m=64,
                               cluster_tile=p.cluster_tile, in_cluster=(0, 0), first=c, stride=clusters).start()
        while w.active():
            t = w.work_tile()
            got.append((int(t.group), int(t.tile_m), int(t.tile_n), int(t.k_end)))
            w.advance(t)
        return got

    for c, expected in enumerate(schedule(p, clusters)):  # the course's search: the model's tiles
        assert walk(Counted, c) == [tuple(item[:4]) for item in expected]
        assert walk(Nowhere, c) == []
    assert sorted(searched) == sorted([*range(p.total), *range(p.total, p.total + clusters)])
