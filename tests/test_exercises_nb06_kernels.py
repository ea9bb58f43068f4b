"""Notebook 06's kernel exercises: the solution passes, typical wrong answers are named, a compile
error in the learner's code is one short sentence that points at the learner's line."""

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


# -- Exercise 10: the lab ------------------------------------------------------------------------------
def test_pingpong_lab_right_prediction_compiles_both():
    r = nk.check_pingpong_lab(4, 4, 32)
    assert r and "epi_stages=4: 4 stages" in r.message and "epi_stages=2: 5 stages" in r.message, r.message
    assert ("Nothing was timed here" in r.message) != H100
    assert H100 or "beside the cooperative kernel" in r.message  # what the GPU run would add


@pytest.mark.parametrize("args, words", [
    ((4, 5, 32), "4 fit"), ((4, 4, 16), "= 32 KiB"), ((3, 4, 24), "set 4"),
    ((1, 5, 8), "needs at least 2"),  # the plan fits, the kernel refuses one buffer: said before compiling
    ((2, 4, 16), "5 fit"),  # the default's stages
    ((2, 5, 32), "= 16 KiB"),  # 4 buffers' staging with 2 buffers
    ((4, 4, 32768), "= 32 KiB"),  # bytes, not KiB
    ((4, 4, 64), "= 32 KiB"),  # one warpgroup's buffers counted twice
    ((4, 3, 32), "4 fit"),  # one stage short
    ((4, None, 32), "not answered yet"),
])
def test_pingpong_lab_wrong_predictions(args, words):
    r = nk.check_pingpong_lab(*args)
    assert not r and words in r.message, r.message


@pytest.mark.gpu
def test_fused_epilogue_on_the_gpu():
    r = nk.check_fused_epilogue(BiasRelu)
    assert r and "matches torch" in r.message and "GEMM + torch's bias and ReLU" in r.message, r.message


@pytest.mark.gpu
def test_pingpong_lab_on_the_gpu():
    r = nk.check_pingpong_lab(4, 4, 32)
    assert r and "matches torch" in r.message and "the cooperative kernel" in r.message, r.message


# -- Exercise 8: the tile order --------------------------------------------------------------------
from cutecourse.kernels import tile_scheduler  # noqa: E402


class Bands(tile_scheduler.StaticScheduler):
    def tile_of(self, work):
        band = work // (self.group_m * self.clusters_n)
        first_row = band * self.group_m
        rows = cutlass.min(self.group_m, self.clusters_m - first_row)
        within = work - band * self.group_m * self.clusters_n
        return first_row + within % rows, within // rows


class RowByRow(tile_scheduler.StaticScheduler):
    def tile_of(self, work):
        return work // self.clusters_n, work % self.clusters_n


class FullBands(tile_scheduler.StaticScheduler):  # forgets that the last band may be short
    def tile_of(self, work):
        band = work // (self.group_m * self.clusters_n)
        within = work - band * self.group_m * self.clusters_n
        return band * self.group_m + within % self.group_m, within // self.group_m


class BandIsARow(tile_scheduler.StaticScheduler):  # first_row = band: bands overlap
    def tile_of(self, work):
        band = work // (self.group_m * self.clusters_n)
        rows = cutlass.min(self.group_m, self.clusters_m - band)
        within = work - band * self.group_m * self.clusters_n
        return band + within % rows, within // rows


class Swapped(tile_scheduler.StaticScheduler):  # returns (n, m)
    def tile_of(self, work):
        band = work // (self.group_m * self.clusters_n)
        first_row = band * self.group_m
        rows = cutlass.min(self.group_m, self.clusters_m - first_row)
        within = work - band * self.group_m * self.clusters_n
        return within // rows, first_row + within % rows


class PythonMin(tile_scheduler.StaticScheduler):
    def tile_of(self, work):
        band = work // (self.group_m * self.clusters_n)
        first_row = band * self.group_m
        rows = min(self.group_m, self.clusters_m - first_row)
        within = work - band * self.group_m * self.clusters_n
        return first_row + within % rows, within // rows


class CallsBandTile(tile_scheduler.StaticScheduler):  # the course's helper computes the answer
    def tile_of(self, work):
        return tile_scheduler.band_tile(work, self.clusters_m, self.clusters_n, self.group_m)


class Misspelt(tile_scheduler.StaticScheduler):
    def tile_of(self, work):
        return wrok // self.clusters_n, 0  # noqa: F821


class NFastest(tile_scheduler.StaticScheduler):  # bands, but n fastest inside: row by row
    def tile_of(self, work):
        band = work // (self.group_m * self.clusters_n)
        within = work - band * self.group_m * self.clusters_n
        return band * self.group_m + within // self.clusters_n, within % self.clusters_n


