"""Notebook 07's kernel exercises: the learner writes one piece of a course kernel that the
lesson does not list.

* Exercise 9 (kernel), a group search that reads two groups per pass:
  ``find_group(groups, work, group, first)``, the function the grouped kernels' walk calls for
  each work item (``kernels/group_walk.py``; the lesson lists the one-group-a-pass search), inside
  the course's bf16 grouped kernel, as the ``find_group`` hook of its scheduler (:func:`with_search`);
* Exercise 10 (kernel), the promotion across two blocks of B's scales:
  ``promote(acc, part, sab, at0, first)``, the hook the one-part FP8 kernel calls once a batch of
  wgmmas is done (``kernels/hopper_grouped_gemm_fp8_onepart.py``; the lesson lists the two-part
  kernel's ``_promote``, one scale of B per tile), in a subclass of that kernel at 128x192, whose
  tiles straddle two blocks of B's scales (:func:`with_promote`);
* Exercise 11 (lab): one k-tile's product in flight instead of two (``parts=1``), and three
  ways the warpgroups take turns, read from the PTX: the course kernel's, and two variants that
  override its turn hooks (:class:`NoTurns`, :class:`TurnWhenDone`).

Each kernel exercise is checked as ``kernel_check``'s manual says: the learner's function run on
numbers by a CPU model (:mod:`cutecourse.exercises.nb07_cpu` and ``nb07_cpu_promote``: the search on every work item of
every CTA of ragged problems with empty groups, against ``models/group_scheduler``; the promotion
on every register of every thread, several k-tiles with their own scales), compiled for sm_90a on
the CPU (a compile error names the learner's line), facts read from the PTX beside the course
kernel's, and on an H100 the learner's kernel run against torch in a child process with a
timeout (a search that never ends hangs the GPU) and timed beside the course kernel.

Each answer goes in as a hook, a variant made the course's one way: a subclass (of the walk's
scheduler, of the one-part kernel) with the learner's function in the hook's place, so the rest
of the kernel is the course's own code.
"""

from __future__ import annotations

import functools
import re

from ..kernels import group_walk
from ..kernels import hopper_grouped_gemm_fp8 as hg8
from ..kernels import hopper_grouped_gemm_fp8_onepart as hg8one
from ..kernels.hopper_grouped_gemm import GroupedHopperGemm
from . import Result
from . import kernel_check as kc
from .nb07_cpu import CpuModelError, CpuModelSkipped, run_pair_search
from .nb07_cpu_promote import run_promote_columns

#: The tiles of the kernels the learner's hooks go into: the course's bf16 grouped kernel, the
#: two-part FP8 kernel, and the one-part one at 128x192 (its tiles straddle two blocks of B).
BF16_TILE, FP8_TILE, COLUMNS_TILE = (128, 256), (128, 128), (128, 192)
SMS = 132
_MODULE = "__import__('cutecourse.exercises.nb07_kernels', fromlist=['nb07_kernels'])"
#: What a check without an H100 did not do.
NO_GPU = "not run on a GPU here: on an H100 this check also runs your kernel against torch and times it"


def with_search(fn, sms: int = SMS) -> GroupedHopperGemm:
    """The course's grouped kernel whose group walk searches with ``fn``: its scheduler a
    ``GroupScheduler`` subclass with ``fn`` as the ``find_group`` hook (``fn(groups, work, group,
    first)``, the scheduler itself as ``groups``)."""
    scheduler = type("YourSearch", (group_walk.GroupScheduler,), {"find_group": fn})
    return GroupedHopperGemm(tile_mn=BF16_TILE, cluster_mn=(1, 1), sms=sms, scheduler=scheduler)


def with_promote(fn, sms: int = SMS, tile_mn=COLUMNS_TILE) -> hg8one.OnePartBlockScaledGroupedHopperGemm:
    """The course's one-part FP8 kernel with ``fn`` as its ``promote`` hook (a static method, as
    the course's: it reads only its arguments)."""
    cls = type("YourPromotion", (hg8one.OnePartBlockScaledGroupedHopperGemm,), {"promote": staticmethod(fn)})
    return cls(tile_mn=tile_mn, cluster_mn=(1, 1), sms=sms)


