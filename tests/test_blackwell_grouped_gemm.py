"""The Blackwell grouped block-scaled GEMM, proven by compilation for sm_100a on the CPU.

Every supported (format, tile, cluster) is compiled once (two at a time, each in its own process)
and its PTX is held to counts predicted from the configuration: which block-scaled MMA, how many
scale-factor copies to TMEM, the TMEM life cycle, the five tensor maps, multicast only when the
cluster asks for it. The host metadata is tied to ``models/block_scaling``; the GPU test (B200
only) checks the numbers against ``block_scaling.grouped_reference``.
"""

import itertools
import re
from types import SimpleNamespace
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from cutecourse import errors, inspect
from cutecourse.kernels import blackwell_grouped_gemm as bw
from cutecourse.kernels import group_walk, grouped, grouped_targets
from cutecourse.models import blackwell_plan as bp
from cutecourse.models import block_scaling as bs
from cutecourse.models.group_scheduler import GroupedProblem, schedule, tensormap_updates


TARGET = "cutecourse.kernels.grouped_targets:blackwell"
CONFIGS = list(itertools.product(bp.FORMATS, bp.TILES, bp.CLUSTERS))


def _key(cfg):
    fmt, tile, cluster = cfg
    return f"{fmt}-{tile[0]}x{tile[1]}-{cluster[0]}x{cluster[1]}"


@pytest.fixture(scope="module")
def reports():
    """Every configuration compiled once; two compiles at a time (one per core)."""
    def build(cfg):
        fmt, tile, cluster = cfg
        return cfg, inspect.compile_report(TARGET, arch="sm_100a", fmt=fmt, tile=list(tile),
                                           cluster=list(cluster))

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(build, CONFIGS))


# -- what the compiler made ---------------------------------------------------------------------
@pytest.mark.parametrize("cfg", CONFIGS, ids=_key)
def test_block_scaled_mma_kind_and_count(reports, cfg):
    fmt, tile, _ = cfg
    r = reports[cfg]
    mine, other = ("NVFP4 MMA", "MXFP8 MMA") if fmt == "nvfp4" else ("MXFP8 MMA", "NVFP4 MMA")
    # one k-tile = 4 MMAs (K = 64 for e2m1, 32 for e4m3), the k-block loop fully unrolled
    assert r.count(mine) == bp.K_BLOCKS and r.count(other) == 0
    assert r.count("block-scaled MMA") == bp.K_BLOCKS
    assert r.count(r"^tcgen05\.mma\.cta_group::2") == 0  # 1-CTA MMA only


@pytest.mark.parametrize("cfg", CONFIGS, ids=_key)
def test_tmem_life_cycle_and_scale_factor_copies(reports, cfg):
    fmt, tile, cluster = cfg
    r, plan = reports[cfg], bp.plan(fmt, tile)
    assert r.count("tcgen05.alloc") == 1 and r.count("tcgen05.dealloc") == 1
    assert r.count(r"^tcgen05\.relinquish_alloc_permit") == 1
    # SF atoms per k-tile: NVFP4 256/64 = 4 per 128 rows, MXFP8 128/128 = 1 per 128 rows
    assert r.count("tcgen05.cp") == sum(plan.sf_atoms)
    # epilogue: one tcgen05.ld per 128x32 sub-tile, each followed by its wait (no W0014)
    loads = tile[1] // bp.EPI_TILE[1]
    assert r.count("tcgen05.ld") == loads and r.count("TMA stores") == loads
    assert r.count("tcgen05.wait::ld") >= r.count("tcgen05.ld")
    assert not [ln for ln in r.log.splitlines() if "W0014" in ln]
    # barriers: full + empty per A/B stage and per accumulator stage
    assert r.count(r"^mbarrier\.init") == 2 * (plan.ab_stages + plan.acc_stages)


