"""The FP8 grouped GEMM with its block scales in shared memory (hopper_grouped_gemm_fp8_smem_scales):
the host's layout of A's scales, the plan, what the compiler made of the scale path, and on an H100
the products against the reference."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from cutecourse import ptx_loops
from cutecourse.errors import DeviceError, ShapeError
from cutecourse.inspect import compile_report
from cutecourse.kernels import grouped
from cutecourse.kernels import hopper_grouped_gemm_fp8_smem_scales as smem
from cutecourse.models.gemm_plan import SMEM_CAPACITY

TARGET = "cutecourse.kernels.hopper_grouped_gemm_fp8_smem_scales:compile_target"
DEFAULT = "cutecourse.kernels.grouped_targets:hopper_fp8"


def _groups(rows, n=256, k=384, seed=0):
    g = torch.Generator().manual_seed(seed)
    return grouped.quantize_fp8([torch.randn(m, k, generator=g) for m in rows],
                                [torch.randn(n, k, generator=g) for _ in rows])


# -- the host side -----------------------------------------------------------------------------
@pytest.mark.parametrize("m", [0, 1, 7, 8, 130])
def test_a_scales_become_16_byte_rows_of_the_same_values(m):
    sa = torch.randn(m, 3)
    t = smem.tma_scales(sa)
    assert t.shape == sa.shape and torch.equal(t, sa)
    assert t.stride(0) == 1 and t.stride(1) % smem.SCALE_ALIGN == 0 and t.stride(1) >= max(m, 1)


def test_the_form_hands_the_kernel_the_aligned_scales():
    qA, SA, qB, SB = _groups([7, 130])
    form = smem.TmaScaledListGroups(qA, qB, SA, SB)
    (sas, sa_strides), (sbs, _) = form.scale_columns()
    assert sa_strides == [8, 132] and all(torch.equal(a, b) for a, b in zip(sas, SA)) and sbs is SB


def test_packed_scales_start_each_group_at_16_bytes():
    rows = torch.tensor([5, 0, 1, 8, 130, 3])
    offs = torch.cumsum(rows, 0).to(torch.int32)
    sa = torch.randn(int(rows.sum()) + 6, 3)  # 6 rows past offs[-1]: no group's
    buf, starts = smem.packed_tma_scales(sa, offs)
    assert buf.shape[0] == 3 and buf.stride(0) % smem.SCALE_ALIGN == 0
    assert (starts % smem.SCALE_ALIGN == 0).all() and (starts[1:] - starts[:-1] >= rows[:-1]).all()
    firsts = offs.long() - rows
    for g in range(len(rows)):
        got = buf[:, starts[g]:starts[g] + rows[g]].t()
        assert torch.equal(got, sa[firsts[g]:firsts[g] + rows[g]])


def test_the_packed_form_points_the_metadata_at_the_aligned_scales():
    from cutecourse.models import blockwise_fp8 as fp8b

    rows = torch.tensor([3, 0, 130])
    offs = torch.cumsum(rows, 0).to(torch.int32)
    qa, sa = fp8b.quantize_blockwise_fp8(torch.randn(int(rows.sum()), 256), (1, 128))
    qw, sw = zip(*[fp8b.quantize_blockwise_fp8(torch.randn(256, 256), (128, 128)) for _ in rows])
    form = smem.TmaScaledPackedGroups(qa, torch.stack(qw).transpose(-2, -1), sa, torch.stack(sw), offs,
                                      torch.empty(int(rows.sum()), 256, dtype=torch.bfloat16))
    meta, _, keep = form.metadata(smem.ENTRY.kernel())
    buf = keep[-1]
    assert meta.strides[:, 3].tolist() == [buf.stride(0)] * 3 and buf.stride(0) % smem.SCALE_ALIGN == 0
    assert ((meta.ptrs[:, 3] - buf.data_ptr()) // 4).tolist() == [0, 4, 4]
    assert torch.equal(buf[:, 4:134].t(), sa[3:])


def test_k_past_the_b_scale_buffer_is_refused_before_a_gpu_is_asked_for():
    k = (smem.MAX_K_BLOCKS + 1) * 128
    qA, SA, qB, SB = _groups([8], n=128, k=k)
    Cs = [torch.empty(8, 128, dtype=torch.bfloat16)]
    with pytest.raises(ShapeError, match="at most 256"):
        smem.launcher_fp8(qA, qB, SA, SB, Cs)
    qA, SA, qB, SB = _groups([8], n=128, k=k - 128)  # the longest K that fits: only the GPU is missing
    with pytest.raises(DeviceError):
        smem.launcher_fp8(qA, qB, SA, SB, Cs)


@pytest.mark.parametrize("tile, config, stages", [((128, 192), {}, 4), ((128, 256), {}, 3),
                                                  ((128, 256), {"epi_stages": 2}, 4), ((128, 128), {}, 5)])
def test_the_plan_makes_room_for_the_scales(tile, config, stages):
    kernel = smem.ENTRY.kernel(tile=tile, **config)
    plan = kernel.plan("float8_e4m3fn", "bfloat16")
    scales = stages * smem.SFA_STAGE_BYTES + 2 * smem.MAX_K_BLOCKS * 4
    assert plan.stages == stages and plan.smem_bytes + scales <= SMEM_CAPACITY
    # the default kernel keeps one more stage at 128x128 and 128x192: the scales cost it
    default = grouped.FP8.kernel(tile=tile, **config).plan("float8_e4m3fn", "bfloat16")
    assert default.stages >= stages


def test_the_benchmark_names_the_variant_and_launches_it_through_its_launcher():
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import deepgemm_peer

    for name, opts in deepgemm_peer.SMEM_SCALES.items():
        launch, got = deepgemm_peer.COURSE_ROWS[name]
        assert launch is smem.launcher_fp8 and got == opts
        qA, SA, qB, SB = _groups([256, 128])
        Cs = [torch.empty(m, 256, dtype=torch.bfloat16) for m in (256, 128)]
        with pytest.raises(DeviceError, match="launches a Hopper"):
            deepgemm_peer.course_launcher(qA, SA, qB, SB, Cs, opts, launch)
    assert deepgemm_peer.COURSE_ROWS["course fp8"] == (None, {})


# -- what the compiler made ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def report():
    return compile_report(TARGET, arch="sm_90a", tile=[128, 192], cluster=[2, 1])


_CLASSES = [("lds", r"^ld\.shared"), ("ldg", r"^ld\.global"), ("wait stage", r"^mbarrier\.try_wait"),
            ("release", r"^mbarrier\.arrive"), ("fence", r"^wgmma\.fence"), ("turn", r"^bar\.sync\s+%r"),
            ("pass", r"^bar\.arrive"), ("wgmma", r"^wgmma\.mma_async"), ("commit", r"^wgmma\.commit_group"),
            ("wait 0", r"^wgmma\.wait_group\.sync\.aligned\s+0"), ("ffma", r"^fma\.rn\.f32"), ("mul", r"^mul\.f32")]


def _runs(lines) -> str:
    runs = []
    for line in lines:
        name = next((n for n, rx in _CLASSES if re.search(rx, line)), None)
        if name is None:
            continue
        if runs and runs[-1][1] == name:
            runs[-1][0] += 1
        else:
            runs.append([1, name])
    return ", ".join(f"{n} {name}" for n, name in runs)


def test_a_scales_arrive_by_tma_with_the_stage(report):
    # per k-tile the producer arms the stage with A's and B's bytes, adds the scales' 512, then
    # issues three copies: A's scales and A (this CTA's), B (multicast to the pair)
    producer = next(lp for lp in ptx_loops.loops(report.ptx)
                    if ptx_loops.compact(ptx_loops.ops(lp.lines)).endswith("tma x2, tma_multicast"))
    text = "\n".join(producer.lines)
    arm, add = text.index("mbarrier.arrive.expect_tx"), text.index("mbarrier.expect_tx")
    assert arm < add < text.index("cp.async.bulk.tensor")
    assert report.count(r"^cp\.async\.bulk\.tensor\.2d\.shared::cta\.global") == 2
    # four tensor maps per CTA, each rewritten per group: A, B, C and A's scales
    assert report.count(r"^tensormap\.replace") == 40 and report.count(r"^fence\.proxy\.tensormap") == 4


def test_the_mainloop_reads_its_scales_from_shared_memory(report):
    loop = ptx_loops.mainloop(report)
    # the stage is full, so are its scales: sa of the thread's 2 rows and the tile's 2 sb (one
    # vector load) from smem, then the one-part loop: turn, wgmmas, pass, wait, release, promote
    assert _runs(loop.lines) == ("1 wait stage, 3 lds, 1 turn, 1 fence, 4 wgmma, 1 commit, 1 pass, 1 wait 0, "
                                 "1 release, 4 mul, 96 ffma")
    assert not [s for s in loop.lines if s.startswith("ld.global")]


def test_b_scales_are_copied_once_per_tile_between_two_barriers(report):
    tile = [lp for lp in ptx_loops.loops(report.ptx) if "bar.sync" in "\n".join(lp.lines)
            and any(s.startswith("wgmma.mma_async") for s in lp.lines)][0]
    text = "\n".join(tile.lines)
    first, second = [m.start() for m in re.finditer(r"bar\.sync\s+1, 256", text)][:2]
    copy = text[first:second]
    # per thread and k-tile of the tile (a loop strided by the 256 consumer threads): the two sb
    # of the tile's blocks from global memory, stored side by side in one vector store
    assert len(re.findall(r"ld\.global\.b32", copy)) == 2 and len(re.findall(r"st\.shared\.v2\.b32", copy)) == 1


def _k_tile_sass(report) -> list[str]:
    """The SASS of one k-tile of the mainloop: from the stage's full-barrier wait before the first
    QGMMA to the wait for the last QGMMA (``WARPGROUP.DEPBAR``)."""
    sass = report.instructions("sass")
    qgmma = [i for i, line in enumerate(sass) if "QGMMA" in line]
    wait = max(i for i in range(qgmma[0]) if "SYNCS.PHASECHK" in sass[i])
    return sass[wait:next(i for i in range(qgmma[-1], len(sass)) if "WARPGROUP.DEPBAR" in sass[i]) + 1]


def test_no_global_load_nor_uniform_copy_of_a_scale_in_the_k_tile(report):
    k_tile = _k_tile_sass(report)
    assert len([s for s in k_tile if s.startswith("LDS")]) == 3
    assert not [s for s in k_tile if s.startswith(("LDG", "R2UR"))]


def test_the_default_kernel_still_loads_its_scales_in_the_loop():
    # what this variant removes: the launchers' default reads sa and sb from global memory per k-tile
    default = compile_report(DEFAULT, arch="sm_90a", tile=[128, 192], parts=1, cluster=[2, 1])
    assert len([s for s in ptx_loops.mainloop(default).lines if s.startswith("ld.global")]) == 4
    assert len([s for s in _k_tile_sass(default) if s.startswith("LDG")]) == 4


def test_registers_without_spills(report):
    assert report.spill_bytes == 0 and report.count("setmaxnreg") == 2
    top = max(int(r) for line in report.instructions("sass") for r in re.findall(r"\bR(\d+)\b", line))
    assert top < 232


def test_128x256_two_batches_with_the_scales_read_once():
    report = compile_report(TARGET, arch="sm_90a", tile=[128, 256], cluster=[2, 1], epi_stages=2)
    runs = _runs(ptx_loops.mainloop(report).lines)
    assert runs.startswith("1 wait stage, 3 lds, 1 turn") and runs.count("4 wgmma") == 2 and "ldg" not in runs
    assert report.spill_bytes == 0


# -- on an H100 -------------------------------------------------------------------------------
_GPU_CHECK = textwrap.dedent("""
    import json, sys, torch
    from cutecourse.kernels import grouped, hopper_grouped_gemm_fp8_smem_scales as smem
    from cutecourse.models import blockwise_fp8 as fp8b
    torch.manual_seed(0)
    out = []
    for name, sizes, sms, options in json.loads(sys.argv[1]):
        options = {key: tuple(v) if isinstance(v, list) else v for key, v in options.items()}
        As = [torch.randn(m, k, device="cuda") for m, n, k in sizes]
        Bs = [torch.randn(n, k, device="cuda") for m, n, k in sizes]
        qA, SA, qB, SB = grouped.quantize_fp8(As, Bs)
        Cs = [torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda") for m, n, k in sizes]
        smem.launcher_fp8(qA, qB, SA, SB, Cs, sms=sms, **options)()
        torch.cuda.synchronize()
        err = 0.0
        for c, qa, sa, qb, sb, (m, n, k) in zip(Cs, qA, SA, qB, SB, sizes):
            if m and k:
                ref = fp8b.scaled_mm_reference(qa, sa, qb, sb)
                err = max(err, ((c.float() - ref).abs().max() / ref.abs().max()).item())
            elif m:
                err = max(err, c.float().abs().max().item())
        out.append([name, err])
        print(out[-1], flush=True)
    # the packed MoE form: group starts that are not multiples of 4 rows, two empty experts
    g, n, k = 16, 384, 2048
    rows = torch.randint(0, 200, (g,))
    rows[3] = rows[7] = 0
    offs = torch.cumsum(rows, 0).to(torch.int32).cuda()
    x, w = torch.randn(int(rows.sum()), k, device="cuda"), torch.randn(g, n, k, device="cuda")
    qa, sa = fp8b.quantize_blockwise_fp8(x, (1, 128))
    qw, sw = zip(*[fp8b.quantize_blockwise_fp8(w[i], (128, 128)) for i in range(g)])
    qw, sw = torch.stack(qw), torch.stack(sw)
    c = smem.grouped_mm_fp8(qa, qw.transpose(-2, -1), sa.t().contiguous().t(), sw, offs, cluster=(1, 1))
    ends = offs.tolist()
    ref = torch.cat([fp8b.scaled_mm_reference(qa[s:e], sa[s:e], qw[i], sw[i])
                     for i, (s, e) in enumerate(zip([0] + ends[:-1], ends))])
    out.append(["packed", ((c.float() - ref).abs().max() / ref.abs().max()).item()])
    print("RESULT" + json.dumps(out))
""")

#: Ragged M (not multiples of 4: A's scales padded), an empty group, N ending inside a tile and
#: odd 128x192 tiles (64 columns into a block of B's scales), K not a multiple of 128.
RAGGED = [(0, 384, 256), (301, 264, 1040), (129, 584, 128), (1, 192, 384), (7, 1032, 640), (64, 136, 16)]
K7168 = [(1000, 4096, 7168), (0, 4096, 7168), (77, 4096, 7168), (2049, 4096, 7168)]
K2048 = [(513, 7168, 2048), (0, 7168, 2048), (4096, 7168, 2048), (3, 7168, 2048)]
GPU_CASES = [
    ("128x192 1x1, ragged", RAGGED, 132, dict(tile=(128, 192), cluster=(1, 1))),
    ("128x192 2x1, K 7168", K7168, 132, dict(tile=(128, 192), cluster=(2, 1))),
    ("128x192 2x1, K 2048", K2048, 132, dict(tile=(128, 192), cluster=(2, 1))),
    ("128x256 2x1 2 C buffers, K 7168", K7168, 132, dict(tile=(128, 256), cluster=(2, 1), epi_stages=2)),
    ("128x256 1x1, ragged, few SMs", RAGGED, 7, dict(tile=(128, 256), cluster=(1, 1))),
    ("128x128 1x2, ragged, few SMs", RAGGED, 10, dict(tile=(128, 128), cluster=(1, 2))),
    ("40 groups, few SMs (the maps rewritten per group)",
     [(64 * (1 + g % 5) + g % 3, 256, 128 + 16 * g) for g in range(40)], 7, dict(cluster=(1, 1))),
]


@pytest.mark.gpu
def test_matches_the_reference_on_the_gpu(run_gpu_script):
    # bf16 output of an fp32 sum: 1e-2 relative to the reference, as the default kernel's tests;
    # a deadlock (a stage whose scale bytes never arrive) ends here in 300 s (seven compiles first)
    results = run_gpu_script(_GPU_CHECK, GPU_CASES, timeout=300)
    assert len(results) == len(GPU_CASES) + 1  # and the packed form
    bad = [r for r in results if not r[1] < 1e-2]
    assert not bad, "\n".join(map(str, bad))
