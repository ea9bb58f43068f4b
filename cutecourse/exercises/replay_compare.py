"""Hold a learner's mainloop against the course's, call by call, on the CPU pipeline model.

``pipeline_replay.replay`` runs a mainloop as written and logs every pipeline call in program
order: which state each ``consumer_wait`` / ``producer_acquire`` / TMA load / ``consumer_release``
is given (count = k-tile, stage index, phase), which stage each ``issue_mma`` reads, the depth of
each ``wait_group``. The course kernel's loop, replayed the same way, says what each step must be.
:func:`first_mistake` walks the two logs side by side on several ring and problem sizes and
names the first step where they part: the stage, the k-tile, the iteration (or "after the loop"),
and what it costs on the GPU. A model hang or race (``trace.deadlock``, ``trace.hazards``) the
learner's loop reaches before parting is left to the caller's model verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

CONSUMER = ("consumer_wait", "issue_mma", "wait_group", "consumer_release")
PRODUCER = ("producer_acquire", "tma_load")
STATE_OPS = ("consumer_wait", "consumer_release", "producer_acquire", "tma_load")

#: (stages, k-tiles) compared: the course's ring, shorter than the ring, an empty problem, two
#: stages, several laps of an odd ring.
COMPARE_RUNS = [(4, 8), (4, 2), (4, 0), (2, 1), (2, 5), (3, 7)]


@dataclass
class Step:
    op: str
    arg: object
    where: str  # "in iteration k", "in the prologue", "after the loop"
    k: int  # the iteration (k-tile) it belongs to, -1 before the loop
    site: tuple | None = None  # (file, line) of the call


def steps(calls, ops) -> list[Step]:
    """The calls of ``ops`` with where each stands: helpers' ``enter`` marks and consumer waits
    say which part of the loop a call is in."""
    out, part, k = [], "in the prologue", -1
    marked = any(c[0] == "enter" for c in calls)
    for op, arg, site in calls:
        if op == "enter":
            part = {"fill_ring": "in the prologue", "drain": "after the loop"}.get(arg, part)
            if arg in ("consume", "states"):
                k += 1
                part = f"in iteration k = {k}"
            continue
        if op == "consumer_wait" and not marked:
            k = arg[0] if isinstance(arg, tuple) else k + 1
            part = f"in iteration k = {k}"
        if op in ops:
            out.append(Step(op, arg, part, k, site))
    return out


def _state(arg) -> str:
    count, index, phase = arg
    return f"stage {index}, phase {phase} (k-tile {count}'s state)"


def _pair(mine: Step, want: Step, k_tiles: int, stages: int) -> str:
    """The message for the first step where the learner's loop parts from the course's."""
    where = mine.where
    if mine.op == want.op == "consumer_wait":
        return (f"{where} your consumer_wait waits on {_state(mine.arg)}; k-tile {want.arg[0]} "
                f"lies in {_state(want.arg)}. Wait on `cons` and advance it once per k-tile.")
    if mine.op == want.op == "issue_mma":
        return (f"{where} your wgmmas read stage {mine.arg}, but the k-tile just waited for "
                f"landed in stage {want.arg}: issue_mma(mma, cons.index) with the state you "
                "waited on, before it advances.")
    if mine.op == want.op == "wait_group":
        if mine.arg == 0 and want.arg == 1:
            return (f"{where} your loop waits with wait_group(0): each k-tile waits for its own "
                    "wgmmas, so the tensor cores idle while the next wait and MMAs are issued. "
                    "Keep one group in flight: wait_group(1), then release the stage of k-tile "
                    "k-1, whose group is now done.")
        if "after" in where:
            return (f"{where} your wait_group({mine.arg}) leaves the last k-tile's wgmmas "
                    "running while the epilogue reads the accumulators and their stage is "
                    f"handed back: wait_group({want.arg}).")
        if mine.arg > want.arg:
            return (f"{where} your loop waits with wait_group({mine.arg}): that leaves "
                    f"{mine.arg} groups running, k-tile k-1's among them, so the stage you "
                    "release next may still be read by the tensor cores (a race). "
                    f"wait_group({want.arg}) there.")
        return (f"{where} your loop waits with wait_group({mine.arg}); wait_group({want.arg}) "
                "is what lets the stage released next be free and the epilogue read finished "
                "accumulators.")
    if mine.op == want.op == "consumer_release":
        return _wrong_release(mine, want, k_tiles)
    if mine.op == want.op and mine.op in STATE_OPS and mine.arg[:2] == want.arg[:2]:
        user = "producer" if mine.op in PRODUCER else "consumer"
        return (f"{where} your {mine.op} is given {_state(mine.arg)}: the right stage, the wrong "
                f"phase ({want.arg[2]} expected). The {user} waits on its barrier with "
                + ("the other bit than the consumer (the empty barriers start as 'free'): pass "
                   "the producer's state, `prod`." if user == "producer" else
                   "the bit that flips each time the ring wraps around: pass the consumer's "
                   "state, `cons`."))
    if mine.op == want.op and mine.op in PRODUCER:
        what = "acquire" if mine.op == "producer_acquire" else "load"
        return (f"{where} your producer's {mine.op} is given {_state(mine.arg)}; the next "
                f"{what} must be k-tile {want.arg[0]}, {_state(want.arg)}. Advance `prod` once "
                "per k-tile loaded.")
    if mine.op == "consumer_release" and want.op == "wait_group":
        return (f"{where} your consumer releases {_state(mine.arg)} before the wait_group that "
                "proves its wgmmas are done: the producer may refill it while the tensor cores "
                "still read it. Release after warpgroup.wait_group.")
    if mine.op == "issue_mma" and want.op == "consumer_wait":
        return (f"{where} your wgmmas are issued before the consumer_wait for their k-tile: the "
                "tensor cores would read a stage whose TMA bytes may not have landed. Call "
                "ring.consumer_wait(cons) first.")
    if mine.op == "consumer_release" and k_tiles == 0:
        return (f"your loop still releases {_state(mine.arg)}, a stage no k-tile "
                "used: an arrival nobody waits for, which lets the producer's next acquire of "
                "that stage pass before it is free. Release the last stage only "
                "`if k_tiles > 0`.")
    if mine.op == "consumer_release":
        return (f"{where} your loop releases {_state(mine.arg)}, a release the course's loop "
                "does not make there: at k = 0 no earlier k-tile's wgmmas have finished (release "
                "k-tile k-1's stage, `released`, only for k > 0), and each stage is released "
                "once per k-tile.")
    if want.op == "consumer_release":
        return (f"{where} your loop does not release {_state(want.arg)}, whose wgmmas are done "
                f"there ({'after wait_group(0)' if 'after' in where else 'after wait_group(1)'}). "
                "A stage never handed back hangs its next user: the producer's refill, a "
                "persistent kernel's next tile, a cluster's peer CTA.")
    if want.op == "wait_group" and "after" in where:
        return (f"{where} your loop calls {mine.op} where the last k-tile's wgmmas must first be "
                "waited for with warpgroup.wait_group(0): the epilogue reads the accumulators.")
    if mine.op == "tma_load" and want.op == "producer_acquire":
        return (f"{where} your loop issues the TMA load of k-tile {mine.arg[0]} before its "
                "producer_acquire: the stage may still be read by the tensor cores, and its "
                "full barrier is not armed with the bytes, so the wait for them hangs. "
                "producer_acquire first, then self.load.")
    if mine.op in PRODUCER and want.op in CONSUMER + ("(end)",):
        past = mine.arg[0] >= k_tiles
        return (f"{where} your producer goes on to k-tile {mine.arg[0]} ({mine.op}) where the "
                f"course's loop has stopped loading: "
                + (f"with {k_tiles} k-tile(s) that is past the last one: its TMA writes may land "
                   "in the ring after the epilogue has reused it for C. Load at most k_tiles."
                   if past else "no more than stages - 1 k-tiles fit ahead of the first MMA: "
                   "a full ring leaves the first refill a stage nobody has released."))
    if want.op == "tma_load" and mine.op != "tma_load":
        return (f"{where} your loop issues no TMA load of k-tile {want.arg[0]} after acquiring its "
                "stage, so the consumer_wait for it hangs. If your copy is predicated, its "
                "predicate is False in warp 0: set it from is_producer.")
    if want.op in PRODUCER and mine.op in CONSUMER:
        return (f"{where} your loop moves on to {mine.op} where the course's still loads "
                f"k-tile {want.arg[0]} ({want.op}): fewer k-tiles in flight hide less TMA "
                "latency, and a k-tile never loaded is waited for forever.")
    if want.op == "(end)":
        return f"{where} your loop calls {mine.op}({_arg(mine)}) after the course's has finished."
    return (f"{where} your loop calls {mine.op}({_arg(mine)}) where the course's calls "
            f"{want.op}({_arg(want)}).")


def _key(step: Step):
    """What of a step the hardware acts on: a TMA load its k-tile and stage (not the phase), a
    release its stage's empty barrier (not the count or phase), a wait or an acquire the stage
    and the phase it waits for, and the k-tile it stands for."""
    if step.op == "tma_load":
        return step.op, step.arg[:2]
    if step.op == "consumer_release":
        return step.op, step.arg[1]
    return step.op, step.arg


def _arg(step: Step) -> str:
    return _state(step.arg) if step.op in STATE_OPS else str(step.arg)


def _wrong_release(mine: Step, want: Step, k_tiles: int) -> str:
    c, rc = mine.arg[0], want.arg[0]
    head = f"{mine.where} your loop releases {_state(mine.arg)}; the stage done there is {_state(want.arg)}"
    if c >= k_tiles:
        return (f"{head}. k-tile {c} does not exist: that state was advanced past the last "
                f"k-tile (as `cons` is by then). The last k-tile's stage ({want.arg[1]}) is never released and "
                f"stage {mine.arg[1]} gets a second release: a ring left with a stage held hangs "
                "its next user (a persistent kernel's next tile, a cluster's peer CTA). "
                "Release `released`.")
    if c > rc:
        return (f"{head}. k-tile {c}'s wgmmas may still run: you hand the producer a stage the "
                "tensor cores are reading (that is `cons`, or k-tile k's state). Release "
                "`released`, k-tile k-1's.")
    return (f"{head}: k-tile {c}'s stage was already released (or is released again), and "
            f"k-tile {rc}'s is not. Advance `released` after each release.")


def first_mistake(learner, reference, ops=CONSUMER + PRODUCER, runs=COMPARE_RUNS,
                  method: str = "mainloop", code=None) -> str | None:
    """The first step where the learner's mainloop (a class or a hook) parts from the course's
    ``reference``, named; None if they agree on every run. A hang or race first met by the
    learner's loop ends its log there: the caller's model verdict names it. ``code`` (the
    learner's ``LearnerCode``): the message also points at the learner's line of that step."""
    found = _first_mistake(learner, reference, ops, runs, method)
    if found is None:
        return None
    message, site = found
    if code is not None and site and any(s.holds(*site) for s in code.segments):
        message += f" [{code.describe(*site)}]"
    return message


def _first_mistake(learner, reference, ops, runs, method):
    from .pipeline_replay import replay

    for stages, k_tiles in runs:
        mine = replay(learner, stages=stages, k_tiles=k_tiles, method=method)
        want = replay(reference, stages=stages, k_tiles=k_tiles, method=method)
        a, b = steps(mine.calls, ops), steps(want.calls, ops)
        for i, w in enumerate(b):
            if i >= len(a):
                if mine.deadlock or mine.hazards:
                    return None  # it stopped: the model verdict says why
                return (_pair(Step("(nothing)", None, w.where, w.k), w, k_tiles, stages)
                        if w.op == "consumer_release" else
                        f"with {stages} stages and {k_tiles} k-tiles your loop never calls "
                        f"{w.op}({_arg(w)}) {w.where}."), None
            if _key(a[i]) != _key(w):
                return (f"with {stages} stages and {k_tiles} k-tile(s): "
                        + _pair(a[i], w, k_tiles, stages)), a[i].site
        if len(a) > len(b):
            extra = a[len(b)]
            return (f"with {stages} stages and {k_tiles} k-tile(s): " + _pair(
                extra, Step("(end)", None, extra.where, extra.k), k_tiles, stages)), extra.site
    return None
