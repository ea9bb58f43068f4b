"""A CPU model, bit for bit, of the kernel's int4 -> bf16 conversion of one 32-bit word.

bf16 has 7 mantissa bits. The bf16 number 0x4300 is 128.0, and at 128 one unit of the last
mantissa place is exactly 1; so putting a 4-bit q into the low bits, 0x4300 | q, *is* the bf16
number 128 + q. Two of them fit a register: with the magic word 0x43004300,

    r_j = ((word >> 4 j) & 0x000F000F) | 0x43004300      (one shift, one lop3)

holds 128 + nibble j (low half) and 128 + nibble j + 4 (high half). One packed subtraction of
128 + zero (exact: both are integers below 256) leaves q - zero, and one packed multiply by the
group's scale rounds once, as ``int4.dequantize`` does. Eight values cost 4 shifts and lop3s (the
first shift is free), 4 subtractions and 4 multiplies: about 2 instructions a value where
eight ``cvt`` from an integer (plus the unpacking they need) cost more, and the cvt path
would still have to subtract the zero point.

Register j is the A-fragment register j of wgmma: values 2j, 2j+1, of row g (j even) or row
g + 8 (j odd): hence the nibble order of ``reorder.NIBBLE``.
"""

from __future__ import annotations

#: bf16 128.0 in both halves: OR-ing a 4-bit q into the low bits gives 128 + q.
MAGIC = 0x43004300
#: The two nibbles register j takes (after the shift by 4 j): bits 0-3 and 16-19.
NIBBLE_MASK = 0x000F000F


def magic_registers(words):
    """The four ``(word >> 4j) & 0x000F000F | 0x43004300`` (as int64 tensors of 32-bit patterns)."""
    import torch

    words = torch.as_tensor(words, dtype=torch.int64) & 0xFFFFFFFF
    return [((words >> (4 * j)) & NIBBLE_MASK) | MAGIC for j in range(4)]


def _halves(bits):
    """int64 tensor of 32-bit patterns -> (low, high) bf16 halves as float32 (exact)."""
    import torch

    lo = (bits & 0xFFFF).to(torch.int32) << 16
    hi = ((bits >> 16) & 0xFFFF).to(torch.int32) << 16
    return lo.view(torch.float32), hi.view(torch.float32)


def _bf16_bits(x):
    """float32 -> its bf16 rounding's 16-bit pattern (int64)."""
    import torch

    return x.to(torch.bfloat16).view(torch.int16).to(torch.int64) & 0xFFFF


def convert_word(words, scale_rows, zero_rows=(8, 8)):
    """The four bf16x2 registers the kernel makes of ``words`` (int64/int32 tensor of 32-bit
    patterns): ``scale_rows`` = (scale of row g, scale of row g + 8), bf16 tensors (or floats)
    broadcastable against ``words``; ``zero_rows`` likewise, integers in [0, 15].

    Step by step as the kernel: magic registers, packed bf16 subtraction of (128 + zero) in
    both halves, packed bf16 multiply by the scale. Returns a list of 4 int64 tensors.
    """
    import torch

    out = []
    for j, r in enumerate(magic_registers(words)):
        row = j % 2  # registers 0, 2: row g; 1, 3: row g + 8
        zero = torch.as_tensor(zero_rows[row], dtype=torch.int64)
        zz = MAGIC | (zero * 0x00010001)  # 128 + zero, in both halves
        scale = torch.as_tensor(scale_rows[row]).to(torch.bfloat16).float()
        halves = []
        for x, z in zip(_halves(r), _halves(zz)):
            diff = _bf16_bits(x - z)  # sub.bf16x2: exact, |q - zero| <= 15
            d = (diff.to(torch.int32) << 16).view(torch.float32)
            halves.append(_bf16_bits(d * scale))  # mul.rn.bf16x2: one rounding
        out.append(halves[0] | (halves[1] << 16))
    return out


def fragment_values(words, scale_rows, zero_rows=(8, 8)):
    """The 8 bf16 values (fragment order v = 0..7, a (..., 8) bf16 tensor) of ``convert_word``."""
    import torch

    regs = convert_word(words, scale_rows, zero_rows)
    vals = []
    for r in regs:
        vals += [r & 0xFFFF, (r >> 16) & 0xFFFF]
    bits = torch.stack(vals, dim=-1)
    return torch.where(bits >= 2**15, bits - 2**16, bits).to(torch.int16).view(torch.bfloat16)
