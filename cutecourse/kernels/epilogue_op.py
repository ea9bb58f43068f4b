"""Epilogue ops: what a GEMM does to each fp32 accumulator before it becomes an element of C.

A GEMM in a network is rarely alone: ``relu(A @ B.T + bias)`` is one layer. Doing the bias and the
activation while the accumulators are still in registers costs a few instructions per element;
doing them afterwards costs a second kernel that reads and writes all of C again. So every course
GEMM takes an ``epilogue_op`` (CUTLASS's ``epilogue_op``, quack's epilogue ops): an object whose
:meth:`EpilogueOp.apply` turns one accumulator into the value that is converted to C's dtype and
stored.

``apply`` runs on the GPU, once per accumulator of the thread (the loop is unrolled at compile
time), with the element's row ``m`` and column ``n`` in C, so an op can read per-row or
per-column operands. Such operands (a bias vector, a per-channel scale) are described in
``operands``: each an :class:`Operand` (its name, dtype, and whether it holds one value per column,
per row, or one in all), or just a name for an fp32 value per column. The launcher takes them as
torch tensors (``epilogue_args=(bias,)``, in that order) and checks each against its description;
the kernel passes them to ``apply`` after ``m`` and ``n``, which it clamps (:func:`clamped`) so
that a tile padding C never makes ``apply`` read past an operand's end. Without an op (``epilogue_op=None``)
the kernels convert the accumulators unchanged: the code the course's measurements were taken with.

An op is part of the kernel's configuration: two kernels with different ops are two compiled
kernels (the compile cache's key holds the op's class, its attributes and its operands'
descriptions, so an op whose bias is bf16 never reuses the kernel compiled for an fp32 one).
"""

from __future__ import annotations

from dataclasses import dataclass

import cutlass

from ..errors import CourseError

#: What an operand may hold, and its bytes per element.
OPERAND_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int32": 4}
#: An operand's length: one value per column of C (N), per row (M), or a single value.
KINDS = ("col", "row", "scalar")


@dataclass(frozen=True)
class Operand:
    """One tensor an op reads: ``name`` (apply's parameter), ``dtype`` (a torch dtype name),
    ``kind`` (``KINDS``: its length is N, M or 1) and ``align``: the bytes the kernel may assume
    its address is a multiple of (0: one element). The launcher checks a tensor against it; the
    compile targets make a fake tensor from it."""

    name: str
    dtype: str = "float32"
    kind: str = "col"
    align: int = 0

    def __post_init__(self):
        if self.dtype not in OPERAND_BYTES:
            raise CourseError(f"operand {self.name!r}: dtype {self.dtype!r} is not one of {list(OPERAND_BYTES)}",
                              "name a torch dtype, e.g. Operand('scale', 'bfloat16')")
        if self.kind not in KINDS:
            raise CourseError(f"operand {self.name!r}: kind {self.kind!r} is not one of {list(KINDS)}",
                              "'col': one value per column of C, 'row': one per row, 'scalar': one")
        object.__setattr__(self, "align", self.align or OPERAND_BYTES[self.dtype])

    def length(self, m: int, n: int) -> int:
        """The elements it holds for a C of M rows and N columns."""
        return {"col": n, "row": m, "scalar": 1}[self.kind]


def described(op) -> tuple[Operand, ...]:
    """The operands ``op`` (or None) reads, each as an :class:`Operand` (a bare name: fp32 per column)."""
    names = op.operands if op is not None else ()
    return tuple(o if isinstance(o, Operand) else Operand(o) for o in names)


def clamped(op, m, n, operands):
    """(m, n) clamped, for ``op.apply``, to the lengths of the operands that read them: ``n`` to a
    "col" operand's last element, ``m`` to a "row" operand's. A tile that pads C holds rows and
    columns past C's; their values are never stored, but ``apply`` still runs for them, and an
    index past an operand's end would read memory that is not the operand's. An operand's length
    is C's extent (N or M: the launcher checks it), so this is the clamp to C, with no argument
    more than the operands themselves. Plain Python, run while the kernel is traced: an op without
    "col" or "row" operands gets no instruction from it."""
    for o, t in zip(described(op), operands):
        if o.kind == "col":
            n = cutlass.min(n, t.shape[0] - 1)
        elif o.kind == "row":
            m = cutlass.min(m, t.shape[0] - 1)
    return m, n


def apply_at(op, values, i, m, n, operands):
    """``values[i] = op.apply(values[i], m, n, *operands)``, the value of C's row ``m``, column
    ``n``, with (m, n) clamped to the operands first (:func:`clamped`): the one place the dense,
    grouped and Blackwell epilogues apply an op (the mixed-input stores clamp to y themselves,
    ``mixed_epilogue.store``). Called while tracing, outside any run-time ``if`` (an op object
    used inside one would be carried through it)."""
    m, n = clamped(op, m, n, operands)  # a padded tile's edge
    values[i] = op.apply(values[i], m, n, *operands)


class EpilogueOp:
    """The identity: C = the accumulator. Subclass it and override :meth:`apply`."""

    #: The tensors the op reads, in the order the launcher takes them: :class:`Operand` objects or names.
    operands: tuple = ()

    def apply(self, x, m, n, *operands):
        """One accumulator ``x`` (Float32) of C's row ``m``, column ``n`` (run-time Int32);
        ``operands``: the tensors described in :attr:`operands`. Returns a Float32."""
        return x

    def reference(self, c, *operands):
        """What :meth:`apply` computes, for all of C at once, in torch: ``c`` the fp32 accumulators
        (M x N, ``A @ B.T``), ``operands`` the torch tensors of :attr:`operands` (row ``m`` of C is
        ``c[m]``, so a "row" operand broadcasts as ``t[:, None]``, a "col" one as ``t[None, :]``).
        The tests check every op of this module against it, on the GPU through a GEMM."""
        return c

    def key(self):
        """What the compiled code depends on: the op's class, its attributes (by ``repr``, so that
        a list or a dict attribute can be part of the compile cache's key too) and its operands."""
        return (type(self), tuple(sorted((k, repr(v)) for k, v in vars(self).items())), described(self))

    def __repr__(self):
        fields = ", ".join(f"{k}={v!r}" for k, v in sorted(vars(self).items()))
        return f"{type(self).__name__}({fields})"


class Relu(EpilogueOp):
    """C = max(acc, 0)."""

    def apply(self, x, m, n):
        return cutlass.max(x, cutlass.Float32(0.0))

    def reference(self, c):
        return c.clamp_min(0.0)


class AddBias(EpilogueOp):
    """C = acc + bias[n]: one fp32 value per column of C (a Linear layer's bias)."""

    operands = (Operand("bias", "float32", "col"),)

    def apply(self, x, m, n, bias):
        return x + bias[n]

    def reference(self, c, bias):
        return c + bias.float()[None, :]
