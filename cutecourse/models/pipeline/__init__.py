"""The Hopper GEMM's smem pipeline, run on the CPU, one instruction at a time.

The course's GEMM moves k-tiles of A and B into a ring of ``stages`` shared-memory buffers with
TMA and multiplies them with WGMMA. ``cutlass.pipeline.PipelineTmaAsync`` keeps producer (TMA)
and consumer (WGMMA) in step with two mbarriers per stage:

* ``full[i]``: "stage i holds data". Expected arrivals: 1 (the producer thread's
  ``arrive_and_expect_tx``) plus the *transaction bytes* TMA writes into the stage. Its phase
  completes when that one arrival has happened **and** all bytes have landed.
* ``empty[i]``: "stage i may be overwritten". Expected arrivals: one per consumer warp (the
  ``consumer_release`` of every warp that read it).

An mbarrier does not store "full" or "empty"; it stores a *phase bit* that flips each time all
expected arrivals (and bytes) are in. ``wait(i, phase)`` is PTX ``mbarrier.try_wait.parity``:
it returns once the phase with that parity has completed, i.e. once the barrier's current phase
bit differs from ``phase``. That is why a producer starts with phase 1: the empty barriers are
in phase 0, so "wait for phase 1 to have completed" returns at once: every stage starts empty.

This package reproduces that machinery in plain Python, one job per module (import the names
from here: ``from cutecourse.models import pipeline as pm``):

* ``state``: :class:`PipelineState` is ``cutlass.pipeline.PipelineState``: (count, index, phase), ``advance``
  wraps the index at ``stages`` and flips the phase; :class:`Mbarrier` is one hardware
  mbarrier: phase bit, pending arrivals, pending bytes.
* ``dsl_walk``: ``tests/test_pipeline_model.py`` checks the state against the DSL's own:
  :func:`dsl_state_walks` compiles a host-only ``@cute.jit`` function that advances the DSL's
  ``PipelineState`` and prints each step, runs it on the CPU in a fresh process, and the test
  compares those rows with :func:`model_state_walk`.
* ``model``: :class:`PipelineModel` has the four calls of ``PipelineTmaAsync`` (``producer_acquire``,
  ``producer_commit``, ``consumer_wait``, ``consumer_release``), the TMA copy and the WGMMA
  ``commit_group`` / ``wait_group``, each written as a generator that *yields* when it must block.
* ``programs``: :func:`naive`, :func:`prefetch`, :func:`compiler_pipelined` are the three mainloops of the
  course kernel, written like the kernel code; :func:`from_order` builds a loop from a list of
  step names (the exercises use it).
  :func:`simulate` runs a mainloop: it executes the program until a wait blocks, then lets the
  asynchronous engines (TMA, tensor cores) finish work in time order. A wait that no finishing
  work can satisfy is a **deadlock**.
* ``trace``: the :class:`Trace` of a run, every event with a snapshot; for a deadlock it says
  which wait, on which barrier and phase, and why nothing will ever flip it.

The kernel is *not* warp-specialized: the same warps issue the TMA loads and the WGMMAs, in
program order. So a producer that waits for a release the same warps will only issue later
waits forever, which is the deadlock every exercise here is about.
"""

from ...errors import CourseError, ShapeError  # noqa: F401 (pm.CourseError: the errors it raises)
from .dsl_walk import dsl_state_walks, model_state_walk
from .model import Block, Costs, PipelineModel
from .programs import (PROGRAMS, STEPS, VARIANTS, compiler_pipelined, from_order, naive, prefetch,
                       simulate)
from .state import Mbarrier, PipelineState, make_pipeline_state, state_from_index
from .trace import Deadlock, Event, PipelineDeadlock, Stage, Trace

__all__ = ["Block", "Costs", "Deadlock", "Event", "Mbarrier", "PROGRAMS", "PipelineDeadlock",
           "PipelineModel", "PipelineState", "STEPS", "Stage", "Trace", "VARIANTS",
           "compiler_pipelined", "dsl_state_walks", "from_order", "make_pipeline_state",
           "model_state_walk", "naive", "prefetch", "simulate", "state_from_index"]
