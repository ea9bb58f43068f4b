"""What a pipelined kernel carries and what it waits on: ``PipelineState`` and the mbarrier.

:class:`PipelineState` is ``cutlass.pipeline.PipelineState``: (count, index, phase); ``advance``
wraps the index at ``stages`` and flips the phase. :class:`Mbarrier` is one hardware mbarrier
in shared memory: a phase bit, the arrivals and transaction bytes it still expects. An mbarrier
does not store "full" or "empty": ``wait(i, phase)`` (PTX ``mbarrier.try_wait.parity``) returns
once the phase with that parity has completed, i.e. once the barrier's phase bit differs from
``phase``. That is why a producer starts at phase 1: the empty barriers are in phase 0, so its
first wait returns at once (every stage starts empty).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import CourseError, ShapeError

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
    iterations: iteration k's loads depend on k alone. (DSL 4.8.1's pipeliner also takes a loop
    that carries ``advance()``d states; computing them is the course's choice, not its need.)
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


def _check_positive(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ShapeError(f"{name} must be a positive integer, not {value!r}",
                         f"pass {name}=1 or more")
