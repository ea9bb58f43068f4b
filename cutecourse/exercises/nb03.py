"""Checkers for notebook 03 (Hopper GEMM: naive vs prefetch).

Answers are checked by running them, not by comparing with a stored answer: a loop order is run
on the CPU pipeline model (:mod:`cutecourse.models.pipeline`, the same state machine as the
kernel's ``PipelineTmaAsync``), which says whether it hangs and why, or races; phase bits are
compared with the model's ``PipelineState`` (itself tested against the DSL's); stage counts
with the kernel's own shared-memory formula (:mod:`cutecourse.models.gemm_plan`).
"""

from __future__ import annotations

from ..models import gemm_plan
from ..models import pipeline as pm
from . import Result, answered, checker, failed, passed
from ..ptx_loops import loop_structure
from .kernel_check import kernel_checker
from .replay_compare import COMPARE_RUNS

#: (stages, k-tiles) the loop-order checker runs: a short loop, one lap, several laps.
ORDER_RUNS = [(2, 1), (2, 5), (3, 7), (4, 12)]



@checker("the order of one naive mainloop step",
         hint="the producer must own a stage before TMA writes it; the consumer must see the bytes "
              "land before WGMMA reads them; the tensor cores must be done with a stage before it "
              "is handed back.")
def check_loop_order(order) -> Result:
    """``order``: the step names of one k-tile, e.g. ``["producer_acquire", ...]``."""
    title = "the order of one naive mainloop step"
    order = list(answered(order, "order"))
    if Ellipsis in order:  # the stub `order = [...]`
        raise NotImplementedError("order")
    unknown = [s for s in order if s not in pm.STEPS]
    if unknown:
        return failed(title, f"unknown step(s) {unknown}", f"the steps are {list(pm.STEPS)}")
    missing = [s for s in pm.STEPS if s not in order and s != "producer_commit"]
    if missing:
        return failed(title, f"the loop never calls {missing}",
                      "every step but producer_commit (a no-op for TMA) is needed once per k-tile")
    for stages, k_tiles in ORDER_RUNS:
        t = pm.simulate(pm.from_order(order), stages, k_tiles)
        if t.deadlock:
            d = t.deadlock
            return failed(title, f"with {stages} stages and {k_tiles} k-tile(s) this loop hangs: "
                          f"{d.op} waits on {d.barrier} for phase {d.parity} forever.\n"
                          f"{d.explanation}")
        if t.hazards:
            return failed(title, f"with {stages} stages and {k_tiles} k-tile(s) this loop does not "
                          f"hang, but it races: {t.hazards[0]}. On the GPU that is a wrong result, "
                          "sometimes.")
    return passed(title, f"no hang and no race on {len(ORDER_RUNS)} runs of the model "
                  f"(up to {ORDER_RUNS[-1][1]} k-tiles, {ORDER_RUNS[-1][0]} stages): "
                  + " → ".join(order))


@checker("the phase bit after n advances",
         hint="the phase flips each time the index wraps from stages-1 to 0, i.e. once every "
              "`stages` advances; the producer starts at 1, the consumer at 0.")
def check_phase(phase_fn) -> Result:
    """``phase_fn(user, stages, n) -> 0 or 1`` for ``user`` "producer" or "consumer"."""
    title = "the phase bit after n advances"
    tried = 0
    for user in ("consumer", "producer"):
        for stages in range(1, 9):
            s = pm.make_pipeline_state(user, stages)
            for n in range(0, 4 * stages + 3):
                got = answered(phase_fn(user, stages, n), "phase_fn")
                tried += 1
                if got != s.phase:
                    return failed(title, f"{user}, {stages} stages, after {n} advances: you say "
                                  f"phase {got}, the state says {s.phase} (index {s.index})")
                s.advance()
    return passed(title, f"all {tried} cases agree with PipelineState (1 to 8 stages)")


@checker("stages that fit in shared memory",
         hint="one stage holds an A slice (tile_m x tile_k) and a B slice (tile_n x tile_k); "
              "what is left after the reserved bytes, divided by that, rounded down.")
