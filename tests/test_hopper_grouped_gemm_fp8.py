"""The FP8 block-scaled grouped GEMM: input errors, quantizing on the device's terms, what the
compiler made (e4m3 wgmmas, one wait per k-tile, the promotion FFMAs, the scales loaded before the
wgmmas), and on an H100 the result against ``models.blockwise_fp8.scaled_mm_reference`` and each
CTA's work against ``models.group_scheduler`` (in a subprocess with a timeout).
"""

import textwrap

import pytest
import torch

import cutecourse
from cutecourse.exercises import nb07_kernels
from cutecourse.errors import AlignmentError, CourseError, DTypeError, LayoutError, ShapeError
from cutecourse.inspect import compile_report
from cutecourse.kernels import grouped
from cutecourse.kernels import grouped_checks as checks
from cutecourse.kernels import hopper_grouped_gemm_fp8 as fp8
from cutecourse.kernels.hopper_grouped_gemm_fp8_onepart import OnePartBlockScaledGroupedHopperGemm
from cutecourse.models import blockwise_fp8 as fp8b
from cutecourse.models import gemm_plan

TARGET = "cutecourse.kernels.grouped_targets:hopper_fp8"
TWO_PART = dict(parts=2, tile=[128, 128], cluster=[1, 1])  # the kernel notebook 07 teaches, one CTA


def _quantized(sizes, seed=0):
    g = torch.Generator().manual_seed(seed)
    As = [torch.randn(m, k, generator=g) for m, n, k in sizes]
    Bs = [torch.randn(n, k, generator=g) for m, n, k in sizes]
    return As, Bs, grouped.quantize_fp8(As, Bs)


# -- quantizing: the layouts the kernel reads --------------------------------------------------
def test_quantize_groups_gives_the_kernels_layouts():
    As, Bs, (qA, SA, qB, SB) = _quantized([(200, 264, 320), (1, 128, 128)])
    assert [q.dtype for q in qA + qB] == [torch.float8_e4m3fn] * 4
    assert [tuple(s.shape) for s in SA] == [(200, 3), (1, 1)]
    assert [tuple(s.shape) for s in SB] == [(3, 3), (1, 1)]
    assert SA[0].stride() == (1, 200)  # M-major: neighbouring rows' scales are neighbours
    assert SB[0].stride() == (3, 1)
    # what the kernel computes, on the CPU, is close to the unquantized product
    ref = fp8b.scaled_mm_reference(qA[0], SA[0], qB[0], SB[0])
    exact = As[0] @ Bs[0].T
    assert ((ref - exact).abs().max() / exact.abs().max()).item() < 0.05


def test_plan_is_six_stages_of_32_kib():
    plan = gemm_plan.plan_fp8()
    assert plan.tile_k == 128 and plan.bytes_per_stage == 32 * 1024 and plan.stages == 6


def test_plans_of_the_wide_tiles():
    # 128x192: six 128x32 sub-tiles of C, so 3 C buffers (24 KiB), and 5 stages of 40 KiB fit
    wide = gemm_plan.plan_fp8((128, 192))
    assert (wide.bytes_per_stage, wide.stages, wide.epi_bytes) == (40 * 1024, 5, 24 * 1024)
    assert gemm_plan.fp8_epi_stages((128, 192)) == 3 and gemm_plan.fp8_epi_stages((128, 256)) == 4
    widest = gemm_plan.plan_fp8((128, 256))
    assert (widest.bytes_per_stage, widest.stages) == (48 * 1024, 4)
    with pytest.raises(ShapeError, match="tile"):
        gemm_plan.plan_fp8((128, 160))


def test_default_cluster_and_tile_order():
    # pairs of CTAs along M only where groups are tall enough to fill them (mean >= PAIR_ROWS rows)
    assert grouped.fp8_cluster(8 * 4096, 8) == fp8.CLUSTER == (2, 1)
    assert grouped.fp8_cluster(128 * 256, 128) == (1, 1)  # fine-grained MoE
    assert grouped.fp8_cluster(grouped.PAIR_ROWS * 3, 3) == (2, 1)
    assert grouped.fp8_cluster(grouped.PAIR_ROWS * 3 - 1, 3) == (1, 1)
    assert grouped.fp8_cluster(0, 0) == (1, 1)
    # bands of 8 cluster rows, not whole columns as the bf16 kernel
    assert grouped.fp8_kernel(sms=132).group_m == fp8.GROUP_M == 8


