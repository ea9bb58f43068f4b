"""Notebook 06's Exercise 8, the tile order of a scheduler, and Exercise 10, the ping-pong lab
(``nb06_kernels``; both run through its ``persistent_runner`` on a GPU): the solution passes,
typical wrong answers are named, a compile error points at the learner's line."""

import cutlass
import pytest

from cutecourse.exercises import nb06_kernels as nk
from cutecourse.exercises.kernel_check import gpu_here
from cutecourse.kernels import tile_scheduler

H100 = gpu_here("sm_90a")  # there the checks also run the kernels, and say so instead


# -- Exercise 8: the tile order --------------------------------------------------------------------


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
def test_pingpong_lab_on_the_gpu():
    r = nk.check_pingpong_lab(4, 4, 32)
    assert r and "matches torch" in r.message and "the cooperative kernel" in r.message, r.message
