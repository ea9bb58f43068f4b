"""The ping-pong kernel's ordered barrier on the CPU: who waits, who arrives, in what order.

In ``kernels/hopper_gemm_pingpong.py`` two consumer warpgroups share the tensor cores: warpgroup
w computes the CTA's work items w, w + 2, w + 4 ... and they take turns on the MMAs, so that one
runs its epilogue while the other multiplies. Without the turns the two warpgroups' MMAs would
interleave wherever their tiles overlap (the one ring loads their k-tiles in order, so that is
near every hand-over), and each tile, its MMAs slowed by the other's, would finish and start its
epilogue later (CUTLASS's comment: one warpgroup's MMAs after the other's "helps hide Epilogue"). The course's kernel hands the turns over with two *named barriers*, hardware barriers
numbered 0-15 per CTA, each completed when a given number of threads has reached it (CUTLASS's
``OrderedSequenceBarrier`` builds the same idea from a ring of mbarriers in shared memory, and
orders the two epilogues as well):

* ``bar.sync b, 256`` (``barriers.MmaTurn.wait``): this warpgroup's 128 threads arrive at
  barrier b and wait until it completes;
* ``bar.arrive b, 256`` (``MmaTurn.pass_on``): the other warpgroup's 128 threads arrive
  and go on without waiting.

So barrier ``ORDER_BARRIER + w`` completes once warpgroup w waits on it and warpgroup 1 - w has
arrived: "warpgroup w's turn". :func:`program` is the kernel's ``_warpgroup`` loop (with ``sm90.mma_tile``) as a list of
operations, :func:`simulate` runs the two programs against each other (in time, with an MMA and
an epilogue duration), and :func:`turns` lists the hand-overs, one per tile.

Every tile passes the turn on, the last one too: with a dynamic scheduler a warpgroup learns
whether there is a next item only after its tile (reading it earlier deadlocks, see the kernel's
docstring). So one turn is passed to a warpgroup that has no tile for it, the one that would own
the item after the CTA's last (item ``tiles``: warpgroup ``tiles % 2``); it waits for that turn
once at the end of its walk, so that no arrive is left over at exit. A pair of programs
that can never finish (a wait nobody arrives for) or that leaves an arrival without a wait is a
:class:`BarrierError` that says which operation and why.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import CourseError

#: The kernel's ``barriers.Barrier.MMA_TURN`` (named barrier 0 is __syncthreads, 1 and 2 are the two
#: epilogues'); warpgroup w's turn is barrier ORDER_BARRIER + w. tests keep them equal.
ORDER_BARRIER = 3
KINDS = ("wait", "arrive", "mma", "epilogue")


class BarrierError(CourseError, RuntimeError):
    """The two warpgroups' barrier operations do not pair up."""


@dataclass(frozen=True)
class Op:
    """One operation of a warpgroup's program: a barrier wait or arrive, or a tile's MMAs or its
    epilogue. ``tile``: the CTA's work item it belongs to (None: the arrive at the start)."""

    warpgroup: int
    kind: str
    barrier: int | None = None
    tile: int | None = None


@dataclass(frozen=True)
class Event:
    """An operation as it ran: [start, end) in units of one tile's MMAs. For a wait, start is
    when the warpgroup reached the barrier and end when the barrier completed (end - start is
    the time it waited), and ``arrive`` the other warpgroup's arrive that completed it (the
    hand-over); an arrive takes no time."""

    op: Op
    start: float
    end: float
    arrive: "Event | None" = None


@dataclass(frozen=True)
class Turn:
    """Tile ``tile``'s turn on the tensor cores: ``waiter`` waits on ``barrier`` until ``arriver``
    arrives, at its start (``after`` None) or once it has issued the MMAs of tile ``after``."""

    tile: int
    waiter: int
    barrier: int
    arriver: int
    after: int | None


def _check_tiles(tiles) -> None:
    if not isinstance(tiles, int) or tiles < 1:
        raise CourseError(f"tiles={tiles!r}: the CTA's number of work items must be an int >= 1",
                          "e.g. tiles=5 (a CTA of the persistent grid computes a handful of tiles)")


def program(w: int, tiles: int) -> list[Op]:
    """Warpgroup ``w``'s operations for a CTA with ``tiles`` work items, as the kernel runs them:
    warpgroup 1 first passes warpgroup 0 its first turn; then per own tile: wait for my turn,
    issue the MMAs, pass the turn on, run the epilogue; at the end, the warpgroup that would own
    item ``tiles`` (the one after the last) waits once for the turn passed to it."""
    _check_tiles(tiles)
    if w not in (0, 1):
        raise CourseError(f"warpgroup {w!r}: the ping-pong kernel has consumer warpgroups 0 and 1",
                          "pass w=0 or w=1")
    ops = [Op(1, "arrive", ORDER_BARRIER, None)] if w == 1 else []
    for tile in range(w, tiles, 2):
        ops.append(Op(w, "wait", ORDER_BARRIER + w, tile))
        ops.append(Op(w, "mma", None, tile))
        ops.append(Op(w, "arrive", ORDER_BARRIER + 1 - w, tile))  # always: MmaTurn(w)
        ops.append(Op(w, "epilogue", None, tile))
    if tiles % 2 == w:  # the kernel: walked % 2 == w, the item after the last would be mine
        ops.append(Op(w, "wait", ORDER_BARRIER + w, tiles))
    return ops