def test_two_parts_need_the_128x128_tile():
    with pytest.raises(ShapeError, match="not one of this kernel's tiles"):  # the two-part class's own check
        grouped.fp8_kernel((128, 192), parts=2, sms=132)
    with pytest.raises(CourseError, match="parts= one of 1, 2"):
        grouped.fp8_kernel(parts=3, sms=132)
    with pytest.raises(ShapeError, match="tile"):
        grouped.fp8_kernel((256, 128), parts=1, sms=132)
    default, one = grouped.fp8_kernel(sms=132), OnePartBlockScaledGroupedHopperGemm  # the class's defaults
    assert type(default) is one and (default.tile_mn, default.cluster_mn) == (one.TILE_MN, one.CLUSTER_MN)
    wide = grouped.fp8_kernel((128, 256), sms=132)
    assert wide.WGMMA_N[256] == 128 and wide.part_n == 128 and wide.epi_stages == 4
    two = grouped.fp8_kernel(parts=2, sms=132)  # the kernel notebook 07 teaches
    assert type(two) is fp8.BlockScaledGroupedHopperGemm and two.tile_mn == (128, 128)
    # the promotion variants are different compiled kernels; so are notebook 07's turn variants
    lab = (nb07_kernels.NoTurns, nb07_kernels.TurnWhenDone)  # subclasses: the same arguments
    assert len({two.key(), wide.key(), *(cls((128, 256), sms=132).key() for cls in lab)}) == 4


def test_errors():
    _, _, (qA, SA, qB, SB) = _quantized([(128, 256, 256), (64, 256, 256)])
    with pytest.raises(DTypeError, match="group 0.*float8_e4m3fn"):
        grouped.grouped_gemm_fp8([qA[0].float()], [qB[0].float()], SA[:1], SB[:1])
    with pytest.raises(DTypeError, match="group 1: sa must be a float32"):
        checks.check_scales(qA, [SA[0], SA[1].half()], qB, SB)
    with pytest.raises(ShapeError, match=r"group 0: sb is \(2, 1\), expected \(2, 2\)"):
        checks.check_scales(qA, SA, qB, [SB[0][:, :1], SB[1]])
    with pytest.raises(ShapeError, match="2 groups but 1 A scales"):
        checks.check_scales(qA, SA[:1], qB, SB)
    with pytest.raises(LayoutError, match="row-major"):
        checks.check_scales(qA, SA, qB, [SB[0].t().contiguous().t(), SB[1]])
    with pytest.raises(ShapeError, match="group 1: .*K"):
        grouped.grouped_gemm_fp8(qA, [qB[0], qB[1][:, :128]], SA, SB)
    k8 = torch.zeros(64, 8, dtype=torch.float8_e4m3fn)  # rows of 8 bytes: TMA needs 16
    with pytest.raises(AlignmentError, match="16 bytes"):
        grouped.grouped_gemm_fp8([k8], [torch.zeros(128, 8, dtype=torch.float8_e4m3fn)], [torch.ones(64, 1)],
                                 [torch.ones(1, 1)])


def test_packed_form_errors():
    a = torch.zeros(300, 256, dtype=torch.float8_e4m3fn)
    w = torch.zeros(4, 384, 256, dtype=torch.float8_e4m3fn)  # (G, N, K)
    sa, sb = torch.ones(2, 300).t(), torch.ones(4, 3, 2)  # sa M-major
    offs = torch.tensor([100, 100, 250, 300], dtype=torch.int32)
    checks.check_packed_scales(a, sa, w.transpose(-2, -1), sb)
    with pytest.raises(ShapeError, match=r"sb is \(4, 2, 2\), expected \(4, 3, 2\)"):
        checks.check_packed_scales(a, sa, w.transpose(-2, -1), sb[:, :2])
    with pytest.raises(DTypeError, match="sa is torch.float16; block scales are float32"):
        grouped.grouped_mm_fp8(a, w.transpose(-2, -1), sa.half(), sb, offs)  # torch._scaled_grouped_mm's order
    with pytest.raises(LayoutError, match="row-major"):
        checks.check_packed_scales(a, sa, w.transpose(-2, -1), sb.transpose(1, 2).contiguous().transpose(1, 2))
    with pytest.raises(DTypeError, match="float8_e4m3fn"):
        grouped.grouped_mm_fp8(a.half(), w.transpose(-2, -1).half(), sa, sb, offs)


