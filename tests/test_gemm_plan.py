"""The stage/wave calculator uses the kernel's own stage formula and gets the arithmetic right."""

import math

import pytest

from cutecourse.errors import AlignmentError, DTypeError, ShapeError
from cutecourse.models import gemm_plan as gp


def test_budget_is_the_sm90_opt_in_limit():
    assert gp.SM90_SMEM_BYTES == gp.SMEM_CAPACITY == 232448


@pytest.mark.parametrize("tile", gp.TILES)
@pytest.mark.parametrize("in_dtype", gp.IN_DTYPES)
def test_stages_are_the_kernels_and_the_most_that_fit(tile, in_dtype):
    p = gp.plan(8192, 8192, 8192, tile, in_dtype)
    assert p.stages == gp.plan_stages(tile, in_dtype).stages
    per = (tile[0] * gp.TILE_K + tile[1] * gp.TILE_K) * 2
    assert p.bytes_per_stage == per
    assert p.stages * per + gp.BARRIER_BYTES <= gp.SM90_SMEM_BYTES < (p.stages + 1) * per + gp.BARRIER_BYTES
    assert p.stages == gp.stages_that_fit(per)


def test_known_numbers_128x256_and_128x128():
    assert gp.plan(8192, 8192, 8192, (128, 256)).stages == 4  # 48 KiB per stage
    assert gp.plan(8192, 8192, 8192, (128, 128)).stages == 7  # 32 KiB per stage


@pytest.mark.parametrize("m,n", [(8192, 8192), (4096, 4096), (1000, 3000), (128, 256), (129, 257)])
@pytest.mark.parametrize("tile", gp.TILES)
def test_waves_and_ctas(m, n, tile):
    p = gp.plan(m, n, 256, tile)
    assert p.ctas == math.ceil(m / tile[0]) * math.ceil(n / tile[1])
    assert p.waves == pytest.approx(gp.waves(m, n, tile))
    assert 0 < p.wave_efficiency <= 1
    if p.ctas % 132 == 0:
        assert p.wave_efficiency == 1
    # the last wave's fill: the CTAs left over after the full waves (all 132 when none are)
    assert p.last_wave_fill * 132 == pytest.approx(p.ctas % 132 or 132)


def test_last_wave_fill_is_not_the_wave_efficiency():
    p = gp.plan(8192, 8192, 8192, (128, 256))  # 2048 CTAs: 15 full waves and 68 CTAs
    assert p.last_wave_fill == pytest.approx(68 / 132) and p.wave_efficiency == pytest.approx(2048 / 2112)


def test_k_tiles_round_up_for_ragged_k():
    assert gp.plan(256, 256, 8192).k_tiles == 128
    assert gp.plan(256, 256, 8200).k_tiles == 129


def test_accumulator_registers():
    assert gp.plan(256, 256, 64, (128, 256)).acc_registers_per_thread == 128 * 256 // gp.THREADS


def test_table_lists_every_tile():
    text = gp.table(8192, 8192, 8192)
    for m, n in gp.TILES:
        assert f"{m}x{n}x{gp.TILE_K}" in text
    assert "waves" in text


def test_errors():
    with pytest.raises(ShapeError):
        gp.plan(0, 128, 128)
    gp.plan(128, 128, 104)  # 104 fp16 = 208 B per row: a multiple of 16, fine
    with pytest.raises(AlignmentError, match="16"):
        gp.plan(128, 128, 100)  # 200 B per row: TMA cannot address it
    with pytest.raises(ShapeError):
        gp.plan(128, 128, 128, (128, 256), stages=9)  # does not fit
    with pytest.raises(ShapeError):
        gp.plan(128, 128, 128, (64, 64))  # not a tile the kernel has
    with pytest.raises(DTypeError):
        gp.plan(128, 128, 128, in_dtype="float32")
    with pytest.raises(ShapeError):
        gp.stages_that_fit(0)


def test_epilogue_tile_must_tile_the_cta_tile():
    assert gp.check_epi_tile((128, 256), (128, 64)) == (128, 64)
    with pytest.raises(ShapeError, match="does not tile"):
        gp.check_epi_tile((128, 256), (128, 48))
    # persistent kernels cycle their 4 C buffers across tiles: 128x128 in 128x64 pieces is 2
    assert gp.check_epi_tile((128, 128), (128, 64)) == (128, 64)
    with pytest.raises(ShapeError, match="multiple of the 4 C buffers"):
        gp.check_epi_tile((128, 128), (128, 64), whole_rounds=True)
