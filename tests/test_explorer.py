"""cutecourse.viz.explorer: the widget's handlers, driven without a browser."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest

pytest.importorskip("ipywidgets")  # the GPU machine runs `pytest -m gpu` without Jupyter

import cutecourse  # noqa: F401
from cutecourse import layouts
from cutecourse.viz.explorer import OPERATIONS, LayoutExplorer, compute


@pytest.fixture
def ex():
    return LayoutExplorer("(4,8):(8,1)")


def test_starts_with_a_picture_and_a_readout(ex):
    assert ex.error is None and ex.message.value == ""
    assert ex.table.layout == "(4,8):(8,1)"
    assert ex.picture.value[:4] == b"\x89PNG"
    assert "flat index <b>0</b>" in ex.readout.value
    assert len(ex.buttons) == 32


def test_typing_a_layout_redraws(ex):
    before = ex.picture.value
    ex.set_layout("((2,2),(3,4)):((1,6),(2,12))")
    assert ex.table.layout == "((2,2),(3,4)):((1,6),(2,12))"
    assert ex.picture.value != before
    assert len(ex.buttons) == 48


def test_sliders_write_the_layout_and_typing_moves_the_sliders(ex):
    ex.cols.value = 4
    assert ex.layout_text.value == "(4,4):(8,1)" and ex.table.layout == "(4,4):(8,1)"
    ex.col_stride.value = 0
    assert ex.table.layout == "(4,4):(8,0)"
    ex.set_layout("(3,5):(1,3)")
    assert (ex.rows.value, ex.cols.value, ex.row_stride.value, ex.col_stride.value) == (3, 5, 1, 3)


def test_clicking_a_cell_reads_out_coordinate_index_offset(ex):
    ex.set_layout("((2,2),(3,4)):((1,6),(2,12))")
    ex.buttons[3 * 12 + 7].click()  # buttons are row-major: row 3, column 7
    assert ex.selected == (3, 7)
    assert "coordinate <b>((1,1),(1,2))</b>" in ex.readout.value
    t = layouts.evaluate("((2,2),(3,4)):((1,6),(2,12))")
    coord, index, offset = t.cell(3, 7)
    assert f"flat index <b>{index}</b>" in ex.readout.value and f"offset <b>{offset}</b>" in ex.readout.value
    assert (ex.cell_row.value, ex.cell_col.value) == (3, 7)
    before = ex.picture.value
    ex.cell_col.value = 2  # the sliders select too, and the red frame moves
    assert ex.selected == (3, 2) and ex.picture.value != before


@pytest.mark.parametrize("op", [op for op in OPERATIONS if op != "none"])
def test_each_operation_with_its_example(ex, op):
    ex.op.value = op  # as the dropdown does: the second field gets the op's example
    assert ex.operand.value == OPERATIONS[op][1]
    assert ex.error is None, ex.message.value
    assert ex.table.layout == compute("(4,8):(8,1)", op, OPERATIONS[op][1]).layout


def test_slice_readout_says_where_the_element_is_in_the_slice(ex):
    ex.set_op("slice", "(None,3)")
    assert ex.table.layout == "(4):(8)" and ex.table.base == 3
    ex.select(2, 3)
    assert "in the slice" in ex.readout.value and "= <b>19</b>" in ex.readout.value
    ex.select(2, 4)
    assert "not in the slice" in ex.readout.value


BAD = [
    ("layout", "((2,2),(3,4):((1,6),(2,12))", "nesting"),
    ("layout", "(0,4):(1,1)", "extent 0"),
    ("layout", "(-3,4)", "extent -3"),
    ("layout", "(4,8):(1,(2,3))", "nesting"),
    ("zipped_divide", "(3,2)", "does not divide"),
    ("tiled_divide", "(2,2,2)", "3 modes"),
    ("composition", "(3,2):(3,1)", "cannot compose"),
    ("slice", "(9,None)", "outside mode 0"),
    ("logical_divide", "", "needs a second input"),
]


@pytest.mark.parametrize("where,text,words", BAD)
def test_bad_input_is_a_message_not_a_traceback(ex, where, text, words):
    good_png = ex.picture.value
    if where == "layout":
        ex.set_layout(text)
    else:
        ex.set_op(where, text)
    assert ex.error is not None and words in ex.error
    assert "color:#b00020" in ex.message.value and "&rarr;" in ex.message.value  # what + fix
    assert "Traceback" not in ex.message.value
    assert ex.picture.value == good_png  # the last good picture stays
    ex.set_op("none")
    ex.set_layout("(2,2):(1,2)")  # and the widget recovers
    assert ex.error is None and ex.message.value == "" and ex.table.layout == "(2,2):(1,2)"


def test_unexpected_errors_are_caught_too(ex, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("CuTe fell over")

    monkeypatch.setattr("cutecourse.viz.explorer.compute", boom)
    ex.set_layout("(2,2):(1,2)")
    assert "RuntimeError: CuTe fell over" in ex.message.value


def test_big_layouts_use_the_sliders_not_buttons(ex):
    ex.set_layout("(16,32):(32,1)")
    assert ex.buttons == [] and ex.cells.layout.display == "none"
    ex.cell_row.value, ex.cell_col.value = 15, 31
    assert "offset <b>511</b>" in ex.readout.value


def test_display_bundle_has_the_widget_and_a_static_picture(ex):
    import base64

    b = ex._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in b  # JupyterLab: the live widget
    assert base64.b64decode(b["image/png"]) == ex.picture.value  # GitHub / PDF: the picture
    assert b["text/plain"] == "LayoutExplorer: (4,8):(8,1) = (4,8):(8,1)"
