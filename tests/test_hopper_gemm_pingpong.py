"""The ping-pong schedule: what the compiler made of it (two warpgroups' MMA loops, the ordered
barrier, setmaxnreg, no spills), its smem plan and errors, and on an H100 correctness against
torch (tests/test_dense_gemms.py)."""

import pytest

from cutecourse.errors import ShapeError
from cutecourse.inspect import compile_report
from cutecourse.kernels import hopper_gemm_pingpong as hpp

TARGET = "cutecourse.kernels.hopper_gemm_pingpong:compile_target"


def test_plan_has_two_sets_of_c_buffers_and_five_stages():
    plan = hpp.plan_pingpong((64, 256), "float16", "float16")
    assert plan.bytes_per_stage == (64 + 256) * 64 * 2  # 40 KiB
    assert plan.epi_bytes == 2 * 2 * 64 * 32 * 2  # two warpgroups x 2 buffers of 64x32 fp16
    assert plan.stages == 5 and plan.smem_bytes <= 232448 < plan.smem_bytes + plan.bytes_per_stage


def test_four_c_buffers_per_warpgroup_cost_a_stage():
    plan = hpp.plan_pingpong((64, 256), "float16", "float16", epi_stages=4)
    assert plan.epi_bytes == 2 * 4 * 64 * 32 * 2 and plan.stages == 4
    r = compile_report(TARGET, epi_stages=4)
    assert r.spill_bytes == 0 and r.count("wgmma") == 8
    with pytest.raises(ShapeError, match="at least 2"):
        hpp.PingPongHopperGemm(epi_stages=1)
    with pytest.raises(ShapeError, match="multiple of the 3 C buffers"):
        hpp.PingPongHopperGemm(epi_stages=3)  # 8 sub-tiles of 64x32 per tile


def test_square_tile_compiles_two_m64n128_wgmmas_per_k_step():
    plan = hpp.plan_pingpong((128, 128), "float16", "float16")
    assert plan.bytes_per_stage == 32 * 1024 and plan.stages == 6
    r = compile_report(TARGET, tile=[128, 128])
    assert r.spill_bytes == 0 and r.count("setmaxnreg") == 2
    # per warpgroup and k-tile: 4 k-steps x 2 row blocks of m64n128k16; two warpgroups' copies
    assert r.count("wgmma") == 16 and "m64n256k16" not in r.ptx and "m64n128k16" in r.ptx
    assert r.count("TMA stores") == 16  # 8 sub-tiles of 64x32 per warpgroup


def test_errors():
    with pytest.raises(ShapeError, match="tile"):
        hpp.PingPongHopperGemm(tile_mn=(128, 256))  # 256 accumulator registers per thread
    with pytest.raises(ShapeError, match="stages"):
        hpp.plan_pingpong(stages=6)
    with pytest.raises(ShapeError, match="stages"):
        hpp.plan_pingpong(stages=5, epi_stages=4)


def test_cluster_pair_multicasts_b():
    r = compile_report(TARGET, cluster=[2, 1])
    assert r.count("TMA multicast loads") == 1 and r.spill_bytes == 0


def test_pdl_compiles():
    r = compile_report(TARGET, pdl=True)
    assert r.count("griddepcontrol.wait") == 1 and r.count("griddepcontrol.launch_dependents") == 1
    assert r.count("wgmma") == 8 and r.spill_bytes == 0


def test_compiles_two_alternating_warpgroups():
    r = compile_report(TARGET)
    assert r.spill_bytes == 0 and r.registers is not None
    assert r.count("setmaxnreg") == 2
    # each consumer warpgroup has its own copy of the loop: 4 m64n256k16 wgmmas per k-tile each
    assert r.count("wgmma") == 8 and r.count("TMA stores") == 16
    ptx = r.ptx
    # the ordered barrier: each warpgroup waits for its turn (256 = both warpgroups' threads) ...
    assert f"bar.sync \t{hpp.ORDER_BARRIER}, 256;" in ptx and f"bar.sync \t{hpp.ORDER_BARRIER + 1}, 256;" in ptx
    # ... and the other passes it on
    assert f"bar.arrive {hpp.ORDER_BARRIER}, 256;" in ptx and f"bar.arrive {hpp.ORDER_BARRIER + 1}, 256;" in ptx
    # the epilogues synchronise one warpgroup each, on their own barriers
    assert "bar.sync \t1, 128;" in ptx and "bar.sync \t2, 128;" in ptx


def test_follows_any_scheduler_through_the_hooks():
    """Ping-pong walks the scheduler's interface, so the dynamic scheduler works there too: both
    warpgroups read every slot the producer publishes (each takes every other item)."""
    from cutecourse.inspect import compile_here
    from cutecourse.kernels import gemm_launch, tile_scheduler

    r = compile_here(hpp.PingPongHopperGemm(scheduler=tile_scheduler.DynamicScheduler),
                     *gemm_launch.fake_persistent_arguments("float16", "float16"))
    assert r.ptx.count("atom.global.add.u32") == 2 and r.ptx.count("atom.global.exch.b32") == 2
    assert r.count("wgmma") == 8 and r.spill_bytes == 0


# (on an H100: tests/test_dense_gemms.py runs every dense GEMM, this one too, against torch)
