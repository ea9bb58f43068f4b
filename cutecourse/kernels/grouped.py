"""The grouped GEMMs from PyTorch: one place for every grouped kernel's host side.

The torch-facing functions (each checks its inputs on any machine before touching a GPU). A name
says the format, and the format the architecture: no suffix and ``_fp8`` run on Hopper (H100),
``_blockscaled`` (NVFP4 / MXFP8) on Blackwell (B200). Operands come in torch's order:
``torch._grouped_mm(a, b, offs)`` and ``torch._scaled_grouped_mm(a, b, scale_a, scale_b, offs)``.

==========================================  =====================================================
``grouped_gemm(As, Bs)``                     Hopper, fp16/bf16: ``[A_g @ B_g.T for g]``, one launch
``grouped_mm(a, b, offs)``                   the same, packed as ``torch._grouped_mm`` takes it
``quantize_fp8(As, Bs)``                     e4m3 + fp32 scales per 1x128 (A) and 128x128 (B) block
``grouped_gemm_fp8(As, Bs, SAs, SBs)``       Hopper, FP8 with those block scales (DeepSeek-V3)
``grouped_mm_fp8(a, b, sa, sb, offs)``       the same, packed
``quantize_blockscaled(As, Bs, fmt)``        NVFP4 / MXFP8 data and interleaved scale factors
``grouped_gemm_blockscaled(As, Bs, fmt)``    Blackwell (B200), NVFP4 or MXFP8
==========================================  =====================================================

Under them, for benchmarks and tests: launch closures (``launcher``, ``packed_launcher``,
``launcher_fp8``, ``packed_launcher_fp8``, ``launcher_blockscaled``: checked and compiled once,
``fn()`` launches) and the device metadata they build (``grouped_launch.py``: :class:`Metadata`,
one row per group, one column per operand in ``group_walk.OPERANDS`` order; ``metadata_blockscaled``). The compile targets that
``cutecourse.inspect`` compiles without a GPU are ``grouped_targets.py``; the input checks
``grouped_checks.py``.
"""

from __future__ import annotations

from ..errors import ShapeError
from ..models import block_scaling
from ..models import blockwise_fp8
from ..models.blackwell_plan import B200_SMS, check_format
from . import grouped_checks as checks
from .blackwell_grouped_gemm import BlackwellGroupedBlockScaledGemm
from .group_walk import OPERANDS
from .hopper_grouped_gemm import GROUP_M, GroupedHopperGemm
from .hopper_grouped_gemm_fp8 import BLOCK, CLUSTER, BlockScaledGroupedHopperGemm, GROUP_M as FP8_GROUP_M
from .hopper_grouped_gemm_fp8_onepart import OnePartBlockScaledGroupedHopperGemm
from .grouped_launch import Metadata, _nothing_to_do, _sms, launch_closure, list_metadata, packed_metadata  # noqa: F401

QuantizedGroup = checks.QuantizedGroup


# -- Hopper, fp16 / bf16 --------------------------------------------------------------------------
def list_closure(kernel, As, Bs, Cs, extra=()):
    """The list forms' launch closure, for checked operands: zeroes the C_g of empty groups (M_g
    or K_g = 0) and builds the metadata; ``extra``: more columns (the FP8 kernel's scales)."""
    sizes = [(a.shape[0] if a.shape[1] else 0, b.shape[0], a.shape[1]) for a, b in zip(As, Bs)]
    for (m, _, _), c in zip(sizes, Cs):
        if m == 0 and c.numel():
            c.zero_()
    columns = [(ts, [t.stride(0) for t in ts]) for ts in (As, Bs, Cs)] + list(extra)
    meta = list_metadata(kernel, sizes, columns, As[0].device)
    if meta.work_bound == 0:
        return _nothing_to_do(meta)
    live = next(g for g, (m, _, _) in enumerate(sizes) if m)
    return launch_closure(kernel, (As[live], Bs[live], Cs[live]), meta, "sm_90a", keep=[ts for ts, _ in extra])


