"""FP8 grouped GEMM with block scales on Hopper: the recipe of DeepSeek-V3's training and DeepGEMM.

Each group multiplies e4m3 matrices that carry fp32 scales, one per block::

    A_g ~ qa * sa   one scale per 1 x 128 block of A (per token and 128 channels: activations)
    B_g ~ qb * sb   one scale per 128 x 128 block of B (weights)

so ``C_g = sum over k-blocks kb of (qa_kb @ qb_kb.T) * sa[:, kb] * sb[n // 128, kb]``
(``models/block_scaling.scaled_mm_reference`` is this sum on the CPU). The scales change from one
k-block to the next, so they cannot be applied once at the end: every k-block's product must be
scaled on its own before it joins the sum. This is the grouped kernel of ``hopper_grouped_gemm``
(same roles, group search, tensor maps and epilogue) with these changes:

* **e4m3 operands, K-major.** Hopper's 8-bit wgmma reads both operands K-major from smem, 32 k
  per instruction. A k-tile is still one 128-byte swizzled row, now 128 elements: exactly one
  scale block, so one k-tile = one scale per row of A and one per 128 columns of B.
* **128 x 128 tiles.** Each consumer warpgroup computes 64 x 128; a tile's 128 columns are one
  block of B's scales.
* **Promotion.** The wgmmas of k-tile k write a *fresh* accumulator (the first one overwrites:
  ``ACCUMULATE`` off); once they are done, the consumer frees the stage and adds that product,
  times ``sa[row] * sb``, to the fp32 accumulator ``acc`` with one FFMA per register. (The fp8
  wgmma also sums with fewer bits than fp32, so promoting every 128 k keeps its error from
  growing with K: DeepSeek-V3, section 3.3.)
* **Two k-tiles in flight.** With one fresh accumulator, each k-tile must wait for its wgmmas
  (``wait_group(0)``) before the FFMAs, and the tensor cores idle while they run: measured
  814-848 TFLOP/s on the H100. With two, ``part0`` and ``part1``, k-tile k + 1's wgmmas are
  issued before k's are waited for (``wait_group(1)``, as in the bf16 kernel), so the promotion
  of k runs under them: 970-1011 TFLOP/s. Three 64-register accumulators fit the consumers'
  232 registers; even and odd k-tiles alternate, so the loop runs over pairs of k-tiles.
* **The scales come from global memory.** Each consumer thread holds the accumulators of two rows
  of its tile, so it loads two values of ``sa`` and one of ``sb`` per k-tile, when it issues that
  k-tile: they arrive while the wgmmas run. ``sa`` is stored M-major (``(M, K/128)`` with stride
  ``(1, M)``, as DeepGEMM and ``torch._scaled_mm`` store it), so neighbouring threads read
  neighbouring addresses.

Entry points: ``grouped_gemm_fp8(As, SAs, Bs, SBs)`` (lists, like a loop of scaled products),
``grouped_mm_fp8(a, sa, b, sb, offs)`` (the packed MoE form of ``torch._grouped_mm``),
``quantize_groups`` (bf16/fp32 -> e4m3 + fp32 scales), ``launcher`` for benchmarks,
``compile_target`` for ``cutecourse.inspect``.
"""

from __future__ import annotations

import math

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass.cute.nvgpu import warpgroup

from ..errors import DTypeError, LayoutError, ShapeError
from ..models.gemm_plan import EPI_TILE, FP8_DTYPES, tile_k
from . import sm90
from .hopper_gemm_persistent import PRODUCER_WARPGROUPS, plan_persistent
from .hopper_grouped_gemm import (GROUP_M, MAP_BYTES, MAPS, WORK_SLOTS, GroupedHopperGemm, _launch_closure,
                                  _receive, check_groups, check_outputs, list_closure)

