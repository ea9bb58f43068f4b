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