def check_stages(stages_fn) -> Result:
    """``stages_fn(tile_m, tile_n, tile_k, elem_bytes, budget, reserved) -> int``."""
    title = "stages that fit in shared memory"
    budget = gemm_plan.SM90_SMEM_BYTES
    cases = [(128, 256, 64, 2, 1024), (128, 128, 64, 2, 1024), (64, 128, 64, 2, 1024),
             (256, 128, 64, 2, 1024), (128, 256, 32, 4, 1024), (128, 128, 128, 1, 0),
             (128, 128, 64, 2, 4096), (64, 64, 64, 2, 4096)]  # the last two: the reserve matters
    for m, n, k, eb, reserved in cases:
        want = gemm_plan.stages_that_fit((m * k + n * k) * eb, budget, reserved)
        got = answered(stages_fn(m, n, k, eb, budget, reserved), "stages_fn")
        if got != want:
            per = (m * k + n * k) * eb
            return failed(title, f"tile {m}x{n}x{k}, {eb}-byte elements: you say {got} stages; "
                          f"{per} B per stage into {budget - reserved} B gives {want}")
    p = gemm_plan.plan(8192, 8192, 8192, (128, 256))
    return passed(title, f"all {len(cases)} tiles agree; the course kernel's 128x256x64 fp16 tile "
                  f"gets {p.stages} stages ({p.smem_bytes // 1024} KiB of {budget // 1024} KiB)")


# ----------------------------------------------------------------------------------------
# Kernel exercises: the learner writes part of the prefetch mainloop of the course kernel
# ----------------------------------------------------------------------------------------
# Each is checked the same way (kernel_check's manual): compiled for sm_90a here, facts read from
# the generated mainloop, the learner's loop replayed on the CPU pipeline model (pipeline_replay),
# and on an H100 run against torch in a child process with a timeout, timed beside the course's.

#: (stages, k-tiles) the model replays: the course's ring, a problem shorter than the ring, two
#: stages (every refill waits), and several laps of an odd ring.
REPLAY_RUNS = [(4, 8), (4, 2), (2, 1), (2, 5), (3, 7)]
TILE = (128, 256)


def kernel_expr(cls, variant: str, **extra) -> str:
    """The expression that builds the learner's kernel (keyword arguments only)."""
    more = "".join(f", {k}={v!r}" for k, v in extra.items())
    return f"{cls.__name__}(tile_mn={TILE}, variant={variant!r}{more})"


def model_verdict(hook, runs=REPLAY_RUNS, method: str = "mainloop_prefetch") -> str | None:
    """The CPU model's objection to the learner's mainloop ``hook`` (a function, or a kernel
    class whose ``method`` is replayed with the parts it calls), or None."""
    from .pipeline_replay import replay

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


def producer_only(hook, method: str = "mainloop_prefetch") -> str | None:
    """The objection if warps other than warp 0 (``is_producer`` False) would issue loads."""
    from .pipeline_replay import replay

    t = replay(hook, stages=4, k_tiles=8, is_producer=False, method=method)
    loads = [e for e in t.events if e.op in ("producer_acquire", "tma_load")]
    if not loads:
        return None
    if loads[0].op == "tma_load" and method == "mainloop_compiler":
        return ("your copy's predicate is True in every warp, not only in warp 0: each of the 8 "
                "warps would load the k-tile again (8x the bytes the full barrier expects). Set "
                "the predicate from is_producer (producer_only[0] = is_producer); the copy itself "
                "stays at the top level of the loop body.")
    return (f"your loop runs {loads[0].op} in every warp, not only in warp 0 (is_producer): "
            "each of the 8 warps would arm the full barrier, which expects one arrival, and "
            "load the k-tile again. Keep it under `if is_producer:`.")


def gpu_verdict(code, expr: str, title: str, message: str, baseline: str) -> Result:
    """On an H100: the learner's kernel against torch, timed beside ``baseline``."""
    from . import kernel_check as kc

    return kc.gpu_verdict(code, expr, title, message, NOT_HERE, baseline=baseline)


#: What a pass on a machine without an H100 did not prove.
NOT_HERE = ("Not checked here: no H100, so C was not computed and nothing was timed; on an H100 "
            "this check also runs your kernel against torch and times it beside the course's")


def _loop_ops(report, what: str):
    from . import kernel_check as kc

    loop = kc.mainloop(report)
    if loop is None:
        raise kc.LearnerError(f"the compiled kernel has no loop that issues wgmmas: {what}")
    return loop.ops()


EX4 = ("Exercise 4 (kernel): the consumer of the prefetch mainloop",
       "_consume: consumer_wait(cons), issue_mma on cons.index, wait_group(1), advance cons, "
       "then (k > 0) release the stage of k-1 (`released`) and advance it; _drain: "
       "wait_group(0), then release `released` if there was a k-tile.")


