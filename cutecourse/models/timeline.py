"""How long a GEMM mainloop takes, and why prefetching makes it faster: a timeline model.

One CTA's mainloop is two engines passing k-tiles along: TMA brings a k-tile (A and B slices)
into a shared-memory stage, the tensor cores multiply it. Three numbers set the pace:

* ``L``: TMA latency, from issuing a load to its first byte landing (hundreds of ns);
* ``X = bytes / bandwidth``: time to stream one k-tile at this CTA's share of the bandwidth;
* ``T``: tensor-core time for one k-tile (``2 * tile_m * tile_n * tile_k`` flops at the SM's
  share of the peak).

**Naive** (load, wait, compute, repeat) pays all three, one after another, per k-tile:
``L + X + T``. The pipelined loops overlap them; per k-tile they cost the slowest of the
tensor cores (``T``), the bandwidth (``X``), and a *latency loop*, which differs between the two:

* **prefetch** (``D`` k-tiles ahead): the load of k-tile ``k+D`` is issued in step ``k``, right
  after k-tile ``k`` arrived, so ``D`` loads cover one ``L + X``: ``max(T, X, (L + X) / D)``;
* **compiler** (the naive body, software-pipelined ``P`` iterations deep): the load of
  ``k+P`` is issued at the top of iteration ``k``, after iteration ``k-1``'s ``wait_group(0)``,
  so the MMA time sits inside the loop: ``max(T, X, (L + X + T) / (P + 1))``.

With the ring full (``D = P = stages - 1``) both are limited by ``T`` or ``X`` on an H100, so
they predict the same time, and the naive loop is ``(L + X + T) / max(T, X)`` times slower. The
kernel runs the compiler loop one stage shallower by default (``P = stages - 2``, the default of
:func:`predict` too): with 4 stages and the default machine the model then gives
``(L + X + T) / 3``, about 2% above ``P = 3``, because it charges nothing for the slowest warp's
late release that the spare stage absorbs; with ``Machine(warp_skew_ns=100)`` ``P = 2`` is the
faster of the two.

:func:`predict` runs the same mainloops as :mod:`cutecourse.models.pipeline` on a clock with
those costs (the formula above is :func:`steady_state_per_tile`; the tests check that the two
agree) and :func:`gantt` draws the result. The default machine numbers are assumptions for an
H100 SXM, stated in :class:`Machine`; the notebook sets them beside a measured speedup.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import CourseError, ShapeError
from . import pipeline


@dataclass(frozen=True)
class Machine:
    """Per-SM numbers the model needs. Defaults: an H100 SXM5, every SM busy.

    * ``tma_latency_ns``: issue to first byte of a TMA load from L2/HBM (assumed 700 ns,
      roughly 1200 cycles at 1.75 GHz, a typical global-memory round trip under load).
    * ``bytes_per_ns``: this SM's share of the bandwidth TMA loads stream at (assumed 80 B/ns,
      about 10.5 TB/s over 132 SMs: most GEMM operand reads hit L2, which is faster than HBM's
      3.35 TB/s).
    * ``tflops_per_sm``: dense fp16/bf16 tensor-core peak per SM (989 TFLOP/s / 132 SMs).
    * ``warp_skew_ns``: how much later the slowest of the 8 consumer warps releases a stage
      than the others (0: the warps move in lockstep, the model's simplest assumption).
    """

    tma_latency_ns: float = 700.0
    bytes_per_ns: float = 80.0
    tflops_per_sm: float = 989.0 / 132
    sms: int = 132
    warp_skew_ns: float = 0.0


H100 = Machine()


@dataclass(frozen=True)
class KTileCosts:
    """What one k-tile costs: its bytes, and the L, X, T of the module docstring (ns)."""

    bytes: int
    latency: float  # L
    transfer: float  # X
    mma: float  # T
    skew: float = 0.0  # the slowest warp's lag in releasing a stage

    def as_costs(self) -> pipeline.Costs:
        return pipeline.Costs(tma_latency=self.latency, tma_bytes_per_ns=self.bytes / self.transfer,
                              mma_time=self.mma, release_skew=self.skew)


def k_tile_costs(tile_mn: tuple[int, int] = (128, 256), tile_k: int = 64, dtype_bytes: int = 2,
                 machine: Machine = H100) -> KTileCosts:
    """L, X and T for one k-tile of a ``tile_m x tile_n`` CTA tile, ``tile_k`` deep."""
    m, n = tile_mn
    for name, v in (("tile_m", m), ("tile_n", n), ("tile_k", tile_k), ("dtype_bytes", dtype_bytes)):
        if not isinstance(v, int) or v < 1:
            raise ShapeError(f"{name} must be a positive integer, not {v!r}", "e.g. tile_mn=(128, 256), tile_k=64")
    if machine.bytes_per_ns <= 0 or machine.tflops_per_sm <= 0 or machine.tma_latency_ns < 0:
        raise CourseError(f"machine numbers must be positive: {machine}",
                          "bandwidth and throughput > 0, latency >= 0")
    nbytes = (m + n) * tile_k * dtype_bytes  # an A slice (m x k) and a B slice (n x k)
    flops = 2 * m * n * tile_k
    return KTileCosts(nbytes, machine.tma_latency_ns, nbytes / machine.bytes_per_ns,
                      flops / (machine.tflops_per_sm * 1e3),  # TFLOP/s = 1e3 flop/ns
                      machine.warp_skew_ns)


def steady_state_per_tile(variant: str, c: KTileCosts, prefetch: int) -> float:
    """The module docstring's formula: ns per k-tile once the loop is running."""
    L, X, T = c.latency, c.transfer, c.mma
    if variant == "naive" or prefetch == 0:
        return L + X + T
    if variant not in ("prefetch", "compiler"):
        raise CourseError(f"unknown variant {variant!r}", "use 'naive', 'prefetch' or 'compiler'")
    if variant == "prefetch":
        return max(T, X, (L + X) / prefetch)
    return max(T, X, (L + X + T) / (prefetch + 1))


@dataclass
class Prediction:
    variant: str
    stages: int
    prefetch: int
    k_tiles: int
    costs: KTileCosts
    trace: pipeline.Trace

    @property
    def mainloop_ns(self) -> float:
        return self.trace.time

    @property
    def per_tile_ns(self) -> float:
        return self.mainloop_ns / self.k_tiles

    @property
    def tensor_core_busy(self) -> float:
        """Fraction of the mainloop the tensor cores spend multiplying."""
        return self.k_tiles * self.costs.mma / self.mainloop_ns if self.mainloop_ns else 0.0

    def __repr__(self) -> str:
        return (f"<Prediction {self.variant}: {self.k_tiles} k-tiles in {self.mainloop_ns / 1e3:.1f} us "
                f"({self.per_tile_ns:.0f} ns/k-tile, tensor cores busy {self.tensor_core_busy:.0%})>")


def predict(variant: str = "prefetch", stages: int = 4, k_tiles: int = 128,
            prefetch: int | None = None, tile_mn: tuple[int, int] = (128, 256), tile_k: int = 64,
            dtype_bytes: int = 2, machine: Machine = H100) -> Prediction:
    """Simulate one CTA's mainloop with the machine's costs.

    ``prefetch`` defaults to the kernel's own depth (``HopperGemm``): ``stages - 1`` for
    "prefetch" (its prologue fills all stages but one) and ``max(1, stages - 2)`` for "compiler"
    (``prefetch_stages``: one stage of slack, so warp 0 does not wait for the slowest warp's
    release every iteration; ``stages - 1`` when only 1 or 2 stages leave no room for that).
    Naive ignores it. A configuration that deadlocks raises
    :class:`~cutecourse.models.pipeline.PipelineDeadlock`.
    """
    if prefetch is None and variant == "compiler":
        prefetch = min(stages - 1, max(1, stages - 2))
    c = k_tile_costs(tile_mn, tile_k, dtype_bytes, machine)
    trace = pipeline.simulate(variant, stages, k_tiles, prefetch, tx_bytes=c.bytes,
                              costs=c.as_costs()).check()
    return Prediction(variant, stages, trace.prefetch, k_tiles, c, trace)


def speedup(stages: int = 4, k_tiles: int = 128, tile_mn: tuple[int, int] = (128, 256),
            machine: Machine = H100, fast: str = "prefetch", prefetch: int | None = None) -> float:
    """Predicted naive time / ``fast`` time for the same problem."""
    slow = predict("naive", stages, k_tiles, tile_mn=tile_mn, machine=machine)
    quick = predict(fast, stages, k_tiles, prefetch, tile_mn=tile_mn, machine=machine)
    return slow.mainloop_ns / quick.mainloop_ns


def measured_speedup(result: str, slow: str = "naive", fast: str = "prefetch",
                     directory=None) -> float | None:
    """``fast``'s throughput / ``slow``'s from a committed benchmark result, or None if absent.

    ``result`` is the name of a ``benchmarks/results/*.json`` file (``cutecourse.results.load``);
    the rows are matched by name (a row whose name contains ``slow`` / ``fast``).
    """
    from ..results import load

    try:
        res = load(result, directory)
    except FileNotFoundError:
        return None

    def row(word: str):
        hits = [r for r in res.rows if word in r.name]
        if not hits:
            raise CourseError(f"{result} has no row named like {word!r}",
                              f"its rows are {[r.name for r in res.rows]}")
        return hits[0]

    return res.speed(row(fast)) / res.speed(row(slow))


def measured_per_tile_ns(result: str, row: str, tile_mn: tuple[int, int] = (128, 256),
                         tile_k: int = 64, sms: int = 132, directory=None) -> float | None:
    """A measured kernel time, as ns per k-tile of one CTA: time / waves / k-tiles.

    One CTA runs per SM at a time, so the kernel takes ``ceil(CTAs / sms)`` waves, each one
    CTA's whole mainloop (plus its epilogue, which this spreads over the k-tiles). Reads the
    problem size from the result's ``params`` (m, n, k). None if the result is not there.
    """
    import math

    from ..results import load

    try:
        res = load(result, directory)
    except FileNotFoundError:
        return None
    p = res.params
    if not all(key in p for key in ("m", "n", "k")):
        raise CourseError(f"{result} does not record the problem size (params m, n, k)",
                          "re-run the benchmark script, which records them")
    waves = math.ceil(math.ceil(p["m"] / tile_mn[0]) * math.ceil(p["n"] / tile_mn[1]) / sms)
    k_tiles = math.ceil(p["k"] / tile_k)
    return res.row(row).us * 1e3 / waves / k_tiles


def calibrate(naive_ns: float, prefetch_ns: float, latency_ns: float = 400.0,
              tile_mn: tuple[int, int] = (128, 256), tile_k: int = 64, dtype_bytes: int = 2) -> Machine:
    """The machine whose model reproduces two measurements (ns per k-tile).

    The prefetch loop is tensor-core bound, so ``T = prefetch_ns``; the naive loop pays
    ``L + X + T``, so ``X = naive_ns - T - L`` for an assumed latency ``L``. Two measurements fix
    two unknowns; anything else the model then predicts is a real test of it.
    """
    T = prefetch_ns
    X = naive_ns - T - latency_ns
    if T <= 0 or X <= 0:
        raise CourseError(f"naive {naive_ns:.0f} ns and prefetch {prefetch_ns:.0f} ns per k-tile leave "
                          f"no time for the transfer with L = {latency_ns:.0f} ns",
                          "naive must be slower than prefetch by more than the assumed latency; "
                          "assume a smaller latency_ns")
    m, n = tile_mn
    nbytes = (m + n) * tile_k * dtype_bytes
    flops = 2 * m * n * tile_k
    return Machine(tma_latency_ns=latency_ns, bytes_per_ns=nbytes / X,
                   tflops_per_sm=flops / T / 1e3)


def gantt(*predictions: Prediction, first: int = 12, ax=None):
    """A Gantt chart: per variant, a TMA lane and a tensor-core lane, the first ``first`` k-tiles.

    Each bar is one k-tile (its number inside): on the TMA lane a thin line from issue through
    the latency, then a bar while its bytes stream in; on the tensor-core lane a bar while its
    WGMMAs run. Gaps on the tensor-core lane are time lost.
    """
    import matplotlib.pyplot as plt

    if not predictions:
        raise CourseError("gantt() needs at least one Prediction", "pass predict('naive'), predict('prefetch'), ...")
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 0.9 + 0.85 * len(predictions)))
    colors = plt.get_cmap("tab10")
    yticks, ylabels = [], []
    horizon = 0.0
    for row, p in enumerate(predictions):
        # First prediction on top; per prediction a TMA lane above its MMA lane.
        y_tma, y_mma = -2.6 * row, -2.6 * row - 1.0
        for k, issued, landed in sorted(p.trace.tma_spans):
            if k >= first:
                continue
            start = landed - p.costs.transfer  # bytes stream in during the last X of the load
            ax.plot([issued, start], [y_tma, y_tma], color=colors(k % p.stages), linewidth=1)
            ax.barh(y_tma, landed - start, left=start, height=0.8, color=colors(k % p.stages),
                    alpha=0.55, edgecolor="black", linewidth=0.4)
            ax.text((start + landed) / 2, y_tma, str(k), ha="center", va="center", fontsize=7)
            horizon = max(horizon, landed)
        for k, start, end in sorted(p.trace.mma_spans):
            if k >= first:
                continue
            ax.barh(y_mma, end - start, left=start, height=0.8, color=colors(k % p.stages),
                    edgecolor="black", linewidth=0.4)
            ax.text((start + end) / 2, y_mma, str(k), ha="center", va="center", fontsize=7)
            horizon = max(horizon, end)
        yticks += [y_tma, y_mma]
        ylabels += [f"{p.variant} TMA", f"{p.variant} MMA"]
    ax.set_yticks(yticks, ylabels, fontsize=8)
    ax.set_xlim(0, horizon * 1.02)
    ax.set_xlabel("time (ns): one bar per k-tile, coloured by smem stage (TMA: line = latency, bar = bytes)",
                  fontsize=8)
    ax.set_title(f"First {first} k-tiles: naive leaves the tensor cores idle while TMA waits",
                 fontsize=10)
    ax.figure.tight_layout()
    return ax
