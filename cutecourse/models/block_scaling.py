"""Block-scaled number formats on the CPU: the references block-scaled GEMMs are checked against.

An 8- or 4-bit float has too little range for a whole tensor: e4m3 spans 2^-9 .. 448, e2m1
only 0.5 .. 6. So every small *block* of consecutive elements along K (the reduction dim, the
last dim here) shares one scale factor ``sf`` and stores ``q = round(x / sf)``; the GEMM
computes ``sum_k (qa*sfa)(qb*sfb)``. Formats (OCP "MX" spec v1.0, and NVIDIA's NVFP4):

==============  ======  ===========================  =====  ========  ==============
name            data    scale factor                 block  data max  bits per value
==============  ======  ===========================  =====  ========  ==============
``nvfp4``       e2m1    e4m3, and one fp32 per        16     6         4 + 8/16 = 4.5
                        tensor (below)
``mxfp4``       e2m1    e8m0 = 2^e, e in -127..127   32     6         4 + 8/32 = 4.25
``mxfp8``       e4m3    e8m0                         32     448       8 + 8/32 = 8.25
``mxfp8_e5m2``  e5m2    e8m0                         32     57344     8.25
==============  ======  ===========================  =====  ========  ==============

(The MX spec's MXFP8 has both e4m3 and e5m2 elements; NVIDIA's recipes use e4m3, which has one
more mantissa bit: the block scale gives the range e5m2's extra exponent bit would.)
e2m1 has 8 magnitudes, {0, .5, 1, 1.5, 2, 3, 4, 6}, plus a sign bit; no inf, no NaN. Data are
rounded to nearest-even and saturated (clamped to the data max): finite input never gives inf or
NaN.

**MX scale rule: two of them.** e8m0 holds only powers of two, so the scale must be rounded.

* The OCP MX v1.0 spec (section 6.3) rounds *down*: ``X = 2^(floor(log2 amax) - emax)``, where
  ``emax`` is the exponent of the data format's largest normal (e2m1: 2, e4m3: 8, e5m2: 15); then
  each ``x / X`` is quantized with saturation, so a block's largest values may be clamped to the
  data max (amax = 7 in MXFP4: X = 1, and 7 is stored as 6).
* NVIDIA's recipe rounds *up*: ``X = 2^ceil(log2(amax / data_max))``, so ``|x| / X <= data_max``
  and nothing saturates (Transformer Engine's MXFP8 recipe: ``float_to_e8m0(amax / max_norm)``
  "rounds toward positive infinity"). The scale is at most 2x the spec's, which costs the small
  values of the block one bit.

The course's model, like NVIDIA's recipe, rounds up (``mx_rule="nvidia"``, the default: the
scales the course's Blackwell kernel is fed); ``mx_rule="ocp"`` is the spec's rule. The hardware
takes whatever e8m0 bytes it is given: the rule is the quantizer's choice.

**NVFP4 is two-level.** An e4m3 scale reaches only 448 (and down to 2^-9), so ``amax / 6`` of a
block falls out of its range in a tensor with huge or tiny values: with an outlier of 8000 the
block scale clips at 448 and that block's values at 6 x 448 = 2688. NVFP4 as NVIDIA uses it
(Transformer Engine's NVFP4 recipe, the NVFP4 blog post) first divides the whole tensor by one
fp32 *per-tensor* scale ``gs = amax(tensor) / (448 * 6)``, so that the block scales of ``x / gs``
fill e4m3's range and never clip; ``x ~ q * sf * gs``. In a GEMM the two tensors' per-tensor
scales multiply the result once: the epilogue's ``alpha = gs_a * gs_b`` (TE computes it as
``amax_A * amax_B / (6 * 6 * 448 * 448)``). :func:`quantize_as_used` and :func:`round_trip`
model NVFP4 this way; ``quantize(x, "nvfp4")`` without ``global_scale`` gives the block scales
alone, the bytes the course's Blackwell kernel takes: its epilogue has no ``alpha``.

**Hopper (DeepSeek-V3 / DeepGEMM).** No block-scaled MMA on sm_90: e4m3 data, fp32 scales per
1x128 (activations A) or 128x128 (weights B) block, and the kernel applies them itself to fp32
partial sums once per 128-wide k-block: :mod:`cutecourse.models.blockwise_fp8`.

**Blackwell's scale-factor layout** (the interleaved order ``tcgen05.mma ... block_scale`` reads):
:mod:`cutecourse.models.sf_layout`; its functions are re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import CourseError, DTypeError, ShapeError
from .blockwise_fp8 import dequantize_blockwise, quantize_blockwise_fp8, scaled_mm_reference
from .float_formats import E2M1_MAX, E2M1_VALUES, E4M3_MAX, E5M2_MAX  # noqa: F401
from .float_formats import as_matrix as _matrix
from .sf_layout import (ATOM_BYTES, ATOM_KBLOCKS, ATOM_ROWS, from_interleaved,  # noqa: F401
                        padded_sf_shape, sf_offset, to_interleaved)

#: The MX scale rules (module docstring): NVIDIA's rounds up, the OCP spec's rounds down.
MX_RULES = ("nvidia", "ocp")
# Midpoints between neighbouring e2m1 magnitudes; a tie goes to the even code (the one whose
# mantissa bit is 0), as ``cvt.rn.satfinite.e2m1x2.f32`` rounds: 0.25 -> 0, 0.75 -> 1.0, 5 -> 4.
_E2M1_MID = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])


@dataclass(frozen=True)
class BlockFormat:
    """One block-scaled format: data and scale dtypes, block size along K, largest data value."""

    name: str
    data: str        # "e2m1", "e4m3" or "e5m2"
    scale: str       # "e4m3" or "e8m0"
    block: int       # elements along K sharing one scale factor
    data_max: float  # 6 (e2m1), 448 (e4m3), 57344 (e5m2)
    emax: int        # exponent of data_max: 6 = 1.5 x 2^2, 448 = 1.75 x 2^8, 57344 = 1.75 x 2^15

    @property
    def bits_per_value(self) -> float:  # data bits + the scale's 8 bits shared by the block
        return (4 if self.data == "e2m1" else 8) + 8 / self.block

    @property
    def data_dtype(self) -> torch.dtype:  # e2m1: two values per byte, see pack_e2m1
        return {"e2m1": torch.float4_e2m1fn_x2, "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[self.data]

    @property
    def scale_dtype(self) -> torch.dtype:
        return torch.float8_e4m3fn if self.scale == "e4m3" else torch.float8_e8m0fnu

    @property
    def cutlass_types(self) -> tuple[str, str]:  # names in ``cutlass``: (data, scale factor)
        names = {"e2m1": "Float4E2M1FN", "e4m3": "Float8E4M3FN", "e5m2": "Float8E5M2", "e8m0": "Float8E8M0FNU"}
        return names[self.data], names[self.scale]


FORMATS = {
    "nvfp4": BlockFormat("nvfp4", "e2m1", "e4m3", 16, E2M1_MAX, 2),
    "mxfp4": BlockFormat("mxfp4", "e2m1", "e8m0", 32, E2M1_MAX, 2),
    "mxfp8": BlockFormat("mxfp8", "e4m3", "e8m0", 32, E4M3_MAX, 8),
    "mxfp8_e5m2": BlockFormat("mxfp8_e5m2", "e5m2", "e8m0", 32, E5M2_MAX, 15),
}


def get_format(fmt: str | BlockFormat) -> BlockFormat:
    if isinstance(fmt, BlockFormat):
        return fmt
    if fmt not in FORMATS:
        raise DTypeError(f"unknown block-scaled format {fmt!r}", f"use one of {', '.join(FORMATS)}")
    return FORMATS[fmt]


# ------------------------------------------------------------------ e2m1 codes and packing ----


def e2m1_codes(y: torch.Tensor) -> torch.Tensor:
    """4-bit codes (uint8, sign in bit 3) of ``y`` rounded to nearest-even e2m1, saturated at 6."""
    mag = y.abs().clamp(max=E2M1_MAX)
    i = torch.bucketize(mag, _E2M1_MID)  # number of midpoints strictly below mag
    tie = (i < 7) & (mag == _E2M1_MID[i.clamp(max=6)]) & (i % 2 == 1)  # tie, odd code below
    return ((i + tie.long()) | ((y < 0).long() << 3)).to(torch.uint8)


def e2m1_values(codes: torch.Tensor) -> torch.Tensor:
    mag = torch.tensor(E2M1_VALUES)[(codes & 7).long()]
    return torch.where(codes >= 8, -mag, mag)


def pack_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """(rows, K) codes -> (rows, K/2) ``torch.float4_e2m1fn_x2``: element 2j in the LOW nibble.

    Why low first: CuTe and CUTLASS address sub-byte element ``i`` at bit ``4*i`` of memory
    (little-endian within the byte), which is what TMA copies and the MMA reads along K; PyTorch's
    ``float4_e2m1fn_x2`` and the CuTe DSL's ``from_dlpack`` (which shows a (r, c) x2 tensor as
    (r, 2c) fp4 values) use the same order. Byte 0x21 holds the codes (1, 2) = (0.5, 1.0).
    """
    if codes.shape[-1] % 2:
        raise ShapeError(f"{codes.shape[-1]} e2m1 values cannot be packed two per byte", "make K even")
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).view(torch.float4_e2m1fn_x2)


def unpack_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pack_e2m1`: (rows, K/2) bytes -> (rows, K) codes."""
    u = packed.view(torch.uint8)
    return torch.stack((u & 0xF, u >> 4), dim=-1).flatten(-2)