@pytest.mark.parametrize("cfg", CONFIGS, ids=_key)
def test_five_tensor_maps_patched_released_acquired(reports, cfg):
    r = reports[cfg]
    # A, B, SFA, SFB, C: address + 5 sizes + 4 strides each
    assert r.count("tensormap.replace") == bw.MAPS * 10
    assert r.count(r"^tensormap\.replace\.tile\.global_address") == bw.MAPS
    assert r.count(r"^tensormap\.replace\.tile\.global_dim") == bw.MAPS * 5
    assert r.count(r"^tensormap\.replace\.tile\.global_stride") == bw.MAPS * 4
    assert r.count("tensormap release") == bw.MAPS
    assert r.count("tensormap acquire") == bw.MAPS
    assert r.count(r"^prefetch\.tensormap") == bw.MAPS


@pytest.mark.parametrize("cfg", CONFIGS, ids=_key)
def test_multicast_only_when_the_cluster_asks(reports, cfg):
    _, _, (cm, cn) = cfg
    r = reports[cfg]
    assert r.count("TMA loads") == 4  # A, B, SFA, SFB
    # B and SFB are shared along the cluster's M, A and SFA along its N
    assert r.count("TMA multicast loads") == 2 * (cm > 1) + 2 * (cn > 1)
    assert (r.count("tcgen05.commit multicast") > 0) == ((cm, cn) != (1, 1))


@pytest.mark.parametrize("cfg", CONFIGS, ids=_key)
def test_no_spills_one_cta_per_sm(reports, cfg):
    r = reports[cfg]
    assert r.spill_bytes == 0 and r.registers and r.registers <= 96
    assert ".target sm_100a" in r.ptx


def instruction_descriptor(r) -> dict:
    """Decode the tcgen05 block-scaled MMA instruction descriptor, a 32-bit immediate the PTX
    selects (``selp.b32``) just before the MMAs; its two values differ only in bit 13."""
    values = {int(v) for m in re.finditer(r"selp\.b32\s+%r\d+, (\d{8,}), (\d{8,}), %p\d+", r.ptx)
              for v in m.groups()}
    assert values, "no instruction-descriptor immediate found"
    fields = [{"a_type": (d >> 7) & 7, "b_type": (d >> 10) & 7, "n": ((d >> 17) & 0x3F) << 3,
               "scale_e8m0": (d >> 23) & 1, "m": ((d >> 24) & 0x1F) << 4} for d in values]
    assert all(f == fields[0] for f in fields)
    return fields[0]


@pytest.mark.parametrize("cfg", CONFIGS, ids=_key)
def test_instruction_descriptor_says_which_scales(reports, cfg):
    """The opcode does not say e4m3 or e8m0 scales; the descriptor's bit 23 does."""
    fmt, tile, _ = cfg
    d = instruction_descriptor(reports[cfg])
    data_type = 1 if fmt == "nvfp4" else 0  # e2m1 in kind::mxf4nvf4, e4m3 in kind::mxf8f6f4
    assert d == {"a_type": data_type, "b_type": data_type, "n": tile[1],
                 "scale_e8m0": int(fmt == "mxfp8"), "m": tile[0]}


# -- the plan -----------------------------------------------------------------------------------
def test_an_epilogue_op_runs_on_every_accumulator_of_the_tmem_epilogue():
    # 128 epilogue threads, a 128x128 tile: 128 accumulators each, one add of bias[n] per
    # accumulator, one bias load per column the thread holds, its index clamped to the bias's
    # last element first (a tile that pads C: epilogue_op.clamped); no op, no such code
    r = inspect.compile_report(TARGET, arch="sm_100a", epilogue_op="AddBias")
    assert r.ptx.count("add.f32") == 128 and r.ptx.count("ld.global.b32") >= 128
    assert r.ptx.count("min.s32") >= 128
    assert r.spill_bytes == 0


def test_plan_fits_smem_and_tmem():
    p = bp.plan("nvfp4", (128, 128))
    assert (p.tile_mnk, p.ab_stages, p.acc_stages, p.c_stages) == ((128, 128, 256), 5, 2, 4)
    assert p.stage_bytes == 2 * 128 * 256 // 2 + 2 * 128 * 256 // 16  # 32 KiB data + 4 KiB SF
    p = bp.plan("mxfp8", (128, 128))
    assert (p.tile_mnk, p.ab_stages, p.acc_stages, p.c_stages) == ((128, 128, 128), 6, 2, 2)
    for fmt, tile in itertools.product(bp.FORMATS, bp.TILES):
        p = bp.plan(fmt, tile)
        assert p.smem_bytes <= bp.SMEM_CAPACITY and p.tmem_columns <= 512
    assert bp.plan("nvfp4", (128, 256)).acc_stages == 1  # 2 x 256 columns + SF do not fit


