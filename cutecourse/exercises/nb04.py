"""Checkers for notebook 04 (letting the compiler pipeline the mainloop).

The minimal pipeline state is checked against :func:`cutecourse.models.pipeline.state_from_index`
(tested against the DSL's own ``PipelineState``). The prefetch depth is checked on the CPU
model, and, where an H100 is present, by running the course kernel with that depth **in a
separate process with a timeout**: a pipeline that deadlocks does not crash, it hangs the GPU
forever, and a notebook kernel stuck in a launch cannot be interrupted.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from ..child import run_child
from ..ptx_loops import loop_structure
from ..models import pipeline as pm
from . import Result, answered, checker, failed, passed
from .kernel_check import KernelExercise, gemm_args, gpu_here, kernel_checker, run_on_gpu
from .learner_code import segment_of
from .pipeline_checks import TILE, hook_exercise, replay_verdict, replayed
from .pipeline_replay import replay



@checker("the minimal pipeline state from the loop index",
         hint="index = k % stages; the consumer's phase flips every `stages` iterations, "
              "starting at 0: (k // stages) % 2; the producer's is the other bit.")
def check_minimal_state(state_fn) -> Result:
    """``state_fn(k, stages) -> (index, consumer_phase, producer_phase)``."""
    title = "the minimal pipeline state from the loop index"
    tried = 0
    for stages in range(1, 9):
        for k in range(0, 5 * stages + 1):
            got = tuple(answered(state_fn(k, stages), "state_fn"))
            cons = pm.state_from_index(k, stages, "consumer")
            prod = pm.state_from_index(k, stages, "producer")
            want = (cons.index, cons.phase, prod.phase)
            tried += 1
            if got != want:
                return failed(title, f"k={k}, {stages} stages: you give (index, consumer phase, "
                              f"producer phase) = {got}; k advances from the start give {want}")
    return passed(title, f"all {tried} cases equal k calls of advance() (1 to 8 stages): "
                  "iteration k + P's state is a formula of k, carried over no iteration")


# ----------------------------------------------------------------------------------------
# Running a pipelined kernel on the GPU without risking the notebook
# ----------------------------------------------------------------------------------------
@dataclass
class GpuRun:
    status: str  # "ok", "error" or "hang"
    output: str


def run_isolated(code: str, timeout: float = 120.0) -> GpuRun:
    """Run ``code`` in a fresh Python process; ``hang`` if it is still running after ``timeout`` s.

    The process is killed on timeout (a deadlocked kernel holds its GPU context until then; the
    notebook's own process and GPU context are never touched).
    """
    run = run_child(None, source=code, timeout=timeout)
    if run.hang:
        return GpuRun("hang", run.stdout)
    return GpuRun("ok" if run.ok else "error", run.log)


_GEMM_RUN = textwrap.dedent("""
    import cutecourse, torch
    from cutecourse.kernels import hopper_gemm as hg
    torch.manual_seed(0)
    m, n, k = {m}, {n}, {k}
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16)
    c = hg.gemm(a, b, variant="compiler", prefetch_stages={p}, stages={stages})
    torch.cuda.synchronize()
    err = (c.float() - a.float() @ b.float().T).abs().max().item()
    print("max_abs_err", err)
    assert err < 0.5, err
""")


def run_compiler_variant(prefetch_stages: int, stages: int, shape=(256, 256, 2048),
                         timeout: float = 120.0) -> GpuRun:
    """The course kernel's compiler-pipelined variant on the GPU, isolated (see :func:`run_isolated`)."""
    m, n, k = shape
    return run_isolated(_GEMM_RUN.format(m=m, n=n, k=k, p=prefetch_stages, stages=stages), timeout)


def _hang_explanation(p: int, stages: int) -> str:
    t = pm.simulate("compiler", stages, 3 * stages + 2, p)
    if t.deadlock:
        d = t.deadlock
        return (f"Likely cause, as the CPU model shows: {d.op} waits on {d.barrier} for phase "
                f"{d.parity}, a phase that never completes, so its bit never flips. {d.explanation}")
    return ("The CPU model does not deadlock with this depth; look for a wait on a phase that "
            "never flips (a missing release or a phase bit computed wrongly).")


