"""Checkers for notebook 04 (letting the compiler pipeline the mainloop).

The minimal pipeline state is checked against :func:`cutecourse.models.pipeline.state_from_index`
(tested against the DSL's own ``PipelineState``). The prefetch depth is checked on the CPU
model, and, where an H100 is present, by running the course kernel with that depth **in a
separate process with a timeout**: a pipeline that deadlocks does not crash, it hangs the GPU
forever, and a notebook kernel stuck in a launch cannot be interrupted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass

from ..models import pipeline as pm
from . import Result, answered, checker, failed, passed



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
    return passed(title, f"all {tried} cases equal k calls of advance() (1 to 8 stages): no "
                  "state carried from one iteration to the next, so the compiler may overlap them")


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
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=timeout, env=dict(os.environ))
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return GpuRun("hang", out)
    status = "ok" if proc.returncode == 0 else "error"
    return GpuRun(status, proc.stdout + proc.stderr)


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
    return passed(title, message)
