"""Notebook 01's kernel exercises (3: the vectorized add, 4: a fused activation): the solution
(read from the solution notebook) passes, and so do other right forms; every wrong answer is named
from the kernel run on numbers on the CPU (every element of C, A and B untouched) or from the PTX;
a compile error names the learner's line; an unanswered cell says so."""

import re
from pathlib import Path

import nbformat
import pytest

import cutecourse

from cutecourse.exercises import nb01
from cutecourse.exercises.learner_code import as_cell

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions" / "01_layouts_and_elementwise_add.ipynb"
HEAD = "import cutlass\nimport cutlass.cute as cute\n"
_MARKERS = re.compile(r"[ \t]*# (BEGIN|END) SOLUTION\n|[ \t]*# EXERCISE:.*\n")


def _cell(marker: str) -> str:
    nb = nbformat.read(SOLUTIONS, as_version=4)
    return _MARKERS.sub("", next(c.source for c in nb.cells if c.cell_type == "code" and marker in c.source))


RELU_CELL, ADD_CELL = _cell("def my_relu_kernel"), _cell("def my_add_kernel")
SUM = "        s = gA[(None, (mi, ni))].load() + gB[(None, (mi, ni))].load()\n"
STORE = "        gC[(None, (mi, ni))] = cute.where(s > 0, s, cute.full_like(s, 0))\n"
RELU = "cute.where(s > 0, s, cute.full_like(s, 0))"


def _define(cell: str, name: str, edits):
    src = cell
    for old, new in edits:
        assert old in src, old
        src = src.replace(old, new)
    ns = as_cell(HEAD)
    as_cell(src, ns)
    return ns[name]


def learner(*edits):
    """Exercise 4's solution with ``edits`` ((old, new) text replacements) applied."""
    return _define(RELU_CELL, "my_add_relu", edits)


def adder(*edits):
    """Exercise 3's solution with ``edits`` applied."""
    return _define(ADD_CELL, "my_add", edits)


# -- Exercise 4 ------------------------------------------------------------------------------------
def test_the_solution_passes_on_numbers_and_in_the_ptx():
    r = nb01.check_fused_kernel(learner())
    assert r, r.message
    assert "numbers checked on the CPU model: all 2360 elements of C" in r.message
    assert "A and B untouched" in r.message and "max.f16x2" in r.message
    assert ("not run on one" in r.message) != cutecourse.modes.mode_for("any").run


@pytest.mark.parametrize("edits", [
    [(RELU, "cutlass.max(s, cute.full_like(s, 0))")],  # notebook 06's idiom
    [(RELU, "cute.where(s < 0, cute.full_like(s, 0), s)")],  # keeps a NaN: a compare-and-select
    [(RELU, "cute.where(s >= 0, s, cute.full_like(s, 0))")],
    [("mi, ni = i // n_tiles, i % n_tiles", "mi, ni = i % m, i // m")],  # another thread -> tile map
])
def test_right_forms_pass(edits):
    r = nb01.check_fused_kernel(learner(*edits))
    assert r and "numbers checked on the CPU model" in r.message, r.message


TILE = "(None, (mi, ni))"


@pytest.mark.parametrize("edits, words", [
    # the three the review found accepted: tile coordinates swapped, result into gA, neighbour tile
    ([(TILE, "(None, (ni, mi))")], "Are the tile coordinates swapped?"),
    ([("gC[(None, (mi, ni))] =", "gA[(None, (mi, ni))] =")], "stores into A"),
    ([("gC[(None, (mi, ni))] =", "gC[(None, (mi, ni + 1))] =")], "store into the tile it read"),
    # the sum uses A twice (the compiler drops B's load): said as such
    ([("gB[(None, (mi, ni))].load()", "gA[(None, (mi, ni))].load()")], "your sum uses A twice"),
    # wrong index: one operand from the neighbouring tile; the thread -> tile map; the guard
    ([("gB[(None, (mi, ni))]", "gB[(None, (mi, (ni + 1) % n_tiles))]")], "adds A's tile (0, 0) to B's tile (0, 1)"),
    ([("mi, ni = i // n_tiles, i % n_tiles", "mi, ni = i % n_tiles, i // n_tiles")], "swapped"),
    ([("if i < m * n_tiles:", "if True:")], "Keep the guard"),
    ([("if i < m * n_tiles:", "if i < m * n_tiles - 1:")], "never written"),
    ([("mi, ni = i // n_tiles, i % n_tiles", "mi, ni = i // n_tiles, 0")], "never written"),
    # wrong operand / order / constant
    ([(SUM + STORE, "        a = gA[(None, (mi, ni))].load()\n        b = gB[(None, (mi, ni))].load()\n"
                    "        z = cute.full_like(a, 0)\n"
                    "        gC[(None, (mi, ni))] = cute.where(a > 0, a, z) + cute.where(b > 0, b, z)\n")],
     "clamps before it adds"),
    ([(STORE, "        gC[(None, (mi, ni))] = s\n")], "without the activation"),
    ([(RELU, "cute.where(s < 0, s, cute.full_like(s, 0))")], "keeps the smaller"),
    ([(RELU, "cute.where(s > 1, s, cute.full_like(s, 1))")], "clamps at 1"),
    ([(RELU, "cutlass.max(s, cute.full_like(s, -1))")], "clamps at -1"),
    ([("].load() + gB", "].load() - gB")], "you subtract"),
    ([(SUM + STORE, "        a = gA[(None, (mi, ni))].load()\n        s = a + gB[(None, (mi, ni))].load()\n"
                    "        gC[(None, (mi, ni))] = cute.where(a > 0, s, cute.full_like(s, 0))\n")],
     "tests A > 0, not the sum"),
    ([(RELU, "cutlass.max(s, -s)")], "|A + B|"),
    # a typo: found on numbers, at the learner's line
    ([("cute.full_like(s, 0)", "cute.full_like(s, zero)")], "line 11 of your cell"),
])
def test_mistakes_are_named(edits, words):
    r = nb01.check_fused_kernel(learner(*edits))
    assert not r and words in r.message, r.message
    assert "Traceback" not in r.message and "MLIR" not in r.message


