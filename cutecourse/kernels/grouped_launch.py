"""Grouped GEMMs from the host: the device metadata of a batch of groups, and launch closures.

Every grouped kernel (Hopper bf16 and FP8, Blackwell block-scaled) takes, besides the templates
of its tensor maps, the same three small tensors: ``shapes`` (G, 4), ``ptrs`` and ``strides``
(G, operands), built here from a list of groups (:func:`list_metadata`) or from the packed MoE
form on the GPU (:func:`packed_metadata`, no host sync), and is launched through
:func:`launch_closure` (compiled once per configuration: G and every size are run-time values).
The torch-facing functions that use them are in ``grouped.py``.
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import DeviceError
from . import gemm_launch
from .tensor_maps import MAP_BYTES, MAP_WORDS


class Metadata(NamedTuple):
    """What a grouped kernel takes besides the templates (torch tensors, on the groups' device)."""

    shapes: object  # (G, 4) int32: M, N, K, 1
    ptrs: object  # (G, operands) int64: addresses, in group_walk.OPERANDS order
    strides: object  # (G, operands) int64: each operand's stride (A, B, C: rows, in elements)
    work_bound: int  # >= the work items (cluster tiles) of all groups: it sizes the grid
    sizes: list | None  # [(M, N, K), ...] when known on the host (the list forms)


def cluster_tile(kernel) -> tuple[int, int]:
    """The block of C one work item covers: the CTA tile times the cluster shape."""
    return kernel.tile_mn[0] * kernel.cluster_mn[0], kernel.tile_mn[1] * kernel.cluster_mn[1]


def list_metadata(kernel, sizes, columns, device) -> Metadata:
    """The list forms' metadata: ``sizes`` [(M, N, K)] per group, ``columns`` one (tensors,
    strides) pair per operand in OPERANDS order (each group's tensor and its stride)."""
    import torch

    bm, bn = cluster_tile(kernel)
    groups = range(len(sizes))
    return Metadata(
        torch.tensor([[m, n, k, 1] for m, n, k in sizes], dtype=torch.int32, device=device),
        torch.tensor([[ts[g].data_ptr() for ts, _ in columns] for g in groups], dtype=torch.int64, device=device),
        torch.tensor([[st[g] for _, st in columns] for g in groups], dtype=torch.int64, device=device),
        sum(-(-m // bm) * -(-n // bn) for m, n, _ in sizes), list(sizes))


def packed_metadata(kernel, a, b, c, offs, scales=None) -> Metadata:
    """The packed form's metadata, computed on the GPU from ``offs`` (no host sync): group g is
    rows ``offs[g-1]:offs[g]`` of A and C, and B = b[g] (K, N) read as its transpose (N, K).
    ``scales``: (sa, sb) of the FP8 kernel, sa M-major (sum M, K/128), sb (G, N/128, K/128)."""
    import torch

    ends = offs.to(torch.int64)
    starts = torch.cat([ends.new_zeros(1), ends[:-1]])
    groups, k, n = b.shape
    rows = ends - starts
    shapes = torch.stack([rows, torch.full_like(rows, n), torch.full_like(rows, k), torch.ones_like(rows)],
                         dim=1).to(torch.int32)
    g = torch.arange(groups, device=offs.device, dtype=torch.int64)
    ptrs = [a.data_ptr() + starts * a.stride(0) * a.element_size(),
            b.data_ptr() + g * b.stride(0) * b.element_size(),
            c.data_ptr() + starts * c.stride(0) * c.element_size()]
    strides = [a.stride(0), b.stride(2), c.stride(0)]
    if scales is not None:
        sa, sb = scales
        ptrs += [sa.data_ptr() + starts * 4, sb.data_ptr() + g * sb.stride(0) * 4]
        strides += [sa.stride(1), sb.stride(1)]
    # Without reading offs on the host: the tiles of all groups are at most ceil(sum M / BM) + G
    # rows (each group wastes less than one) times ceil(N / BN) columns.
    bm, bn = cluster_tile(kernel)
    return Metadata(shapes, torch.stack(ptrs, dim=1),
                    torch.tensor(strides, dtype=torch.int64, device=offs.device).expand(groups, len(strides))
                    .contiguous(), (-(-a.shape[0] // bm) + groups) * -(-n // bn), None)


# -- compile once, launch many times --------------------------------------------------------------
def launch_closure(kernel, templates, meta: Metadata, arch: str, keep=()):
    """``fn()`` launching ``kernel`` on ``meta``: compiled once per configuration and template
    dtypes (G and every size are run-time values). ``templates``: the tensors the host builds the
    TMA atoms from (a non-empty group's operands). ``fn.trace`` (CTAs, 2): per CTA its work items
    and groups entered in the last launch; ``fn.ctas``: the grid; ``fn.metadata``."""
    import cuda.bindings.driver as cuda
    import cutlass
    import torch
    from cutlass.cute.runtime import from_dlpack

    from ..modes import require_gpu

    require_gpu(arch)
    device = meta.shapes.device
    if device.type != "cuda":
        raise DeviceError(f"the operands are on {device}", "move them to the GPU with .cuda()")
    map_workspace = torch.empty((kernel.sms, kernel.MAPS, MAP_WORDS), dtype=torch.int64, device=device)
    trace = torch.zeros((kernel.sms, 2), dtype=torch.int32, device=device)
    # 2-D templates are row-major (K-major operands, N-major C); 1-D ones are scale-factor bytes
    args = [from_dlpack(t, assumed_align=16).mark_layout_dynamic(leading_dim=1) if t.dim() == 2
            else from_dlpack(t.view(torch.uint8), assumed_align=16).mark_layout_dynamic() for t in templates]
    args += [from_dlpack(t, assumed_align=align).mark_layout_dynamic(leading_dim=t.dim() - 1)
             for t, align in ((meta.shapes, 16), (meta.ptrs, 8), (meta.strides, 8), (map_workspace, MAP_BYTES),
                              (trace, 8))]
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    bound = cutlass.Int32(max(1, meta.work_bound))
    compiled = gemm_launch.compile_once(kernel, (*args, bound, stream), key=tuple(t.dtype for t in templates))

    def fn():
        compiled(*args, bound, stream)

    cs = kernel.cluster_mn[0] * kernel.cluster_mn[1]
    fn.trace, fn.ctas, fn.metadata = trace, min(max(1, meta.work_bound), kernel.sms // cs) * cs, meta
    fn.keep_alive = (templates, meta, map_workspace, keep)
    return fn


def _nothing_to_do(meta=None):
    fn = lambda: None  # noqa: E731  (every group empty)
    fn.trace, fn.ctas, fn.metadata = None, 0, meta
    return fn


def _sms(arch: str, sms):
    from ..modes import require_gpu

    return require_gpu(arch).sm_count if sms is None else sms
