"""Stage count, shared memory and waves for the course's Hopper GEMM (seed 002's arithmetic).

Two questions decide a GEMM configuration before any code runs:

1. **How many pipeline stages fit?** Each stage holds one k-tile of A (``tile_m x tile_k``) and
   one of B (``tile_n x tile_k``): ``(tile_m*tile_k + tile_n*tile_k) * sizeof(dtype)`` bytes. An
   sm_90 CTA may use 227 KiB (232448 B) of shared memory; the mbarriers take a little of it.
   ``stages = (budget - barriers) // bytes_per_stage``. More stages hide more TMA latency (see
   :mod:`cutecourse.models.timeline`); a ring of 1 cannot overlap anything.
2. **How many waves?** The grid has ``ceil(M/tile_m) * ceil(N/tile_n)`` CTAs, one per SM at a
   time (the ring fills the SM's shared memory), so ``ctas / 132`` waves on an H100 SXM. A
   partial last wave leaves SMs idle: 133 CTAs take as long as 264.

The stage formula is the kernel's own (:func:`cutecourse.kernels.hopper_gemm.plan_stages`),
so this calculator and the kernel cannot disagree; this module adds the problem-level view
(k-tiles, CTAs, waves, how full the last wave is, accumulator registers) and a table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import AlignmentError, ShapeError

#: Shared memory an sm_90 CTA may opt in to: 227 KiB.
SM90_SMEM_BYTES = 227 * 1024
#: SMs on an H100 SXM5.
H100_SMS = 132


def _kernel():
    # The kernel module imports cutlass; import it only when a plan is asked for.
    from ..kernels import hopper_gemm

    return hopper_gemm


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
    def acc_registers_per_thread(self) -> int:
        """fp32 accumulators each thread holds: tile_m * tile_n / threads (of 255 registers)."""
        return self.tile_mn[0] * self.tile_mn[1] // self.threads

    @property
    def smem_left(self) -> int:
        return self.capacity - self.smem_bytes

    def row(self) -> dict:
        return {
            "tile": f"{self.tile_mn[0]}x{self.tile_mn[1]}x{self.tile_k}",
            "KiB/stage": self.bytes_per_stage / 1024,
            "stages": self.stages,
            "smem KiB": self.smem_bytes / 1024,
            "k-tiles": self.k_tiles,
            "CTAs": self.ctas,
            "waves": self.waves,
            "last-wave use": self.wave_efficiency,
            "acc regs/thread": self.acc_registers_per_thread,
        }


def plan(m: int, n: int, k: int, tile_mn: tuple[int, int] = (128, 256), in_dtype: str = "float16",
         out_dtype: str = "float16", stages: int | None = None, sms: int = H100_SMS) -> GemmPlan:
    """The plan for ``C[M,N] = A[M,K] @ B[N,K].T`` with the kernel's stage formula.

    ``stages=None`` takes as many as fit; a number is checked against the budget (the kernel's
    :class:`~cutecourse.errors.ShapeError` if it does not fit).
    """
    for name, v in (("M", m), ("N", n), ("K", k), ("sms", sms)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ShapeError(f"{name} must be a positive integer, not {v!r}", "e.g. M=N=K=8192")
    hg = _kernel()
    sp = hg.plan_stages(tuple(tile_mn), in_dtype, out_dtype, stages=stages)
    elem = sp.bytes_per_stage // ((sp.tile_mn[0] + sp.tile_mn[1]) * sp.tile_k)
    if (k * elem) % 16:
        raise AlignmentError(
            f"K={k} rows of {in_dtype} are {k * elem} bytes, not a multiple of 16: TMA needs "
            f"16-byte aligned row strides",
            f"pad K to a multiple of {16 // elem}")
    return GemmPlan(m, n, k, sp.tile_mn, sp.tile_k, in_dtype, out_dtype,
                    sp.tile_mn[0] * sp.tile_k * elem, sp.tile_mn[1] * sp.tile_k * elem,
                    sp.stages, sp.smem_bytes, sp.capacity, sms, hg.THREADS)


def plans(m: int, n: int, k: int, in_dtype: str = "float16", out_dtype: str = "float16",
          sms: int = H100_SMS) -> list[GemmPlan]:
    """One plan per tile the kernel supports."""
    return [plan(m, n, k, t, in_dtype, out_dtype, sms=sms) for t in _kernel().TILES]


def table(m: int, n: int, k: int, in_dtype: str = "float16", out_dtype: str = "float16",
          sms: int = H100_SMS) -> str:
    """The plans of :func:`plans` as a fixed-width table."""
    ps = plans(m, n, k, in_dtype, out_dtype, sms)
    rows = [p.row() for p in ps]
    head = (f"{'tile':<12}{'KiB/stage':>10}{'stages':>7}{'smem KiB':>9}{'k-tiles':>8}{'CTAs':>7}"
            f"{'waves':>7}{'last wave':>10}{'acc regs':>9}")
    lines = [f"M={m} N={n} K={k} {in_dtype} -> {out_dtype}, {sms} SMs, "
             f"{ps[0].capacity // 1024} KiB smem/CTA", head]
    for r in rows:
        lines.append(f"{r['tile']:<12}{r['KiB/stage']:>10.0f}{r['stages']:>7}{r['smem KiB']:>9.1f}"
                     f"{r['k-tiles']:>8}{r['CTAs']:>7}{r['waves']:>7.2f}{r['last-wave use']:>10.0%}"
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
    reserved = _kernel().BARRIER_BYTES if reserved is None else reserved
    return max(0, (capacity - reserved) // bytes_per_stage)