def replay_verdict(cls, method: str = "mainloop_prefetch", code=None) -> str | None:
    """The CPU replay's objection: the first step where the learner's loop waits, reads or
    releases another stage (or calls another step) than the course's, then any hang or race
    of the model, then warps other than warp 0 loading."""
    from .kernel_parts import CompilerParts, PrefetchParts
    from .replay_compare import first_mistake

    reference = PrefetchParts if method == "mainloop_prefetch" else CompilerParts
    return (first_mistake(cls, reference, method=method, code=code)
            or model_verdict(cls, method=method)
            or producer_only(cls, method=method))


@kernel_checker(*EX4)
def check_consumer(cls) -> Result:
    """``cls``: your subclass of ``PrefetchParts`` with ``_consume`` and ``_drain`` written."""
    from . import kernel_check as kc

    title = EX4[0]
    code = kc.LearnerCode(cls)
    report = kc.compile_kernel(code, kernel_expr(cls, "prefetch"))
    objection = replay_verdict(cls, code=code)
    if objection:
        return failed(title, objection)
    names = _loop_ops(report, "write the loop's wgmmas with sm90.issue_mma(mma, cons.index)")
    seq = kc.compact(names)
    mma, wait = kc.first(names, "wgmma"), kc.first(names, "wait")
    depths = kc.wait_group_depths(kc.mainloop(report).lines)
    arrive, group = kc.first(names, "arrive", mma), kc.first(names, "wait_group", mma)
    # the CPU replay agreed; the compiled loop must say the same (a Python-level branch can
    # make the two differ)
    if wait < 0 or depths != [1] or arrive < group or \
            kc.wait_group_depths(report.instructions()).count(0) < 1:
        return failed(title, f"your loop replays like the course's on the CPU model, but the "
                      f"compiled mainloop is {seq}: expected one mbarrier wait, the wgmmas, "
                      "wait_group 1, then the release (arrive), and a wait_group 0 after the "
                      "loop. Look for a Python-level `if` or constant that the compiler resolved "
                      "differently.")
    message = (f"your mainloop compiles for sm_90a to {seq} per k-tile. On the CPU model it "
               f"waits, reads and releases the same stage as the course's at every step "
               f"({len(COMPARE_RUNS)} ring/problem sizes, an empty problem among them), "
               "with no hang and no race.")
    return gpu_verdict(code, kernel_expr(cls, "prefetch"), title, message,
                       f"HopperGemm(tile_mn={TILE}, variant='prefetch')")


EX5 = ("Exercise 5 (kernel): the producer's prologue",
       "warp 0 alone (if is_producer) loads min(stages - 1, k_tiles) k-tiles: producer_acquire, "
       "self.load, prod.advance() each, then returns prod. Not `stages`: the first refill in "
       "the loop needs a stage that only this same loop releases.")


@kernel_checker(*EX5)
def check_prologue(cls) -> Result:
    """``cls``: your subclass of ``PrefetchParts`` whose ``_fill_ring`` is your prologue."""
    from . import kernel_check as kc
    from .pipeline_replay import replay

    title = EX5[0]
    code = kc.LearnerCode(cls)
    report = kc.compile_kernel(code, kernel_expr(cls, "prefetch"))
    for stages, k_tiles in REPLAY_RUNS:  # the counts first: they name this exercise's mistakes
        t = replay(cls, stages=stages, k_tiles=k_tiles)
        if t.deadlock or t.hazards:
            break
        first = next((i for i, e in enumerate(t.events) if e.op == "wgmma"), len(t.events))
        loaded = sorted({e.k_tile for e in t.events[:first] if e.op == "tma_load"})
        want = min(stages - 1, k_tiles)
        if len(loaded) < want:
            return failed(title, f"with {stages} stages and {k_tiles} k-tiles your prologue loads "
                          f"{len(loaded)} k-tile(s) before the first wgmma; {want} fit without a "
                          "hang, and each one more hides more TMA latency")
    objection = replay_verdict(cls, code=code)
    if objection:
        return failed(title, objection)
    shape = loop_structure(report.ptx)
    if kc.mainloop(report) is None or not shape.prologue_tma_loads:
        return failed(title, "your prologue replays like the course's on the CPU model, but the "
                      "compiled kernel issues no TMA load before its mainloop: keep the loads in "
                      "a cutlass.range loop (a Python `range` over a run-time k_tiles cannot be "
                      "traced)")
    before = [lp for lp in kc.loops(report.ptx) if "wgmma" not in lp.ops() and "tma" in lp.ops()]
    prologue = kc.compact(before[0].ops() if before else ["tma"] * shape.prologue_tma_loads)
    message = (f"the prologue compiles to a loop of ({prologue}) before the mainloop. On the "
               "CPU model warp 0 alone acquires and loads the same k-tiles into the same stages "
               f"as the course's, min(stages - 1, k_tiles) of them ({len(COMPARE_RUNS)} "
               "ring/problem sizes), with no hang and no race.")
    return gpu_verdict(code, kernel_expr(cls, "prefetch"), title, message,
                       f"HopperGemm(tile_mn={TILE}, variant='prefetch')")


