"""``PipelineTmaAsync`` and the engines behind it (TMA, tensor cores), on a simulated clock.

:class:`PipelineModel` has the four calls of ``PipelineTmaAsync`` (``producer_acquire``,
``producer_commit``, ``consumer_wait``, ``consumer_release``), the TMA copy and the WGMMA
``commit_group`` / ``wait_group``, each written as a generator that *yields* a :class:`Block`
when it must wait. :meth:`PipelineModel.run` executes a program until a wait blocks, then lets
the asynchronous engines finish work in time order; a wait that no finishing work can satisfy
is a deadlock, recorded in the :class:`~.trace.Trace` with the reason.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable, Iterator

from .state import Mbarrier, PipelineState, _check_positive
from .trace import Deadlock, Event, Stage, Trace


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
                                              block.parity, self._explain(block, trace.variant))
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

    def _explain(self, block: Block, variant: str = "") -> str:
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
                    f"this acquire returns: the producer wants to refill a stage nobody has "
                    f"released yet ({_LATE_RELEASE.get(variant, _NO_RELEASE)}).")
        return (f"{state}. Only a producer_acquire (the expect-tx arrival) plus the TMA bytes of "
                f"that k-tile complete it, and no such load is in flight: the consumer waits for "
                f"a k-tile nobody loaded (the load comes later in program order, or never).")


#: Why a refill finds no released stage, per loop: each of the two prefetching loops frees a
#: stage one k-tile after the prologue's loads need it, so a prologue that fills every stage
#: leaves none for the producer.
_NO_RELEASE = "a release is missing, or comes after the acquire that needs it"
_LATE_RELEASE = {
    "prefetch": ("this loop releases k-tile k-1's stage in step k, one k-tile late, after "
                 "wait_group(1): a prologue that fills every stage leaves none for the first "
                 "refill, so a prologue of at most `stages - 1` k-tiles fits; or a release is "
                 "missing"),
    "compiler": ("iteration k loads k-tile k+P before it releases k-tile k, so that load can "
                 "only reuse the stage released one iteration earlier: a prologue that fills "
                 "every stage leaves none for it, so a depth of at most `stages - 1` fits; or "
                 "a release is missing"),
}
