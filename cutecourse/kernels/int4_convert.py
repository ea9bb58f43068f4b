"""int4 -> bf16 in registers, device side: one 32-bit word of 8 nibbles -> 4 wgmma A registers.

The arithmetic is ``cutecourse/quant/convert.py`` (its CPU model, bit for bit): a magic number
makes a 4-bit integer a bf16 number with one logic instruction, so no ``cvt`` is needed:

    lop3.b32      t, w >> 4j, 0x000F000F, 0x43004300, 0xEA   // (a & b) | c: 128 + q, twice
    sub.rn.bf16x2 t, t, zz                                    // - (128 + zero): q - zero, exact
    mul.rn.bf16x2 r, t, ss                                    // * scale: rounded once

``zz`` and ``ss`` are the zero and the scale of the register's row, in both halves. The PTX is
written out (the DSL's ``inline_ptx``) so that what the notebook shows is what the GPU runs.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass.cute.arch.nvvm_wrappers import inline_ptx

#: bf16 128.0 in both halves; see quant/convert.py.
MAGIC = 0x43004300
NIBBLE_MASK = 0x000F000F
#: lop3's truth table for (a & b) | c: a = 0xF0, b = 0xCC, c = 0xAA.
AND_OR = 0xEA


@cute.jit
def magic(word: cutlass.Int32, j: cutlass.Constexpr[int]) -> cutlass.Int32:
    """128 + nibble j (low half) and 128 + nibble j + 4 (high half) as bf16x2."""
    shifted = word
    if cutlass.const_expr(j > 0):
        shifted = cutlass.Int32(cutlass.Uint32(word) >> (4 * j))
    return inline_ptx(f"lop3.b32 {{$w0}}, {{$r0}}, {NIBBLE_MASK:#x}, {MAGIC:#x}, {AND_OR:#x};",
                      write_only_types=[cutlass.Int32], read_only_args=[shifted])


@cute.jit
def sub_mul_bf16x2(x: cutlass.Int32, zz, ss: cutlass.Int32) -> cutlass.Int32:
    """(x - zz) * ss on two bf16 halves at once; the subtraction is exact, the product rounds.
    ``zz`` a Python int (symmetric weights: 128 + 8 in both halves) is moved into a register
    inside the asm: bf16x2 arithmetic takes no immediate operand."""
    if cutlass.const_expr(isinstance(zz, int)):
        d = inline_ptx("{\n.reg .b32 zz;\n"
                       f"mov.b32 zz, {zz:#x};\n"
                       "sub.rn.bf16x2 {$w0}, {$r0}, zz;\n}", write_only_types=[cutlass.Int32],
                       read_only_args=[x])
    else:
        d = inline_ptx("sub.rn.bf16x2 {$w0}, {$r0}, {$r1};", write_only_types=[cutlass.Int32],
                       read_only_args=[x, zz])
    return inline_ptx("mul.rn.bf16x2 {$w0}, {$r0}, {$r1};", write_only_types=[cutlass.Int32],
                      read_only_args=[d, ss])


@cute.jit
def both_halves(bits16) -> cutlass.Int32:
    """A 16-bit pattern (bf16 scale or 128 + zero) repeated in both halves of a register."""
    b = cutlass.Int32(bits16) & 0xFFFF
    return b | (b << 16)


@cute.jit
def convert_word(word: cutlass.Int32, zz, ss, regs: cute.Tensor, first: cutlass.Constexpr[int]):
    """Write the 4 registers of ``word`` into ``regs[first .. first + 3]`` (Int32 view of the A
    fragment). ``zz`` / ``ss``: (row g, row g + 8) pairs, register j being of row g + 8 (j % 2);
    ``zz`` may be one Python int for both rows (a constant zero point)."""
    for j in cutlass.range_constexpr(4):
        zj = zz if cutlass.const_expr(isinstance(zz, int)) else zz[j % 2]
        regs[first + j] = sub_mul_bf16x2(magic(word, j), zj, ss[j % 2])