def test_the_dense_kernels_still_refuse_fp8():
    from cutecourse.kernels import gemm_launch

    a = torch.zeros(128, 128, dtype=torch.float8_e4m3fn)
    with pytest.raises(DTypeError, match="float16 or bfloat16"):
        gemm_launch.check_operands(a, a)


# -- what the compiler made -------------------------------------------------------------------
@pytest.fixture(scope="module")
def report():
    return compile_report(TARGET, arch="sm_90a", **TWO_PART)


#: The consumer's instructions that matter here, by class (everything else is address arithmetic).
_CLASSES = [("sa/sb load", r"^ld\.global\.b32"), ("other load", r"^ld\.global"), ("wait stage", r"^mbarrier\.try_wait"),
            ("release", r"^mbarrier\.arrive\.shared"), ("fence", r"^wgmma\.fence"),
            ("turn", r"^bar\.sync\s+%r"), ("pass", r"^bar\.arrive"),  # the one-part variants' turns
            ("wgmma", r"^wgmma\.mma_async"), ("commit", r"^wgmma\.commit_group"),
            ("wait 1", r"^wgmma\.wait_group\.sync\.aligned\s+1"),
            ("wait 0", r"^wgmma\.wait_group\.sync\.aligned\s+0"), ("ffma", r"^fma\.rn\.f32")]


def _runs(report) -> str:
    """The PTX as runs of classified instructions, e.g. "3 sa/sb load, 1 wait stage, ..."."""
    import re

    runs = []
    for line in report.instructions("ptx"):
        name = next((n for n, rx in _CLASSES if re.search(rx, line)), None)
        if name is None:
            continue
        if runs and runs[-1][1] == name:
            runs[-1][0] += 1
        else:
            runs.append([1, name])
    return ", ".join(f"{n} {name}" for n, name in runs)


ISSUE = "3 sa/sb load, 1 wait stage, 1 fence, 4 wgmma, 1 commit"  # scales, stage, 4 x k = 32


def test_e4m3_wgmmas_issued_with_their_scales(report):
    # a k-tile is 128 wide: 4 wgmmas of k = 32, e4m3 x e4m3 -> fp32, 64 x 128 per warpgroup
    assert report.count(r"^wgmma\.mma_async\.sync\.aligned\.m64n128k32\.f32\.e4m3\.e4m3") == 16
    # 4 issue sites (first k-tile, two in the loop, the odd last one); each loads its k-tile's
    # scales (2 rows of sa, 1 sb) before waiting for the stage: they arrive under the wgmmas
    assert _runs(report).count(ISSUE) == 4


def test_two_k_tiles_in_flight_before_the_first_wait(report):
    # part0 and part1: k-tile k + 1 is issued before k is waited for (wait_group 1, not 0)
    assert f"{ISSUE}, {ISSUE}, 1 wait 1" in _runs(report)
    assert report.count(r"^wgmma\.wait_group\.sync\.aligned\s+1") == 3
    assert report.count(r"^wgmma\.wait_group\.sync\.aligned\s+0") == 2  # the tails


def test_promotion_frees_the_stage_then_one_ffma_per_accumulator(report):
    # 5 promotion sites: wait, release the stage, 64 FFMAs (64 x 128 / 128 threads) with no
    # global load in between: acc += part * (sa[row] * sb)
    runs = _runs(report)
    assert runs.count("release, 64 ffma") == 5
    assert runs.count("wait 1, 1 release, 64 ffma") == 3 and runs.count("wait 0, 1 release, 64 ffma") == 2
    assert report.count(r"^FFMA", "sass") == 5 * 64
    # the thread owns two rows: two products sa[row] * sb per site, not one per FFMA
    assert report.count(r"^mul\.f32") == 2 * 5


def test_grouped_machinery_and_resources(report):
    assert report.count(r"^tensormap\.replace") == 30  # A, B, C maps as in the bf16 kernel
    assert report.count(r"^fence\.proxy\.tensormap::generic\.acquire\.gpu") == 3
    assert report.count("setmaxnreg") == 2 and report.spill_bytes == 0
    assert not [s for s in report.instructions("sass") if s.startswith("@") and "R2UR" in s]


