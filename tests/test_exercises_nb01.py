"""Notebook 01's checkers: right answers pass, wrong ones fail with a message that says where."""

import cutecourse  # noqa: F401
from cutecourse.exercises import nb01
from data import broken_kernels


def test_layout_checker_accepts_any_equal_function():
    assert nb01.check_column_major("(6,4):(1,6)")
    assert nb01.check_column_major("(6,4)")  # CuTe's default stride is column-major


def test_layout_checker_names_the_first_wrong_coordinate():
    r = nb01.check_column_major("(6,4):(4,1)")  # row-major by mistake
    assert not r and "at coordinate (1, 0)" in r.message and "offset 4" in r.message
    assert "stride 1 along mode 0" in r.hint


def test_layout_checker_reports_shape_and_syntax_errors_without_traceback():
    assert "shape is (6,4)" in nb01.check_column_major("(4,6):(1,4)").message
    r = nb01.check_column_major("((6,4):(1,6)")
    assert not r and "LayoutError" in r.message
    assert "not answered yet" in nb01.check_column_major(...).message


def test_tiler_checker():
    assert nb01.check_tilers((1, 8), (1, 4))
    r = nb01.check_tilers((1, 8), (1, 8))
    assert not r and "tiler_fp32" in r.message and "32 bytes" in r.message


def test_kernel_checker_accepts_the_vector_kernel():
    from cutecourse.kernels.elementwise import vectorized_add

    assert nb01.check_vector_kernel(vectorized_add)


def test_kernel_checker_explains_scalar_loads():
    r = nb01.check_vector_kernel(broken_kernels.scalar_add)
    assert not r and "0 128-bit and 2 narrower" in r.message


def test_kernel_checker_reports_compile_errors_briefly():
    r = nb01.check_vector_kernel(broken_kernels.typo_add)
    assert not r and "does not compile" in r.message and "\n" not in r.message
