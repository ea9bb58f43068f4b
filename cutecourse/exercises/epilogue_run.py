"""Run a learner's epilogue op on numbers, on the CPU: the CPU model of notebook 06's Exercise 9.

``apply(x, m, n, bias)`` is ordinary Python over a few DSL names. With ``cutlass.max`` /
``min`` / ``Float32``, ``cute.max`` / ``min`` and ``cute.arch.fmax`` / ``fmin`` standing for their
plain meaning, and the accumulator a float that also has the DSL's ``.to(dtype)``, it computes
what the compiled epilogue computes. It runs on every element of a 5 x 24 C (rows and columns of
different counts, so a bias read by row is told from one by column), twice per element (a small
accumulator of either sign, and 100.0, above any cap a learner might add), with a bias whose 24
entries all differ and which records every index read: an index past the end is a finding, not
an IndexError to skip. An exception in the learner's line is a finding at that line; only a
DSL-only call the model cannot run (one that needs a kernel being built) leaves the numbers
unchecked, and the checker says so.
"""

from __future__ import annotations

import builtins
import contextlib
from unittest import mock

from .learner_code import reason

ROWS, COLS = 5, 24
BIAS = [0.25 * (i + 1) * (-1) ** i for i in range(COLS)]  # 0.25, -0.5, 0.75, ...: all different


def accumulators(m: int, n: int) -> tuple[float, float]:
    """The two accumulators tried at (m, n): a small one of either sign (0 included), and 100.0."""
    return ((m * 7 + n * 5) % 11 - 5) * 0.75, 100.0


def _keep_num(op: str):
    return lambda self, *other: Num(getattr(float, op)(self, *other))


class Num(float):
    """A float with the DSL numeric's ``.to(dtype)``: arithmetic keeps it a Num."""

    def to(self, dtype):
        return Num(self)

    __add__, __radd__, __sub__, __rsub__ = map(_keep_num, ("__add__", "__radd__", "__sub__", "__rsub__"))
    __mul__, __rmul__, __truediv__, __rtruediv__ = map(_keep_num, ("__mul__", "__rmul__", "__truediv__",
                                                                   "__rtruediv__"))
    __neg__, __abs__ = _keep_num("__neg__"), _keep_num("__abs__")


class OpFinding(Exception):
    """What the learner's op does wrong on the CPU model, in words for the learner."""


class DslOnly(Exception):
    """The op calls a DSL operation that exists only while a kernel is built."""


class RecordingBias:
    """``bias`` (N = 24 fp32 values, one per column of C): records each index read, refuses one
    outside 0..N-1 with a finding (a GPU would read past the tensor)."""

    def __init__(self):
        self.reads: list[tuple[int, int, int]] = []  # (m, n, index)
        self.at = (0, 0)

    def __getitem__(self, idx):
        if isinstance(idx, tuple) and len(idx) == 1:
            idx = idx[0]
        i = int(idx)
        m, n = self.at
        self.reads.append((m, n, i))
        if not 0 <= i < COLS:
            raise OpFinding(f"at row m = {m}, column n = {n} your op reads bias[{i}], outside the bias "
                            f"(N = {COLS} entries, bias[0] to bias[{COLS - 1}], one per column of C): "
                            "the GPU would read memory past it. A column's bias is bias[n]")
        return Num(BIAS[i])


@contextlib.contextmanager
def plain_arithmetic():
    """``cutlass.max`` / ``min`` / ``Float32`` (and ``cute.max`` / ``min``, ``cute.arch.fmax`` /
    ``fmin``) as Python's, on :class:`Num`: the CPU model of an op's ``apply`` and a ``tile_of``."""
    import cutlass
    import cutlass.cute as cute

    def two(fn):  # cute.max(x, y, propagate_nan=...) and cute.arch.fmax(a, b): on two numbers
        return lambda a, b, *_, **__: Num(fn(a, b)) if isinstance(a, float) or isinstance(b, float) else fn(a, b)

    patches = [(cutlass, "max", two(builtins.max)), (cutlass, "min", two(builtins.min)),
               (cutlass, "Float32", Num), (cute, "max", two(builtins.max)), (cute, "min", two(builtins.min)),
               (cute.arch, "fmax", two(builtins.max)), (cute.arch, "fmin", two(builtins.min))]
    with contextlib.ExitStack() as stack:
        for owner, name, value in patches:
            if hasattr(owner, name):
                stack.enter_context(mock.patch.object(owner, name, value))
        yield


def _dsl_only(exc: BaseException) -> bool:
    """The exception comes from inside the DSL, which needs a kernel being built (no MLIR
    context on the CPU model): not the learner's mistake."""
    tb, inner = exc.__traceback__, None
    while tb is not None:
        inner = tb.tb_frame.f_code.co_filename
        tb = tb.tb_next
    text = str(exc)
    return bool(inner and "/cutlass/" in inner.replace("\\", "/")
                and any(w in text for w in ("MLIR", "mlir", "Context", "context", "InsertionPoint", "ir.")))


