"""What the grouped GEMMs refuse, and why: the input checks of ``grouped.py``, run on any machine
before anything touches a GPU. Each says what is wrong and how to fix it (``CourseError``).

* the list forms (``grouped_gemm``, ``grouped_gemm_fp8``): :func:`check_groups` applies the dense
  GEMM's operand checks (``gemm_launch.check_operands``) to every group, plus what a grouped
  launch adds (equal-length lists, one dtype, one device); :func:`check_outputs`;
* the packed forms (``grouped_mm``, ``grouped_mm_fp8``): :func:`check_packed`, :func:`check_offs`
  and :func:`check_packed_output`;
* the FP8 kernel's block scales: :func:`check_scales`, :func:`check_packed_scales`;
* the Blackwell kernel's quantized groups: :func:`check_blockscaled_sizes` (before quantizing)
  and :func:`check_quantized` (the bytes it will read).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import AlignmentError, CourseError, DeviceError, DTypeError, LayoutError, ShapeError
from ..models import block_scaling
from ..models.blackwell_plan import check_format
from ..models.blockwise_fp8 import BLOCK
from ..tensors import dtype_name
from .gemm_launch import check_operands


# -- Hopper, list form ----------------------------------------------------------------------------
def check_groups(As, Bs, out_dtype=None, in_dtypes=None) -> tuple[str, str]:
    """The dense GEMM's operand checks for every group (M_g = 0 allowed: the group is skipped),
    plus what a grouped launch adds: equal-length lists, one dtype, one device."""
    import torch

    if not isinstance(As, (list, tuple)) or not isinstance(Bs, (list, tuple)):
        raise ShapeError("grouped_gemm takes a list of A_g and a list of B_g",
                         "e.g. grouped_gemm([a0, a1], [b0, b1]); for one packed A use grouped_mm")
    if len(As) != len(Bs) or not As:
        raise ShapeError(f"{len(As)} A's and {len(Bs)} B's: need the same number, at least one",
                         "pass one (A_g, B_g) pair per group")
    names = set()
    for g, (a, b) in enumerate(zip(As, Bs)):
        try:
            if (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dim() == b.dim() == 2
                    and 0 in (a.shape[0], a.shape[1]) and a.shape[1] == b.shape[1]):
                # nothing to multiply (M_g = 0, or K_g = 0 and C_g = 0): the kernel never reads
                # these tensors, so check only dtypes and devices
                a, b = a.new_empty((1, 16)), b.new_empty((max(1, b.shape[0]), 16))
            names.add(check_operands(a, b, out_dtype, in_dtypes=in_dtypes))
        except CourseError as e:
            raise type(e)(f"group {g}: {e.what}", e.fix) from None
    if len(names) > 1:
        raise DTypeError(f"the groups mix dtypes {sorted(names)}", "give every group the same dtype")
    if len({t.device for t in (*As, *Bs)}) > 1:
        raise DeviceError("the groups' tensors are on different devices", "put them all on one GPU")
    return names.pop()


def check_outputs(As, Bs, Cs):
    """The list form's outputs: one contiguous (M_g, N_g) C_g per group."""
    if len(Cs) != len(As) or any(tuple(c.shape) != (a.shape[0], b.shape[0]) or not c.is_contiguous()
                                 for a, b, c in zip(As, Bs, Cs)):
        raise ShapeError("Cs must hold one contiguous (M_g, N_g) tensor per group",
                         "allocate each as torch.empty(M_g, N_g)")


# -- Hopper, packed form --------------------------------------------------------------------------
def check_packed(a, b, offs, out_dtype=None, in_dtypes=None) -> tuple[str, str]:
    """``torch._grouped_mm``'s 2d x 3d form: a (sum M, K), b (G, K, N) with K-major b[g]."""
    import torch

    if not isinstance(b, torch.Tensor) or b.dim() != 3:
        raise ShapeError("b must be 3-D (G, K, N), as torch._grouped_mm takes it",
                         "stack the experts' weights: w (G, N, K), then pass w.transpose(-2, -1)")
    if not isinstance(offs, torch.Tensor) or offs.dim() != 1 or offs.dtype != torch.int32:
        raise DTypeError("offs must be a 1-D int32 tensor of cumulative row ends, one per group",
                         "e.g. offs = torch.cumsum(rows_per_group, 0).to(torch.int32)")
    if offs.shape[0] != b.shape[0]:
        raise ShapeError(f"offs has {offs.shape[0]} entries but b has {b.shape[0]} groups",
                         "one cumulative end per group")
    if b.stride(1) != 1:
        raise LayoutError(f"b[g] (K, N) must be the transpose of a K-major (N, K) weight; b's strides "
                          f"are {tuple(b.stride())}",
                          "keep w as (G, N, K) contiguous and pass w.transpose(-2, -1)")
    if offs.device != a.device:
        raise DeviceError(f"offs is on {offs.device}, a on {a.device}", "put offs on the GPU too")
    return check_operands(a, b[0].transpose(0, 1), out_dtype, in_dtypes=in_dtypes)


