"""Shared memory, stage count and waves of the course's Hopper GEMMs (pure Python, no GPU).

Two questions decide a GEMM configuration before any code runs:

1. **How many pipeline stages fit?** Each stage holds one k-tile of A (``tile_m x tile_k``) and
   one of B (``tile_n x tile_k``): ``(tile_m*tile_k + tile_n*tile_k) * sizeof(dtype)`` bytes. An
   sm_90 CTA may use 227 KiB (232448 B) of shared memory; the mbarriers take a little of it, and
   so do the C staging buffers of the epilogue when they cannot live inside the ring.
   ``stages = (budget - barriers - C buffers) // bytes_per_stage`` (the CUTLASS 3.x talk notes'
   formula). More stages hide more TMA latency (:mod:`cutecourse.models.timeline`); a ring of
   one stage cannot overlap anything.
2. **How many waves?** The one-CTA-per-tile grid has ``ceil(M/tile_m) * ceil(N/tile_n)`` CTAs, one
   per SM at a time (the ring fills the SM's shared memory), so ``ctas / 132`` waves on an H100
   SXM. A partial last wave leaves SMs idle: 133 CTAs take as long as 264.

The kernels size their shared memory with :func:`plan_stages`, so this calculator and the kernels
cannot disagree. :func:`plan` adds the problem-level view (k-tiles, CTAs, waves, accumulator
registers) and :func:`table` prints it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import AlignmentError, DTypeError, ShapeError

#: The CTA tiles (M, N) the course's kernels support. K per tile is fixed by the 128-byte swizzle:
#: 128 B of a 16-bit type is 64 elements (of an 8-bit type, 128: :func:`tile_k`).
TILES = ((128, 128), (128, 256))
SWIZZLE_BYTES = 128
TILE_K = 64
#: Input dtypes (names as in torch and cutlass) and output dtypes, with their sizes in bytes.
IN_DTYPES = ("float16", "bfloat16")
#: The block-scaled grouped GEMM's input (``kernels/hopper_grouped_gemm_fp8.py``); the dense kernels refuse it.
FP8_DTYPES = ("float8_e4m3fn",)
#: ... and its tiles: 128 columns = one block of B's 128x128 scales (the default); 192 and 256
#: columns span two blocks and need one accumulator part per warpgroup (``parts=1``).
FP8_TILES = ((128, 128), (128, 192), (128, 256))
OUT_DTYPES = ("float16", "bfloat16", "float32")
BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float8_e4m3fn": 1}


def tile_k(in_dtype: str) -> int:
    """Elements of K per k-tile: one 128-byte swizzled row (64 fp16, 128 fp8)."""
    return SWIZZLE_BYTES // BYTES[in_dtype]
#: Shared memory an sm_90 CTA may opt in to (cutlass.utils.get_smem_capacity_in_bytes("sm_90")).
SMEM_CAPACITY = 232448
SM90_SMEM_BYTES = SMEM_CAPACITY
#: The mbarriers (2 x 8 bytes per stage) live in front of the A ring, which is 1024-byte aligned
#: (the 128B swizzle pattern repeats every 1024 bytes): reserving 1 KiB covers both.
BARRIER_BYTES = 1024
#: Epilogue: C goes registers -> smem -> TMA store in sub-tiles of EPI_TILE, EPI_STAGES buffers deep.
EPI_TILE = (128, 32)
EPI_STAGES = 4
#: SMs on an H100 SXM5.
H100_SMS = 132
#: Threads of the one-CTA-per-tile kernel: two warpgroups, each owning 64 rows of the tile.
THREADS = 256


def check_dtype_names(in_dtype: str, out_dtype: str, in_dtypes=IN_DTYPES) -> None:
    if in_dtype not in in_dtypes:
        raise DTypeError(f"input dtype {in_dtype} is not supported by the Hopper GEMM",
                         f"use one of {in_dtypes} (convert with .half() or .bfloat16())")
    if out_dtype not in OUT_DTYPES:
        raise DTypeError(f"output dtype {out_dtype} is not supported", f"use one of {OUT_DTYPES}")


def check_tile(tile_mn, tiles=TILES) -> tuple[int, int]:
    tile_mn = tuple(tile_mn)
    if tile_mn not in tiles:
        raise ShapeError(f"tile {tile_mn} is not one of this kernel's tiles {list(tiles)}",
                         " or ".join(f"tile={t}" for t in tiles))
    return tile_mn


def check_epi_tile(tile_mn, epi_tile, whole_rounds: bool = False,
                   epi_stages: int = EPI_STAGES) -> tuple[int, int]:
    """The epilogue stores C in ``epi_tile`` sub-tiles: they must tile the CTA tile. With
    ``whole_rounds`` (persistent kernels, whose C buffers continue from one tile to the next) a
    tile must also use every one of the ``epi_stages`` buffers the same number of times."""
    em, en = (int(v) for v in epi_tile)
    m, n = tile_mn
    if epi_stages < 2:
        raise ShapeError(f"epi_stages={epi_stages}: the C stores need at least 2 buffers",
                         "use epi_stages=2 (fewer buffers, more ring stages) or the default 4")
    if em < 1 or en < 1 or m % em or n % en:
        raise ShapeError(f"epilogue tile {em}x{en} does not tile the {m}x{n} CTA tile",
                         "use e.g. (128, 32) or (128, 64)")
    if whole_rounds and (m // em) * (n // en) % epi_stages:
        raise ShapeError(f"a {m}x{n} tile is {(m // em) * (n // en)} sub-tiles of {em}x{en}, not a "
                         f"multiple of the {epi_stages} C buffers the stores cycle through",
                         "use a smaller epilogue tile")
    return em, en


@dataclass(frozen=True)
class StagePlan:
    """How the shared memory of one CTA is spent."""

    tile_mn: tuple[int, int]
    tile_k: int
    in_dtype: str
    out_dtype: str
    bytes_per_stage: int  # (Mt*Kt + Nt*Kt) * sizeof(in)
    stages: int
    barrier_bytes: int
    epi_bytes: int  # the C staging buffers
    capacity: int
    c_in_ring: bool = True  # the C buffers reuse the A ring (after the mainloop) or have their own

    @property
    def ring_bytes(self) -> int:
        return self.bytes_per_stage * self.stages

    @property
    def a_ring_bytes(self) -> int:
        return self.tile_mn[0] * self.tile_k * BYTES[self.in_dtype] * self.stages

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory the kernel asks for."""
        return self.barrier_bytes + self.ring_bytes + (0 if self.c_in_ring else self.epi_bytes)

    def __str__(self) -> str:
        text = (f"tile {self.tile_mn[0]}x{self.tile_mn[1]}x{self.tile_k} {self.in_dtype}: "
                f"{self.bytes_per_stage // 1024} KiB/stage x {self.stages} stages = "
                f"{self.ring_bytes // 1024} KiB + {self.barrier_bytes} B barriers")
        if not self.c_in_ring:
            text += f" + {self.epi_bytes // 1024} KiB C staging"
        return text + f" (of {self.capacity // 1024} KiB)"


