"""Notebook 07's lab (exercise 11): one k-tile's product in flight instead of two, and the turns.

The learner predicts four counts in the one-part kernel's PTX and picks ``turns``. The check
compiles the kernel for sm_90a on the CPU, compares the counts, and reads from the PTX what the
three ``turns`` change (the course kernel, and two variants overriding its turn hooks,
``nb07_kernels.TURNS``): where, in the loop body, a warpgroup waits for its turn (``bar.sync`` on
a named barrier whose number is a run-time value: ``MMA_TURN + wg``) and where it passes the turn
(``bar.arrive``), against the wgmmas, the ``wait_group 0`` and the FFMAs. The counts are the same
for all three; the order is not. How much each order buys is a time: only an H100 measures it.
"""

from __future__ import annotations

import re

from . import Result, failed, passed
from . import kernel_check as kc

EX11 = ("Exercise 11 (lab): one part instead of two",
        "with one part each k-tile is issued, waited for with wait_group(0) and promoted, all in "
        "one loop body: one issue site, one wait, one promotion of 64 FFMAs per thread.")
#: What a learner predicts for the one-part kernel, and the PTX pattern that counts it.
PREDICTED = {"wgmma": r"^wgmma\.mma_async", "wait_group 1": r"^wgmma\.wait_group\.sync\.aligned\s+1",
             "wait_group 0": r"^wgmma\.wait_group\.sync\.aligned\s+0", "ffma": r"^fma\.rn\.f32"}
_MODULE = "__import__('cutecourse.exercises.nb07_kernels', fromlist=['nb07_kernels'])"
_WHY = {"wgmma": "one loop body issues one k-tile: 4 wgmmas (m64n128k32 covers 32 of the k-tile's "
                 "128), one site",
        "wait_group 1": "with one part nothing else is in flight to keep: there is no wait_group(1)",
        "wait_group 0": "each k-tile is waited for in full before its promotion: one wait_group(0), "
                        "in the loop",
        "ffma": "one promotion site: 64 x 128 / 128 = 64 FFMAs per thread"}
_TURN_SAYS = {None: "no turn barriers: the two warpgroups issue whenever their stage is full, and "
                    "tend to promote at the same time",
              "issue": "the turn passes as soon as the wgmmas are issued, before the wait: the "
                       "other warpgroup issues its batch while these run, and each promotes while "
                       "the other's batch runs",
              "done": "the turn passes only after wait_group(0): strict alternation, with a "
                      "hand-over gap (the barrier, then the other's issue) per batch"}


def loop_order(ptx: str) -> list[str]:
    """The one-part loop body's steps in PTX order: "wait for my turn" (``bar.sync`` on a named
    barrier chosen at run time), "wgmma xN", "pass the turn" (``bar.arrive`` likewise),
    "wait_group 0", "FFMA xN"; from the first wgmma's turn (or the wgmma itself) to its FFMAs."""
    steps: list[str] = []
    for line in (raw.strip() for raw in ptx.splitlines()):
        if line.startswith("wgmma.mma_async"):
            step = "wgmma"
        elif line.startswith("wgmma.wait_group"):
            step = "wait_group " + re.sub(r"\D", "", line.split()[-1])
        elif re.match(r"^bar(rier)?\.sync\s+%r", line):
            step = "wait for my turn"
        elif re.match(r"^bar(rier)?\.arrive\s+%r", line):
            step = "pass the turn"
        elif line.startswith("fma.rn.f32"):
            step = "FFMA"
        else:
            continue
        if steps and steps[-1].split(" x")[0] == step and step in ("wgmma", "FFMA"):
            n = int(steps[-1].split(" x")[1]) if " x" in steps[-1] else 1
            steps[-1] = f"{step} x{n + 1}"
        else:
            steps.append(step)
    start = next(i for i, s in enumerate(steps) if s.startswith("wgmma"))
    if start and steps[start - 1] == "wait for my turn":
        start -= 1
    end = next(i for i in range(start, len(steps)) if steps[i].startswith("FFMA"))
    return steps[start:end + 1]


@kc.kernel_checker(*EX11)
def check_one_part_lab(turns, prediction: dict) -> Result:
    """Compile the FP8 kernel with one part (``turns``: None, "issue" or "done") beside the
    course's two; ``prediction``: your counts for the one-part kernel (keys of ``PREDICTED``)."""
    from . import answered
    from .nb07_kernels import TURNS, course_facts, course_report

    title = EX11[0]
    prediction = answered(prediction, "prediction")
    if turns not in TURNS:
        return failed(title, f"turns={turns!r}: pick one of {list(TURNS)}")
    if not isinstance(prediction, dict):
        return failed(title, f"prediction is a {type(prediction).__name__}: write a dict, "
                      f"{{{', '.join(repr(k) + ': ...' for k in PREDICTED)}}}")
    missing = [k for k in PREDICTED if k not in prediction]
    if missing:
        return failed(title, f"your prediction has no {', '.join(map(repr, missing))}: predict "
                      f"every count of {list(PREDICTED)}")
    one = course_report("one part", turns)
    two = course_facts("fp8")
    got = {k: one.count(rx) for k, rx in PREDICTED.items()}
    wrong = [k for k in PREDICTED if prediction[k] != got[k]]
    table = ", ".join(f"{k}: {got[k]} (two parts: {two[k]})" for k in PREDICTED)
    if wrong:
        k = wrong[0]
        also = f" (also wrong: {', '.join(wrong[1:])})" if wrong[1:] else ""
        return failed(title, f"you predicted {k} = {prediction[k]!r}, the compiled one-part kernel "
                      f"has {got[k]}: {_WHY[k]}{also}. Counts: {table}")
    order = " -> ".join(loop_order(one.ptx))
    message = (f"your counts match the PTX of the one-part kernel, turns={turns!r}: {table}; "
               f"{one.registers} registers (two parts: {two['registers']}). Its loop body, read "
               f"from the PTX: {order}: {_TURN_SAYS[turns]}. The other two turns compile to the "
               "same counts; what differs is this order, and the time it costs")
    if not kc.gpu_here("sm_90a"):
        return passed(title, message + ". Nothing was timed here (no H100): on one, this check "
                      "runs the one-part kernel against the recipe's reference on 8 experts and "
                      "times it beside the two-part kernel, the only place the turns differ in speed")
    run = kc.run_on_gpu(None, f"{_MODULE}.one_part({turns!r})", baseline=f"{_MODULE}.course_fp8()",
                        runner="cutecourse.exercises.nb07_gpu:fp8_runner")
    if not run.ok:
        return failed(title, "the one-part kernel failed on the GPU: " + run.message)
    return passed(title, message + ". On the GPU: " + run.message)
