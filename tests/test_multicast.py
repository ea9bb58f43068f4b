"""The multicast planner: brute force ("same bulk", nvFuser's multicast design) against the closed form."""

from __future__ import annotations

import itertools
import re

import pytest

from cutecourse.errors import CourseError, ShapeError
from cutecourse.models.multicast import bits, fmt_mask, l2_traffic, plan

CLUSTERS = [(1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (1, 4), (4, 2), (2, 4), (4, 4), (8, 2)]
TILE_COUNTS = [(4, 4, 2), (8, 4, 1), (6, 10, 1), (5, 7, 1), (16, 16, 1)]


def _grids(p0):
    """One wave, and persistent grids that are and are not multiples of the cluster."""
    s = p0.cluster_size
    return [None, s, 3 * s, 2 * s + 1, 7, 12, 127, 132]


def _sweep():
    for order, cluster, tiles in itertools.product(("cluster", "linear"), CLUSTERS, TILE_COUNTS):
        p0 = plan(tile=(128, 128, 64), cluster=cluster, tiles=tiles, order=order)
        for grid in _grids(p0):
            yield plan(tile=(128, 128, 64), cluster=cluster, tiles=tiles, grid=grid, order=order)


def test_closed_form_equals_brute_force_wherever_its_conditions_hold():
    held = failed = 0
    for p in _sweep():
        for op in "AB":
            if p.closed_form_holds(op):
                held += 1
                assert p.differences(op) == [], (p, op, p.differences(op)[:3])
            else:
                failed += 1
    # the sweep must exercise both sides of the conditions, or it proves nothing
    assert held > 100 and failed > 100


def test_closed_form_issuer_and_slice_equal_brute_force_wherever_the_conditions_hold():
    """Not only the mask: the nvFuser design's single-issuer predicate and CUTLASS's slice index too."""
    checked = 0
    for p in _sweep():
        for op in "AB":
            if not p.closed_form_holds(op) or p.num_tiles > 64:
                continue
            for w, c in itertools.product(range(p.waves), range(p.num_clusters)):
                for r in p.ranks(c):
                    if p.output_tile(c, w, r) is None:
                        continue
                    cf = p.closed_form(op, r)
                    assert p.single_issuer(op, c, w, r) == cf.single_issuer, (p, op, c, w, r)
                    mine = [s for s in p.issued(c, w, r) if s.operand == op]
                    assert [(s.index, s.count) for s in mine] == [(cf.slice_index, cf.slice_count)]
                    checked += 1
    assert checked > 1000


def test_conditions_are_not_vacuous_some_failing_shapes_do_differ():
    differing = [(p, op) for p in _sweep() for op in "AB"
                 if not p.closed_form_holds(op) and p.differences(op)]
    assert len(differing) > 50


def test_persistent_grid_of_127_ctas_breaks_the_closed_form():
    """The nvFuser design's example: 127 CTAs in clusters of 2x2 in the linear order."""
    p = plan(tile=(128, 128, 64), cluster=(2, 2), tiles=(16, 16, 1), grid=127, order="linear")
    assert not p.launchable
    assert not p.closed_form_holds("A") and not p.closed_form_holds("B")
    failing = [c.text for c in p.conditions("A") if not c.holds]
    assert failing == ["grid 127 % CN 2 == 0 (the groups of CN do not shift from one wave to "
                       "the next)"]
    diffs = {(d.cluster, d.wave, d.rank): d for d in p.differences("A")}
    # CTAs 124..126 (cluster 31, wave 0) hold tiles 124..126: rank 2 has tile 126 = (7, 14)
    # and its partner would be rank 3, which does not exist.
    d = diffs[(31, 0, 2)]
    assert (d.brute_mask, d.closed_mask) == (0b0100, 0b1100)
    assert "does not exist" in d.why
    # In wave 1, cluster 0 starts at tile 127: ranks 0 and 1 hold tiles 127 = (7, 15) and
    # 128 = (8, 0), different rows of C, so they must not share A; the formula says they do.
    assert p.output_tile(0, 1, 0) == (7, 15) and p.output_tile(0, 1, 1) == (8, 0)
    d = diffs[(0, 1, 0)]
    assert (d.brute_mask, d.closed_mask) == (0b0001, 0b0011)
    # ...and ranks 1 and 2 (tiles (8, 0), (8, 1)) do share A, which the formula cannot express.
    assert p.mask("A", 0, 1, 1) == 0b0110
    # The same schedule with 128 CTAs satisfies the conditions and agrees everywhere.
    q = plan(tile=(128, 128, 64), cluster=(2, 2), tiles=(16, 16, 1), grid=128, order="linear")
    assert q.closed_form_holds("A") and q.closed_form_holds("B")
    assert q.differences("A") == [] and q.differences("B") == []


def test_nvfuser_conditions_for_a_hold_with_a_grid_that_is_not_whole_clusters():
    """The nvFuser design asks only grid % CN == 0 (and cluster % CN == 0) for A: 126 CTAs in 2x2."""
    p = plan(tile=(128, 128, 64), cluster=(2, 2), tiles=(16, 16, 1), grid=126, order="linear")
    assert p.closed_form_holds("A") and p.differences("A") == []
    assert not p.closed_form_holds("B") and p.differences("B")


@pytest.mark.parametrize("cluster", [(1, 1), (2, 1), (1, 2), (2, 2), (4, 2)])
def test_cute_cluster_order_masks(cluster):
    """CuTe numbers CTAs column-major, r = cm + cn*CM: B's sharers are contiguous ranks, A's a
    comb with stride CM."""
    cm, cn = cluster
    p = plan(tile=(128, 256, 64), cluster=cluster, tiles=(4 * cm, 4 * cn, 3))
    for r in range(cm * cn):
        a_rank, b_rank = r % cm, r // cm
        assert p.mask("A", 0, 0, r) == sum(1 << (a_rank + j * cm) for j in range(cn))
        assert p.mask("B", 0, 0, r) == (2 ** cm - 1) << (b_rank * cm)
        cf = p.closed_form("B", r)
        assert (cf.mask, cf.slice_index, cf.slice_count) == ((2 ** cm - 1) << (r // cm * cm), r % cm, cm)


def test_linear_order_masks_match_the_nvfuser_closed_form():
    """The nvFuser design: issuer rank % CN == 0 and mask (2**CN - 1) << ... for A."""
    p = plan(tile=(128, 128, 64), cluster=(2, 4), tiles=(8, 8, 1), grid=64, order="linear")
    for r in range(8):
        cf = p.closed_form("A", r)
        assert cf.mask == 0b1111 << (r // 4 * 4)
        assert cf.single_issuer == (r % 4 == 0)
        for c in range(p.num_clusters):
            assert p.single_issuer("A", c, 0, r) == cf.single_issuer


@pytest.mark.parametrize("order", ["cluster", "linear"])
@pytest.mark.parametrize("cluster", [(1, 1), (2, 1), (1, 2), (2, 2), (4, 2)])
def test_every_cta_receives_whole_tiles_and_issues_its_slice(order, cluster):
    bm, bn, bk = 128, 256, 64
    p = plan(tile=(bm, bn, bk), cluster=cluster, tiles=(8, 8, 2), order=order)
    cm, cn = cluster
    for c in range(p.num_clusters):
        for k in range(2):
            loads = p.loads(c, 0, k)
            for r in p.ranks(c):
                # the full barrier expects the whole A and B tiles, whoever issued the slices
                assert p.tx_bytes(c, 0, r, k) == (bm + bn) * bk * 2
                # issued: 1/CN of A's box and 1/CM of B's
                mine = {s.operand: s for s in p.issued(c, 0, r, k)}
                assert mine["A"].bytes == bm // cn * bk * 2 and mine["B"].bytes == bn // cm * bk * 2
                assert p.l2_bytes(c, 0, r, k) == mine["A"].bytes + mine["B"].bytes
                assert p.l2_bytes(c, 0, r, k, multicast=False) == (bm + bn) * bk * 2
                # every CTA of its row and column must release a stage before it is refilled
                assert p.empty_arrivals(c, 0, r, k) == cm + cn - 1
                cf_a, cf_b = p.closed_form("A", r), p.closed_form("B", r)
                assert mine["A"].index == cf_a.slice_index and mine["B"].index == cf_b.slice_index
            # the slices of one tile tile its box exactly
            for op, rows in (("A", bm), ("B", bn)):
                by_tile = {}
                for s in loads:
                    if s.operand == op:
                        by_tile.setdefault(s.tile, []).append(s.rows)
                for spans in by_tile.values():
                    spans.sort()
                    assert spans[0][0] == 0 and spans[-1][1] == rows
                    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))


def test_k_tile_does_not_change_who_shares():
    p = plan(tile=(128, 128, 64), cluster=(2, 2), tiles=(6, 6, 4), grid=12, order="linear")
    for c, w, r in itertools.product(range(p.num_clusters), range(p.waves), range(4)):
        masks = {p.mask("A", c, w, r, k) for k in range(4)}
        assert len(masks) == 1
        if p.needs(c, w, r, 3) is not None:
            assert p.needs(c, w, r, 3)["A"][1] == 3


def test_idle_ctas_issue_and_receive_nothing():
    p = plan(tile=(128, 128, 64), cluster=(2, 1), tiles=(2, 3, 1), grid=4)  # 3 cluster tiles, 2 clusters
    assert p.waves == 2 and p.output_tile(1, 1, 0) is None
    assert p.mask("A", 1, 1, 0) == 0 and p.tx_bytes(1, 1, 0) == 0 and p.l2_bytes(1, 1, 0) == 0


def test_multicast_saves_the_shared_operand_traffic():
    """8192^3, 128x256 tiles, cluster 2x1: B is read once per pair, so 1/3 less L2 traffic."""
    p1 = plan(tile=(128, 256, 64), cluster=(1, 1), problem=(8192, 8192, 8192))
    p2 = plan(tile=(128, 256, 64), cluster=(2, 1), problem=(8192, 8192, 8192))
    t1, t2 = l2_traffic(p1), l2_traffic(p2)
    assert t1["with_multicast"] == t1["without_multicast"] == t2["without_multicast"]
    # per CTA per k-tile: A 128x64 + B 256x64 fp16 = 48 KiB; with 2x1, B/2: 32 KiB
    assert t2["with_multicast"] * 3 == t1["without_multicast"] * 2


def test_table_and_formatting():
    p = plan(tile=(128, 256, 64), cluster=(2, 2), tiles=(2, 2, 1))
    text = p.table()
    assert "0b0101" in text and "0b0011" in text and "49152" in text
    assert fmt_mask(5) == "0b0101" and bits(0b1010) == [1, 3]
    assert "mask = (2**2 - 1) << (rank // 2 * 2)" in p.closed_form_text("B")


@pytest.mark.parametrize("kwargs, match", [
    (dict(cluster=(4, 8), tiles=(8, 8, 1)), "more than the 16"),
    (dict(cluster=(0, 1), tiles=(8, 8, 1)), "positive"),
    (dict(cluster=(2,), tiles=(8, 8, 1)), "pair of integers"),
    (dict(tile=(128, 256), tiles=(8, 8, 1)), "three integers"),
    (dict(problem=(1000, 1024, 1024)), "M=1000 is not a multiple"),
    (dict(), "exactly one of problem"),
    (dict(tiles=(4, 4, 1), order="zigzag"), "unknown tile order"),
    (dict(tiles=(4, 4, 1), grid=0), "at least one CTA"),
])
def test_bad_input_says_what_to_do(kwargs, match):
    with pytest.raises(ShapeError, match=match) as err:
        plan(**kwargs)
    assert err.value.fix


def test_bad_operand():
    p = plan(tiles=(2, 2, 1))
    with pytest.raises(ShapeError, match="operand must be"):
        p.mask("C", 0, 0, 0)


# -- notebook 05's checkers -----------------------------------------------------------------------
def test_nb05_checkers_accept_right_and_reject_wrong_answers():
    from cutecourse.exercises import nb05

    def right(op, rank, cluster):
        cm, cn = cluster
        if op == "B":
            return (2 ** cm - 1) << (rank // cm * cm)
        return sum(1 << (rank % cm + j * cm) for j in range(cn))

    def row_major(op, rank, cluster):  # the linear order's ranks: wrong for CuTe's cluster
        cm, cn = cluster
        if op == "A":
            return (2 ** cn - 1) << (rank // cn * cn)
        return sum(1 << (rank % cn + i * cn) for i in range(cm))

    def unanswered(op, rank, cluster):
        raise NotImplementedError

    assert nb05.check_mask(right).ok
    bad = nb05.check_mask(row_major)
    assert not bad.ok and "cluster 2x2, rank 0, operand A" in bad.message
    assert "not answered" in nb05.check_mask(unanswered).message
    assert nb05.check_bytes(49152, 32768).ok
    swapped = nb05.check_bytes(32768, 49152)
    assert not swapped.ok and "issues, not what lands" in swapped.hint
    assert not nb05.check_bytes(49152, 24576).ok
    assert "not answered" in nb05.check_bytes(..., ...).message
    assert nb05.check_empty_arrivals(lambda c, w: (c[0] + c[1] - 1) * w).ok
    assert not nb05.check_empty_arrivals(lambda c, w: c[0] * c[1] * w).ok


# -- the cluster kernel: what it uses agrees with the planner ---------------------------------------
from cutecourse.errors import DeviceError  # noqa: E402
from cutecourse.kernels import hopper_gemm as hg  # noqa: E402
from cutecourse.kernels import hopper_gemm_cluster as hc  # noqa: E402
from cutecourse.models.multicast import traffic_summary  # noqa: E402

KERNEL_CLUSTERS = [(1, 1), (2, 1), (1, 2), (2, 2), (4, 2), (1, 4)]


@pytest.mark.parametrize("cluster", KERNEL_CLUSTERS)
def test_kernel_masks_bytes_and_arrivals_agree_with_the_planner(cluster):
    """Read back from a trace of the kernel: the masks of its TMA loads for every rank, the full
    barrier's tx_count and the empty barrier's arrival count, against the brute-force planner."""
    facts = hc.kernel_facts(cluster, tile=(128, 256))
    p = plan(tile=(128, 256, 64), cluster=cluster, tiles=(2 * cluster[0], 2 * cluster[1], 4))
    cm, cn = cluster
    for c in range(p.num_clusters):
        for r in range(cm * cn):
            assert facts.masks[r] == {"A": p.mask("A", c, 0, r), "B": p.mask("B", c, 0, r)}, (c, r)
            assert facts.masks[r]["A"] == p.closed_form("A", r).mask
            assert facts.masks[r]["B"] == p.closed_form("B", r).mask
            assert facts.tx_count == p.tx_bytes(c, 0, r)
            assert facts.empty_arrivals == p.empty_arrivals(c, 0, r) * 8  # 8 consumer warps
    # an operand is multicast exactly when more than one CTA shares it
    assert set(facts.multicast_copies) == {op for op, n in (("A", cn), ("B", cm)) if n > 1}


def test_one_cta_kernel_is_the_cluster_kernels_1x1():
    """cluster (1, 1) is the plain one-CTA-per-tile kernel: no masks, arrivals from itself only."""
    facts = hc.kernel_facts((1, 1))
    assert not facts.multicast_copies and facts.plain_copies == {"A": 2, "B": 2}
    assert facts.empty_arrivals == 8
    assert isinstance(hc.make_kernel(cluster=(1, 1)), hg.HopperGemm)
    assert type(hc.make_kernel(cluster=(2, 1))) is hc.ClusterHopperGemm


def test_the_cluster_steps_are_overrides_of_the_1x1_kernel():
    from cutecourse.viz.source import diff_lines

    for step in hc.CLUSTER_STEPS:
        assert step in hc.ClusterHopperGemm.__dict__ and step in hg.HopperGemm.__dict__
        assert diff_lines(getattr(hg.HopperGemm, step), getattr(hc.ClusterHopperGemm, step))
    text = "\n".join(diff_lines(hg.HopperGemm.mainloop_done, hc.ClusterHopperGemm.mainloop_done))
    assert "+    cute.arch.cluster_wait()" in text and "-    cute.arch.sync_threads()" in text


EXPECTED_PTX = {  # cluster -> (multicast loads, all TMA loads) in the prefetch variant's PTX
    (1, 1): (0, 4), (2, 1): (2, 4), (1, 2): (2, 4), (2, 2): (4, 4)}


@pytest.mark.slow
@pytest.mark.parametrize("cluster", list(EXPECTED_PTX))
def test_ptx_has_multicast_loads_only_along_a_shared_dimension(cluster):
    from cutecourse.inspect import compile_report

    r = compile_report("cutecourse.kernels.hopper_gemm_cluster:compile_target",
                       variant="prefetch", cluster=list(cluster))
    multicast, total = EXPECTED_PTX[cluster]
    assert r.count(hc.PTX_MULTICAST_LOAD) == multicast == hc.expected_multicast_loads(cluster, "prefetch")
    assert r.count(hc.PTX_TMA_LOAD) == total
    big = cluster != (1, 1)
    # remote arrives on peers' empty barriers, and the cluster-wide teardown, only in clusters
    assert (r.count(r"^mbarrier\.arrive.*shared::cluster") > 0) == big
    assert (r.count(r"^barrier\.cluster\.wait") >= 2) == big  # init + teardown
    assert r.spill_bytes == 0


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["naive", "compiler"])
@pytest.mark.parametrize("cluster", [(2, 1), (2, 2)])
def test_every_variant_multicasts(variant, cluster):
    from cutecourse.inspect import compile_report

    r = compile_report("cutecourse.kernels.hopper_gemm_cluster:compile_target", variant=variant,
                       cluster=list(cluster))
    assert r.count(hc.PTX_MULTICAST_LOAD) == hc.expected_multicast_loads(cluster, variant) > 0


@pytest.mark.parametrize("cluster, match", [
    ((3, 1), "not a power of two"),
    ((4, 8), "16 bits"),
    ((0, 2), "at least 1"),
    ((2,), "pair"),
])
def test_cluster_shapes_that_cannot_work(cluster, match):
    with pytest.raises(ShapeError, match=match) as err:
        hc.check_cluster(cluster)
    assert err.value.fix


def test_kernel_refuses_a_bad_cluster_before_compiling():
    with pytest.raises(ShapeError, match="not a power of two"):
        hc.ClusterHopperGemm((128, 256), variant="prefetch", cluster_mn=(3, 1))
    with pytest.raises(CourseError, match="l2_hints"):
        hc.ClusterHopperGemm((128, 256), variant="prefetch", cluster_mn=(2, 1), l2_hints="evict")


@pytest.mark.no_gpu("sm_90a")
def test_launcher_takes_grids_that_are_not_whole_clusters():
    import torch

    a = torch.zeros(640, 128, dtype=torch.float16)  # 5 tiles of 128 rows: 3 clusters of 2
    b = torch.zeros(512, 128, dtype=torch.float16)
    c = torch.zeros(640, 512, dtype=torch.float16)
    with pytest.raises(DeviceError):  # accepted: the next step is launching, which needs a GPU
        hc.launcher(a, b, c, cluster=(2, 1))
    with pytest.raises(ShapeError, match="expected"):  # a C of the wrong shape is refused first
        hc.launcher(a, b, c[:, :256], cluster=(2, 1))


_GPU_CHECK = r"""
import sys, torch, cutecourse
from cutecourse.kernels import hopper_gemm_cluster as hc
torch.manual_seed(0)
for cluster in [(1, 1), (2, 1), (1, 2), (2, 2)]:
    # whole clusters, and grids of 33 x 17 and 5 x 3 tiles that are not (the grid rounds up)
    for m, n, k in [(1024, 2048, 512), (512, 1024, 1000), (4160, 4224, 520), (640, 520, 64)]:
        a = torch.randn(m, k, device="cuda").half(); b = torch.randn(n, k, device="cuda").half()
        ref = a.float() @ b.float().T
        c = hc.gemm(a, b, cluster=cluster)
        torch.cuda.synchronize()
        err = ((c.float() - ref).abs().max() / ref.abs().max()).item()
        assert err < 1e-2, (cluster, m, n, k, err)
# the tile order's band height and the epilogue tile are constructor parameters
a = torch.randn(4160, 520, device="cuda").half(); b = torch.randn(4224, 520, device="cuda").half()
c = hc.gemm(a, b, cluster=(2, 1), group_m=3, epi_tile=(128, 64))
err = ((c.float() - a.float() @ b.float().T).abs().max() / (a.float() @ b.float().T).abs().max()).item()
assert err < 1e-2, ("group_m=3, epi_tile=(128, 64)", err)
print("ok")
"""


@pytest.mark.gpu("sm_90a")
def test_every_cluster_shape_matches_torch_on_the_gpu():
    import subprocess
    import sys

    # in a subprocess with a timeout: a barrier mistake in a pipelined kernel hangs, not fails
    out = subprocess.run([sys.executable, "-c", _GPU_CHECK], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]


def test_l2_hints_put_the_eviction_policies_in_the_ptx():
    from cutecourse.inspect import compile_report

    r = compile_report("cutecourse.kernels.hopper_gemm_cluster:compile_target", cluster=[2, 1],
                       l2_hints="a_first")
    consts = {int(x) for x in re.findall(r"mov\.b64\s+%rd\d+, (\d+)", r.ptx)}
    assert {hc.EVICT_FIRST, hc.EVICT_LAST} <= consts
    plain = compile_report("cutecourse.kernels.hopper_gemm_cluster:compile_target", cluster=[2, 1])
    assert hc.EVICT_FIRST not in {int(x) for x in re.findall(r"mov\.b64\s+%rd\d+, (\d+)", plain.ptx)}


def test_result_helpers_read_the_committed_measurement():
    from cutecourse import bench

    res = bench.load("multicast_fp16_8192")
    assert res.baseline == "cluster 1x1"
    assert {r.name for r in res.rows} >= {hc_name for hc_name in
                                          (f"cluster {a}x{b}" for a, b in hc.CLUSTERS)}
    text = bench.paired_ratio(res, "cluster 2x2")
    assert text.startswith("cluster 2x2 vs cluster 1x1: ") and "paired repeats" in text
    summary = traffic_summary(res)
    assert "cluster 2x1: planner   8.00 GiB" in summary
    # every check the benchmark made before timing passed (it exits otherwise) and was recorded
    assert all(err < 1e-2 for err in res.params["max_rel_error"].values())


def test_paired_ratio_verdicts():
    from cutecourse import bench
    from cutecourse.bench import BenchResult, Row, Work

    def result(base, other):
        return BenchResult("t", Work(flops=1), "cluster 1x1",
                           [Row("cluster 1x1", 10.0, base), Row("x", 9.0, other)])

    assert "faster in 4 of 4" in bench.paired_ratio(result([10] * 4, [9] * 4), "x")
    assert "slower in 4 of 4" in bench.paired_ratio(result([9] * 4, [10] * 4), "x")
    assert "no consistent difference" in bench.paired_ratio(result([10, 9, 10, 9], [9, 10, 9, 10]), "x")


def test_benchmark_reads_ncu_csv():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "multicast.py"
    spec = importlib.util.spec_from_file_location("bench_multicast", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    text = ('==PROF== Connected to process 1\n'
            '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
            '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
            '"Metric Value"\n'
            '"0","1","python3","h","k","1","7","(256, 1, 1)","(64, 32, 1)","0","9.0","Command line '
            'profiler metrics","dram__bytes_read.sum","byte","1,234,567"\n'
            '"0","1","python3","h","k","1","7","(256, 1, 1)","(64, 32, 1)","0","9.0","Command line '
            'profiler metrics","lts__t_bytes.sum","byte","89"\n')
    assert mod.parse_ncu_csv(text) == {"dram__bytes_read.sum": 1234567.0, "lts__t_bytes.sum": 89.0}
    assert mod.parse_ncu_csv("==ERROR== ERR_NVGPUCTRPERM") == {}