def plan_stages(tile_mn=(128, 256), in_dtype="float16", out_dtype="float16",
                capacity: int = SMEM_CAPACITY, stages: int | None = None, c_in_ring: bool = True,
                epi_tile=EPI_TILE, epi_stages: int = EPI_STAGES, tiles=TILES,
                in_dtypes=IN_DTYPES) -> StagePlan:
    """The largest stage count whose ring fits the shared-memory budget (or check ``stages``).

    ``c_in_ring=True`` (one CTA per tile): the epilogue runs after the last k-tile is consumed, so
    its C buffers reuse the A ring and cost nothing. ``False`` (persistent kernels): the ring is
    already refilling for the next tile while the epilogue runs, so C gets its own buffers, taken
    off the budget first. 128x256 fp16: 4 stages of 48 KiB either way; fp32 out, own buffers: 3.
    """
    tile_mn = check_tile(tile_mn, tiles)
    check_dtype_names(in_dtype, out_dtype, in_dtypes)
    m, n = tile_mn
    tk = tile_k(in_dtype)
    per_stage = (m * tk + n * tk) * BYTES[in_dtype]
    epi = epi_tile[0] * epi_tile[1] * BYTES[out_dtype] * epi_stages
    fit = (capacity - BARRIER_BYTES - (0 if c_in_ring else epi)) // per_stage
    stages = fit if stages is None else stages
    plan = StagePlan(tile_mn, tk, in_dtype, out_dtype, per_stage, stages, BARRIER_BYTES, epi,
                     capacity, c_in_ring)
    if stages < 2 or stages > fit:
        raise ShapeError(
            f"{stages} stages of {per_stage} B for tile {m}x{n}"
            f"{'' if c_in_ring else f' plus {epi} B of C staging'} need "
            f"{stages * per_stage + plan.smem_bytes - plan.ring_bytes} B of shared memory; the "
            f"budget is {capacity} B ({fit} stages fit)",
            "use fewer stages or a smaller tile (a ring needs at least 2 stages to overlap)")
    if c_in_ring and epi > plan.a_ring_bytes:
        raise ShapeError(f"the epilogue needs {epi} B but the A ring it reuses has {plan.a_ring_bytes} B",
                         "use more stages or a 16-bit output")
    return plan