class FixedBand(tile_scheduler.StaticScheduler):  # the constant 16 for group_m
    def tile_of(self, work):
        band = work // (16 * self.clusters_n)
        first_row = band * 16
        rows = cutlass.min(16, self.clusters_m - first_row)
        within = work - band * 16 * self.clusters_n
        return first_row + within % rows, within // rows


class OffByOne(tile_scheduler.StaticScheduler):  # one row down
    def tile_of(self, work):
        band = work // (self.group_m * self.clusters_n)
        first_row = band * self.group_m
        rows = cutlass.min(self.group_m, self.clusters_m - first_row)
        within = work - band * self.group_m * self.clusters_n
        return first_row + within % rows + 1, within // rows


class BandsOfColumns(tile_scheduler.StaticScheduler):  # the operands' roles swapped: bands of columns
    def tile_of(self, work):
        band = work // (self.group_m * self.clusters_m)
        first_col = band * self.group_m
        cols = cutlass.min(self.group_m, self.clusters_n - first_col)
        within = work - band * self.group_m * self.clusters_m
        return within // cols, first_col + within % cols


class WithinByModulo(tile_scheduler.StaticScheduler):  # the item inside the band, modulo the wrong size
    def tile_of(self, work):
        band = work // (self.group_m * self.clusters_n)
        first_row = band * self.group_m
        rows = cutlass.min(self.group_m, self.clusters_m - first_row)
        within = work % (self.group_m * self.clusters_m)
        return first_row + within % rows, within // rows


class ColumnsReversed(tile_scheduler.StaticScheduler):  # right to left inside each band
    def tile_of(self, work):
        band = work // (self.group_m * self.clusters_n)
        first_row = band * self.group_m
        rows = cutlass.min(self.group_m, self.clusters_m - first_row)
        within = work - band * self.group_m * self.clusters_n
        return first_row + within % rows, self.clusters_n - 1 - within // rows


def test_tile_order_solution_passes():
    r = nk.check_tile_order(Bands)
    assert r and "16 A and 9 B panels" in r.message, r.message
    assert "numbers checked on the CPU model" in r.message and ("not run on a GPU here" in r.message) != H100


@pytest.mark.parametrize("cls, words", [
    (RowByRow, "row by row, the launch order"), (FullBands, "outside C"),
    (BandIsARow, "twice"), (Swapped, "returns (n, m)"),
    (NFastest, "bands with n fastest inside are that same walk"), (FixedBand, "group_m=4: work item 4 is tile (4, 0)"),
    (OffByOne, "outside C"), (BandsOfColumns, "work item"), (WithinByModulo, "outside C"),
    (ColumnsReversed, "work item 0 is tile (0, 31)"),
])
def test_tile_order_typical_mistakes_are_named(cls, words):
    r = nk.check_tile_order(cls)
    assert not r and words in r.message, r.message


def test_tile_order_refuses_the_course_helper_by_its_name():
    r = nk.check_tile_order(CallsBandTile)
    assert not r and "calls the course's band_tile" in r.message, r.message


def test_tile_order_error_on_the_cpu_model_names_the_learners_line():
    r = nk.check_tile_order(Misspelt)
    assert not r and "NameError" in r.message and "return wrok // self.clusters_n, 0" in r.message, r.message
    assert "Traceback" not in r.message


def test_tile_order_compile_error_points_at_the_learners_line():
    r = nk.check_tile_order(PythonMin)
    assert not r and "does not compile" in r.message, r.message
    assert "rows = min(self.group_m, self.clusters_m - first_row)" in r.message
    assert "MLIR" not in r.message and "Traceback" not in r.message and len(r.message) < 500


@pytest.mark.gpu
def test_tile_order_on_the_gpu():
    r = nk.check_tile_order(Bands)
    assert r and "matches torch" in r.message, r.message


def test_a_dsl_only_call_leaves_the_numbers_unchecked_and_says_so():
    """The CPU model cannot run an operation that needs a kernel being built: that is no verdict
    on the op, so the exact PTX counts decide, and the pass message says the numbers were not
    checked (naming the learner's line, never MLIR)."""
    from cutecourse.exercises import epilogue_run
    from cutecourse.exercises.learner_code import LearnerCode

    op = op_returning("cutlass.max(x + bias[n], cutlass.Float32(0.0)) + cute.arch.thread_idx()[0] * 0.0")
    with pytest.raises(epilogue_run.DslOnly, match="line 5 of your cell"):
        nk.op_verdict(op(), LearnerCode(op))
