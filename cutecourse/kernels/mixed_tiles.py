"""The mixed-input GEMM's tiles and shared memory: the k-tile, the token tiles it takes, which
group sizes fit a k-tile, and what one stage of its smem ring holds and takes.

The kernel (``hopper_mixed_gemm``) sizes its ring from these, and the planner
(``mixed_input.plan``) counts how many CTAs share an SM with them; both read this one module
so that they agree.
"""

from __future__ import annotations

from ..quant.reorder import BLOCK_N, SLICE_K

#: K per k-tile: 256 int4 = 128 bytes a row, one 128-byte-swizzled smem row of packed words.
TILE_K = 256
WORDS_K = TILE_K // 8
#: The batch tiles wgmma's N can take here (tokens per CTA).
TILE_MS = (8, 16, 32, 64, 128, 256)
SMEM_BYTES = 227 * 1024  # the most one CTA may have
SM_SMEM = 228 * 1024  # an SM's, shared by its CTAs (1 KB of it reserved per CTA)
BARRIER_BYTES = 1024


def groups_per_tile(group_size: int) -> int:
    """Scale rows one k-tile needs: 256 / group_size, or 1 when a group spans whole k-tiles."""
    return max(1, TILE_K // group_size)


def check_group(group_size: int, k: int | None = None):
    """A k-tile must hold whole groups, or lie inside one: group_size divides 256 or is a
    multiple of it (or is all of K)."""
    from ..errors import ShapeError

    if group_size % SLICE_K or not (TILE_K % group_size == 0 or group_size % TILE_K == 0
                                    or group_size == k):
        raise ShapeError(f"group_size {group_size} does not fit the kernel's k-tile of {TILE_K}: a k-tile "
                         "must hold whole groups or lie inside one group",
                         "use a group size that divides 256 (32, 64, 128, 256) or a multiple of 256, "
                         "or one group per row")


def stage_bytes(tile_m: int, group_size: int, zero_point: bool, warpgroups: int = 1) -> int:
    """Bytes TMA writes into one stage (the full barrier's transaction count)."""
    g, rows = groups_per_tile(group_size), BLOCK_N * warpgroups
    return rows * WORDS_K * 4 + tile_m * TILE_K * 2 + g * rows * 2 + (g * rows if zero_point else 0)


def stage_smem(tile_m: int, group_size: int, zero_point: bool, warpgroups: int = 1) -> int:
    """Shared memory one stage takes: its bytes, the zeros' stage padded to 128 bytes."""
    g, rows = groups_per_tile(group_size), BLOCK_N * warpgroups
    pad = max(0, 128 - g * rows) if zero_point else 0
    return stage_bytes(tile_m, group_size, zero_point, warpgroups) + pad