# ------------------------------------------------------------ quantize / dequantize (K-blocks) ----


def _round_scale(amax: torch.Tensor, f: BlockFormat, mx_rule: str = "nvidia") -> torch.Tensor:
    """A block's amax (after any per-tensor scale) -> its stored scale factor (f.scale_dtype)."""
    if f.scale == "e4m3":  # round amax / data_max to nearest; saturate at 448 (torch casts with RNE)
        return (amax / f.data_max).clamp(max=E4M3_MAX).to(torch.float8_e4m3fn)
    if mx_rule not in MX_RULES:
        raise CourseError(f"unknown MX scale rule {mx_rule!r}", f"use one of {MX_RULES}: NVIDIA's "
                          "rounds up (nothing saturates), the OCP spec's rounds down (may clamp)")
    if mx_rule == "nvidia":  # 2^ceil(log2 r), r = amax / data_max = m * 2^e with m in [0.5, 1)
        r = amax / f.data_max
        m, e = torch.frexp(r)
        exp = e - (m == 0.5).int()
    else:  # OCP: 2^(floor(log2 amax) - emax); amax = m * 2^e: floor(log2 amax) = e - 1
        r = amax
        exp = torch.frexp(amax)[1] - 1 - f.emax
    exp = torch.where(r > 0, exp, -127).clamp(-127, 127)
    return (exp + 127).to(torch.uint8).view(torch.float8_e8m0fnu)  # byte = exponent + 127


