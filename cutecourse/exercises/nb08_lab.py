"""Notebook 08's lab (exercise 3): how many splits of K for a decode step on an MLP weight.

W is 28672 x 8192 (an up-projection), M = 4 tokens. Two warpgroups a CTA, 128 weight rows each:
224 CTAs, more than the 132 SMs, fewer than the 396 CTA slots (3 CTAs an SM). The learner picks
``splits`` and predicts, for splits = 1, 2 and theirs, the k-tiles the slowest CTA slot works
through (``mixed_input.split_cost``: waves of CTAs, a partial last one costing a whole one, times
k-tiles a CTA). The check compares, names the planner's choice, compiles the kernel without and
with split-K for sm_90a and reads what split-K adds (registers, stages, the epilogue's fp32
slices and counter), and on a Hopper GPU times splits = 1, 2, the learner's and the planner's on
cold weights, in a child with a timeout.
"""

from __future__ import annotations

from . import Result, failed, passed
from . import kernel_check as kc

EX3 = ("Exercise 3 (lab): how many splits of K at M = 4",
       "a wave is one CTA per slot (132 SMs x 3); the last, partial wave costs a whole one; each CTA "
       "of a split works ceil(k-tiles / splits) k-tiles.")
N, K, M, GROUP = 28672, 8192, 4, 128


def _plan(splits=None):
    from ..kernels import mixed_input as mi

    return mi.plan(M, N, K, GROUP, splits=splits)


def _slots() -> int:
    """CTA slots of the GPU the planner assumes: 132 SMs x the CTAs that fit one SM's smem."""
    from ..kernels import mixed_input as mi
    from ..kernels.hopper_mixed_gemm import HopperMixedGemm

    p = _plan(1)
    return mi.SMS * mi.ctas_per_sm(HopperMixedGemm(p.tile_m, group_size=GROUP, warpgroups=p.warpgroups))


def slowest_slot(splits: int) -> int:
    """k-tiles of the slowest CTA slot with ``splits`` (the planner's cost)."""
    from ..kernels import mixed_input as mi
    from ..kernels.hopper_mixed_gemm import TILE_K

    return mi.split_cost(_plan(splits).ctas, splits, -(-K // TILE_K), _slots())


def _why(splits: int) -> str:
    from ..kernels.hopper_mixed_gemm import TILE_K

    p = _plan(splits)
    slots = _slots()
    waves, per_cta = -(-p.ctas * splits // slots), -(-(K // TILE_K) // splits)
    return (f"{p.ctas} x {splits} = {p.ctas * splits} CTAs on {slots} slots: {waves} wave{'s' if waves > 1 else ''}, each CTA "
            f"{per_cta} of the {K // TILE_K} k-tiles: {waves * per_cta}")


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
    slowest slot's k-tiles for splits 1, 2 and yours ({1: ..., 2: ..., splits: ...})."""
    from ..kernels.hopper_mixed_gemm import TILE_K
    from . import answered

    title = EX3[0]
    splits, prediction = answered(splits, "splits"), answered(prediction, "prediction")
    k_tiles = K // TILE_K
    if not isinstance(splits, int) or not 1 <= splits <= 8:
        return failed(title, f"splits={splits!r}: pick a whole number from 1 to 8 (the planner's most)")
    if not isinstance(prediction, dict):
        return failed(title, f"prediction is a {type(prediction).__name__}: write a dict {{1: ..., 2: ..., "
                      f"{splits}: ...}}")
    missing = [s for s in sorted({1, 2, splits}) if s not in prediction]
    if missing:
        return failed(title, f"your prediction has no entry for splits = {missing[0]}: predict 1, 2 and yours")
    for s in sorted(prediction):
        got = slowest_slot(s) if isinstance(s, int) and 1 <= s <= k_tiles else None
        if got is None:
            return failed(title, f"prediction has splits = {s!r}: K = {K} has {k_tiles} k-tiles, so 1 .. {k_tiles}")
        if prediction[s] != got:
            return failed(title, f"for splits = {s} you predicted {prediction[s]!r} k-tiles on the slowest "
                          f"slot; {_why(s)}")
    best = _plan()
    table = ", ".join(f"{s}: {slowest_slot(s)}" for s in range(1, 9))
    message = (f"your counts are the planner's cost. Slowest slot, k-tiles, by splits: {table}. The "
               f"planner picks {best.splits} (the cheapest, the fewest on a tie); yours, {splits}, costs "
               f"{slowest_slot(splits)}. Compiled for sm_90a: {_compiled()}")
    if not kc.gpu_here("sm_90a"):
        return passed(title, message + ". Nothing was timed here: on an H100 or H200 this check times "
                      f"splits = 1, 2, {splits} and the planner's on cold weights")
    chosen = sorted({1, 2, splits, best.splits})
    run = kc.run_on_gpu(None, "None", runner="cutecourse.exercises.nb08_kernels:split_runner", timeout=300.0,
                        splits=chosen, m=M, n=N, k=K, group=GROUP)
    if not run.ok:
        return failed(title, "the timing run failed on the GPU: " + run.message)
    return passed(title, message + ". On the GPU: " + run.message)
