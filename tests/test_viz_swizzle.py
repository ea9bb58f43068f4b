"""The 128-byte swizzle picture of notebook 03: the address arithmetic it draws."""

import matplotlib

matplotlib.use("Agg")

import pytest

from cutecourse.viz.swizzle import CHUNKS, banks_of_column, draw_swizzle, swizzle_address, swizzled_slot


def test_swizzle_is_a_permutation_of_each_row():
    for r in range(2 * CHUNKS):
        assert sorted(swizzled_slot(r, c) for c in range(CHUNKS)) == list(range(CHUNKS))


def test_a_chunk_column_hits_every_bank_once_only_when_swizzled():
    for c in range(CHUNKS):
        assert sorted(banks_of_column(c)) == list(range(0, 32, 4))  # 8 slots x 4 banks = all 32
        assert set(banks_of_column(c, swizzle=False)) == {4 * c}  # one slot: an 8-way conflict


def test_the_functor_on_byte_addresses_is_the_slot_arithmetic():
    for r in range(2 * CHUNKS):
        for c in range(CHUNKS):
            for byte in (0, 5, 15):  # bits 0-3, inside a 16-byte chunk, never move
                assert swizzle_address(128 * r + 16 * c + byte) == 128 * r + 16 * swizzled_slot(r, c) + byte


def test_the_pattern_repeats_every_8_rows():
    assert all(swizzled_slot(r, c) == swizzled_slot(r + CHUNKS, c) for r in range(CHUNKS) for c in range(CHUNKS))


def test_bad_chunk_is_a_clear_error():
    with pytest.raises(ValueError, match="chunk must be in 0..7"):
        swizzled_slot(0, 8)


def test_picture_titles_state_the_point():
    fig = draw_swizzle(highlight=3)
    titles = [ax.get_title() for ax in fig.axes]
    assert "1 distinct slot" in titles[0] and "8 distinct slot" in titles[1]
