"""Notebook 07's kernel exercises: the learner writes one piece of a course kernel.

* Exercise 9 (kernel), the group search: ``find_group(groups, work, group, first)``, the function
  the grouped kernels' walk calls for each work item (``kernels/group_walk.py``), inside the
  course's bf16 grouped kernel (:class:`SearchHook`);
* Exercise 10 (kernel), the FP8 promotion step: ``promote(ring, release, acc, part, sa, sb)``,
  what the FP8 kernel's mainloop calls once a k-tile's wgmmas are done
  (``kernels/hopper_grouped_gemm_fp8.py``), inside that kernel (:class:`PromotionHook`);
* Exercise 11 (lab): one k-tile's product in flight instead of two (``parts=1``).

Each kernel exercise is checked as ``kernel_check``'s manual says: compiled for sm_90a on the CPU
(a compile error names the learner's line), the learner's function run on numbers by a CPU model
(:mod:`cutecourse.exercises.cpu_run`: the search against ``models/group_scheduler``, the
promotion against ``acc + part * sa * sb``), facts read from the PTX beside the course kernel's,
and on an H100 the learner's kernel run against torch in a child process with a timeout (a
search that never ends hangs the GPU) and timed beside the course kernel.

The hooks replace the course's function for the duration of the learner kernel's trace only
(``_replaced``), so the rest of the kernel is the course's own code.
"""

from __future__ import annotations

import contextlib
import functools

from ..kernels import group_walk
from ..kernels import hopper_grouped_gemm_fp8 as hg8
from ..kernels.hopper_grouped_gemm import GroupedHopperGemm
from . import Result, failed, passed
from . import kernel_check as kc
from .cpu_run import CpuModelError, CpuModelSkipped, run_promote, run_search

#: The tiles of the kernels the learner's hooks go into (the course's defaults).
BF16_TILE, FP8_TILE = (128, 256), (128, 128)
SMS = 132
_MODULE = "__import__('cutecourse.exercises.nb07_kernels', fromlist=['nb07_kernels'])"


@contextlib.contextmanager
def _replaced(module, name: str, fn):
    """``module.name`` is ``fn`` while the block runs (at trace time: the compiled kernel calls
    ``fn`` where the course's code calls ``module.name``)."""
    real = getattr(module, name)
    setattr(module, name, fn)
    try:
        yield
    finally:
        setattr(module, name, real)


class SearchHook(GroupedHopperGemm):
    """The course's bf16 grouped kernel whose group walk calls ``search`` (the learner's
    ``find_group``) instead of ``group_walk.find_group``. The walk is traced inside ``launch``."""

    search = None

    def launch(self, *args, **kwargs):
        with _replaced(group_walk, "find_group", type(self).search):
            return super().launch(*args, **kwargs)


class PromotionHook(hg8.BlockScaledGroupedHopperGemm):
    """The course's FP8 kernel whose mainloop calls ``promote`` (the learner's) instead of
    ``_promote``: the rest of the mainloop, the wgmmas, waits and scale loads are the course's."""

    promote = None

    def mainloop(self, *args, **kwargs):
        with _replaced(hg8, "_promote", type(self).promote):
            return super().mainloop(*args, **kwargs)


def with_search(fn, sms: int = SMS) -> SearchHook:
    """The course's grouped kernel with ``fn`` as its group search."""
    cls = type("YourSearch", (SearchHook,), {"search": staticmethod(fn)})
    return cls(tile_mn=BF16_TILE, cluster_mn=(1, 1), sms=sms)


def with_promote(fn, sms: int = SMS) -> PromotionHook:
    """The course's FP8 kernel with ``fn`` as its promotion step."""
    cls = type("YourPromotion", (PromotionHook,), {"promote": staticmethod(fn)})
    return cls(tile_mn=FP8_TILE, cluster_mn=(1, 1), sms=sms)


def bf16_args(kernel):
    """Compile arguments of the grouped bf16 kernel (fake operands and metadata)."""
    from ..kernels.grouped_targets import _hopper_arguments

    return _hopper_arguments(kernel, "bfloat16", "bfloat16", 3)


def fp8_args(kernel):
    """Compile arguments of the FP8 kernel (e4m3 operands, bf16 C, five metadata columns)."""
    from ..kernels.grouped_targets import _hopper_arguments

    return _hopper_arguments(kernel, "float8_e4m3fn", "bfloat16", 5)