def test_narrow_loads_are_named_from_the_ptx():
    """Right on numbers, wrong in the memory traffic: the PTX is the second proof."""
    r = nb01.check_fused_kernel(learner((SUM + STORE, (
        "        for j in cutlass.range_constexpr(8):  # one element at a time\n"
        "            x = gA[((0, j), (mi, ni))] + gB[((0, j), (mi, ni))]\n"
        "            gC[((0, j), (mi, ni))] = cutlass.max(x, cutlass.Float16(0))\n"))))
    assert not r and "global memory traffic" in r.message, r.message


def test_unanswered_relu_says_so():
    src = RELU_CELL.replace(SUM + STORE, '        raise NotImplementedError("load both tiles")\n')
    ns = as_cell(HEAD)
    as_cell(src, ns)
    r = nb01.check_fused_kernel(ns["my_add_relu"])
    assert not r and "not answered yet" in r.message, r.message


@pytest.mark.gpu("any")
def test_the_fused_kernel_is_exact_on_a_gpu():
    r = nb01.check_fused_kernel(learner())
    assert r and "exact" in r.message, r.message


# -- Exercise 3 ------------------------------------------------------------------------------------
ADD_BODY = ("        a = gA[(None, (mi, ni))].load()\n        b = gB[(None, (mi, ni))].load()\n"
            "        gC[(None, (mi, ni))] = a + b\n")


def test_vector_kernel_solution_passes_on_numbers():
    r = nb01.check_vector_kernel(adder())
    assert r and "all 2360 elements of C equal A + B" in r.message, r.message
    assert ("not run on one" in r.message) != cutecourse.modes.mode_for("any").run


def test_vector_kernel_unanswered_says_so():
    r = nb01.check_vector_kernel(adder((ADD_BODY, "        ...  # load this thread's tile\n")))
    assert not r and "not answered yet" in r.message and "128-bit" not in r.message, r.message


@pytest.mark.parametrize("edits, words", [
    ([("gB[(None, (mi, ni))].load()", "gA[(None, (mi, ni))].load()")], "A twice"),
    ([("a + b", "a - b")], "subtracts B from A"),
    ([("a + b", "a * b")], "multiplies"),
    ([("gC[(None, (mi, ni))] = a + b", "gB[(None, (mi, ni))] = a + b")], "stores into B"),
    ([(TILE, "(None, (ni, mi))")], "swapped"),
    ([("gC[(None, (mi, ni))] =", "gC[(None, (mi, ni - 1))] =")], "store into the tile it read"),
    ([("if i < m * n_tiles:", "if i < n_tiles:")], "never written"),
    ([("gC[(None, (mi, ni))] = a + b", "gC[(None, (mi, ni))] = a")], "copies A"),
])
def test_vector_kernel_mistakes_are_named(edits, words):
    r = nb01.check_vector_kernel(adder(*edits))
    assert not r and words in r.message, r.message


def test_a_kernel_that_forgets_the_block_leaves_tiles_unwritten():
    """295 tiles take two blocks on the CPU model: i = tidx alone covers only the first 256."""
    r = nb01.check_fused_kernel(learner(("i = bidx * bdim + tidx", "i = tidx")))
    assert not r and "312 of 2360 elements of C are never written" in r.message, r.message