EX6 = ("Exercise 6 (lab): a ring of fewer stages",
       "one stage holds a 128x64 A tile and a 256x64 B tile of 2-byte elements.")


@kernel_checker(*EX6)
def check_stages_lab(stages, ring_kib) -> Result:
    """Compile the course kernel with ``stages`` beside the default; your ``ring_kib`` prediction
    (the ring's shared memory in KiB) is checked against the kernel's own plan."""
    from . import kernel_check as kc
    from ..inspect import compile_report
    from ..kernels import registry

    title = EX6[0]
    stages, ring_kib = answered(stages, "stages"), answered(ring_kib, "ring_kib")
    default = gemm_plan.plan_stages(TILE)
    if isinstance(stages, bool) or not isinstance(stages, int) or not 2 <= stages <= default.stages:
        return failed(title, f"stages = {stages!r}: pick a whole number from 2 to "
                      f"{default.stages}. Fewer than 2 leaves the prefetch loop no stage to load "
                      f"ahead into; more than {default.stages} stages of 48 KiB do not fit in the "
                      f"{gemm_plan.SM90_SMEM_BYTES // 1024} KiB of shared memory.")
    mine = gemm_plan.plan_stages(TILE, stages=stages)
    if isinstance(ring_kib, bool) or not isinstance(ring_kib, (int, float)):
        return failed(title, f"ring_kib = {ring_kib!r}: give the ring's size as a number of KiB")
    if ring_kib * 1024 != mine.ring_bytes:
        extra = (" (that counts the barriers too: the ring alone is the stages' A and B tiles)"
                 if ring_kib * 1024 == mine.smem_bytes or round(ring_kib) == round(mine.smem_bytes / 1024)
                 else "")
        return failed(title, f"you predict {ring_kib} KiB for {stages} stages; the ring takes "
                      f"{mine.ring_bytes // 1024} KiB ({mine.bytes_per_stage // 1024} KiB per "
                      f"stage: a 128x64 A tile and a 256x64 B tile, 2 bytes each){extra}")
    rows, seen = [], []
    for n in (stages, default.stages):
        # in a fresh process, as the course's other compile cells: nothing this notebook (or a
        # learner's cell) traced earlier can change what the course kernel compiles to
        rep = compile_report(registry.target("one"), tile=TILE, variant="prefetch", stages=n)
        loop = kc.compact(kc.mainloop(rep).ops())
        seen.append((rep.registers, loop))
        p = gemm_plan.plan_stages(TILE, stages=n)
        rows.append(f"{n} stages: a {p.ring_bytes // 1024} KiB ring ({p.smem_bytes - p.ring_bytes} B "
                    f"of barriers on top: {p.smem_bytes / 1024:.0f} KiB of shared memory asked "
                    f"for), {rep.registers} registers, mainloop {loop}")
    message = (f"right: {stages} stages of {mine.bytes_per_stage // 1024} KiB make a "
               f"{mine.ring_bytes // 1024} KiB ring. Compiled: " + "; ".join(rows) + ".")
    if seen[0] == seen[1]:
        message += " Same code, same registers: only the ring depth changed."
    else:
        message += " The depth changed the code too: compare the two lines above."
    if kc.gpu_here("sm_90a"):
        run = kc.run_on_gpu(None, f"HopperGemm(tile_mn={TILE}, stages={stages})",
                            baseline=f"HopperGemm(tile_mn={TILE})")
        message += " On the GPU: " + run.message
    else:
        message += (" Nothing was timed (no H100 here): what the depth costs, TMA latency no "
                    "longer hidden, shows only in the time an H100 run adds beside the "
                    f"{default.stages}-stage kernel.")
    return passed(title, message)
