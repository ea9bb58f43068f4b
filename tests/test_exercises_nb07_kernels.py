"""Notebook 07's kernel exercises: the solutions (read from the solution notebook) pass; typical
wrong answers are rejected with a message that names the mistake; a compile error names the
learner's line; the hooks really replace the course's code in the compiled kernel."""

import re
from pathlib import Path

import nbformat
import pytest

from cutecourse.exercises import kernel_check as kc
from cutecourse.exercises import nb07_kernels
from cutecourse.exercises.learner_code import LearnerCode, as_cell

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions" / "07_grouped_block_scaled_gemm.ipynb"


def _cells() -> dict[str, str]:
    nb = nbformat.read(SOLUTIONS, as_version=4)
    out = {}
    for cell in nb.cells:
        if cell.get("id") in ("ex9-code", "ex10-code", "ex11-code"):
            out[cell.id] = re.sub(r"[ \t]*# (BEGIN|END) SOLUTION\n|[ \t]*# EXERCISE:.*\n", "",
                                  cell.source + "\n")
    head, search = out["ex9-code"].split("@cute.jit", 1)
    out["head"], out["ex9-code"] = head, "@cute.jit" + search
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
    assert len(message) < 400 and "MLIR" not in message and "Traceback" not in message, message


# -- Exercise 9: the group search ------------------------------------------------------------
def test_the_search_solution_passes():
    r = nb07_kernels.check_search(learner("ex9-code", "find_group"))
    assert r, r.message
    assert "compiles for sm_90a" in r.message and "CPU model" in r.message


LOOP = """    searching = group < groups.count
    while searching:
        items = group_walk.group_items(groups, group)  # 0 for an empty group: passed over
        searching = work >= first + items  # `work` lies past this group's items
        if searching:
            first = first + items
            group = group + 1
            searching = group < groups.count  # past the last group: the walk is over
"""


@pytest.mark.parametrize("edits, words", [
    # searching from group 0 every time: right groups, G reads per item
    ([(LOOP, "    group, first = 0, 0\n" + LOOP)], "starts again from group 0"),
    # `>` for `>=`: a group's first item is taken for the group before
    ([("work >= first + items", "work > first + items")], "not >"),
    # no stop at the last group: reads a shape past the end
    ([("            searching = group < groups.count  # past the last group: the walk is over\n", "")],
     "past the last group"),
    # `first` not moved on: the next search starts from a wrong first item
    ([("            first = first + items\n", "")], "must move past the items"),
    # an empty group taken for the owner: stops where items == 0
    ([("        searching = work >= first + items", "        searching = work >= first + items and items > 0")],
     "group 0 is empty"),
    # the group's end returned instead of its first item
    ([("    return group, first", "    return group, first + group_walk.group_items(groups, group)")],
     "the end of its items"),
    # group_items read in the loop's condition and again in its body: right groups, double reads
    ([(LOOP, "    while group < groups.count and work >= first + group_walk.group_items(groups, group):\n"
             "        first = first + group_walk.group_items(groups, group)\n        group = group + 1\n")],
     "more than once per step"),
    # a misspelt field: named on the kernel's `groups`, not on the CPU model's stand-in
    ([("    searching = group < groups.count\n    while", "    searching = group < groups.cout\n    while")],
     "`groups` (its fields: count, shapes, cluster_tile) has no attribute 'cout'"),
    # a `break`: fine in Python, refused by the DSL in a run-time loop
    ([(LOOP, "    while group < groups.count:\n        items = group_walk.group_items(groups, group)\n"
             "        if work < first + items:\n            break\n        first = first + items\n"
             "        group = group + 1\n")], "`break` inside a loop"),
])
def test_search_mistakes_are_named(edits, words):
    r = nb07_kernels.check_search(learner("ex9-code", "find_group", *edits))
    assert not r and words in r.message, r.message
    short_and_clean(r.message)


def test_a_search_that_never_ends_is_stopped_on_the_cpu():
    r = nb07_kernels.check_search(learner("ex9-code", "find_group", ("            group = group + 1\n", "")))
    assert not r and ("does not end" in r.message or "belongs to group" in r.message), r.message


def test_a_search_compile_error_names_the_line():
    r = nb07_kernels.check_search(learner("ex9-code", "find_group", ("group = group + 1", "group = group + 0.5 * 2")))
    assert not r and "does not compile" in r.message and "line " in r.message and "of your cell" in r.message
    short_and_clean(r.message)


def test_the_search_hook_is_what_the_kernel_runs():
    """A search with no loop at all compiles into a kernel with one loop fewer than the course's."""
    fn = learner("ex9-code", "find_group", (LOOP, "    group = group + 0\n"))
    code = LearnerCode(fn)
    report = kc.compile_kernel(code, "__import__('cutecourse.exercises.nb07_kernels', fromlist=['x'])"
                               ".with_search(find_group)", args="cutecourse.exercises.nb07_kernels:bf16_args")
    assert nb07_kernels.facts(report)["loops"] < nb07_kernels.course_facts("bf16")["loops"]


# -- Exercise 10: the FP8 promotion step ------------------------------------------------------
def test_the_promotion_solution_passes():
    r = nb07_kernels.check_promote(learner("ex10-code", "promote"))
    assert r, r.message
    assert "320 FFMAs" in r.message and "CPU model" in r.message


SUM = "acc[i] = acc[i] + part[i] * (sa[i] * sb)"


