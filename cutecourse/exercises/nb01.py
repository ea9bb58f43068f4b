"""Checkers for notebook 01's exercises (layouts, tilers, the vectorized kernel, a fused activation)."""

from __future__ import annotations

from .. import layouts, modes
from . import Result, checker, failed, passed
from .kernel_check import kernel_checker


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


@checker(*EX3)
def check_vector_kernel(host_fn, m: int = 256, n: int = 256) -> Result:
    """Compile the learner's host function for fp16 (m, n): it must issue 128-bit loads and
    stores only; on a GPU it must also compute A + B exactly."""
    import cutlass
    from cutlass.cute.runtime import make_fake_compact_tensor

    from ..inspect import compile_here

    title, hint = EX3
    fake = make_fake_compact_tensor(cutlass.Float16, (m, n), stride_order=(1, 0), assumed_align=16)
    try:
        report = compile_here(host_fn, fake, fake, fake)
    except Exception as exc:  # the compiler's first line is the useful part
        return failed(title, f"it does not compile: {str(exc).splitlines()[0]}", hint)
    wide = report.count(r"^ld\.global(\.[\w:]+)*\.v4\.b32")
    narrow = report.count("scalar global loads")
    if narrow or wide != 2:
        return failed(title, f"the PTX has {wide} 128-bit and {narrow} narrower global loads per "
                      "thread; one 128-bit load of A and one of B was the goal", hint)
    if report.count("vector global stores") != 1 or report.count("scalar global stores"):
        return failed(title, "the loads are right but the store is not one 128-bit store", hint)
    if not modes.mode_for("any").run:
        return passed(title, "compiles to one 128-bit load of A, one of B and one 128-bit store per "
                      "thread (no GPU here to run it)")
    return _run_on_gpu(host_fn, m, n, title, hint)


def _run_on_gpu(host_fn, m: int, n: int, title: str, hint: str) -> Result:
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
    return passed(title, f"128-bit loads and stores, and A + B is exact on {torch.cuda.get_device_name()}")


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


_SKIPPED = "the CPU run could not follow the kernel"


class _Skip(Exception):
    pass


