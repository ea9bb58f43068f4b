"""cutecourse.layouts: CuTe's tables equal shape:stride arithmetic, the operations mean what the
course says they mean, and bad input gets a readable LayoutError."""

from __future__ import annotations

import random

import pytest

import cutecourse  # noqa: F401  (sets the DSL up before cutlass is imported)
from cutecourse import layouts
from cutecourse.errors import LayoutError
from cutecourse.layouts import flatten, idx2crd, python_offsets, size

# Layouts the course draws, nested ones included.
NAMED = [
    "8:1",
    "8:2",
    "(4,8):(1,4)",
    "(4,8):(8,1)",
    "(4,8):(0,1)",  # broadcast: stride 0
    "((2,2),(3,4)):((1,6),(2,12))",
    "((2,2),(3,4)):((2,1),(4,12))",
    "(2,3,4):(12,4,1)",
    "((2,(2,2)),8):((1,(16,32)),2)",
    "(4,(2,4)):(2,(1,8))",
    "(16,(4,2)):(-1,(16,64))",  # negative strides are legal: offsets go backwards
]


def _random_layout(rng: random.Random, depth: int = 0):
    """A random nested shape (extents 1..4, at most ~600 coordinates) and a stride for it."""
    def shape(d):
        if d < 2 and rng.random() < 0.35:
            return tuple(shape(d + 1) for _ in range(rng.randint(1, 3)))
        return rng.randint(1, 4)

    s = tuple(shape(1) for _ in range(rng.randint(1, 3)))
    while size(s) > 600:
        s = s[:-1] or (2,)
    it = iter([rng.choice([0, 1, 2, 3, 5, 7, 16, 100]) for _ in flatten(s)])

    def stride(x):
        return tuple(stride(e) for e in x) if isinstance(x, tuple) else next(it)

    return s, stride(s)


def _cute_flat(text: str) -> list[int]:
    """CuTe's value at each *flat index* (CuTe maps an int through idx2crd itself)."""
    import cutlass.cute as cute

    shape, stride = layouts.parse_layout(text)

    def job():
        L = cute.make_layout(shape, stride=stride)
        return [L(i) for i in range(cute.size(L))], [cute.idx2crd(i, L.shape) for i in range(cute.size(L))]

    return layouts.run_on_host(job)


@pytest.mark.parametrize("text", NAMED)
def test_table_equals_shape_stride_arithmetic(text):
    t = layouts.evaluate(text)
    assert t.layout == text  # CuTe prints it back as written
    assert list(t.offsets) == python_offsets(t.shape, t.stride)
    flat, crds = _cute_flat(text)
    assert list(t.offsets) == flat  # CuTe(natural coordinate) == CuTe(flat index)
    assert list(t.coords) == crds  # our coordinate order is CuTe's idx2crd


def test_many_random_layouts_match_python():
    rng = random.Random(3)
    for _ in range(40):
        shape, stride = _random_layout(rng)
        t = layouts.evaluate(shape, stride)
        assert t.shape == shape and t.stride == stride
        assert list(t.offsets) == python_offsets(shape, stride), t.layout


def test_default_stride_is_cutes_column_major():
    for shape in [(4, 8), ((2, 2), (3, 4)), 8, (2, (3, 4), 5)]:
        t = layouts.evaluate(shape)
        assert t.stride == layouts.compact_col_major(shape)
        assert sorted(t.offsets) == list(range(size(shape)))  # compact: a permutation of 0..n-1
    assert layouts.evaluate("(4,8)").layout == "(4,8):(1,4)"


def test_grid_rows_are_mode0_columns_mode1():
    t = layouts.evaluate("(4,8):(8,1)")  # row-major 4x8
    g = t.grid()
    assert g.shape == (4, 8)
    assert g[1, 0] == 8 and g[0, 1] == 1 and g[3, 7] == 31
    coord, index, offset = t.cell(2, 5)
    assert coord == (2, 5) and offset == 21 and t.coords[index] == (2, 5)
    # nested: row 3 of mode (2,2) is coordinate (1,1); column 7 of (3,4) is (1,2)
    n = layouts.evaluate("((2,2),(3,4)):((1,6),(2,12))")
    assert n.cell(3, 7)[0] == ((1, 1), (1, 2))
    assert n.grid()[3, 7] == 1 + 6 + 2 + 24
    # rank 1 is one row, rank 3 folds modes 1.. into the columns
    assert layouts.evaluate("8:2").grid().tolist() == [[0, 2, 4, 6, 8, 10, 12, 14]]
    assert layouts.evaluate("(2,3,4):(12,4,1)").grid().shape == (2, 12)


