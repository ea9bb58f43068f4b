"""The persistent, warp-specialized Hopper GEMM: smem plan, the tile scheduler's order (a CPU model
that is the kernel's own arithmetic, checked against cutlass.utils' scheduler layout), input
errors, what the compiler made of it (wgmma, TMA, setmaxnreg, no spills), the hooks a learner
writes (a scheduler's fields, an epilogue op, L2 load policies; every order of ``SCHEDULERS`` is
compiled by tests/test_kernel_tables.py), and on an H100 a PDL chain (correctness against torch:
tests/test_dense_gemms.py).
"""

import collections
import warnings

import pytest
import torch

from cutecourse.errors import AlignmentError, CourseError, DTypeError, ShapeError
from cutecourse.inspect import compile_report
from cutecourse.kernels import hopper_gemm_persistent as hp
from cutecourse.kernels import tile_scheduler
from cutecourse.models import gemm_plan as gp
from cutecourse.models import tile_order

TARGET = "cutecourse.kernels.hopper_gemm_persistent:compile_target"


# -- shared memory --------------------------------------------------------------------------
@pytest.mark.parametrize("tile,out,stages", [((128, 256), "float16", 4), ((128, 256), "float32", 3),
                                              ((128, 128), "float16", 6), ((128, 128), "float32", 5)])
def test_plan_keeps_c_buffers_out_of_the_ring(tile, out, stages):
    plan = hp.plan_persistent(tile, "float16", out)
    assert plan.stages == stages
    assert plan.epi_bytes == 128 * 32 * gp.BYTES[out] * gp.EPI_STAGES
    assert plan.smem_bytes == plan.barrier_bytes + plan.ring_bytes + plan.epi_bytes <= gp.SMEM_CAPACITY
    assert plan.smem_bytes + plan.bytes_per_stage > gp.SMEM_CAPACITY  # one more stage would not fit


def test_plan_errors():
    with pytest.raises(ShapeError, match="stages"):
        hp.plan_persistent((128, 256), "float16", "float32", stages=4)
    with pytest.raises(ShapeError, match="tile"):
        hp.plan_persistent((64, 128))
    with pytest.raises(ShapeError, match="tile"):  # 256x128: the persistent kernel's own tile
        hp.plan_persistent((256, 128))
    assert hp.plan_persistent((256, 128), tiles=hp.PERSISTENT_TILES).stages == 4  # same 48 KiB stage
    with pytest.raises(DTypeError):
        hp.plan_persistent((128, 256), "float32")


def test_register_split_fits_the_register_file():
    # setmaxnreg: the producer warpgroup gives back, the two consumer warpgroups take
    assert hp.PRODUCER_REGISTERS % 8 == 0 and hp.CONSUMER_REGISTERS % 8 == 0
    assert 24 <= hp.PRODUCER_REGISTERS < hp.REGISTER_FILE // hp.THREADS < hp.CONSUMER_REGISTERS <= 256
    assert 128 * hp.PRODUCER_REGISTERS + hp.CONSUMER_THREADS * hp.CONSUMER_REGISTERS <= hp.REGISTER_FILE


# -- the tile scheduler ---------------------------------------------------------------------
GRIDS = [(64, 32, 132, 8), (65, 33, 132, 8), (7, 5, 132, 8), (13, 11, 4, 8), (9, 3, 5, 4),
         (1, 1, 132, 8), (3, 200, 132, 8), (200, 3, 17, 16), (10, 10, 7, 3), (8, 8, 132, 1)]


@pytest.mark.parametrize("tiles_m,tiles_n,ctas,group", GRIDS)
def test_every_tile_exactly_once(tiles_m, tiles_n, ctas, group):
    order = tile_order.tile_order(tiles_m, tiles_n, ctas, group)
    visits = collections.Counter(t for cta in order for t in cta)
    expected = {(m, n) for m in range(tiles_m) for n in range(tiles_n)}
    assert set(visits) == expected and set(visits.values()) == {1}
    assert len(order) == min(ctas, tiles_m * tiles_n)  # no idle CTA is launched
    sizes = [len(cta) for cta in order]
    assert max(sizes) - min(sizes) <= 1  # static round robin: balanced to within one tile


def test_order_walks_bands_of_group_rows():
    # the first 16 work items of a 16 x 4 grid with bands of 8: down column 0, then column 1
    first = [tile_order.band_coord(w, 16, 4, 8) for w in range(16)]
    assert first == [(m, 0) for m in range(8)] + [(m, 1) for m in range(8)]
    # the short last band of a ragged grid (10 rows: a band of 8, then one of 2)
    assert [tile_order.band_coord(w, 10, 3, 8) for w in range(24, 30)] == [(8, 0), (9, 0), (8, 1), (9, 1),
                                                                    (8, 2), (9, 2)]


