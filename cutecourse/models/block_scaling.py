"""Block-scaled number formats on the CPU: the references block-scaled GEMMs are checked against.

An 8- or 4-bit float has too little range for a whole tensor: e4m3 spans 2^-9 .. 448, e2m1
only 0.5 .. 6. So every small *block* of consecutive elements along K (the reduction dim, the
last dim here) shares one scale factor ``sf`` and stores ``q = round(x / sf)``; the GEMM
computes ``sum_k (qa*sfa)(qb*sfb)``. Formats (OCP "MX" spec and NVIDIA's NVFP4):

==========  ======  ==============================  =====  =========  ==============
name        data    scale factor                    block  data max   bits per value
==========  ======  ==============================  =====  =========  ==============
``nvfp4``   e2m1    e4m3 (round to nearest)         16     6          4 + 8/16 = 4.5
``mxfp4``   e2m1    e8m0 = 2^e, e in -127..127      32     6          4 + 8/32 = 4.25
``mxfp8``   e4m3    e8m0 = 2^e                      32     448        8 + 8/32 = 8.25
==========  ======  ==============================  =====  =========  ==============

e2m1 has 8 magnitudes, {0, .5, 1, 1.5, 2, 3, 4, 6}, plus a sign bit; no inf, no NaN.
**Scale rule**: ``sf = amax(block) / data_max``, rounded as the scale's format allows. e8m0
holds only powers of two, so we round *up* (``2^ceil(log2 r)``): then ``|x| / sf <= data_max``
and nothing saturates (Transformer Engine's ``float_to_e8m0(amax / max_norm)``, rounded up; the
OCP spec's ``2^(floor(log2 amax) - emax)`` rounds down and clips the block's largest values
instead). An e4m3 scale rounds to nearest, at most 1/16 down while normal, so ``x / sf`` may
reach 6.4 and is saturated to 6. Data are rounded to nearest-even and saturated:
finite input never gives inf or NaN. A zero block gets the smallest scale the rule yields
(e4m3: 0, e8m0: 2^-127) and all-zero data.

**NVFP4's second level.** An e4m3 scale reaches only 448 and down to 2^-9, so
``amax/6`` of a tensor with tiny or huge values falls out of its range. NVIDIA therefore adds one
fp32 *global* (per-tensor) scale ``gs = amax(tensor) / (448 * 6)``; the block scales are computed
for ``x / gs`` and so fill e4m3's range, and ``x ~ q * sf * gs``. The kernel folds ``gs_a * gs_b``
into the epilogue's ``alpha``. Pass ``global_scale=nvfp4_global_scale(x)`` to use it.

**Hopper (DeepSeek-V3 / DeepGEMM).** No block-scaled MMA on sm_90: e4m3 data, fp32 scales per
1x128 (activations A) or 128x128 (weights B) block, and the kernel applies them itself to fp32
partial sums once per 128-wide k-block (:func:`scaled_mm_reference`).

**Blackwell's scale-factor layout.** ``tcgen05.mma ... block_scale`` reads scale factors in one
fixed order: CuTe's ``BlockScaledBasicChunk``, the atom ``((32,4),(sf_vec,4)):((16,4),(0,1))``,
tiled over the matrix with the k-atoms fastest (``tile_atom_to_shape_SF``). One atom is 128 rows
x 4 k-blocks = 512 bytes; inside it, row r (0..127) starts at ``16*(r % 32) + 4*(r // 32)``, so each
16-byte chunk holds 4 scale factors of rows r, r+32, r+64, r+96: one of the 32 lanes x 128 bits
that ``tcgen05.cp.32x128b.warpx4`` (CuTe's ``Cp4x32x128bOp``) copies from smem to tensor memory.
One atom covers 4 x 16 = 64 K for NVFP4 (one fp4 MMA's K) and 4 x 32 = 128 K for MXFP8.
See :func:`sf_offset`; the tests compare it with CuTe's own layout at every coordinate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..errors import CourseError, DTypeError, ShapeError

E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # codes 0..7; code | 8 is the negative
E4M3_MAX, E2M1_MAX = 448.0, 6.0
# Midpoints between neighbouring e2m1 magnitudes; a tie goes to the even code (the one whose
# mantissa bit is 0), as ``cvt.rn.satfinite.e2m1x2.f32`` rounds: 0.25 -> 0, 0.75 -> 1.0, 5 -> 4.
_E2M1_MID = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])


@dataclass(frozen=True)
class BlockFormat:
    """One block-scaled format: data and scale dtypes, block size along K, largest data value."""

    name: str
    data: str        # "e2m1" or "e4m3"
    scale: str       # "e4m3" or "e8m0"
    block: int       # elements along K sharing one scale factor
    data_max: float  # 6 (e2m1) or 448 (e4m3)

    @property
    def bits_per_value(self) -> float:  # data bits + the scale's 8 bits shared by the block
        return (4 if self.data == "e2m1" else 8) + 8 / self.block

    @property
    def data_dtype(self) -> torch.dtype:  # e2m1: two values per byte, see pack_e2m1
        return torch.float4_e2m1fn_x2 if self.data == "e2m1" else torch.float8_e4m3fn

    @property
    def scale_dtype(self) -> torch.dtype:
        return torch.float8_e4m3fn if self.scale == "e4m3" else torch.float8_e8m0fnu

    @property
    def cutlass_types(self) -> tuple[str, str]:  # names in ``cutlass``: (data, scale factor)
        names = {"e2m1": "Float4E2M1FN", "e4m3": "Float8E4M3FN", "e8m0": "Float8E8M0FNU"}
        return names[self.data], names[self.scale]


FORMATS = {
    "nvfp4": BlockFormat("nvfp4", "e2m1", "e4m3", 16, E2M1_MAX),
    "mxfp4": BlockFormat("mxfp4", "e2m1", "e8m0", 32, E2M1_MAX),
    "mxfp8": BlockFormat("mxfp8", "e4m3", "e8m0", 32, E4M3_MAX),
}


def get_format(fmt: str | BlockFormat) -> BlockFormat:
    if isinstance(fmt, BlockFormat):
        return fmt
    if fmt not in FORMATS:
        raise DTypeError(f"unknown block-scaled format {fmt!r}", f"use one of {', '.join(FORMATS)}")
    return FORMATS[fmt]


def _matrix(x, name: str, block_k: int | None = None, device=None) -> torch.Tensor:
    """``x`` as a float32 2-D tensor on ``device`` (default: the CPU), after checking what
    quantizing it needs."""
    if x.dim() != 2:
        raise ShapeError(f"{name} has {x.dim()} dimensions; block scaling here takes (rows, K)",
                         f"reshape it, e.g. {name}.reshape(-1, {name}.shape[-1])")
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        raise DTypeError(f"{name} is {x.dtype}; quantize takes a float32/float16/bfloat16 tensor",
                         f"convert it, e.g. {name}.float()")
    if block_k is not None and x.shape[1] % block_k:
        raise ShapeError(f"{name} has K = {x.shape[1]}, not a multiple of the block size {block_k}",
                         f"pad K with zeros to {math.ceil(x.shape[1] / block_k) * block_k}")
    x = x.detach().to(device or "cpu", torch.float32)
    if not torch.isfinite(x).all():
        raise CourseError(f"{name} holds inf or NaN", "block scaling is defined for finite values")
    return x


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


def _round_scale(r: torch.Tensor, f: BlockFormat) -> torch.Tensor:
    """Ideal scale ``r = amax / data_max`` -> the stored scale factor (f.scale_dtype)."""
    if f.scale == "e4m3":  # round to nearest; saturate at 448 (torch casts with RNE)
        return r.clamp(max=E4M3_MAX).to(torch.float8_e4m3fn)
    m, e = torch.frexp(r)  # r = m * 2^e, m in [0.5, 1): ceil(log2 r) = e, or e-1 when m == 0.5
    exp = torch.where(r > 0, e - (m == 0.5).int(), -127).clamp(-127, 127)
    return (exp + 127).to(torch.uint8).view(torch.float8_e8m0fnu)  # byte = exponent + 127


def nvfp4_global_scale(x: torch.Tensor) -> float:
    """NVIDIA's per-tensor fp32 scale: ``amax / (448 * 6)`` (1.0 for an all-zero tensor)."""
    amax = float(_matrix(x, "x").abs().max()) if x.numel() else 0.0
    return amax / (E4M3_MAX * E2M1_MAX) if amax > 0 else 1.0