def test_offset_accepts_natural_flat_and_text_coordinates():
    t = layouts.evaluate("((2,2),(3,4)):((1,6),(2,12))")
    assert t.offset(((1, 0), (2, 1))) == 1 + 4 + 12
    assert t.offset((1, 5)) == t.offset(((1, 0), (2, 1)))  # mode entries as flat indices
    assert t.offset("((1,0),(2,1))") == 17
    assert t.offset(5) == t.offsets[5]
    assert "offset 17" in t.describe(((1, 0), (2, 1)))


def test_results_are_cached_per_layout():
    a = layouts.evaluate("(3,5):(5,1)")
    assert layouts.evaluate((3, 5), (5, 1)) is a


# ---- operations ------------------------------------------------------------------------------


def test_composition_is_function_composition():
    for a, b in [("(4,8):(8,1)", "(8,4):(4,1)"), ("(6,4):(1,6)", "(3,2):(2,12)"),
                 ("((2,2),(3,4)):((1,6),(2,12))", "(4,2):(2,1)")]:
        A, B = layouts.evaluate(a), layouts.evaluate(b)
        C = layouts.composition(a, b)
        assert C.expr == f"{a} o {b}"
        for i in range(B.size):
            assert C.offsets[i] == A.offset(idx2crd(B.offsets[i], A.shape)), (a, b, i)


@pytest.mark.parametrize("op", ["logical_divide", "zipped_divide", "tiled_divide"])
def test_divides_by_mode_tile_regroup_the_same_offsets(op):
    text, tiler = "(8,12):(12,1)", (2, 4)
    parent = layouts.evaluate(text)
    d = layouts.DIVIDES[op](text, tiler)
    assert d.size == parent.size and sorted(d.offsets) == sorted(parent.offsets)
    # element e of tile (a, b) is parent coordinate (a*2 + e0, b*4 + e1)
    for e0 in range(2):
        for e1 in range(4):
            for a in range(4):
                for b in range(3):
                    want = parent.offset((a * 2 + e0, b * 4 + e1))
                    if op == "zipped_divide":
                        got = d.offset(((e0, e1), (a, b)))
                    elif op == "tiled_divide":
                        got = d.offset(((e0, e1), a, b))
                    else:
                        got = d.offset(((e0, a), (e1, b)))
                    assert got == want


def test_divide_shapes_as_cute_prints_them():
    # The vectorised add of the CuTe DSL blog post on elementwise add: zipped_divide of a
    # row-major matrix by (1,4) (extents scaled down from 2048 to 16; the pattern of the printout
    # is the post's).
    z = layouts.zipped_divide("(16,16):(16,1)", (1, 4))
    assert z.layout == "((1,4),(16,4)):((0,1),(16,4))"
    assert layouts.tiled_divide("(8,8):(8,1)", "(2,4)").layout == "((2,4),4,2):((8,1),16,4)"
    assert layouts.logical_divide("24:1", "4:2").layout == "(4,(2,3)):(2,(1,8))"


def test_slice_keeps_the_none_modes_and_knows_where_it_starts():
    text = "((2,2),(3,4)):((1,6),(2,12))"
    parent = layouts.evaluate(text)
    for coord in [(None, 5), ((1, None), None), (2, None), "(_,(1,None))", "(:,3)"]:
        s = layouts.slice_(text, coord)
        assert s.size == len(s.selected)
        got = sorted(s.base + o for o in s.offsets)
        assert got == sorted(parent.offsets[i] for i in s.selected), coord
    s = layouts.slice_(text, (None, 5))  # column 5 = coordinate (2,1) of mode 1
    assert s.layout == "((2,2)):((1,6))" and s.base == 2 * 2 + 12


def test_make_layout_tv_matches_the_seed():
    tv = layouts.make_layout_tv("(4,32):(32,1)", "(4,8):(8,1)")
    assert tv.tiler == (16, 256)
    assert tv.tv.layout == "((32,4),(8,4)):((128,4),(16,1))"
    # every element of the tile belongs to exactly one (thread, value)
    assert sorted(tv.tv.offsets) == list(range(16 * 256))
    assert (tv.owner >= 0).all()
    # thread 0 holds 8 consecutive elements of row 0, thread 1 the next 8
    assert tv.owner[0, :16].tolist() == [0] * 8 + [1] * 8
    assert tv.value[0, :8].tolist() == list(range(8))
    for t, v in [(0, 0), (5, 3), (37, 9), (127, 31)]:
        m, n = tv.coord_of(t, v)
        assert tv.owner[m, n] == t and tv.value[m, n] == v