def test_persistent_ctas():
    assert tile_order.persistent_ctas(2048) == 132
    assert tile_order.persistent_ctas(100) == 100
    assert tile_order.persistent_ctas(9, cluster_size=2) == 10  # whole clusters
    assert tile_order.persistent_ctas(2048, cluster_size=2) == 132


# cutlass.utils' scheduler keeps its tile order in a CuTe layout built at trace time: read its
# static shape and stride (the DSL's own arithmetic) and compare the orders on the CPU.
_CUTLASS_LAYOUTS = {}


def _cutlass_scheduler_layout(tiles_m, tiles_n, swizzle, raster_along_m):
    import cutlass.cute as cute
    import cutlass.utils as utils

    key = (tiles_m, tiles_n, swizzle, raster_along_m)

    @cute.jit
    def trace():
        params = utils.PersistentTileSchedulerParams((tiles_m, tiles_n, 1), (1, 1, 1), swizzle,
                                                     raster_along_m)
        lay = params.problem_layout_ncluster_mnl
        _CUTLASS_LAYOUTS[key] = (lay.shape, lay.stride)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the wheel copy is marked deprecated
        cute.compile(trace)
    return _CUTLASS_LAYOUTS[key]


def _flatten(t):
    return [x for e in t for x in (_flatten(e) if isinstance(e, tuple) else [e])]


def _layout_order(shape, stride):
    """Linear index -> (m, n) of a layout whose modes are (m-mode, n-mode, l): invert it by brute force."""
    import itertools

    m_shape, n_shape = (_flatten((s,)) for s in shape[:2])
    m_stride, n_stride = (_flatten((d,)) for d in stride[:2])
    order = {}
    for mc in itertools.product(*map(range, m_shape)):
        for nc in itertools.product(*map(range, n_shape)):
            m = sum(c * w for c, w in zip(mc, [1] + list(itertools.accumulate(m_shape[:-1], lambda a, b: a * b))))
            n = sum(c * w for c, w in zip(nc, [1] + list(itertools.accumulate(n_shape[:-1], lambda a, b: a * b))))
            linear = sum(c * d for c, d in zip(mc, m_stride)) + sum(c * d for c, d in zip(nc, n_stride))
            order[linear] = (m, n)
    return [order[i] for i in range(len(order))]


@pytest.mark.parametrize("tiles_m,tiles_n,group", [(16, 5, 8), (8, 3, 4), (24, 7, 8)])
def test_band_order_is_cutlass_swizzle_along_n_raster(tiles_m, tiles_n, group):
    # Ours == cutlass.utils with swizzle_size=group, raster_along_m=False when group divides tiles_m
    shape, stride = _cutlass_scheduler_layout(tiles_m, tiles_n, group, False)
    assert _layout_order(shape, stride) == [tile_order.band_coord(w, tiles_m, tiles_n, group)
                                            for w in range(tiles_m * tiles_n)]


def test_one_band_is_cutlass_plain_m_raster():
    shape, stride = _cutlass_scheduler_layout(6, 5, 1, True)
    assert _layout_order(shape, stride) == [tile_order.band_coord(w, 6, 5, 8) for w in range(30)]


def test_cutlass_swizzle_pads_ragged_grids_ours_does_not():
    # 6 x 5 tiles, bands of 4: cutlass.utils rounds 6 rows up to 8, so 40 work items for 30 tiles,
    # 10 of them outside C (TMA would clip them: wasted CTA time). The short last band avoids that.
    shape, stride = _cutlass_scheduler_layout(6, 5, 4, False)
    theirs = _layout_order(shape, stride)
    assert len(theirs) == 40 and sum(m >= 6 for m, _ in theirs) == 10
    ours = {tile_order.band_coord(w, 6, 5, 4) for w in range(30)}
    assert ours == {(m, n) for m in range(6) for n in range(5)}


# -- input errors -----------------------------------------------------------------------------
def _ab(m=256, n=256, k=128, dtype=torch.float16):
    return torch.randn(m, k).to(dtype), torch.randn(n, k).to(dtype)


def test_validation_reuses_the_gemm_checks_and_plans_its_own_smem():
    a, b = _ab(k=72)
    assert hp.validate(a, b, torch.float32).stages == 3
    with pytest.raises(DTypeError, match="float16 or bfloat16"):
        hp.validate(*_ab(dtype=torch.float32))
    with pytest.raises(AlignmentError, match="16 bytes"):
        hp.validate(*_ab(k=100))
    with pytest.raises(ShapeError, match="stages"):
        hp.validate(a, b, stages=5)
    with pytest.raises(ShapeError, match="tile"):
        hp.validate(a, b, tile=(64, 64))


