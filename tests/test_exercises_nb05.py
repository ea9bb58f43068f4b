"""Notebook 05's kernel exercises and lab: the solutions (read from the solution notebook) pass;
typical wrong masks and loads are rejected with a message that names the mistake; a compile error
names the learner's line."""

import pytest

from cutecourse.exercises import nb05
from solution_cells import SolutionCells

CELLS = SolutionCells("05_tma_multicast.ipynb", ("MyMasks", "MyLoads"))
learner = CELLS.learner


def test_the_masks_solution_passes():
    r = nb05.check_masks_in_kernel(learner("MyMasks"))
    assert r, r.message
    assert "4 multicast loads" in r.message


@pytest.mark.parametrize("edits, words", [
    ([("return a_mask, b_mask", "return b_mask, a_mask")], "the other operand's mask"),  # swapped
    ([("a_mask = 0\n", "a_mask = 0\n        own = 1 << rank\n"),
      ("        return a_mask, b_mask", "        return a_mask & ~own, b_mask")], "your A mask"),  # own bit dropped
    ([("cm, cn = rank % cm_size, rank // cm_size", "cm, cn = rank // cn_size, rank % cn_size"),
      ("a_mask |= 1 << (cm + j * cm_size)", "a_mask |= 1 << (cm * cn_size + j)"),
      ("b_mask = ((1 << cm_size) - 1) << (cn * cm_size)",
       "b_mask = sum(1 << (i * cn_size + cn) for i in range(cm_size))")],
     "row-major"),  # the cluster numbered row-major
    # B's run sized and placed by CN instead of CM: right only in square clusters
    ([("b_mask = ((1 << cm_size) - 1) << (cn * cm_size)", "b_mask = ((1 << cn_size) - 1) << (cn * cn_size)")],
     "your B mask"),
    # A never multicast: only the CTA's own bit
    ([("            a_mask |= 1 << (cm + j * cm_size)", "            a_mask = 1 << rank")], "your A mask"),
    # every CTA in both masks, as Python ints: the DSL refuses the mask, the message says why
    ([("        return a_mask, b_mask", "        return (1 << cm_size * cn_size) - 1, (1 << cm_size * cn_size) - 1")],
     "cutlass.Int16"),
    # the column from the wrong size: cn = rank % CN
    ([("cm, cn = rank % cm_size, rank // cm_size", "cm, cn = rank % cm_size, rank % cn_size")], "your B mask"),
    # A's loop over the rows, not the columns
    ([("for j in range(cn_size):", "for j in range(cm_size):")], "your A mask"),
    # B's run one CTA too long
    ([("b_mask = ((1 << cm_size) - 1)", "b_mask = ((1 << (cm_size + 1)) - 1)")], "your B mask"),
    # B's run never shifted to this CTA's column: a constant, which the DSL refuses as a mask
    ([("b_mask = ((1 << cm_size) - 1) << (cn * cm_size)", "b_mask = (1 << cm_size) - 1")],
     "computed from Python numbers alone"),
    # A's bits a column apart, not a row stride apart
    ([("a_mask |= 1 << (cm + j * cm_size)", "a_mask |= 1 << (cm + j)")], "your A mask"),
])
def test_mask_mistakes_are_named(edits, words):
    r = nb05.check_masks_in_kernel(learner("MyMasks", *edits))
    assert not r and words in r.message, r.message


def test_a_masks_compile_error_names_the_line():
    r = nb05.check_masks_in_kernel(learner("MyMasks", ("b_mask = ((1 << cm_size) - 1)", "b_mask = ((1 << cm_sise) - 1)")))
    assert not r and "line 10 of your cell" in r.message and "cm_sise" in r.message, r.message
    assert "MLIR" not in r.message and "Traceback" not in r.message and len(r.message) < 400


def test_the_loads_solution_passes():
    r = nb05.check_multicast_loads(learner("MyLoads"))
    assert r, r.message