@functools.lru_cache(maxsize=None)
def course_facts(which: str) -> dict:
    """Counts in the course kernel's own PTX, to hold the learner's beside (compiled once)."""
    from ..inspect import compile_report

    return facts(compile_report("cutecourse.exercises.nb07_kernels:target", arch="sm_90a", which=which))


def target(which: str, turns=None):
    """(kernel, fake arguments) of a course kernel, for ``inspect.compile_report``: ``"bf16"``
    (the grouped kernel of exercise 9), ``"fp8"`` (the FP8 kernel of exercise 10), ``"one part"``
    (exercise 11's, with ``turns``)."""
    if which == "bf16":
        kernel = GroupedHopperGemm(tile_mn=BF16_TILE, cluster_mn=(1, 1), sms=SMS)
        return kernel, bf16_args(kernel)
    kernel = course_fp8() if which == "fp8" else one_part(turns)
    return kernel, fp8_args(kernel)


def facts(report) -> dict:
    return {"ffma": report.count(r"^fma\.rn\.f32"), "mul": report.count(r"^mul\.f32"),
            "add": report.count(r"^add\.f32"), "arrive": report.count(r"^mbarrier\.arrive(?!\.expect_tx)"),
            "wait_group 0": report.count(r"^wgmma\.wait_group\.sync\.aligned\s+0"),
            "wait_group 1": report.count(r"^wgmma\.wait_group\.sync\.aligned\s+1"),
            "wgmma": report.count(r"^wgmma\.mma_async"), "registers": report.registers,
            "spills": report.spill_bytes, "loops": len(kc.loops(report.ptx))}


def early_exit(code) -> str | None:
    """A ``break``, ``continue`` or ``return`` inside a loop of the learner's code, named by its
    line: the DSL compiles a loop over a run-time condition as a whole and refuses them (its own
    message does not say where)."""
    import ast

    for seg in code.segments:
        tree = ast.parse(seg.text)
        for loop in ast.walk(tree):
            unrolled = isinstance(loop, ast.For) and isinstance(loop.iter, ast.Call) and \
                getattr(loop.iter.func, "attr", "") == "range_constexpr"  # a Python loop at trace time
            if not isinstance(loop, (ast.While, ast.For)) or unrolled:
                continue
            for node in ast.walk(loop):
                if isinstance(node, (ast.Break, ast.Continue, ast.Return)):
                    word = type(node).__name__.lower()
                    where = code.describe(seg.filename, seg.first + node.lineno - 1)
                    return (f"your {code.name} does not compile: {where}: a `{word}` inside a "
                            "loop. The DSL compiles a loop over a run-time value as one piece, "
                            "with no early exit: carry a flag in the loop's condition instead")
    return None


def _gpu(code, expr: str, runner: str, title: str, message: str, baseline: str, hang: str = "") -> Result:
    return kc.gpu_verdict(code, expr, title, message, "no H100 here: on one, this check also runs "
                          "your kernel against torch and times it beside the course's",
                          hang=hang, baseline=baseline, runner=runner)


# -- Exercise 9 (kernel): the group search --------------------------------------------------------
#: The hints nudge, never hand over the code: a learner sees them on an untouched stub too.
EX9 = ("Exercise 9 (kernel): the group search",
       "resume from `group` and `first`; an item belongs to group g while work < first + its "
       "items, so pass over every group it lies beyond (empty ones too), and stop at "
       "groups.count. The DSL has no `break` in a run-time loop: carry a flag in the `while`.")