#: Scale blocks: 1 x 128 of A, 128 x 128 of B (= one k-tile, = one tile's columns).
BLOCK = 128
#: The launchers' default cluster: pairs of CTAs along M share B's k-tiles by multicast.
#: Measured 1.03-1.05x the 1x1 launch (benchmarks/results/grouped_fp8.json).
CLUSTER = (2, 1)
#: Metadata columns: A, B, C (tensor maps), then the scales SFA and SFB (read by the consumers).
#: strides: row strides of A, B, C (elements); SFA's k-block stride; SFB's row stride.
OPERANDS = 5
SFA, SFB = 3, 4


class BlockScaledGroupedHopperGemm(GroupedHopperGemm):
    """G products ``C_g = (qa_g * sa_g) @ (qb_g * sb_g).T``, e4m3 inputs, fp32 block scales.

    The grouped kernel (``GroupedHopperGemm``) with 128 x 128 x 128 tiles and a consumer that
    promotes each k-tile's product into fp32 with its scales (module docstring).
    """

    TILES = ((128, 128),)
    IN_DTYPES = FP8_DTYPES

    def __init__(self, tile_mn=(128, 128), sms: int = 132, stages: int | None = None,
                 epi_tile=EPI_TILE, group_m: int = GROUP_M, cluster_mn=(1, 1)):
        super().__init__(tile_mn, sms, stages, epi_tile, group_m, cluster_mn)
        self.tile_mnk = (*self.tile_mn, tile_k("float8_e4m3fn"))  # 128: one scale block
        self.config = ("fp8_blockwise", *self.config)

    # -- consumers: MMA into `part`, promote into `acc` with the scales, epilogue -----------
    @cute.jit
    def _grouped_consumer(self, ring, queue, items, groups, mma, epilogue, gC, c_map_ptrs, warp_idx):
        """The grouped consumer's loop, with the per-k-tile promotion (module docstring)."""
        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        slot = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, WORK_SLOTS)
        c_desc = self.maps.get_tensormap_ptr(c_map_ptrs[0], cute.AddressSpace.generic)
        # The tile row of each of this thread's accumulators (two distinct rows per thread).
        tidx, _, _ = cute.arch.thread_idx()
        thr = mma.tiled_mma.get_slice(tidx - 128 * PRODUCER_WARPGROUPS)
        rows = thr.partition_C(cute.make_identity_tensor(self.tile_mn))
        # Two k-tiles in flight: k-tile k's product goes to part0 (k even) or part1 (k odd), with
        # its scales in sa0/sb0 or sa1/sb1. While k's product is promoted, k + 1's wgmmas run.
        part0 = cute.make_rmem_tensor(mma.acc.shape, self.acc_dtype)
        part1 = cute.make_rmem_tensor(mma.acc.shape, self.acc_dtype)
        sa0 = cute.make_rmem_tensor(mma.acc.shape, self.acc_dtype)  # sa of each accumulator's row
        sa1 = cute.make_rmem_tensor(mma.acc.shape, self.acc_dtype)
        sb1 = cutlass.Float32(0.0)
        tiled_mma, tCrA, tCrB, acc = mma.tiled_mma, mma.tCrA, mma.tCrB, mma.acc
        group, tile_m, tile_n, k_tiles = _receive(queue, items, slot)
        slot.advance()
        last = cutlass.Int32(-1)
        while group >= 0:
            if group != last:
                self._switch_c_map(groups, group, epilogue, c_map_ptrs, warp_idx)
                last = group
            sfa, sfb, m_rows, n_blocks = _group_scales(groups, group, k_tiles)
            # (a cluster's CTA past the group's M or N reads the last row's or block's scales:
            # its results are never stored)
            scales = (sfa, sfb, rows, tile_m * self.tile_mn[0], m_rows, cutlass.min(tile_n, n_blocks - 1))
            acc.fill(0.0)
            sb0 = _load_scales(scales, sa0, 0)
            tiled_mma = _issue(ring, read, tiled_mma, tCrA, tCrB, part0)
            read.advance()
            for pair in cutlass.range((k_tiles - 1) // 2, unroll=1):
                k = 2 * pair
                sb1 = _load_scales(scales, sa1, k + 1)
                tiled_mma = _issue(ring, read, tiled_mma, tCrA, tCrB, part1)
                read.advance()
                warpgroup.wait_group(1)  # k-tile k is done, k + 1 still running
                _promote(ring, release, acc, part0, sa0, sb0)
                release.advance()
                sb0 = _load_scales(scales, sa0, k + 2)
                tiled_mma = _issue(ring, read, tiled_mma, tCrA, tCrB, part0)
                read.advance()
                warpgroup.wait_group(1)
                _promote(ring, release, acc, part1, sa1, sb1)
                release.advance()
            if k_tiles % 2 == 0:  # the last k-tile is odd: issue it, then retire both
                sb1 = _load_scales(scales, sa1, k_tiles - 1)
                tiled_mma = _issue(ring, read, tiled_mma, tCrA, tCrB, part1)
                read.advance()
                warpgroup.wait_group(1)
                _promote(ring, release, acc, part0, sa0, sb0)
                release.advance()
                warpgroup.wait_group(0)
                _promote(ring, release, acc, part1, sa1, sb1)
                release.advance()
            else:
                warpgroup.wait_group(0)
                _promote(ring, release, acc, part0, sa0, sb0)
                release.advance()
            sm90.store_tile(epilogue, gC[(None, None, tile_m, tile_n)], warp_idx, c_desc)
            group, tile_m, tile_n, k_tiles = _receive(queue, items, slot)
            slot.advance()
        sm90.finish_stores(epilogue, warp_idx)


@cute.jit
def _issue(ring, read, tiled_mma, tCrA, tCrB, part):
    """Wait for ring stage ``read``, then start part = its A_tile @ B_tile.T: ``sm90.issue_mma``,
    except that the first wgmma overwrites (ACCUMULATE off). Returns the MMA, whose field changed."""
    ring.consumer_wait(read)
    warpgroup.fence()
    for kb in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
        tiled_mma.set(warpgroup.Field.ACCUMULATE, kb != 0)
        cute.gemm(tiled_mma, part, tCrA[(None, None, kb, read.index)], tCrB[(None, None, kb, read.index)],
                  part)
    warpgroup.commit_group()
    return tiled_mma


@cute.jit
def _promote(ring, release, acc, part, sa, sb):
    """A finished k-tile: free its ring stage, then acc += part * sa[row] * sb (one FFMA each)."""
    ring.consumer_release(release)
    for i in cutlass.range_constexpr(cute.size(part)):
        acc[i] = acc[i] + part[i] * (sa[i] * sb)


@cute.jit
def _load_scales(scales, sa, k):
    """Fill ``sa`` with A's scale of each accumulator's row at k-tile ``k``; return B's scale of
    the tile's columns. (One per accumulator, but the compiler loads each distinct row once: two
    per thread.)"""
    sfa, sfb, rows, first_row, m_rows, tile_n = scales
    for i in cutlass.range_constexpr(cute.size(sa)):
        sa[i] = sfa[(cutlass.min(first_row + rows[i][0], m_rows - 1), k)]
    return sfb[(tile_n, k)]


def _group_scales(groups, g, k_tiles):
    """(sfa, sfb, M_g, N_g/128) of group g: sfa (M_g, k-blocks) M-major, sfb (N_g/128, k-blocks)
    row-major."""
    m_rows = groups.shapes[(g, 0)]
    n_blocks = (groups.shapes[(g, 1)] + BLOCK - 1) // BLOCK
    sfa = cute.make_tensor(
        cute.make_ptr(cutlass.Float32, groups.ptrs[(g, SFA)], cute.AddressSpace.gmem, assumed_align=4),
        cute.make_layout((m_rows, k_tiles), stride=(1, groups.strides[(g, SFA)])))
    sfb = cute.make_tensor(
        cute.make_ptr(cutlass.Float32, groups.ptrs[(g, SFB)], cute.AddressSpace.gmem, assumed_align=4),
        cute.make_layout((n_blocks, k_tiles), stride=(groups.strides[(g, SFB)], 1)))
    return sfa, sfb, m_rows, n_blocks


# ------------------------------------------------------------------------------------------
# Python entry points
# ------------------------------------------------------------------------------------------
def compile_target(tile=(128, 128), out_dtype: str = "bfloat16", sms: int = 132,
                   stages: int | None = None, cluster=(1, 1)):
    """(jit_fn, fake_args) for ``cutecourse.inspect.compile_report``: symbolic sizes and G."""
    import cuda.bindings.driver as cuda
    from cutlass.cute.runtime import make_fake_tensor

    from . import gemm_launch

    plan_fp8(tuple(tile), out_dtype, stages)
    kernel = BlockScaledGroupedHopperGemm(tuple(tile), sms, stages, cluster_mn=tuple(cluster))
    g = cute.sym_int(symbol="G")
    shapes = make_fake_tensor(cutlass.Int32, (g, 4), (4, 1), assumed_align=16)
    ptrs = make_fake_tensor(cutlass.Int64, (g, OPERANDS), (OPERANDS, 1), assumed_align=8)
    strides = make_fake_tensor(cutlass.Int64, (g, OPERANDS), (OPERANDS, 1), assumed_align=8)
    workspace = make_fake_tensor(cutlass.Int64, (sms, MAPS, MAP_BYTES // 8),
                                 (MAPS * MAP_BYTES // 8, MAP_BYTES // 8, 1), assumed_align=MAP_BYTES)
    trace = make_fake_tensor(cutlass.Int32, (sms, 2), (2, 1), assumed_align=8)
    return kernel, (*gemm_launch.fake_operands("float8_e4m3fn", out_dtype), shapes, ptrs, strides,
                    workspace, trace, cutlass.Int32(sms), cuda.CUstream(0))


def plan_fp8(tile=(128, 128), out_dtype: str = "bfloat16", stages: int | None = None):
    """The smem plan: 32 KiB per stage (128 x 128 of A and of B, 1 byte each): bf16 C, 6 stages."""
    return plan_persistent(tuple(tile), "float8_e4m3fn", out_dtype, stages=stages,
                           tiles=BlockScaledGroupedHopperGemm.TILES, in_dtypes=FP8_DTYPES)


def check_scales(As, SAs, Bs, SBs):
    """Each group's scales: sa (M_g, ceil(K/128)) and sb (ceil(N_g/128), ceil(K/128)) float32, on
    the operands' device; sb row-major (unit stride along k)."""
    import torch

    if len(SAs) != len(As) or len(SBs) != len(Bs):
        raise ShapeError(f"{len(As)} groups but {len(SAs)} A scales and {len(SBs)} B scales",
                         "pass one sa and one sb per group (quantize_groups makes them)")
    for g, (a, sa, b, sb) in enumerate(zip(As, SAs, Bs, SBs)):
        kb = math.ceil(a.shape[1] / BLOCK)
        want = {"sa": (a.shape[0], kb), "sb": (math.ceil(b.shape[0] / BLOCK), kb)}
        for name, s in (("sa", sa), ("sb", sb)):
            if not isinstance(s, torch.Tensor) or s.dtype != torch.float32:
                raise DTypeError(f"group {g}: {name} must be a float32 tensor, got "
                                 f"{getattr(s, 'dtype', type(s).__name__)}",
                                 "block scales are fp32 (quantize_groups makes them)")
            if tuple(s.shape) != want[name]:
                raise ShapeError(f"group {g}: {name} is {tuple(s.shape)}, expected {want[name]} "
                                 f"(A {tuple(a.shape)}, B {tuple(b.shape)}, blocks 1x{BLOCK} of A, "
                                 f"{BLOCK}x{BLOCK} of B)", "quantize with quantize_groups")
            if s.device != a.device:
                from ..errors import DeviceError
                raise DeviceError(f"group {g}: {name} is on {s.device}, the operands on {a.device}",
                                  f"move it: {name}.to(a.device)")
        if sb.shape[1] > 1 and sb.stride(1) != 1:
            raise LayoutError(f"group {g}: sb's strides are {tuple(sb.stride())}; the kernel reads it "
                              "row-major", "pass sb.contiguous()")


def _m_major(sa):
    """sa as the kernel reads it: (M, K/128) with unit stride along M (a copy if it is not)."""
    return sa if sa.shape[0] <= 1 or sa.stride(0) == 1 else sa.t().contiguous().t()


def launcher(As, SAs, Bs, SBs, Cs, sms: int | None = None, stages: int | None = None,
             group_m: int = GROUP_M, cluster=CLUSTER):
    """Validated, compiled launch closure: ``fn()`` writes group g's scaled product into ``Cs[g]``."""
    import torch

    from ..modes import require_gpu

    check_groups(As, Bs, Cs[0].dtype if Cs else None, in_dtypes=(torch.float8_e4m3fn,))
    check_scales(As, SAs, Bs, SBs)
    check_outputs(As, Bs, Cs)
    sms = require_gpu("sm_90a").sm_count if sms is None else sms
    kernel = BlockScaledGroupedHopperGemm((128, 128), sms, stages, group_m=group_m,
                                          cluster_mn=tuple(cluster))
    # metadata columns SFA (its k-block stride: M-major) and SFB (its row stride)
    return list_closure(kernel, As, Bs, Cs, extra=[([_m_major(sa) for sa in SAs], 1), (SBs, 0)])


def grouped_gemm_fp8(As, SAs, Bs, SBs, out_dtype=None, **config):
    """``[(qa_g * sa_g) @ (qb_g * sb_g).T for g]`` in one launch on an H100 (bf16 by default).

    As[g] (M_g, K_g) and Bs[g] (N_g, K_g): float8_e4m3fn, K-major; SAs[g] (M_g, ceil(K_g/128))
    and SBs[g] (ceil(N_g/128), ceil(K_g/128)): float32 (``quantize_groups`` makes all four).
    """
    import torch

    check_groups(As, Bs, out_dtype or torch.bfloat16, in_dtypes=(torch.float8_e4m3fn,))
    check_scales(As, SAs, Bs, SBs)
    dtype = out_dtype or torch.bfloat16
    Cs = [torch.empty((a.shape[0], b.shape[0]), dtype=dtype, device=a.device) for a, b in zip(As, Bs)]
    launcher(As, SAs, Bs, SBs, Cs, **config)()
    return Cs


def quantize_groups(As, Bs):
    """(qAs, SAs, qBs, SBs): each A_g per 1x128 block and B_g per 128x128 block to e4m3 with fp32
    scales (``models.block_scaling.quantize_blockwise_fp8``), on the inputs' device; sa M-major."""
    from ..models.block_scaling import quantize_blockwise_fp8

    out = ([], [], [], [])
    for a, b in zip(As, Bs):
        qa, sa = quantize_blockwise_fp8(a, (1, BLOCK))
        qb, sb = quantize_blockwise_fp8(b, (BLOCK, BLOCK))
        for lst, t in zip(out, (qa, _m_major(sa.contiguous()), qb, sb)):
            lst.append(t.to(a.device))
    return out


# -- the packed MoE form -------------------------------------------------------------------------
def check_packed_scales(a, sa, b, sb):
    """sa (sum M, ceil(K/128)) and sb (G, ceil(N/128), ceil(K/128)), float32, sb[g] row-major."""
    import torch

    kb, (groups, _, n) = math.ceil(a.shape[1] / BLOCK), b.shape
    for name, s, want in (("sa", sa, (a.shape[0], kb)), ("sb", sb, (groups, math.ceil(n / BLOCK), kb))):
        if not isinstance(s, torch.Tensor) or s.dtype != torch.float32 or tuple(s.shape) != want:
            raise ShapeError(f"{name} is {getattr(s, 'dtype', type(s).__name__)} "
                             f"{tuple(getattr(s, 'shape', ()))}, expected float32 {want}",
                             "quantize a per 1x128 and each w[g] per 128x128 block "
                             "(models.block_scaling.quantize_blockwise_fp8)")
        if s.device != a.device:
            from ..errors import DeviceError
            raise DeviceError(f"{name} is on {s.device}, a on {a.device}", f"move it: {name}.to(a.device)")
    if sb.shape[2] > 1 and sb.stride(2) != 1:
        raise LayoutError(f"sb's strides are {tuple(sb.stride())}; the kernel reads each sb[g] row-major",
                          "pass sb.contiguous()")


def packed_launcher(a, sa, b, sb, offs, c, sms: int | None = None, stages: int | None = None,
                    group_m: int = GROUP_M, cluster=CLUSTER):
    """Launch closure for the packed form: ``fn()`` writes group g's scaled product into c[rows_g]:
    the bf16 kernel's metadata (``hopper_grouped_gemm.packed_metadata``) plus each group's scales."""
    import torch

    from ..modes import require_gpu
    from .hopper_grouped_gemm import check_packed, packed_metadata

    check_packed(a, b, offs, c.dtype, in_dtypes=(torch.float8_e4m3fn,))
    check_packed_scales(a, sa, b, sb)
    if tuple(c.shape) != (a.shape[0], b.shape[2]) or not c.is_contiguous():
        raise ShapeError(f"c is {tuple(c.shape)}, expected a contiguous {(a.shape[0], b.shape[2])}",
                         "allocate c as torch.empty(sum M, N, dtype=torch.bfloat16)")
    sms = require_gpu("sm_90a").sm_count if sms is None else sms
    kernel = BlockScaledGroupedHopperGemm((128, 128), sms, stages, group_m=group_m,
                                          cluster_mn=tuple(cluster))
    sa = _m_major(sa)
    shapes, ptrs, strides = packed_metadata(a, b, c, offs)
    ends = offs.to(torch.int64)
    starts = torch.cat([ends.new_zeros(1), ends[:-1]])
    g = torch.arange(b.shape[0], device=offs.device, dtype=torch.int64)
    ptrs = torch.cat([ptrs, torch.stack([sa.data_ptr() + starts * 4, sb.data_ptr() + g * sb.stride(0) * 4], 1)],
                     dim=1)
    strides = torch.cat([strides, torch.tensor([sa.stride(1), sb.stride(1)], device=offs.device)
                         .expand(b.shape[0], 2)], dim=1).contiguous()
    bound = (-(-a.shape[0] // 128) + b.shape[0]) * -(-b.shape[2] // 128)
    fn = _launch_closure(kernel, (a, b[0].transpose(0, 1), c), shapes, ptrs, strides, bound)
    fn.keep_alive = (*fn.keep_alive, sa, sb)
    return fn


def grouped_mm_fp8(a, sa, b, sb, offs, out_dtype=None, **config):
    """The packed MoE form: a (sum M, K) e4m3 with sa (sum M, K/128), b (G, K, N) = the transpose
    of e4m3 weights w (G, N, K) with sb (G, N/128, K/128), offs the int32 cumulative row ends.
    Row block g of the result is (a_g * sa_g) @ (w_g * sb_g).T, in bf16 by default."""
    import torch

    from .hopper_grouped_gemm import check_offs, check_packed

    out_dtype = out_dtype or torch.bfloat16
    check_packed(a, b, offs, out_dtype, in_dtypes=(torch.float8_e4m3fn,))
    check_packed_scales(a, sa, b, sb)
    c = torch.empty((a.shape[0], b.shape[2]), dtype=out_dtype, device=a.device)
    c[check_offs(offs, a.shape[0]):].zero_()
    if a.shape[0] == 0 or a.shape[1] == 0:
        return c.zero_()
    packed_launcher(a, sa, b, sb, offs, c, **config)()
    return c