@pytest.mark.parametrize("edits, words", [
    ([("tma_bar_ptr=bar, mcast_mask=a_mask", "tma_bar_ptr=bar, mcast_mask=b_mask"),
      ("tma_bar_ptr=bar, mcast_mask=b_mask)", "tma_bar_ptr=bar, mcast_mask=a_mask)")], "other operand's mask"),
    ([("loads.tAsA[(None, state.index)]", "loads.tAsA[(None, state.count)]")], "stage state.index (1) of A's ring"),
    ([("loads.tAsA[(None, state.index)]", "loads.tBsB[(None, state.index)]")], "stage 1 of B's ring"),
    ([("mcast_mask=a_mask)", "mcast_mask=a_mask | b_mask)")], "the copy of A goes to CTAs"),
    ([("loads.tBgB[(None, state.count)]", "loads.tBgB[(None, state.index)]")], "k-tile state.count"),
    # B not multicast at all
    ([("tma_bar_ptr=bar, mcast_mask=b_mask)", "tma_bar_ptr=bar)")], "mcast_mask"),
    # B's copy reads A's k-tiles
    ([("loads.tBgB[(None, state.count)]", "loads.tAgA[(None, state.count)]")], "the copy of B reads k-tile 5 of A"),
    # only A is loaded
    ([("        cute.copy(loads.tma_b, loads.tBgB[(None, state.count)], loads.tBsB[(None, state.index)],\n"
       "                  tma_bar_ptr=bar, mcast_mask=b_mask)\n", "")], "issues 1 copies"),
    # B's copy with A's TMA atom
    ([("cute.copy(loads.tma_b,", "cute.copy(loads.tma_a,")], "one copy with loads.tma_a and one with loads.tma_b"),
    # A's copy into the stage of the next k-tile
    ([("loads.tAsA[(None, state.index)]", "loads.tAsA[(None, state.index + 1)]")], "stage state.index (1) of A's ring"),
])
def test_load_mistakes_are_named(edits, words):
    r = nb05.check_multicast_loads(learner("MyLoads", *edits))
    assert not r and words in r.message, r.message


def test_a_loads_compile_error_names_the_line():
    r = nb05.check_multicast_loads(learner("MyLoads", ("loads.tBgB[(None, state.count)]", "loads.tBgB[(None, state.cnt)]")))
    assert not r and "line 7 of your cell" in r.message and "state.cnt" in r.message, r.message
    # a copy without its barrier: the DSL's own words, at the learner's line
    r = nb05.check_multicast_loads(learner("MyLoads", ("mcast_mask=b_mask)", "tma_bar_ptr=None, mcast_mask=b_mask)"),
                                           ("loads.tBsB[(None, state.index)],\n                  tma_bar_ptr=bar,",
                                            "loads.tBsB[(None, state.index)],\n                 ")))
    assert not r and "line 7 of your cell" in r.message and "tma_bar_ptr" in r.message, r.message


def test_the_cluster_lab():
    for cluster, guess, words in [((2, 1), 4, "only B"), ((1, 2), 4, "A is shared"), ((2, 2), 2, "2 x 2 = 4"),
                                  ((4, 1), 8, "you predict 8"), ((2, 1), True, "you predict True")]:
        r = nb05.check_cluster_lab(cluster, guess)
        assert not r and words.replace("only B", "B is shared") in r.message, r.message
    for cluster, words in [((1, 1), "course kernel itself"), ((3, 1), "refuses this cluster shape")]:
        r = nb05.check_cluster_lab(cluster, 2)
        assert not r and words in r.message, r.message
    r = nb05.check_cluster_lab((2, 1), 2)
    assert r and "2x1" in r.message and "1x1" in r.message and "Nothing was timed" in r.message, r.message


@pytest.mark.gpu
def test_the_learners_multicast_loads_run_against_torch_on_the_gpu():
    r = nb05.check_multicast_loads(learner("MyLoads"))
    assert r and "matches torch" in r.message, r.message