def nvfp4_global_scale(x: torch.Tensor) -> float:
    """NVIDIA's per-tensor fp32 scale: ``amax / (448 * 6)`` (1.0 for an all-zero tensor)."""
    amax = float(_matrix(x, "x").abs().max()) if x.numel() else 0.0
    return amax / (E4M3_MAX * E2M1_MAX) if amax > 0 else 1.0


def quantize(x: torch.Tensor, fmt: str | BlockFormat, global_scale: float | None = None,
             mx_rule: str = "nvidia"):
    """(rows, K) floats -> ``(q, sf)``: data (rows, K) e4m3/e5m2 or (rows, K/2) packed e2m1, and
    scale factors (rows, K/block) in the format's scale dtype. Deterministic.

    ``global_scale``: divide by this per-tensor scale first (NVFP4 as used: pass
    ``nvfp4_global_scale(x)``, or call :func:`quantize_as_used`). ``mx_rule``: how e8m0 scales
    round, ``"nvidia"`` (up) or ``"ocp"`` (the spec's, down); NVFP4's e4m3 scales round to nearest.
    """
    f = get_format(fmt)
    x = _matrix(x, "x", f.block)
    rows, k = x.shape
    gs = 1.0 if global_scale is None else float(global_scale)
    if not gs > 0:
        raise CourseError(f"global_scale = {global_scale!r}", "a per-tensor scale is positive: "
                          "use nvfp4_global_scale(x)")
    xb = x.view(rows, k // f.block, f.block)
    sf = _round_scale(xb.abs().amax(-1) / gs, f, mx_rule)
    s = (sf.float() * gs)[..., None]                       # the scale the MMA multiplies by
    y = torch.where(s > 0, xb / torch.where(s > 0, s, 1.0), 0.0)
    y = y.clamp(-f.data_max, f.data_max).view(rows, k)     # saturate: never inf, never NaN
    q = pack_e2m1(e2m1_codes(y)) if f.data == "e2m1" else y.to(f.data_dtype)
    return q, sf


@dataclass(frozen=True)
class Quantized:
    """A tensor in a block format as NVIDIA's recipes use it: data, block scales, per-tensor scale."""

    q: torch.Tensor
    sf: torch.Tensor
    global_scale: float  # NVFP4: amax / (448 * 6); MX formats: 1.0
    fmt: str

    def dequantize(self) -> torch.Tensor:
        return dequantize(self.q, self.sf, self.fmt, self.global_scale)


def quantize_as_used(x: torch.Tensor, fmt: str | BlockFormat, mx_rule: str = "nvidia") -> Quantized:
    """``fmt`` as it is used: NVFP4 with its per-tensor fp32 scale, MX formats with none."""
    f = get_format(fmt)
    gs = nvfp4_global_scale(x) if f.name == "nvfp4" else 1.0
    return Quantized(*quantize(x, f, gs, mx_rule), gs, f.name)


def dequantize(q: torch.Tensor, sf: torch.Tensor, fmt: str | BlockFormat,
               global_scale: float | None = None) -> torch.Tensor:
    """``q * sf (* global_scale)`` as float32 (rows, K)."""
    f = get_format(fmt)
    if q.dtype != f.data_dtype or sf.dtype != f.scale_dtype:
        raise DTypeError(f"{f.name} needs data {f.data_dtype} and scales {f.scale_dtype}, got "
                         f"{q.dtype} and {sf.dtype}", "pass what quantize(x, fmt) returned")
    vals = e2m1_values(unpack_e2m1(q)) if f.data == "e2m1" else q.float()
    rows, k = vals.shape
    if tuple(sf.shape) != (rows, k // f.block) or k % f.block:
        raise ShapeError(f"{f.name}: data of {rows}x{k} values need {rows}x{k // f.block} scale "
                         f"factors, got {tuple(sf.shape)}", "pass what quantize(x, fmt) returned")
    s = sf.float() * (1.0 if global_scale is None else float(global_scale))
    return (vals.view(rows, -1, f.block) * s[..., None]).view(rows, k)


# ------------------------------------------------------------ references for the kernels ----


def grouped_reference(groups, fmt: str = "nvfp4", global_scale: bool = False) -> list[torch.Tensor]:
    """C_i = dequant(A_i) @ dequant(B_i).T in fp32 for each (A_i (M_i, K_i), B_i (N_i, K_i)).

    ``fmt``: a block format, or ``"fp8_blockwise"`` (Hopper: A per 1x128, B per 128x128, through
    ``blockwise_fp8.scaled_mm_reference``). Quantizing is deterministic, so a kernel test that calls
    :func:`quantize` on the same inputs feeds the kernel exactly the bytes this reference used.
    ``global_scale``: NVFP4 as used, with its per-tensor scale (the product is then computed as the
    kernel would with ``alpha = gs_a * gs_b``). The default, False, is what the course's Blackwell
    kernel computes: it has no ``alpha``, so its tests quantize without the per-tensor
    scale.
    """
    out = []
    for i, (a, b) in enumerate(groups):
        if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
            raise ShapeError(f"group {i}: A {tuple(a.shape)} and B {tuple(b.shape)} are not "
                             "(M, K) and (N, K)", "B is stored (N, K), K-major, like A")
        if fmt == "fp8_blockwise":
            qa, sa = quantize_blockwise_fp8(a, (1, 128))
            qb, sb = quantize_blockwise_fp8(b, (128, 128))
            out.append(scaled_mm_reference(qa, sa, qb, sb))
            continue
        gsa = nvfp4_global_scale(a) if global_scale else None
        gsb = nvfp4_global_scale(b) if global_scale else None
        da = dequantize(*quantize(a, fmt, gsa), fmt, gsa)
        db = dequantize(*quantize(b, fmt, gsb), fmt, gsb)
        out.append(da @ db.T)
    return out


@dataclass(frozen=True)
class ErrorRow:
    format: str
    bits_per_value: float
    rel_fro: float  # ||x - x~||_F / ||x||_F
    rel_max: float  # max |x - x~| / max |x|


#: ``round_trip`` names besides the block formats: NVFP4 without its per-tensor scale (the foil
#: that shows what the second level is for) and the MX formats under the OCP spec's rule.
VARIANTS = {"nvfp4_block_only": "nvfp4", "mxfp8_ocp": "mxfp8", "mxfp4_ocp": "mxfp4"}


def round_trip(x: torch.Tensor, fmt: str) -> torch.Tensor:
    """x quantized and dequantized: ``"bf16"``, ``"fp8_blockwise"`` (1x128), a block format as it
    is used (:func:`quantize_as_used`), or one of ``VARIANTS``."""
    if fmt == "bf16":
        return _matrix(x, "x").bfloat16().float()
    if fmt == "fp8_blockwise":
        return dequantize_blockwise(*quantize_blockwise_fp8(x, (1, 128)), (1, 128))
    if fmt == "nvfp4_block_only":
        return dequantize(*quantize(x, "nvfp4"), "nvfp4")
    if fmt in VARIANTS:
        return quantize_as_used(x, VARIANTS[fmt], mx_rule="ocp").dequantize()
    return quantize_as_used(x, fmt).dequantize()


def error_table(x: torch.Tensor, formats=("bf16", "mxfp8", "nvfp4")) -> list[ErrorRow]:
    """Relative round-trip error of ``x`` in each format (for a figure: bits vs error)."""
    x = _matrix(x, "x")
    bits = {"bf16": 16.0, "fp8_blockwise": 8 + 32 / 128}
    rows = []
    for fmt in formats:
        d = round_trip(x, fmt) - x
        b = bits[fmt] if fmt in bits else get_format(VARIANTS.get(fmt, fmt)).bits_per_value
        rows.append(ErrorRow(fmt, b, float(d.norm() / x.norm().clamp(min=1e-30)),
                             float(d.abs().max() / x.abs().max().clamp(min=1e-30))))
    return rows


def outlier_weights(rows: int, cols: int, seed: int = 0, *, n_outliers: int = 4,
                    magnitude: float = 40.0, std: float = 0.02) -> torch.Tensor:
    """A weight-like (rows, cols) fp32 matrix: N(0, std) with ``n_outliers`` outlier columns (input
    channels) scaled by ``magnitude`` and ``max(1, n_outliers // 2)`` rows by ``magnitude / 4``, as
    in LLM weights; ``n_outliers=0``: no outliers at all. Same seed, same matrix."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(rows, cols, generator=g) * std
    w[:, torch.randperm(cols, generator=g)[:n_outliers]] *= magnitude
    w[torch.randperm(rows, generator=g)[:max(1, n_outliers // 2) if n_outliers else 0], :] *= magnitude / 4
    return w
