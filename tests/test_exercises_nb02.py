"""Notebook 02's checkers: right answers pass, wrong answers get a hint and say where they differ."""

import re
from pathlib import Path

import cutlass
import cutlass.cute as cute
import nbformat
import pytest

import cutecourse
from cutecourse.exercises import nb02
from cutecourse.exercises.learner_code import as_cell


# -- 2.1 a TV layout by hand ----------------------------------------------------------------------
def test_tv_layout_right_answer_in_any_spelling():
    assert nb02.check_tv_layout("((8,4),(4,2)):((32,2),(8,1))")
    assert nb02.check_tv_layout("((8,(2,2)),(4,2)):((32,(2,4)),(8,1))")  # same function


def test_tv_layout_values_swapped_says_where_and_in_tile_coordinates():
    r = nb02.check_tv_layout("((8,4),(4,2)):((32,2),(1,8))")  # m and n of the values swapped
    assert not r.ok and r.hint == nb02.TV_HINT
    assert "the first is (thread=0, value=1): yours gives 1, the intended TV layout gives 8" in r.message
    assert "thread 0's value 1 should be element (m=0, n=1); yours points at (m=1, n=0)" in r.message


def test_tv_layout_wrong_domain_and_bad_text():
    r = nb02.check_tv_layout("(16,16):(1,16)")
    assert not r.ok and "32 thread" in r.message and "8 value" in r.message
    r = nb02.check_tv_layout("((8,4),(4,2):((32,2),(8,1))")
    assert not r.ok and "not a layout CuTe accepts" in r.message
    r = nb02.check_tv_layout(...)
    assert not r.ok and "not answered yet" in r.message


# -- 2.2 coalescing on a column-major tensor ------------------------------------------------------
def test_coalesced_right_answers():
    assert nb02.check_coalesced("(8,4):(1,8)", "(8,1):(1,8)")
    assert nb02.check_coalesced("(8,8):(1,8)", "(8,1):(1,8)")  # 2 warps, tile (64,8)


def test_coalesced_row_major_thinking_is_refused_with_the_warp_numbers():
    r = nb02.check_coalesced("(4,8):(8,1)", "(1,8):(8,1)")  # right for row-major, wrong here
    assert not r.ok and r.hint == nb02.COALESCE_HINT
    assert "16-bit per thread" in r.message and "25% of fetched bytes used" in r.message


def test_coalesced_scalar_loads_and_tiles_that_do_not_divide():
    r = nb02.check_coalesced("(32,4):(1,32)", "(1,1):(1,1)")
    assert not r.ok and "16-bit per thread" in r.message
    r = nb02.check_coalesced("(3,4):(1,3)", "(8,1):(1,8)")
    assert not r.ok and "does not divide" in r.message
    r = nb02.check_coalesced("(4,4):(1,4)", "(8,1):(1,8)")
    assert not r.ok and "whole number of 32-thread warps" in r.message


# -- 2.3 the kernel ---------------------------------------------------------------------------------
@cute.kernel
def mul_kernel(gA: cute.Tensor, gB: cute.Tensor, gC: cute.Tensor, tv_layout: cute.Layout):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    thr = [cute.composition(g[((None, None), bidx)], tv_layout)[(tidx, None)] for g in (gA, gB, gC)]
    thr[2].store(thr[0].load() * thr[1].load())


@cute.kernel
def add_kernel(gA: cute.Tensor, gB: cute.Tensor, gC: cute.Tensor, tv_layout: cute.Layout):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    thr = [cute.composition(g[((None, None), bidx)], tv_layout)[(tidx, None)] for g in (gA, gB, gC)]
    thr[2].store(thr[0].load() + thr[1].load())  # the wrong operation


@cute.kernel
def empty_kernel(gA: cute.Tensor, gB: cute.Tensor, gC: cute.Tensor, tv_layout: cute.Layout):
    pass  # the exercise's stub


@cute.kernel
def element_by_element_kernel(gA: cute.Tensor, gB: cute.Tensor, gC: cute.Tensor, tv_layout: cute.Layout):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    tv = [cute.composition(g[((None, None), bidx)], tv_layout) for g in (gA, gB, gC)]
    for v in cutlass.range_constexpr(32):  # one element at a time: no vectors
        tv[2][(tidx, v)] = tv[0][(tidx, v)] * tv[1][(tidx, v)]


