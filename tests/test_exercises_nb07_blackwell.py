"""Checkers of notebook 07's Blackwell exercises: right answers pass (found two ways), each kind
of wrong answer fails with the message that names it."""

import math

import pytest

from cutecourse import layouts
from cutecourse.exercises import nb07_blackwell as nbw


# -- 6. TMEM columns ----------------------------------------------------------------------------
def tmem_columns(fmt, tile_mn, acc_stages):
    """From the instruction: N fp32 columns per stage; SF atoms of 128 rows x 4 blocks, 4 columns."""
    block, tile_k = (16, 256) if fmt == "nvfp4" else (32, 128)
    k_atoms = tile_k // (4 * block)
    atoms = k_atoms * (tile_mn[0] // 128 + tile_mn[1] // 128)
    return acc_stages * tile_mn[1] + 4 * atoms


def tmem_columns_from_bytes(fmt, tile_mn, acc_stages):
    """Second way: one k-tile's scale-factor bytes, four copies in TMEM, 128 lanes x 4 bytes a column."""
    block, tile_k = (16, 256) if fmt == "nvfp4" else (32, 128)
    sf_bytes = (tile_mn[0] + tile_mn[1]) * tile_k // block
    return acc_stages * tile_mn[1] + 4 * sf_bytes // (128 * 4)


def test_tmem_columns_right_both_ways():
    for fn in (tmem_columns, tmem_columns_from_bytes):
        r = nbw.check_tmem_columns(fn)
        assert r, r.message
        assert "560 > 512" in r.message and "gives it 1" in r.message


@pytest.mark.parametrize("wrong, words", [
    (lambda f, t, s: s * t[1], "live in TMEM too"),
    (lambda f, t, s: s * t[0] + tmem_columns(f, t, 0), "lanes are rows"),
    (lambda f, t, s: s * t[1] + tmem_columns(f, t, 0) // 4, "4 columns per atom"),
    (lambda f, t, s: s * tmem_columns(f, t, 1), "only the accumulator has stages"),
    (lambda f, t, s: s * t[1] + 4 * (256 // (4 * (16 if f == "nvfp4" else 32))) * (t[0] + t[1]) // 128,
     "1 k-atom per k-tile"),
    (lambda f, t, s: s * t[1] + tmem_columns(f, (128, 128), 0), "two atoms per k-atom"),
])
def test_tmem_columns_typical_mistakes(wrong, words):
    r = nbw.check_tmem_columns(wrong)
    assert not r and words in r.message, r.message


def test_tmem_columns_unanswered_and_off():
    assert "not answered" in nbw.check_tmem_columns(lambda f, t, s: ...).message
    r = nbw.check_tmem_columns(lambda f, t, s: tmem_columns(f, t, s) + 32)
    assert not r and "count the accumulator stages" in r.message


def test_the_reference_is_the_plan():
    from cutecourse.models import blackwell_plan as bp

    for fmt, tile, stages in nbw.TMEM_CASES:
        p = bp.plan(fmt, tile)
        if stages == p.acc_stages:
            assert nbw.tmem_columns_of(fmt, tile, stages) == p.tmem_columns
        assert nbw.tmem_columns_of(fmt, tile, stages) == tmem_columns(fmt, tile, stages)


# -- 7. a scale factor's byte, by formula ----------------------------------------------------
def sf_offset(row, kblock, rows, kblocks):
    atom = (row // 128) * math.ceil(kblocks / 4) + kblock // 4
    return 512 * atom + 16 * (row % 32) + 4 * ((row // 32) % 4) + kblock % 4


def test_sf_offset_right():
    r = nbw.check_sf_offset(sf_offset)
    assert r and "coordinates" in r.message


def test_sf_offset_typical_mistakes():
    cases = {
        nbw._row_major: "row-major",
        nbw._unpadded: "padded to a multiple of 4",
        nbw._swapped: "16*(r % 32)",
        nbw._m_fastest: "k fastest",
        nbw._row_in_atom: "interleaved by 32",
    }
    for wrong, words in cases.items():
        r = nbw.check_sf_offset(wrong)
        assert not r and words in r.message, (wrong.__name__, r.message)
    r = nbw.check_sf_offset(lambda row, kb, rows, kbl: sf_offset(row, kb, rows, kbl) + 1)
    assert not r and "512 * atom" in r.message



def test_the_solution_notebooks_import_still_works():
    from cutecourse.exercises import nb07

    assert nb07.check_sf_offset is nbw.check_sf_offset


# -- 8. the scale-factor layout as a CuTe layout ---------------------------------------------------
def sf_layout(rows, kblocks):
    k_atoms = math.ceil(kblocks / 4)
    return f"((32,4,{rows // 128}),(4,{k_atoms})):((16,4,{512 * k_atoms}),(1,512))"


def sf_layout_composed(rows, kblocks):
    """Second way: CuTe's own element layout, composed with a layout that picks each block's
    first element (k = 16 kb, at flat index row + rows * 16 kb)."""
    def build():
        import cutlass.cute as cute
        from cutlass.utils.blockscaled_layout import tile_atom_to_shape_SF

        return str(cute.select(tile_atom_to_shape_SF((rows, 16 * kblocks, 1), 16), mode=[0, 1]))

    return layouts.composition(layouts.run_on_host(build), f"({rows},{kblocks}):(1,{16 * rows})")


def test_sf_layout_right_three_ways():
    for fn in (sf_layout, sf_layout_composed,
               lambda r, k: (((32, 4, r // 128), (4, k // 4)), ((16, 4, 128 * k), (1, 512)))):
        r = nbw.check_sf_layout(fn)
        assert r, r.message


def test_sf_layout_element_layout_asks_for_the_composition():
    def elements(rows, kblocks):
        return f"(((32,4),{rows // 128}),((16,4),{kblocks // 4})):(((16,4),{128 * kblocks}),((0,1),512))"

    r = nbw.check_sf_layout(elements)
    assert not r and "compose it with (128,4):(1,2048)" in r.message, r.message


@pytest.mark.parametrize("wrong, words", [
    (lambda r, k: f"((32,4,{r // 128}),(4,{k // 4})):((4,16,{128 * k}),(1,512))", "stride 16"),
    (lambda r, k: f"((32,4,{r // 128}),(4,{k // 4})):((16,4,512),(1,{4 * r}))", "k fastest"),
    (lambda r, k: f"({r},{k}):({k},1)", "row-major"),
    (lambda r, k: f"((128,{r // 128}),(4,{k // 4})):((4,{128 * k}),(1,512))", "interleaved by 32"),
])
def test_sf_layout_typical_mistakes(wrong, words):
    r = nbw.check_sf_layout(wrong)
    assert not r and words in r.message, r.message


def test_sf_layout_wrong_rank_and_unanswered():
    r = nbw.check_sf_layout(lambda rows, k: f"({rows * k}):(1)")
    assert not r and "rank 2" in r.message
    assert "not answered" in nbw.check_sf_layout(lambda rows, k: None).message
    r = nbw.check_sf_layout(lambda rows, k: "not a layout")
    assert not r and "LayoutError" in r.message
