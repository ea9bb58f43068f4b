"""Epilogue ops: what a GEMM does to each fp32 accumulator before it becomes an element of C.

A GEMM in a network is rarely alone: ``relu(A @ B.T + bias)`` is one layer. Doing the bias and the
activation while the accumulators are still in registers costs a few instructions per element;
doing them afterwards costs a second kernel that reads and writes all of C again. So every course
GEMM takes an ``epilogue_op`` (CUTLASS's ``epilogue_op``, quack's epilogue ops): an object whose
:meth:`EpilogueOp.apply` turns one accumulator into the value that is converted to C's dtype and
stored.

``apply`` runs on the GPU, once per accumulator of the thread (the loop is unrolled at compile
time), with the element's row ``m`` and column ``n`` in C, so an op can read per-row or
per-column operands. Such operands (a bias vector, a per-channel scale) are named in
``operands``; the launcher takes them as torch tensors (``epilogue_args=(bias,)``, in that
order) and the kernel passes them to ``apply`` after ``m`` and ``n``. Without an op
(``epilogue_op=None``) the kernels convert the accumulators unchanged: the code the course's
measurements were taken with.

An op is part of the kernel's configuration: two kernels with different ops are two compiled
kernels (the compile cache's key holds the op's class and its attributes).
"""

from __future__ import annotations

import cutlass


class EpilogueOp:
    """The identity: C = the accumulator. Subclass it and override :meth:`apply`."""

    #: Names of the tensors the op reads, in the order the launcher takes them.
    operands: tuple[str, ...] = ()

    def apply(self, x, m, n, *operands):
        """One accumulator ``x`` (Float32) of C's row ``m``, column ``n`` (run-time Int32);
        ``operands``: the tensors named in :attr:`operands`. Returns a Float32."""
        return x

    def key(self):
        """What the compiled code depends on: the op's class and its attributes (by ``repr``,
        so that a list or a dict attribute can be part of the compile cache's key too)."""
        return (type(self), tuple(sorted((k, repr(v)) for k, v in vars(self).items())))

    def __repr__(self):
        fields = ", ".join(f"{k}={v!r}" for k, v in sorted(vars(self).items()))
        return f"{type(self).__name__}({fields})"


class Relu(EpilogueOp):
    """C = max(acc, 0)."""

    def apply(self, x, m, n):
        return cutlass.max(x, cutlass.Float32(0.0))


class AddBias(EpilogueOp):
    """C = acc + bias[n]: one fp32 value per column of C (a Linear layer's bias)."""

    operands = ("bias",)

    def apply(self, x, m, n, bias):
        return x + bias[n]
