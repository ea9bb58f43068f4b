"""Notebook 07's kernel exercises: the solutions (read from the solution notebook) pass; wrong
answers are rejected with a message that names the mistake (most on the CPU model, before any
compile; the rest from the PTX); a compile error names the learner's line; the hooks really
replace the course's code in the compiled kernel; the lab reads the turns from the PTX."""

import re
from pathlib import Path

import nbformat
import pytest

from cutecourse.exercises import kernel_check as kc
from cutecourse.exercises import nb07_kernels
from cutecourse.exercises import nb07_lab
from cutecourse.exercises.learner_code import LearnerCode, as_cell

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions" / "07_grouped_block_scaled_gemm.ipynb"


def _cells() -> dict[str, str]:
    nb = nbformat.read(SOLUTIONS, as_version=4)
    out = {}
    for cell in nb.cells:
        if cell.get("id") in ("ex9-code", "ex10-code", "ex11-code"):
            out[cell.id] = re.sub(r"[ \t]*# (BEGIN|END) SOLUTION\n|[ \t]*# EXERCISE:.*\n", "",
                                  cell.source + "\n")
    # the setup cell (the first code cell) holds every import: the kernel cells run after it alone
    setup = next(c.source for c in nb.cells if c.cell_type == "code")
    out["head"] = "\n".join(line for line in setup.splitlines() if "banner(" not in line) + "\n"
    return out


CELLS = _cells()


def learner(cell: str, name: str, *edits):
    """The solution's function ``name`` with ``edits`` ((old, new) text replacements) applied."""
    src = CELLS[cell]
    for old, new in edits:
        assert old in src, old
        src = src.replace(old, new)
    ns = as_cell(CELLS["head"])
    as_cell(src, ns)
    return ns[name]


def short_and_clean(message: str):
    assert len(message) < 700 and "MLIR" not in message and "Traceback" not in message, message


# -- Exercise 9: the search, two groups a pass ----------------------------------------------------
LOOP = CELLS["ex9-code"][CELLS["ex9-code"].index("    searching = group < groups.count\n"):
                         CELLS["ex9-code"].index("    return group, first")]
#: The course's search, one group a pass (what the lesson lists).
ONE_A_PASS = """    searching = group < groups.count
    while searching:
        items = group_walk.group_items(groups, group)
        searching = work >= first + items
        if searching:
            first = first + items
            group = group + 1
            searching = group < groups.count
"""
SECOND = "                searching = work >= first + items2  # and past the second's?\n"


def test_the_search_solution_passes():
    r = nb07_kernels.check_search(learner("ex9-code", "find_group"))
    assert r, r.message
    assert "numbers checked on the CPU model" in r.message and "two groups per pass" in r.message
    assert "compiled for sm_90a" in r.message.lower() and "not run on a GPU here" in r.message


def test_a_variant_with_a_guarded_second_read_passes():
    """Reading the second group only when it exists (a branch instead of cutlass.min) is right."""
    guarded = """    searching = group < groups.count
    while searching:
        items = group_walk.group_items(groups, group)
        items2 = cutlass.Int32(0)
        if group + 1 < groups.count:
            items2 = group_walk.group_items(groups, group + 1)
        searching = work >= first + items
        if searching:
            first = first + items
            group = group + 1
            searching = (group < groups.count) & (work >= first + items2)
            if searching:
                first = first + items2
                group = group + 1
                searching = group < groups.count
"""
    r = nb07_kernels.check_search(learner("ex9-code", "find_group", (LOOP, guarded)))
    assert r, r.message


