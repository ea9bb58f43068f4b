"""The kernel-checker framework (cutecourse/exercises/kernel_check.py): learner code in a notebook
cell, compiled here and in a child process, its errors pointed at its lines, PTX facts, the CPU
pipeline model replaying it, and the child's timeout."""

import itertools
import linecache

import pytest

from cutecourse.exercises import kernel_check as kc
from cutecourse.exercises import pipeline_replay

_CELLS = itertools.count(1)

HEAD = """import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass.cute.nvgpu import warpgroup
from cutecourse.kernels import sm90
from cutecourse.kernels.hopper_gemm import HopperGemm
"""

# The naive mainloop written as a learner would, in a cell. {wait} is the wait_group depth.
NAIVE = """
class Mine(HopperGemm):
    @cute.jit
    def mainloop(self, ring, loads, mma, k_tiles, is_producer):
        for k in cutlass.range(k_tiles, unroll=1):
            stage, phase = k % self.stages, (k // self.stages) % 2
            cons = pipeline.PipelineState(self.stages, k, stage, phase)
            prod = pipeline.PipelineState(self.stages, k, stage, phase ^ 1)
            if is_producer:
                ring.producer_acquire(prod)
                self.load(ring, loads, prod)
            ring.consumer_wait(cons)
            sm90.issue_mma(mma, cons.index)
            warpgroup.wait_group({wait})
            ring.consumer_release(cons)
"""
KERNEL = "Mine(tile_mn=(128, 256))"


def cell(source: str, namespace: dict | None = None) -> dict:
    """Run ``source`` the way IPython runs a cell: its own file name, its source in linecache."""
    name = f"/tmp/ipykernel_4242/{next(_CELLS)}.py"
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    namespace = namespace if namespace is not None else {"__name__": "__main__"}
    exec(compile(source, name, "exec"), namespace)  # noqa: S102
    return namespace


def learner(source: str):
    ns = cell(HEAD)
    cell(source, ns)
    return ns["Mine"], kc.LearnerCode(ns["Mine"])


@pytest.fixture(scope="module")
def naive_report():
    _, code = learner(NAIVE.format(wait=0))
    return kc.compile_kernel(code, KERNEL, child=False)


def test_the_learners_mainloop_is_read_from_the_ptx(naive_report):
    loop = kc.mainloop(naive_report)
    names = loop.ops()
    assert kc.compact(names) == ("wait, expect_tx, tma x2, wait, fence, wgmma x4, commit, "
                                 "wait_group 0, arrive")
    assert kc.wait_group_depths(loop.lines) == [0]
    assert kc.first(names, "arrive") > kc.first(names, "wait_group")


def test_a_changed_cell_is_compiled_afresh(naive_report):
    _, code = learner(NAIVE.format(wait=1))
    report = kc.compile_kernel(code, KERNEL, child=False)
    assert kc.wait_group_depths(kc.mainloop(report).lines) == [1]
    assert kc.wait_group_depths(kc.mainloop(naive_report).lines) == [0]


def _assert_short_and_pointed(message: str, line: int, code: str):
    assert f"line {line} of your cell" in message and code in message, message
    assert "MLIR" not in message and "Traceback" not in message and len(message) < 400, message


def test_a_compile_error_names_the_learners_line():
    _, code = learner(NAIVE.format(wait="k"))
    with pytest.raises(kc.LearnerError) as err:
        kc.compile_kernel(code, KERNEL, child=False)
    _assert_short_and_pointed(str(err.value), 14, "warpgroup.wait_group(k)")
    assert "Python constant" in str(err.value)


def test_the_child_process_compiles_the_cells_source_and_maps_its_errors():
    _, code = learner(NAIVE.format(wait=0))
    source, _ = code.module_source()
    assert "from cutecourse.kernels.hopper_gemm_kernel import HopperGemm as HopperGemm" in source
    report = kc.compile_kernel(code, KERNEL, spies=("cutecourse.kernels.sm90:issue_tma",))
    assert kc.compact(kc.mainloop(report).ops()).endswith("wait_group 0, arrive")
    assert report.calls["cutecourse.kernels.sm90:issue_tma"][0]["pred"] is None
    _, bad = learner(NAIVE.format(wait=0).replace("cons.index)", "cons.indx)"))
    with pytest.raises(kc.LearnerError) as err:
        kc.compile_kernel(bad, KERNEL, child=True)
    _assert_short_and_pointed(str(err.value), 13, "cons.indx")
    assert "indx" in str(err.value)


