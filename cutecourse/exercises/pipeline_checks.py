"""What the mainloop exercises of notebooks 03-05 object to, shared: the learner's loop replayed
on the CPU pipeline model (hangs, races, a state that never advances, loads outside warp 0), and
the :class:`KernelExercise` of a hook of the course's one-CTA kernel.

Checked as ``kernel_check`` says: compiled for sm_90a here, facts read from the generated
mainloop, the learner's loop replayed on the CPU pipeline model (``pipeline_replay``), and on an
H100 run against torch in a child process with a timeout, timed beside the course's.
"""

from __future__ import annotations

import ast

from .kernel_check import KernelExercise, LearnerError, mainloop
from .learner_code import segment_of
from .pipeline_replay import replay

#: (stages, k-tiles) the model replays: the course's ring, a problem shorter than the ring, two
#: stages (every refill waits), and several laps of an odd ring.
REPLAY_RUNS = [(4, 8), (4, 2), (2, 1), (2, 5), (3, 7)]
TILE = (128, 256)


def kernel_expr(cls, **extra) -> str:
    """The expression that builds the learner's kernel (keyword arguments only): its class is
    the variant."""
    more = "".join(f", {k}={v!r}" for k, v in extra.items())
    return f"{cls.__name__}(tile_mn={TILE}{more})"


def model_verdict(hook, runs=REPLAY_RUNS, method: str = "mainloop") -> str | None:
    """The CPU model's objection to the learner's mainloop ``hook`` (a function, or a kernel
    class whose ``method`` is replayed with the parts it calls), or None."""
    for stages, k_tiles in runs:
        t = replay(hook, stages=stages, k_tiles=k_tiles, method=method)
        stuck = _stuck_state(t, stages)
        if stuck:
            return f"with {stages} stages and {k_tiles} k-tile(s) your loop hangs (CPU model): {stuck}"
        acquired, early = set(), None
        for e in t.events:
            if e.op == "producer_acquire":
                acquired.add(e.k_tile)
            elif e.op == "tma_load" and e.k_tile not in acquired and early is None:
                early = e.k_tile
        if early is not None and early not in acquired:
            return (f"your loop loads k-tile {early} but never calls producer_acquire for it: "
                    "nothing arms its full barrier (one arrival plus the bytes), so the "
                    "consumer_wait for it hangs. Call ring.producer_acquire(prod) (under "
                    "`if is_producer:`) before self.load.")
        if early is not None:
            return (f"your loop issues the TMA load of k-tile {early} before its "
                    "producer_acquire: the stage may still be read by the tensor cores, and its "
                    "full barrier is not yet armed with the bytes. producer_acquire first, then "
                    "self.load.")
        if t.deadlock:
            d = t.deadlock
            return (f"with {stages} stages and {k_tiles} k-tile(s) your loop hangs (CPU model): "
                    f"{d.op} waits on {d.barrier} for phase {d.parity} forever. {d.explanation}")
        if t.hazards:
            text = t.hazards[0]
            if text.startswith("consumer_release"):
                text += (". A wait_group(n) returns while the n newest groups still run: "
                         "release only the stage of a k-tile whose group is older than those "
                         "(after wait_group(1), k-tile k-1's)")
            return (f"with {stages} stages and {k_tiles} k-tile(s) your loop races (CPU model): "
                    f"{text}")
        if len(t.release_stages) != k_tiles:
            return (f"with {stages} stages and {k_tiles} k-tile(s) your loop releases "
                    f"{len(t.release_stages)} stage(s): each k-tile's stage must be released once, "
                    "the last one after the loop (after wait_group(0)). A ring left with a stage "
                    "held hangs its next user: a persistent kernel's next tile, a cluster's peer.")
        late = sorted({e.k_tile for e in t.events if e.op == "tma_load" and e.k_tile >= k_tiles})
        if late:
            return (f"with {stages} stages and {k_tiles} k-tile(s) your loop loads k-tile(s) "
                    f"{late}, past the last one: those TMA writes may land in the ring after "
                    "the epilogue has reused it for C")
    return None


