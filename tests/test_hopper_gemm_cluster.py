"""The cluster GEMM (kernels/hopper_gemm_cluster.py): what it hands CuTe agrees with the multicast
planner, its PTX multicasts exactly the shared operands, its hooks are overrides of the 1x1
kernel's, bad clusters are refused before compiling, and it matches torch on an H100."""

from __future__ import annotations

import re

import pytest

from cutecourse.errors import CourseError, DeviceError, ShapeError
from cutecourse.kernel_facts import kernel_facts
from cutecourse.kernels import hopper_gemm as hg
from cutecourse.kernels import hopper_gemm_cluster as hc
from cutecourse.models.multicast import plan


KERNEL_CLUSTERS = [(1, 1), (2, 1), (1, 2), (2, 2), (4, 2), (1, 4)]


@pytest.mark.parametrize("cluster", KERNEL_CLUSTERS)
def test_kernel_masks_bytes_and_arrivals_agree_with_the_planner(cluster):
    """Read back from a trace of the kernel: the masks of its TMA loads for every rank, the full
    barrier's tx_count and the empty barrier's arrival count, against the brute-force planner."""
    facts = kernel_facts(cluster, tile=(128, 256))
    p = plan(tile=(128, 256, 64), cluster=cluster, tiles=(2 * cluster[0], 2 * cluster[1], 4))
    cm, cn = cluster
    for c in range(p.num_clusters):
        for r in range(cm * cn):
            assert facts.masks[r] == {"A": p.mask("A", c, 0, r), "B": p.mask("B", c, 0, r)}, (c, r)
            assert facts.masks[r]["A"] == p.closed_form("A", r).mask
            assert facts.masks[r]["B"] == p.closed_form("B", r).mask
            assert facts.tx_count == p.tx_bytes(c, 0, r)
            assert facts.empty_arrivals == p.empty_arrivals(c, 0, r) * 8  # 8 consumer warps
    # an operand is multicast exactly when more than one CTA shares it
    assert set(facts.multicast_copies) == {op for op, n in (("A", cn), ("B", cm)) if n > 1}


def test_one_cta_kernel_is_the_cluster_kernels_1x1():
    """cluster (1, 1) is the plain one-CTA-per-tile kernel: no masks, arrivals from itself only."""
    facts = kernel_facts((1, 1))
    assert not facts.multicast_copies and facts.plain_copies == {"A": 2, "B": 2}
    assert facts.empty_arrivals == 8
    assert type(hc.ENTRY.kernel(cluster=(1, 1))) is hg.HopperGemm
    assert type(hc.ENTRY.kernel(cluster=(1, 1), stages=None)) is hg.HopperGemm  # None: not given
    assert type(hc.ENTRY.kernel(cluster=(1, 1), l2_hints="a_first")) is hc.ClusterHopperGemm
    assert type(hc.ENTRY.kernel(cluster=(2, 1))) is hc.ClusterHopperGemm
    assert type(hc.ENTRY.kernel()) is hc.ClusterHopperGemm  # the default cluster is 2x1
    one = hc.ENTRY.kernel(cluster=[1, 1], tile=[128, 128], variant="naive")
    assert one.key() == hg.NaiveHopperGemm((128, 128)).key()


def test_each_variant_on_clusters_is_its_mainloop_under_the_cluster_steps():
    for name, one_cta in hg.all_variants().items():
        kernel = hc.ENTRY.kernel(cluster=(2, 1), variant=name)
        assert type(kernel) is hc.ON_CLUSTERS[one_cta] and isinstance(kernel, one_cta)
        assert type(kernel).mainloop is one_cta.mainloop
        for step in hc.CLUSTER_STEPS:
            assert getattr(type(kernel), step) is getattr(hc.ClusterHopperGemm, step)
    keys = {hc.ENTRY.kernel(cluster=(2, 1), variant=name).key() for name in hg.all_variants()}
    assert len(keys) == len(hg.all_variants())


def test_the_cluster_kernel_takes_every_argument_of_the_1x1_kernel_with_its_default():
    """ClusterHopperGemm lists only its own keywords and passes ``**options`` on: it takes every
    keyword of the 1x1 kernel, with the same default, and the tile first."""
    import inspect

    base = inspect.signature(hg.HopperGemm).parameters
    mine = inspect.signature(hc.ClusterHopperGemm).parameters
    for name, p in base.items():
        assert name in mine, f"ClusterHopperGemm does not take {name}"
        assert (mine[name].kind, mine[name].default) == (p.kind, p.default), name
    assert list(mine)[0] == list(base)[0] == "tile_mn"  # the one positional argument
    assert set(vars(hc.ClusterHopperGemm)) & {"TILE_MN", "GROUP_M", "EPI_TILE"} == set()  # HopperGemm's


