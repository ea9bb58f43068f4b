"""Checkers for notebook 01's exercises (layouts, tilers, the vectorized kernel, a fused activation)."""

from __future__ import annotations

import numpy as np

from .. import layouts, modes
from . import Result, checker, failed, passed
from .kernel_check import KernelExercise, compact
from .learner_code import LearnerCode


def _first_difference(mine: layouts.LayoutTable, want: layouts.LayoutTable) -> str:
    for coord, got, exp in zip(want.coords, mine.offsets, want.offsets):
        if got != exp:
            return f"at coordinate {coord} your layout gives offset {got}, the tensor's is {exp}"
    return ""


def compare_layouts(answer, intended: str, title: str, hint: str) -> Result:
    """The learner's layout must be the same *function* as ``intended``: same shape, and the
    same offset at every coordinate (two different-looking layouts may pass)."""
    want = layouts.evaluate(intended)
    mine = layouts.evaluate(answer)
    if layouts.flatten(mine.shape) != layouts.flatten(want.shape):
        return failed(title, f"your layout has shape {layouts.to_text(mine.shape)}; the tensor's shape "
                      f"is {layouts.to_text(want.shape)}", hint)
    where = _first_difference(mine, want)
    if where:
        return failed(title, f"{mine.layout} is a different function: {where}", hint)
    return passed(title, f"{mine.layout} maps every coordinate to the right offset")


EX1 = ("Exercise 1: a column-major 6 x 4 matrix",
       "In column-major order the row index moves fastest: stride 1 along mode 0; the next column "
       "starts one whole column (6 elements) later.")
EX2 = ("Exercise 2: tilers for 16-byte vectors",
       "A 16-byte vector holds 16 / sizeof(element) elements, all in one row of a row-major tensor: "
       "the tiler is (1, that many).")
EX3 = ("Exercise 3: your vectorized kernel",
       "Slice the thread's tile with gA[(None, (mi, ni))], .load() it, add, and store the sum into "
       "gC's slice; zipped_divide's mode 1 enumerates the tiles.")


@checker(*EX1)
def check_column_major(answer) -> Result:
    return compare_layouts(answer, "(6,4):(1,6)", *EX1)