@checker("the deepest prefetch_stages that cannot deadlock",
         hint="iteration k loads k-tile k+P into stage (k+P) % stages before it reads k-tile k; "
              "that stage last held k-tile k+P-stages, which must already be released.")
def check_prefetch_stages(p, stages: int = 4, on_gpu: bool | None = None,
                          timeout: float = 120.0) -> Result:
    """``p``: your ``prefetch_stages`` for a ring of ``stages``.

    On the CPU the pipeline model runs it (and ``p + 1``). With ``on_gpu`` (default: when an
    H100 is present) the course kernel also runs with ``p`` in a subprocess with a timeout.
    """
    title = "the deepest prefetch_stages that cannot deadlock"
    p = answered(p, "p")
    if not isinstance(p, int) or p < 0:
        return failed(title, f"prefetch_stages must be a non-negative integer, not {p!r}")
    k_tiles = 3 * stages + 2
    mine = pm.simulate("compiler", stages, k_tiles, p)
    if mine.deadlock:
        d = mine.deadlock
        return failed(title, f"prefetch_stages={p} with {stages} stages hangs ({k_tiles} k-tiles, "
                      f"CPU model): {d.op} waits on {d.barrier} for phase {d.parity}.\n{d.explanation}")
    deeper = pm.simulate("compiler", stages, k_tiles, p + 1)
    if not deeper.deadlock:
        return failed(title, f"prefetch_stages={p} works, but {p + 1} works too: it is not the "
                      "deepest", "more k-tiles in flight hide more TMA latency")
    message = (f"prefetch_stages={p} runs on the CPU model with {stages} stages; {p + 1} deadlocks "
               f"({deeper.deadlock.op} on {deeper.deadlock.barrier}).")
    if on_gpu is None:
        from ..modes import mode_for

        on_gpu = mode_for("sm_90a").run
    if on_gpu:
        run = run_compiler_variant(p, stages, timeout=timeout)
        if run.status == "hang":
            return failed(title, f"the kernel with prefetch_stages={p} did not finish in "
                          f"{timeout:.0f} s (killed): a hang. {_hang_explanation(p, stages)}")
        if run.status == "error":
            last = (run.output.strip().splitlines() or ["no output"])[-1]
            return failed(title, f"the kernel with prefetch_stages={p} failed: {last}")
        message += " On this GPU the kernel ran with it and matched torch."
    else:
        message += " (Not run here: no H100; on one, the kernel runs with it in a child process.)"
    return passed(title, message)


# ----------------------------------------------------------------------------------------
# Kernel exercises: the learner writes the compiler-pipelined mainloop of the course kernel
# ----------------------------------------------------------------------------------------
# Each is a KernelExercise (kernel_check): the compiler's own diagnostic and the shape of the loop
# it generated (ptx_loops.loop_structure, the reading the lesson uses) prove whether
# it pipelined; the learner's loop replayed on the CPU pipeline model (pipeline_checks).
METHOD = "mainloop"
ISSUE_TMA = "cutecourse.kernels.sm90:issue_tma"


def _crash_objection(attempt) -> str | None:
    """The pipeliner has been seen to crash on a loop whose copy has no barrier armed for it; the
    CPU model usually names the mistake."""
    return _state_mismatch(attempt.answer) or replay_verdict(attempt.answer, method=METHOD)


def _skipped(report) -> str | None:
    lines = [ln.strip() for ln in report.diagnostics("pipelin") if "skipped" in ln]
    if not lines:
        return None
    text = lines[0][lines[0].find("software"):] if "software" in lines[0] else lines[0]
    return text.split(";")[0][:240]  # the reason, without the compiler's "compiled as written"


def pipelined_exercise(title: str, hint: str, objections, passes) -> KernelExercise:
    """A rewrite of the compiler-pipelined mainloop: compiled with the TMA loads it issues
    recorded (their pred=), the CPU model asked first when the pipeliner crashes."""
    return hook_exercise(title, hint, "compiler", spies=(ISSUE_TMA,), crash=(_crash_objection,),
                         objections=objections, passes=passes)


EX3 = ("Exercise 3 (kernel): a loop the compiler pipelines",
       "the pipeliner splits the loop body at a TMA copy paired with a wait on the same mbarrier, "
       "and does not look inside an `if`: issue the copies at the top level of the body, "
       "predicated (pred=) so only warp 0 issues them; keep producer_acquire under the `if`.")


