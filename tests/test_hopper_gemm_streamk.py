"""Stream-K: the split (a CPU model whose arithmetic the kernel runs), what the compiler made of the
kernel (the flag protocol, vectorized partial sums, no spills), and on an H100 correctness against
torch, flags back at 0 after every launch, and a PDL chain, in a subprocess with a timeout (a
flag that is never raised hangs, not fails)."""

import collections
import math
import textwrap

import pytest

from cutecourse.errors import CourseError, ShapeError
from cutecourse.inspect import compile_report
from cutecourse.kernels import hopper_gemm_streamk as hsk
from cutecourse.models import stream_k

TARGET = "cutecourse.kernels.hopper_gemm_streamk:compile_target"
# (tiles, ctas, k_tiles): the schedules table's large shapes (512, 1792, 2048 tiles of 128x256 on
# 132 SMs), small grids, one k-tile, a barely-partial wave, waves that divide exactly
#: min_saved = 1: split wherever a wave is partial, so that small problems exercise the split too
ANY = 1
SPLITS = [(512, 132, 224), (512, 132, 64), (1792, 132, 64), (2048, 132, 128), (140, 132, 32),
          (133, 132, 1), (28, 5, 9), (300, 7, 5), (1000, 132, 7), (264, 132, 64), (128, 132, 32),
          (1, 132, 3), (17, 4, 1)]


@pytest.mark.parametrize("tiles,ctas,k_tiles", SPLITS)
def test_every_k_tile_of_every_tile_exactly_once(tiles, ctas, k_tiles):
    seen = collections.Counter()
    for cta in range(min(ctas, tiles)):
        for tile, k0, k1 in stream_k.units(cta, ctas, tiles, k_tiles, ANY):
            assert 0 <= k0 < k1 <= k_tiles
            seen.update((tile, k) for k in range(k0, k1))
    assert len(seen) == tiles * k_tiles and set(seen.values()) == {1}


@pytest.mark.parametrize("tiles,ctas,k_tiles", SPLITS)
def test_pieces_cannot_deadlock_and_one_cta_finishes_each_tile(tiles, ctas, k_tiles):
    dp, sk_ctas, sk_iters = stream_k.plan(tiles, ctas, k_tiles, ANY)
    finishers = collections.Counter()
    for cta in range(min(ctas, tiles)):
        work = stream_k.units(cta, ctas, tiles, k_tiles, ANY)
        sk = [u for u in work if u[0] >= dp]
        assert work[len(work) - len(sk):] == sk and all(k1 - k0 == k_tiles for _, k0, k1 in work[:-len(sk) or None])
        # whole tiles first, then the stream-K pieces
        for i, (tile, k0, k1) in enumerate(sk):
            if k1 < k_tiles:
                assert i == 0  # a piece whose partial sums someone waits for: first of its range
            else:
                finishers[tile] += 1
        helpers = stream_k.helpers(cta, ctas, tiles, k_tiles, ANY)
        for other in helpers:  # ... and what the tail's CTA waits for is exactly such a piece
            first = [u for u in stream_k.units(other, ctas, tiles, k_tiles, ANY) if u[0] >= dp][0]
            assert other < cta and first[0] == sk[-1][0] and first[2] < k_tiles
        assert len(helpers) <= stream_k.SPLIT
    assert sorted(finishers) == list(range(dp, tiles)) and set(finishers.values()) <= {1}
    for cta in range(min(ctas, tiles)):  # the closed form the kernel uses for "whose range"
        lo, hi = (stream_k.sk_begin(c, sk_ctas, sk_iters) for c in (cta, cta + 1))
        assert all(stream_k.owner(it, sk_ctas, sk_iters) == cta for it in range(lo, hi))


def test_ranges_are_walked_backwards_so_the_ctas_share_two_k_fronts():
    # MLP down: 116 tiles of 224 k-tiles over 132 CTAs. At any step of the stream-K phase, most
    # CTAs are at one of two k-tiles (head pieces from k-tile 0, tail pieces ending at 223), so
    # the tiles in flight share their loads in L2; walked forwards they would be at ~132. The 16
    # CTAs whose range lies inside one tile (a middle piece) are at their own k-tiles.
    tiles, ctas, k_tiles = 512, 132, 224
    dp = stream_k.plan(tiles, ctas, k_tiles)[0]
    for step in (0, 50, 100, 190):
        at = collections.Counter()
        for cta in range(ctas):
            done = 0
            for tile, k0, k1 in stream_k.units(cta, ctas, tiles, k_tiles):
                if tile < dp:
                    continue  # the whole tiles come first; count steps from the stream-K range
                if step < done + k1 - k0:
                    at[k0 + step - done] += 1
                    break
                done += k1 - k0
        # ranges are 196 or 197 k-tiles long: the tail pieces run 27 or 28 k-tiles ahead
        fronts = {step, step + k_tiles - 197, step + k_tiles - 196}
        assert sum(n for k, n in at.items() if k in fronts) >= ctas - 16, (step, at)


