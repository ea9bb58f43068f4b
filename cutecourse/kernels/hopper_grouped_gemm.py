"""A grouped GEMM on Hopper: G independent products ``C_g = A_g @ B_g.T`` in one launch.

The experts of a mixture-of-experts layer each multiply their own tokens by their own weights:
G GEMMs with different M (tokens routed to the expert), often the same N and K. A loop of G
launches pays a launch, a ramp-up and a tail per expert, and a small expert cannot fill 132 SMs.
One grouped launch lays all the groups' C tiles end to end and lets the persistent kernel of
``hopper_gemm_persistent`` walk through them. ``GroupedHopperGemm`` is that kernel with its
scheduler and the hooks around the tensor maps changed (``make_scheduler``, ``tile_loads``,
``enter_tile``, ``store_tile``; ``smem_fields`` holds the maps, ``prefetch_descriptors`` has none to
prefetch), and a host side (``__call__``) that takes the group metadata:

* **where the tiles come from** (``make_scheduler``: a ``group_walk.GroupScheduler``): A, B and C
  are only templates (dtype, layout) for the tensor maps; the groups come in small tensors
  (``group_walk.GroupArgs``): ``shapes`` (G, 4) int32 ``[M, N, K, 1]``, ``ptrs`` and
  ``strides`` (G, 3) int64 (address and row stride of A_g, B_g, C_g, in ``group_walk.OPERANDS``
  order), with ``trace`` (what each CTA did) and ``map_workspace`` (the CTAs' tensor maps in
  global memory). G and every size are run-time values: one compile serves every batch of groups. The
  producer warp walks the groups (``group_walk``: work item w belongs to the first group whose
  running total of tiles exceeds w, and a CTA's search resumes where its last one stopped) and
  hands each tile to the consumers through two smem slots;
* **which tensors a tile's loads use** (``tile_loads``): A's and B's tensor maps, one per CTA,
  rewritten when the CTA enters a new group (``tensor_maps.py``: patch in smem, publish to the
  CTA's slot of a global workspace, acquire before the next TMA). The producer warp owns them;
* **what the consumers do when a tile starts** (``enter_tile``): on a new group the store warp
  rewrites C's map the same way, after its TMA stores still reading the old one are done.

Edges are free: TMA zero-fills loads past a group's M or K and drops stores past its M or N, so
no group needs a multiple of the tile; the maps carry each group's true sizes.

The host side (checks, metadata, compiling, ``grouped_gemm`` and ``grouped_mm``) is in
``grouped.py``, shared with the FP8 and the Blackwell grouped GEMMs.
"""

from __future__ import annotations

import dataclasses

import cutlass
import cutlass.cute as cute

from . import group_walk, sm90, tensor_maps
from .group_walk import A, B, C, GroupArgs, GroupScheduler, operand_tensor
from .hopper_gemm_persistent import EPILOGUE_STORE_WARP, PRODUCER_WARP, PersistentHopperGemm
from .persistent_setup import CtaSetup

#: Order inside a group: bands of GROUP_M cluster-tile rows (``models/tile_order.py``). One band
#: taller than a group (4096 rows of tiles: M up to 524288) = m fastest, the order of the CPU
#: model and of the DSL's group scheduler (and GROUP_M x tile columns stays far below 2^31).
#: Bands of 16 (the dense persistent kernel's) measured no faster here: 0.97-1.03x of this order
#: on the three problems of ``benchmarks/grouped.py`` (grouped_bfloat16.json).
GROUP_M = 1 << 12