def _stuck_state(t, stages: int) -> str | None:
    """A hang whose cause is a pipeline state that never advances, named as such."""
    if not t.deadlock or stages < 2:
        return None
    for what, seen, state in (("consumer_wait", t.wait_stages, "cons"),
                              ("consumer_release", t.release_stages, "released")):
        if len(seen) >= 2 and len(set(seen)) == 1:
            return (f"your {len(seen)} {what} calls all use stage {seen[0]}: the state "
                    f"they are given never advances. Call {state}.advance() after each {what}.")
    return None


def producer_only(hook, method: str = "mainloop") -> str | None:
    """The objection if warps other than warp 0 (``is_producer`` False) would issue loads."""
    t = replay(hook, stages=4, k_tiles=8, is_producer=False, method=method)
    loads = [e for e in t.events if e.op in ("producer_acquire", "tma_load")]
    if not loads:
        return None
    from ..kernels.hopper_gemm import CompilerHopperGemm

    if loads[0].op == "tma_load" and isinstance(hook, type) and issubclass(hook, CompilerHopperGemm):
        return ("your copy's predicate is True in every warp, not only in warp 0: each of the 8 "
                "warps would load the k-tile again (8x the bytes the full barrier expects). Set "
                "the predicate from is_producer (producer_only[0] = is_producer); the copy itself "
                "stays at the top level of the loop body.")
    return (f"your loop runs {loads[0].op} in every warp, not only in warp 0 (is_producer): "
            "each of the 8 warps would arm the full barrier, which expects one arrival, and "
            "load the k-tile again. Keep it under `if is_producer:`.")


#: What a pass on a machine without an H100 did not prove.
NOT_HERE = ("Not checked here: no H100, so C was not computed and nothing was timed; on an H100 "
            "this check also runs your kernel against torch and times it beside the course's")


def loop_ops(report, what: str):
    """The instruction names of the compiled mainloop; :class:`LearnerError` saying ``what`` to
    do where the kernel has no loop that issues wgmmas."""
    loop = mainloop(report)
    if loop is None:
        raise LearnerError(f"the compiled kernel has no loop that issues wgmmas: {what}")
    return loop.ops()


def _course_kernel(cls):
    """The course's kernel class a learner's class derives from (its variant; by default the
    prefetch one, ``HopperGemm``)."""
    from ..kernels.hopper_gemm import HopperGemm

    course = (c for c in getattr(cls, "__mro__", ()) if c.__module__.startswith("cutecourse.kernels."))
    return next(course, HopperGemm)


def replay_verdict(cls, method: str = "mainloop", code=None) -> str | None:
    """The CPU replay's objection: the first step where the learner's loop waits, reads or
    releases another stage (or calls another step) than the course's kernel it derives from,
    then any hang or race of the model, then warps other than warp 0 loading."""
    from .replay_compare import first_mistake

    return (first_mistake(cls, _course_kernel(cls), method=method, code=code)
            or model_verdict(cls, method=method)
            or producer_only(cls, method=method))


def replayed(method: str = "mainloop"):
    """The objection of :func:`replay_verdict` to the attempt's class, its lines named."""
    return lambda attempt: replay_verdict(attempt.answer, method=method, code=attempt.code)


def hands_back_states(attempt) -> str | None:
    """A part the learner wrote that must return the states it advanced (``kernel_parts.RETURNS``)
    but ends without ``return`` (or returns too few)."""
    from .kernel_parts import RETURNS

    for name, what in RETURNS.items():
        fn = vars(attempt.answer).get(name)
        if fn is None:
            continue
        returns = [n for n in ast.walk(ast.parse(segment_of(fn).text)) if isinstance(n, ast.Return)]
        n = what.count(",") + 1
        if not returns or any(r.value is None or isinstance(r.value, ast.Tuple) and len(r.value.elts) != n
                              for r in returns):
            return f"your {name} does not hand back its states: end it with `return {what}`"
    return None


def hook_exercise(title: str, hint: str, variant: str, baseline: str | None = None,
                  model=(), **spec) -> KernelExercise:
    """A hook of the course's one-CTA kernel of ``variant`` (``hopper_gemm.VARIANTS``, at 128x256:
    the learner subclasses it), timed on an H100 beside ``baseline`` (default: the course's
    kernel of that variant)."""
    from ..kernels.hopper_gemm import variant_class

    course = variant_class(variant).__name__
    return KernelExercise(title, hint, kernel=kernel_expr, model=(hands_back_states, *model),
                          baseline=baseline or f"{course}(tile_mn={TILE})", elsewhere=NOT_HERE, **spec)
