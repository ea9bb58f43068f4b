"""The direct-store epilogue: what the compiler made of it (pairs stored straight from registers
with st.global, no TMA store, no stmatrix, the persistent kernel's mainloop unchanged), its
errors; on an H100 its correctness against torch (ragged edges: the predicate per pair) is in
tests/test_dense_gemms.py."""

import pytest

from cutecourse.errors import ShapeError
from cutecourse.inspect import compile_report
from cutecourse.kernels import hopper_gemm_direct_store as hds

TARGET = "cutecourse.kernels.hopper_gemm_direct_store:compile_target"
PERSISTENT = "cutecourse.kernels.hopper_gemm_persistent:compile_target"


@pytest.mark.parametrize("out_dtype,store,to_smem", [("float16", "st.global.b32", "stmatrix"),
                                                     ("float32", "st.global.v2.b32", "st.shared.v2.b32")])
def test_stores_pairs_from_registers_and_no_tma_store(out_dtype, store, to_smem):
    r = compile_report(TARGET, out_dtype=out_dtype)
    stores = [ln.split()[0] for ln in r.instructions() if ln.startswith("st.global")]
    # 128 fp32 accumulators per thread (64x256 per warpgroup) = 64 pairs, one store each:
    # 4 bytes of fp16, 8 of fp32
    assert stores == [store] * 64
    assert r.count("TMA stores") == 0 and to_smem not in r.ptx and "fence.proxy.async" not in r.ptx
    # the mainloop is the persistent kernel's: same loads, wgmmas, register split, no spills
    coop = compile_report(PERSISTENT, out_dtype=out_dtype)
    # (its TMA-store epilogue: registers to smem, a proxy fence and one TMA store per 128x32
    # epilogue tile, 8 per 128x256 tile)
    assert coop.count("TMA stores") == 8 and to_smem in coop.ptx and coop.ptx.count("fence.proxy.async") == 8
    for feature in ("TMA loads", "wgmma", "setmaxnreg"):
        assert r.count(feature) == coop.count(feature), feature
    assert r.spill_bytes == 0 and r.registers == coop.registers


def test_edges_are_predicated():
    # a pair outside C is skipped: its store sits behind a comparison of its (m, n) with C's shape
    r = compile_report(TARGET)
    lines = r.instructions()
    first = next(i for i, ln in enumerate(lines) if ln.startswith("st.global"))
    assert any(ln.startswith("setp.ge.s32") for ln in lines[first - 5:first])


def test_only_the_cooperative_tile():
    with pytest.raises(ShapeError, match="tile"):
        hds.DirectStoreHopperGemm(tile_mn=(128, 128))
    with pytest.raises(ShapeError, match="tile"):
        hds.compile_target(tile=(256, 128))


# (on an H100: tests/test_dense_gemms.py runs every dense GEMM, this one too, against torch)