@kc.kernel_checker(*EX9)
def check_search(fn) -> Result:
    """``fn``: your ``@cute.jit`` ``find_group(groups, work, group, first) -> (group, first)``."""
    title = EX9[0]
    code = kc.LearnerCode(fn)
    expr = f"{_MODULE}.with_search({fn.__name__})"
    if code.unanswered:
        raise NotImplementedError  # @checker: "not answered yet"
    exit_ = early_exit(code)
    if exit_:
        return failed(title, exit_)
    try:  # the CPU model first: an instant verdict on the logic
        verdict = run_search(code, fn.__name__)
    except CpuModelError as e:
        return failed(title, str(e))
    except CpuModelSkipped as e:
        return failed(title, f"your search calls a GPU-only operation ({e}): the search reads "
                      "the groups' shapes and adds; it needs no barrier, wait or copy")
    if verdict:
        return failed(title, verdict)
    report = kc.compile_kernel(code, expr, args="cutecourse.exercises.nb07_kernels:bf16_args")
    mine, course = facts(report), course_facts("bf16")
    message = (f"your search compiles for sm_90a into the course's grouped kernel ({mine['registers']} "
               f"registers, {mine['loops']} loops; the course kernel: {course['registers']}, "
               f"{course['loops']}) and, on the CPU model, finds every work item's group on "
               "grouped problems with empty groups, resuming where it stopped.")
    return _gpu(code, expr, "cutecourse.exercises.nb07_gpu:search_runner", title, message,
                f"{_MODULE}.GroupedHopperGemm(tile_mn={BF16_TILE}, cluster_mn=(1, 1), sms={SMS})",
                hang="the walk ends only when your search returns group = groups.count for an item "
                     "past the last group; on the GPU it never did")


# -- Exercise 10 (kernel): the FP8 promotion step -------------------------------------------------
EX10 = ("Exercise 10 (kernel): the FP8 promotion step",
        "free the stage once (the wgmmas that read it are done), then give each register one "
        "fused multiply-add; registers take constant indices only (cutlass.range_constexpr). "
        "Which product is the same for every register of a row?")


@kc.kernel_checker(*EX10)
def check_promote(fn) -> Result:
    """``fn``: your ``@cute.jit`` ``promote(ring, release, acc, part, sa, sb)``."""
    title = EX10[0]
    code = kc.LearnerCode(fn)
    expr = f"{_MODULE}.with_promote({fn.__name__})"
    if code.unanswered:
        raise NotImplementedError  # @checker: "not answered yet"
    try:  # the CPU model first: an instant verdict on the arithmetic
        verdict = run_promote(code, fn.__name__)
    except CpuModelError as e:
        return failed(title, str(e))
    except CpuModelSkipped:
        verdict = None  # a device-only call (a wait, a barrier): the PTX counts below judge it
    if verdict:
        return failed(title, verdict)
    report = kc.compile_kernel(code, expr, args="cutecourse.exercises.nb07_kernels:fp8_args")
    mine, course = facts(report), course_facts("fp8")
    if mine["wait_group 0"] > course["wait_group 0"]:
        return failed(title, f"your promotion waits for every wgmma ({mine['wait_group 0']} "
                      f"wait_group 0 in the PTX, the course kernel {course['wait_group 0']}): then "
                      "k-tile k + 1's wgmmas no longer run under k's FFMAs. The mainloop already "
                      "waited for this k-tile (wait_group(1)) before calling you: wait for nothing")
    if mine["arrive"] != course["arrive"]:
        return failed(title, f"your kernel has {mine['arrive']} mbarrier arrivals where the "
                      f"course's has {course['arrive']}: free the k-tile's stage exactly once per "
                      "promotion, with ring.consumer_release(release)")
    if mine["ffma"] < course["ffma"] and mine["loops"] > course["loops"]:
        return failed(title, f"your promotion compiles to a run-time loop ({mine['ffma']} FFMAs in "
                      f"the PTX, the course kernel {course['ffma']}): a register array indexed by a "
                      "run-time value cannot stay in registers. Loop with "
                      "cutlass.range_constexpr(cute.size(part)), which the compiler unrolls")
    if mine["ffma"] < course["ffma"]:
        return failed(title, f"your kernel has {mine['ffma']} FFMAs where the course's has "
                      f"{course['ffma']} (64 per promotion, 5 promotion sites): add each register "
                      "as one fused multiply-add, acc[i] + part[i] * scale")
    if mine["mul"] > course["mul"]:
        return failed(title, f"your promotion costs two instructions per register: {mine['mul']} "
                      f"mul.f32 beside the FFMAs (the course kernel: {course['mul']}). part[i] * "
                      "sa[i] * sb (or part * sa * sb) multiplies left to right; write part[i] * (sa[i] * sb): a row's "
                      "sa[i] * sb is the same for all its registers, and the compiler computes it "
                      "once per row (2 per thread)")
    if mine["spills"]:
        return failed(title, f"your kernel spills {mine['spills']} bytes of registers to local "
                      "memory: keep the promotion to the FFMAs into acc")
    message = (f"your promotion compiles for sm_90a to {mine['ffma']} FFMAs and {mine['mul']} "
               f"multiplies of scales (the course kernel: {course['ffma']}, {course['mul']}), "
               f"{mine['registers']} registers, no spills, and on the CPU model adds part * sa * sb "
               "into acc and frees the ring stage once.")
    return _gpu(code, expr, "cutecourse.exercises.nb07_gpu:promote_runner", title, message,
                f"{_MODULE}.course_fp8()",
                hang="the producer waits for a stage your promotion never frees: one "
                     "ring.consumer_release(release) per k-tile")