def test_unsupported_configurations_say_why():
    with pytest.raises(errors.DTypeError, match="mxfp4"):
        bw.BlackwellGroupedBlockScaledGemm(fmt="mxfp4")
    with pytest.raises(errors.DTypeError, match="unknown"):
        grouped_targets.blackwell(fmt="int8")
    with pytest.raises(errors.ShapeError, match="tile"):
        bw.BlackwellGroupedBlockScaledGemm((256, 128))
    with pytest.raises(errors.ShapeError, match="cluster"):
        bw.BlackwellGroupedBlockScaledGemm(cluster_mn=(4, 1))
    with pytest.raises(errors.DTypeError, match="output"):
        bp.plan("nvfp4", out_dtype="float32")
    # the kernel's plan(in_dtype, out_dtype), as every kernel's: the format fixes the input
    kernel = bw.BlackwellGroupedBlockScaledGemm(fmt="mxfp8")
    assert kernel.IN_DTYPES == ("float8_e4m3fn",) and kernel.plan("float8_e4m3fn", "bfloat16") == bp.plan("mxfp8")
    with pytest.raises(errors.DTypeError, match="mxfp8 data is float8_e4m3fn, not float16"):
        kernel.plan("float16", "float16")
    with pytest.raises(errors.DTypeError, match="output"):
        grouped_targets.blackwell(out_dtype="float32")


@pytest.mark.parametrize("fmt, k, err", [("nvfp4", 40, errors.ShapeError),  # 40 % 16
                                          ("nvfp4", 48, errors.AlignmentError),  # 24-byte rows
                                          ("mxfp8", 48, errors.ShapeError),  # 48 % 32
                                          ("mxfp8", 0, errors.ShapeError)])
def test_bad_k_is_refused_before_quantizing(fmt, k, err):
    with pytest.raises(err, match="K"):
        grouped.quantize_blockscaled([torch.randn(8, k)], [torch.randn(16, k)], fmt)


def test_c_rows_must_be_16_bytes():
    with pytest.raises(errors.AlignmentError, match="N = 12"):
        grouped.quantize_blockscaled([torch.randn(8, 64)], [torch.randn(12, 64)], "mxfp8")


# -- host metadata against models/block_scaling --------------------------------------------------
SIZES = [(200, 128, 256), (0, 128, 256), (64, 256, 512), (130, 64, 64)]


def _metadata(groups, fmt):
    """The device metadata of checked quantized groups, as the launcher makes it (here on the CPU:
    the pointers are host addresses)."""
    form = grouped.QuantizedGroups(groups, fmt)
    form.check()
    return form.metadata(grouped.BLACKWELL.kernel(**form.params()))[0]


def _groups(fmt):
    g = torch.Generator().manual_seed(0)
    As = [torch.randn(m, k, generator=g) for m, _, k in SIZES]
    Bs = [torch.randn(n, k, generator=g) for _, n, k in SIZES]
    return As, Bs, grouped.quantize_blockscaled(As, Bs, fmt)