def bf16_args(kernel):
    """Compile arguments of the grouped bf16 kernel (fake operands and metadata)."""
    from ..kernels import grouped

    return grouped.HOPPER.fake_arguments(kernel, "bfloat16", "bfloat16")


def fp8_args(kernel):
    """Compile arguments of the FP8 kernels (e4m3 operands, bf16 C, five metadata columns)."""
    from ..kernels import grouped

    return grouped.FP8.fake_arguments(kernel, "float8_e4m3fn", "bfloat16")


@functools.lru_cache(maxsize=None)
def course_report(which: str, turns=None):
    """The course kernel's compile report (``target``), compiled once."""
    from ..inspect import compile_report

    return compile_report("cutecourse.exercises.nb07_kernels:target", arch="sm_90a", which=which, turns=turns)


def course_facts(which: str) -> dict:
    """Counts in the course kernel's own PTX, to hold the learner's beside."""
    return facts(course_report(which))


def target(which: str, turns=None):
    """(kernel, fake arguments) of a course kernel, for ``inspect.compile_report``: ``"bf16"``
    (the grouped kernel of exercise 9), ``"fp8"`` (the two-part FP8 kernel), ``"columns"`` (the
    one-part kernel at 128x192 of exercise 10), ``"one part"`` (exercise 11's, with ``turns``)."""
    if which == "bf16":
        kernel = GroupedHopperGemm(tile_mn=BF16_TILE, cluster_mn=(1, 1), sms=SMS)
        return kernel, bf16_args(kernel)
    kernel = {"fp8": course_fp8, "columns": course_columns}.get(which, lambda: one_part(turns))()
    return kernel, fp8_args(kernel)