def launcher(As, Bs, Cs, **config):
    """Validated, compiled launch closure: ``fn()`` writes ``A_g @ B_g.T`` into every ``Cs[g]``.
    ``config``: tile, sms (default: every SM), stages, group_m, cluster."""
    checks.check_groups(As, Bs, Cs[0].dtype if Cs else None)
    checks.check_outputs(As, Bs, Cs)
    return _launcher(As, Bs, Cs, **config)


def _launcher(As, Bs, Cs, tile=(128, 256), sms: int | None = None, stages: int | None = None,
              group_m: int = GROUP_M, cluster=(1, 1)):
    """``launcher`` for checked operands (the checks run once per call)."""
    kernel = GroupedHopperGemm(tuple(tile), cluster_mn=tuple(cluster), sms=_sms("sm_90a", sms), group_m=group_m,
                               stages=stages)
    return list_closure(kernel, As, Bs, Cs)


def grouped_gemm(As, Bs, out_dtype=None, **config):
    """``[A_g @ B_g.T for g]`` in one launch on an H100: A_g (M_g, K_g), B_g (N_g, K_g), both
    K-major fp16/bf16 (every group the same dtype); M_g may be 0. Returns the list of C_g."""
    import torch

    checks.check_groups(As, Bs, out_dtype)  # before touching the GPU
    dtype = out_dtype or As[0].dtype
    Cs = [torch.empty((a.shape[0], b.shape[0]), dtype=dtype, device=a.device) for a, b in zip(As, Bs)]
    _launcher(As, Bs, Cs, **config)()
    return Cs


def packed_launcher(a, b, offs, c, **config):
    """Launch closure for the packed form: ``fn()`` writes ``a[rows_g] @ b[g]`` into ``c[rows_g]``."""
    checks.check_packed(a, b, offs, c.dtype)
    checks.check_packed_output(a, b, c)
    return _packed_launcher(a, b, offs, c, **config)


def _packed_launcher(a, b, offs, c, tile=(128, 256), sms: int | None = None, stages: int | None = None,
                     group_m: int = GROUP_M, cluster=(1, 1)):
    """``packed_launcher`` for checked operands."""
    kernel = GroupedHopperGemm(tuple(tile), cluster_mn=tuple(cluster), sms=_sms("sm_90a", sms), group_m=group_m,
                               stages=stages)
    meta = packed_metadata(kernel, a, b, c, offs)
    return launch_closure(kernel, (a, b[0].transpose(0, 1), c), meta, "sm_90a")


def _packed_output(a, b, offs, dtype):
    """C for the packed form: rows past ``offs[-1]`` belong to no group and are zero."""
    import torch

    c = torch.empty((a.shape[0], b.shape[2]), dtype=dtype, device=a.device)
    c[checks.check_offs(offs, a.shape[0]):].zero_()
    return c


def grouped_mm(a, b, offs, out_dtype=None, **config):
    """``torch._grouped_mm(a, b, offs=offs)`` for a (sum M, K) and b (G, K, N), on an H100.

    Checks that ``offs`` is non-decreasing and ends within ``a`` (one host sync); rows past
    ``offs[-1]`` belong to no group and are returned as zeros.
    """
    checks.check_packed(a, b, offs, out_dtype)
    c = _packed_output(a, b, offs, out_dtype or a.dtype)
    if a.shape[0] == 0 or a.shape[1] == 0:
        return c.zero_()
    _packed_launcher(a, b, offs, c, **config)()
    return c


# -- Hopper, FP8 with block scales ----------------------------------------------------------------
def quantize_fp8(As, Bs):
    """(qAs, SAs, qBs, SBs): each A_g per 1x128 block and B_g per 128x128 block to e4m3 with fp32
    scales (``models.blockwise_fp8.quantize_blockwise_fp8``), on the inputs' device; sa M-major."""
    out = ([], [], [], [])
    for a, b in zip(As, Bs):
        qa, sa = blockwise_fp8.quantize_blockwise_fp8(a, (1, BLOCK))
        qb, sb = blockwise_fp8.quantize_blockwise_fp8(b, (BLOCK, BLOCK))
        for lst, t in zip(out, (qa, checks.m_major(sa.contiguous()), qb, sb)):
            lst.append(t.to(a.device))
    return out


