"""Notebook 08's exercises: the learner writes CuTe DSL for the mixed-input GEMM's two tricks.

* Exercise 1 (kernel), the conversion of one register for **signed** int4 weights (two's
  complement nibbles, as many checkpoints store them; the lesson's kernel reads unsigned ones
  with a zero point): ``fn(word, j, ss)`` -> register j, bf16 (s_j x scale, s_{j+4} x scale).
  Run on the CPU model (``nb08_cpu``: every nibble value at every position and random words,
  five scales, each register compared bit for bit), compiled for sm_90a into
  ``nb08_kernels.RegisterKernel`` and read (no ``cvt`` from an integer, none through fp32),
  then on a Hopper GPU run on the same words, bit for bit.
* Exercise 2 (kernel), the other side of the reorder: the CuTe layout (thread, slice, value) ->
  nibble of the packed 64 x 64 block, where ``quant.reorder`` puts each value. Evaluated by CuTe
  on the CPU and compared at all 4096 coordinates with ``reorder.word_position`` and
  ``reorder.NIBBLE``, a wrong stride named by what it moves (a lane, a row, a warp, a slice, a
  value); compiled for sm_90a into ``nb08_kernels.UnpackKernel``, which unpacks a block through
  it; on a Hopper GPU the unpacked block is compared with ``reorder.unpack``.
"""

from __future__ import annotations

from ..quant import reorder
from . import kernel_check as kc
from .cpu_run import CpuModelError, CpuModelSkipped
from .learner_code import reason
from . import nb08_cpu

_MODULE = "__import__('cutecourse.exercises.nb08_kernels', fromlist=['nb08_kernels'])"
NO_GPU = "not run on a GPU here: on an H100 or H200 this check also runs your code there, bit for bit"
#: An integer -> float conversion, one value at a time: what the magic number replaces.
INT_TO_FLOAT = r"^cvt(\.\w+)*\.(bf16|f16|f32)(x2)?\.(s|u)(4|8|16|32)\b"
#: A conversion between float formats: the arithmetic went through fp32 instead of bf16x2.
FLOAT_ROUND_TRIP = r"^cvt(\.\w+)*\.(f32\.bf16|bf16\.f32|bf16x2\.f32)\b"


# -- Exercise 1 (kernel): a signed int4 word -> bf16 --------------------------------------------
#: The hints point at the idea, not at the code: a learner who reads one still has the
#: instructions and constants to work out (the solution notebook says why its answer works).
EX1 = ("Exercise 1 (kernel): the conversion of one register, signed int4",
       "the lesson's three steps work for a nibble in [0, 15]. Which bit operation moves a "
       "two's-complement nibble into that range, and can it ride along with the magic number? Then "
       "ask what the subtraction must take away.")


def _register_on_numbers(attempt) -> str | None:
    try:
        verdict, attempt.notes["checked"] = nb08_cpu.check_signed_register(attempt.code, attempt.answer.__name__)
    except CpuModelError as e:
        return str(e)
    except CpuModelSkipped as e:
        return (f"your conversion calls an operation the CPU model cannot run ({e}): write it with "
                "integer operators, inline_ptx and int4_convert's helpers")
    return verdict


def _no_cvt(attempt) -> str | None:
    n = attempt.report.count(INT_TO_FLOAT)
    if n:
        return f"your conversion compiles to {n} cvt from an integer (for 4 registers): {nb08_cpu.CVT_FROM_INT}"
    n = attempt.report.count(FLOAT_ROUND_TRIP)
    if n:
        return f"your conversion compiles to {n} cvt between bf16 and fp32: {nb08_cpu.CVT_THROUGH_FP32}"
    return None


def _register_passes(attempt) -> str:
    from ..inspect import compile_report

    # the same kernel around a conversion that does nothing: its instructions are the harness's
    harness = compile_report("cutecourse.exercises.nb08_kernels:harness_target", arch="sm_90a")
    r = attempt.report
    counts = ", ".join(f"{max(0, r.count(p) - harness.count(p))} {name}" for name, p in (
        ("lop3", r"^lop3\.b32"), ("shr", r"^shr\."), ("and/or/xor", r"^(and|or|xor)\.b32"),
        ("sub.bf16x2", r"^sub\.rn\.bf16x2"), ("mul.bf16x2", r"^mul\.rn\.bf16x2")))
    return (f"{attempt.notes['checked']} registers checked bit for bit on the CPU model (every nibble "
            "value at every position and random words, five scales including a negative and a "
            f"subnormal one). Compiled for sm_90a, your conversion of one word's 4 registers is {counts} "
            "(the kernel around it subtracted), no cvt")


REGISTER = kc.KernelExercise(
    *EX1, kernel=lambda fn: f"{_MODULE}.RegisterKernel({fn.__name__})",
    args="cutecourse.exercises.nb08_kernels:register_args",
    model=(_register_on_numbers,), objections=(_no_cvt,), passes=_register_passes,
    runner="cutecourse.exercises.nb08_kernels:register_runner", elsewhere=NO_GPU)


@REGISTER.checker
def check_signed_register(fn):
    """``fn(word, j, ss)``: your ``@cute.jit`` conversion of register j of a word of signed int4."""
    return REGISTER.check(fn)


# -- Exercise 2 (kernel): the packed side of the reorder, as a layout ----------------------------
EX2 = ("Exercise 2 (kernel): where pack puts each value, as a CuTe layout",
       "a stride is where one step along a mode goes. Take one step at a time (the next lane, the "
       "next row of lanes, the next warp, the next slice, each bit of the value) and ask "
       "reorder.word_position and reorder.NIBBLE which nibble of the packed block it lands on.")