def test_the_default_2x1_cluster_multicasts_b():
    # the launchers' default: two CTAs along M share each k-tile of B (one multicast load)
    report = compile_report(TARGET, arch="sm_90a", **{**TWO_PART, "cluster": list(fp8.CLUSTER)})
    assert fp8.CLUSTER == (2, 1)
    assert report.count(r"^cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global.*multicast") == 1
    assert report.spill_bytes == 0


# -- the one-part variants (docs/grouped_fp8_speed.md) ------------------------------------------
VARIANTS = {name: dict(tile=[128, n], parts=1, cluster=[1, 1]) for name, n in
            (("1part", 128), ("128x192", 192), ("128x256", 256))}


@pytest.fixture(scope="module")
def variant():
    """variant(name): the compile report of ``VARIANTS[name]``, compiled once per module."""
    reports = {}

    def get(name):
        if name not in reports:
            reports[name] = compile_report(TARGET, arch="sm_90a", **VARIANTS[name])
        return reports[name]

    return get


def _max_register(report) -> int:
    import re

    return max(int(r) for line in report.instructions("sass") for r in re.findall(r"\bR(\d+)\b", line))


#: One batch of a one-part k-tile taking turns: my turn (a named barrier), the wgmmas, the other
#: warpgroup's turn, then wait for my own wgmmas (wait_group 0: nothing else in flight).
TURN_ISSUE = "1 turn, 1 fence, 4 wgmma, 1 commit, 1 pass"
TURN = f"{TURN_ISSUE}, 1 wait 0"


def test_one_part_128x128_takes_turns(variant):
    report = variant("1part")
    assert report.count(r"^wgmma\.mma_async\.sync\.aligned\.m64n128k32\.f32\.e4m3\.e4m3") == 4
    # stage, turn, wgmmas, the next k-tile's scales (loaded while the wgmmas run), wait, free the
    # stage, one promotion of 64 FFMAs; no wait_group 1
    assert f"1 wait stage, {TURN_ISSUE}, 3 sa/sb load, 1 wait 0, 1 release, 64 ffma" in _runs(report)
    assert report.count(r"^wgmma\.wait_group\.sync\.aligned\s+1") == 0
    assert report.count(r"^fma\.rn\.f32") == 64 and report.spill_bytes == 0


def test_one_part_128x192_two_blocks_of_b_scales(variant):
    report = variant("128x192")
    assert report.count(r"^wgmma\.mma_async\.sync\.aligned\.m64n192k32\.f32\.e4m3\.e4m3") == 4
    # 4 scales per k-tile: sa of the thread's 2 rows, sb of the 2 blocks the tile's columns span
    assert f"1 wait stage, {TURN_ISSUE}, 4 sa/sb load, 1 wait 0, 1 release, 96 ffma" in _runs(report)
    # the even/odd-tile promotions (block boundary at column 128 or 64) became one promotion: the
    # compiler picks the middle columns' scale product with a select; 4 products sa[row] * sb[block]
    assert report.count(r"^fma\.rn\.f32") == 96 and report.count(r"^mul\.f32") == 4
    # acc (96) + part (96) + the rest fit the consumers' 232 registers
    assert report.spill_bytes == 0 and _max_register(report) < 232


def test_one_part_128x256_two_batches_per_k_tile(variant):
    report = variant("128x256")
    # two batches of m64n128 wgmmas into one 64-register part, each promoted into its half of acc;
    # the stage is freed after the second
    assert report.count(r"^wgmma\.mma_async\.sync\.aligned\.m64n128k32\.f32\.e4m3\.e4m3") == 8
    assert f"1 wait stage, {TURN_ISSUE}, 4 sa/sb load, 1 wait 0, 64 ffma, {TURN}, 1 release, 64 ffma" in _runs(report)
    assert report.spill_bytes == 0 and _max_register(report) < 232


