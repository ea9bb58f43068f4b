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

Under them, for benchmarks and tests: launchers (``launcher``, ``packed_launcher``,
``launcher_fp8``, ``launcher_blockscaled``: checked and compiled once, ``fn()`` launches). Each
is one line: a form of groups (``group_forms.py``: ``ListGroups``, ``PackedGroups``, their
FP8 subclasses ``ScaledListGroups`` and ``ScaledPackedGroups``, ``QuantizedGroups``) handed to
one of three entries, ``HOPPER``, ``FP8`` and ``BLACKWELL`` (``grouped_launch.GroupedEntry``,
the dense GEMMs' ``gemm_launch.Entry`` for groups, with the same verbs: ``gemm``, ``launcher``,
``launch`` for a kernel object, ``compile_target``; kernel keywords, ``epilogue_op=`` with
``epilogue_args=``). The compile targets that ``cutecourse.inspect`` compiles without a GPU are
the entries' (``grouped_targets.py`` names them); the input checks are ``grouped_checks.py``.
"""

from __future__ import annotations

from ..errors import CourseError, ShapeError
from ..models import block_scaling
from ..models import blockwise_fp8
from ..models.blackwell_plan import check_format
from . import grouped_checks as checks
from .configured import pick
from .blackwell_grouped_gemm import BlackwellGroupedBlockScaledGemm
from .grouped_fakes import fake_blockscaled_operands
from .group_forms import (GroupForm, ListGroups, Metadata, PackedGroups,  # noqa: F401
                          QuantizedGroups, ScaledListGroups, ScaledPackedGroups, list_metadata, packed_metadata)
from .grouped_launch import GroupedEntry
from .hopper_grouped_gemm import GroupedHopperGemm
from .hopper_grouped_gemm_fp8 import BLOCK, CLUSTER, BlockScaledGroupedHopperGemm
from .hopper_grouped_gemm_fp8_onepart import OnePartBlockScaledGroupedHopperGemm

QuantizedGroup = checks.QuantizedGroup


#: The FP8 kernel classes by name, what ``fp8_kernel``'s ``variant=`` picks from (``configured.pick``):
#: a new FP8 kernel class is reached by adding it here, and ``tools/ptx_fingerprints.py`` and
#: ``tests/test_kernel_tables.py`` then compile it.
FP8_KERNELS = {"onepart": OnePartBlockScaledGroupedHopperGemm, "twopart": BlockScaledGroupedHopperGemm}
#: ``parts=`` (k-tile products in flight per warpgroup): the other spelling of two of those names.
FP8_PARTS = {1: "onepart", 2: "twopart"}


def fp8_kernel(tile_mn=None, *, variant: str | None = None, parts: int | None = None, sms: int | None = None,
               **config):
    """The FP8 kernel of a configuration, what the ``FP8`` entry builds: the class named
    ``variant`` (``FP8_KERNELS``) built with the other keywords, the constructor's (``tile_mn``,
    ``cluster_mn``, ``sms``, ``stages``, ``group_m``, ``scheduler``, ``epilogue_op`` ...; the
    launchers' ``tile`` and ``cluster`` become these). "onepart" (default; ``parts=1``): one
    k-tile's product in flight per warpgroup (``OnePartBlockScaledGroupedHopperGemm``: 128x128,
    128x192 or 128x256 tiles; it passes the turn to issue on when its wgmmas are issued, and loads
    its scales a k-tile ahead); "twopart" (``parts=2``): two (``BlockScaledGroupedHopperGemm``,
    128x128 tiles only: the kernel notebook 07 teaches). A keyword left out or None is the class's
    default (its ``TILE_MN``, ``CLUSTER_MN`` ...: the one place they are set; ``sms`` named here,
    so that the launchers fill in the GPU's)."""
    if parts is not None:
        spelt = pick(FP8_PARTS, "parts", parts)
        if variant not in (None, spelt):
            raise CourseError(f"parts={parts} is variant={spelt!r}, but variant={variant!r} was given too",
                              "pass one of the two: variant= names the kernel class (grouped.FP8_KERNELS)")
        variant = spelt
    return pick(FP8_KERNELS, "variant", variant or "onepart")(tile_mn, sms=sms, **config)


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


#: The grouped kernels' entries: kernel keywords (``tile``, ``cluster``, ``sms`` (default: every
#: SM), ``stages``, ``group_m``, ``epilogue_op`` ...) go to the kernel's constructor.
HOPPER = GroupedEntry(GroupedHopperGemm)
FP8 = GroupedEntry(fp8_kernel, columns=5, out_dtype="bfloat16",
                   choose=lambda groups: {"cluster": fp8_cluster(*groups.rows())})
BLACKWELL = GroupedEntry(BlackwellGroupedBlockScaledGemm, arch="sm_100a", columns=5, templates=fake_blockscaled_operands)


# -- Hopper, fp16 / bf16 --------------------------------------------------------------------------
def grouped_gemm(As, Bs, out_dtype=None, epilogue_args=(), **config):
    """``[A_g @ B_g.T for g]`` in one launch on an H100: A_g (M_g, K_g), B_g (N_g, K_g), both
    K-major fp16/bf16 (every group the same dtype); M_g may be 0. Returns the list of C_g.
    ``config``: tile, sms (default: every SM), stages, group_m, cluster, epilogue_op."""
    return HOPPER.gemm(ListGroups(As, Bs), out_dtype, epilogue_args, **config)


def launcher(As, Bs, Cs, epilogue_args=(), **config):
    """Validated, compiled launch: ``fn()`` writes ``A_g @ B_g.T`` into every ``Cs[g]``."""
    return HOPPER.launcher(ListGroups(As, Bs, Cs), epilogue_args, **config)


def grouped_mm(a, b, offs, out_dtype=None, epilogue_args=(), **config):
    """``torch._grouped_mm(a, b, offs=offs)`` for a (sum M, K) and b (G, K, N), on an H100.

    Checks that ``offs`` is non-decreasing and ends within ``a`` (one host sync); rows past
    ``offs[-1]`` belong to no group and are returned as zeros.
    """
    return HOPPER.gemm(PackedGroups(a, b, offs), out_dtype, epilogue_args, **config)


def packed_launcher(a, b, offs, c, epilogue_args=(), **config):
    """Launch for the packed form: ``fn()`` writes ``a[rows_g] @ b[g]`` into ``c[rows_g]``."""
    return HOPPER.launcher(PackedGroups(a, b, offs, c), epilogue_args, **config)


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


def grouped_gemm_fp8(As, Bs, SAs, SBs, out_dtype=None, epilogue_args=(), **config):
    """``[(qa_g * sa_g) @ (qb_g * sb_g).T for g]`` in one launch on an H100 (bf16 by default).

    As[g] (M_g, K_g) and Bs[g] (N_g, K_g): float8_e4m3fn, K-major; SAs[g] (M_g, ceil(K_g/128))
    and SBs[g] (ceil(N_g/128), ceil(K_g/128)): float32 (``quantize_fp8`` makes all four).
    ``config``: ``fp8_kernel``'s keywords; the cluster by default from the groups' mean height
    (``fp8_cluster``).
    """
    return FP8.gemm(ScaledListGroups(As, Bs, SAs, SBs), out_dtype, epilogue_args, **config)


def launcher_fp8(As, Bs, SAs, SBs, Cs, epilogue_args=(), **config):
    """Validated, compiled launch: ``fn()`` writes group g's scaled product into ``Cs[g]``."""
    return FP8.launcher(ScaledListGroups(As, Bs, SAs, SBs, Cs), epilogue_args, **config)


def grouped_mm_fp8(a, b, sa, sb, offs, out_dtype=None, epilogue_args=(), **config):
    """The packed MoE form: a (sum M, K) e4m3 with sa (sum M, K/128), b (G, K, N) = the transpose
    of e4m3 weights w (G, N, K) with sb (G, N/128, K/128), offs the int32 cumulative row ends.
    Row block g of the result is (a_g * sa_g) @ (w_g * sb_g).T, in bf16 by default."""
    return FP8.gemm(ScaledPackedGroups(a, b, sa, sb, offs), out_dtype, epilogue_args, **config)


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


def launcher_blockscaled(groups, fmt: str = "nvfp4", epilogue_args=(), **config):
    """Validated, compiled launch: ``fn()`` writes every group's C. Needs a B200. ``config``: the
    kernel's keywords, as every launcher takes them (tile, cluster, sms (default: every SM), stages,
    epilogue_op ...; left out: the kernel's defaults)."""
    return BLACKWELL.launcher(QuantizedGroups(groups, fmt), epilogue_args, **config)


def grouped_gemm_blockscaled(As, Bs, fmt: str = "nvfp4", out_dtype=None, epilogue_args=(), **config):
    """``[dequant(A_g) @ dequant(B_g).T for g]`` on a B200: each pair is quantized to ``fmt``
    (``block_scaling.quantize``, on the CPU), multiplied by the block-scaled tensor cores in one
    launch (``BLACKWELL.gemm``), and returned as float16 (or ``out_dtype``) C_g. ``config``:
    ``launcher_blockscaled``'s."""
    from ..modes import require_gpu

    require_gpu("sm_100a")  # before quantizing anything
    groups = quantize_blockscaled(As, Bs, fmt, out_dtype, device="cuda")
    return BLACKWELL.gemm(QuantizedGroups(groups, fmt), out_dtype, epilogue_args, **config)
