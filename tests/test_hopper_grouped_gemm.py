"""The Hopper grouped GEMM: input errors, the device metadata against the CPU model, what the
compiler made (tensor-map rewrites and fences, TMA through the workspace maps, no spills), and on
an H100 correctness against torch plus each CTA's work and tensor-map rewrites against
``models.group_scheduler`` (in a subprocess with a timeout: a broken pipeline hangs, not fails).
"""

import textwrap

import pytest
import torch

import cutecourse
from cutecourse.errors import AlignmentError, DeviceError, DTypeError, LayoutError, ShapeError
from cutecourse.inspect import compile_report
from cutecourse.kernels import grouped
from cutecourse.kernels import grouped_checks as checks
from cutecourse.kernels import hopper_grouped_gemm as hg
from cutecourse.models import group_scheduler as gs

TARGET = "cutecourse.kernels.grouped_targets:hopper"


def _groups(sizes, dtype=torch.float16):
    return ([torch.zeros(m, k, dtype=dtype) for m, n, k in sizes],
            [torch.zeros(n, k, dtype=dtype) for m, n, k in sizes])


# -- input errors (any machine: the checks run before a GPU is touched) -------------------------
def test_errors_name_the_group():
    As, Bs = _groups([(128, 256, 64), (64, 256, 64)])
    with pytest.raises(ShapeError, match="group 1: .*K"):
        checks.check_groups(As, [Bs[0], torch.zeros(256, 72, dtype=torch.float16)])
    with pytest.raises(ShapeError, match="2 A's and 1 B's"):
        checks.check_groups(As, Bs[:1])
    with pytest.raises(DTypeError, match="mix dtypes"):
        checks.check_groups([As[0], As[1].bfloat16()], [Bs[0], Bs[1].bfloat16()])
    with pytest.raises(DTypeError, match="group 0"):
        checks.check_groups([As[0].float()], [Bs[0].float()])
    with pytest.raises(AlignmentError, match="group 1"):
        checks.check_groups([As[0], torch.zeros(64, 60, dtype=torch.float16)],
                        [Bs[0], torch.zeros(256, 60, dtype=torch.float16)])
    with pytest.raises(ShapeError, match="list"):
        checks.check_groups(As[0], Bs[0])


def test_empty_groups_are_allowed():
    # M = 0 (an expert without tokens) and K = 0 (C_g = 0) are checked for dtype only
    assert checks.check_groups(*_groups([(0, 256, 64), (128, 256, 0), (8, 256, 64)])) == ("float16", "float16")


def test_packed_form_errors():
    a = torch.zeros(300, 128, dtype=torch.bfloat16)
    w = torch.zeros(4, 256, 128, dtype=torch.bfloat16)  # (G, N, K) like a stack of Linear weights
    offs = torch.tensor([100, 100, 250, 300], dtype=torch.int32)
    assert checks.check_packed(a, w.transpose(-2, -1), offs) == ("bfloat16", "bfloat16")
    with pytest.raises(LayoutError, match="transpose"):
        checks.check_packed(a, w.transpose(-2, -1).contiguous(), offs)  # (G, K, N) N-major
    with pytest.raises(DTypeError, match="int32"):
        checks.check_packed(a, w.transpose(-2, -1), offs.long())
    with pytest.raises(ShapeError, match="3 entries"):
        checks.check_packed(a, w.transpose(-2, -1), offs[:3])
    with pytest.raises(ShapeError, match="3-D"):
        checks.check_packed(a, w[0], offs)


@pytest.mark.no_gpu
def test_no_hopper_gpu_is_a_device_error():
    with pytest.raises(DeviceError, match="Hopper"):
        grouped.grouped_gemm(*_groups([(128, 256, 64)]))