def _not_pipelined(attempt) -> str | None:
    skipped = _skipped(attempt.report)
    if skipped:
        return (f"the compiler did not pipeline your loop. It says: \"{skipped}\". "
                "A TMA copy inside `if is_producer` is invisible to the pipeliner: move "
                "self.load(...) out of the `if`, with pred= a predicate tensor that is "
                "True in warp 0 only")
    return None


def _no_pred(attempt) -> bool:
    calls = attempt.report.calls[ISSUE_TMA]
    return bool(calls) and any(kw.get("pred") is None for kw in calls)


def _loop_shape(attempt) -> str | None:
    attempt.notes["shape"] = shape = loop_structure(attempt.report.ptx)
    if shape.pipelined:
        return None
    kept = "prefetch_stages" in segment_of(attempt.answer.mainloop).text
    return (f"the generated code is not pipelined ({shape}): expected TMA loads "
            "before the MMA loop and a loop with both loads and wgmmas. "
            + ("Your loop still has prefetch_stages=; the copy must be the loop body's "
               "own top-level self.load(..., pred=...), paired with the consumer_wait "
               "on the same stage" if kept else
               "Keep prefetch_stages=self.prefetch in cutlass.range: it asks for the "
               "pipelining"))


PIPELINED = pipelined_exercise(
    *EX3, objections=(
        _not_pipelined,
        (_no_pred, "your loop issues the TMA copies with no pred=: every warp would issue "
         "them (8 copies of each k-tile, 8x the bytes the full barrier expects). "
         "Pass pred= a one-element Boolean register tensor set to is_producer"),
        replayed(METHOD), _loop_shape),
    passes=lambda a: (f"no 'pipelining skipped' diagnostic, and the compiler wrote a pipelined loop: "
                      f"{a.notes['shape']}. On the CPU model your loop acquires, loads, waits and "
                      "releases the same stages as the course's at every step, only warp 0 loads, "
                      "and nothing hangs or races."))


@PIPELINED.checker
def check_pipelined(cls) -> Result:
    """``cls``: your subclass of ``CompilerParts`` with its ``mainloop`` rewritten."""
    return PIPELINED.check(cls)


EX4 = ("Exercise 4 (kernel): the pipeline state from the loop index",
       "stage = k % stages, consumer phase = (k // stages) % 2, producer phase = the other bit "
       "(the empty barriers start in the phase that reads as 'free'); "
       "pipeline.PipelineState(stages, count, index, phase).")


def _state_mismatch(cls, stages: int = 4, k_tiles: int = 10) -> str | None:
    """The first state the learner's loop computes that k calls of advance() would not give.

    Phases are compared modulo 2: the barrier wait reads only the parity."""
    t = replay(cls, stages=stages, k_tiles=k_tiles, method=METHOD)
    for who, seen, user in (("consumer", t.wait_states, "consumer"),
                            ("producer", t.acquire_states, "producer")):
        for k, got in enumerate(seen):
            want = pm.state_from_index(k, stages, user).as_tuple()
            if got[:2] != want[:2] or got[2] % 2 != want[2]:
                other = pm.state_from_index(k, stages, "producer" if user == "consumer" else "consumer")
                swapped = (got[:2] == other.as_tuple()[:2] and got[2] % 2 == other.phase and
                           other.phase != want[2])
                return (f"with {stages} stages, at k = {k} your {who} state (count, index, phase) "
                        f"is {got}; advancing a fresh state {k} time(s) gives {want}."
                        + (f" That is the {'producer' if user == 'consumer' else 'consumer'}'s "
                           "state at this k: the two phases are opposite bits (are they the same "
                           "in your code, or returned as (prod, cons)?)" if swapped else ""))
    return None


def _wrong_states(attempt) -> str | None:
    objection = (_state_mismatch(attempt.answer)
                 or replay_verdict(attempt.answer, method=METHOD, code=attempt.code))
    if objection:
        return objection + (" Check your state for k-tile k: stage k % stages, a phase that flips "
                            "each time k wraps around the ring, the producer's the other bit.")
    return None