def test_evaluate_a_cute_layout_inside_your_own_jit_function():
    import cutlass.cute as cute

    out = []

    @cute.jit
    def mine():
        L = cute.make_layout((4, (2, 2)), stride=(4, (1, 16)))
        out.append(layouts.evaluate(L))

    layouts.trace(mine)  # trace only: no compile, no GPU
    assert out[0].layout == "(4,(2,2)):(4,(1,16))"
    assert list(out[0].offsets) == python_offsets((4, (2, 2)), (4, (1, 16)))


# ---- errors ----------------------------------------------------------------------------------

BAD_TEXT = {
    "((2,2),(3,4):((1,6),(2,12))": "nesting",  # a '(' never closed
    "(2,2)):(1,2)": "nesting",  # a ')' too many
    "(2,4):(1,(2,3))": "nesting",  # stride nested differently from shape
    "(2,4):(1,2,3)": "3 strides",
    "(0,4):(1,1)": "extent 0",
    "(-2,4)": "extent -2",
    "(2,x):(1,2)": "unexpected 'x'",
    "": "empty",
    "2:1:1": "more than one ':'",
    "(2,4):": "ends too early",
}


@pytest.mark.parametrize("text,words", BAD_TEXT.items())
def test_bad_layout_text_is_a_readable_layout_error(text, words):
    with pytest.raises(LayoutError) as e:
        layouts.evaluate(text)
    assert words in str(e.value)
    assert e.value.fix  # every error says what to do


def test_bad_tuples_and_types():
    with pytest.raises(LayoutError, match="not an integer"):
        layouts.evaluate((4, 2.5), (1, 4))
    with pytest.raises(LayoutError, match="empty mode"):
        layouts.evaluate((4, ()), (1, ()))
    with pytest.raises(LayoutError, match="cannot make a layout"):
        layouts.evaluate(object())


def test_divide_that_does_not_divide():
    with pytest.raises(LayoutError, match="a tile of 3 does not divide mode 0.*extent 4") as e:
        layouts.zipped_divide("(4,8):(1,4)", (3, 2))
    assert "1, 2, 4" in e.value.fix
    with pytest.raises(LayoutError, match="5 elements, which does not divide the layout's 24"):
        layouts.logical_divide("24:1", "5:1")
    with pytest.raises(LayoutError, match="3 modes but the layout"):
        layouts.tiled_divide("(4,8)", (2, 2, 2))
    with pytest.raises(LayoutError, match="extent 0"):
        layouts.zipped_divide("(4,8)", (0, 2))


def test_composition_cute_rejects_is_a_layout_error():
    with pytest.raises(LayoutError, match="cannot compose") as e:
        layouts.composition("((2,2),(3,4)):((1,6),(2,12))", "(4,3):(3,1)")
    assert "!cute" not in str(e.value)  # CuTe's MLIR type spelling is stripped


def test_bad_coordinates_and_slices():
    t = layouts.evaluate("(4,8):(1,4)")
    with pytest.raises(LayoutError, match="outside mode 1 of extent 8"):
        t.offset((0, 8))
    with pytest.raises(LayoutError, match="does not fit"):
        t.offset((0, 1, 2))
    with pytest.raises(LayoutError, match="index 32 is outside"):
        t.offset(32)
    with pytest.raises(LayoutError, match="outside mode 0 of extent 4"):
        layouts.slice_("(4,8):(1,4)", (5, None))
    with pytest.raises(LayoutError, match="does not fit"):
        layouts.slice_("(4,8):(1,4)", (None, None, 1))
    with pytest.raises(LayoutError, match="outside the 4x8 grid"):
        t.cell(4, 0)


def test_tv_needs_compact_thread_and_value_layouts():
    with pytest.raises(LayoutError, match="thread layout .* not a one-to-one"):
        layouts.make_layout_tv("(4,32):(1,1)", "(4,8):(8,1)")


def test_too_large_to_tabulate():
    with pytest.raises(LayoutError, match="too many"):
        layouts.evaluate((1024, 1024), (1024, 1))


def test_text_grid_is_the_table():
    t = layouts.evaluate("((2,2),(3,4)):((1,6),(2,12))")
    lines = t.text().splitlines()
    assert lines[0] == t.layout
    rows = [ln for ln in lines if "|" in ln]
    assert len(rows) == 4
    got = [[int(x) for x in ln.split("|")[1:-1]] for ln in rows]
    assert got == t.grid().tolist()
    assert rows[3].split("|")[0].strip() == "(1,1)"  # rows named by their natural coordinate
    assert layouts.zipped_divide("(4,4):(4,1)", (2, 2)).text().splitlines()[0] == \
        "zipped_divide((4,4):(4,1), (2,2)) = ((2,2),(2,2)):((4,1),(8,2))"