def host_for(kernel):
    @cute.jit
    def tv_mul(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor):
        tiler, tv_layout = cute.make_layout_tv(cute.make_ordered_layout((4, 32), order=(1, 0)),
                                               cute.make_ordered_layout((4, 8), order=(1, 0)))
        gA, gB, gC = [cute.zipped_divide(t, tiler) for t in (mA, mB, mC)]
        kernel(gA, gB, gC, tv_layout).launch(grid=[cute.size(gC, mode=[1]), 1, 1],
                                            block=[cute.size(tv_layout, mode=[0]), 1, 1])
    return tv_mul


def test_kernel_right_answer_compiles_to_vectors_and_runs_where_it_can():
    r = nb02.check_tv_kernel(host_for(mul_kernel))
    assert r.ok, r
    assert "8 128-bit loads, 4 128-bit stores" in r.message
    assert ("ran on" in r.message) == cutecourse.modes.mode_for("any").run


@pytest.mark.parametrize("kernel,says", [
    (empty_kernel, "not answered yet"),
    (element_by_element_kernel, "scalar (one-element) global accesses"),  # right on numbers: the PTX
    (add_kernel, "your kernel adds the values"),
])
def test_kernel_wrong_answers_get_a_hint(kernel, says):
    r = nb02.check_tv_kernel(host_for(kernel))
    assert not r.ok and says in r.message and r.hint == nb02.KERNEL_HINT


SOLUTION = re.sub(r"[ \t]*# (BEGIN|END) SOLUTION\n|[ \t]*# EXERCISE:.*\n", "", next(
    c.source for c in nbformat.read(Path(__file__).resolve().parents[1] / "solutions" / "02_tv_layouts.ipynb",
                                    as_version=4).cells if c.cell_type == "code" and "def mul_kernel" in c.source))


def learner(*edits):
    """The solution's kernel cell with ``edits`` ((old, new) replacements), defined as a cell."""
    src = SOLUTION
    for old, new in edits:
        assert old in src, old
        src = src.replace(old, new)
    ns = as_cell("import cutlass\nimport cutlass.cute as cute\n")
    as_cell(src, ns)
    return ns["tv_mul"]


def test_kernel_solution_cell_passes_on_numbers():
    r = nb02.check_tv_kernel(learner())
    assert r and "all 16384 elements of C equal A * B" in r.message and "A and B untouched" in r.message, r


THR_C = "thrC = cute.composition(blkC, tv_layout)[(tidx, None)]"
THR_B = "thrB = cute.composition(blkB, tv_layout)[(tidx, None)]"


@pytest.mark.parametrize("edits, says", [
    # wrong operand
    ([("thrA.load() * thrB.load()", "thrA.load() * thrA.load()")], "uses A twice"),
    ([("thrC.store(", "thrA.store(")], "writes into A"),
    ([("thrA.load() * thrB.load()", "thrA.load()")], "copies A into C"),
    # wrong index: the thread, the block, another thread's values
    ([(THR_C, THR_C.replace("(tidx, None)", "(0, None)"))], "stores into C at others"),
    ([("gC[((None, None), bidx)]", "gC[((None, None), 0)]")], "block 1's thread 0 reads A"),
    ([(THR_B, THR_B.replace("(tidx, None)", "((tidx + 1) % 128, None)"))], "reads B at 32 elements"),
    ([("gA[((None, None), bidx)], gB[((None, None), bidx)], gC[((None, None), bidx)]",
       "gA[((None, None), bidx)], gB[((None, None), bidx)], gC[((None, None), bidx + 1)]")], "outside its 2 x 2 tiles"),
    # wrong operation
    ([("thrA.load() * thrB.load()", "thrA.load() - thrB.load()")], "subtracts"),
    # a typo: named at the learner's line
    ([("thrC.store(thrA.load()", "thrC.store(thrA.lod()")], "lod"),
])
def test_kernel_mistakes_are_named_from_numbers(edits, says):
    r = nb02.check_tv_kernel(learner(*edits))
    assert not r.ok and says in r.message, r.message
    assert "Traceback" not in r.message and "MLIR" not in r.message


def test_kernel_that_does_not_compile_or_is_missing():
    @cute.jit
    def broken(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor):
        cute.zipped_divide(mA, (3, 5, 7))  # a tiler of the wrong rank
    r = nb02.check_tv_kernel(broken)
    assert not r.ok and ("does not compile" in r.message or "raised" in r.message)
    assert r.hint == nb02.KERNEL_HINT
    assert "not answered yet" in nb02.check_tv_kernel(...).message
