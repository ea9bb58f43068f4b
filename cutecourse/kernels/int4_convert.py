"""int4 -> bf16 (or fp16) in registers, device side: one 32-bit word of 8 nibbles -> 4 wgmma A registers.

The arithmetic is ``cutecourse/quant/convert.py`` (its CPU model, bit for bit): a magic number
makes a 4-bit integer a bf16 number with one logic instruction, so no ``cvt`` is needed:

    lop3.b32      t, w >> 4j, 0x000F000F, 0x43004300, 0xEA   // (a & b) | c: 128 + q, twice
    sub.rn.bf16x2 t, t, zz                                    // - (128 + zero): q - zero, exact
    mul.rn.bf16x2 r, t, ss                                    // * scale: rounded once

``zz`` and ``ss`` are the zero and the scale of the register's row, in both halves; ``sub_zero``
writes the ``sub``, ``sub_mul`` the ``sub`` and the ``mul``. For fp16 activations
(``dtype="float16"``) the magic word is 0x64006400 (1024.0 twice: fp16's unit in the last place
is 1 at 1024), ``zz`` is 1024 + zero, and the two are ``sub.rn.f16x2`` and ``mul.rn.f16x2``. The
PTX is written out (the DSL's ``inline_ptx``) so that what the notebook shows is what the GPU runs.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass.cute.arch.nvvm_wrappers import inline_ptx

from ..quant.convert import MAGICS

#: bf16 128.0 in both halves; see quant/convert.py (``MAGICS``: each 16-bit float's).
MAGIC = MAGICS["bfloat16"]
NIBBLE_MASK = 0x000F000F
#: lop3's truth table for (a & b) | c: a = 0xF0, b = 0xCC, c = 0xAA.
AND_OR = 0xEA
#: What the conversion makes, by torch name: the DSL type and the packed PTX type of its arithmetic.
TYPES = {"bfloat16": cutlass.BFloat16, "float16": cutlass.Float16}
PACKED = {"bfloat16": "bf16x2", "float16": "f16x2"}


@cute.jit
def magic(word: cutlass.Int32, j: cutlass.Constexpr[int], dtype: cutlass.Constexpr[str] = "bfloat16") -> cutlass.Int32:
    """128 + nibble j (low half) and 128 + nibble j + 4 (high half) as bf16x2 (fp16: 1024 + q)."""
    shifted = word
    if cutlass.const_expr(j > 0):
        shifted = cutlass.Int32(cutlass.Uint32(word) >> (4 * j))
    return inline_ptx(f"lop3.b32 {{$w0}}, {{$r0}}, {NIBBLE_MASK:#x}, {MAGICS[dtype]:#x}, {AND_OR:#x};",
                      write_only_types=[cutlass.Int32], read_only_args=[shifted])


@cute.jit
def sub_zero(x: cutlass.Int32, zz, dtype: cutlass.Constexpr[str] = "bfloat16") -> cutlass.Int32:
    """x - zz on two bf16 (``dtype`` float16: fp16) halves at once: (128 + q) - (128 + zero), exact.
    ``zz`` a Python int (symmetric weights: 128 + 8 in both halves) is moved into a register inside
    the asm: packed 16-bit arithmetic takes no immediate operand."""
    x2 = PACKED[dtype]
    if cutlass.const_expr(isinstance(zz, int)):
        return inline_ptx("{\n.reg .b32 zz;\n"
                          f"mov.b32 zz, {zz:#x};\n"
                          f"sub.rn.{x2} {{$w0}}, {{$r0}}, zz;\n}}", write_only_types=[cutlass.Int32],
                          read_only_args=[x])
    return inline_ptx(f"sub.rn.{x2} {{$w0}}, {{$r0}}, {{$r1}};", write_only_types=[cutlass.Int32],
                      read_only_args=[x, zz])


@cute.jit
def sub_mul(x: cutlass.Int32, zz, ss: cutlass.Int32, dtype: cutlass.Constexpr[str] = "bfloat16") -> cutlass.Int32:
    """(x - zz) * ss on two bf16 (fp16) halves at once: :func:`sub_zero`, exact, then one packed
    multiply, which rounds."""
    d = sub_zero(x, zz, dtype)
    return inline_ptx(f"mul.rn.{PACKED[dtype]} {{$w0}}, {{$r0}}, {{$r1}};", write_only_types=[cutlass.Int32],
                      read_only_args=[d, ss])


#: The bf16 conversion by the name notebook 08 and its exercise use.
sub_mul_bf16x2 = sub_mul


@cute.jit
def both_halves(bits16) -> cutlass.Int32:
    """A 16-bit pattern (a scale, or the magic number + zero) repeated in both halves of a register."""
    b = cutlass.Int32(bits16) & 0xFFFF
    return b | (b << 16)


def symmetric_zero(dtype: str) -> int:
    """``zz`` of symmetric weights (zero point 8): 136.0 twice in bf16, 1032.0 twice in fp16."""
    from ..quant.int4 import SYMMETRIC_ZERO

    return MAGICS[dtype] | (SYMMETRIC_ZERO * 0x00010001)


@cute.jit
def zero_word(zero, dtype: cutlass.Constexpr[str] = "bfloat16") -> cutlass.Int32:
    """``zz`` of a zero point read from memory (uint8 in [0, 15]): magic + zero, in both halves."""
    return cutlass.Int32(MAGICS[dtype]) | both_halves(zero)


def check_dtype(dtype: str):
    """The conversion makes bf16 or fp16: the activations' dtype, named as torch names it."""
    if dtype not in TYPES:
        from ..errors import DTypeError

        raise DTypeError(f"dtype={dtype!r}: the int4 conversion makes the activations' type, bfloat16 or float16",
                         'use dtype="bfloat16" or dtype="float16" (x\'s dtype)')


@cute.jit
def convert_word(word: cutlass.Int32, zz, ss, regs: cute.Tensor, first: cutlass.Constexpr[int],
                 dtype: cutlass.Constexpr[str] = "bfloat16"):
    """Write the 4 registers of ``word`` into ``regs[first .. first + 3]`` (Int32 view of the A
    fragment). ``zz`` / ``ss``: (row g, row g + 8) pairs, register j being of row g + 8 (j % 2);
    ``zz`` may be one Python int for both rows (a constant zero point). ``ss`` None: the registers
    hold q - zero, exact, unscaled (lop3 and sub only: the variant "deferred_scales",
    ``mixed_deferred.py``, scales each group's fp32 sum after the wgmmas instead)."""
    for j in cutlass.range_constexpr(4):
        zj = zz if cutlass.const_expr(isinstance(zz, int)) else zz[j % 2]
        if cutlass.const_expr(ss is None):
            regs[first + j] = sub_zero(magic(word, j, dtype), zj, dtype)
        else:
            regs[first + j] = sub_mul(magic(word, j, dtype), zj, ss[j % 2], dtype)