def test_bad_kernel_parameters():
    with pytest.raises(ShapeError, match="cluster"):
        hp.PersistentHopperGemm(cluster_mn=(2, 2))
    with pytest.raises(ShapeError, match="tile"):
        hp.PersistentHopperGemm(tile_mn=(64, 256))
    with pytest.raises(ShapeError, match="sms"):
        hp.PersistentHopperGemm(cluster_mn=(2, 1), sms=1)
    with pytest.raises(CourseError, match="scheduler"):
        hp.PersistentHopperGemm(scheduler="greedy")
    with pytest.raises(ShapeError, match="static"):
        hp.PersistentHopperGemm(cluster_mn=(2, 1), scheduler=tile_scheduler.DynamicScheduler)

    class Tickets(tile_scheduler.StaticScheduler):  # a scheduler says itself that it serves one CTA
        PER_CTA = "tickets are taken per CTA"

    with pytest.raises(ShapeError, match="tickets are taken per CTA"):
        hp.PersistentHopperGemm(cluster_mn=(1, 2), scheduler=Tickets)
    assert hp.PersistentHopperGemm(scheduler=Tickets).Scheduler is Tickets


# -- what the compiler made -------------------------------------------------------------------
def _report(**params):
    return compile_report(TARGET, arch="sm_90a", **params)


def test_compiles_warp_specialized_without_spills():
    r = _report()
    assert r.count("wgmma") == 4  # one k-tile: 4 x m64n256k16, in the consumers' loop only
    assert r.count("TMA loads") == 2  # A and B, in the producer's loop only
    assert r.count("TMA stores") == 8  # 128x256 tile in 128x32 sub-tiles
    assert r.count("mbarrier waits") > 0
    ptx = r.ptx
    assert f"setmaxnreg.dec.sync.aligned.u32 \t{hp.PRODUCER_REGISTERS}" in ptx
    assert f"setmaxnreg.inc.sync.aligned.u32 \t{hp.CONSUMER_REGISTERS}" in ptx
    assert r.spill_bytes == 0 and not r.diagnostics("serialized")
    # at launch every thread gets the even share: 65536 / 384 = 170, rounded down to 168
    assert r.registers == 168


@pytest.mark.parametrize("params", [dict(tile=[128, 128], in_dtype="bfloat16", out_dtype="float32"),
                                    dict(tile=[128, 256], out_dtype="float32")])
def test_other_tiles_and_dtypes_compile(params):
    r = _report(**params)
    assert r.spill_bytes == 0 and r.count("setmaxnreg") == 2
    assert r.count("wgmma") == 4 and r.count("TMA loads") == 2


def test_tall_tile_gives_each_warpgroup_two_slabs():
    # 256x128, 1x2 (cuBLAS's bf16 choice): per k-tile 4 k-steps x 2 m64n128k16 per warpgroup,
    # A's 256 rows multicast across the pair along N, the same registers and no spills
    r = _report(tile=[256, 128], cluster=[1, 2], in_dtype="bfloat16", out_dtype="bfloat16")
    assert r.count("wgmma") == 8 and "m64n128k16" in r.ptx and "m64n256k16" not in r.ptx
    assert r.count("TMA multicast loads") == 1 and r.count("TMA stores") == 8
    assert r.spill_bytes == 0 and r.registers == 168


def test_dynamic_scheduler_compiles_with_a_ticket_counter():
    r = _report(scheduler="dynamic")
    ptx = r.ptx
    assert ptx.count("atom.global.add.u32") == 2  # first ticket, next ticket (producer warp, lane 0)
    assert "atom.global.acq_rel.add.u32" in ptx  # "this CTA is done", then the last one resets
    assert ptx.count("atom.global.exch.b32") == 2
    assert r.count("wgmma") == 4 and r.count("TMA loads") == 2 and r.spill_bytes == 0


def test_pdl_waits_before_the_first_load_and_releases_the_next_grid():
    assert _report().count("griddepcontrol.wait") == 0  # off by default
    r = _report(pdl=True)
    assert r.count("griddepcontrol.wait") == 1 and r.count("griddepcontrol.launch_dependents") == 1
    ptx = r.ptx
    # the producer waits for the previous grid before its first TMA load
    assert ptx.index("griddepcontrol.wait") < ptx.index("cp.async.bulk.tensor")
    assert r.count("wgmma") == 4 and r.spill_bytes == 0


def test_multicast_pair_compiles():
    r = _report(cluster=[2, 1])
    assert r.count("TMA multicast loads") == 1  # B, shared by the pair along M
    assert r.spill_bytes == 0


