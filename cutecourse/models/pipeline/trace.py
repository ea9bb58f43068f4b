"""What a run of the pipeline model leaves behind: every event with a snapshot, and the verdict.

A :class:`Trace` holds one :class:`Event` per thing that happened (an instruction of the
program, a TMA load landing, a WGMMA finishing), each with a copy of the ring (:class:`Stage`),
of every barrier and of both pipeline states after it; and, if the run hung, the
:class:`Deadlock`: which wait, on which barrier and phase, and why nothing will ever flip it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import CourseError
from .state import Mbarrier


class PipelineDeadlock(CourseError, RuntimeError):
    """A wait that can never complete: no arrival or byte that could flip its barrier is coming."""


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