@pytest.mark.parametrize("edits, words", [
    ([(SUM, "acc[i] = acc[i] + part[i]")], "without its scales"),
    ([(SUM, "acc[i] = acc[i] + part[i] * sa[i]")], "forgets sb"),
    ([(SUM, "acc[i] = part[i] * (sa[i] * sb)")], "overwrites acc"),
    ([(SUM, "acc[i] = acc[i] + part[i] * (sa[0] * sb)")], "first row's sa[0]"),
    ([(SUM, "acc[i] = acc[i] + part[i] / (sa[i] * sb)")], "divides by the scales"),
    ([("    ring.consumer_release(release)  # its wgmmas are done: the producer may refill the stage\n", "")],
     "never frees the k-tile's ring stage"),
    ([("    ring.consumer_release(release)  #", "    ring.consumer_release(release)\n    ring.consumer_release(release)  #")],
     "frees the stage 2 times"),
])
def test_promotion_mistakes_are_named_by_the_cpu_model(edits, words):
    r = nb07_kernels.check_promote(learner("ex10-code", "promote", *edits))
    assert not r and words in r.message, r.message
    short_and_clean(r.message)


@pytest.mark.parametrize("edits, words", [
    # right numbers, two instructions per register
    ([(SUM, "acc[i] = acc[i] + part[i] * sa[i] * sb")], "two instructions per register"),
    # a wait for every wgmma: right numbers, no overlap
    ([("    ring.consumer_release(release)  #",
       "    cute.nvgpu.warpgroup.wait_group(0)\n    ring.consumer_release(release)  #")], "waits for every wgmma"),
    # the TensorSSA form, left to right: runs on the CPU model, two instructions per register
    ([("    for i in cutlass.range_constexpr(cute.size(part)):", "    if True:"),
      (SUM, "acc.store(acc.load() + part.load() * sa.load() * sb)")], "two instructions per register"),
    # a run-time loop over a register array
    ([("cutlass.range_constexpr(cute.size(part))", "cutlass.range(cute.size(part), unroll=1)")],
     "run-time loop"),
])
def test_promotion_mistakes_are_named_from_the_ptx(edits, words):
    r = nb07_kernels.check_promote(learner("ex10-code", "promote", *edits))
    assert not r and words in r.message, r.message


def test_a_promotion_compile_error_names_the_line():
    r = nb07_kernels.check_promote(learner("ex10-code", "promote",
                                           ("ring.consumer_release(release)", "ring.consumer_release(release, 1)")))
    assert not r and "does not compile" in r.message and "of your cell (`ring.consumer_release(release, 1)" \
        in r.message, r.message
    short_and_clean(r.message)


def test_an_untouched_stub_is_not_answered_yet():
    stub = CELLS["ex10-code"].replace("    ring.consumer_release", "    raise NotImplementedError\n    ring.consumer_release", 1)
    ns = as_cell(CELLS["head"])
    as_cell(stub, ns)
    r = nb07_kernels.check_promote(ns["promote"])
    assert not r and "not answered yet" in r.message


# -- Exercise 11 (lab) ----------------------------------------------------------------------------
def test_the_lab_checks_the_prediction_against_the_compiled_kernel():
    right = {"wgmma": 4, "wait_group 1": 0, "wait_group 0": 1, "ffma": 64}
    r = nb07_kernels.check_one_part_lab("issue", right)
    assert r and "ffma: 64 (two parts: 320)" in r.message, r.message
    r = nb07_kernels.check_one_part_lab("issue", {**right, "wgmma": 16})
    assert not r and "you predicted wgmma = 16" in r.message and "one site" in r.message
    r = nb07_kernels.check_one_part_lab("issue", {**right, "wait_group 1": 1})
    assert not r and "nothing else is in flight" in r.message
    assert "pick one of" in nb07_kernels.check_one_part_lab("sometimes", right).message
    assert "has no 'ffma'" in nb07_kernels.check_one_part_lab(None, {"wgmma": 4, "wait_group 1": 0,
                                                                    "wait_group 0": 1}).message


# -- on an H100 -----------------------------------------------------------------------------------
@pytest.mark.gpu
def test_the_solutions_run_against_torch_on_the_gpu():
    r = nb07_kernels.check_search(learner("ex9-code", "find_group"))
    assert r and "On the GPU: your search matches torch._grouped_mm" in r.message, r.message
    r = nb07_kernels.check_promote(learner("ex10-code", "promote"))
    assert r and "On the GPU: your promotion matches the recipe's reference" in r.message, r.message
    r = nb07_kernels.check_one_part_lab("issue", {"wgmma": 4, "wait_group 1": 0, "wait_group 0": 1, "ffma": 64})
    assert r and "On the GPU" in r.message and "the course kernel's speed" in r.message, r.message


@pytest.mark.gpu
def test_a_wrong_search_is_caught_on_the_gpu_without_hanging():
    """A search that passes no group (everything in group 0) must come back as wrong, not hang:
    a wrong result, a stopped hang, or a crash (on the H100 it crashes: illegal instruction)
    explained in the learner's terms."""
    fn = learner("ex9-code", "find_group", (LOOP, "    group = group + 0\n"))
    run = kc.run_on_gpu(LearnerCode(fn), "__import__('cutecourse.exercises.nb07_kernels', fromlist=['x'])"
                        ".with_search(find_group)", runner="cutecourse.exercises.nb07_gpu:search_runner",
                        timeout=60)
    assert not run.ok and ("wrong result" in run.message or "did not finish" in run.message
                           or "the kernel crashed" in run.message), run.message
    assert "Traceback" not in run.message and len(run.message) < 600, run.message