@checker(*EX2)
def check_tilers(tiler_bf16, tiler_fp32) -> Result:
    title, hint = EX2
    for name, tiler, itemsize in (("tiler_bf16", tiler_bf16, 2), ("tiler_fp32", tiler_fp32, 4)):
        want = (1, 16 // itemsize)
        if tuple(tiler) != want:
            rows, cols = tuple(tiler)
            return failed(title, f"{name} = {tuple(tiler)} gives each thread {rows * cols} elements = "
                          f"{rows * cols * itemsize} bytes in {rows} row(s); a 16-byte vector is "
                          f"{want[1]} elements of one row", hint)
    return passed(title, "bf16: (1, 8), fp32: (1, 4): one 16-byte vector per thread each")


#: Typical wrong sums, for both kernels' CPU runs: (function of A and B, what the kernel does).
SUM_GUESSES = [
    (lambda a, b: a + a, "your sum uses A twice (A + A): the second tile must be B's, gB[(None, (mi, ni))]"),
    (lambda a, b: b + b, "your sum uses B twice (B + B): the first tile must be A's, gA[(None, (mi, ni))]"),
    (lambda a, b: a - b, "your kernel subtracts B from A: C = A + B"),
    (lambda a, b: b - a, "your kernel subtracts A from B: C = A + B"),
    (lambda a, b: a * b, "your kernel multiplies the tiles: C = A + B"),
    (lambda a, b: a, "your kernel copies A into C: add B's tile"),
    (lambda a, b: b, "your kernel copies B into C: add A's tile"),
]


def _cpu_verdict(host_fn, want, guesses, what, code=None):
    """(learner code, the CPU run's finding or None, what it checked or why it could not)."""
    from . import elementwise_run as er

    code = code if code is not None else LearnerCode(host_fn)
    if code.unanswered or er.unanswered(code):
        raise NotImplementedError  # @checker: "not answered yet"
    try:
        return code, er.verdict(code, want, guesses, what), er.checked(what)
    except er.KernelFinding as exc:
        return code, str(exc), ""
    except er.NotModelled as exc:
        return code, None, (f"numbers NOT checked on the CPU: the CPU model does not run `{exc}`, "
                            "so only the PTX judged your kernel")


@checker(*EX3)
def check_vector_kernel(host_fn, m: int = 256, n: int = 256) -> Result:
    """Compile the host function for fp16 (m, n); run it on numbers on the CPU (every element
    of C, A and B untouched); its PTX: 128-bit loads and stores only; on a GPU, run it."""
    import cutlass
    from cutlass.cute.runtime import make_fake_compact_tensor

    from ..inspect import compile_here
    from . import elementwise_run as er

    title, hint = EX3
    if er.unanswered(LearnerCode(host_fn)):
        raise NotImplementedError  # the exercise's `...` is still the kernel's body
    fake = make_fake_compact_tensor(cutlass.Float16, (m, n), stride_order=(1, 0), assumed_align=16)
    try:
        report = compile_here(host_fn, fake, fake, fake)
    except Exception as exc:  # the compiler's first line is the useful part
        return failed(title, f"it does not compile: {str(exc).splitlines()[0]}", hint)
    _, finding, cpu = _cpu_verdict(host_fn, lambda a, b: a + b, SUM_GUESSES, "A + B")
    if finding:
        return failed(title, finding, hint)
    wide = report.count(r"^ld\.global(\.[\w:]+)*\.v4\.b32")
    narrow = report.count("scalar global loads")
    if narrow or wide != 2:
        return failed(title, f"the PTX has {wide} 128-bit and {narrow} narrower global loads per "
                      "thread; one 128-bit load of A and one of B was the goal"
                      + (": load the whole (1, 8) tile with .load()" if narrow else
                         ": does your sum read the same tile twice?" if wide == 1 else ""), hint)
    if report.count("vector global stores") != 1 or report.count("scalar global stores"):
        return failed(title, "the loads are right but the store is not one 128-bit store: store "
                      "the whole tile at once, gC[(None, (mi, ni))] = a + b", hint)
    message = f"{cpu}; compiled: one 128-bit load of A, one of B and one 128-bit store per thread"
    if not modes.mode_for("any").run:
        return passed(title, message + " (no GPU here: not run on one)")
    return _run_on_gpu(host_fn, m, n, title, hint, message)


def _run_on_gpu(host_fn, m: int, n: int, title: str, hint: str, checked: str) -> Result:
    import cutlass.cute as cute
    import torch
    from cutlass.cute.runtime import from_dlpack

    a, b = (torch.randn(m, n, device="cuda", dtype=torch.float16) for _ in range(2))
    c = torch.full_like(a, float("nan"))
    args = [from_dlpack(t, assumed_align=16) for t in (a, b, c)]
    cute.compile(host_fn, *args)(*args)
    torch.cuda.synchronize()
    bad = (c != a + b).nonzero()
    if len(bad):
        r, col = bad[0].tolist()
        return failed(title, f"{len(bad)} of {c.numel()} results are wrong, the first at ({r}, {col}): "
                      f"{c[r, col].item()} instead of {(a + b)[r, col].item()}", hint)
    return passed(title, f"{checked}. On the GPU: A + B is exact on {torch.cuda.get_device_name()}")


# ----------------------------------------------------------------------------------------
# Exercise 4 (kernel): a fused activation, checked by kernel_check (compiled in a child for
# sm_90a, the arithmetic read from the PTX, run against torch in a child on a GPU)
# ----------------------------------------------------------------------------------------
def elementwise_args(kernel, m: int = 256, n: int = 256):
    """Compile arguments of a notebook-01 host function: fake row-major fp16 A, B, C (m, n)."""
    import cutlass
    from cutlass.cute.runtime import make_fake_compact_tensor

    return tuple(make_fake_compact_tensor(cutlass.Float16, (m, n), stride_order=(1, 0),
                                          assumed_align=16) for _ in range(3))


EX4 = ("Exercise 4 (kernel): a fused activation",
       "load both tiles, add them, then clamp the sum at zero: "
       "s = a + b; cute.where(s > 0, s, cute.full_like(s, 0)), stored with one 128-bit store.")


def relu_runner(kernel, baseline=None, m: int = 4096, n: int = 4096) -> dict:
    """In a child, on a GPU: the learner's host function against torch.relu(A + B), exactly."""
    import cutlass.cute as cute
    import torch
    from cutlass.cute.runtime import from_dlpack

    torch.manual_seed(0)
    a, b = (torch.randn(m, n, device="cuda", dtype=torch.float16) for _ in range(2))
    c = torch.full_like(a, float("nan"))
    args = [from_dlpack(t, assumed_align=16) for t in (a, b, c)]
    cute.compile(kernel, *args)(*args)
    torch.cuda.synchronize()
    want = torch.relu(a + b)
    bad = (c != want).nonzero()
    if len(bad):
        r, col = bad[0].tolist()
        return {"ok": False, "message": f"{len(bad)} of {c.numel()} results differ from "
                f"torch.relu(A + B), the first at ({r}, {col}): {c[r, col].item()} instead of "
                f"{want[r, col].item()}"}
    return {"ok": True, "message": f"relu(A + B) is exact on {torch.cuda.get_device_name()}"}


def _is_zero(value: str) -> bool:
    """A PTX operand that is the constant 0 (an integer bit pattern or a 0f/0d float)."""
    v = value.strip().lower()
    return v in ("0", "0f00000000", "0f80000000", "0d0000000000000000") or v == "0x00000000"


def _constant(value: str) -> str:
    """A PTX constant for a message: a 32-bit pattern of two fp16 halves shown as numbers."""
    try:
        bits = int(value, 0) if not value.lower().startswith("0f") else int(value[2:], 16)
    except ValueError:
        return f"the value in {value}"
    import struct

    halves = struct.unpack("<2e", struct.pack("<I", bits & 0xFFFFFFFF))
    return str(halves[0]) if halves[0] == halves[1] else f"({halves[0]}, {halves[1]})"


#: Typical wrong activations, for the CPU run: (function of A and B, what the kernel does).
RELU_GUESSES = [
    (lambda a, b: np.maximum(a + a, 0), "your sum uses A twice, relu(A + A): the second tile must "
     "be B's, gB[(None, (mi, ni))]"),
    (lambda a, b: np.maximum(b + b, 0), "your sum uses B twice, relu(B + B): the first tile must "
     "be A's, gA[(None, (mi, ni))]"),
    (lambda a, b: a + b, "your kernel stores A + B without the activation: clamp the sum at zero"),
    (lambda a, b: np.maximum(a, 0) + np.maximum(b, 0), "your kernel clamps before it adds: "
     "relu(A) + relu(B) is not relu(A + B); add first, then clamp the sum"),
    (lambda a, b: np.minimum(a + b, 0), "your kernel keeps the smaller of the sum and zero (a min, "
     "or the condition the wrong way round): ReLU keeps the larger"),
    (lambda a, b: np.maximum(a - b, 0), "your kernel clamps A - B: you subtract; C = relu(A + B)"),
    (lambda a, b: np.maximum(b - a, 0), "your kernel clamps B - A: you subtract; C = relu(A + B)"),
    (lambda a, b: np.where(a > 0, a + b, 0), "your kernel tests A > 0, not the sum: compare the sum "
     "itself with zero"),
    (lambda a, b: np.where(b > 0, a + b, 0), "your kernel tests B > 0, not the sum: compare the sum "
     "itself with zero"),
    (lambda a, b: np.abs(a + b), "your kernel stores |A + B|: ReLU sets negative sums to zero, it "
     "does not flip their sign"),
] + [(lambda a, b, k=k: np.maximum(a + b, k), f"your kernel clamps at {k}, not at zero: ReLU keeps "
      "the larger of the sum and 0") for k in (1, -1, 0.5, 2)]


def _fused_problem(report, numbers_checked: bool) -> str | None:
    """What is wrong with the compiled kernel's memory traffic (always) and, where the CPU could
    not run the kernel on numbers, with its arithmetic as the PTX shows it."""
    kinds, consts, bounds = [], {}, []
    for ln in report.instructions():
        op = ln.split()[0]
        args = [a.strip().strip(";{}").strip() for a in ln[len(op):].split(",")]
        if op.startswith("mov.b") and len(args) == 2:
            consts[args[0]] = args[1]
        if op.startswith(("add.f16", "add.rn.f16", "add.f32", "add.rn.f32")):
            kinds.append("add")
        elif op.startswith(("sub.f16", "sub.rn.f16", "sub.f32", "sub.rn.f32")):
            kinds.append("sub")
        elif op.split(".")[0] in ("setp", "selp") and any(t in op for t in ("f16", "f32", "b16")):
            kinds.append("compare/select")
        elif op.split(".")[0] in ("max", "min") and any(t in op for t in ("f16", "f32")):
            kinds.append(op.split(".")[0])
            bounds.append([consts.get(a, a) for a in args[1:]])
        elif op.startswith("ld.global"):
            kinds.append("load" if ".v4." in op else "narrow load")
        elif op.startswith("st.global"):
            kinds.append("store" if ".v4." in op else "narrow store")
    seq = compact(kinds)
    if kinds.count("load") == 1 and "narrow load" not in kinds:
        return (f"the compiled kernel loads one input tile, not two ({seq}): the compiler dropped a "
                "load whose value is not used. Does your sum use A (or B) twice?")
    if "narrow load" in kinds or kinds.count("load") != 2:
        return (f"the kernel's global memory traffic is {seq}: keep one 128-bit load of each "
                "input tile (load the whole (1, 8) tile with .load())")
    if kinds.count("store") != 1 or "narrow store" in kinds:
        return (f"the kernel's global memory traffic is {seq}: store C's tile with one 128-bit "
                "store, gC[(None, (mi, ni))] = the whole tile")
    if numbers_checked:
        return None  # the arithmetic was compared on every element: the PTX need not guess it
    if "add" not in kinds:
        return (f"no addition of the two tiles in the compiled kernel ({seq})"
                + (": you subtract; " if "sub" in kinds else "; ") + "C = relu(A + B) adds the tiles first")
    if "max" not in kinds:
        if "min" in kinds:
            return f"your kernel computes a min ({seq}): ReLU keeps the larger of the sum and zero"
        if "compare/select" in kinds:
            return (f"your activation compiles to a compare-and-select ({seq}) the CPU model could "
                    "not run, so nothing here proves it is ReLU: write it with cute.where or "
                    "cutlass.max and cute.full_like(s, 0)")
        return f"no max in the compiled kernel ({seq}): it stores A + B without the activation"
    for operands in bounds:
        if not any(_is_zero(v) for v in operands):
            return (f"your kernel clamps at {_constant(operands[-1])}, not at zero ({seq}): "
                    "ReLU keeps the larger of the sum and 0")
    if kinds.index("max") < kinds.index("add"):
        return (f"your kernel clamps before it adds ({seq}): relu(A) + relu(B) is not "
                "relu(A + B); add first, then clamp the sum")
    return None


def _relu_on_numbers(attempt) -> str | None:
    """First on numbers on the CPU: every thread, every element of C, A and B untouched."""
    _, finding, attempt.notes["cpu"] = _cpu_verdict(attempt.answer, lambda a, b: np.maximum(a + b, 0),
                                                    RELU_GUESSES, "relu(A + B)", attempt.code)
    return finding


def _relu_compiled(attempt) -> str | None:
    return _fused_problem(attempt.report, numbers_checked=attempt.notes["cpu"].startswith("numbers checked"))


def _relu_passes(attempt) -> str:
    report = attempt.report
    adds, maxes = report.count(r"^add(\.rn)?\.f16x2"), report.count(r"^max(\.NaN)?\.f16x2")
    clamp = f"{maxes} max.f16x2" if maxes else "a compare-and-select per element"
    return (f"{attempt.notes['cpu']}. Compiled for sm_90a: two 128-bit loads, {adds} add.f16x2, {clamp}, "
            "one 128-bit store per thread: the activation costs no memory traffic")


RELU = KernelExercise(
    *EX4, kernel=lambda host_fn: host_fn.__name__, args="cutecourse.exercises.nb01:elementwise_args",
    model=(_relu_on_numbers,), objections=(_relu_compiled,), passes=_relu_passes,
    runner="cutecourse.exercises.nb01:relu_runner", gpu="any", elsewhere="no GPU here: not run on one",
    then=". On the GPU: ")


@RELU.checker
def check_fused_kernel(host_fn) -> Result:
    """``host_fn``: your ``@cute.jit`` host function launching C = relu(A + B) on fp16 tiles.
    First on numbers on the CPU (every thread, every element of C, A and B untouched); then
    compiled for sm_90a (the memory traffic read from the PTX); on a GPU, against torch."""
    return RELU.check(host_fn)