class GroupedHopperGemm(PersistentHopperGemm):
    """G products ``C_g = A_g @ B_g.T`` in one persistent, warp-specialized launch.

    The persistent kernel with the group walk, per-CTA tensor maps and the group metadata
    (module docstring). ``sms``: the CTAs the grid may use. ``cluster_mn`` (2, 1) or (1, 2): a work
    item is a cluster tile of one group, and the pair shares B (or A) by multicast; past the
    group's edge a CTA's loads are zero-filled and its stores dropped. ``scheduler``: a name of
    ``SCHEDULERS`` (``group_walk``'s), ``GroupScheduler`` or a subclass (e.g. another ``tile_of``).
    """

    #: Tensor maps per CTA, kept in smem and rewritten per group (the host sizes their workspace).
    MAPS = 3  # A, B, C
    GROUP_M, SCHEDULER, SCHEDULERS = GROUP_M, GroupScheduler, group_walk.SCHEDULERS

    # -- host side ---------------------------------------------------------------------------
    @cute.jit
    def __call__(self, a: cute.Tensor, b: cute.Tensor, c: cute.Tensor, shapes: cute.Tensor,
                 ptrs: cute.Tensor, strides: cute.Tensor, map_workspace: cute.Tensor, trace: cute.Tensor,
                 work_bound: cutlass.Int32, stream, *epilogue_args):
        """``a``, ``b``, ``c``: templates (dtype, row-major) for the tensor maps, e.g. group 0's
        operands; ``map_workspace`` (CTAs, 3, 16) int64: the CTAs' tensor maps in global memory;
        ``trace`` (CTAs, 2) int32: each CTA writes its item and tensor-map-update counts;
        ``work_bound``: at least the total number of work items (it sizes the grid)."""
        cm, cn = self.cluster_mn
        self.launch(a, b, c, self.Scheduler.Args(shapes=shapes, ptrs=ptrs, strides=strides, trace=trace,
                                                 map_workspace=map_workspace),
                    cutlass.min(work_bound, self.sms // (cm * cn)), stream, epilogue_args)

    # -- device side: the hooks ----------------------------------------------------------------
    def smem_fields(self) -> dict:
        """The CTA's tensor maps, patched in smem before they are published (``tensor_maps.py``)."""
        words = cute.struct.MemRange[cutlass.Int64, self.MAPS * tensor_maps.MAP_WORDS]
        return {"maps": cute.struct.Align[words, tensor_maps.MAP_BYTES]}

    def prefetch_descriptors(self, atoms):
        """Nothing to prefetch: the maps the loads and stores use are the CTA's own, made per group."""

    def make_scheduler(self, scheduler_args: GroupArgs, setup: CtaSetup):
        """The group walk (``group_walk.GroupScheduler``), with this CTA's tensor maps: each map's
        owner copies the host-made template into smem (it is patched before first use)."""
        cm, cn = self.cluster_mn
        cta = tensor_maps.workspace_row(self.cluster_mn)
        maps = tensor_maps.tensor_maps(scheduler_args.map_workspace, cta, setup.storage.maps.data_ptr(), self.MAPS)
        tma_a, tma_b, tma_c = setup.atoms
        tensor_maps.init_maps(maps, (tma_a, tma_b), (A, B), PRODUCER_WARP)
        tensor_maps.init_maps(maps, (tma_c,), (C,), EPILOGUE_STORE_WARP)
        return self.Scheduler(
            shapes=scheduler_args.shapes, ptrs=scheduler_args.ptrs, strides=scheduler_args.strides,
            count=scheduler_args.shapes.shape[0],
            cluster_tile=(self.tile_mn[0] * cm, self.tile_mn[1] * cn, self.tile_mnk[2]),
            cluster_mn=self.cluster_mn, in_cluster=cute.arch.block_in_cluster_idx(),
            first=cute.arch.block_idx()[2], stride=cute.arch.grid_dim()[2], group_m=self.group_m,
            queue=setup.queue, slots=setup.slots, trace=scheduler_args.trace, cta=cta, maps=maps)

    @cute.jit
    def tile_loads(self, groups, loads, tile):
        """A tile's loads go through this CTA's maps of A and B; on a new group the producer warp
        first points them at the group's A and B (patch, publish: release) and acquires them."""
        if tile.new_group:
            a_g = operand_tensor(groups, tile.group, A, self.a_dtype)
            b_g = operand_tensor(groups, tile.group, B, self.a_dtype)
            tensor_maps.update_maps(groups.maps, (a_g, b_g), (loads.tma_a, loads.tma_b), (A, B),
                                    PRODUCER_WARP)
            tensor_maps.acquire_maps(groups.maps, (A, B))
        tile_loads = super(GroupedHopperGemm, self).tile_loads(groups, loads, tile)  # (named: DEVELOPING.md)
        return dataclasses.replace(tile_loads, maps=(tensor_maps.map_pointer(groups.maps, A),
                                                     tensor_maps.map_pointer(groups.maps, B)))

    @cute.jit
    def enter_tile(self, groups, epilogue, tile, warp_idx):
        """C's map follows the group: the store warp patches and publishes it (after its TMA stores
        still reading the old map are done: ``update_maps`` waits for them), then acquires it."""
        if tile.new_group:
            c_g = operand_tensor(groups, tile.group, C, self.c_dtype)
            tensor_maps.update_maps(groups.maps, (c_g,), (epilogue.tma_c,), (C,), EPILOGUE_STORE_WARP)
            if warp_idx == EPILOGUE_STORE_WARP:
                tensor_maps.acquire_maps(groups.maps, (C,))

    def store_tile(self, groups, epilogue, mma, gC, tile, ctid, warp_idx):
        """The persistent kernel's epilogue, storing through this CTA's map of the group's C."""
        sm90.store_tile(epilogue, gC[(None, None, tile.tile_m, tile.tile_n)], warp_idx,
                        tensor_maps.map_pointer(groups.maps, C), origin=self.tile_origin(tile))
