"""The interleaved scale-factor layout of the Blackwell block-scaled GEMMs
(``models/sf_layout.py``, re-exported by ``models/block_scaling``), checked against CuTe's own."""

import pytest
import torch

from cutecourse.errors import ShapeError
from cutecourse.models import block_scaling as bs

from block_data import randn


def test_sf_offset_is_a_bijection_on_the_padded_shape():
    rows, kbl = 200, 5
    pr, pk = bs.padded_sf_shape(rows, kbl)
    assert (pr, pk) == (256, 8)
    offs = [bs.sf_offset(r, k, pr, pk) for r in range(pr) for k in range(pk)]
    assert sorted(offs) == list(range(pr * pk))
    assert bs.sf_offset(1, 0, 128, 4) == 16 and bs.sf_offset(32, 0, 128, 4) == 4
    assert bs.sf_offset(0, 4, 128, 8) == 512 and bs.sf_offset(128, 0, 256, 8) == 1024
    with pytest.raises(ShapeError):
        bs.sf_offset(200, 0, rows, kbl)


def test_interleave_round_trip_and_offsets():
    x = randn(200, 5 * 16, seed=10)
    _, sf = bs.quantize(x, "nvfp4")
    buf = bs.to_interleaved(sf)
    assert buf.shape == (256 * 8,) and buf.dtype == sf.dtype
    u, s = buf.view(torch.uint8), sf.view(torch.uint8)
    for r in range(200):
        for k in range(5):
            assert u[bs.sf_offset(r, k, 200, 5)] == s[r, k]
    assert int(u.sum()) == int(s.int().sum())  # padding bytes are zero
    assert torch.equal(bs.from_interleaved(buf, 200, 5).view(torch.uint8), s)
    with pytest.raises(ShapeError):
        bs.from_interleaved(buf[:-1], 200, 5)


def test_sf_offset_equals_cute_tile_atom_to_shape_SF():
    """CuTe's own layout (cutlass.utils.blockscaled_layout), evaluated on the host by tracing."""
    from cutecourse.layouts import run_on_host

    cases = [(256, 8, 16), (200, 5, 32)]  # rows, k-blocks, sf_vec (the second ragged: padded)

    def build():
        from cutlass.utils.blockscaled_layout import tile_atom_to_shape_SF

        out = []
        for rows, kbl, vec in cases:
            L = tile_atom_to_shape_SF((rows, kbl * vec, 1), vec)
            # The atom gives every element of a k-block the same offset (stride 0): probe the
            # block's first and last element.
            out.append((str(L), [(L((r, k * vec, 0)), L((r, k * vec + vec - 1, 0)))
                                 for r in range(rows) for k in range(kbl)]))
        return out

    for (rows, kbl, vec), (text, offs) in zip(cases, run_on_host(build)):
        assert "((16,4)," in text and "((0,1)," in text, text  # the 32x4 atom, strides (16,4)x(0,1)
        mine = [bs.sf_offset(r, k, rows, kbl) for r in range(rows) for k in range(kbl)]
        assert [a for a, _ in offs] == mine and [b for _, b in offs] == mine
