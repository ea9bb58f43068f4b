"""Notebook 06's Exercise 9, the fused epilogue (``nb06_kernels`` and the CPU model of an op,
``epilogue_run``): the solution passes, typical wrong answers are named, a compile error in the
learner's code is one short sentence that points at the learner's line."""

import cutlass
import cutlass.cute as cute
import pytest

from cutecourse.exercises import nb06_kernels as nk
from cutecourse.exercises.kernel_check import gpu_here
from cutecourse.exercises.learner_code import as_cell
from cutecourse.kernels.epilogue_op import EpilogueOp

H100 = gpu_here("sm_90a")  # there the checks also run the kernels, and say so instead


# -- Exercise 9: the fused epilogue ------------------------------------------------------------------
class BiasRelu(EpilogueOp):
    operands = ("bias",)

    def apply(self, x, m, n, bias):
        return cutlass.max(x + bias[n], cutlass.Float32(0.0))


class NoRelu(EpilogueOp):
    operands = ("bias",)

    def apply(self, x, m, n, bias):
        return x + bias[n]


class ReluFirst(EpilogueOp):
    operands = ("bias",)

    def apply(self, x, m, n, bias):
        return cutlass.max(x, cutlass.Float32(0.0)) + bias[n]


class BiasByRow(EpilogueOp):
    operands = ("bias",)

    def apply(self, x, m, n, bias):
        return cutlass.max(x + bias[m], cutlass.Float32(0.0))


class MinNotMax(EpilogueOp):
    operands = ("bias",)

    def apply(self, x, m, n, bias):
        return cutlass.min(x + bias[n], cutlass.Float32(0.0))


class NoOperands(EpilogueOp):
    def apply(self, x, m, n, bias):
        return cutlass.max(x + bias[n], cutlass.Float32(0.0))


class PythonMax(EpilogueOp):
    operands = ("bias",)

    def apply(self, x, m, n, bias):
        return max(x + bias[n], 0.0)  # Python's max: fine on floats, not on a GPU value


class ArchFmax(EpilogueOp):  # right too: compiles to max.f32, not setp + selp
    operands = ("bias",)

    def apply(self, x, m, n, bias):
        return cute.arch.fmax(x + bias[n], cutlass.Float32(0.0))


class CuteMaxFirst(EpilogueOp):  # clamps, then adds, with cute.max: the CPU model must run it
    operands = ("bias",)

    def apply(self, x, m, n, bias):
        return cute.max(x, cutlass.Float32(0.0)) + bias[n]


class Relu6(EpilogueOp):  # a cap above: right for every small accumulator, wrong for a large one
    operands = ("bias",)

    def apply(self, x, m, n, bias):
        return cutlass.min(cutlass.max(x + bias[n], cutlass.Float32(0.0)), cutlass.Float32(6.0))


class Unanswered(EpilogueOp):
    operands = ("bias",)

    def apply(self, x, m, n, bias):
        raise NotImplementedError  # your code here


def test_fused_epilogue_solution_passes_with_its_ptx_facts():
    r = nk.check_fused_epilogue(BiasRelu)
    assert r, r.message
    assert "exactly 64 bias loads" in r.message and "128 adds" in r.message and "128 clamps at 0" in r.message
    assert "numbers checked on the CPU model" in r.message and "240 (x, m, n) of a 5 x 24 C" in r.message
    assert ("not run on a GPU here" in r.message) != H100


@pytest.mark.parametrize("op, words", [
    (NoRelu, "never clamps"), (ReluFirst, "clamps before it adds the bias"),
    (BiasByRow, "bias[m], one value per row"), (MinNotMax, "minimum with 0"),
    (NoOperands, 'operands = ("bias",)'), (CuteMaxFirst, "clamps before it adds the bias"),
])
def test_fused_epilogue_typical_mistakes_are_named(op, words):
    r = nk.check_fused_epilogue(op)
    assert not r and words in r.message, r.message


HEAD = ("import cutlass\nimport cutlass.cute as cute\n"
        "from cutecourse.kernels.epilogue_op import EpilogueOp\n")


def op_returning(expr: str):
    """An op whose apply returns ``expr``, defined the way a notebook cell defines it."""
    ns = as_cell(HEAD)
    as_cell("class Op(EpilogueOp):\n    operands = (\"bias\",)\n\n"
            f"    def apply(self, x, m, n, bias):\n        return {expr}\n", ns)
    return ns["Op"]


