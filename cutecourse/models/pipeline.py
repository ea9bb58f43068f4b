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

This module reproduces that machinery in plain Python:

* :class:`PipelineState` is ``cutlass.pipeline.PipelineState``: (count, index, phase), ``advance``
  wraps the index at ``stages`` and flips the phase. ``tests/test_pipeline_model.py`` checks it
  against the DSL's own state: :func:`dsl_state_walks` compiles a host-only ``@cute.jit``
  function that advances the DSL's ``PipelineState`` and prints each step, runs it on the CPU in
  a fresh process, and the test compares those rows with :func:`model_state_walk`.
* :class:`Mbarrier` is one hardware mbarrier: phase bit, pending arrivals, pending bytes.
* :class:`PipelineModel` has the four calls of ``PipelineTmaAsync`` (``producer_acquire``,
  ``producer_commit``, ``consumer_wait``, ``consumer_release``), the TMA copy and the WGMMA
  ``commit_group`` / ``wait_group``, each written as a generator that *yields* when it must block.
* :func:`naive`, :func:`prefetch`, :func:`compiler_pipelined` are the three mainloops of the
  course kernel, written like the kernel code; :func:`from_order` builds a loop from a list of
  step names (the exercises use it).
* :func:`simulate` runs a mainloop: it executes the program until a wait blocks, then lets the
  asynchronous engines (TMA, tensor cores) finish work in time order. A wait that no finishing
  work can satisfy is a **deadlock**; the trace says which wait, on which barrier and phase, and
  why nothing will ever flip it.

The kernel is *not* warp-specialized: the same warps issue the TMA loads and the WGMMAs, in
program order. So a producer that waits for a release the same warps will only issue later
waits forever, which is the deadlock every exercise here is about.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field
from typing import Callable, Iterator

from ..errors import CourseError, ShapeError

VARIANTS = ("naive", "prefetch", "compiler")


class PipelineDeadlock(CourseError, RuntimeError):
    """A wait that can never complete: no arrival or byte that could flip its barrier is coming."""