@pytest.mark.parametrize("edits, words", [
    # the lesson's search, one group a pass: right answers, twice the passes
    ([(LOOP, ONE_A_PASS)], "one pass per group"),
    # `>` for `>=` in the first test: a group's first item is taken for the group before
    ([("searching = work >= first + items  #", "searching = work > first + items  #")], ">=, not >"),
    # `>` in the second test only
    ([(SECOND, SECOND.replace(">=", ">"))], ">=, not >"),
    # no clamp: the pass reads group + 1 even when it is groups.count
    ([("nxt = cutlass.min(group + 1, groups.count - 1)", "nxt = group + 1")], "group + 1 < groups.count"),
    # the second group passed without its test: two groups a pass whenever the first is passed
    ([(SECOND, "                searching = True\n")], "one group too far"),
    # the second group tested against the first's items
    ([(SECOND, SECOND.replace("items2", "items"))], "belongs to group"),
    # `first` moved by the first group's items for the second group too
    ([("                    first = first + items2\n", "                    first = first + items\n")],
     "must move past the items"),
    # no stop after the first group: tests the (clamped) last group again past the end
    ([("            searching = group < groups.count  # past the last group: the walk is over\n", "")],
     "past groups.count"),
    # an empty group taken for the owner
    ([("searching = work >= first + items  #", "searching = work >= first + items and items > 0  #")],
     "is empty"),
    # the group's end returned for its first item
    ([("    return group, first", "    return group, first + group_walk.group_items(groups, group)")],
     "the end of its items"),
    # a restart from group 0 on every call
    ([(LOOP, "    group, first = 0, 0\n" + LOOP)], "starts again from group 0"),
    # a single pass, no loop: passes over at most two groups
    ([("    while searching:\n", "    if searching:\n")], "stopped before the item's group"),
    # the pass's first group passed but the loop not told to go on (the flag left false)
    ([("            searching = group < groups.count  # past the last group: the walk is over\n",
       "            searching = False\n")], "Test the pass's second group"),
    # a misspelt field: named on the kernel's `groups`, not on the CPU model's stand-in
    ([("    searching = group < groups.count\n    while", "    searching = group < groups.cout\n    while")],
     "`groups` (its fields: count, shapes, cluster_tile) has no attribute 'cout'"),
    # a pass that finds the item inside its pair and still goes on: one pass too many
    ([("                if searching:\n                    first = first + items2\n",
       "                searching = True\n                if work >= first + items2:\n"
       "                    first = first + items2\n")], "must end the loop"),
    # a `break`: fine in Python, refused by the DSL in a run-time loop
    ([(SECOND, "                break\n")], "`break` inside a loop"),
    # `first` moves on, `group` does not: right first items, wrong groups (or no end)
    ([("            first = first + items\n            group = group + 1\n", "            first = first + items\n")], "move `group` on"),
])
def test_search_mistakes_are_named(edits, words):
    r = nb07_kernels.check_search(learner("ex9-code", "find_group", *edits))
    assert not r and words in r.message, r.message
    short_and_clean(r.message)


def test_a_search_compile_error_names_the_line():
    r = nb07_kernels.check_search(learner("ex9-code", "find_group", ("group = group + 1\n            searching",
                                                                     "group = group + 0.5 * 2\n            searching")))
    assert not r and "does not compile" in r.message and "of your cell" in r.message, r.message
    short_and_clean(r.message)


def test_the_search_hook_is_what_the_kernel_runs():
    """A search with no loop at all compiles into a kernel with one loop fewer than the course's."""
    fn = learner("ex9-code", "find_group", (LOOP, "    group = group + 0\n"))
    report = kc.compile_kernel(LearnerCode(fn), "__import__('cutecourse.exercises.nb07_kernels', "
                               "fromlist=['x']).with_search(find_group)",
                               args="cutecourse.exercises.nb07_kernels:bf16_args")
    assert nb07_kernels.facts(report)["loops"] < nb07_kernels.course_facts("bf16")["loops"]


def test_an_untouched_search_stub_is_not_answered_yet():
    r = nb07_kernels.check_search(learner("ex9-code", "find_group", (LOOP, "    raise NotImplementedError\n")))
    assert not r and "not answered yet" in r.message


# -- Exercise 10: the promotion across two blocks of B's scales -----------------------------------
SUM = "acc[i] = acc[i] + part[i] * (sa * sb)"
ROW = "sa = lo if at0[i][0] == at0[0][0] else hi"
COL = "sb = sb0 if first + at0[i][1] < 128 else sb1"


def test_the_promotion_solution_passes():
    r = nb07_kernels.check_promote(learner("ex10-code", "promote"))
    assert r, r.message
    assert "numbers checked on the CPU model" in r.message and "96 FFMAs" in r.message
    assert "not run on a GPU here" in r.message


def test_a_promotion_with_rows_from_the_register_index_passes():
    """The row from the register's index (the wgmma layout: (i // 2) % 2) and the block test
    turned around compute the same values and the same instructions."""
    r = nb07_kernels.check_promote(learner("ex10-code", "promote", (ROW, "sa = hi if (i // 2) % 2 else lo"),
                                           (COL, "sb = sb1 if at0[i][1] >= 128 - first else sb0")))
    assert r, r.message