def barrier_ops(w: int, tiles: int) -> list[tuple[str, int]]:
    """Only the barrier operations of :func:`program`: [("wait" | "arrive", barrier id), ...]."""
    return [(op.kind, op.barrier) for op in program(w, tiles) if op.kind in ("wait", "arrive")]


def simulate(tiles: int, mma: float = 1.0, epilogue: float = 0.4, programs=None) -> list[Event]:
    """Run the two warpgroups' programs (default: :func:`program`) against each other; return
    the events sorted by start. A tile's MMAs take ``mma``, its epilogue ``epilogue``. The n-th
    wait on a barrier completes with its n-th arrive (each barrier has one waiting and one
    arriving warpgroup, so its completions pair up in order)."""
    if programs is None:
        programs = {w: program(w, tiles) for w in (0, 1)}
    if mma <= 0 or epilogue < 0:
        raise CourseError(f"mma={mma}, epilogue={epilogue}: durations must be positive",
                          "e.g. mma=1.0, epilogue=0.4 (in units of one tile's MMAs)")
    clock = {w: 0.0 for w in programs}
    pc = {w: 0 for w in programs}
    arrives: dict[int, list[Event]] = {}  # barrier -> its arrives so far
    waits: dict[int, int] = {}  # barrier -> waits completed so far
    events: list[Event] = []
    while True:
        progressed = False
        for w, ops in programs.items():
            while pc[w] < len(ops):
                op = ops[pc[w]]
                t = clock[w]
                if op.kind == "arrive":
                    events.append(Event(op, t, t))
                    arrives.setdefault(op.barrier, []).append(events[-1])
                elif op.kind == "wait":
                    n = waits.get(op.barrier, 0)
                    if n >= len(arrives.get(op.barrier, [])):
                        break  # blocked until the other warpgroup arrives
                    waits[op.barrier] = n + 1
                    arrive = arrives[op.barrier][n]
                    clock[w] = max(t, arrive.start)
                    events.append(Event(op, t, clock[w], arrive))
                elif op.kind in ("mma", "epilogue"):
                    clock[w] = t + (mma if op.kind == "mma" else epilogue)
                    events.append(Event(op, t, clock[w]))
                else:
                    raise BarrierError(f"warpgroup {w}: operation kind {op.kind!r}", f"use one of {KINDS}")
                pc[w] += 1
                progressed = True
        if all(pc[w] == len(ops) for w, ops in programs.items()):
            break
        if not progressed:
            w, op = next((w, ops[pc[w]]) for w, ops in programs.items() if pc[w] < len(ops))
            before = "" if op.tile is None else f" before tile {op.tile}"
            raise BarrierError(
                f"warpgroup {w} waits forever on barrier {op.barrier}{before}: "
                f"{waits.get(op.barrier, 0)} arrive(s) on it so far, and no operation left can arrive",
                "every wait needs an arrive of the other warpgroup on the same barrier, issued "
                "before that warpgroup itself waits")
    for b, done in arrives.items():
        if len(done) > waits.get(b, 0):
            raise BarrierError(f"{len(done) - waits.get(b, 0)} arrive(s) on barrier {b} that no wait "
                               "completes: the barrier is left half-full when the CTA exits",
                               "the warpgroup that would own the item after the last must wait "
                               "once for the turn passed to it before it exits")
    return sorted(events, key=lambda e: (e.start, e.op.warpgroup))


def turns(tiles: int) -> list[Turn]:
    """The hand-overs, one per tile and one more: who waits on which barrier, who arrives, after
    which tile. The last (``tile`` == ``tiles``) is the turn passed after the last tile, which its
    waiter takes at the end of its walk, with no tile to compute."""
    _check_tiles(tiles)
    return [Turn(t, t % 2, ORDER_BARRIER + t % 2, 1 - t % 2, None if t == 0 else t - 1)
            for t in range(tiles + 1)]


def table(tiles: int) -> str:
    """:func:`turns` as text, one line per tile."""
    lines = [f"{'tile':<6}{'MMAs by':<9}{'bar.sync (waits)':<20}bar.arrive (passes the turn)"]
    for t in turns(tiles):
        when = "at its start" if t.after is None else f"after issuing tile {t.after}'s MMAs"
        if t.tile == tiles:
            lines.append(f"{'end':<6}{'none':<9}{'WG%d on barrier %d' % (t.waiter, t.barrier):<20}"
                         f"WG{t.arriver}, {when} (taken at the walk's end)")
            continue
        lines.append(f"{t.tile:<6}{'WG%d' % t.waiter:<9}{'WG%d on barrier %d' % (t.waiter, t.barrier):<20}"
                     f"WG{t.arriver}, {when}")
    return "\n".join(lines)