#: (what a unit step of one coordinate is, in the learner's terms; the coordinate; why pack puts it there)
_STEPS = (
    ("thread 1 (lane 1: the next column pair)", (1, 0, 0), "a thread's 4 words of 8 nibbles come before the next thread's"),
    ("thread 4 (lane 4: the next row)", (4, 0, 0), "threads are numbered lane % 4 first, so thread 4 is 4 threads on"),
    ("thread 32 (warp 1)", (32, 0, 0), "warp 1's threads follow warp 0's 32"),
    ("slice 1", (0, 1, 0), "a thread's words for the 4 slices are consecutive"),
    ("value 1 (the next column)", (0, 0, 1), "register 0 takes nibbles 0 and 4: values 0 and 1"),
    ("value 2 (row g + 8)", (0, 0, 2), "register 1 takes nibbles 1 and 5: values 2 and 3"),
    ("value 4 (column + 8)", (0, 0, 4), "register 2 takes nibbles 2 and 6: values 4 and 5"),
)


def expected_nibble(t: int, s: int, v: int) -> int:
    """Where ``quant.reorder.pack`` puts thread t's value v of slice s: nibble of the block."""
    r, c = reorder.word_position(t, s)
    return 8 * (8 * r + c) + reorder.NIBBLE[v]


def _flat(coord, shape) -> int:
    """The index of a natural coordinate in its mode, mode 0 fastest (CuTe's order)."""
    if isinstance(shape, int):
        return coord
    from ..layouts import size

    idx, scale = 0, 1
    for c, s in zip(coord, shape):
        idx += _flat(c, s) * scale
        scale *= size(s)
    return idx


def learner_table(attempt) -> dict | str:
    """{(t, s, v): nibble} of the learner's layout, evaluated by CuTe; or a message."""
    from .. import layouts

    fn = attempt.answer
    def built():
        import cutlass.cute as cute

        obj = fn()
        return isinstance(obj, cute.Layout), type(obj).__name__, str(obj)

    try:
        is_layout, kind, text = layouts.run_on_host(built)
    except Exception as exc:
        where = attempt.code.locate(exc)
        at = f" at {attempt.code.describe(*where)}" if where else ""
        return f"building your layout failed{at}: {reason(exc)}"
    if not is_layout:
        return (f"your {attempt.code.name} returns a {kind} ({text[:60]}), not a layout: return "
                "cute.make_layout(shape, stride=...) itself")
    table = layouts.evaluate(text)
    attempt.notes["shape"] = table.shape
    sizes = tuple(layouts.size(m) for m in table.shape) if isinstance(table.shape, tuple) else (table.shape,)
    if sizes != (reorder.THREADS, reorder.SLICES, reorder.VALUES):
        return (f"your layout {table.layout} has modes of sizes {sizes}: it takes (thread, slice, value), "
                f"sizes 128, 4 and 8, shaped ((4,8,4), 4, (2,2,2)) like the fragment layout")
    return {tuple(_flat(c, m) for c, m in zip(coord, table.shape)): off
            for coord, off in zip(table.coords, table.offsets)}


def _layout_on_numbers(attempt) -> str | None:
    got = learner_table(attempt)
    if isinstance(got, str):
        return got
    if got[(0, 0, 0)] != 0:
        return f"your layout sends thread 0's value 0 of slice 0 to nibble {got[(0, 0, 0)]}; pack puts it at nibble 0"
    for what, (t, s, v), why in _STEPS:
        if got[(t, s, v)] != expected_nibble(t, s, v):
            value_mode = attempt.notes["shape"][-1]
            if v and isinstance(value_mode, int):
                return (f"your value mode is one mode of {value_mode}: value v lands at v times one stride, "
                        f"but pack interleaves the values (nibbles {', '.join(map(str, reorder.NIBBLE))}), "
                        "which no single stride gives. Split it as the fragment does, (2,2,2), one "
                        "stride per bit of v")
            return (f"your layout sends {what} to nibble {got[(t, s, v)]} of the block; pack puts it at "
                    f"nibble {expected_nibble(t, s, v)}: {why}")
    wrong = [k for k in sorted(got) if got[k] != expected_nibble(*k)]
    if wrong:
        t, s, v = wrong[0]
        return (f"{len(wrong)} of 4096 coordinates land elsewhere, the first thread {t}, slice {s}, value {v}: "
                f"yours nibble {got[wrong[0]]}, pack's {expected_nibble(t, s, v)}. Check the order of the "
                "thread's modes: lane % 4, then lane / 4, then the warp")
    attempt.notes["layout"] = len(got)
    return None


def _layout_passes(attempt) -> str:
    loads, stores = attempt.report.count(r"^ld\.global"), attempt.report.count(r"^st\.global")
    return (f"all {attempt.notes['layout']} (thread, slice, value) coordinates of your layout, evaluated "
            "by CuTe on the CPU, are the nibbles quant.reorder.pack writes. Compiled for sm_90a into a "
            f"kernel that unpacks a block through it: {loads} global loads, {stores} stores a thread")


PACKED = kc.KernelExercise(
    *EX2, kernel=lambda fn: f"{_MODULE}.UnpackKernel({fn.__name__})",
    args="cutecourse.exercises.nb08_kernels:unpack_args",
    model=(_layout_on_numbers,), passes=_layout_passes,
    runner="cutecourse.exercises.nb08_kernels:unpack_runner", elsewhere=NO_GPU)


@PACKED.checker
def check_packed_layout(fn):
    """``fn()``: your ``@cute.jit`` function returning the layout (thread, slice, value) -> nibble."""
    return PACKED.check(fn)
