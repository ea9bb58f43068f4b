"""Notebook 08's lab (exercise 3): how many splits of K for a decode step on an MLP weight.

W is 28672 x 8192 (an up-projection), M = 4 tokens. 128 weight rows a CTA (64 per warpgroup, two
warpgroups): 224 CTAs, more than the 132 SMs. The learner picks ``splits`` and predicts, for
splits = 1, 2 and theirs, the planner's cost (``mixed_input.split_cost``): the k-tiles through the
busiest SM (the CTAs on one SM share its bandwidth) plus one k-tile a split. A wrong count is
answered with the step it missed (waves of CTA slots instead of SMs, CTAs of one warpgroup,
k-tiles of a scale group, the per-split cost, rounding down or not at all), never with the count
itself. Right counts with another split than the planner's are refused too: the lab asks for
the cheapest split, so the learner predicts more splits until one is. Then the check compiles the
kernel without and with split-K for sm_90a and reads what split-K adds (registers, the
epilogue's fp32 slices and counter); the learner predicts one of those facts, the fp32 stores a
thread adds (its accumulators, written once to its split's slice). On a Hopper GPU the check
times splits = 1, 2 and the planner's on cold weights, in a child with a timeout.
"""

from __future__ import annotations

from . import Result, failed, passed
from . import kernel_check as kc

EX3 = ("Exercise 3 (lab): how many splits of K at M = 4",
       "the slowest SM sets the time. For each split, how many CTAs does the busiest SM hold, how many "
       "k-tiles does each of them compute, and what does a split cost on its own? CTAs and k-tiles "
       "come whole.")
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


#: The steps of the count, without its numbers: what a miss with no known cause is told.
STEPS = ("count it in steps: the CTAs of all splits; the share of the busiest SM (a whole number, "
         "rounded up, at least 2); the k-tiles each of its CTAs computes (a whole number, rounded up); "
         "their product, plus one k-tile a split. ")