def test_a_new_mainloop_runs_on_clusters_with_no_class_written_for_it():
    """Adding a variant is its subclass and its line in a table: ``on_clusters`` makes its twin."""
    class Mine(hg.NaiveHopperGemm):
        LOAD_PLACES = 1

    twin = hc.on_clusters(Mine)
    assert twin.__mro__[1:3] == (hc.ClusterHopperGemm, Mine) and twin.__name__ == "MineOnClusters"
    assert twin.mainloop is hg.NaiveHopperGemm.mainloop and twin.load is hc.ClusterHopperGemm.load
    assert twin(cluster_mn=(1, 2)).cluster_mn == (1, 2) and twin().key() != hc.ON_CLUSTERS[hg.NaiveHopperGemm]().key()
    assert set(hc.ON_CLUSTERS) >= set(hg.all_variants().values())
    assert [hc.expected_multicast_loads((2, 2), v) for v in ("naive", "prefetch", "compiler", "compiler_guarded",
                                                              "compiler_overlap")] == [2, 4, 4, 2, 4]


def test_the_cluster_steps_are_overrides_of_the_1x1_kernel():
    from cutecourse.viz.source import diff_lines

    for step in hc.CLUSTER_STEPS:
        assert step in hc.ClusterHopperGemm.__dict__ and step in hg.HopperGemm.__dict__
        assert diff_lines(getattr(hg.HopperGemm, step), getattr(hc.ClusterHopperGemm, step))
    text = "\n".join(diff_lines(hg.HopperGemm.mainloop_done, hc.ClusterHopperGemm.mainloop_done))
    assert "+    cute.arch.cluster_wait()" in text and "-    cute.arch.sync_threads()" in text


EXPECTED_PTX = {  # cluster -> (multicast loads, all TMA loads) in the prefetch variant's PTX
    (1, 1): (0, 4), (2, 1): (2, 4), (1, 2): (2, 4), (2, 2): (4, 4)}


@pytest.mark.slow
@pytest.mark.parametrize("cluster", list(EXPECTED_PTX))
def test_ptx_has_multicast_loads_only_along_a_shared_dimension(cluster):
    from cutecourse.inspect import compile_report

    r = compile_report("cutecourse.kernels.hopper_gemm_cluster:compile_target",
                       variant="prefetch", cluster=list(cluster))
    multicast, total = EXPECTED_PTX[cluster]
    assert r.count("TMA multicast loads") == multicast == hc.expected_multicast_loads(cluster, "prefetch")
    assert r.count("TMA loads") == total
    big = cluster != (1, 1)
    # remote arrives on peers' empty barriers, and the cluster-wide teardown, only in clusters
    assert (r.count(r"^mbarrier\.arrive.*shared::cluster") > 0) == big
    assert (r.count(r"^barrier\.cluster\.wait") >= 2) == big  # init + teardown
    assert r.spill_bytes == 0


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["naive", "compiler", "compiler_guarded"])
@pytest.mark.parametrize("cluster", [(2, 1), (2, 2)])
def test_every_variant_multicasts(variant, cluster):
    from cutecourse.inspect import compile_report

    r = compile_report("cutecourse.kernels.hopper_gemm_cluster:compile_target", variant=variant,
                       cluster=list(cluster))
    assert r.count("TMA multicast loads") == hc.expected_multicast_loads(cluster, variant) > 0


@pytest.mark.parametrize("cluster, match", [
    ((3, 1), "not a power of two"),
    ((4, 8), "16 bits"),
    ((0, 2), "at least 1"),
    ((2,), "pair"),
])
def test_cluster_shapes_that_cannot_work(cluster, match):
    with pytest.raises(ShapeError, match=match) as err:
        hc.check_cluster(cluster)
    assert err.value.fix


def test_kernel_refuses_a_bad_cluster_before_compiling():
    with pytest.raises(ShapeError, match="not a power of two"):
        hc.ClusterHopperGemm((128, 256), cluster_mn=(3, 1))
    with pytest.raises(CourseError, match="l2_hints"):
        hc.ClusterHopperGemm((128, 256), cluster_mn=(2, 1), l2_hints="evict")