# ----------------------------------------------------------------------------------------
# Pipeline state: the (count, index, phase) triple the kernel carries
# ----------------------------------------------------------------------------------------
@dataclass
class PipelineState:
    """CPU twin of ``cutlass.pipeline.PipelineState``.

    ``count``: how many k-tiles this side has handled (the k-tile to load or read next);
    ``index``: the smem stage that k-tile lives in (``count % stages``);
    ``phase``: which parity of the stage's barrier to wait on; it flips each time ``index``
    wraps from ``stages - 1`` back to 0, because then the barrier has gone round once more.
    """

    stages: int
    count: int = 0
    index: int = 0
    phase: int = 0

    def advance(self, n: int = 1) -> None:
        """Move on ``n`` k-tiles, as the DSL's ``advance(n)`` does."""
        if n < 1:
            raise ShapeError(f"advance({n}): a pipeline state only moves forward",
                             "advance by 1 (or more) k-tiles")
        self.count += n
        self.index += n
        self.phase ^= (self.index // self.stages) % 2
        self.index %= self.stages

    def clone(self) -> "PipelineState":
        return PipelineState(self.stages, self.count, self.index, self.phase)

    def as_tuple(self) -> tuple[int, int, int]:
        return (self.count, self.index, self.phase)


def make_pipeline_state(user: str, stages: int) -> PipelineState:
    """``cutlass.pipeline.make_pipeline_state``: producers start at phase 1, consumers at 0."""
    _check_positive("stages", stages)
    if user not in ("producer", "consumer"):
        raise CourseError(f"user must be 'producer' or 'consumer', not {user!r}",
                          "the producer fills stages (TMA), the consumer reads them (WGMMA)")
    return PipelineState(stages, 0, 0, 1 if user == "producer" else 0)


def state_from_index(k: int, stages: int, user: str = "consumer") -> PipelineState:
    """The minimal state the compiler-pipelined loop computes from the loop index alone.

    After ``k`` advances from the start a state is at ``index = k % stages`` and its phase has
    flipped ``k // stages`` times, so ``phase = (k // stages) % 2`` for the consumer and the
    opposite bit for the producer. No carried state means no loop-carried dependence between
    iterations, which is what lets the compiler reorder them.
    """
    start = 1 if user == "producer" else 0
    return PipelineState(stages, k, k % stages, start ^ ((k // stages) % 2))


# ----------------------------------------------------------------------------------------
# One mbarrier
# ----------------------------------------------------------------------------------------
@dataclass
class Mbarrier:
    """One hardware mbarrier in shared memory.

    ``phase`` is the parity of the phase in progress; ``pending`` the arrivals it still needs;
    ``tx`` the transaction bytes it still expects (may go negative for a moment in hardware when
    bytes land before the expect; the phase only completes when both reach 0).
    """

    name: str
    expected: int
    phase: int = 0
    pending: int = 0
    tx: int = 0
    completed: int = 0  # phases completed so far

    def __post_init__(self):
        self.pending = self.expected

    def arrive(self, count: int = 1, expect_tx: int = 0) -> bool:
        """``mbarrier.arrive`` (with ``expect_tx`` bytes): returns True if a phase completed."""
        self.tx += expect_tx
        self.pending -= count
        return self._maybe_complete()

    def complete_tx(self, nbytes: int) -> bool:
        """TMA's ``complete_tx``: bytes have landed in smem."""
        self.tx -= nbytes
        return self._maybe_complete()

    def _maybe_complete(self) -> bool:
        if self.pending <= 0 and self.tx == 0:
            self.phase ^= 1
            self.completed += 1
            self.pending = self.expected
            return True
        return False

    def test_wait(self, parity: int) -> bool:
        """``mbarrier.try_wait.parity``: has the phase with this parity completed?"""
        return self.phase != parity


# ----------------------------------------------------------------------------------------
# Blocking conditions the program yields to the simulator
# ----------------------------------------------------------------------------------------
@dataclass
class Block:
    """A wait the program is stuck on until ``ready()``; ``what`` names it for the trace."""

    what: str
    ready: Callable[[], bool]
    barrier: Mbarrier | None = None
    parity: int | None = None
    kind: str = ""  # "empty", "full" or "wgmma"


# ----------------------------------------------------------------------------------------
# The pipeline and the asynchronous engines
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Costs:
    """Durations for the simulator's clock, in nanoseconds (or any unit: only ratios matter).

    ``tma_latency``: issue of a TMA load to its first byte in smem; ``tma_bytes_per_ns``: the
    bandwidth this CTA gets (HBM bandwidth / CTAs sharing it); ``mma_time``: tensor-core time
    for one k-tile; ``issue``: cost of issuing one instruction (keeps the order visible);
    ``release_skew``: how much later than the others the slowest consumer warp arrives on an
    empty barrier (warps are not in lockstep; 0 = all release together).
    With the defaults every step takes one unit, which is all the state machine needs.
    """

    tma_latency: float = 1.0
    tma_bytes_per_ns: float = float("inf")
    mma_time: float = 1.0
    issue: float = 0.0
    release_skew: float = 0.0


@dataclass
class Stage:
    tile: int | None = None  # the k-tile in this buffer (or arriving into it)
    status: str = "empty"  # empty | loading | full | consuming | consumed


@dataclass
class Event:
    """One thing that happened, with a snapshot of everything after it."""

    time: float
    actor: str  # "program", "TMA", "WGMMA"
    op: str  # producer_acquire, tma_load, consumer_wait, ...
    k_tile: int | None
    text: str
    stages: list[Stage]
    full: list[Mbarrier]
    empty: list[Mbarrier]
    producer: tuple[int, int, int] | None
    consumer: tuple[int, int, int] | None
    waiting_on: str | None = None


@dataclass
class Deadlock:
    op: str
    barrier: str
    parity: int | None
    explanation: str


@dataclass
class Trace:
    variant: str
    stages: int
    k_tiles: int
    prefetch: int
    events: list[Event] = field(default_factory=list)
    deadlock: Deadlock | None = None
    hazards: list[str] = field(default_factory=list)  # data races: reads before landing, early release
    mma_spans: list[tuple[int, float, float]] = field(default_factory=list)  # (k, start, end)
    tma_spans: list[tuple[int, float, float]] = field(default_factory=list)  # (k, issue, landed)

    @property
    def time(self) -> float:
        """When the last k-tile's WGMMA finished: the mainloop's duration."""
        return max((end for _, _, end in self.mma_spans), default=0.0)

    def ops(self, actor: str = "program") -> list[tuple[str, int | None]]:
        """(op, k-tile) for every event of one actor, in order."""
        return [(e.op, e.k_tile) for e in self.events if e.actor == actor]

    def max_loads_in_flight(self) -> int:
        """Most k-tiles loaded or loading but not yet read at any moment: the real prefetch."""
        return max((sum(s.status in ("loading", "full") for s in e.stages) for e in self.events),
                   default=0)

    def check(self) -> "Trace":
        """Raise :class:`PipelineDeadlock` if the run deadlocked, else return self.

        (Hazards, in ``hazards``, are races the hardware would not stop: wrong results, no hang.)
        """
        if self.deadlock:
            d = self.deadlock
            on = f"{d.barrier}, phase {d.parity}" if d.parity is not None else d.barrier
            raise PipelineDeadlock(f"{self.variant}: {d.op} never returns (waits on {on})",
                                   d.explanation)
        return self

    def table(self, last: int | None = None) -> str:
        """The events as text, one line each (time, actor, what, states after it)."""
        rows = self.events if last is None else self.events[-last:]
        lines = [f"{'t':>6}  {'who':<8}{'what':<44}{'producer':>12}{'consumer':>12}"]
        for e in rows:
            p = "-" if e.producer is None else "(%d,%d,%d)" % e.producer
            c = "-" if e.consumer is None else "(%d,%d,%d)" % e.consumer
            lines.append(f"{e.time:>6.0f}  {e.actor:<8}{e.text[:44]:<44}{p:>12}{c:>12}")
        if self.deadlock:
            lines.append(f"DEADLOCK: {self.deadlock.op} on {self.deadlock.barrier}")
        return "\n".join(lines)


class PipelineModel:
    """``PipelineTmaAsync`` plus the TMA and WGMMA engines, on a simulated clock.

    ``tx_bytes``: bytes one stage receives (A tile + B tile), the full barrier's transaction
    count: 49152 for the course kernel's 128x256x64 fp16 tile ((128 + 256) * 64 * 2).
    ``consumer_arrivals``: arrivals the empty barrier expects per release, one per consumer
    warp: the course kernel's two warpgroups are 8 warps.
    """

    def __init__(self, stages: int, tx_bytes: int = 49152, consumer_arrivals: int = 8,
                 costs: Costs = Costs()):
        _check_positive("stages", stages)
        _check_positive("tx_bytes", tx_bytes)
        _check_positive("consumer_arrivals", consumer_arrivals)
        self.stages = stages
        self.tx_bytes = tx_bytes
        self.consumer_arrivals = consumer_arrivals
        self.costs = costs
        self.full = [Mbarrier(f"full[{i}]", expected=1) for i in range(stages)]
        self.empty = [Mbarrier(f"empty[{i}]", expected=consumer_arrivals) for i in range(stages)]
        self.smem = [Stage() for _ in range(stages)]
        self.now = 0.0
        self._async: list[tuple[float, int, str, Callable[[], None]]] = []  # (time, seq, what, fn)
        self._seq = 0
        self._tma_pipe_free = 0.0
        self._tc_free = 0.0
        self.wgmma_in_flight = 0  # committed WGMMA groups not finished yet
        self._pending_mma: list[int] = []  # k-tiles whose wgmma is issued but not committed
        self.trace: Trace | None = None
        self.producer: PipelineState | None = None  # shown in snapshots
        self.consumer: PipelineState | None = None

    # -- the four pipeline calls ----------------------------------------------------------
    def producer_acquire(self, state: PipelineState) -> Iterator[Block]:
        """Wait until stage ``state.index`` is empty, then arm its full barrier.

        Arming is ``arrive_and_expect_tx(tx_bytes)`` on ``full[index]``: the one producer
        arrival, and the bytes the TMA copies will deliver. The barrier's phase completes only
        when those bytes have landed.
        """
        bar = self.empty[state.index]
        yield Block(f"producer_acquire waits on {bar.name} for phase {state.phase}",
                    lambda: bar.test_wait(state.phase), bar, state.phase, "empty")
        self.full[state.index].arrive(1, expect_tx=self.tx_bytes)
        s = self.smem[state.index]
        s.tile, s.status = state.count, "loading"
        self._log("producer_acquire", state.count,
                  f"acquire stage {state.index}: expect {self.tx_bytes} B on full[{state.index}]")

    def tma_load(self, state: PipelineState) -> None:
        """``cute.copy(tma_atom, gmem k-tile, smem stage, tma_bar_ptr=full[index])``.

        Asynchronous: the copy is issued now and its bytes land later, each landing counted
        off the full barrier's transaction bytes (``complete_tx``).
        """
        k, idx = state.count, state.index
        c = self.costs
        transfer = self.tx_bytes / c.tma_bytes_per_ns
        issued = self.now
        # Bytes start arriving after the latency and share this CTA's slice of bandwidth with
        # the loads issued before: they stream one after another through the same pipe.
        start = max(issued + c.tma_latency, self._tma_pipe_free)
        done = start + transfer
        self._tma_pipe_free = done

        def land():
            self.full[idx].complete_tx(self.tx_bytes)
            if self.smem[idx].tile == k:
                self.smem[idx].status = "full"
            if self.trace is not None:
                self.trace.tma_spans.append((k, issued, done))
            self._log("tma_landed", k, f"k-tile {k}: {self.tx_bytes} B landed in stage {idx}",
                      actor="TMA")

        self._schedule(done, f"TMA k-tile {k}", land)
        self._log("tma_load", k, f"issue TMA loads of k-tile {k} into stage {idx}")

    def producer_commit(self, state: PipelineState) -> None:
        """A no-op for TMA: the copy itself reports its bytes to the full barrier."""
        self._log("producer_commit", state.count, "producer_commit (no-op: TMA counts bytes)")

    def consumer_try_wait(self, state: PipelineState) -> bool:
        """Peek without blocking: has ``full[index]`` completed phase ``state.phase`` yet?

        The kernel issues the peek early (e.g. right after the previous k-tile's WGMMAs) and
        passes the answer to ``consumer_wait`` as its token: if it was already true, the wait
        is skipped, so the barrier's latency overlaps other work.
        """
        ready = self.full[state.index].test_wait(state.phase)
        self._log("consumer_try_wait", state.count,
                  f"peek full[{state.index}] phase {state.phase}: {'ready' if ready else 'not yet'}")
        return ready

    def consumer_wait(self, state: PipelineState, token: bool | None = None) -> Iterator[Block]:
        """Wait until stage ``state.index``'s full barrier completes phase ``state.phase``.

        ``token``: the result of an earlier :meth:`consumer_try_wait`; True skips the wait.
        """
        bar = self.full[state.index]
        if token:
            self._log("consumer_wait", state.count, f"k-tile {state.count} ready (peeked earlier)")
            return
        yield Block(f"consumer_wait waits on {bar.name} for phase {state.phase}",
                    lambda: bar.test_wait(state.phase), bar, state.phase, "full")
        self._log("consumer_wait", state.count, f"k-tile {state.count} ready in stage {state.index}")

    def consumer_release(self, state: PipelineState) -> None:
        """Every consumer warp arrives on ``empty[index]``: the stage may be overwritten."""
        s = self.smem[state.index]
        if s.status == "consuming":
            self._hazard(f"consumer_release of k-tile {state.count} while its WGMMAs still read "
                         f"stage {state.index}: the next TMA load may overwrite operands in use "
                         f"(wait_group first)")
        if s.tile == state.count and s.status in ("consumed", "consuming", "full"):
            s.status = "empty"
        skew = self.costs.release_skew
        if skew > 0 and self.consumer_arrivals > 1:
            # All warps but the slowest arrive now; the stage is free only when it does too.
            self.empty[state.index].arrive(self.consumer_arrivals - 1)
            bar = self.empty[state.index]
            self._schedule(self.now + skew, f"last release of k-tile {state.count}",
                           lambda: bar.arrive(1))
        else:
            self.empty[state.index].arrive(self.consumer_arrivals)
        self._log("consumer_release", state.count,
                  f"release stage {state.index} ({self.consumer_arrivals} arrivals on empty[{state.index}])")

    # -- WGMMA ------------------------------------------------------------------------------
    def wgmma(self, state: PipelineState) -> None:
        """``warpgroup.fence()`` then the WGMMAs of one k-tile, reading stage ``index``."""
        s = self.smem[state.index]
        if s.tile != state.count or s.status != "full":
            what = "nothing" if s.tile is None else f"k-tile {s.tile} ({s.status})"
            self._hazard(f"WGMMA of k-tile {state.count} reads stage {state.index}, which holds "
                         f"{what}: consumer_wait must come first")
        self._pending_mma.append(state.count)
        s.status = "consuming"
        self._log("wgmma", state.count, f"fence + wgmma on stage {state.index} (k-tile {state.count})")

    def commit_group(self) -> None:
        """``warpgroup.commit_group()``: the issued WGMMAs become one group the tensor cores run."""
        c = self.costs
        for k in self._pending_mma:
            start = max(self.now, self._tc_free)
            end = start + c.mma_time
            self._tc_free = end
            self.wgmma_in_flight += 1
            if self.trace is not None:
                self.trace.mma_spans.append((k, start, end))
            stage = k % self.stages

            def finish(k=k, stage=stage):
                self.wgmma_in_flight -= 1
                if self.smem[stage].tile == k and self.smem[stage].status == "consuming":
                    self.smem[stage].status = "consumed"
                self._log("wgmma_done", k, f"WGMMA of k-tile {k} finished", actor="WGMMA")

            self._schedule(end, f"WGMMA k-tile {k}", finish)
        self._pending_mma.clear()
        self._log("commit_group", None, "commit_group")

    def wait_group(self, n: int) -> Iterator[Block]:
        """``warpgroup.wait_group(n)``: block until at most ``n`` committed groups are unfinished."""
        yield Block(f"wait_group({n})",
                    lambda: self.wgmma_in_flight <= n, kind="wgmma")
        self._log("wait_group", None, f"wait_group({n}) returned")

    # -- engine -----------------------------------------------------------------------------
    def _hazard(self, text: str) -> None:
        if self.trace is not None:
            self.trace.hazards.append(text)
    def _schedule(self, t: float, what: str, fn: Callable[[], None]) -> None:
        self._seq += 1
        self._async.append((t, self._seq, what, fn))
        self._async.sort(key=lambda x: (x[0], x[1]))

    def _log(self, op: str, k: int | None, text: str, actor: str = "program",
             waiting: str | None = None) -> None:
        if self.trace is None:
            return
        self.trace.events.append(Event(
            self.now, actor, op, k, text, copy.deepcopy(self.smem),
            [copy.copy(b) for b in self.full], [copy.copy(b) for b in self.empty],
            self.producer.as_tuple() if self.producer else None,
            self.consumer.as_tuple() if self.consumer else None, waiting))

    def run(self, program: Iterator[Block], trace: Trace) -> Trace:
        """Execute ``program``; on each blocking wait, let async work finish until it can go on."""
        self.trace = trace
        for block in program:
            self._drain()
            logged = False
            while not block.ready():
                if not self._async:
                    where = block.barrier.name if block.barrier else "the committed WGMMA groups"
                    trace.deadlock = Deadlock(block.what.split(" waits")[0], where,
                                              block.parity, self._explain(block))
                    self._log("deadlock", None, f"DEADLOCK: {block.what}", waiting=block.what)
                    return trace
                if not logged:
                    self._log("blocked", None, f"{block.what} ...", waiting=block.what)
                    logged = True
                t, _, _, fn = self._async.pop(0)
                self.now = max(self.now, t)
                fn()
                self._drain()  # everything else that finished by now, before looking again
            self.now += self.costs.issue
        # Let everything in flight finish (the epilogue's wait_group(0) would).
        while self._async:
            t, _, _, fn = self._async.pop(0)
            self.now = max(self.now, t)
            fn()
        return trace

    def _drain(self) -> None:
        """Finish the asynchronous work that is already due (its time has come)."""
        while self._async and self._async[0][0] <= self.now:
            self._async.pop(0)[3]()

    def _explain(self, block: Block) -> str:
        """Why nothing will ever satisfy ``block``: the barrier's state and who should arrive."""
        if block.kind == "wgmma":
            return "wait_group waits for WGMMAs that were never committed (commit_group missing?)"
        bar = block.barrier
        state = (f"{bar.name} is in phase {bar.phase} after {bar.completed} completed phase(s), "
                 f"still needing {bar.pending} arrival(s) and {max(bar.tx, 0)} byte(s); waiting "
                 f"for parity {block.parity} returns only once its phase bit differs from "
                 f"{block.parity}")
        if block.kind == "empty":
            return (f"{state}. Only consumer_release of the k-tile now in that stage arrives on "
                    f"it, and the same warps issue that release later in program order, after "
                    f"this acquire returns: the producer ran more than `stages` k-tiles ahead of "
                    f"the consumer (prefetch deeper than the ring, or a missing release).")
        return (f"{state}. Only a producer_acquire (the expect-tx arrival) plus the TMA bytes of "
                f"that k-tile complete it, and no such load is in flight: the consumer waits for "
                f"a k-tile nobody loaded (the load comes later in program order, or never).")


# ----------------------------------------------------------------------------------------
# The three mainloops of the course kernel
# ----------------------------------------------------------------------------------------
def naive(p: PipelineModel, k_tiles: int, prefetch: int = 0) -> Iterator[Block]:
    """Load k-tile k, wait for it, multiply, release, repeat: nothing overlaps."""
    prod = p.producer = make_pipeline_state("producer", p.stages)
    cons = p.consumer = make_pipeline_state("consumer", p.stages)
    for _ in range(k_tiles):
        yield from p.producer_acquire(prod)
        p.tma_load(prod)
        p.producer_commit(prod)
        prod.advance()
        yield from p.consumer_wait(cons)
        p.wgmma(cons)
        p.commit_group()
        yield from p.wait_group(0)  # the MMA must be done before its stage is released
        p.consumer_release(cons)
        cons.advance()


def prefetch(p: PipelineModel, k_tiles: int, prefetch: int | None = None) -> Iterator[Block]:
    """A prologue loads ``prefetch`` k-tiles (default ``stages - 1``); then each step reads one
    k-tile and loads the next one not yet loaded, the same loop as the course kernel's.

    The WGMMAs of k-tile k keep running while the loop goes on: ``wait_group(1)`` only waits for
    those of k-1, so k-1's stage is released one step late, and then the producer refills a
    stage. With a prologue of ``stages`` k-tiles the refill in step 0 needs a stage nobody has
    released yet: with this loop order the deepest prefetch that fits is ``stages - 1``.
    """
    depth = p.stages - 1 if prefetch is None else prefetch
    prod = p.producer = make_pipeline_state("producer", p.stages)
    cons = p.consumer = make_pipeline_state("consumer", p.stages)
    released = make_pipeline_state("consumer", p.stages)
    for _ in range(min(depth, k_tiles)):  # prologue: fill the pipeline
        yield from p.producer_acquire(prod)
        p.tma_load(prod)
        p.producer_commit(prod)
        prod.advance()
    for k in range(k_tiles):
        yield from p.consumer_wait(cons)
        p.wgmma(cons)
        p.commit_group()
        yield from p.wait_group(1)  # k-1's WGMMAs are done: its stage may be refilled
        cons.advance()
        if k > 0:
            p.consumer_release(released)
            released.advance()
        if prod.count < k_tiles:  # load the next k-tile into a free stage
            yield from p.producer_acquire(prod)
            p.tma_load(prod)
            p.producer_commit(prod)
            prod.advance()
    yield from p.wait_group(0)
    p.consumer_release(released)
    released.advance()


def compiler_pipelined(p: PipelineModel, k_tiles: int, prefetch: int | None = None) -> Iterator[Block]:
    """The naive loop body, software-pipelined ``prefetch`` iterations deep (default stages-1).

    What ``cutlass.range(k_tiles, prefetch_stages=P)`` asks of the compiler: run the load part of
    iteration k+P in iteration k. The states come from the loop index (:func:`state_from_index`),
    so iteration k+P's state is known without running the ones in between. Depth ``stages-1``
    is the most that fits: the load for k+P goes into the stage k-1 released at the end of the
    previous iteration; with P = stages it would need stage k, still being read.

    The kernel itself defaults to ``max(1, stages - 2)`` (``HopperGemm``): with ``stages-1``
    warp 0 waits at the top of every iteration for the slowest warp's release, which this model
    charges only through ``Costs.release_skew``. This function keeps the deepest depth that fits
    as its default; :func:`cutecourse.models.timeline.predict` uses the kernel's.
    """
    depth = p.stages - 1 if prefetch is None else prefetch

    def load(j: int) -> Iterator[Block]:
        st = p.producer = state_from_index(j, p.stages, "producer")
        yield from p.producer_acquire(st)
        p.tma_load(st)
        p.producer_commit(st)

    for j in range(min(depth, k_tiles)):  # the compiler's prologue
        yield from load(j)
    for k in range(k_tiles):
        if k + depth < k_tiles:
            yield from load(k + depth)
        cons = p.consumer = state_from_index(k, p.stages, "consumer")
        yield from p.consumer_wait(cons)
        p.wgmma(cons)
        p.commit_group()
        yield from p.wait_group(0)
        p.consumer_release(cons)
        p.consumer = state_from_index(k + 1, p.stages, "consumer")


PROGRAMS = {"naive": naive, "prefetch": prefetch, "compiler": compiler_pipelined}

#: The step names :func:`from_order` understands.
STEPS = ("producer_acquire", "tma_load", "producer_commit", "consumer_wait", "wgmma",
         "commit_group", "wait_group", "consumer_release")


def from_order(order: list[str]) -> Callable[[PipelineModel, int, int], Iterator[Block]]:
    """A one-k-tile-at-a-time loop that runs ``order``'s steps each iteration.

    Each step uses the producer or consumer state as the kernel does; the producer state advances
    after ``producer_commit`` (or after ``tma_load`` if there is no commit), the consumer's after
    ``consumer_release`` (or after ``wgmma`` if there is none). ``wait_group`` is
    ``wait_group(0)``. Unknown names raise a :class:`CourseError`.
    """
    bad = [s for s in order if s not in STEPS]
    if bad:
        raise CourseError(f"unknown step(s) {bad}", f"use the names {list(STEPS)}")
    prod_last = "producer_commit" if "producer_commit" in order else "tma_load"
    cons_last = "consumer_release" if "consumer_release" in order else "wgmma"

    def program(p: PipelineModel, k_tiles: int, prefetch: int = 0) -> Iterator[Block]:
        prod = p.producer = make_pipeline_state("producer", p.stages)
        cons = p.consumer = make_pipeline_state("consumer", p.stages)
        for _ in range(k_tiles):
            for step in order:
                if step == "producer_acquire":
                    yield from p.producer_acquire(prod)
                elif step == "tma_load":
                    p.tma_load(prod)
                elif step == "producer_commit":
                    p.producer_commit(prod)
                elif step == "consumer_wait":
                    yield from p.consumer_wait(cons)
                elif step == "wgmma":
                    p.wgmma(cons)
                elif step == "commit_group":
                    p.commit_group()
                elif step == "wait_group":
                    yield from p.wait_group(0)
                elif step == "consumer_release":
                    p.consumer_release(cons)
                if step == prod_last:
                    prod.advance()
                if step == cons_last:
                    cons.advance()
        if p._pending_mma:
            p.commit_group()

    return program


def simulate(variant: str | Callable = "prefetch", stages: int = 4, k_tiles: int = 8,
             prefetch: int | None = None, tx_bytes: int = 49152, consumer_arrivals: int = 8,
             costs: Costs = Costs()) -> Trace:
    """Run one mainloop on the model; the returned :class:`Trace` holds every event.

    ``variant``: "naive", "prefetch", "compiler" or a program from :func:`from_order`.
    ``prefetch``: k-tiles loaded ahead (prefetch and compiler: default ``stages - 1``; naive
    ignores it).
    """
    _check_positive("stages", stages)
    _check_positive("k_tiles", k_tiles)
    if prefetch is not None and prefetch < 0:
        raise ShapeError(f"prefetch depth {prefetch} is negative",
                         "use 1 up to stages-1 (prefetch variant) or 0 (the naive order) up to "
                         "stages-1 (compiler); deeper deadlocks once there is a k-tile to refill")
    if callable(variant):
        program, name = variant, getattr(variant, "__name__", "custom")
    else:
        if variant not in PROGRAMS:
            raise CourseError(f"unknown variant {variant!r}", f"use one of {list(PROGRAMS)}")
        program, name = PROGRAMS[variant], variant
    if name in ("prefetch", "compiler", "compiler_pipelined") and prefetch is None:
        depth = stages - 1
    else:
        depth = prefetch or 0
    p = PipelineModel(stages, tx_bytes, consumer_arrivals, costs)
    trace = Trace(name, stages, k_tiles, depth)
    return p.run(program(p, k_tiles, depth), trace)


def _check_positive(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ShapeError(f"{name} must be a positive integer, not {value!r}",
                         f"pass {name}=1 or more")


# ----------------------------------------------------------------------------------------
# The DSL's own state arithmetic, for comparison
# ----------------------------------------------------------------------------------------
_DSL_SCRIPT = textwrap.dedent("""
    import cutlass, cutlass.cute as cute
    from cutlass import pipeline

    WALKS = {walks!r}  # (user, stages, steps, advance-by)

    @cute.jit
    def walk():
        # A host-side @cute.jit function: the DSL's PipelineState, advanced as a kernel does,
        # compiled and run on the CPU (there is no kernel in it, so no GPU is needed).
        for w in cutlass.range_constexpr(len(WALKS)):
            user, stages, steps, by = WALKS[w]
            kind = pipeline.PipelineUserType.Producer if user == "producer" else pipeline.PipelineUserType.Consumer
            s = pipeline.make_pipeline_state(kind, stages)
            for i in cutlass.range_constexpr(steps):
                cute.printf("walk %d state %d %d %d", w, s.count, s.index, s.phase)
                if cutlass.const_expr(by == 1):
                    s.advance()
                else:
                    s.advance(by)
            cute.printf("walk %d state %d %d %d", w, s.count, s.index, s.phase)

    cute.compile(walk)()
""")


def dsl_state_walks(walks: list[tuple[str, int, int, int]],
                    timeout: float = 300.0) -> list[list[tuple[int, int, int]]]:
    """Run the DSL's own ``PipelineState`` through each walk ``(user, stages, steps, by)``.

    For every walk: ``make_pipeline_state(user, stages)``, then ``steps`` calls of
    ``advance()`` (``by == 1``) or ``advance(by)``, recording (count, index, phase) before each
    and after the last. All walks are compiled into one host-only ``@cute.jit`` function and
    run on the CPU in a fresh process (the DSL prints from native code, and a fresh process
    leaves this one's DSL settings alone).
    """
    for user, stages, steps, by in walks:
        _check_positive("stages", stages)
        _check_positive("advance-by", by)
        if user not in ("producer", "consumer"):
            raise CourseError(f"user must be 'producer' or 'consumer', not {user!r}")
    script = _DSL_SCRIPT.format(walks=[tuple(w) for w in walks])
    with tempfile.TemporaryDirectory(prefix="cutecourse-state-") as work:
        path = os.path.join(work, "walk.py")  # cute.compile needs the function in a real file
        with open(path, "w") as f:
            f.write(script)
        env = dict(os.environ, CUTE_DSL_ARCH=os.environ.get("CUTE_DSL_ARCH", "sm_90a"),
                   CUTE_DSL_KEEP="", CUTE_DSL_DISABLE_FILE_CACHING="1")
        proc = subprocess.run([sys.executable, path], capture_output=True, text=True,
                              env=env, timeout=timeout, cwd=work)
    out: list[list[tuple[int, int, int]]] = [[] for _ in walks]
    for m in re.finditer(r"walk (\d+) state (-?\d+) (-?\d+) (-?\d+)", proc.stdout):
        out[int(m.group(1))].append(tuple(map(int, m.groups()[1:])))
    if proc.returncode != 0 or any(len(rows) != w[2] + 1 for rows, w in zip(out, walks)):
        last = (proc.stderr or proc.stdout or "no output").strip().splitlines()[-1]
        raise CourseError(f"the DSL state walk did not run: {last}",
                          "check that nvidia-cutlass-dsl imports in this environment")
    return out


def model_state_walk(user: str, stages: int, steps: int, by: int = 1) -> list[tuple[int, int, int]]:
    """The same walk as :func:`dsl_state_walks`, on this module's :class:`PipelineState`."""
    s = make_pipeline_state(user, stages)
    rows = [s.as_tuple()]
    for _ in range(steps):
        s.advance(by)
        rows.append(s.as_tuple())
    return rows