def test_a_value_from_another_cell_that_cannot_travel_is_named():
    ns = cell(HEAD)
    cell("DEPTH = [0]  # a list: not something the child's preamble can re-create\n", ns)
    cell(NAIVE.format(wait="DEPTH[0]"), ns)
    code = kc.LearnerCode(ns["Mine"])
    assert code.missing == ["DEPTH"]
    with pytest.raises(kc.LearnerError) as err:
        kc.compile_kernel(code, KERNEL)
    assert "`DEPTH`, defined in another cell" in str(err.value), str(err.value)


def test_a_child_that_does_not_finish_is_stopped_and_called_a_hang():
    _, code = learner(NAIVE.format(wait=0))
    run = kc.run_on_gpu(code, "__import__('time').sleep(60)", timeout=3)
    assert not run.ok and "did not finish in 3 s" in run.message and "barrier" in run.message


def test_the_run_job_builds_both_kernels_from_the_cells_source():
    _, code = learner(NAIVE.format(wait=0))
    run = kc.run_on_gpu(code, KERNEL, baseline="NaiveHopperGemm(tile_mn=(128, 256))",
                        runner="cutecourse.exercises.kernel_child:compile_runner", timeout=300)
    assert run.ok and "compiled Mine and NaiveHopperGemm" in run.message, run.message
    # an error while the child runs the learner's code names the learner's line
    _, bad = learner(NAIVE.format(wait=0).replace("            ring.consumer_wait(cons)\n",
                                                  "            ring.consumer_wait(cons, 1, 2, 3)\n"))
    run = kc.run_on_gpu(bad, KERNEL, runner="cutecourse.exercises.kernel_child:compile_runner",
                        timeout=300)
    assert not run.ok and "line 12 of your cell" in run.message, run.message


def test_loops_skip_the_spin_loops_of_barrier_waits():
    ptx = """
    $L__BB0_1:
    { .reg .pred P1; LAB_WAIT:
    mbarrier.try_wait.parity.shared.b64 P1, [%r1], %r2, 10000000;
    @P1 bra.uni DONE;
    bra.uni LAB_WAIT;
    DONE: }
    wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {%r3}, %rd1, %rd2, p, 1, 1, 0, 0;
    wgmma.wait_group.sync.aligned 1;
    @%p1 bra $L__BB0_1;
    """
    found = kc.loops(ptx)
    assert [lp.label for lp in found] == ["$L__BB0_1"]
    assert found[0].ops() == ["wait", "wgmma", "wait_group 1"]


def test_the_pipeline_model_replays_the_learners_loop():
    mine, _ = learner(NAIVE.format(wait=0))
    trace = pipeline_replay.replay(mine.mainloop, stages=2, k_tiles=5)
    assert trace.deadlock is None and not trace.hazards
    # releasing before the wgmmas are done: a race the model names
    early, _ = learner(NAIVE.format(wait=0).replace(
        "            warpgroup.wait_group(0)\n            ring.consumer_release(cons)\n",
        "            ring.consumer_release(cons)\n            warpgroup.wait_group(0)\n"))
    trace = pipeline_replay.replay(early.mainloop, stages=2, k_tiles=5)
    assert trace.hazards and "still read" in trace.hazards[0]
    # no consumer_wait: the wgmma reads a stage whose bytes have not landed
    blind, _ = learner(NAIVE.format(wait=0).replace("            ring.consumer_wait(cons)\n", ""))
    trace = pipeline_replay.replay(blind.mainloop, stages=2, k_tiles=5)
    assert trace.hazards and "consumer_wait must come first" in trace.hazards[0]


@pytest.mark.gpu
def test_the_learners_kernel_runs_against_torch_in_a_child():
    _, code = learner(NAIVE.format(wait=0))
    run = kc.run_on_gpu(code, KERNEL, baseline="NaiveHopperGemm(tile_mn=(128, 256))",
                        timeout=300)
    assert run.ok, run.message
    assert "matches torch" in run.message and "the course kernel" in run.message