@pytest.mark.parametrize("expr, words", [
    # the three the review found accepted
    ("cutlass.max(x + bias[n + 1], 0.0)", "reads bias[24], outside the bias"),
    ("cutlass.max(x - bias[n], 0.0).to(cutlass.Float32)", "subtracts the bias"),
    ("cutlass.max(x + bias[m + n], 0.0)", "at row m = 1, column n = 23 your op reads bias[24]"),
    # wrong index
    ("cutlass.max(x + bias[n - 1], cutlass.Float32(0.0))", "reads bias[-1]"),
    ("cutlass.max(x + bias[23 - n], cutlass.Float32(0.0))", "it read bias[23] there"),
    ("cutlass.max(x + bias[n % 8], cutlass.Float32(0.0))", "it read bias[0] there"),
    ("cutlass.max(x + bias[n // 2], cutlass.Float32(0.0))", "column 1"),
    # wrong operation / order / constant
    ("cutlass.max(x * bias[n], cutlass.Float32(0.0))", "multiplies by the bias"),
    ("cutlass.max(bias[n] - x, cutlass.Float32(0.0))", "bias[n] - x"),
    ("cutlass.max(x + bias[n], cutlass.Float32(1.0))", "clamps at 1.0"),
    ("cutlass.max(x + bias[n], cutlass.Float32(0.0)) + bias[n]", "adds the bias twice"),
    ("cutlass.max(x + bias[n], -(x + bias[n]))", "|x + bias[n]|"),
    ("cutlass.max(x, cutlass.Float32(0.0))", "never adds the bias"),
    # an exception on the CPU model is a finding, at the learner's line
    ("cutlass.max(x + bias.lod(n), 0.0)", "line 5 of your cell"),
    ("cutlass.max(x + bias[n], 0.0).too(cutlass.Float32)", "AttributeError"),
])
def test_fused_epilogue_wrong_ops_are_named_on_numbers(expr, words):
    r = nk.check_fused_epilogue(op_returning(expr))
    assert not r and words in r.message, r.message
    assert "Traceback" not in r.message and "MLIR" not in r.message


def test_fused_epilogue_accepts_another_max():
    assert nk.op_verdict(ArchFmax()) is None  # the CPU model runs cute.arch.fmax as Python's max
    r = nk.check_fused_epilogue(ArchFmax)
    assert r and "128 clamps at 0" in r.message and "numbers checked" in r.message, r.message


def test_fused_epilogue_accepts_a_conversion_to_float32():
    r = nk.check_fused_epilogue(op_returning("cutlass.max(x + bias[n], 0.0).to(cutlass.Float32)"))
    assert r and "exactly 64 bias loads" in r.message, r.message


def test_the_ptx_counts_are_exact():
    """The second proof, on its own: the counts relu(x + bias[n]) fixes, exactly."""
    right = dict(nk.EXPECTED)
    assert nk._ptx_problem(right, numbers_checked=True) is None
    assert "80 bias values" in nk._ptx_problem({**right, "bias loads": 80}, True)
    assert "0 fp32 adds" in nk._ptx_problem({**right, "adds": 0}, True)
    assert "256 fp32 adds" in nk._ptx_problem({**right, "adds": 256}, True)
    assert "clamps 64 of" in nk._ptx_problem({**right, "clamps at 0": 64}, False)  # no numbers: exact
    assert "clamps 256 of" in nk._ptx_problem({**right, "clamps at 0": 256}, False)
    # right on numbers, another form of the sum: x - (-b) subtracts; the count of adds is the same
    assert nk._ptx_problem({**right, "adds": 0, "subs": 128}, True) is None
    assert "0 fp32 adds" in nk._ptx_problem({**right, "adds": 0, "subs": 128}, False)


def test_fused_epilogue_accepts_a_rearranged_relu():
    """max(x, -b) + b is relu(x + b): right on every element; it clamps at -b, not at 0, in the PTX."""
    r = nk.check_fused_epilogue(op_returning("cutlass.max(x, -bias[n]) + bias[n]"))
    assert r and "numbers checked" in r.message and "exactly 64 bias loads" in r.message, r.message


def test_fused_epilogue_cap_above_is_caught_by_a_large_accumulator():
    r = nk.check_fused_epilogue(Relu6)
    assert not r and "accumulator 100.0" in r.message and "your op gives 6.0" in r.message, r.message


def test_fused_epilogue_compile_error_points_at_the_learners_line():
    r = nk.check_fused_epilogue(PythonMax)
    assert not r
    msg = r.message
    assert "does not compile" in msg and "return max(x + bias[n], 0.0)" in msg, msg
    assert "MLIR" not in msg and "Traceback" not in msg and len(msg) < 500


def test_fused_epilogue_unanswered_is_not_a_traceback():
    r = nk.check_fused_epilogue(Unanswered)
    assert not r and "not answered yet" in r.message and "Traceback" not in r.message


def test_the_cpu_model_of_an_op():
    assert nk.op_verdict(BiasRelu()) is None
    assert "never clamps" in nk.op_verdict(NoRelu())


def test_a_dsl_only_call_leaves_the_numbers_unchecked_and_says_so():
    """The CPU model cannot run an operation that needs a kernel being built: that is no verdict
    on the op, so the exact PTX counts decide, and the pass message says the numbers were not
    checked (naming the learner's line, never MLIR)."""
    from cutecourse.exercises import epilogue_run
    from cutecourse.exercises.learner_code import LearnerCode

    op = op_returning("cutlass.max(x + bias[n], cutlass.Float32(0.0)) + cute.arch.thread_idx()[0] * 0.0")
    with pytest.raises(epilogue_run.DslOnly, match="line 5 of your cell"):
        nk.op_verdict(op(), LearnerCode(op))


@pytest.mark.gpu
def test_fused_epilogue_on_the_gpu():
    r = nk.check_fused_epilogue(BiasRelu)
    assert r and "matches torch" in r.message and "GEMM + torch's bias and ReLU" in r.message, r.message