def facts(report) -> dict:
    return {"ffma": report.count(r"^fma\.rn\.f32"), "mul": report.count(r"^mul\.f32"),
            "add": report.count(r"^add\.f32"), "arrive": report.count(r"^mbarrier\.arrive(?!\.expect_tx)"),
            "wait_group 0": report.count(r"^wgmma\.wait_group\.sync\.aligned\s+0"),
            "wait_group 1": report.count(r"^wgmma\.wait_group\.sync\.aligned\s+1"),
            "wgmma": report.count(r"^wgmma\.mma_async"), "registers": report.registers,
            "ld.global": report.count(r"^ld\.global"),
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


def counted(which: str):
    """Note the PTX counts of the learner's kernel (``mine``) and of the course's (``course``)."""
    def note(attempt) -> None:
        attempt.notes["mine"], attempt.notes["course"] = facts(attempt.report), course_facts(which)
    return note


def vs_course(holds, message):
    """An objection on (mine, course), the PTX counts :func:`counted` noted: where
    ``holds(mine, course)``, ``message(mine, course)``."""
    return (lambda a: holds(a.notes["mine"], a.notes["course"]),
            lambda a: message(a.notes["mine"], a.notes["course"]))


# -- Exercise 9 (kernel): the group search, two groups a pass --------------------------------------
#: The hints nudge, never hand over the code: a learner sees them on an untouched stub too.
EX9 = ("Exercise 9 (kernel): a search that reads two groups per pass",
       "each pass reads the items of `group` and of the next group (never a group at or past "
       "groups.count), then passes over the first if work >= first + items, and over the second "
       "only if it passed the first and work lies past the second too. The DSL has no `break` "
       "in a run-time loop: carry a flag in the `while`.")


def _search_on_numbers(attempt) -> str | None:
    """The CPU model first: an instant verdict on the logic."""
    try:
        verdict, attempt.notes["seen"] = run_pair_search(attempt.code, attempt.answer.__name__)
    except CpuModelError as e:
        return str(e)
    except CpuModelSkipped as e:
        return (f"your search calls a GPU-only operation ({e}): the search reads "
                "the groups' shapes and adds; it needs no barrier, wait or copy")
    return verdict


def _search_passes(attempt) -> str:
    seen, mine, course = (attempt.notes[k] for k in ("seen", "mine", "course"))
    return (f"numbers checked on the CPU model: {seen['calls']} searches (every work item of "
            f"every CTA of {seen['problems']} ragged problems with empty groups, runs of empty "
            "groups and sizes that are not multiples of the tile) found the right group and "
            "first item, two groups per pass, resuming where the last stopped. Compiled for "
            f"sm_90a into the course's grouped kernel: {mine['ld.global']} global loads "
            f"(the course kernel: {course['ld.global']}), {mine['loops']} loops, "
            f"{mine['registers']} registers (the course kernel: {course['registers']})")


SEARCH = kc.KernelExercise(
    *EX9, kernel=lambda fn: f"{_MODULE}.with_search({fn.__name__})",
    args="cutecourse.exercises.nb07_kernels:bf16_args",
    model=(lambda a: early_exit(a.code), _search_on_numbers),
    objections=(
        counted("bf16"),
        vs_course(lambda mine, course: mine["loops"] < course["loops"],
                  lambda mine, course: f"your search compiles to no loop ({mine['loops']} loops in "
                  f"the PTX, the course kernel {course['loops']}): a Python `for` or `while` over "
                  "plain numbers runs once at compile time. Loop with `while` over a flag"),
        vs_course(lambda mine, course: mine["ld.global"] <= course["ld.global"],
                  lambda mine, course: "your kernel loads no more from global memory than the "
                  f"course's ({mine['ld.global']} ld.global in the PTX, the course kernel "
                  f"{course['ld.global']}): a search that reads two groups per pass loads two "
                  "groups' M and N in each pass, four loads where the course's has two")),
    passes=_search_passes, elsewhere=NO_GPU,
    baseline=f"{_MODULE}.GroupedHopperGemm(tile_mn={BF16_TILE}, cluster_mn=(1, 1), sms={SMS})",
    runner="cutecourse.exercises.nb07_gpu:search_runner",
    hang="the walk ends only when your search returns group = groups.count for an item "
         "past the last group; on the GPU it never did")


@SEARCH.checker
def check_search(fn) -> Result:
    """``fn``: your ``@cute.jit`` ``find_group(groups, work, group, first) -> (group, first)``."""
    return SEARCH.check(fn)


# -- Exercise 10 (kernel): the promotion across two blocks of B's scales --------------------------
EX10 = ("Exercise 10 (kernel): a promotion across two blocks of B's scales",
        "register i's row and column are thread 0's at0[i] (the same choice for every thread): "
        "its row scale is lo on the thread's first row (at0[0][0]), hi on the other; its block "
        "of B starts over at first + column = 128. Pick both at compile time, one FFMA per "
        "register: which product is the same for many registers?")


def _own_promotion(attempt) -> bool:
    fn, code = attempt.answer, attempt.code
    return (getattr(fn, "__module__", "").startswith("cutecourse.")
            or bool(re.search(r"\b_promote\b|\.promote\b", "".join(seg.text for seg in code.segments))))


def _promote_on_numbers(attempt) -> str | None:
    """The CPU model first: every register of every thread, on numbers."""
    try:
        verdict, attempt.notes["compared"] = run_promote_columns(attempt.code, attempt.answer.__name__)
    except CpuModelError as e:
        return str(e)
    except CpuModelSkipped as e:
        return (f"your promotion calls a GPU-only operation ({e}): the mainloop "
                "around it waits for the wgmmas and frees the stage; the promotion only "
                "adds part, scaled, into acc")
    return verdict and f"your promotion is wrong on the CPU model: {verdict}"


def _promote_passes(attempt) -> str:
    compared, mine, course = (attempt.notes[k] for k in ("compared", "mine", "course"))
    return (f"numbers checked on the CPU model: {compared} register values (a third of the "
            "threads of both warpgroups, 128x128, 128x192 and 128x256 tiles with first = 0, "
            "64, 128, three k-tiles each with its own scale per row and per block of B), every "
            "one right. Compiled for sm_90a into the one-part kernel at 128x192: "
            f"{mine['ffma']} FFMAs and {mine['mul']} multiplies of scales (the course kernel: "
            f"{course['ffma']}, {course['mul']}), {mine['registers']} registers, no spills")


PROMOTE = kc.KernelExercise(
    *EX10, kernel=lambda fn: f"{_MODULE}.with_promote({fn.__name__})",
    args="cutecourse.exercises.nb07_kernels:fp8_args",
    model=((_own_promotion, "your promote is (or calls) the course kernel's own promotion, which "
            "computes the answer: write the choice of scales and the multiply-add yourself"),
           _promote_on_numbers),
    objections=(
        counted("columns"),
        vs_course(lambda mine, course: mine["wait_group 0"] > course["wait_group 0"],
                  lambda mine, course: f"your promotion waits for the wgmmas ({mine['wait_group 0']} "
                  f"wait_group 0 in the PTX, the course kernel {course['wait_group 0']}): the "
                  "mainloop already waited before calling you: wait for nothing"),
        vs_course(lambda mine, course: mine["ffma"] < course["ffma"] and mine["loops"] > course["loops"],
                  lambda mine, course: f"your promotion compiles to a run-time loop ({mine['ffma']} "
                  f"FFMAs in the PTX, the course kernel {course['ffma']}): a register array indexed "
                  "by a run-time value cannot stay in registers, and the choice of scale must be "
                  "made at compile time. Loop with cutlass.range_constexpr(cute.size(part))"),
        vs_course(lambda mine, course: mine["ffma"] != course["ffma"],
                  lambda mine, course: f"your kernel has {mine['ffma']} FFMAs where the course's has "
                  f"{course['ffma']} (the part of a 128x192 tile: 96 registers per thread): add "
                  "each register as one fused multiply-add, acc[i] + part[i] * scale"),
        vs_course(lambda mine, course: mine["mul"] > course["mul"],
                  lambda mine, course: f"your promotion costs two instructions per register: "
                  f"{mine['mul']} mul.f32 beside the FFMAs (the course kernel: {course['mul']}). "
                  "part[i] * sa * sb multiplies left to right; write part[i] * (sa * sb): a thread "
                  "has two rows and a tile two blocks of B, so four products sa * sb serve all 96 "
                  "registers, and the compiler computes each once"),
        vs_course(lambda mine, course: bool(mine["spills"]),
                  lambda mine, course: f"your kernel spills {mine['spills']} bytes of registers to "
                  "local memory: keep the promotion to the FFMAs into acc")),
    passes=_promote_passes, elsewhere=NO_GPU, baseline=f"{_MODULE}.course_columns()",
    runner="cutecourse.exercises.nb07_gpu:promote_runner")


@PROMOTE.checker
def check_promote(fn) -> Result:
    """``fn``: your ``@cute.jit`` ``promote(acc, part, sab, at0, first: cutlass.Constexpr)``."""
    return PROMOTE.check(fn)


def course_fp8():
    """The course's two-part FP8 kernel at 128x128, 1x1: the baseline of exercise 11."""
    return hg8.BlockScaledGroupedHopperGemm(tile_mn=FP8_TILE, cluster_mn=(1, 1), sms=SMS)


def course_columns():
    """The course's one-part FP8 kernel at 128x192, 1x1: the baseline of exercise 10."""
    return hg8one.OnePartBlockScaledGroupedHopperGemm(tile_mn=COLUMNS_TILE, cluster_mn=(1, 1), sms=SMS)


class NoTurns(hg8one.OnePartBlockScaledGroupedHopperGemm):
    """The one-part kernel without turns: each warpgroup issues whenever its stage is full. Its
    turn hooks do nothing, so no named barrier is left in the loop."""

    def first_turn(self, wg):
        pass

    def wait_turn(self, wg):
        pass

    def after_issue(self, wg, more):
        pass

    def after_wait(self, wg, more):
        pass


class TurnWhenDone(hg8one.OnePartBlockScaledGroupedHopperGemm):
    """The one-part kernel passing the turn only once its wgmmas are done (after
    ``wait_group(0)``), not when they are issued: strict alternation."""

    def after_issue(self, wg, more):
        pass

    def after_wait(self, wg, more):
        self.pass_turn(wg, more)


#: Exercise 11's choices, when a warpgroup passes the turn on: never, when its wgmmas are issued
#: (the course kernel), or when they are done.
TURNS = (None, "issue", "done")
#: The kernel class of each choice.
TURN_KERNELS = dict(zip(TURNS, (NoTurns, hg8one.OnePartBlockScaledGroupedHopperGemm, TurnWhenDone)))


def one_part(turns):
    """The one-part FP8 kernel at 128x128 whose warpgroups pass the turn as ``turns`` says
    (``TURNS``; exercise 11)."""
    if turns not in TURNS:
        raise ValueError(f"turns={turns!r}: pick one of {list(TURNS)}")
    return TURN_KERNELS[turns](tile_mn=FP8_TILE, cluster_mn=(1, 1), sms=SMS)