# -- Exercise 11 (lab): one k-tile in flight instead of two ---------------------------------------
EX11 = ("Exercise 11 (lab): one part instead of two",
        "with one part each k-tile is issued, waited for with wait_group(0) and promoted, all in "
        "one loop body: one issue site, one wait, one promotion of 64 FFMAs per thread.")
#: What a learner predicts for the one-part kernel, and the PTX pattern that counts it.
PREDICTED = {"wgmma": r"^wgmma\.mma_async", "wait_group 1": r"^wgmma\.wait_group\.sync\.aligned\s+1",
             "wait_group 0": r"^wgmma\.wait_group\.sync\.aligned\s+0", "ffma": r"^fma\.rn\.f32"}


@kc.kernel_checker(*EX11)
def check_one_part_lab(turns, prediction: dict) -> Result:
    """Compile the FP8 kernel with one part (``turns``: None, "issue" or "done") beside the
    course's two; ``prediction``: your counts for the one-part kernel (keys of ``PREDICTED``)."""
    from ..inspect import compile_report
    from ..kernels.hopper_grouped_gemm_fp8_onepart import TURNS
    from . import answered

    title = EX11[0]
    prediction = answered(prediction, "prediction")
    if turns not in TURNS:
        return failed(title, f"turns={turns!r}: pick one of {list(TURNS)}")
    missing = [k for k in PREDICTED if k not in prediction]
    if missing:
        return failed(title, f"your prediction has no {', '.join(map(repr, missing))}: predict "
                      f"every count of {list(PREDICTED)}")
    one = compile_report("cutecourse.exercises.nb07_kernels:target", arch="sm_90a", which="one part", turns=turns)
    two = course_facts("fp8")
    got = {k: one.count(rx) for k, rx in PREDICTED.items()}
    wrong = {k: v for k, v in got.items() if prediction[k] != v}
    table = ", ".join(f"{k}: {got[k]} (two parts: {two[k]})" for k in PREDICTED)
    if wrong:
        k = next(iter(wrong))
        why = {"wgmma": "one loop body issues one k-tile: 4 wgmmas (m64n128k32 covers 32 of the "
                        "k-tile's 128), one site",
               "wait_group 1": "with one part nothing else is in flight to keep: there is no "
                               "wait_group(1)",
               "wait_group 0": "each k-tile is waited for in full before its promotion: one "
                               "wait_group(0), in the loop",
               "ffma": "one promotion site: 64 x 128 / 128 = 64 FFMAs per thread"}[k]
        return failed(title, f"you predicted {k} = {prediction[k]}, the compiled one-part kernel "
                      f"has {got[k]}: {why}. Counts: {table}")
    message = (f"one part, turns={turns!r}: {table}; {one.registers} registers (two parts: "
               f"{two['registers']}). The tensor cores now idle during each promotion unless the "
               "other warpgroup's wgmmas run then: what `turns` arranges.")
    if kc.gpu_here("sm_90a"):
        run = kc.run_on_gpu(None, f"{_MODULE}.one_part({turns!r})",
                            baseline=f"{_MODULE}.course_fp8()",
                            runner="cutecourse.exercises.nb07_gpu:fp8_runner")
        message += " On the GPU: " + run.message
    return passed(title, message)


def one_part(turns):
    """The course's one-part FP8 kernel at 128x128 with ``turns``."""
    from ..kernels.hopper_grouped_gemm_fp8_onepart import OnePartBlockScaledGroupedHopperGemm

    return OnePartBlockScaledGroupedHopperGemm(tile_mn=FP8_TILE, cluster_mn=(1, 1), sms=SMS, turns=turns)


def course_fp8():
    """The course's FP8 kernel at 128x128, 1x1: the baseline of exercises 10 and 11."""
    return hg8.BlockScaledGroupedHopperGemm(tile_mn=FP8_TILE, cluster_mn=(1, 1), sms=SMS)
