"""The configuration of the Blackwell grouped block-scaled GEMM, on the CPU: what it takes and
how its shared memory and tensor memory are spent.

``kernels/blackwell_grouped_gemm.py`` compiles one configuration (format, tile, cluster, output
dtype); :func:`plan` says, before anything is compiled, how many A/B/SF stages, accumulator
stages and C buffers it gets, so that a notebook can predict the kernel's smem, its TMEM columns
and its ``tcgen05.cp`` count, and a test can hold the compiled kernel to them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import DTypeError, ShapeError
from . import block_scaling

FORMATS = ("nvfp4", "mxfp8")
TILES = ((128, 128), (128, 256))
CLUSTERS = ((1, 1), (2, 1), (1, 2), (2, 2))
OUT_DTYPES = ("float16", "bfloat16")
#: MMAs per k-tile, and each MMA's K: fixed by the instruction (32 bytes of A per row).
K_BLOCKS = 4
MMA_K = {"e2m1": 64, "e4m3": 32}
#: Epilogue sub-tile: 128 rows (4 warps x 32 TMEM lanes) x 32 columns (one tcgen05.ld.32x32b.x32).
EPI_TILE = (128, 32)
SMEM_CAPACITY = 232448  # 227 KiB per CTA on sm_100
HEADER_BYTES = 1024  # tensor maps (640 B) + mbarriers + TMEM address, before the 1 KiB-aligned buffers
#: Tensor memory: 512 columns x 128 lanes x 32 bits per SM (256 KiB).
TMEM_COLUMNS = 512
#: TMEM columns one 512-byte scale-factor atom takes once ``tcgen05.cp`` has copied it (below).
SF_COLUMNS_PER_ATOM = 4
B200_SMS = 148


@dataclass(frozen=True)
class Plan:
    """The smem and TMEM budget of one configuration (bytes, columns)."""

    fmt: str
    tile_mnk: tuple
    ab_stages: int
    acc_stages: int
    c_stages: int
    stage_bytes: int  # one k-tile of A, B, SFA, SFB
    smem_bytes: int
    tmem_columns: int  # accumulators + one k-tile of scale factors

    @property
    def sf_atoms(self) -> tuple[int, int]:
        """512-byte SF atoms per k-tile of SFA and SFB = ``tcgen05.cp`` per k-tile of each."""
        f = block_scaling.get_format(self.fmt)
        k_atoms = self.tile_mnk[2] // (4 * f.block)
        return k_atoms * -(-self.tile_mnk[0] // 128), k_atoms * -(-self.tile_mnk[1] // 128)

    @property
    def tmem_regions(self) -> list[TmemRegion]:
        """Where the kernel keeps what in TMEM, column by column (all 128 lanes each): the
        accumulator stages first (a 128 x N fp32 tile = N columns: lane = row), then one k-tile's
        SFA, then its SFB (``sm100.sf_tmem_tensors``). ``tcgen05.cp.32x128b.warpx4`` writes an
        atom's 32 lanes x 16 bytes to all four lane quarters: 4 columns per 512-byte atom."""
        n = self.tile_mnk[1]
        out = [TmemRegion(f"accumulator stage {s}", s * n, n) for s in range(self.acc_stages)]
        first = self.acc_stages * n
        for name, atoms in zip(("SFA", "SFB"), self.sf_atoms):
            out.append(TmemRegion(name, first, SF_COLUMNS_PER_ATOM * atoms))
            first += SF_COLUMNS_PER_ATOM * atoms
        return out


@dataclass(frozen=True)
class TmemRegion:
    """Columns ``first .. first + columns - 1`` of TMEM (every lane) hold ``name``."""

    name: str
    first: int
    columns: int


def plan(fmt: str = "nvfp4", tile_mn=(128, 128), out_dtype: str = "float16") -> Plan:
    """Stages that fit: C buffers first (4, or 2 when that buys one more A/B stage), then as many
    A/B/SF stages as the rest of 227 KiB holds; 2 accumulator stages when TMEM has the columns."""
    f = check_format(fmt)
    tile_mn = check_tile(tile_mn)
    if out_dtype not in OUT_DTYPES:
        raise DTypeError(f"output dtype {out_dtype!r} is not supported", f"use one of {OUT_DTYPES}")
    tile_k = MMA_K[f.data] * K_BLOCKS
    data_bits = 4 if f.data == "e2m1" else 8
    stage = sum(tile_mn) * tile_k * data_bits // 8 + sum(tile_mn) * tile_k // f.block
    c_buffer = EPI_TILE[0] * EPI_TILE[1] * 2
    free = SMEM_CAPACITY - HEADER_BYTES
    c_stages = 4 if (free - 2 * c_buffer) // stage == (free - 4 * c_buffer) // stage else 2
    ab_stages = (free - c_stages * c_buffer) // stage
    sf_atoms = (tile_k // (4 * f.block)) * (tile_mn[0] // 128 + tile_mn[1] // 128)  # SFA + SFB
    sf_columns = SF_COLUMNS_PER_ATOM * sf_atoms
    acc_stages = 2 if 2 * tile_mn[1] + sf_columns <= TMEM_COLUMNS else 1
    assert (tile_mn[1] // EPI_TILE[1]) % c_stages == 0  # sub-tile e always uses buffer e % c_stages
    return Plan(f.name, (*tile_mn, tile_k), ab_stages, acc_stages, c_stages, stage,
                HEADER_BYTES + ab_stages * stage + c_stages * c_buffer,
                acc_stages * tile_mn[1] + sf_columns)


def check_format(fmt) -> block_scaling.BlockFormat:
    """The block format, if the kernel takes it."""
    f = block_scaling.get_format(fmt)
    if f.name not in FORMATS:
        raise DTypeError(f"format {f.name!r} is not supported by the Blackwell grouped GEMM",
                         f"use one of {FORMATS}")
    return f


def check_tile(tile_mn) -> tuple[int, int]:
    if tuple(tile_mn) not in TILES:
        raise ShapeError(f"tile {tuple(tile_mn)} is not supported", f"use one of {list(TILES)}")
    return tuple(tile_mn)


def check_cluster(cluster_mn) -> tuple[int, int]:
    if tuple(cluster_mn) not in CLUSTERS:
        raise ShapeError(f"cluster {tuple(cluster_mn)} is not supported",
                         f"use one of {list(CLUSTERS)} ((1, 1) = no multicast)")
    return tuple(cluster_mn)
