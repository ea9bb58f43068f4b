"""The extra notebook-01 layout checkers (and the comparison they share): right answers pass in
any spelling, wrong ones name the first coordinate where the offsets differ, and give the hint."""

from cutecourse.exercises import layout_checks, nb01_extra


def test_padded_rows():
    assert nb01_extra.check_padded_rows("(6,4):(8,1)")
    r = nb01_extra.check_padded_rows("(6,4):(4,1)")  # forgot the padding
    assert not r.ok and r.hint == nb01_extra.PADDED_HINT
    assert "the first is (row=1, col=0): yours gives 4, the intended layout gives 8" in r.message
    r = nb01_extra.check_padded_rows("(4,6):(1,8)")  # transposed domain
    assert not r.ok and "6 row, 4 col" in r.message


def test_blocked_in_two_spellings_and_a_wrong_block_order():
    assert nb01_extra.check_blocked("((2,2),(4,2)):((4,16),(1,8))")
    assert nb01_extra.check_blocked("((2,2),((2,2),2)):((4,16),((1,2),8))")  # same function
    r = nb01_extra.check_blocked("((2,2),(4,2)):((4,8),(1,16))")  # blocks column-major
    assert not r.ok and "(row=2, col=0): yours gives 8, the intended layout gives 16" in r.message


def test_zipped_divide_prediction():
    assert nb01_extra.check_zipped_divide("((2,4),(4,4)):((16,1),(32,4))")
    r = nb01_extra.check_zipped_divide("((2,4),(4,4)):((16,1),(4,32))")
    assert not r.ok and "(in-tile=0, tile=1)" in r.message and r.hint == nb01_extra.DIVIDE_HINT


def test_not_answered_and_unreadable_answers_are_results_not_tracebacks():
    for check in (nb01_extra.check_padded_rows, nb01_extra.check_blocked, nb01_extra.check_zipped_divide):
        r = check(...)
        assert not r.ok and "not answered yet" in r.message
        r = check("(6,4:(8,1)")
        assert not r.ok and "not a layout CuTe accepts" in r.message


def test_compare_shows_the_neighbourhood_of_the_first_difference():
    r = layout_checks.compare("(4,4):(1,4)", "(4,4):(4,1)", "t", names=("row", "col"))
    lines = r.message.splitlines()
    assert lines[0].startswith("12 of 16 coordinates differ; the first is (row=1, col=0)")
    assert lines[1].startswith("coordinate") and lines[2].startswith("yours") and lines[3].startswith("intended")
    assert layout_checks.compare("(4,4):(4,1)", "(4,4):(4,1)", "t").ok
