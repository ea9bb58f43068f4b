"""The multicast planner (models/multicast.py): brute force ("same bulk", nvFuser's multicast design)
against the closed form; notebook 05's checkers. The kernel: test_hopper_gemm_cluster.py."""

from __future__ import annotations

import itertools

import pytest

from cutecourse.errors import ShapeError
from cutecourse.models.multicast import bits, fmt_mask, l2_traffic, plan

CLUSTERS = [(1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (1, 4), (4, 2), (2, 4), (4, 4), (8, 2)]
TILE_COUNTS = [(4, 4, 2), (8, 4, 1), (6, 10, 1), (5, 7, 1), (16, 16, 1)]


def _holds(p, operand) -> bool:
    """Every condition of the closed form holds for this plan and operand."""
    return all(c.holds for c in p.conditions(operand))


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
            if _holds(p, op):
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
            if not _holds(p, op) or p.num_tiles > 64:
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
                 if not _holds(p, op) and p.differences(op)]
    assert len(differing) > 50


def test_persistent_grid_of_127_ctas_breaks_the_closed_form():
    """The nvFuser design's example: 127 CTAs in clusters of 2x2 in the linear order."""
    p = plan(tile=(128, 128, 64), cluster=(2, 2), tiles=(16, 16, 1), grid=127, order="linear")
    assert not p.launchable
    assert not _holds(p, "A") and not _holds(p, "B")
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
    assert _holds(q, "A") and _holds(q, "B")
    assert q.differences("A") == [] and q.differences("B") == []


def test_nvfuser_conditions_for_a_hold_with_a_grid_that_is_not_whole_clusters():
    """The nvFuser design asks only grid % CN == 0 (and cluster % CN == 0) for A: 126 CTAs in 2x2."""
    p = plan(tile=(128, 128, 64), cluster=(2, 2), tiles=(16, 16, 1), grid=126, order="linear")
    assert _holds(p, "A") and p.differences("A") == []
    assert not _holds(p, "B") and p.differences("B")


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