def quantize(x: torch.Tensor, fmt: str | BlockFormat, global_scale: float | None = None):
    """(rows, K) floats -> ``(q, sf)``: data (rows, K) e4m3 or (rows, K/2) packed e2m1, and
    scale factors (rows, K/block) in the format's scale dtype. Deterministic."""
    f = get_format(fmt)
    x = _matrix(x, "x", f.block)
    rows, k = x.shape
    gs = 1.0 if global_scale is None else float(global_scale)
    xb = x.view(rows, k // f.block, f.block)
    sf = _round_scale(xb.abs().amax(-1) / (f.data_max * gs), f)
    s = (sf.float() * gs)[..., None]                       # the scale the MMA multiplies by
    y = torch.where(s > 0, xb / torch.where(s > 0, s, 1.0), 0.0)
    y = y.clamp(-f.data_max, f.data_max).view(rows, k)     # saturate: never inf, never NaN
    q = pack_e2m1(e2m1_codes(y)) if f.data == "e2m1" else y.to(torch.float8_e4m3fn)
    return q, sf


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


# ------------------------------------------------------- Hopper: fp8 with fp32 block scales ----

#: DeepGEMM's floor on a block's amax, so a zero block gets a finite scale (1e-4 / 448).
AMAX_FLOOR = 1e-4


def quantize_blockwise_fp8(x: torch.Tensor, block: tuple[int, int] = (1, 128)):
    """(rows, K) -> ``(q, s)``: e4m3 data (rows, K) and fp32 scales (ceil(rows/br), ceil(K/bk)).

    ``s = max(amax, 1e-4) / 448`` per block, not rounded (fp32). ``(1, 128)``: per token and
    k-block, for activations A. ``(128, 128)``: for weights B. A ragged edge (K or rows not a
    multiple of the block) is a partial block: its amax is over the real elements, as if padded
    with zeros, which is what TMA delivers for out-of-bounds boxes.
    """
    if len(block) != 2 or not all(isinstance(b, int) and b > 0 for b in block):
        raise ShapeError(f"block {block!r} is not (rows, k) of positive ints", "use (1, 128) or (128, 128)")
    br, bk = block
    x = _matrix(x, "x", device=x.device)  # on a GPU, quantized there
    rows, k = x.shape
    nr, nk = math.ceil(rows / br), math.ceil(k / bk)
    xp = torch.zeros(nr * br, nk * bk, device=x.device)
    xp[:rows, :k] = x
    blocks = xp.view(nr, br, nk, bk)
    s = blocks.abs().amax(dim=(1, 3)).clamp(min=AMAX_FLOOR) / E4M3_MAX
    y = (blocks / s[:, None, :, None]).clamp(-E4M3_MAX, E4M3_MAX).view(nr * br, nk * bk)
    return y[:rows, :k].to(torch.float8_e4m3fn), s


def dequantize_blockwise(q: torch.Tensor, s: torch.Tensor, block: tuple[int, int] = (1, 128)):
    rows, k = q.shape
    full = s.repeat_interleave(block[0], 0).repeat_interleave(block[1], 1)[:rows, :k]
    return q.float() * full


def scaled_mm_reference(qa, sa, qb, sb, *, block_k: int = 128, block_n: int = 128,
                        out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """C = A @ B.T the way the Hopper kernel computes it: per 128-wide k-block kb,
    ``acc += (qa_kb @ qb_kb.T) * (sa[:, kb] * sb[n // 128, kb])`` in fp32.

    Why per k-block: the scales differ between k-blocks, so they cannot be applied after the
    whole sum; and Hopper's fp8 WGMMA accumulates with ~14 bits of precision, so DeepGEMM
    promotes every 128 k into fp32 registers anyway. Ragged K is padded with zeros to a
    multiple of 128 (zeros add nothing), as TMA's out-of-bounds fill does.
    """
    for name, t in (("qa", qa), ("qb", qb)):
        if t.dtype != torch.float8_e4m3fn or t.dim() != 2:
            raise DTypeError(f"{name} must be a 2-D float8_e4m3fn tensor, got {t.dtype} {tuple(t.shape)}",
                             "use quantize_blockwise_fp8")
    (m, k), (n, kb_) = qa.shape, qb.shape
    if k != kb_:
        raise ShapeError(f"A is {m}x{k} but B is {n}x{kb_}: K differs", "B is (N, K), K-major like A")
    nk = math.ceil(k / block_k)
    if tuple(sa.shape) != (m, nk) or tuple(sb.shape) != (math.ceil(n / block_n), nk):
        raise ShapeError(f"scales {tuple(sa.shape)}, {tuple(sb.shape)} do not fit A {m}x{k}, B {n}x{k}",
                         f"expect sa ({m}, {nk}) from block (1,{block_k}) and sb "
                         f"({math.ceil(n / block_n)}, {nk}) from block ({block_n},{block_k})")
    dev = qa.device  # the same arithmetic on a GPU, for large references
    a = torch.zeros(m, nk * block_k, device=dev)
    b = torch.zeros(n, nk * block_k, device=dev)
    a[:, :k], b[:, :k] = qa.float(), qb.float()
    sa = sa.to(dev)
    sb_rows = sb.to(dev).float().repeat_interleave(block_n, 0)[:n]  # (N, nk): each row's weight scale
    acc = torch.zeros(m, n, device=dev)
    for kb in range(nk):
        ks = slice(kb * block_k, (kb + 1) * block_k)
        acc += (a[:, ks] @ b[:, ks].T) * (sa[:, kb, None].float() * sb_rows[None, :, kb])
    return acc.to(out_dtype)


# --------------------------------------------------- Blackwell: the interleaved SF layout ----

ATOM_ROWS, ATOM_KBLOCKS, ATOM_BYTES = 128, 4, 512


def padded_sf_shape(rows: int, kblocks: int) -> tuple[int, int]:
    """Rows padded to 128, k-blocks to 4: the whole atoms the kernel's TMA reads."""
    return math.ceil(rows / ATOM_ROWS) * ATOM_ROWS, math.ceil(kblocks / ATOM_KBLOCKS) * ATOM_KBLOCKS


def sf_offset(row: int, kblock: int, rows: int, kblocks: int) -> int:
    """Byte offset of the scale factor of (row, k-block) in the interleaved tensor.

    Atoms are 512 bytes, k-atoms fastest: atom (row // 128, kblock // 4) starts at
    ``512 * ((row // 128) * ceil(kblocks / 4) + kblock // 4)``; inside it
    ``16 * (row % 32) + 4 * ((row // 32) % 4) + kblock % 4``.
    """
    if not (0 <= row < rows and 0 <= kblock < kblocks):
        raise ShapeError(f"(row {row}, k-block {kblock}) is outside {rows} x {kblocks}",
                         "rows index M (or N), k-blocks index K / block")
    atom = (row // 128) * math.ceil(kblocks / 4) + kblock // 4
    return ATOM_BYTES * atom + 16 * (row % 32) + 4 * ((row // 32) % 4) + kblock % 4


def to_interleaved(sf: torch.Tensor) -> torch.Tensor:
    """(rows, kblocks) scale factors -> 1-D tensor in the order :func:`sf_offset` gives, with
    rows padded to 128 and k-blocks to 4 by zero bytes (e4m3 0, e8m0 2^-127): they only ever
    scale padding, whose data the kernel's TMA fills with zeros."""
    if sf.dim() != 2 or sf.element_size() != 1:
        raise ShapeError(f"sf must be a 2-D one-byte tensor (e4m3/e8m0/uint8), got {sf.dtype} "
                         f"{tuple(sf.shape)}", "pass the sf that quantize returned")
    rows, kbl = sf.shape
    pr, pk = padded_sf_shape(rows, kbl)
    buf = torch.zeros(pr, pk, dtype=torch.uint8)
    buf[:rows, :kbl] = sf.view(torch.uint8)
    # row = 128*rm + 32*r4 + r32, kblock = 4*kq + k4  ->  memory order (rm, kq, r32, r4, k4)
    out = buf.view(pr // 128, 4, 32, pk // 4, 4).permute(0, 3, 2, 1, 4).reshape(-1)
    return out.view(sf.dtype)


def from_interleaved(buf: torch.Tensor, rows: int, kblocks: int) -> torch.Tensor:
    """Inverse of :func:`to_interleaved`: the (rows, kblocks) scale factors, padding dropped."""
    pr, pk = padded_sf_shape(rows, kblocks)
    if buf.numel() != pr * pk or buf.element_size() != 1:
        raise ShapeError(f"{rows} x {kblocks} scale factors take {pr * pk} bytes when interleaved, "
                         f"got {buf.numel()} of {buf.dtype}", "pass what to_interleaved returned")
    u = buf.reshape(-1).view(torch.uint8).view(pr // 128, pk // 4, 32, 4, 4)
    return u.permute(0, 3, 2, 1, 4).reshape(pr, pk)[:rows, :kblocks].contiguous().view(buf.dtype)


# ------------------------------------------------------------ references for the kernels ----


def grouped_reference(groups, fmt: str = "nvfp4", global_scale: bool = False) -> list[torch.Tensor]:
    """C_i = dequant(A_i) @ dequant(B_i).T in fp32 for each (A_i (M_i, K_i), B_i (N_i, K_i)).

    ``fmt``: a block format, or ``"fp8_blockwise"`` (Hopper: A per 1x128, B per 128x128, through
    :func:`scaled_mm_reference`). Quantizing is deterministic, so a kernel test that calls
    :func:`quantize` on the same inputs feeds the kernel exactly the bytes this reference used.
    ``global_scale``: use NVFP4's per-tensor scale (the kernel's alpha is then gs_a * gs_b).
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


def round_trip(x: torch.Tensor, fmt: str) -> torch.Tensor:
    """x quantized and dequantized: ``"bf16"``, ``"fp8_blockwise"`` (1x128) or a block format."""
    if fmt == "bf16":
        return _matrix(x, "x").bfloat16().float()
    if fmt == "fp8_blockwise":
        return dequantize_blockwise(*quantize_blockwise_fp8(x, (1, 128)), (1, 128))
    return dequantize(*quantize(x, fmt), fmt)


def error_table(x: torch.Tensor, formats=("bf16", "mxfp8", "nvfp4")) -> list[ErrorRow]:
    """Relative round-trip error of ``x`` in each format (for a figure: bits vs error)."""
    x = _matrix(x, "x")
    bits = {"bf16": 16.0, "fp8_blockwise": 8 + 32 / 128}
    rows = []
    for fmt in formats:
        d = round_trip(x, fmt) - x
        b = bits[fmt] if fmt in bits else get_format(fmt).bits_per_value
        rows.append(ErrorRow(fmt, b, float(d.norm() / x.norm().clamp(min=1e-30)),
                             float(d.abs().max() / x.abs().max().clamp(min=1e-30))))
    return rows


def outlier_weights(rows: int, cols: int, seed: int = 0, *, n_outliers: int = 4,
                    magnitude: float = 40.0, std: float = 0.02) -> torch.Tensor:
    """A weight-like (rows, cols) fp32 matrix: N(0, std) with a few outlier columns (input
    channels) and rows scaled by ``magnitude``, as in LLM weights. Same seed, same matrix."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(rows, cols, generator=g) * std
    w[:, torch.randperm(cols, generator=g)[:n_outliers]] *= magnitude
    w[torch.randperm(rows, generator=g)[:max(1, n_outliers // 2)], :] *= magnitude / 4
    return w