def check_packed_output(a, b, c):
    if tuple(c.shape) != (a.shape[0], b.shape[2]) or not c.is_contiguous():
        raise ShapeError(f"c is {tuple(c.shape)}, expected a contiguous {(a.shape[0], b.shape[2])}",
                         "allocate c as torch.empty(sum M, N)")


def check_offs(offs, rows: int) -> int:
    """Check (one host sync) that ``offs`` is non-decreasing and ends within ``rows``; return its
    last end (rows past it belong to no group)."""
    import torch

    if not offs.numel():
        return 0
    ends = offs.to(torch.int64)
    ok = bool(((ends[1:] >= ends[:-1]).all() & (ends[0] >= 0) & (ends[-1] <= rows)).item())
    if not ok:
        raise ShapeError("offs must be non-decreasing cumulative row ends within a's rows",
                         "build it as torch.cumsum(rows_per_group, 0).to(torch.int32)")
    return int(ends[-1])


# -- Hopper, FP8 block scales ---------------------------------------------------------------------
def check_scales(As, SAs, Bs, SBs):
    """Each group's scales: sa (M_g, ceil(K/128)) and sb (ceil(N_g/128), ceil(K/128)) float32, on
    the operands' device; sb row-major (unit stride along k)."""
    import torch

    if len(SAs) != len(As) or len(SBs) != len(Bs):
        raise ShapeError(f"{len(As)} groups but {len(SAs)} A scales and {len(SBs)} B scales",
                         "pass one sa and one sb per group (quantize_fp8 makes them)")
    for g, (a, sa, b, sb) in enumerate(zip(As, SAs, Bs, SBs)):
        kb = math.ceil(a.shape[1] / BLOCK)
        want = {"sa": (a.shape[0], kb), "sb": (math.ceil(b.shape[0] / BLOCK), kb)}
        for name, s in (("sa", sa), ("sb", sb)):
            if not isinstance(s, torch.Tensor) or s.dtype != torch.float32:
                raise DTypeError(f"group {g}: {name} must be a float32 tensor, got "
                                 f"{getattr(s, 'dtype', type(s).__name__)}",
                                 "block scales are fp32 (quantize_fp8 makes them)")
            if tuple(s.shape) != want[name]:
                raise ShapeError(f"group {g}: {name} is {tuple(s.shape)}, expected {want[name]} "
                                 f"(A {tuple(a.shape)}, B {tuple(b.shape)}, blocks 1x{BLOCK} of A, "
                                 f"{BLOCK}x{BLOCK} of B)", "quantize with quantize_fp8")
            if s.device != a.device:
                raise DeviceError(f"group {g}: {name} is on {s.device}, the operands on {a.device}",
                                  f"move it: {name}.to(a.device)")
        if sb.shape[1] > 1 and sb.stride(1) != 1:
            raise LayoutError(f"group {g}: sb's strides are {tuple(sb.stride())}; the kernel reads it "
                              "row-major", "pass sb.contiguous()")


def check_packed_scales(a, sa, b, sb):
    """sa (sum M, ceil(K/128)) and sb (G, ceil(N/128), ceil(K/128)), float32, sb[g] row-major."""
    import torch

    kb, (groups, _, n) = math.ceil(a.shape[1] / BLOCK), b.shape
    for name, s, want in (("sa", sa, (a.shape[0], kb)), ("sb", sb, (groups, math.ceil(n / BLOCK), kb))):
        if not isinstance(s, torch.Tensor) or s.dtype != torch.float32:
            raise DTypeError(f"{name} is {getattr(s, 'dtype', type(s).__name__)}; block scales are float32",
                             f"pass {name}.float() (models.blockwise_fp8.quantize_blockwise_fp8 makes them)")
        if tuple(s.shape) != want:
            raise ShapeError(f"{name} is {tuple(s.shape)}, expected {want}",
                             "quantize a per 1x128 and each w[g] per 128x128 block "
                             "(models.blockwise_fp8.quantize_blockwise_fp8)")
        if s.device != a.device:
            raise DeviceError(f"{name} is on {s.device}, a on {a.device}", f"move it: {name}.to(a.device)")
    if sb.shape[2] > 1 and sb.stride(2) != 1:
        raise LayoutError(f"sb's strides are {tuple(sb.stride())}; the kernel reads each sb[g] row-major",
                          "pass sb.contiguous()")


def m_major(sa):
    """sa as the FP8 kernel reads it: (M, K/128) with unit stride along M (a copy if it is not),
    so that neighbouring threads, which own neighbouring rows, read neighbouring addresses."""
    return sa if sa.shape[0] <= 1 or sa.stride(0) == 1 else sa.t().contiguous().t()


