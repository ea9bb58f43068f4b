"""The course kernel's three mainloops, a loop built from a list of steps, and ``simulate``.

:func:`naive`, :func:`prefetch` and :func:`compiler_pipelined` are written like the kernel code,
against :class:`~.model.PipelineModel`'s calls; :func:`from_order` builds a one-k-tile-at-a-time
loop from step names (the exercises use it); :func:`simulate` runs one of them and returns the
:class:`~.trace.Trace`.
"""

from __future__ import annotations

from typing import Callable, Iterator

from ...errors import CourseError, ShapeError
from .model import Block, Costs, PipelineModel
from .state import _check_positive, make_pipeline_state, state_from_index
from .trace import Trace

VARIANTS = ("naive", "prefetch", "compiler")


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

    p.consumer = state_from_index(0, p.stages, "consumer")  # the state its first wait will use
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
