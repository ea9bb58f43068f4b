"""Notebook 08's lab (exercise 3): how many splits of K for a decode step on an MLP weight.

W is 28672 x 8192 (an up-projection), M = 4 tokens. Two warpgroups a CTA, 128 weight rows each:
224 CTAs, more than the 132 SMs. The learner picks ``splits`` and predicts, for splits = 1, 2 and
theirs, the planner's cost (``mixed_input.split_cost``): the k-tiles through the busiest SM (the
CTAs on one SM share its bandwidth) plus one k-tile a split. A wrong count is answered with the
step it missed: waves of CTA slots instead of SMs, the per-split cost, the rounding up. The check
names the planner's choice, compiles the kernel without and with split-K for sm_90a and reads
what split-K adds (registers, the epilogue's fp32 slices and counter), and on a Hopper GPU times
splits = 1, 2, the learner's and the planner's on cold weights, in a child with a timeout.
"""

from __future__ import annotations

from . import Result, failed, passed
from . import kernel_check as kc

EX3 = ("Exercise 3 (lab): how many splits of K at M = 4",
       "the busiest of the 132 SMs holds ceil(CTAs x splits / 132) CTAs (counted as at least 2), each "
       "computing ceil(k-tiles / splits) k-tiles; add one k-tile for each split.")
N, K, M, GROUP = 28672, 8192, 4, 128


def _plan(splits=None):
    from ..kernels import mixed_input as mi

    return mi.plan(M, N, K, GROUP, splits=splits)


def _k_tiles() -> int:
    from ..kernels.hopper_mixed_gemm import TILE_K

    return K // TILE_K


def split_time(splits: int) -> int:
    """The planner's cost of ``splits``, in k-tiles of one SM."""
    from ..kernels import mixed_input as mi

    return mi.split_cost(_plan(splits).ctas, splits, _k_tiles())


def _counts(splits: int) -> tuple[int, int, int]:
    """(CTAs of all splits, CTAs on the busiest SM, k-tiles a CTA)."""
    from ..kernels import mixed_input as mi

    total = _plan(splits).ctas * splits
    return total, max(mi.OVERLAP_CTAS, -(-total // mi.SMS)), -(-_k_tiles() // splits)


def _why(splits: int) -> str:
    from ..kernels import mixed_input as mi

    total, busiest, per_cta = _counts(splits)
    return (f"{_plan(splits).ctas} x {splits} = {total} CTAs on {mi.SMS} SMs: {busiest} on the busiest, each "
            f"{per_cta} of the {_k_tiles()} k-tiles: {busiest * per_cta}, plus {splits} for the "
            f"split{'s' if splits > 1 else ''}: {split_time(splits)}")


def _mistake(splits: int, said) -> str:
    """What a wrong count for ``splits`` missed, in the learner's terms (or "" if nothing known)."""
    from ..kernels import mixed_input as mi
    from ..kernels.hopper_mixed_gemm import HopperMixedGemm

    if isinstance(said, bool) or not isinstance(said, (int, float)):
        return f"write a number of k-tiles, not a {type(said).__name__}. "
    p = _plan(splits)
    total, busiest, per_cta = _counts(splits)
    slots = mi.SMS * mi.ctas_per_sm(HopperMixedGemm(p.tile_m, group_size=GROUP, warpgroups=p.warpgroups))
    waves = -(-total // slots) * per_cta
    if said in (waves, waves + splits) and waves != busiest * per_cta:
        return (f"that counts waves on {slots} CTA slots, as if the CTAs of one SM did not share it: they "
                "share its bandwidth, so count the CTAs the busiest SM works through. ")
    if said == busiest * per_cta:
        return "that is the busiest SM's k-tiles without the fixed cost of each split. "
    spread = total / mi.SMS * per_cta
    if abs(said - spread) < 1 or abs(said - spread - splits) < 1:
        return (f"that spreads the {total} CTAs evenly ({total / mi.SMS:.2f} an SM); the busiest SM holds a whole "
                "number of them, rounded up. ")
    if _k_tiles() % splits and abs(said - busiest * _k_tiles() / splits - splits) < 1:
        return f"{_k_tiles()} k-tiles do not split evenly in {splits}: a CTA computes {per_cta}, rounded up. "
    return ""


def _compiled() -> str:
    """What split-K adds to the compiled kernel (tile_m 8, two warpgroups), read from the PTX."""
    from ..inspect import compile_report

    target = "cutecourse.kernels.mixed_input:compile_target"
    one, split = (compile_report(target, arch="sm_90a", tile_m=8, warpgroups=2, split_k=s) for s in (False, True))
    facts = []
    for name, r in (("without split-K", one), ("with split-K", split)):
        facts.append(f"{name}: {r.registers} registers, {r.count(r'^st[.]global[.]b32')} fp32 stores, "
                     f"{r.count(r'^atom[.]global')} atomics, {r.count(r'^ld[.]global[.]cg')} L2 reads")
    return "; ".join(facts)


@kc.kernel_checker(*EX3)
def check_split_lab(splits, prediction: dict) -> Result:
    """``splits``: your number of splits of K for M = 4 on W 28672 x 8192; ``prediction``: the
    planner's cost, in k-tiles, for splits 1, 2 and yours ({1: ..., 2: ..., splits: ...})."""
    from ..kernels import mixed_input as mi
    from . import answered

    title = EX3[0]
    splits, prediction = answered(splits, "splits"), answered(prediction, "prediction")
    k_tiles = _k_tiles()
    if isinstance(splits, bool) or not isinstance(splits, int) or not 1 <= splits <= mi.MAX_SPLITS:
        return failed(title, f"splits={splits!r}: pick a whole number from 1 to {mi.MAX_SPLITS} (the planner's most)")
    if not isinstance(prediction, dict):
        return failed(title, f"prediction is a {type(prediction).__name__}: write a dict {{1: ..., 2: ..., "
                      f"{splits}: ...}}")
    missing = [s for s in sorted({1, 2, splits}) if s not in prediction]
    if missing:
        return failed(title, f"your prediction has no entry for splits = {missing[0]}: predict 1, 2 and yours")
    for s in prediction:
        if isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= k_tiles:
            return failed(title, f"prediction has splits = {s!r}: K = {K} has {k_tiles} k-tiles, so 1 .. {k_tiles}")
    for s in sorted(prediction):
        if prediction[s] != split_time(s):
            return failed(title, f"for splits = {s} you predicted {prediction[s]!r}: {_mistake(s, prediction[s])}"
                          f"{_why(s)}")
    best = _plan()
    table = ", ".join(f"{s}: {split_time(s)}" for s in range(1, mi.MAX_SPLITS + 1))
    message = (f"your counts are the planner's cost. By splits, in k-tiles: {table}. The planner picks "
               f"{best.splits} (the cheapest, the fewest on a tie); yours, {splits}, costs {split_time(splits)}. "
               f"Compiled for sm_90a: {_compiled()}")
    if not kc.gpu_here("sm_90a"):
        return passed(title, message + ". Nothing was timed here: on an H100 or H200 this check times "
                      f"splits = 1, 2, {splits} and the planner's on cold weights")
    chosen = sorted({1, 2, splits, best.splits})
    run = kc.run_on_gpu(None, "None", runner="cutecourse.exercises.nb08_kernels:split_runner", timeout=300.0,
                        splits=chosen, m=M, n=N, k=K, group=GROUP)
    if not run.ok:
        return failed(title, "the timing run failed on the GPU: " + run.message)
    return passed(title, message + ". On the GPU: " + run.message)