def test_the_lab_s_turn_hooks_move_the_hand_over_or_remove_it():
    # notebook 07's lab overrides the turn hooks (exercises/nb07_kernels.py), at 128x128:
    # "done": the other warpgroup may issue only once my wgmmas have finished (strict alternation)
    done = "1 wait stage, 1 turn, 1 fence, 4 wgmma, 1 commit, 3 sa/sb load, 1 wait 0, 1 pass, 1 release, 64 ffma"
    assert done in _runs(nb07_kernels.course_report("one part", "done"))
    # no turns: no named barrier with a run-time id is left in the loop, nor anywhere
    free = nb07_kernels.course_report("one part", None)
    assert "1 wait stage, 1 fence, 4 wgmma, 1 commit, 3 sa/sb load, 1 wait 0, 1 release, 64 ffma" in _runs(free)
    assert free.count(r"^bar\.arrive") == 0 and free.count(r"^bar\.sync\s+%r") == 0


def test_wide_tile_2x1_multicasts_b():
    report = compile_report(TARGET, arch="sm_90a", tile=[128, 192], parts=1, cluster=[2, 1])
    assert report.count(r"^cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global.*multicast") == 1
    assert report.spill_bytes == 0


# -- on an H100 -------------------------------------------------------------------------------
_GPU_CHECK = textwrap.dedent("""
    import json, sys, torch
    import cutecourse
    from cutecourse.kernels import grouped, hopper_grouped_gemm_fp8 as fp8
    from cutecourse.models import blockwise_fp8 as fp8b, group_scheduler as gs
    torch.manual_seed(0)
    out = []
    cases, packed_options = json.loads(sys.argv[1])
    for name, sizes, sms, options in cases:
        options = {key: tuple(v) if isinstance(v, list) else v for key, v in options.items()}
        # the launchers' default cluster follows the groups' mean height (grouped.fp8_cluster)
        tile = grouped.FP8.kernel(sms=sms, **options).tile_mn  # the launchers' default tile if none is named
        cluster = options.get("cluster", grouped.fp8_cluster(sum(m for m, _, _ in sizes), len(sizes)))
        As = [torch.randn(m, k, device="cuda") for m, n, k in sizes]
        Bs = [torch.randn(n, k, device="cuda") for m, n, k in sizes]
        qA, SA, qB, SB = grouped.quantize_fp8(As, Bs)
        Cs = [torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda") for m, n, k in sizes]
        fn = grouped.launcher_fp8(qA, qB, SA, SB, Cs, sms=sms, **options)
        fn()
        torch.cuda.synchronize()
        err = 0.0
        for c, qa, sa, qb, sb, (m, n, k) in zip(Cs, qA, SA, qB, SB, sizes):
            if m and k:
                ref = fp8b.scaled_mm_reference(qa, sa, qb, sb)
                err = max(err, ((c.float() - ref).abs().max() / ref.abs().max()).item())
            elif m:
                err = max(err, c.float().abs().max().item())
        live = [(m if k else 0, n, max(k, 1)) for m, n, k in sizes]
        problem = gs.GroupedProblem(live, tile=tile, cluster=cluster, group_m=fp8.GROUP_M)
        sched = gs.schedule(problem, sms)
        model = [[len(s), n] for s, n in zip(sched, gs.tensormap_updates(sched).per_cta)]
        trace = fn.trace[:fn.ctas].tolist() if fn.trace is not None else model
        out.append([name, err, trace == model])
        print(out[-1], flush=True)
    # the packed MoE form: one A with its scales, stacked weights, empty experts included
    g, n, k = 16, 384, 512
    rows = torch.randint(0, 200, (g,))
    rows[3] = rows[7] = 0
    offs = torch.cumsum(rows, 0).to(torch.int32).cuda()
    x, w = torch.randn(int(rows.sum()), k, device="cuda"), torch.randn(g, n, k, device="cuda")
    qa, sa = fp8b.quantize_blockwise_fp8(x, (1, 128))
    qw, sw = zip(*[fp8b.quantize_blockwise_fp8(w[i], (128, 128)) for i in range(g)])
    qw, sw = torch.stack(qw), torch.stack(sw)
    packed_options = {key: tuple(v) if isinstance(v, list) else v for key, v in packed_options.items()}
    c = grouped.grouped_mm_fp8(qa, qw.transpose(-2, -1), sa.t().contiguous().t(), sw, offs, **packed_options)
    ends = offs.tolist()
    ref = torch.cat([fp8b.scaled_mm_reference(qa[s:e], sa[s:e], qw[i], sw[i])
                     for i, (s, e) in enumerate(zip([0] + ends[:-1], ends))])
    out.append(["packed", ((c.float() - ref).abs().max() / ref.abs().max()).item(), True])
    print("RESULT" + json.dumps(out))
""")