def test_the_split_only_where_a_wave_is_partial_and_it_pays():
    assert stream_k.plan(512, 132, 224) == (396, 132, 116 * 224)  # MLP down: 3 waves + 116 tiles
    assert stream_k.plan(264, 132, 64) == (264, 0, 0)  # 2 full waves: nothing to split
    assert stream_k.plan(128, 132, 32) == (128, 0, 0)  # less than a wave: every SM has <= 1 tile
    assert stream_k.plan(140, 132, 32) == (132, 16, 8 * 32)  # 8 tiles shared by 2 CTAs each
    # 4096^3: 116 of 132 in the last wave saves 64 * 16 / 132 = 7.8 k-tiles per CTA: less than
    # the partial sums cost, so no split; 8192^3 (68 tiles of 128 k-tiles) saves 62
    assert stream_k.plan(512, 132, 64) == (512, 0, 0)
    assert stream_k.plan(512, 132, 64, min_saved=ANY) == (396, 132, 116 * 64)
    assert stream_k.plan(2048, 132, 128)[2] == 68 * 128


@pytest.mark.parametrize("tiles,ctas,k_tiles,gain", [(512, 132, 224, 0.97), (1792, 132, 64, 0.97),
                                                     (140, 132, 32, 0.75), (264, 132, 64, 1.0)])
def test_makespan_saves_the_idle_part_of_the_last_wave(tiles, ctas, k_tiles, gain):
    whole = math.ceil(tiles / ctas) * k_tiles
    assert stream_k.makespan(tiles, ctas, k_tiles, min_saved=ANY) / whole == pytest.approx(gain, abs=0.005)
    # with a fixup of a whole tile per partial sum, splitting would not pay: the model says so
    assert stream_k.makespan(tiles, ctas, k_tiles, fixup=k_tiles, min_saved=ANY) >= whole


# -- what the compiler made -------------------------------------------------------------------
def test_flags_and_partial_sums_in_the_ptx():
    r = compile_report(TARGET, arch="sm_90a")
    ptx = r.ptx
    # one mainloop (4 wgmmas of a k-tile) and one pair of TMA loads, as in the persistent kernel
    assert r.count("wgmma") == 4 and r.count("TMA loads") == 2
    assert r.spill_bytes == 0 and r.registers == 168
    # the partial sums: 128 fp32 accumulators per thread = 32 16-byte stores, 32 16-byte loads
    # that skip L1 (another SM wrote them)
    assert ptx.count("st.global.v4.b32") == 32 and ptx.count("ld.global.cg.v4.b32") == 32
    # the flag: release (fence, then a relaxed store of 1) and acquire (spin), reset to 0
    assert ptx.count("fence.acq_rel.gpu") == 1 and ptx.count("ld.acquire.gpu.global.b32") == 1
    assert ptx.count("st.relaxed.gpu.global.b32") == 2
    assert ptx.index("fence.acq_rel.gpu") < ptx.rindex("st.relaxed.gpu.global.b32")


def test_multicast_and_pdl_compile():
    r = compile_report(TARGET, arch="sm_90a", cluster=[2, 1], pdl=True)
    assert r.count("TMA multicast loads") == 1 and r.count("griddepcontrol.wait") == 1
    assert r.spill_bytes == 0


def test_bad_parameters_are_course_errors():
    with pytest.raises(ShapeError, match="cluster"):
        hsk.StreamKHopperGemm(cluster_mn=(4, 1))
    with pytest.raises(ShapeError, match="tile"):
        hsk.compile_target(tile=(256, 128))
    with pytest.raises(ShapeError, match="tile"):  # the persistent kernel's 256x128 is not stream-K's
        hsk.StreamKHopperGemm(tile_mn=(256, 128))
    with pytest.raises(ShapeError, match="min_saved"):
        hsk.StreamKHopperGemm(min_saved=0)


def test_its_constructor_lists_min_saved_and_takes_the_persistent_kernel_s_keywords():
    """Stream-K's own keyword, then the persistent kernel's (passed on): one signature for help(),
    the launchers (sms) and the compile key, which holds the values used (defaults spelled out or
    not: one kernel; another value: another)."""
    import inspect

    params = list(inspect.signature(hsk.StreamKHopperGemm).parameters)
    assert params[:2] == ["tile_mn", "min_saved"] and {"sms", "group_m", "pdl", "epilogue_op"} <= set(params)
    assert hsk.ENTRY.takes_sms  # the launcher fills in the GPU's SM count
    default = hsk.StreamKHopperGemm().key()
    assert default == hsk.StreamKHopperGemm((128, 256), min_saved=stream_k.MIN_SAVED, group_m=16).key()
    assert len({default, hsk.StreamKHopperGemm(min_saved=1).key(), hsk.StreamKHopperGemm(group_m=8).key()}) == 3
    with pytest.raises(TypeError, match="'min_save'; StreamKHopperGemm takes tile_mn, min_saved, cluster_mn"):
        hsk.StreamKHopperGemm(min_save=1)