def _alternatives(splits: int) -> list[tuple[float, str]]:
    """[(the count a known mistake gives for ``splits``, what it missed in the learner's terms)]."""
    from ..kernels import mixed_input as mi
    from ..kernels.hopper_mixed_gemm import HopperMixedGemm, TILE_K

    p = _plan(splits)
    total, busiest, per_cta = _counts(splits)
    k_tiles = _k_tiles()
    slots = mi.SMS * mi.ctas_per_sm(HopperMixedGemm(p.tile_m, group_size=GROUP, warpgroups=p.warpgroups))
    waves = -(-total // slots) * per_cta
    rows = GROUP // 2  # a learner who takes a CTA for one warpgroup of 64 rows
    return [
        (waves, f"that counts waves on {slots} CTA slots, as if the CTAs of one SM did not share it: they "
                "share its bandwidth, so count the CTAs the busiest SM works through. "),
        (waves + splits, f"that counts waves on {slots} CTA slots, as if the CTAs of one SM did not share it: "
                         "they share its bandwidth, so count the CTAs the busiest SM works through. "),
        (mi.split_cost(2 * p.ctas, splits, k_tiles),
         f"that counts CTAs of {rows} weight rows, one warpgroup's: a CTA has two warpgroups, 128 rows, "
         f"so a split has {p.ctas} CTAs. "),
        (mi.split_cost(p.ctas, splits, K // GROUP),
         f"that counts k-tiles of {GROUP} columns, a scale group's: a k-tile is {TILE_K} columns of K. "),
        (busiest * per_cta, "that is the busiest SM's k-tiles without the fixed cost of each split. "),
        (busiest * per_cta + 1, "each split pays its own k-tile (its start, its fp32 slice, the reduction): "
                                "add one a split, not one in all. "),
        (total / mi.SMS * per_cta, f"that spreads the CTAs evenly ({total / mi.SMS:.2f} an SM); the busiest SM "
                                   "holds a whole number of them, rounded up. "),
        (total / mi.SMS * per_cta + splits, f"that spreads the CTAs evenly ({total / mi.SMS:.2f} an SM); the "
                                            "busiest SM holds a whole number of them, rounded up. "),
        (max(mi.OVERLAP_CTAS, total // mi.SMS) * per_cta + splits,
         "that rounds the CTAs an SM down: some SMs hold one more than the even share, and the busiest "
         "sets the time. "),
        ((total // mi.SMS) * per_cta + splits,
         "that rounds the CTAs an SM down: some SMs hold one more than the even share, and the busiest "
         "sets the time. "),
        (busiest * k_tiles / splits + splits,
         f"{k_tiles} k-tiles do not split evenly in {splits}: a CTA computes a whole number of them, "
         "rounded up. "),
    ]


def _mistake(splits: int, said) -> str:
    """What a wrong count for ``splits`` missed, in the learner's terms; never the count itself."""
    from ..kernels import mixed_input as mi

    if isinstance(said, bool) or not isinstance(said, (int, float)):
        return f"write a number of k-tiles, not a {type(said).__name__}. "
    right = split_time(splits)
    whys = []
    for count, why in _alternatives(splits):  # a fractional count is matched within 1 (54.3: 54 or 55)
        if count != right and abs(said - count) < (0.5 if count == int(count) else 1) and why not in whys:
            whys.append(why)
    if whys:
        return "; or ".join(w.rstrip(". ") for w in whys) + ". "
    others = [s for s in range(1, mi.MAX_SPLITS + 1) if s != splits and split_time(s) == said]
    if others:
        return f"that is the count for splits = {others[0]}: is it in the right entry? "
    return STEPS


FP32_STORE = r"^st[.]global[.]b32"


def _reports():
    """The kernel as the planner runs M = 4 (tile_m 8, two warpgroups), compiled without and with
    split-K for sm_90a."""
    from ..inspect import compile_report

    target = "cutecourse.kernels.mixed_input:compile_target"
    return tuple(compile_report(target, arch="sm_90a", tile_m=8, warpgroups=2, split_k=s) for s in (False, True))


def added_stores() -> int:
    """The fp32 stores a thread's PTX gains with split-K: read from the two compiles."""
    one, split = _reports()
    return split.count(FP32_STORE) - one.count(FP32_STORE)


def _compiled() -> str:
    """What split-K adds to the compiled kernel (tile_m 8, two warpgroups), read from the PTX."""
    facts = []
    for name, r in zip(("without split-K", "with split-K"), _reports()):
        facts.append(f"{name}: {r.registers} registers, {r.count(FP32_STORE)} fp32 stores, "
                     f"{r.count(r'^atom[.]global')} atomics, {r.count(r'^ld[.]global[.]cg')} L2 reads")
    return "; ".join(facts)


def _stores_mistake(stores) -> str | None:
    """None if ``stores`` is the fp32 stores split-K adds to a thread's PTX, else what to count."""
    if isinstance(stores, bool) or not isinstance(stores, int):
        return f"stores={stores!r}: write a whole number, the fp32 stores one thread's code gains"
    if stores == added_stores():
        return None
    return (f"stores={stores}: not what the compile shows. A split writes its sums once into its fp32 "
            "slice, each thread its own accumulators: a warpgroup's tile is 64 weight rows x tile_m 8 "
            "tokens, over its 128 threads. Count a thread's share (the store loop is unrolled)")


@kc.kernel_checker(*EX3)
def check_split_lab(splits, prediction: dict, stores=None) -> Result:
    """``splits``: your number of splits of K for M = 4 on W 28672 x 8192, the planner's choice;
    ``prediction``: the planner's cost, in k-tiles, for splits 1, 2 and yours ({1: ..., 2: ...,
    splits: ...}; more entries welcome); ``stores``: the fp32 stores split-K adds to one
    thread's compiled code (tile_m 8, two warpgroups)."""
    from ..kernels import mixed_input as mi
    from . import answered

    title = EX3[0]
    splits, prediction = answered(splits, "splits"), answered(prediction, "prediction")
    most = mi.MAX_SPLITS
    if isinstance(splits, bool) or not isinstance(splits, int) or not 1 <= splits <= most:
        return failed(title, f"splits={splits!r}: pick a whole number from 1 to {most} (the planner's most)")
    if not isinstance(prediction, dict):
        return failed(title, f"prediction is a {type(prediction).__name__}: write a dict {{1: ..., 2: ..., "
                      f"{splits}: ...}}")
    missing = [s for s in sorted({1, 2, splits}) if s not in prediction]
    if missing:
        return failed(title, f"your prediction has no entry for splits = {missing[0]}: predict 1, 2 and yours")
    for s in prediction:
        if isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= most:
            return failed(title, f"prediction has splits = {s!r}: the planner weighs 1 to {most} splits")
    for s in sorted(prediction):
        if prediction[s] != split_time(s):
            return failed(title, f"for splits = {s} you predicted {prediction[s]!r}: "
                          + _mistake(s, prediction[s]).rstrip())
    best = _plan()
    if splits != best.splits:
        if best.splits in prediction:
            why = (f"by your own counts {best.splits} splits cost {split_time(best.splits)}, "
                   f"{'as little' if split_time(best.splits) == split_time(splits) else 'less'}")
        else:
            why = "another number of splits costs less by the same count, or as little with fewer splits"
        return failed(title, f"your counts are the planner's, but splits = {splits} ({split_time(splits)} "
                      f"k-tiles) is not its choice: {why}. The planner takes the cheapest of 1 to {most}, the "
                      "fewest on a tie: add the splits you have not counted to prediction and choose again")
    if stores is None:
        return failed(title, "your counts are the planner's and its choice: now predict stores, the fp32 "
                      "stores split-K adds to one thread's code, and run the check again")
    if (why := _stores_mistake(stores)):
        return failed(title, why)
    table = ", ".join(f"{s}: {split_time(s)}" for s in range(1, most + 1))
    timed = sorted({1, 2, best.splits})
    message = (f"your counts are the planner's cost and {splits} is its choice, the cheapest (the fewest on a "
               f"tie). By splits, in k-tiles: {table}. Your {stores} fp32 stores a thread are the compile's. "
               f"Compiled for sm_90a: {_compiled()}")
    if not kc.gpu_here("sm_90a"):
        return passed(title, message + ". Nothing was timed here: on an H100 or H200 this check times "
                      f"splits = {', '.join(map(str, timed))} on cold weights (the model is a guide; the "
                      "GPU is the judge)")
    run = kc.run_on_gpu(None, "None", runner="cutecourse.exercises.nb08_kernels:split_runner", timeout=300.0,
                        splits=timed, m=M, n=N, k=K, group=GROUP)
    if not run.ok:
        return failed(title, "the timing run failed on the GPU: " + run.message)
    return passed(title, message + ". On the GPU: " + run.message)
