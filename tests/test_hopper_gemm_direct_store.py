"""The direct-store epilogue: what the compiler made of it (pairs stored straight from registers
with st.global, no TMA store, no stmatrix, the persistent kernel's mainloop unchanged), its
errors, and on an H100 correctness against torch (ragged edges: the predicate per pair) in a
subprocess with a timeout (a broken pipeline hangs, it does not fail)."""

import textwrap

import pytest
import torch

import cutecourse
from cutecourse.errors import ShapeError
from cutecourse.inspect import compile_report
from cutecourse.kernels import hopper_gemm_direct_store as hds
from conftest import far_from_torch

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


_GPU_CHECK = textwrap.dedent("""
    import json, sys, torch
    import cutecourse
    from cutecourse.kernels import hopper_gemm_direct_store as hds
    torch.manual_seed(0)
    out = []
    for m, n, k, ind, outd, sms, opts in json.loads(sys.argv[1]):
        ind, outd = getattr(torch, ind), getattr(torch, outd)
        a = torch.randn(m, k, device="cuda").to(ind)
        b = torch.randn(n, k, device="cuda").to(ind)
        ref = a.float() @ b.float().T
        # C at the start of a longer buffer of NaN: a store below C's last row would land in
        # the rest, a store past a row's end in the next row (then C is wrong where it landed)
        buf = torch.full((m * n + 64 * n,), float("nan"), dtype=outd, device="cuda")
        c = buf[:m * n].view(m, n)
        fn = hds.launcher(a, b, c, sms=sms, **opts)
        err = 0.0
        for _ in range(2):  # twice: the dynamic scheduler's counters are reset by the kernel
            buf.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            err = max(err, ((c.float() - ref).abs().max() / ref.abs().max()).item())
            if not buf[m * n:].isnan().all():
                err = float("inf")  # a store outside C
        out.append([m, n, k, str(ind), str(outd), sms, opts, err])
        print(out[-1], flush=True)
    print("RESULT" + json.dumps(out))
""")

GPU_CASES = [
    # m, n, k, in, out, sms (None: all SMs), launcher options
    (4096, 4096, 1024, "float16", "float16", None, {}),
    (3000, 1000, 520, "float16", "float32", 7, {}),  # ragged M, N, K; many tiles per CTA
    (777, 520, 72, "bfloat16", "bfloat16", 5, {}),  # ragged in both: predicated pairs
    (136, 264, 64, "float16", "float16", None, {}),  # 2 x 2 tiles, three of them mostly outside C
    (4160, 4224, 1000, "bfloat16", "float32", None, {"scheduler": "dynamic"}),
    (3000, 1000, 520, "bfloat16", "bfloat16", 7, {"pdl": True}),
]


@pytest.mark.gpu
@pytest.mark.skipif(not cutecourse.modes.mode_for("sm_90a").run, reason="needs an sm_90a GPU")
def test_matches_torch_on_the_gpu(run_gpu_script):
    results = run_gpu_script(_GPU_CHECK, GPU_CASES, timeout=300)
    bad = far_from_torch(results)
    assert not bad, "\n".join(map(str, bad))


@pytest.mark.skipif(cutecourse.modes.mode_for("sm_90a").run, reason="this machine can run sm_90a")
def test_no_hopper_gpu_is_a_device_error():
    from cutecourse.errors import DeviceError

    a, b = torch.randn(256, 64).half(), torch.randn(256, 64).half()
    with pytest.raises(DeviceError):
        hds.gemm_direct_store(a, b)


def test_launcher_refuses_another_tile_before_anything_else():
    a, c = torch.zeros(256, 64).half(), torch.zeros(256, 256).half()
    with pytest.raises(ShapeError, match=r"not one of this kernel's tiles \[\(128, 256\)\]"):
        hds.launcher(a, a, c, tile=(128, 128))  # refused on any machine, before the GPU check
