"""Notebook 01's Exercise 4 (kernel), a fused activation: the solution (read from the solution
notebook) passes; wrong arithmetic or memory traffic is named from the PTX; a compile error names
the learner's line."""

import re
from pathlib import Path

import nbformat
import pytest

from cutecourse.exercises import nb01
from cutecourse.exercises.learner_code import as_cell

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions" / "01_layouts_and_elementwise_add.ipynb"
HEAD = "import cutlass\nimport cutlass.cute as cute\n"


def _cell() -> str:
    nb = nbformat.read(SOLUTIONS, as_version=4)
    src = next(c.source for c in nb.cells if c.cell_type == "code" and "def my_relu_kernel" in c.source)
    return re.sub(r"[ \t]*# (BEGIN|END) SOLUTION\n|[ \t]*# EXERCISE:.*\n", "", src)


CELL = _cell()
SUM = "        s = gA[(None, (mi, ni))].load() + gB[(None, (mi, ni))].load()\n"
STORE = "        gC[(None, (mi, ni))] = cute.where(s > 0, s, cute.full_like(s, 0))\n"


def learner(*edits):
    src = CELL
    for old, new in edits:
        assert old in src, old
        src = src.replace(old, new)
    ns = as_cell(HEAD)
    as_cell(src, ns)
    return ns["my_add_relu"]


def test_the_solution_passes():
    r = nb01.check_fused_kernel(learner())
    assert r, r.message
    assert "max.f16x2" in r.message


@pytest.mark.parametrize("relu", ["cute.where(s < 0, cute.full_like(s, 0), s)",
                                  "cute.where(s >= 0, s, cute.full_like(s, 0))"])
def test_a_relu_the_compiler_keeps_as_a_select_passes(relu):
    """Forms that keep a NaN cannot become max.f16x2: the PTX has a compare-and-select, and the
    CPU run of the kernel on numbers shows it is ReLU."""
    r = nb01.check_fused_kernel(learner(("cute.where(s > 0, s, cute.full_like(s, 0))", relu)))
    assert r and "compare-and-select" in r.message, r.message


@pytest.mark.parametrize("edits, words", [
    ([(STORE, "        gC[(None, (mi, ni))] = s\n")], "without the activation"),
    ([(SUM + STORE, "        a = gA[(None, (mi, ni))].load()\n        b = gB[(None, (mi, ni))].load()\n"
                    "        z = cute.full_like(a, 0)\n"
                    "        gC[(None, (mi, ni))] = cute.where(a > 0, a, z) + cute.where(b > 0, b, z)\n")],
     "clamps before it adds"),
    ([("cute.where(s > 0, s, cute.full_like(s, 0))", "cute.where(s < 0, s, cute.full_like(s, 0))")],
     "clamps from above"),
    # clamped at 1 instead of 0: a max, but not ReLU
    ([("cute.where(s > 0, s, cute.full_like(s, 0))", "cute.where(s > 1, s, cute.full_like(s, 1))")],
     "clamps at 1.0, not at zero"),
    # the difference instead of the sum
    ([("].load() + gB", "].load() - gB")], "you subtract"),
    # the condition on one input, not on the sum: a select, and the CPU run shows the wrong value
    ([(SUM + STORE, "        a = gA[(None, (mi, ni))].load()\n        s = a + gB[(None, (mi, ni))].load()\n"
                    "        gC[(None, (mi, ni))] = cute.where(a > 0, s, cute.full_like(s, 0))\n")],
     "on numbers"),
    ([(SUM + STORE, "        for j in cutlass.range_constexpr(8):  # one element at a time\n"
                    "            gC[((0, j), (mi, ni))] = gA[((0, j), (mi, ni))] + gB[((0, j), (mi, ni))]\n")],
     "global memory traffic"),
])
def test_mistakes_are_named(edits, words):
    r = nb01.check_fused_kernel(learner(*edits))
    assert not r and words in r.message, r.message


def test_a_compile_error_names_the_line():
    r = nb01.check_fused_kernel(learner(("cute.full_like(s, 0)", "cute.full_like(s, zero)")))
    assert not r and "line 11 of your cell" in r.message and "zero" in r.message, r.message
    assert "MLIR" not in r.message and "Traceback" not in r.message and len(r.message) < 400


@pytest.mark.gpu("any")
def test_the_fused_kernel_is_exact_on_a_gpu():
    r = nb01.check_fused_kernel(learner())
    assert r and "exact" in r.message, r.message
