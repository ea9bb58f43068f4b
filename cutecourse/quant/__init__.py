"""Quantized weights for the mixed-input GEMM: int4 values, group scales, the offline reorder.

``int4``: ``quantize_int4(w, group_size)`` -> (packed, scales, zeros) and ``dequantize`` (the
reference every kernel result is compared with); ``reorder``: where each nibble goes so that one
thread's share of a wgmma A fragment is one 32-bit word (a CuTe layout says it); ``convert``: a CPU
model, bit for bit, of the kernel's int4 -> bf16 conversion (a magic number and three integer ops
instead of eight ``cvt``).
"""

from .int4 import dequantize, quantize_int4, unpack  # noqa: F401