# -- Blackwell, quantized groups ------------------------------------------------------------------
@dataclass
class QuantizedGroup:
    """One group's bytes as the Blackwell kernel reads them, in ``group_walk.OPERANDS`` order:
    data (M, K/2) packed e2m1 or (M, K) e4m3, the output C (M, N), and scale factors interleaved
    (``block_scaling.to_interleaved``: 1-D, rows padded to 128 and K-blocks to 4)."""

    a: object
    b: object
    c: object
    sfa: object
    sfb: object


def check_blockscaled_sizes(m: int, n: int, k: int, fmt, group: int = 0) -> None:
    """The size rules of one group, before any bytes are made."""
    f = check_format(fmt)
    where = f"group {group}: "
    if m < 0 or n < 1 or k < 1:
        raise ShapeError(f"{where}(M, N, K) = {(m, n, k)}: need M >= 0, N >= 1, K >= 1",
                         "M = 0 marks an empty group; a K = 0 group has C = 0, zero it yourself")
    if k % f.block:
        raise ShapeError(f"{where}K = {k} is not a multiple of {f.name}'s scale block {f.block}",
                         f"pad K with zeros to {-(-k // f.block) * f.block}")
    per_16b = 32 if f.data == "e2m1" else 16
    if k % per_16b:
        raise AlignmentError(f"{where}K = {k}: a row of A is {k * (4 if f.data == 'e2m1' else 8) // 8}"
                             " bytes, and TMA needs a multiple of 16",
                             f"pad K with zeros to a multiple of {per_16b}")
    if n % 8:
        raise AlignmentError(f"{where}N = {n}: a row of C is {2 * n} bytes, and TMA needs a multiple "
                             "of 16", "pad N (B's rows) with zeros to a multiple of 8")


def check_quantized(groups, fmt) -> list[tuple[int, int, int]]:
    """Check quantized groups (dtypes, shapes, SF sizes, alignment, devices); return the sizes."""
    import torch

    f = check_format(fmt)
    if not groups:
        raise ShapeError("no groups", "pass at least one QuantizedGroup (quantize_blockscaled makes them)")
    sizes, devices = [], set()
    for g, op in enumerate(groups):
        for name in ("a", "b"):
            t = getattr(op, name)
            if t.dtype != f.data_dtype or t.dim() != 2:
                raise DTypeError(f"group {g}: {name} is {dtype_name(t.dtype)} {tuple(t.shape)}; {f.name} "
                                 f"data is 2-D {dtype_name(f.data_dtype)}",
                                 f"quantize it: block_scaling.quantize({name}, '{f.name}')")
            if t.stride(1) != 1 or t.data_ptr() % 16:
                raise AlignmentError(f"group {g}: {name} must be K-major (row-major) and 16-byte aligned",
                                     f"pass {name}.contiguous()")
        per_byte = 2 if f.data == "e2m1" else 1
        (m, ka), (n, kb) = op.a.shape, op.b.shape
        if ka != kb:
            raise ShapeError(f"group {g}: A is {tuple(op.a.shape)}, B {tuple(op.b.shape)}: K differs",
                             "B is (N, K), like a torch Linear weight")
        k = ka * per_byte
        check_blockscaled_sizes(m, n, k, f, g)
        for name, rows in (("sfa", m), ("sfb", n)):
            t = getattr(op, name)
            pr, pk = block_scaling.padded_sf_shape(rows, k // f.block)
            if t.dim() != 1 or t.numel() != pr * pk or t.element_size() != 1:
                raise ShapeError(f"group {g}: {name} must be the 1-D interleaved scale factors "
                                 f"({pr} x {pk} = {pr * pk} bytes), got {dtype_name(t.dtype)} "
                                 f"{tuple(t.shape)}",
                                 f"pass block_scaling.to_interleaved(sf) of the ({rows}, {k // f.block}) "
                                 "scales quantize returned")
        if tuple(op.c.shape) != (m, n) or not op.c.is_contiguous() or op.c.dtype not in (
                torch.float16, torch.bfloat16):
            raise ShapeError(f"group {g}: C must be a contiguous ({m}, {n}) float16/bfloat16 tensor",
                             "allocate it with torch.empty(M, N, dtype=torch.float16)")
        devices |= {t.device for t in (op.a, op.b, op.sfa, op.sfb, op.c)}
        sizes.append((m, n, k))
    if len({op.c.dtype for op in groups}) > 1:
        raise DTypeError("the groups' C dtypes differ", "give every C the same dtype")
    if len(devices) > 1:
        raise DeviceError(f"the groups' tensors are on {sorted(map(str, devices))}",
                          "put them all on one GPU")
    if not any(m for m, _, _ in sizes):
        raise ShapeError("every group is empty (all M = 0)", "skip the launch")
    return sizes