# -- on an H100 (correctness of every dense GEMM: tests/test_dense_gemms.py) ----------------
@pytest.mark.gpu
def test_pdl_chain_keeps_dependent_launches_correct(run_pdl_chain):
    results = run_pdl_chain("cutecourse.kernels.hopper_gemm_persistent", 2048, [
        dict(cluster=(1, 1), scheduler="static"), dict(cluster=(2, 1), scheduler="static"),
        dict(cluster=(1, 1), scheduler="dynamic")])
    assert [r[-1] for r in results] == [0, 0, 0], results


# -- the hooks a learner writes: a scheduler's fields, an epilogue op, L2 load policies -------------
def _compile_here(kernel, *extra):
    from cutecourse.inspect import compile_here
    from cutecourse.kernels import gemm_launch

    return compile_here(kernel, *gemm_launch.Entry(type(kernel)).fake_arguments(kernel, epilogue_args=extra))


def test_a_misspelt_scheduler_field_fails_where_the_scheduler_is_built():
    fields = dict(first=0, stride=1, clusters_m=3, clusters_n=2, total=6, k_tiles=1, group_m=16,
                  cluster_mn=(1, 1), in_cluster=(0, 0))
    assert tile_scheduler.StaticScheduler(**fields).group_m == 16
    with pytest.raises(TypeError, match=r"StaticScheduler: no field group_n.*Params\): first, stride"):
        tile_scheduler.StaticScheduler(**{**fields, "group_n": 4})
    with pytest.raises(TypeError, match="total missing"):
        tile_scheduler.DynamicScheduler(**{k: v for k, v in fields.items() if k != "total"})


def test_an_epilogue_op_with_a_bias_operand_runs_on_every_accumulator():
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_tensor

    from cutecourse.kernels.epilogue_op import EpilogueOp

    class BiasRelu(EpilogueOp):
        operands = ("bias",)

        def apply(self, x, m, n, bias):
            return cutlass.max(x + bias[n], cutlass.Float32(0.0))

    bias = make_fake_tensor(cutlass.Float32, (cute.sym_int(symbol="N"),), (1,), assumed_align=4)
    r = _compile_here(hp.PersistentHopperGemm(epilogue_op=BiasRelu()), bias)
    # 64x256 accumulators per warpgroup = 128 per thread: one add and one max each; one bias load
    # per distinct column the thread holds (64)
    assert r.ptx.count("add.f32") == 128 and r.ptx.count("ld.global.b32") == 64
    assert r.spill_bytes == 0 and r.count("wgmma") == 4
    plain = _compile_here(hp.PersistentHopperGemm())
    assert plain.ptx.count("ld.global.b32") == 0


def test_an_l2_hint_variant_overrides_the_load_policies_hook_alone():
    """The producer passes ``load_policies`` to each TMA load (``ClusterHopperGemm``'s hook: same
    name, same meaning), so an L2-hint variant of the persistent family (grouped, FP8 ... inherit
    the producer) is a subclass overriding that one method; the base's (None, None) sets no policy."""
    import re

    import cutlass

    from cutecourse.kernels.hopper_gemm_cluster import EVICT_FIRST, EVICT_LAST

    class AFirst(hp.PersistentHopperGemm):
        def load_policies(self):
            return (cutlass.Int64(EVICT_FIRST), cutlass.Int64(EVICT_LAST))

    def policies(report):
        return {int(x) for x in re.findall(r"mov\.b64\s+%rd\d+, (\d+)", report.ptx)}

    hinted = _compile_here(AFirst())
    assert {EVICT_FIRST, EVICT_LAST} <= policies(hinted)
    assert hinted.count("TMA loads") == 2 and "L2::cache_hint" in hinted.ptx and hinted.spill_bytes == 0
    assert not {EVICT_FIRST, EVICT_LAST} & policies(_compile_here(hp.PersistentHopperGemm()))


def test_every_persistent_kernel_loads_through_the_one_producer():
    """Ping-pong, stream-K, direct-store, grouped and both FP8 kernels inherit the producer loop,
    so the ``load_policies`` it passes is their L2 hook too, with nothing to copy."""
    import importlib

    for module in ("hopper_gemm_pingpong", "hopper_gemm_streamk", "hopper_gemm_direct_store",
                   "hopper_grouped_gemm_fp8_onepart"):
        importlib.import_module(f"cutecourse.kernels.{module}")

    def family(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from family(sub)

    names = {cls.__name__: cls for cls in family(hp.PersistentHopperGemm)}
    assert {"PingPongHopperGemm", "StreamKHopperGemm", "DirectStoreHopperGemm", "GroupedHopperGemm",
            "BlockScaledGroupedHopperGemm", "OnePartBlockScaledGroupedHopperGemm"} <= set(names)
    assert [n for n, cls in names.items() if cls._producer is not hp.PersistentHopperGemm._producer] == []