def test_takes_a_stream_k_scheduler_subclass_as_every_persistent_kernel_takes_scheduler():
    from cutecourse.kernels.stream_k_scheduler import StreamKScheduler
    from cutecourse.kernels.tile_scheduler import DynamicScheduler

    class Mine(StreamKScheduler):
        """e.g. another order of the whole tiles (``tile_of``)"""

    assert hsk.StreamKHopperGemm(scheduler=Mine).Scheduler is Mine
    assert hsk.StreamKHopperGemm().Scheduler is StreamKScheduler
    with pytest.raises(CourseError, match="StreamKScheduler or a subclass"):
        hsk.StreamKHopperGemm(scheduler=DynamicScheduler)  # walks no stream-K units


# -- on an H100 -------------------------------------------------------------------------------
_GPU_CHECK = textwrap.dedent("""
    import json, sys, torch
    from cutecourse.kernels import hopper_gemm_streamk as hsk
    from cutecourse.models import stream_k
    torch.manual_seed(0)
    out = []
    for m, n, k, ind, outd, tile, cluster, sms, pdl, min_saved in json.loads(sys.argv[1]):
        ind, outd = getattr(torch, ind), getattr(torch, outd)
        # small integers: every partial sum is exact in fp32, so the pieces must add up exactly
        a = torch.randint(-2, 2, (m, k), device="cuda").to(ind)
        b = torch.randint(-2, 2, (n, k), device="cuda").to(ind)
        ref = (a.float() @ b.float().T).to(outd)
        c = torch.empty(m, n, dtype=outd, device="cuda")
        fn = hsk.launcher(a, b, c, tile=tuple(tile), cluster=tuple(cluster), sms=sms, pdl=pdl,
                          min_saved=min_saved)
        bad = 0
        for _ in range(5):  # five launches: each must find its flags back at 0
            c.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            bad += int(not torch.equal(c, ref))
        flags = int(fn.counters.abs().sum())
        cdiv = lambda x, y: -(-x // y)
        items = cdiv(cdiv(m, tile[0]), cluster[0]) * cdiv(cdiv(n, tile[1]), cluster[1])
        split = stream_k.plan(items, sms // (cluster[0] * cluster[1]), cdiv(k, 64), min_saved)[1] > 0
        out.append([m, n, k, str(ind), str(outd), tile, cluster, sms, pdl, split, flags, bad])
        print(out[-1], flush=True)
    print("RESULT" + json.dumps(out))
""")

GPU_CASES = [
    # m, n, k, in, out, tile, cluster, sms, pdl, min_saved (1: split wherever a wave is partial)
    (4096, 4096, 1024, "float16", "float16", (128, 256), (1, 1), 132, False, 1),  # 116 tiles split
    (4096, 4096, 14336, "bfloat16", "bfloat16", (128, 256), (1, 1), 132, False, 16),  # MLP down
    (4096, 4096, 4096, "float16", "float16", (128, 256), (1, 1), 132, False, 16),  # not worth it
    (3000, 3000, 520, "float16", "float32", (128, 256), (1, 1), 132, False, 1),  # ragged M, N, K
    (777, 1000, 200, "bfloat16", "float32", (128, 256), (1, 1), 5, False, 1),  # 28 tiles, 5 CTAs
    (1000, 520, 4104, "float16", "bfloat16", (128, 128), (1, 1), 3, False, 1),  # 128x128, 3 CTAs
    (2176, 1000, 256, "float16", "float16", (128, 128), (1, 1), 7, True, 1),
    (1100, 4096, 128, "float16", "float16", (128, 256), (1, 1), 132, False, 1),  # 2 k-tiles
    (1024, 1024, 1024, "float16", "float16", (128, 256), (1, 1), 132, False, 1),  # < 1 wave
    (4160, 4224, 520, "float16", "float16", (128, 256), (2, 1), 132, True, 1),  # clusters, ragged
    (4096, 4096, 1000, "bfloat16", "bfloat16", (128, 256), (1, 2), 10, False, 1),
]


@pytest.mark.gpu
def test_matches_torch_exactly_and_leaves_the_flags_at_zero(run_gpu_script):
    results = run_gpu_script(_GPU_CHECK, GPU_CASES)
    assert len(results) == len(GPU_CASES)
    assert [r[-2:] for r in results] == [[0, 0]] * len(GPU_CASES), "\n".join(map(str, results))
    assert [r[-3] for r in results] == [True, True, False, True, True, True, True, True, False, True, True]


@pytest.mark.gpu
def test_pdl_chain_with_split_tiles(run_pdl_chain):
    # test_hopper_gemm_persistent's chain; both GEMMs 4096 x 4096 in 128x256 tiles: 116 split tiles
    results = run_pdl_chain("cutecourse.kernels.hopper_gemm_streamk", 4096,
                            [dict(cluster=(1, 1), min_saved=1), dict(cluster=(2, 1), min_saved=1)])
    assert [r[-1] for r in results] == [0, 0], results