@pytest.mark.parametrize("edits, words", [
    # the lesson's promotion: one sb for the whole tile
    ([(COL, "sb = sb0")], "so its scale is sb1; yours took sb0"),
    # the block boundary without `first`
    ([(COL, "sb = sb0 if at0[i][1] < 128 else sb1")], "so its scale is sb1"),
    # off by one at the block edge
    ([(COL, "sb = sb0 if first + at0[i][1] <= 128 else sb1")], "only at the block edge"),
    # the rows swapped
    ([(ROW, "sa = hi if at0[i][0] == at0[0][0] else lo")], "yours took the other row's"),
    # the row from the wrong index bit
    ([(ROW, "sa = lo if i % 2 == 0 else hi")], "yours took the other row's"),
    # (row, column) read the wrong way round
    ([(ROW, "sa = lo if at0[i][1] == at0[0][1] else hi"), (COL, "sb = sb0 if first + at0[i][0] < 128 else sb1")],
     "took the other row's"),
    # one row's scale for every register
    ([(ROW, "sa = lo")], "yours took the other row's"),
    # no scale of B
    ([(SUM, "acc[i] = acc[i] + part[i] * sa")], "without sb"),
    ([(SUM, "acc[i] = acc[i] + part[i]")], "without its scales"),
    ([(SUM, "acc[i] = part[i] * (sa * sb)")], "overwrites acc"),
    ([(SUM, "acc[i] = acc[i] + part[i] / (sa * sb)")], "divides by the scales"),
    ([(SUM, "acc[i] = acc[i]")], "acc did not change"),
    # the two-part kernel's habits: a release, and the state's advance, inside the promotion
    ([("    lo, hi, sb0, sb1 = sab\n", "    lo, hi, sb0, sb1 = sab\n    ring.consumer_release(release)\n")],
     "gets no ring and no ring state"),
    ([("    lo, hi, sb0, sb1 = sab\n", "    lo, hi, sb0, sb1 = sab\n    release.advance()\n")],
     "gets no ring and no ring state"),
    # an attribute the arguments do not have
    ([("    lo, hi, sb0, sb1 = sab\n", "    lo, hi, sb0, sb1 = sab\n    lo.advance()\n")],
     "a number (a scale or a register value) has no attribute 'advance'"),
    # a device-only call
    ([("    lo, hi, sb0, sb1 = sab\n", "    lo, hi, sb0, sb1 = sab\n    cute.arch.barrier()\n")],
     "GPU-only operation"),
])
def test_promotion_mistakes_are_named_by_the_cpu_model(edits, words):
    r = nb07_kernels.check_promote(learner("ex10-code", "promote", *edits))
    assert not r and words in r.message, r.message
    short_and_clean(r.message)


def test_the_course_kernels_own_promotion_is_refused():
    """The kernel's file holds the answer: handing it in, or calling it, is no answer."""
    from cutecourse.kernels import hopper_grouped_gemm_fp8_onepart as onepart

    r = nb07_kernels.check_promote(onepart.OnePartBlockScaledGroupedHopperGemm.promote)
    assert not r and "the course kernel's own promotion" in r.message, r.message


@pytest.mark.parametrize("edits, words", [
    # right numbers, two instructions per register
    ([(SUM, "acc[i] = acc[i] + part[i] * sa * sb")], "two instructions per register"),
    # a run-time loop over a register array
    ([("cutlass.range_constexpr(cute.size(part))", "cutlass.range(cute.size(part), unroll=1)")],
     "run-time"),
])
def test_promotion_mistakes_are_named_from_the_ptx(edits, words):
    r = nb07_kernels.check_promote(learner("ex10-code", "promote", *edits))
    assert not r and words in r.message, r.message
    short_and_clean(r.message)


def test_a_promotion_compile_error_names_the_line():
    r = nb07_kernels.check_promote(learner("ex10-code", "promote", (SUM, "acc[i] = acc[i] + part[i] * (sa * sb) + part")))
    assert not r and ("does not compile" in r.message or "fails on the CPU model" in r.message) \
        and "of your cell" in r.message, r.message
    short_and_clean(r.message)


def test_an_untouched_promotion_stub_is_not_answered_yet():
    r = nb07_kernels.check_promote(learner("ex10-code", "promote", ("    lo, hi, sb0, sb1 = sab\n",
                                                                    "    raise NotImplementedError\n")))
    assert not r and "not answered yet" in r.message


def test_the_cpu_model_s_fragment_layout_is_the_kernel_s():
    """Thread 0's (row, column) of each register, as the CPU model places them, are what the
    kernel's tiled MMA gives (printed at trace time from partition_C of an identity tensor)."""
    from cutecourse.exercises.nb07_cpu_promote import fragment_coords

    coords = fragment_coords(0, 192)
    assert coords[:4] == [(0, 0), (0, 1), (8, 0), (8, 1)] and coords[4] == (0, 8) and len(coords) == 96
    assert fragment_coords(37, 128)[0] == (16 + 1, 2) and fragment_coords(128, 128)[0][0] == 64