def fp8_kernel(tile=None, cluster=CLUSTER, sms: int | None = None, stages: int | None = None,
               group_m: int = FP8_GROUP_M, parts: int = 1):
    """The FP8 kernel of a configuration, what ``launcher_fp8`` and ``packed_launcher_fp8``
    launch. ``parts=1`` (default): one k-tile's product in flight per warpgroup
    (``OnePartBlockScaledGroupedHopperGemm``: 128x128, 128x192 or 128x256 tiles; ``turns``;
    ``ahead``: its scales loaded a k-tile ahead); ``parts=2``: two
    (``BlockScaledGroupedHopperGemm``, 128x128 tiles only: the kernel notebook 07 teaches).
    ``tile`` by default 128x256 for one part, 128x128 for two.
    The default, one part at 128x256 with turns, ran 1.10-1.13x the two-part kernel on an H100
    on DeepGEMM's shapes, the down projection and the fine-grained MoE
    (``docs/grouped_measured.md``, "DeepGEMM on the same H100"). ``sms``: default every SM."""
    tile = tile or ((128, 256) if parts == 1 else (128, 128))
    if parts not in (1, 2) or (parts == 2 and tuple(tile) != (128, 128)):
        raise ShapeError(f"parts={parts} with a {tile[0]}x{tile[1]} tile: two parts hold two k-tiles' "
                         f"products next to the fp32 sum (3 x {tile[1] // 2} registers per thread); only "
                         "128x128 leaves room for that", "use parts=1 for the wider tiles, or tile (128, 128)")
    common = dict(group_m=group_m, stages=stages)
    if parts == 2:
        return BlockScaledGroupedHopperGemm(tuple(tile), cluster_mn=tuple(cluster), sms=_sms("sm_90a", sms), **common)
    return OnePartBlockScaledGroupedHopperGemm(tuple(tile), cluster_mn=tuple(cluster), sms=_sms("sm_90a", sms),
                                               **common)


#: Fewer rows than this per group on average, and the FP8 launchers take 1x1 clusters instead of
#: 2x1 (a ``cluster=`` keyword overrides). A 2x1 pair covers 256 rows of one group: where groups end
#: inside pairs, second CTAs compute rows that do not exist (zero-filled, never stored). Measured,
#: 1x1 against 2x1: fine-grained MoE (128 experts, about 230 rows on average) 1.16-1.22x in three
#: runs; "32 x 256" 1.05x on an H200; "moe 64" (600 on average) level or 0.94x on the H100, 1.08x
#: on an H200; DeepGEMM's shapes (4096-8192 rows): 2x1 ahead by 2-12% on the H100, by 0-3% on an
#: H200 (docs/grouped_measured.md).
PAIR_ROWS = 384


def fp8_cluster(rows: int, groups: int) -> tuple[int, int]:
    """The FP8 launchers' cluster for ``rows`` rows in ``groups`` groups (``PAIR_ROWS``)."""
    return CLUSTER if rows >= PAIR_ROWS * max(groups, 1) else (1, 1)


def launcher_fp8(As, Bs, SAs, SBs, Cs, **config):
    """Validated, compiled launch closure: ``fn()`` writes group g's scaled product into ``Cs[g]``.
    ``config``: ``fp8_kernel``'s keywords (tile, cluster, sms, stages, group_m, parts, turns, ahead); the
    cluster by default from the groups' mean height (``fp8_cluster``)."""
    import torch

    checks.check_groups(As, Bs, Cs[0].dtype if Cs else None, in_dtypes=(torch.float8_e4m3fn,))
    checks.check_scales(As, SAs, Bs, SBs)
    checks.check_outputs(As, Bs, Cs)
    return _launcher_fp8(As, Bs, SAs, SBs, Cs, **config)