def run_op(op, code=None) -> tuple[list, list, RecordingBias]:
    """``op.apply`` on every (x, m, n) of the 5 x 24 C: (samples, results, the recording bias).
    Raises OpFinding (with the learner's line where ``code`` is given), DslOnly, or
    NotImplementedError (the exercise's stub)."""
    bias, samples, got = RecordingBias(), [], []
    with plain_arithmetic():
        for m in range(ROWS):
            for n in range(COLS):
                for x in accumulators(m, n):
                    bias.at = (m, n)
                    try:
                        value = op.apply(Num(x), m, n, bias)
                        got.append(float(value))
                    except (OpFinding, NotImplementedError):
                        raise
                    except Exception as exc:
                        where = code.locate(exc) if code is not None else None
                        at = f" at {code.describe(*where)}" if where else ""
                        if _dsl_only(exc):  # named by the learner's line, never by MLIR's words
                            raise DslOnly(code.describe(*where) if where else "a DSL call") from None
                        why = reason(exc).replace("'Num' object", "the accumulator x (a Float32)")
                        why = why.replace("'RecordingBias' object", "bias (a tensor of N fp32)")
                        raise OpFinding(f"your apply fails on the CPU model for x = {x}, row m = {m}, "
                                        f"column n = {n}{at}: {why}") from None
                    samples.append((x, m, n))
    return samples, got, bias


#: What a typical wrong op computes, and how to say it: (function of x, m, n, bias, message).
WRONG_OPS = [
    (lambda x, m, n, b: x + b[n],
     "your op adds the bias but never clamps: negative outputs stay negative. ReLU is "
     "cutlass.max(..., cutlass.Float32(0.0)) of the biased value"),
    (lambda x, m, n, b: max(x, 0.0) + b[n],
     "your op clamps before it adds the bias, so a negative bias makes outputs negative: "
     "relu(x + b) is not relu(x) + b. Add bias[n] first, then take the max with 0"),
    (lambda x, m, n, b: max(x + b[m], 0.0),
     "your op reads bias[m], one value per row of C. A Linear layer's bias has one value per "
     "output feature, a column of C: bias[n]"),
    (lambda x, m, n, b: max(x, 0.0), "your op never adds the bias: add bias[n] before the ReLU"),
    (lambda x, m, n, b: min(x + b[n], 0.0),
     "your op takes the minimum with 0, which keeps only the negative part: ReLU is the maximum"),
    (lambda x, m, n, b: max(x - b[n], 0.0), "your op subtracts the bias: relu(x + bias[n])"),
    (lambda x, m, n, b: max(b[n] - x, 0.0), "your op computes bias[n] - x: relu(x + bias[n])"),
    (lambda x, m, n, b: max(x * b[n], 0.0), "your op multiplies by the bias: relu(x + bias[n])"),
    (lambda x, m, n, b: max(x + b[n], 0.0) + b[n], "your op adds the bias twice (once after the ReLU)"),
    (lambda x, m, n, b: abs(x + b[n]), "your op stores |x + bias[n]|: ReLU sets negative values "
     "to 0, it does not flip their sign"),
] + [(lambda x, m, n, b, k=k: max(x + b[n], k), f"your op clamps at {k}, not at 0: ReLU is "
      "max(x + bias[n], 0)") for k in (1.0, -1.0, 0.5)]


def op_verdict(op, code=None) -> str | None:
    """The CPU model's objection to the learner's op, or None: ``apply`` on every element of a
    5 x 24 C. Raises DslOnly where the model cannot run the op."""
    if tuple(getattr(op, "operands", ())) != ("bias",):
        return (f"your op declares operands = {tuple(getattr(op, 'operands', ()))!r}: declare "
                "operands = (\"bias\",), so the kernel passes the bias tensor to apply after m and n")
    try:
        samples, got, bias = run_op(op, code)
    except OpFinding as exc:
        return str(exc)
    want = [max(x + BIAS[n], 0.0) for x, m, n in samples]  # relu(x + bias[n])
    if all(abs(g - w) < 1e-6 for g, w in zip(got, want)):
        return None
    for fn, message in WRONG_OPS:
        if all(abs(g - fn(*s, BIAS)) < 1e-6 for g, s in zip(got, samples)):
            return message
    (x, m, n), g, w = next((s, g, w) for s, g, w in zip(samples, got, want) if abs(g - w) >= 1e-6)
    read = sorted({i for mm, nn, i in bias.reads if (mm, nn) == (m, n)})
    reads = (f"it read bias{read} there" if read and read != [n] else
             "it read bias[n] there" if read else "it read no bias there")
    return (f"for an accumulator {x} at row {m}, column {n}, with bias[{n}] = {BIAS[n]}, your op "
            f"gives {g}; relu(x + bias[n]) is {w} ({reads})")