def _states_pipelined(attempt) -> str | None:
    skipped = _skipped(attempt.report)
    if skipped:
        return (f"the compiler did not pipeline the loop: \"{skipped}\". Keep the given "
                "loop as it is and make `states` a formula of k alone, as the exercise "
                "asks; the quoted words say what the compiler objected to")
    attempt.notes["shape"] = shape = loop_structure(attempt.report.ptx)
    if not shape.pipelined:
        return (f"your states are right on the CPU model, but the generated code is "
                f"not pipelined ({shape})")
    return None


STATES = pipelined_exercise(
    *EX4, objections=(_wrong_states, _states_pipelined),
    passes=lambda a: (f"the loop compiles and is pipelined (no diagnostic; loops "
                      f"{', '.join(a.notes['shape'].kinds())}). On the CPU model your states equal "
                      "k calls of advance() for every k (10 k-tiles, 4 stages), and the loop waits, "
                      "loads and releases the same stages as the course's on every ring size tried, "
                      "with no hang or race."))


@STATES.checker
def check_state_in_kernel(cls) -> Result:
    """``cls``: your subclass of ``CompilerParts`` whose ``states(k)`` returns (cons, prod)."""
    return STATES.check(cls)


EX5 = ("Exercise 5 (lab): how deep to prefetch",
       "iteration k loads k-tile k + P into stage (k + P) % stages; it is free only if k-tile "
       "k + P - stages was released, at the end of an earlier iteration.")


@kernel_checker(*EX5)
def check_prefetch_lab(p, hangs, stages: int = 4) -> Result:
    """Your ``prefetch_stages`` ``p`` and your prediction ``hangs`` (True/False) for a ring of
    ``stages``: checked on the CPU model; the kernel compiled with it (diagnostic, loop shape,
    registers) beside the course's default; on an H100 run and timed in a child with a timeout."""
    from ..inspect import compile_here
    from ..kernels.hopper_gemm import CompilerHopperGemm

    title = EX5[0]
    p, hangs = answered(p, "p"), answered(hangs, "hangs")
    if isinstance(p, bool) or not isinstance(p, int) or not 1 <= p <= 2 * stages:
        return failed(title, f"P = {p!r}: prefetch_stages is a whole number of k-tiles to load "
                      f"ahead, from 1 to {2 * stages} here (the ring has {stages} stages)")
    if not isinstance(hangs, bool):
        return failed(title, f"hangs = {hangs!r}: predict True (the kernel hangs with your P) or "
                      "False (it runs)")
    truth = pm.simulate("compiler", stages, 3 * stages + 2, p).deadlock
    if bool(hangs) != bool(truth):
        return failed(title, f"you predict prefetch_stages={p} {'hangs' if hangs else 'runs'}; the "
                      f"CPU model {'hangs: ' + truth.op + ' on ' + truth.barrier if truth else 'runs it'}"
                      + (f". {truth.explanation}" if truth else ": iteration k loads into the stage "
                         f"k-tile k + {p} - {stages} used, released in an earlier iteration"))
    verdict = (f"right: prefetch_stages={p} deadlocks (CPU model, {stages} stages): {truth.op} waits "
               f"on {truth.barrier} for phase {truth.parity} forever. {truth.explanation} "
               if truth else f"right: prefetch_stages={p} runs without a hang on the CPU model "
               f"({stages} stages, {3 * stages + 2} k-tiles). ")
    default = max(1, stages - 2)
    rows = []
    for depth in dict.fromkeys((p, default)):
        rep = compile_here(CompilerHopperGemm(tile_mn=TILE, prefetch_stages=depth, stages=stages),
                           *gemm_args(None), name=f"P={depth}")
        shape = loop_structure(rep.ptx)
        rows.append(f"P={depth}: {rep.registers} registers, loops {', '.join(shape.kinds())} "
                    f"({shape.prologue_tma_loads} TMA load instructions before the MMA loop, "
                    "run P times)")
    message = verdict + "Compiled: " + "; ".join(rows) + "."
    if gpu_here("sm_90a"):
        run = run_on_gpu(None, f"CompilerHopperGemm(tile_mn={TILE}, prefetch_stages={p}, stages={stages})",
                         baseline=f"CompilerHopperGemm(tile_mn={TILE}, stages={stages})",
                         timeout=60)
        message += " On the GPU: " + run.message
    else:
        message += (" Nothing was run or timed (no H100 here): on one, the kernel with your P "
                    "runs in a child process with a time limit (a hang is a message), against "
                    "torch, timed beside the default depth.")
    return passed(title, message)