MIXED = [(m, 1024, 1024) for m in (256, 4096, 512, 1024, 2048, 768, 3072, 1536)]
RAGGED = [(0, 256, 128), (1, 256, 128), (7, 264, 208), (300, 512, 1040), (0, 512, 16),
          (129, 256, 0), (128, 256, 16), (130, 768, 128)]
ONE = dict(cluster=(1, 1))
GPU_CASES = [
    # name, sizes [(M, N, K)], sms, launcher options
    ("one group", [(1000, 520, 4112)], 132, ONE),
    ("8 mixed M", MIXED, 132, ONE),
    ("empty, tiny, ragged", RAGGED, 132, ONE),
    ("40 groups (few SMs)", [(64 * (1 + g % 5), 256, 128 + 16 * g) for g in range(40)], 7, ONE),
    ("2x1 clusters, mixed", MIXED, 132, dict(cluster=(2, 1))),
    ("1x2 clusters, ragged", RAGGED, 10, dict(cluster=(1, 2))),
    ("default cluster: 1x1 for short groups", RAGGED, 132, {}),
    ("default cluster: 2x1 for tall groups", MIXED, 132, {}),
]
#: The one-part variants: N that ends inside a tile, odd 128x192 tiles (their columns start 64 into
#: a block of B's scales), N below one block, clusters, few SMs (many tiles per CTA: the turns
#: carry across tiles), K not a multiple of 128.
WIDE = [(0, 384, 256), (300, 264, 1040), (129, 584, 128), (1, 192, 384), (700, 1032, 640), (64, 136, 16)]
W192, W256 = dict(tile=(128, 192), parts=1), dict(tile=(128, 256), parts=1)
VARIANT_CASES = [
    ("128x192, ragged", WIDE, 132, {**W192, **ONE}),
    ("128x192 2x1, mixed", [(m, 1536, 1024) for m, _, _ in MIXED], 132, {**W192, "cluster": (2, 1)}),
    ("128x256, ragged", WIDE, 132, {**W256, **ONE}),
    ("128x256 2x1, few SMs", WIDE, 10, {**W256, "cluster": (2, 1)}),
    ("128x128 one part 1x2, ragged", RAGGED, 10, dict(parts=1, cluster=(1, 2))),
]


def _check(results, cases):
    assert len(results) == len(cases) + 1
    # bf16 output of an fp32 sum: the issue's bound is 1e-2 relative to the reference
    bad = [r for r in results if not (r[1] < 1e-2 and r[2])]
    assert not bad, "\n".join(map(str, bad))


@pytest.mark.gpu
def test_matches_the_reference_and_the_scheduler_model_on_the_gpu(run_gpu_script):
    _check(run_gpu_script(_GPU_CHECK, [GPU_CASES, {}]), GPU_CASES)


@pytest.mark.gpu
def test_variants_match_the_reference_on_the_gpu(run_gpu_script):
    # the packed MoE form (16 experts, N 384: two 128x192 tiles, the second odd) on the 128x192 variant
    # a deadlock (a turn never passed) ends here in 150 s, not at the device's time limit
    _check(run_gpu_script(_GPU_CHECK, [VARIANT_CASES, W192], timeout=150), VARIANT_CASES)


@pytest.mark.gpu
def test_the_lab_s_turn_variants_match_the_reference_on_the_gpu(run_gpu_script):
    # nb07_gpu's 8 experts (two empty), N = 4096; few SMs: many tiles per CTA, the turn carries across
    cases = [["done", [128, 192], [1, 1], 7], ["done", [128, 128], [1, 1], 132], [None, [128, 192], [2, 1], 132]]
    results = run_gpu_script("import json, sys\nfrom cutecourse.exercises import nb07_gpu, nb07_kernels as k\n"
                             "print('RESULT' + json.dumps([nb07_gpu.fp8_runner(k.TURN_KERNELS[t](tuple(tile), "
                             "cluster_mn=tuple(c), sms=sms)) for t, tile, c, sms in json.loads(sys.argv[1])]))",
                             cases, timeout=150)
    bad = [(case, r) for case, r in zip(cases, results) if not r["ok"]]
    assert len(results) == len(cases) and not bad, bad
