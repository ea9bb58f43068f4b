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
from ..ptx_loops import loop_structure
from . import Result, answered, checker, failed, passed
from .kernel_check import compact, first, gpu_here, kernel_checker, loops, mainloop, run_on_gpu, wait_group_depths
from .pipeline_checks import REPLAY_RUNS, TILE, hook_exercise, loop_ops, replayed
from .pipeline_replay import replay
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
# Each is a KernelExercise (kernel_check) of a hook of HopperGemm; pipeline_checks holds what the
# mainloop exercises of notebooks 03-05 object to.

EX4 = ("Exercise 4 (kernel): the consumer of the prefetch mainloop",
       "consume: consumer_wait(cons), issue_mma on cons.index, wait_group(1), advance cons, "
       "then (k > 0) release the stage of k-1 (`released`) and advance it; drain: "
       "wait_group(0), then release `released` if there was a k-tile.")


def _consumer_loop(attempt) -> str | None:
    """The CPU replay agreed; the compiled loop must say the same (a Python-level branch can
    make the two differ)."""
    report = attempt.report
    names = loop_ops(report, "write the loop's wgmmas with sm90.issue_mma(mma, cons.index)")
    attempt.notes["seq"] = seq = compact(names)
    wait = first(names, "wait")
    depths = wait_group_depths(mainloop(report).lines)
    mma = first(names, "wgmma")
    arrive, group = first(names, "arrive", mma), first(names, "wait_group", mma)
    if wait < 0 or depths != [1] or arrive < group or \
            wait_group_depths(report.instructions()).count(0) < 1:
        return (f"your loop replays like the course's on the CPU model, but the "
                f"compiled mainloop is {seq}: expected one mbarrier wait, the wgmmas, "
                "wait_group 1, then the release (arrive), and a wait_group 0 after the "
                "loop. Look for a Python-level `if` or constant that the compiler resolved "
                "differently.")
    return None


CONSUMER = hook_exercise(
    *EX4, "prefetch", objections=(replayed(), _consumer_loop),
    passes=lambda a: (f"your mainloop compiles for sm_90a to {a.notes['seq']} per k-tile. On the CPU "
                      f"model it waits, reads and releases the same stage as the course's at every "
                      f"step ({len(COMPARE_RUNS)} ring/problem sizes, an empty problem among them), "
                      "with no hang and no race."))


@CONSUMER.checker
def check_consumer(cls) -> Result:
    """``cls``: your subclass of ``PrefetchParts`` with ``consume`` and ``drain`` written."""
    return CONSUMER.check(cls)


EX5 = ("Exercise 5 (kernel): the producer's prologue",
       "warp 0 alone (if is_producer) loads min(stages - 1, k_tiles) k-tiles: producer_acquire, "
       "self.load, prod.advance() each, then returns prod. Not `stages`: the first refill in "
       "the loop needs a stage that only this same loop releases.")


def _prologue_count(attempt) -> str | None:
    """The counts first: they name this exercise's mistakes."""
    for stages, k_tiles in REPLAY_RUNS:
        t = replay(attempt.answer, stages=stages, k_tiles=k_tiles)
        if t.deadlock or t.hazards:
            break
        wgmma = next((i for i, e in enumerate(t.events) if e.op == "wgmma"), len(t.events))
        loaded = sorted({e.k_tile for e in t.events[:wgmma] if e.op == "tma_load"})
        want = min(stages - 1, k_tiles)
        if len(loaded) < want:
            return (f"with {stages} stages and {k_tiles} k-tiles your prologue loads "
                    f"{len(loaded)} k-tile(s) before the first wgmma; {want} fit without a "
                    "hang, and each one more hides more TMA latency")
    return None


def _prologue_compiled(attempt) -> str | None:
    report = attempt.report
    shape = loop_structure(report.ptx)
    if mainloop(report) is None or not shape.prologue_tma_loads:
        return ("your prologue replays like the course's on the CPU model, but the "
                "compiled kernel issues no TMA load before its mainloop: keep the loads in "
                "a cutlass.range loop (a Python `range` over a run-time k_tiles cannot be "
                "traced)")
    before = [lp for lp in loops(report.ptx) if "wgmma" not in lp.ops() and "tma" in lp.ops()]
    attempt.notes["prologue"] = compact(before[0].ops() if before else ["tma"] * shape.prologue_tma_loads)
    return None


PROLOGUE = hook_exercise(
    *EX5, "prefetch", objections=(_prologue_count, replayed(), _prologue_compiled),
    passes=lambda a: (f"the prologue compiles to a loop of ({a.notes['prologue']}) before the "
                      "mainloop. On the CPU model warp 0 alone acquires and loads the same k-tiles "
                      "into the same stages as the course's, min(stages - 1, k_tiles) of them "
                      f"({len(COMPARE_RUNS)} ring/problem sizes), with no hang and no race."))


@PROLOGUE.checker
def check_prologue(cls) -> Result:
    """``cls``: your subclass of ``PrefetchParts`` whose ``fill_ring`` is your prologue."""
    return PROLOGUE.check(cls)


EX6 = ("Exercise 6 (lab): a ring of fewer stages",
       "one stage holds a 128x64 A tile and a 256x64 B tile of 2-byte elements.")


@kernel_checker(*EX6)
def check_stages_lab(stages, ring_kib) -> Result:
    """Compile the course kernel with ``stages`` beside the default; your ``ring_kib`` prediction
    (the ring's shared memory in KiB) is checked against the kernel's own plan."""
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
        loop = compact(mainloop(rep).ops())
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
    if gpu_here("sm_90a"):
        run = run_on_gpu(None, f"HopperGemm(tile_mn={TILE}, stages={stages})",
                         baseline=f"HopperGemm(tile_mn={TILE})")
        message += " On the GPU: " + run.message
    else:
        message += (" Nothing was timed (no H100 here): what the depth costs, TMA latency no "
                    "longer hidden, shows only in the time an H100 run adds beside the "
                    f"{default.stages}-stage kernel.")
    return passed(title, message)