@pytest.mark.no_gpu("sm_90a")
def test_launcher_takes_grids_that_are_not_whole_clusters():
    import torch

    a = torch.zeros(640, 128, dtype=torch.float16)  # 5 tiles of 128 rows: 3 clusters of 2
    b = torch.zeros(512, 128, dtype=torch.float16)
    c = torch.zeros(640, 512, dtype=torch.float16)
    with pytest.raises(DeviceError):  # accepted: the next step is launching, which needs a GPU
        hc.launcher(a, b, c, cluster=(2, 1))
    with pytest.raises(ShapeError, match="expected"):  # a C of the wrong shape is refused first
        hc.launcher(a, b, c[:, :256], cluster=(2, 1))


_GPU_CHECK = r"""
import sys, torch, cutecourse
from cutecourse.kernels import hopper_gemm_cluster as hc
torch.manual_seed(0)
for cluster in [(1, 1), (2, 1), (1, 2), (2, 2)]:
    # whole clusters, and grids of 33 x 17 and 5 x 3 tiles that are not (the grid rounds up)
    for m, n, k in [(1024, 2048, 512), (512, 1024, 1000), (4160, 4224, 520), (640, 520, 64)]:
        a = torch.randn(m, k, device="cuda").half(); b = torch.randn(n, k, device="cuda").half()
        ref = a.float() @ b.float().T
        c = hc.gemm(a, b, cluster=cluster)
        torch.cuda.synchronize()
        err = ((c.float() - ref).abs().max() / ref.abs().max()).item()
        assert err < 1e-2, (cluster, m, n, k, err)
# the tile order's band height and the epilogue tile are constructor parameters
a = torch.randn(4160, 520, device="cuda").half(); b = torch.randn(4224, 520, device="cuda").half()
c = hc.gemm(a, b, cluster=(2, 1), group_m=3, epi_tile=(128, 64))
err = ((c.float() - a.float() @ b.float().T).abs().max() / (a.float() @ b.float().T).abs().max()).item()
assert err < 1e-2, ("group_m=3, epi_tile=(128, 64)", err)
print("ok")
"""


@pytest.mark.gpu("sm_90a")
def test_every_cluster_shape_matches_torch_on_the_gpu():
    import subprocess
    import sys

    # in a subprocess with a timeout: a barrier mistake in a pipelined kernel hangs, not fails
    out = subprocess.run([sys.executable, "-c", _GPU_CHECK], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]


def test_l2_hints_put_the_eviction_policies_in_the_ptx():
    from cutecourse.inspect import compile_report

    r = compile_report("cutecourse.kernels.hopper_gemm_cluster:compile_target", cluster=[2, 1],
                       l2_hints="a_first")
    consts = {int(x) for x in re.findall(r"mov\.b64\s+%rd\d+, (\d+)", r.ptx)}
    assert {hc.EVICT_FIRST, hc.EVICT_LAST} <= consts
    plain = compile_report("cutecourse.kernels.hopper_gemm_cluster:compile_target", cluster=[2, 1])
    assert hc.EVICT_FIRST not in {int(x) for x in re.findall(r"mov\.b64\s+%rd\d+, (\d+)", plain.ptx)}


def test_a_variant_with_other_policies_overrides_the_load_policies_hook():
    """The loop's load step tests no keyword: a variant that evicts B first, with no l2_hints,
    is a subclass overriding ``load_policies``; its PTX holds the policies as the keyword's does."""
    import cutlass

    from cutecourse.inspect import compile_here
    from cutecourse.kernels import gemm_launch

    class BFirst(hc.ClusterHopperGemm):
        def load_policies(self):
            return (cutlass.Int64(hc.EVICT_LAST), cutlass.Int64(hc.EVICT_FIRST))

    def consts(kernel):
        r = compile_here(kernel, *gemm_launch.Entry(type(kernel)).fake_arguments(kernel))
        return r.ptx, {int(x) for x in re.findall(r"mov\.b64\s+%rd\d+, (\d+)", r.ptx)}

    ptx, found = consts(BFirst())
    assert BFirst().l2_hints is None and {hc.EVICT_FIRST, hc.EVICT_LAST} <= found
    hinted, hinted_found = consts(hc.ClusterHopperGemm(l2_hints="b_first"))
    assert found == hinted_found and ptx.count("L2::cache_hint") == hinted.count("L2::cache_hint") > 0
