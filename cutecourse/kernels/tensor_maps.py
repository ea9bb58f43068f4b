"""Tensor maps rewritten on the device: how a grouped GEMM points its TMA copies at each group.

A TMA copy reads a 128-byte *tensor map*: base address, sizes, strides, box and swizzle of one
operand. The host builds one per operand from a *template* tensor (any group's operand: the
dtype, the majorness and the box are what matter; ``grouped.py`` makes them). A grouped kernel
cannot use those maps as they are, since every group has its own address and sizes, so each CTA
keeps its own copy of each map and rewrites it when it enters a new group:

1. :func:`init_maps`: at the start, the warp that owns a map copies the template from the TMA
   atom into shared memory (the same warp rewrites and uses it later: program order is all the
   ordering it needs, no barrier);
2. :func:`update_maps`: on a new group, ``tensormap.replace`` patches address, sizes and strides
   in smem, and ``tensormap.cp_fenceproxy ... release`` copies the 128 bytes to this CTA's slot
   of a global *workspace* (TMA reads maps from global memory);
3. :func:`acquire_maps`: ``fence.proxy.tensormap::generic.acquire`` before the next copy that
   uses the map, so the TMA unit (another memory proxy) does not read a stale copy.

The warp that owns a map is the one that issues its copies: on Hopper the producer warp owns A's
and B's, the epilogue's store warp C's; on Blackwell the TMA warp owns A, B, SFA, SFB and the
first epilogue warp C. Shared by ``hopper_grouped_gemm`` and ``blackwell_grouped_gemm``; the DSL's
``cutlass.tensor_utils.TensorMapManager`` (SMEM mode) does each step.
"""

from __future__ import annotations

from dataclasses import dataclass

import cutlass.cute as cute
from cutlass.tensor_utils import TensorMapManager, TensorMapUpdateMode

#: A tensor map is 128 bytes: 16 int64 words of the workspace (CTAs, maps, 16).
MAP_BYTES = 128
MAP_WORDS = MAP_BYTES // 8


@dataclass
class TensorMaps:
    """A CTA's tensor maps: map i lives at ``smem[i]`` while it is patched and at ``gmem[i]``
    (its slot of the workspace, ``workspace[cta, i, :]``) when TMA reads it."""

    manager: object
    smem: tuple
    gmem: tuple


def workspace_row(cluster_mn):
    """This CTA's row of the workspace: its cluster's index times the cluster size plus its rank
    in the cluster (traced inside a kernel whose grid is (CM, CN, clusters))."""
    return cute.arch.block_idx()[2] * cluster_mn[0] * cluster_mn[1] + cute.arch.block_idx_in_cluster()


def tensor_maps(workspace, cta, smem_base, count: int) -> TensorMaps:
    """Maps 0 .. count-1 of CTA ``cta``: workspace row ``cta``, and ``count`` maps in smem from
    ``smem_base`` (an int64 pointer, 128-byte aligned)."""
    manager = TensorMapManager(TensorMapUpdateMode.SMEM, MAP_BYTES)
    gmem = tuple(manager.get_tensormap_ptr(workspace[(cta, i, None)].iterator) for i in range(count))
    smem = tuple(smem_base + MAP_WORDS * i for i in range(count))
    return TensorMaps(manager, smem, gmem)


def map_pointer(maps: TensorMaps, i: int):
    """What a TMA copy takes as ``tma_desc_ptr``: map i's workspace slot, generic address."""
    return maps.manager.get_tensormap_ptr(maps.gmem[i], cute.AddressSpace.generic)


def init_maps(maps: TensorMaps, atoms, which, warp: int):
    """``warp`` copies the host-made descriptors of ``atoms`` into the smem maps ``which``.
    They are templates: every map is patched (:func:`update_maps`) before its first use."""
    for atom, i in zip(atoms, which):
        maps.manager.init_tensormap_from_atom(atom, maps.smem[i], warp)


def update_maps(maps: TensorMaps, tensors, atoms, which, warp: int):
    """Point maps ``which`` at ``tensors`` (this group's operands): ``tensormap.replace`` of the
    address, the 5 dims and 4 strides in smem, then ``tensormap.cp_fenceproxy ... release``
    copies each map to its workspace slot. Only ``warp`` works (it waits first for its own
    earlier bulk copies to stop reading smem)."""
    maps.manager.update_tensormap(tuple(tensors), tuple(atoms), tuple(maps.gmem[i] for i in which),
                                  warp, tuple(maps.smem[i] for i in which))


def acquire_maps(maps: TensorMaps, which):
    """``fence.proxy.tensormap::generic.acquire`` per map: the TMA unit (another proxy) must not
    use a stale copy of the 128 bytes just published. Run by the warp that issues the copies."""
    for i in which:
        maps.manager.fence_tensormap_update(maps.gmem[i])