@pytest.mark.parametrize("fmt", bp.FORMATS)
def test_host_metadata_matches_block_scaling(fmt):
    f = bs.get_format(fmt)
    As, Bs, groups = _groups(fmt)
    md = _metadata(groups, fmt)
    assert md.shapes.dtype == torch.int32 and md.shapes.tolist() == [[m, n, k, 1] for m, n, k in SIZES]
    assert md.ptrs.dtype == torch.int64 and md.ptrs.shape == (len(SIZES), 5) == md.strides.shape
    assert group_walk.OPERANDS == ("a", "b", "c", "sfa", "sfb") and bw.MAPS == 5
    for i, (op, (m, n, k), a, b) in enumerate(zip(groups, SIZES, As, Bs)):
        # pointer columns A, B, C, SFA, SFB: one order for the metadata and the tensor maps
        assert md.ptrs[i].tolist() == [op.a.data_ptr(), op.b.data_ptr(), op.c.data_ptr(),
                                       op.sfa.data_ptr(), op.sfb.data_ptr()]
        # strides in elements (a packed e2m1 byte holds two); the interleaved SF have none
        assert md.strides[i].tolist() == [k, k, n, 0, 0]
        assert op.a.stride(0) * op.a.element_size() * 8 // (4 if f.data == "e2m1" else 8) == k
        # the scale factors: interleaved, padded to 128 rows x 4 blocks, the bytes quantize made
        for x, sf_buf, rows in ((a, op.sfa, m), (b, op.sfb, n)):
            q, sf = bs.quantize(x, fmt)
            assert sf_buf.numel() == torch.Size(bs.padded_sf_shape(rows, k // f.block)).numel()
            assert torch.equal(sf_buf.view(torch.uint8), bs.to_interleaved(sf).view(torch.uint8))
            assert torch.equal(bs.from_interleaved(sf_buf, rows, k // f.block).view(torch.uint8),
                               sf.view(torch.uint8))
        assert torch.equal(op.a.view(torch.uint8), bs.quantize(a, fmt)[0].view(torch.uint8))
    tile_k = bp.plan(fmt).tile_mnk[2]
    assert md.work_bound == GroupedProblem([s for s in SIZES], (128, 128), (1, 1), tile_k).total


def test_host_metadata_refuses_what_the_kernel_cannot_read():
    _, _, groups = _groups("nvfp4")
    bad = grouped.QuantizedGroup(groups[0].a, groups[0].b, groups[0].c, groups[0].sfa[:-1], groups[0].sfb)
    with pytest.raises(errors.ShapeError, match="interleaved"):
        _metadata([bad], "nvfp4")
    with pytest.raises(errors.DTypeError, match="quantize"):
        _metadata(groups, "mxfp8")  # e2m1 bytes are not MXFP8 data
    with pytest.raises(errors.ShapeError, match="empty"):
        _metadata([groups[1]], "nvfp4")


def test_kernel_group_walk_is_the_cpu_model(monkeypatch):
    """The kernel's walk (GroupScheduler.start / advance / work_tile, run here on Python ints)
    visits the tiles schedule() predicts, and enters a new group where tensormap_updates() counts one."""
    monkeypatch.setattr(group_walk, "find_group", group_walk.find_group.__wrapped__)
    # Python ints throughout
    monkeypatch.setattr(group_walk, "cutlass", SimpleNamespace(Int32=int, const_expr=bool))
    shapes = {(g, col): v for g, size in enumerate(SIZES) for col, v in enumerate((*size, 1))}  # [g, col]
    for cluster in bp.CLUSTERS:
        problem = GroupedProblem(SIZES, (128, 128), cluster, 256)
        ctas = 8 * problem.cluster_size
        clusters = min(ctas // problem.cluster_size, problem.total)
        expected = schedule(problem, ctas)[::problem.cluster_size]  # cluster leaders
        updates = tensormap_updates(schedule(problem, ctas)).per_cta[::problem.cluster_size]
        for c in range(clusters):
            groups = group_walk.GroupScheduler(shapes=shapes, ptrs=None, strides=None, count=len(SIZES),
                                               cluster_tile=problem.cluster_tile, cluster_mn=cluster,
                                               in_cluster=(0, 0), first=c, stride=clusters, group_m=bw.GROUP_M)
            got, walk = [], groups.start()
            while walk.active():
                t = walk.work_tile()
                got.append((int(t.group), int(t.tile_m), int(t.tile_n), int(t.k_end)))
                walk.advance(t)
            assert got == [tuple(it[:4]) for it in expected[c]]
            assert int(walk.position.entered) == updates[c]


class _RowByRow(group_walk.GroupScheduler):
    """Inside a group, n fastest (row by row) instead of the bands' m fastest."""

    def tile_of(self, item, rows, cols):
        return item // cols, item % cols


def _walk_tiles(scheduler):
    """(tile_m, tile_n) of a one-group walk (300 x 600, 128 x 128 tiles: 3 x 5), on Python ints
    where the caller made ``group_walk`` run on them."""
    shapes = {(0, col): v for col, v in enumerate((300, 600, 64, 1))}
    groups = scheduler(shapes=shapes, ptrs=None, strides=None, count=1, cluster_tile=(128, 128, 64),
                       cluster_mn=(1, 1), in_cluster=(0, 0), first=0, stride=1, group_m=bw.GROUP_M)
    got, walk = [], groups.start()
    while walk.active():
        t = walk.work_tile()
        got.append((int(t.tile_m), int(t.tile_n)))
        walk.advance(t)
    return got


def test_every_grouped_kernel_walks_the_scheduler_it_is_given(monkeypatch):
    from cutecourse.kernels import tile_scheduler
    from cutecourse.kernels.hopper_grouped_gemm import GroupedHopperGemm
    from cutecourse.kernels.hopper_grouped_gemm_fp8 import BlockScaledGroupedHopperGemm
    from cutecourse.kernels.hopper_grouped_gemm_fp8_onepart import OnePartBlockScaledGroupedHopperGemm

    for cls in (bw.BlackwellGroupedBlockScaledGemm, GroupedHopperGemm, BlockScaledGroupedHopperGemm,
                OnePartBlockScaledGroupedHopperGemm):
        assert cls(scheduler=_RowByRow).Scheduler is _RowByRow
        with pytest.raises(errors.CourseError, match="GroupScheduler or a subclass"):
            cls(scheduler=tile_scheduler.StaticScheduler)
    monkeypatch.setattr(group_walk, "find_group", group_walk.find_group.__wrapped__)
    monkeypatch.setattr(group_walk, "cutlass", SimpleNamespace(Int32=int, const_expr=bool))
    assert _walk_tiles(group_walk.GroupScheduler)[:4] == [(0, 0), (1, 0), (2, 0), (0, 1)]
    assert _walk_tiles(_RowByRow)[:6] == [(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (1, 0)]


def test_the_hopper_grouped_kernel_compiles_the_scheduler_it_is_given():
    from cutecourse.kernels.hopper_grouped_gemm import GroupedHopperGemm

    def ptx(kernel):
        return inspect.compile_here(kernel, *grouped.HOPPER.fake_arguments(kernel, "float16", "float16")).ptx

    banded, rows = ptx(GroupedHopperGemm()), ptx(GroupedHopperGemm(scheduler=_RowByRow))
    assert rows != banded  # the producer's walk computes another order ...
    for pattern in (r"^wgmma\.mma_async", r"^cp\.async\.bulk\.tensor", r"^tensormap\.replace"):
        assert len(re.findall(pattern, rows, re.M)) == len(re.findall(pattern, banded, re.M))  # ... same loops


# -- on a B200 -----------------------------------------------------------------------------------
@pytest.mark.gpu("sm_100a")
@pytest.mark.parametrize("fmt", bp.FORMATS)
@pytest.mark.parametrize("cluster", [(1, 1), (2, 1)])
def test_matches_the_reference_on_a_b200(fmt, cluster):
    As, Bs, _ = _groups(fmt)
    ref = bs.grouped_reference(list(zip(As, Bs)), fmt)
    out = grouped.grouped_gemm_blockscaled([a.cuda() for a in As], [b.cuda() for b in Bs], fmt,
                                      cluster=cluster)
    for c, r in zip(out, ref):
        torch.testing.assert_close(c.float().cpu(), r, rtol=2e-2, atol=2e-2 * float(r.abs().max()))


def test_gpu_entry_point_says_it_needs_a_b200():
    if cutecourse_mode_runs():
        pytest.skip("a Blackwell GPU is present")
    with pytest.raises(errors.DeviceError, match="Blackwell"):
        grouped.grouped_gemm_blockscaled([torch.randn(128, 64)], [torch.randn(128, 64)])


def cutecourse_mode_runs() -> bool:
    from cutecourse.modes import mode_for

    return mode_for("sm_100a").run
