"""A CPU model, bit for bit, of the kernel's int4 -> bf16 (or fp16) conversion of one 32-bit word.

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

fp16 (for fp16 activations) works the same way with its own magic number: fp16 has 10 mantissa
bits, its 0x6400 is 1024.0, and at 1024 one unit of the last place is 1, so 0x6400 | q is
1024 + q; the magic word is 0x64006400, the zero to subtract 1024 + zero, and the subtraction
and multiply are f16x2 instead of bf16x2. Both products round once: q - zero has at most 5
significant bits and a scale 8 (bf16) or 11 (fp16), so their fp32 product is exact and the
rounding to the 16-bit type is the only one, as in ``int4.dequantize``.

Register j is the A-fragment register j of wgmma: values 2j, 2j+1, of row g (j even) or row
g + 8 (j odd): hence the nibble order of ``reorder.NIBBLE``.
"""

from __future__ import annotations

#: bf16 128.0 in both halves: OR-ing a 4-bit q into the low bits gives 128 + q.
MAGIC = 0x43004300
#: The magic word of each 16-bit float type (by torch name): 128.0 twice in bf16, 1024.0 in fp16.
MAGICS = {"bfloat16": MAGIC, "float16": 0x64006400}
#: The two nibbles register j takes (after the shift by 4 j): bits 0-3 and 16-19.
NIBBLE_MASK = 0x000F000F


def _name(dtype) -> str:
    """torch.bfloat16 / torch.float16 (or their names) -> "bfloat16" / "float16"."""
    name = str(dtype).replace("torch.", "")
    if name not in MAGICS:
        from ..errors import DTypeError

        raise DTypeError(f"dtype={dtype}: the conversion makes bfloat16 or float16 values",
                         "pass torch.bfloat16 or torch.float16 (the scales' dtype)")
    return name


def magic_registers(words, dtype="bfloat16"):
    """The four ``(word >> 4j) & 0x000F000F | magic`` (as int64 tensors of 32-bit patterns):
    magic = 0x43004300 for bf16, 0x64006400 for fp16 (``dtype``)."""
    import torch

    words = torch.as_tensor(words, dtype=torch.int64) & 0xFFFFFFFF
    return [((words >> (4 * j)) & NIBBLE_MASK) | MAGICS[_name(dtype)] for j in range(4)]


def _halves(bits, dtype):
    """int64 tensor of 32-bit patterns -> (low, high) 16-bit ``dtype`` halves as float32 (exact)."""
    return tuple(_from_bits(half, dtype) for half in (bits & 0xFFFF, (bits >> 16) & 0xFFFF))


def _from_bits(bits16, dtype):
    """int64 tensor of 16-bit patterns -> those ``dtype`` numbers as float32 (exact)."""
    import torch

    return torch.where(bits16 >= 2**15, bits16 - 2**16, bits16).to(torch.int16).view(dtype).float()


def _bits(x, dtype):
    """float32 -> its rounding to ``dtype``'s 16-bit pattern (int64): round to nearest even,
    subnormals kept, overflow to infinity, as the packed PTX arithmetic rounds."""
    import torch

    return x.to(dtype).view(torch.int16).to(torch.int64) & 0xFFFF


def convert_word(words, scale_rows, zero_rows=(8, 8), dtype="bfloat16"):
    """The four bf16x2 (or f16x2: ``dtype`` float16) registers the kernel makes of ``words``
    (int64/int32 tensor of 32-bit patterns): ``scale_rows`` = (scale of row g, scale of row
    g + 8), tensors (or floats, rounded to ``dtype``) broadcastable against ``words``;
    ``zero_rows`` likewise, integers in [0, 15]. ``scale_rows`` None: the registers hold q - zero,
    unscaled, as the kernel's ``convert_word`` writes them given no scales (the variant
    "deferred_scales" scales each group's sum after the wgmmas instead).

    Step by step as the kernel: magic registers, packed subtraction of (magic + zero) in both
    halves, packed multiply by the scale. Returns a list of 4 int64 tensors.
    """
    import torch

    dtype = getattr(torch, _name(dtype))
    out = []
    for j, r in enumerate(magic_registers(words, dtype)):
        row = j % 2  # registers 0, 2: row g; 1, 3: row g + 8
        zero = torch.as_tensor(zero_rows[row], dtype=torch.int64)
        zz = MAGICS[_name(dtype)] | (zero * 0x00010001)  # 128 + zero (1024 + zero), in both halves
        scale = None if scale_rows is None else torch.as_tensor(scale_rows[row]).to(dtype).float()
        halves = []
        for x, z in zip(_halves(r, dtype), _halves(zz, dtype)):
            diff = _bits(x - z, dtype)  # sub.rn.bf16x2 / f16x2: exact, |q - zero| <= 15
            if scale is not None:
                diff = _bits(_from_bits(diff, dtype) * scale, dtype)  # mul.rn.bf16x2 / f16x2: one rounding
            halves.append(diff)
        out.append(halves[0] | (halves[1] << 16))
    return out


def fragment_values(words, scale_rows, zero_rows=(8, 8), dtype="bfloat16"):
    """The 8 values (fragment order v = 0..7, a (..., 8) tensor of ``dtype``) of ``convert_word``."""
    import torch

    regs = convert_word(words, scale_rows, zero_rows, dtype)
    vals = []
    for r in regs:
        vals += [r & 0xFFFF, (r >> 16) & 0xFFFF]
    bits = torch.stack(vals, dim=-1)
    return torch.where(bits >= 2**15, bits - 2**16, bits).to(torch.int16).view(getattr(torch, _name(dtype)))