# -- the metadata the kernel reads, against the CPU model -------------------------------------
def test_packed_metadata_matches_the_groups():
    k, n = 128, 256
    offs = torch.tensor([100, 100, 250, 300], dtype=torch.int32)
    a = torch.zeros(300, k, dtype=torch.float16)
    w = torch.zeros(4, n, k, dtype=torch.float16)
    c = torch.zeros(300, n, dtype=torch.float16)
    b = w.transpose(-2, -1)
    shapes, ptrs, strides, bound = grouped.packed_metadata(hg.GroupedHopperGemm(), a, b, c, offs)
    sizes = [(100, n, k), (0, n, k), (150, n, k), (50, n, k)]
    assert shapes.tolist() == [[m, n_, k_, 1] for m, n_, k_ in sizes]
    starts = [0, 100, 100, 250]
    assert ptrs[:, 0].tolist() == [a[s:].data_ptr() for s in starts]
    assert ptrs[:, 1].tolist() == [w[g].data_ptr() for g in range(4)]
    assert ptrs[:, 2].tolist() == [c[s:].data_ptr() for s in starts]
    assert strides.tolist() == [[k, k, n]] * 4
    # the grid bound the host computes without reading offs covers the model's tile count
    problem = gs.GroupedProblem(sizes, tile=(128, 256))
    assert bound == (-(-300 // 128) + 4) * -(-n // 256)
    assert problem.total <= bound


# -- what the compiler made -------------------------------------------------------------------
@pytest.fixture(scope="module")
def report():
    return compile_report(TARGET, arch="sm_90a")


def test_tensor_maps_are_rewritten_in_smem_and_fenced(report):
    # 3 maps (A, B, C) x (1 address + 5 sizes + 4 strides) patched in shared memory
    assert report.count(r"^tensormap\.replace\.tile\.global_address\.shared::cta") == 3
    assert report.count(r"^tensormap\.replace\.tile\.global_dim\.shared::cta") == 15
    assert report.count(r"^tensormap\.replace\.tile\.global_stride\.shared::cta") == 12
    # each published to the workspace with a release, and acquired before its next copy
    assert report.count(r"^tensormap\.cp_fenceproxy\.global\.shared::cta\.tensormap::generic\.release") == 3
    assert report.count(r"^fence\.proxy\.tensormap::generic\.acquire\.gpu") == 3


def test_tma_reads_the_workspace_maps(report):
    # every TMA copy names its map by a register (the workspace slot), not a kernel parameter
    copies = [line for line in report.instructions("ptx") if line.startswith("cp.async.bulk.tensor")]
    assert len(copies) == 10  # A and B loads, 8 C sub-tile stores
    assert all("[%rd" in line.split(",")[0] + line.split(",")[1] for line in copies)
    assert not any("param" in line for line in copies)


def test_compiles_warp_specialized_without_spills(report):
    assert report.count("wgmma") == 4 and report.count("setmaxnreg") == 2
    assert report.registers == 168 and report.spill_bytes == 0
    # sm_90a's known trap: a predicated R2UR before UTMALDG (illegal instruction at run time)
    assert not [s for s in report.instructions("sass") if s.startswith("@") and "R2UR" in s]
    assert report.count("UTMALDG", "sass") == 2


def test_the_grouped_kernels_take_the_persistent_kernel_s_keywords():
    """Their constructor is the persistent kernel's (a variant sets only its defaults): pdl= and
    epi_stages= reach them, an unknown keyword names the ones they take."""
    from cutecourse.kernels.hopper_grouped_gemm_fp8 import BlockScaledGroupedHopperGemm

    assert hg.GroupedHopperGemm(pdl=True).pdl and not hg.GroupedHopperGemm().pdl
    two = BlockScaledGroupedHopperGemm(epi_stages=2, pdl=True)
    assert (two.epi_stages, two.pdl, two.tile_mn, two.cluster_mn, two.group_m) == (2, True, (128, 128), (2, 1), 8)
    assert two.key() != BlockScaledGroupedHopperGemm().key() == BlockScaledGroupedHopperGemm(epi_stages=4).key()
    with pytest.raises(TypeError, match="'pdll'; GroupedHopperGemm takes tile_mn, cluster_mn, sms"):
        hg.GroupedHopperGemm(pdll=True)
    r = compile_report(TARGET, arch="sm_90a", pdl=True)
    assert r.count("griddepcontrol.wait") == 1 and r.count("griddepcontrol.launch_dependents") == 1
    assert r.ptx.index("griddepcontrol.wait") < r.ptx.index("cp.async.bulk.tensor")  # before the first load


# -- on an H100 -------------------------------------------------------------------------------
_GPU_CHECK = textwrap.dedent("""
    import json, sys, torch
    import cutecourse
    from cutecourse.kernels import gemm_launch, grouped, hopper_grouped_gemm as hg
    from cutecourse.models import group_scheduler as gs
    torch.manual_seed(0)
    out = []
    for name, sizes, dtype, tile, sms, cluster in json.loads(sys.argv[1]):
        dt = getattr(torch, dtype)
        As = [torch.randn(m, k, device="cuda").to(dt) for m, n, k in sizes]
        Bs = [torch.randn(n, k, device="cuda").to(dt) for m, n, k in sizes]
        Cs = [torch.full((m, n), float("nan"), dtype=dt, device="cuda") for m, n, k in sizes]
        fn = grouped.launcher(As, Bs, Cs, tile=tuple(tile), sms=sms, cluster=tuple(cluster))
        fn()
        torch.cuda.synchronize()
        err = max((((c.float() - a.float() @ b.float().T).abs().max() / max(1.0, k ** 0.5)).item()
                   if m else 0.0) for c, a, b, (m, n, k) in zip(Cs, As, Bs, sizes))
        live = [(m if k else 0, n, max(k, 1)) for m, n, k in sizes]  # K = 0: C_g = 0, no tiles
        problem = gs.GroupedProblem(live, tile=tuple(tile), cluster=tuple(cluster), group_m=hg.GROUP_M)
        sched = gs.schedule(problem, sms)
        model = [[len(s), n] for s, n in zip(sched, gs.tensormap_updates(sched).per_cta)]
        trace = fn.trace[:fn.ctas].tolist()
        out.append([name, err, trace == model, len(gemm_launch._COMPILED)])  # variants compiled so far
        print(out[-1], flush=True)
    # the packed MoE form against torch._grouped_mm, empty experts included
    g, n, k = 16, 512, 384
    rows = torch.randint(0, 200, (g,))
    rows[3] = rows[7] = 0
    offs = torch.cumsum(rows, 0).to(torch.int32).cuda()
    a = torch.randn(int(rows.sum()), k, device="cuda").bfloat16()
    w = torch.randn(g, n, k, device="cuda").bfloat16()
    ref = torch._grouped_mm(a, w.transpose(-2, -1), offs=offs)
    c = grouped.grouped_mm(a, w.transpose(-2, -1), offs)
    err = ((c.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
    out.append(["packed vs torch._grouped_mm", err, True, 0])
    print("RESULT" + json.dumps(out))
""")

MIXED = [(m, 1024, 1024) for m in (256, 4096, 512, 1024, 2048, 768, 3072, 1536)]
RAGGED = [(0, 256, 64), (1, 256, 64), (7, 264, 72), (300, 512, 1000), (0, 512, 8), (129, 256, 0),
          (128, 256, 8), (130, 768, 64)]
EDGES = [(m, 256, 192) for m in (1, 63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 257, 320, 321)]
GPU_CASES = [
    # name, sizes [(M, N, K)], dtype, tile, sms, cluster
    ("one group = dense", [(1000, 520, 4104)], "float16", (128, 256), 132, (1, 1)),
    ("8 mixed M", MIXED, "bfloat16", (128, 256), 132, (1, 1)),
    ("empty, tiny, ragged", RAGGED, "float16", (128, 256), 132, (1, 1)),
    ("per-group N and K", [(200, 1024, 128), (333, 256, 2056), (64, 520, 40)], "bfloat16", (128, 128),
     9, (1, 1)),
    ("40 groups (few SMs)", [(64 * (1 + g % 5), 256, 128 + 8 * g) for g in range(40)], "float16",
     (128, 256), 7, (1, 1)),
    ("256 small groups", [(16 + g % 50, 128, 64) for g in range(256)], "float16", (128, 128), 132, (1, 1)),
    ("2x1 clusters, mixed", MIXED, "bfloat16", (128, 256), 132, (2, 1)),
    ("2x1 clusters, ragged", RAGGED, "float16", (128, 256), 10, (2, 1)),
    ("1x2 clusters, ragged", RAGGED, "bfloat16", (128, 128), 132, (1, 2)),
    # rows around the warpgroups' 64-row halves: one or both halves of a group's last tile empty
    ("rows around 64", EDGES, "bfloat16", (128, 256), 132, (1, 1)),
    ("rows around 64, 2x1 clusters", EDGES, "float16", (128, 256), 132, (2, 1)),
    ("tall 256x128 tile, ragged", RAGGED + EDGES, "bfloat16", (256, 128), 132, (1, 1)),
    ("8 mixed M again: no recompile", [(m, 1024, 512) for m in (64, 128, 4000, 8, 512, 96, 1, 2048)],
     "bfloat16", (128, 256), 132, (1, 1)),
]


@pytest.mark.gpu
def test_matches_torch_and_the_scheduler_model_on_the_gpu(run_gpu_script):
    results = run_gpu_script(_GPU_CHECK, GPU_CASES)
    assert len(results) == len(GPU_CASES) + 1
    bad = [r for r in results if not (r[1] < 2e-2 and r[2])]
    assert not bad, "\n".join(map(str, bad))
    compiled = [r[3] for r in results[:-1]]
    assert compiled[-1] == compiled[-2]  # new sizes, a configuration compiled before: no compile


_PDL_CHAIN = textwrap.dedent("""
    import json, sys, torch
    from cutecourse.kernels import grouped
    torch.manual_seed(0)
    out = []
    for cluster in json.loads(sys.argv[1]):
        # Three grouped launches with PDL and no sync between them: C1 = A @ B.T; D = C1 @ E.T reads
        # C1 (read after write); C1 = A2 @ B.T overwrites it while the second may still read it
        # (write after read). Small integers: C1 is exact in fp16, and D is the exact sum rounded
        # once, as torch rounds it; so any race shows as a mismatch.
        sizes, k, n, p = (1000, 0, 300, 2048), 256, 512, 192
        ints = lambda *s: torch.randint(-2, 2, s, device="cuda").half()
        As, As2, Bs = [ints(m, k) for m in sizes], [ints(m, k) for m in sizes], [ints(n, k) for _ in sizes]
        Es = [ints(p, n) for _ in sizes]
        C1 = [torch.empty(m, n, device="cuda", dtype=torch.float16) for m in sizes]
        D = [torch.empty(m, p, device="cuda", dtype=torch.float16) for m in sizes]
        kw = dict(pdl=True, cluster=tuple(cluster))
        first, second, third = (grouped.launcher(As, Bs, C1, **kw), grouped.launcher(C1, Es, D, **kw),
                                grouped.launcher(As2, Bs, C1, **kw))
        want_d = [((a.float() @ b.float().T) @ e.float().T).half() for a, b, e in zip(As, Bs, Es)]
        want_c1 = [(a.float() @ b.float().T).half() for a, b in zip(As2, Bs)]
        bad = 0
        for _ in range(20):
            first(); second(); third()
            torch.cuda.synchronize()
            bad += sum(int((d != w).sum()) for d, w in zip(D, want_d))
            bad += sum(int((c != w).sum()) for c, w in zip(C1, want_c1))
        out.append([cluster, bad])
    print("RESULT" + json.dumps(out))
""")


@pytest.mark.gpu
def test_pdl_keeps_dependent_grouped_launches_correct(run_gpu_script):
    """pdl=True (the persistent kernel's keyword) on the grouped kernel: its producer waits for the
    previous grid before reading the group metadata and loading, so chained launches stay exact."""
    results = run_gpu_script(_PDL_CHAIN, [(1, 1), (2, 1)])
    assert results == [[[1, 1], 0], [[2, 1], 0]], results
