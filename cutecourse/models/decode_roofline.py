"""How long y = x @ W.T must take at batch M, from two ceilings: bytes over HBM, flops over the tensor cores.

A decode step multiplies a few tokens (M = 1 .. 16) by every weight of a layer. Each weight is
read once and used M times, so at small M the bytes of W decide the time and the tensor cores
idle. The bound of one GEMM is

    t(M) = max(bytes(M) / bandwidth, 2 M N K / peak)

with ``bytes`` the compulsory traffic: W once (2 bytes a weight in bf16; half a byte in int4, plus
one bf16 scale per group), x and y once. Where the two terms meet, M* = peak x (bytes a weight) /
(2 x bandwidth): about 206 tokens for bf16 weights on an H200 and about 52 for int4 ones. Below
int4's M* the int4 layer can be 4x faster; above bf16's the two are equal, and the int4 kernel
still converts every weight once per tile of tokens (:func:`conversions`), which the bf16 one
does not.

The ceilings are the H200's data-sheet numbers; ``benchmarks/mixed_input.py`` measures what the
kernels reach (``measured`` reads its result set).
"""

from __future__ import annotations

from dataclasses import dataclass

#: H200 SXM: HBM3e bandwidth (bytes/s) and dense bf16 tensor-core peak (flop/s), data sheet.
HBM_BYTES_S = 4.8e12
BF16_PEAK_FLOPS = 989e12


@dataclass(frozen=True)
class Bound:
    """The two ceilings of one GEMM, in microseconds, and which binds."""

    m: int
    memory_us: float
    compute_us: float

    @property
    def us(self) -> float:
        return max(self.memory_us, self.compute_us)

    @property
    def binds(self) -> str:
        return "memory" if self.memory_us >= self.compute_us else "compute"


def weight_bytes(n: int, k: int, bits: int = 16, group: int | None = 128) -> int:
    """Bytes of an N x K weight: ``bits`` a weight, plus a bf16 scale per group for int4 (None:
    one per row)."""
    if bits == 16:
        return 2 * n * k
    groups = 1 if group is None else k // group
    return n * k * bits // 8 + 2 * n * groups


def bound(m: int, n: int, k: int, bits: int = 16, group: int | None = 128,
          bandwidth: float = HBM_BYTES_S, peak: float = BF16_PEAK_FLOPS) -> Bound:
    """The ceilings of y (M, N) = x (M, K) @ W.T with W in ``bits`` (16: bf16, 4: int4)."""
    traffic = weight_bytes(n, k, bits, group) + 2 * m * k + 2 * m * n
    return Bound(m, traffic / bandwidth * 1e6, 2 * m * n * k / peak * 1e6)


def crossover(bits: int, bandwidth: float = HBM_BYTES_S, peak: float = BF16_PEAK_FLOPS) -> float:
    """The M where a weight's bytes and its 2 M flops take equal time (x and y neglected)."""
    return peak * (bits / 8) / (2 * bandwidth)


def conversions(m: int, n: int, k: int, tile_m: int) -> int:
    """Weights the int4 kernel converts to bf16: every CTA converts its rows' weights for its own
    tile of tokens, so W is converted once per tile of ``tile_m`` tokens."""
    return n * k * -(-m // tile_m)


def measured(results: dict, n: int, k: int) -> dict[str, list[tuple[int, float]]]:
    """From ``bench.load_set("mixed_input")``: case name -> [(M, microseconds)] for weight N x K."""
    out: dict[str, list[tuple[int, float]]] = {}
    for res in results.values():
        if (res.params.get("n"), res.params.get("k")) != (n, k):
            continue
        for row in res.rows:
            out.setdefault(row.name, []).append((res.params["m"], row.us))
    return {name: sorted(points) for name, points in out.items()}


#: The result set's read case: one ``torch.amax`` over the same int4 bytes, no GEMM, i.e. how fast a
#: generic kernel reads those bytes in one launch. A reference, not a bound: the GEMM's own TMA stream
#: reads them faster (docs/mixed_measured.md). It means something only while the bytes bind (int4's
#: M* is about 52), so :func:`speedups` keeps it up to ``FLOOR_MAX_M``; past that a speed-up of
#: 10-70x over cuBLAS would read as int4's promise, when it is a reduction racing a GEMM.
FLOOR = "floor: read the int4 bytes"  # the case's name in benchmarks/results/mixed_input.json
READ_REFERENCE = "torch.amax read (no GEMM)"  # the name speedups gives it
FLOOR_MAX_M = 64


def speedups(points: dict[str, list[tuple[int, float]]], baseline: str = "cuBLAS bf16") -> dict[str, dict[int, float]]:
    """From :func:`measured`: case -> {M: baseline's time / the case's time}, at the M the baseline
    was measured at (a case left out at some M, e.g. refused there, has no entry for it); the
    :data:`FLOOR` case, named :data:`READ_REFERENCE`, only up to :data:`FLOOR_MAX_M`."""
    base = dict(points.get(baseline, ()))
    return {READ_REFERENCE if name == FLOOR else name:
            {m: base[m] / us for m, us in series if m in base and (name != FLOOR or m <= FLOOR_MAX_M)}
            for name, series in points.items()}
