"""The mixed-input GEMM in torch's terms: ``mixed_mm(x, packed, scales, zeros=None)``.

``y = x @ W'.T`` where ``packed, scales, zeros = cutecourse.quant.quantize_int4(W, group_size)``
and W' = ``cutecourse.quant.dequantize(packed, scales, zeros)``: x (M, K) bf16, y (M, N) bf16.
The activations' dtype picks the kernel: fp16 x takes the fp16 one (f16 wgmmas, fp16 y), with
scales quantized for it (``quantize_int4(W, group_size, dtype=torch.float16)``): x and the
scales must agree, since the conversion multiplies in the scales' type and wgmma takes one.

* :func:`check` refuses, on any machine and before anything touches a GPU, what the kernel
  cannot take, saying what is wrong and how to fix it;
* :func:`plan` chooses the batch tile (the smallest wgmma N that holds M, at most 64), the
  warpgroups (128 weight rows a CTA where N allows: x is read from L2 half as often) and the
  split of K: the time is the k-tiles through the busiest SM (CTAs on one SM share its
  bandwidth) plus a fixed cost per split (``split_cost``), e.g. M = 1 on 8192 x 8192: 64 CTAs,
  4 splits, 2 CTAs of 8 k-tiles on each SM;
* :func:`launcher` checks, plans and returns the host layer's ``gemm_launch.Launch`` (one kernel
  launch, compiled once, its split-K buffers allocated); :func:`mixed_mm` allocates y and runs
  it once. The kernel enters through the one host layer: ``ENTRY`` is an
  ``operands.DescribedEntry`` of :class:`HopperMixedGemm`'s variants by name
  (``mixed_variants.variant_gemm``: ``variant=``), whose ``operands()`` describe x, packed,
  scales, y and the split-K buffers (scratch, which the entry's ``launch`` allocates);
  :func:`compile_target` (its keyword arguments: the constructor's, and ``variant``) fakes them
  for ``cutecourse.inspect`` (symbolic sizes, no GPU).

Split-K reduction: each split writes its fp32 partial sums into its own slice of an (S, M, N)
buffer, and the last split of each tile to finish (a counter per tile) adds the slices in
order and writes bf16 y, in the same kernel (``mixed_epilogue.py``). Not atomic float adds into
y: they would need a zeroed fp32 buffer and a conversion pass, and their order, hence the
result's last bits, would change from run to run; the slices give the same bits every time.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import DeviceError, DTypeError, ShapeError
from ..tensors import dtype_name
from ..quant.reorder import BLOCK_N
from .epilogue_op import described
from .gemm_launch import check_epilogue_args, named_epilogue_op
from .hopper_mixed_gemm import SM_SMEM, TILE_K, TILE_MS, HopperMixedGemm
from .mixed_variants import variant_class, variant_gemm
from .operands import DescribedEntry, check_tensors

#: SMs of an H100 / H200 SXM: the grid a split aims to fill when no GPU is there to ask.
SMS = 132
#: The widest batch tile the planner picks (larger M: more tiles of 64 tokens).
MAX_TILE_M = 64
#: At most this many splits of K (each split adds an (M, N) fp32 slice to write and add).
MAX_SPLITS = 8
#: The two ways the GEMM runs: the fused kernel, or W' dequantized once and the dense GEMM.
ROUTES = ("fused", "dequantize")
#: From this many tokens on, converting every weight once (one pass over memory: 0.5 byte read
#: and 2 written a weight) and running notebook 06's dense GEMM beats converting each weight once
#: per 64-token tile inside the fused kernel. Both costs grow with N x K, so the crossing point
#: is a number of tokens. Measured on an H200 (``docs/mixed_measured.md``): the pass takes 59 us
#: on 8192 x 8192 (2.85 TB/s), the dense GEMM 0.165 us a token and the fused kernel 0.227, so
#: the routes cross near 59 / (0.227 - 0.161..0.165) = 900-950 tokens (at M = 1024: 230 against
#: 232 us).
DEQUANTIZE_M = 1024
#: The dense GEMM the dequantize route runs (``registry.DENSE``): notebook 06's.
DENSE_GEMM = "persistent"


def ctas_per_sm(kernel) -> int:
    """CTAs of ``kernel`` that fit one SM's shared memory (1 KB of it reserved per CTA). With
    two warpgroups: at tile_m = 8, 3 stages, 3 CTAs; at tile_m = 16, 3 stages (79 KB) would let
    only 2 share an SM, so the kernel's default is 2 stages, and 4 share it."""
    return max(1, SM_SMEM // (kernel.smem_bytes() + 1024))


#: CTAs an SM needs before its time is its k-tiles' alone: a CTA converts and multiplies in
#: turn (``wait_group(0)`` before each chunk), so its SM overlaps one CTA's conversion with
#: another's wgmmas and loads. An SM holding one CTA is counted as busy as with two.
OVERLAP_CTAS = 2


def split_cost(ctas: int, splits: int, k_tiles: int, sms: int = SMS, overlap: int = OVERLAP_CTAS) -> int:
    """The time of ``splits`` splits of K, in k-tiles of one SM: the CTAs of the busiest SM
    (``ctas`` x ``splits`` spread over ``sms``; at least ``overlap``) times the k-tiles each
    computes, plus one k-tile a split. The planner takes the cheapest, the fewest on a tie.

    Two terms, both measured on an H200 (``benchmarks/results/experiment_mixed_ceilings.json``,
    ``python benchmarks/experiments/mixed_ceilings.py``; cold weights, 3 to 8 splits at M = 1
    and 16 on 8192 x 8192, 28672 x 8192 and 8192 x 28672):

    * the CTAs on one SM share its bandwidth and its pipes, so an SM's time is the k-tiles of
      all its CTAs, and CTA slots left empty are no loss (8192 x 8192, M = 1: 4 splits, 2 CTAs
      of 8 k-tiles an SM, 16.0 us; 6 splits, 384 CTAs in one wave of 396 slots, 17.5 us);
    * each split costs about one k-tile more: its prologue, its fp32 slice written and read, the
      last split's reduction.

    It picks the fastest measured split or one within 5% of it in all six cases. The ``overlap``
    floor is not in that sweep (fewer than 3 splits): it keeps the planner filling the GPU."""
    busiest = max(overlap, -(-ctas * splits // sms))
    return busiest * -(-k_tiles // splits) + splits


@dataclass(frozen=True)
class Plan:
    """How one (M, N, K) problem runs: batch tile, splits of K, group size, CTAs of one split
    (the tiles, hence the split-K counters), warpgroups a CTA."""

    tile_m: int
    splits: int
    group_size: int
    ctas: int  # CTAs of one split
    warpgroups: int = 1
    #: "fused" (this module's kernel) or "dequantize" (W' written once, then the dense GEMM)
    route: str = "fused"


def check(x, packed, scales, zeros=None) -> tuple[int, int, int, int]:
    """(M, N, K, group_size) of valid operands, or a CourseError saying what to change: x's checks
    here, the weights' in ``int4_dequantize`` (the large-M route's first kernel takes them too)."""
    import torch

    from . import int4_dequantize

    named = (("x", x), ("packed", packed), ("scales", scales)) + ((("zeros", zeros),) if zeros is not None else ())
    for name, t in named:
        if not isinstance(t, torch.Tensor):
            raise DTypeError(f"{name} is a {type(t).__name__}, not a torch.Tensor", "pass torch tensors")
        if t.dim() != 2:
            raise ShapeError(f"{name} has {t.dim()} dimensions; mixed_mm takes 2-D operands",
                             "x (M, K), packed (N, K/8), scales (K/group, N): reshape x to (-1, K)")
    if x.dtype not in (torch.bfloat16, torch.float16):
        raise DTypeError(f"x is {dtype_name(x.dtype)}; this kernel takes bfloat16 or float16 activations",
                         "convert it: x.to(torch.bfloat16), or x.to(torch.float16) with scales quantized for float16")
    n, k = int4_dequantize.check_packed(packed)
    if x.shape[1] != k:
        hint = (" (packed holds one value per element: it is not packed)" if packed.shape[1] == x.shape[1]
                else "")
        raise ShapeError(f"x is {tuple(x.shape)} but packed {tuple(packed.shape)} holds K = {k} columns "
                         f"(8 per int32){hint}", f"pass x with K = {k} columns, or {int4_dequantize.QUANTIZE}")
    group = int4_dequantize.check_scales(scales, zeros, n, k)
    if scales.dtype != x.dtype:
        raise DTypeError(f"x is {dtype_name(x.dtype)} but the scales are {dtype_name(scales.dtype)}: x's dtype picks the "
                         f"kernel (its wgmmas and its conversion), and the scales must be of it",
                         f"quantize for {dtype_name(x.dtype)} activations: quantize_int4(w, group_size, "
                         f"dtype=torch.{dtype_name(x.dtype)}) (or pass x.to(torch.{dtype_name(scales.dtype)}))")
    if x.shape[0] < 1:
        raise ShapeError("x has no rows (M = 0)", "pass at least one row")
    check_tensors((("x", x), ("packed", packed), ("scales", scales), ("zeros", zeros)))
    return x.shape[0], n, k, group


def kernel_group(group: int, k: int) -> int:
    """The group size the fused kernel is compiled with. One group per row (``group == k``) whose
    length no k-tile divides, e.g. K = 640, becomes the next multiple of the k-tile: every k-tile
    of the row then reads group 0, the row's one scale, as it should."""
    if group == k and TILE_K % group and group % TILE_K:
        return -(-k // TILE_K) * TILE_K
    return group


def plan(m: int, n: int, k: int, group: int, sms: int = SMS, tile_m: int | None = None,
         splits: int | None = None, zero_point: bool = False, warpgroups: int | None = None,
         route: str | None = None) -> Plan:
    """The route, the batch tile, the warpgroups (64 weight rows each) and the split of K for an
    (M, N, K) problem on ``sms`` SMs. Route: from ``DEQUANTIZE_M`` tokens on, W' is written once
    and the dense GEMM runs on it (``int4_dequantize.py`` says why); ``tile_m`` or ``splits``
    given means the fused kernel. Two warpgroups where N is a multiple of 128: every CTA reads its
    tile_m x K slice of x from L2, so 128 weight rows a CTA read x half as often as 64 (at
    M = 16 on 8192 x 8192, 34 MB instead of 67: as much as the int4 weights themselves); the
    parallelism lost to fewer CTAs comes back through split-K, which reads no more x."""
    if route is None:
        route = "dequantize" if m >= DEQUANTIZE_M and tile_m is None and splits is None else "fused"
    if route not in ROUTES:
        raise ShapeError(f"route={route!r} is not a way this GEMM runs", f"use one of {ROUTES} or leave it None")
    if route == "dequantize":
        return Plan(0, 1, group, 0, 0, route)
    if tile_m is None:
        tile_m = next(t for t in TILE_MS if t >= min(m, MAX_TILE_M))
    if warpgroups is None:
        warpgroups = 2 if n % (2 * BLOCK_N) == 0 else 1
    ctas = -(-n // (BLOCK_N * warpgroups)) * -(-m // tile_m)
    k_tiles = -(-k // TILE_K)
    if splits is None:
        kernel = HopperMixedGemm(tile_m, group_size=kernel_group(group, k), zero_point=zero_point,
                                 warpgroups=warpgroups)
        overlap = min(OVERLAP_CTAS, ctas_per_sm(kernel))  # (2 for every tile_m up to 64)
        # the fp32 slices (written once, read once) stay under half the int4 weights' bytes:
        # S * M * N * 8 <= N * K / 4
        most = max(1, min(MAX_SPLITS, k_tiles // 2, k // (32 * m)))
        splits = min(range(1, most + 1), key=lambda s: (split_cost(ctas, s, k_tiles, sms, overlap), s))
    if not 1 <= splits <= k_tiles:
        raise ShapeError(f"splits={splits}: K = {k} has {k_tiles} k-tiles of {TILE_K}",
                         f"use 1 .. {k_tiles} splits")
    return Plan(tile_m, splits, group, ctas, warpgroups, route)


def launcher(x, packed, scales, zeros=None, out=None, *, tile_m=None, splits=None, warpgroups=None,
             stages=None, epilogue_op=None, epilogue_args=(), route=None, variant=None):
    """Check, plan, compile once; return the host layer's ``gemm_launch.Launch``: ``fn()`` writes
    y = x @ W'.T into ``out`` (or a new y, ``fn.y``); ``fn.plan``; ``fn.kernel``; with split-K it
    owns its buffers (``fn.partials``, ``fn.counters``), so two launchers may run on different
    streams. ``epilogue_op``: an ``epilogue_op.EpilogueOp`` (or its name) applied to each fp32
    element of y, e.g. ``AddBias`` with ``epilogue_args=(bias,)`` (fp32, one per column of y: N).
    ``variant``: the fused kernel's class by name (``mixed_variants.VARIANTS``, ``DEMO_VARIANTS``;
    default ``"course"``), with the same plan and buffers; naming one means the fused route."""
    import torch

    from ..modes import require_gpu

    if variant is not None:  # a class of the fused kernel, named
        variant_class(variant)  # an unknown name: a CourseError listing the names
        if route == "dequantize":
            raise ShapeError(f"variant={variant!r} names a class of the fused kernel, route='dequantize' the "
                             "dense GEMM", "leave route out (or pass route='fused') with variant")
        route = "fused"
    m, n, k, group = check(x, packed, scales, zeros)
    op = named_epilogue_op(epilogue_op)
    check_epilogue_args(op, tuple(epilogue_args), x.device, m, n)
    if x.device.type != "cuda":
        raise DeviceError(f"the operands are on {x.device}; the kernel runs on a Hopper GPU",
                          "move them with .cuda(); on the CPU compute x @ dequantize(packed, scales, zeros).T")
    gpu = require_gpu("sm_90a")
    p = plan(m, n, k, group, gpu.sm_count, tile_m, splits, zeros is not None, warpgroups, route)
    y = out if out is not None else torch.empty(m, n, dtype=x.dtype, device=x.device)
    if y.device != x.device:
        raise DeviceError(f"out is on {y.device}, x on {x.device}", "allocate out on x's GPU")
    if tuple(y.shape) != (m, n) or y.dtype != x.dtype or not y.is_contiguous():
        raise ShapeError(f"out is {dtype_name(y.dtype)} {tuple(y.shape)}; it must be a contiguous {dtype_name(x.dtype)} "
                         f"({m}, {n}), x's dtype", "allocate it with torch.empty(M, N, dtype=x.dtype, device=x.device)")
    if p.route == "dequantize":
        return _dequantize_launcher(x, packed, scales, zeros, y, p, op, epilogue_args)
    kernel = ENTRY.kernel(variant=variant or "course", tile_m=p.tile_m, group_size=kernel_group(group, k),
                          zero_point=zeros is not None, split_k=p.splits > 1, warpgroups=p.warpgroups,
                          stages=stages, epilogue_op=op, dtype=dtype_name(x.dtype))
    op_tensors = {o.name: t for o, t in zip(described(op), epilogue_args)}
    check_tensors(tuple(op_tensors.items()))
    # with split-K, the entry allocates the kernel's scratch: S fp32 slices of (M, N), a counter per tile
    tensors = dict(x=x, packed=packed, scales=scales, y=y, zeros=zeros, **op_tensors)
    return ENTRY.launch(kernel, tensors, sizes=dict(S=p.splits, tiles=p.ctas), y=y, plan=p, kernel=kernel)


def _dequantize_launcher(x, packed, scales, zeros, y, p, op, epilogue_args):
    """The large-M route: one launch writes W' (N x K, x's dtype: the launcher owns it, ``fn.w``),
    the next runs the dense GEMM y = x @ W'.T through the epilogue op (bf16 or fp16 operands)."""
    from . import int4_dequantize, registry
    from .gemm_launch import Launch

    dequantize = int4_dequantize.launcher(packed, scales, zeros)
    dense = registry.entry(DENSE_GEMM).launcher(x, dequantize.w, y, epilogue_args=tuple(epilogue_args),
                                                epilogue_op=op)

    def both():
        dequantize()
        dense()

    return Launch(both, (), y=y, plan=p, w=dequantize.w)


def mixed_mm(x, packed, scales, zeros=None, *, tile_m=None, splits=None, warpgroups=None, epilogue_op=None,
             epilogue_args=(), route=None, variant=None):
    """y = x @ dequantize(packed, scales, zeros).T on a Hopper GPU: x (M, K) bf16 -> y (M, N) bf16,
    or fp16 -> fp16 (x's dtype picks the kernel; the scales must be of it).

    ``packed, scales, zeros``: what ``cutecourse.quant.quantize_int4`` returned (with
    ``dtype=torch.float16`` for fp16 x). ``tile_m``, ``splits``, ``warpgroups`` and ``route``
    override the planner (:func:`plan`); ``epilogue_op``, ``epilogue_args`` and ``variant`` as
    :func:`launcher` takes them (a Linear layer's bias: ``"AddBias"``)."""
    check(x, packed, scales, zeros)
    if zeros is not None and zeros.numel() and int(zeros.max()) > 15:
        raise DTypeError(f"zeros hold {int(zeros.max())}; int4 zero points are 0 .. 15",
                         "pass the zeros quantize_int4(..., zero_point=True) returned")
    fn = launcher(x, packed, scales, zeros, tile_m=tile_m, splits=splits, warpgroups=warpgroups,
                  epilogue_op=epilogue_op, epilogue_args=epilogue_args, route=route, variant=variant)
    fn()
    return fn.y


#: The kernel's entry, with every entry's verbs: compile_target, validate (check), launcher, gemm
#: (mixed_mm) and launch (what launcher returns); its build picks the class by ``variant=``.
ENTRY = DescribedEntry(variant_gemm, validate=check, launcher=launcher, gemm=mixed_mm)
compile_target = ENTRY.compile_target
#: The entry's verbs under the names the dense modules give them; ``check`` and ``mixed_mm`` are
#: the notebooks' names, as torch's users call the operation.
validate, gemm = check, mixed_mm