def _launcher_fp8(As, Bs, SAs, SBs, Cs, **config):
    """``launcher_fp8`` for checked operands."""
    config.setdefault("cluster", fp8_cluster(sum(a.shape[0] for a in As), len(As)))
    kernel = fp8_kernel(**config)
    sas = [checks.m_major(sa) for sa in SAs]
    # the SFA and SFB columns: sa's k-block stride (it is M-major), sb's row stride
    return list_closure(kernel, As, Bs, Cs, extra=[(sas, [sa.stride(1) for sa in sas]),
                                                   (SBs, [sb.stride(0) for sb in SBs])])


def grouped_gemm_fp8(As, Bs, SAs, SBs, out_dtype=None, **config):
    """``[(qa_g * sa_g) @ (qb_g * sb_g).T for g]`` in one launch on an H100 (bf16 by default).

    As[g] (M_g, K_g) and Bs[g] (N_g, K_g): float8_e4m3fn, K-major; SAs[g] (M_g, ceil(K_g/128))
    and SBs[g] (ceil(N_g/128), ceil(K_g/128)): float32 (``quantize_fp8`` makes all four).
    """
    import torch

    dtype = out_dtype or torch.bfloat16
    checks.check_groups(As, Bs, dtype, in_dtypes=(torch.float8_e4m3fn,))
    checks.check_scales(As, SAs, Bs, SBs)
    Cs = [torch.empty((a.shape[0], b.shape[0]), dtype=dtype, device=a.device) for a, b in zip(As, Bs)]
    _launcher_fp8(As, Bs, SAs, SBs, Cs, **config)()
    return Cs


def packed_launcher_fp8(a, b, sa, sb, offs, c, **config):
    """Launch closure for the packed form: ``fn()`` writes group g's scaled product into c[rows_g]
    (``config``: ``fp8_kernel``'s keywords)."""
    import torch

    checks.check_packed(a, b, offs, c.dtype, in_dtypes=(torch.float8_e4m3fn,))
    checks.check_packed_scales(a, sa, b, sb)
    checks.check_packed_output(a, b, c)
    return _packed_launcher_fp8(a, b, sa, sb, offs, c, **config)


def _packed_launcher_fp8(a, b, sa, sb, offs, c, **config):
    """``packed_launcher_fp8`` for checked operands."""
    config.setdefault("cluster", fp8_cluster(a.shape[0], b.shape[0]))
    kernel = fp8_kernel(**config)
    sa = checks.m_major(sa)
    meta = packed_metadata(kernel, a, b, c, offs, scales=(sa, sb))
    return launch_closure(kernel, (a, b[0].transpose(0, 1), c), meta, "sm_90a", keep=(sa, sb))


def grouped_mm_fp8(a, b, sa, sb, offs, out_dtype=None, **config):
    """The packed MoE form: a (sum M, K) e4m3 with sa (sum M, K/128), b (G, K, N) = the transpose
    of e4m3 weights w (G, N, K) with sb (G, N/128, K/128), offs the int32 cumulative row ends.
    Row block g of the result is (a_g * sa_g) @ (w_g * sb_g).T, in bf16 by default."""
    import torch

    out_dtype = out_dtype or torch.bfloat16
    checks.check_packed(a, b, offs, out_dtype, in_dtypes=(torch.float8_e4m3fn,))
    checks.check_packed_scales(a, sa, b, sb)
    c = _packed_output(a, b, offs, out_dtype)
    if a.shape[0] == 0 or a.shape[1] == 0:
        return c.zero_()
    _packed_launcher_fp8(a, b, sa, sb, offs, c, **config)()
    return c