def plan_persistent(tile_mn=(128, 256), in_dtype="float16", out_dtype="float16",
                    capacity: int = SMEM_CAPACITY, stages: int | None = None, epi_tile=EPI_TILE,
                    c_buffer_sets: int = 1, tiles=TILES, epi_stages: int = EPI_STAGES, **kwargs):
    """The persistent kernels' plan, C staged in its own buffers (the ring runs on across tiles):
    128x256 fp16 out: 4 stages; fp32 out: 3. ``c_buffer_sets``: sets of ``epi_stages`` C buffers
    (one per warpgroup that stores on its own: ping-pong has two)."""
    return plan_stages(tile_mn, in_dtype, out_dtype, capacity, stages, c_in_ring=False,
                       epi_tile=epi_tile, epi_stages=epi_stages * c_buffer_sets, tiles=tiles, **kwargs)


def fp8_epi_stages(tile_mn) -> int:
    """C buffers of the FP8 kernel's epilogue: EPI_STAGES, or 3 where a tile's sub-tiles do not
    come in fours (128x192: six of 128x32; a tile must use every buffer equally often)."""
    subtiles = (tile_mn[0] // EPI_TILE[0]) * (tile_mn[1] // EPI_TILE[1])
    return EPI_STAGES if subtiles % EPI_STAGES == 0 else 3


def plan_fp8(tile_mn=(128, 128), out_dtype: str = "bfloat16", stages: int | None = None,
             epi_stages: int | None = None):
    """The FP8 block-scaled grouped kernel's plan, 128 k per stage (one scale block), bf16 C:
    128x128: 32 KiB per stage, 6 stages; 128x192: 40 KiB, 3 C buffers, 5 stages; 128x256:
    48 KiB, 4 stages."""
    tile_mn = check_tile(tile_mn, FP8_TILES)
    epi_stages = fp8_epi_stages(tile_mn) if epi_stages is None else epi_stages
    return plan_persistent(tile_mn, "float8_e4m3fn", out_dtype, stages=stages, tiles=FP8_TILES,
                           in_dtypes=FP8_DTYPES, epi_stages=epi_stages)


def waves(m: int, n: int, tile_mn=(128, 256), sms: int = H100_SMS) -> float:
    """How many waves of CTAs the grid needs on ``sms`` SMs (one CTA per SM: the ring fills smem)."""
    tiles = math.ceil(m / tile_mn[0]) * math.ceil(n / tile_mn[1])
    return tiles / sms


@dataclass(frozen=True)
class GemmPlan:
    """One problem (M, N, K) on one tile configuration."""

    m: int
    n: int
    k: int
    tile_mn: tuple[int, int]
    tile_k: int
    in_dtype: str
    out_dtype: str
    a_bytes_per_stage: int
    b_bytes_per_stage: int
    stages: int
    smem_bytes: int  # what the kernel asks for: barriers + the ring
    capacity: int
    sms: int
    threads: int

    @property
    def bytes_per_stage(self) -> int:
        return self.a_bytes_per_stage + self.b_bytes_per_stage

    @property
    def k_tiles(self) -> int:
        return math.ceil(self.k / self.tile_k)

    @property
    def ctas(self) -> int:
        return math.ceil(self.m / self.tile_mn[0]) * math.ceil(self.n / self.tile_mn[1])

    @property
    def waves(self) -> float:
        return self.ctas / self.sms

    @property
    def wave_efficiency(self) -> float:
        """Busy SM-slots / SM-slots paid for: 1.0 when the last wave is full."""
        return self.ctas / (math.ceil(self.waves) * self.sms)

    @property
    def last_wave_fill(self) -> float:
        """The SMs the last wave keeps busy, as a fraction of all: 2048 CTAs on 132 SMs leave
        68 for the 16th wave (52%); 1.0 when the CTAs are a whole number of waves."""
        return (self.ctas - (math.ceil(self.waves) - 1) * self.sms) / self.sms

    @property
    def acc_registers_per_thread(self) -> int:
        """fp32 accumulators each thread holds: tile_m * tile_n / threads (of 255 registers)."""
        return self.tile_mn[0] * self.tile_mn[1] // self.threads

    def row(self) -> dict:
        return {
            "tile": f"{self.tile_mn[0]}x{self.tile_mn[1]}x{self.tile_k}",
            "KiB/stage": self.bytes_per_stage / 1024,
            "stages": self.stages,
            "smem KiB": self.smem_bytes / 1024,
            "k-tiles": self.k_tiles,
            "CTAs": self.ctas,
            "waves": self.waves,
            "last wave full": self.last_wave_fill,
            "SM-slots busy": self.wave_efficiency,
            "acc regs/thread": self.acc_registers_per_thread,
        }


def plan(m: int, n: int, k: int, tile_mn: tuple[int, int] = (128, 256), in_dtype: str = "float16",
         out_dtype: str = "float16", stages: int | None = None, sms: int = H100_SMS) -> GemmPlan:
    """The plan for ``C[M,N] = A[M,K] @ B[N,K].T`` with the kernel's stage formula.

    ``stages=None`` takes as many as fit; a number is checked against the budget (a
    :class:`~cutecourse.errors.ShapeError` if it does not fit).
    """
    for name, v in (("M", m), ("N", n), ("K", k), ("sms", sms)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ShapeError(f"{name} must be a positive integer, not {v!r}", "e.g. M=N=K=8192")
    sp = plan_stages(tuple(tile_mn), in_dtype, out_dtype, stages=stages)
    elem = BYTES[in_dtype]
    if (k * elem) % 16:
        raise AlignmentError(
            f"K={k} rows of {in_dtype} are {k * elem} bytes, not a multiple of 16: TMA needs "
            f"16-byte aligned row strides",
            f"pad K to a multiple of {16 // elem}")
    return GemmPlan(m, n, k, sp.tile_mn, sp.tile_k, in_dtype, out_dtype,
                    sp.tile_mn[0] * sp.tile_k * elem, sp.tile_mn[1] * sp.tile_k * elem,
                    sp.stages, sp.smem_bytes, sp.capacity, sms, THREADS)


def plans(m: int, n: int, k: int, in_dtype: str = "float16", out_dtype: str = "float16",
          sms: int = H100_SMS) -> list[GemmPlan]:
    """One plan per tile the kernel supports."""
    return [plan(m, n, k, t, in_dtype, out_dtype, sms=sms) for t in TILES]


def table(m: int, n: int, k: int, in_dtype: str = "float16", out_dtype: str = "float16",
          sms: int = H100_SMS) -> str:
    """The plans of :func:`plans` as a fixed-width table."""
    ps = plans(m, n, k, in_dtype, out_dtype, sms)
    head = (f"{'tile':<12}{'KiB/stage':>10}{'stages':>7}{'smem KiB':>9}{'k-tiles':>8}{'CTAs':>7}"
            f"{'waves':>7}{'last wave':>10}{'busy':>6}{'acc regs':>9}")
    lines = [f"M={m} N={n} K={k} {in_dtype} -> {out_dtype}, {sms} SMs, "
             f"{ps[0].capacity // 1024} KiB smem/CTA", head]
    for r in (p.row() for p in ps):
        lines.append(f"{r['tile']:<12}{r['KiB/stage']:>10.0f}{r['stages']:>7}{r['smem KiB']:>9.1f}"
                     f"{r['k-tiles']:>8}{r['CTAs']:>7}{r['waves']:>7.2f}{r['last wave full']:>10.0%}"
                     f"{r['SM-slots busy']:>6.0%}"
                     f"{r['acc regs/thread']:>9}")
    return "\n".join(lines)


def stages_that_fit(bytes_per_stage: int, capacity: int = SM90_SMEM_BYTES,
                    reserved: int | None = None) -> int:
    """``(capacity - reserved) // bytes_per_stage``: the formula, for a learner's own numbers.

    ``reserved`` defaults to the kernel's barrier reservation.
    """
    if not isinstance(bytes_per_stage, int) or bytes_per_stage < 1:
        raise ShapeError(f"bytes_per_stage must be a positive integer, not {bytes_per_stage!r}",
                         "(tile_m*tile_k + tile_n*tile_k) * bytes per element")
    reserved = BARRIER_BYTES if reserved is None else reserved
    return max(0, (capacity - reserved) // bytes_per_stage)