# -- Exercise 11 (lab) ----------------------------------------------------------------------------
RIGHT = {"wgmma": 4, "wait_group 1": 0, "wait_group 0": 1, "ffma": 64}


@pytest.mark.parametrize("turns, order", [
    (None, "wgmma x4 -> wait_group 0 -> FFMA x64"),
    ("issue", "wait for my turn -> wgmma x4 -> pass the turn -> wait_group 0 -> FFMA x64"),
    ("done", "wait for my turn -> wgmma x4 -> wait_group 0 -> pass the turn -> FFMA x64"),
])
def test_the_lab_reads_each_turn_s_order_from_the_ptx(turns, order):
    r = nb07_lab.check_one_part_lab(turns, RIGHT)
    assert r and "ffma: 64 (two parts: 320)" in r.message and order in r.message, r.message
    assert "Nothing was timed here" in r.message


@pytest.mark.parametrize("prediction, words", [
    ({**RIGHT, "wgmma": 16}, "you predicted wgmma = 16"),  # the two-part kernel's count
    ({**RIGHT, "wgmma": 1}, "4 wgmmas"),  # one wgmma per k-tile
    ({**RIGHT, "wait_group 1": 1}, "nothing else is in flight"),
    ({**RIGHT, "wait_group 0": 2}, "one wait_group(0)"),
    ({**RIGHT, "ffma": 128}, "64 x 128 / 128 = 64"),  # a promotion per warpgroup tile, not per thread
    ({**RIGHT, "ffma": 320}, "you predicted ffma = 320"),  # the two-part kernel's
    ({**RIGHT, "wgmma": 8, "ffma": 128}, "also wrong: ffma"),
    ({"wgmma": 4, "wait_group 1": 0, "wait_group 0": 1}, "has no 'ffma'"),
    ([4, 0, 1, 64], "write a dict"),
])
def test_wrong_lab_predictions_are_named(prediction, words):
    r = nb07_lab.check_one_part_lab("issue", prediction)
    assert not r and words in r.message, r.message


def test_the_lab_names_a_wrong_turn():
    assert "pick one of" in nb07_lab.check_one_part_lab("sometimes", RIGHT).message


# -- on an H100 -----------------------------------------------------------------------------------
@pytest.mark.gpu
def test_the_solutions_run_against_torch_on_the_gpu():
    r = nb07_kernels.check_search(learner("ex9-code", "find_group"))
    assert r and "On the GPU: your search matches torch._grouped_mm" in r.message, r.message
    r = nb07_kernels.check_promote(learner("ex10-code", "promote"))
    assert r and "On the GPU: your promotion matches the recipe's reference" in r.message, r.message
    r = nb07_lab.check_one_part_lab("issue", RIGHT)
    assert r and "On the GPU" in r.message and "the course kernel's speed" in r.message, r.message


@pytest.mark.gpu
def test_a_wrong_search_is_caught_on_the_gpu_without_hanging():
    """A search that passes no group (everything in group 0) must come back as wrong, not hang:
    a wrong result, a stopped hang, or a crash explained in the learner's terms."""
    fn = learner("ex9-code", "find_group", (LOOP, "    group = group + 0\n"))
    run = kc.run_on_gpu(LearnerCode(fn), "__import__('cutecourse.exercises.nb07_kernels', fromlist=['x'])"
                        ".with_search(find_group)", runner="cutecourse.exercises.nb07_gpu:search_runner",
                        timeout=60)
    assert not run.ok and ("wrong result" in run.message or "did not finish" in run.message
                           or "the kernel crashed" in run.message), run.message
    assert "Traceback" not in run.message and len(run.message) < 600, run.message


@pytest.mark.gpu
def test_a_promotion_with_one_block_of_b_is_wrong_on_the_gpu():
    """The lesson's promotion (one sb per tile) in the 128x192 kernel: wrong against the reference."""
    fn = learner("ex10-code", "promote", (COL, "sb = sb0"))
    run = kc.run_on_gpu(LearnerCode(fn), "__import__('cutecourse.exercises.nb07_kernels', fromlist=['x'])"
                        ".with_promote(promote)", runner="cutecourse.exercises.nb07_gpu:promote_runner",
                        timeout=120)
    assert not run.ok and "wrong result" in run.message, run.message