# -- Blackwell, NVFP4 / MXFP8 ---------------------------------------------------------------------
def quantize_blockscaled(As, Bs, fmt: str = "nvfp4", out_dtype=None, device=None) -> list[QuantizedGroup]:
    """Quantize each (A_g (M, K), B_g (N, K)) with ``block_scaling.quantize`` (so the bytes are
    the ones ``grouped_reference`` uses), interleave the scales, allocate C; move to ``device``."""
    import torch

    f = check_format(fmt)
    if len(As) != len(Bs) or not As:
        raise ShapeError(f"{len(As)} A's and {len(Bs)} B's: need the same number, at least one",
                         "pass one (A_g, B_g) pair per group")
    out = []
    for g, (a, b) in enumerate(zip(As, Bs)):
        if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
            raise ShapeError(f"group {g}: A {tuple(a.shape)} and B {tuple(b.shape)} are not (M, K), (N, K)",
                             "B is (N, K), like a torch Linear weight")
        checks.check_blockscaled_sizes(a.shape[0], b.shape[0], a.shape[1], f, g)
        qa, sfa = block_scaling.quantize(a, f)
        qb, sfb = block_scaling.quantize(b, f)
        ops = [qa, qb, torch.empty((a.shape[0], b.shape[0]), dtype=out_dtype or torch.float16),
               block_scaling.to_interleaved(sfa), block_scaling.to_interleaved(sfb)]
        out.append(QuantizedGroup(*[t.to(device) if device is not None else t for t in ops]))
    return out


def metadata_blockscaled(groups, fmt: str = "nvfp4", tile_mn=(128, 128), cluster_mn=(1, 1),
                       sms: int = B200_SMS) -> Metadata:
    """The device metadata of ``groups`` (a list of :class:`QuantizedGroup`), on their device.
    Works on CPU tensors too (the pointers are then host addresses): the tests check it there.
    Strides count elements (fp4: 2 per byte); the interleaved scale factors have none (0)."""
    f = check_format(fmt)
    sizes = checks.check_quantized(groups, f)
    per_byte = 2 if f.data == "e2m1" else 1
    kernel = BlackwellGroupedBlockScaledGemm(f.name, tile_mn=tuple(tile_mn), cluster_mn=tuple(cluster_mn), sms=sms,
                                             out_dtype=checks.dtype_name(groups[0].c.dtype))
    stride = {"a": lambda op: op.a.stride(0) * per_byte, "b": lambda op: op.b.stride(0) * per_byte,
              "c": lambda op: op.c.stride(0), "sfa": lambda op: 0, "sfb": lambda op: 0}
    columns = [([getattr(op, name) for op in groups], [stride[name](op) for op in groups]) for name in OPERANDS]
    return list_metadata(kernel, sizes, columns, groups[0].a.device)


def launcher_blockscaled(groups, fmt: str = "nvfp4", tile=(128, 128), cluster=(1, 1), sms: int | None = None):
    """Validated, compiled launch closure: ``fn()`` writes every group's C. Needs a B200."""
    sms = _sms("sm_100a", sms)
    meta = metadata_blockscaled(groups, fmt, tile, cluster, sms)
    kernel = BlackwellGroupedBlockScaledGemm(fmt, tile_mn=tuple(tile), cluster_mn=tuple(cluster), sms=sms,
                                             out_dtype=checks.dtype_name(groups[0].c.dtype))
    t = next(op for op, (m, _, _) in zip(groups, meta.sizes) if m)  # templates: a non-empty group
    return launch_closure(kernel, (t.a, t.b, t.c, t.sfa, t.sfb), meta, "sm_100a", keep=groups)


def grouped_gemm_blockscaled(As, Bs, fmt: str = "nvfp4", out_dtype=None, **config):
    """``[dequant(A_g) @ dequant(B_g).T for g]`` on a B200: each pair is quantized to ``fmt``
    (``block_scaling.quantize``, on the CPU), multiplied by the block-scaled tensor cores in one
    launch, and returned as float16 (or ``out_dtype``) C_g. ``config``: ``launcher_blockscaled``'s."""
    from ..modes import require_gpu

    require_gpu("sm_100a")  # before quantizing anything
    groups = quantize_blockscaled(As, Bs, fmt, out_dtype, device="cuda")
    launcher_blockscaled(groups, fmt, **config)()
    return [op.c for op in groups]