def numbers(code, m: int = 4, n: int = 32) -> str | None:
    """Run the learner's ``@cute.kernel`` body on numbers, on the CPU: every thread of one block
    of 256 over fp16 A, B (m, n), with numpy standing for the DSL's tiles, ``cute.where`` and
    ``cute.full_like``. None if C equals relu(A + B); else the first difference, in words;
    ``_SKIPPED`` if the body uses anything else (the PTX verdict stands then)."""
    import ast
    import types

    import numpy as np

    seg = next((sg for sg in code.segments if "@cute.kernel" in sg.text), None)
    if seg is None:
        return _SKIPPED
    tree = ast.parse(seg.text)
    tree.body[0].decorator_list = []
    ast.increment_lineno(tree, seg.first - 1)
    rng = np.random.default_rng(0)
    a, b = (rng.integers(-4, 5, (m, n)).astype(np.float16) for _ in range(2))
    c = np.full((m, n), np.nan, np.float16)
    v = 8

    class Divided:  # zipped_divide(t, (1, 8)): ((1, 8), (m, n / 8))
        shape = ((1, v), (m, n // v))

        def __init__(self, arr):
            self.arr = arr

        def _where(self, idx):
            inner, (mi, ni) = idx
            cols = slice(ni * v, ni * v + v) if inner is None else ni * v + inner[1]
            return int(mi), cols

        def __getitem__(self, idx):
            r, cols = self._where(idx)
            if isinstance(cols, slice):
                return types.SimpleNamespace(load=lambda: self.arr[r, cols].copy(),
                                             store=lambda x: self.arr.__setitem__((r, cols), x))
            return self.arr[r, cols]

        def __setitem__(self, idx, x):
            self.arr[self._where(idx)] = x

    class Shim(types.SimpleNamespace):
        def __getattr__(self, name):
            raise _Skip(name)

    tid = [0]
    arch = Shim(thread_idx=lambda: (tid[0], 0, 0), block_idx=lambda: (0, 0, 0),
                block_dim=lambda: (256, 1, 1))
    cute = Shim(Tensor=object, arch=arch, where=np.where,
                full_like=lambda x, val: np.full_like(x, val), zeros_like=np.zeros_like)
    cutlass = Shim(range_constexpr=range, range=range, Float16=np.float16, Float32=np.float32)
    names = {"cute": cute, "cutlass": cutlass, "__builtins__": __builtins__}
    try:
        exec(compile(tree, seg.filename, "exec"), names)  # noqa: S102  (the learner's kernel)
        kernel = names[tree.body[0].name]
        for tid[0] in range(256):
            kernel(Divided(a), Divided(b), Divided(c))
    except Exception:  # a DSL name the shim does not have, or the kernel needs the real DSL
        return _SKIPPED
    want = np.maximum(a + b, np.float16(0))
    bad = np.argwhere(~(c == want))
    if not len(bad):
        return None
    r, col = bad[0]
    return (f"on numbers (the CPU runs every thread of a {m}x{n} problem) C[{r}, {col}] is "
            f"{c[r, col]} where relu({a[r, col]} + {b[r, col]}) is {want[r, col]}")


def _fused_problem(report, code=None) -> str | None:
    """What is wrong with the arithmetic and the memory traffic of the compiled kernel
    (``code``, the learner's, runs on numbers where the PTX alone cannot tell)."""
    from .kernel_check import compact

    lines = report.instructions()
    kinds, consts, bounds = [], {}, []
    for ln in lines:
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
    if "narrow load" in kinds or kinds.count("load") != 2 or kinds.count("store") != 1 or \
            "narrow store" in kinds:
        return (f"the kernel's global memory traffic is {seq}: keep one 128-bit load of each "
                "input tile and one 128-bit store (load the whole (1, 8) tile with .load())")
    if "add" not in kinds:
        return (f"no addition of the two tiles in the compiled kernel ({seq})"
                + (": you subtract; " if "sub" in kinds else "; ")
                + "C = relu(A + B) adds the tiles first")
    if "max" not in kinds:
        if "min" in kinds:
            return (f"your kernel computes a min ({seq}): that clamps from above; ReLU keeps the "
                    "larger of the sum and zero")
        if "compare/select" in kinds:
            wrong = numbers(code) if code is not None else _SKIPPED
            if wrong is None:
                return None  # a select that computes ReLU (e.g. where(s < 0, 0, s)): right
            return (f"your activation compiles to a compare-and-select ({seq}), not to "
                    "max(A + B, 0)" + (f", and {wrong}" if wrong is not _SKIPPED else "")
                    + ": compare the sum itself with zero and pick zero where it is negative")
        return f"no max in the compiled kernel ({seq}): it stores A + B without the activation"
    for operands in bounds:
        if not any(_is_zero(v) for v in operands):
            return (f"your kernel clamps at {_constant(operands[-1])}, not at zero ({seq}): "
                    "ReLU keeps the larger of the sum and 0")
    if kinds.index("max") < kinds.index("add"):
        return (f"your kernel clamps before it adds ({seq}): relu(A) + relu(B) is not "
                "relu(A + B); add first, then clamp the sum")
    return None


@kernel_checker(*EX4)
def check_fused_kernel(host_fn) -> Result:
    """``host_fn``: your ``@cute.jit`` host function launching C = relu(A + B) on fp16 tiles."""
    from . import kernel_check as kc

    title = EX4[0]
    code = kc.LearnerCode(host_fn)
    report = kc.compile_kernel(code, host_fn.__name__, args="cutecourse.exercises.nb01:elementwise_args")
    problem = _fused_problem(report, code)
    if problem:
        return failed(title, problem)
    adds, maxes = report.count(r"^add(\.rn)?\.f16x2"), report.count(r"^max(\.NaN)?\.f16x2")
    clamp = (f"{maxes} max.f16x2 against zero" if maxes else
             "a compare-and-select per element (equal to relu(A + B) on numbers, run on the CPU)")
    message = (f"compiled for sm_90a: two 128-bit loads, {adds} add.f16x2, {clamp}, one 128-bit "
               "store per thread: the activation costs no memory traffic")
    if not kc.gpu_here("any"):
        return passed(title, message + " (no GPU here to run it)")
    run = kc.run_on_gpu(code, host_fn.__name__, runner="cutecourse.exercises.nb01:relu_runner")
    if not run.ok:
        return failed(title, run.message)
    return passed(title, message + ". On the GPU: " + run.message)
