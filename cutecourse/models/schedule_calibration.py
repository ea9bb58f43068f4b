"""Where the schedule model's H100 figures come from, and how far the model is from the H100.

:mod:`cutecourse.models.schedules` needs four figures NVIDIA does not publish: how fast TMA fills
one SM's shared memory (the *load port*), the load latency, how long an epilogue keeps the tensor
cores waiting, and what one ping-pong hand-over costs. All four can be read off one committed
measurement, ``experiment_schedules_fixed_clock_s5.json`` (Nsight Compute at the base clock, about
1.42 GHz, no power cap), because every kernel there was timed at five values of K on the same
8192 x 8192 C. The busiest SM runs ``n`` tiles (16 of 128x256, 32 of 64x256), so

    time in clocks / n  =  (clocks per k-tile) x (k-tiles per tile)  +  (clocks per tile)

is a straight line in K. Its **slope** is the mainloop's rate, its **intercept** what a tile
costs besides its k-tiles. :func:`fit_line` fits it; :func:`derive` turns the lines into figures:

* cooperative 128x256: slope 1028 clocks per k-tile, where 2048 FMA per clock take 1024: its
  mainloop runs at the tensor cores' rate. Intercept ~3290 clocks: its exposed epilogue.
* ping-pong 64x256, 5 stages: slope ~530 for k-tiles the tensor cores finish in 512, so
  something feeds them 3% too slowly; the model calls it the load port: 40960 B / 530 clocks =
  77 B per clock per SM. It is a lower bound (the port delivered at least that, on all 132 SMs at
  once); ``benchmarks/experiments/tma_load_rate.py`` measures the port alone. Intercept ~440:
  the hand-over (its epilogues hide under the other warpgroup's MMAs).
* ping-pong 64x256, 4 stages: slope ~550. Four stages do not cover a stage's round trip
  (latency + transfer + MMA), so 4 x slope = latency + 530 + 512 gives the latency.

:func:`model_vs_measured` then runs the model at each measured row's own clock, so the notebook and
the widget can print the model's error beside its picture, and the tests can hold the model to
the measured ranking.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass

from ..errors import CourseError

#: The committed measurement the figures come from, and the L2 request coalescer's counts.
SOURCE = "experiment_schedules_fixed_clock_s5.json"
LRC_SOURCE = "experiment_schedules_fixed_clock_lrc.json"
#: Measured kernel rows -> (model schedule, the CTA tile the model is given, lane tile).
KERNELS = {"persistent 128x256": ("cooperative", (128, 256, 64)),
           "ping-pong 64x256 S=5": ("pingpong", (128, 256, 64))}
SECTOR_BYTES = 32


def load_rows(name: str = SOURCE) -> list[dict]:
    """The ``rows`` of a committed fixed-clock experiment (``benchmarks/results/<name>``)."""
    from ..results import RESULTS_DIR

    path = RESULTS_DIR / name
    if not path.exists():
        raise CourseError(f"no measurement {path}", "the file is committed with the course; "
                          "check out benchmarks/results/ again")
    return json.loads(path.read_text())["rows"]


@dataclass(frozen=True)
class Line:
    """Clocks per tile of the busiest SM = ``per_k_tile`` x k-tiles + ``per_tile``."""

    kernel: str
    dtype: str
    per_k_tile: float
    per_tile: float
    mhz: float  # mean SM clock of the rows


def fit_line(rows, kernel: str, dtype: str, tile_mn: tuple[int, int], sms: int = 132) -> Line:
    """Least-squares line through a kernel's 8192 x 8192 x K rows (time in clocks per tile)."""
    pts = []
    for r in rows:
        if r["kernel"] == kernel and r["dtype"] == dtype and r["m"] == r["n"] == 8192:
            tiles = math.ceil(r["m"] / tile_mn[0]) * math.ceil(r["n"] / tile_mn[1])
            busiest = math.ceil(tiles / sms)
            pts.append((r["k"] / 64, r["us"] * r["sm_mhz"] / busiest, r["sm_mhz"]))
    if len(pts) < 2:
        raise CourseError(f"fewer than two 8192 x 8192 rows of {kernel!r} ({dtype})",
                          f"pass the rows of {SOURCE}")
    n = len(pts)
    mx, my = sum(p[0] for p in pts) / n, sum(p[1] for p in pts) / n
    slope = sum((x - mx) * (y - my) for x, y, _ in pts) / sum((x - mx) ** 2 for x, _, _ in pts)
    return Line(kernel, dtype, slope, my - slope * mx, sum(p[2] for p in pts) / n)


@dataclass(frozen=True)
class Calibration:
    load_port_bytes_per_clock: float
    latency_ns: float
    epilogue_bytes_per_clock: float
    turn_clocks: float
    delivered_bytes_per_clock: float  # the LRC's count, averaged over the ping-pong kernel's run
    lines: tuple[Line, ...]

    def __str__(self) -> str:
        return (f"load port >= {self.load_port_bytes_per_clock:.1f} B/clock per SM (LRC count: "
                f"{self.delivered_bytes_per_clock:.1f} on average), latency {self.latency_ns:.0f} ns, "
                f"epilogue {self.epilogue_bytes_per_clock:.2f} B/clock per warpgroup, hand-over "
                f"{self.turn_clocks:.0f} clocks")


def delivered_bytes_per_clock(rows=None, kernel: str = "ping-pong 64x256 S=5", sms: int = 132) -> float:
    """Bytes the L2 request coalescer delivered to each SM per clock, over the whole kernel
    (Nsight Compute's ``lrc_to_gpc_sectors``), mean over the dtypes."""
    rows = load_rows(LRC_SOURCE) if rows is None else rows
    rates = [r["lrc_to_gpc_sectors"] * SECTOR_BYTES / (r["us"] * r["sm_mhz"] * sms)
             for r in rows if r["kernel"] == kernel]
    if not rates:
        raise CourseError(f"no LRC row of {kernel!r}", f"pass the rows of {LRC_SOURCE}")
    return sum(rates) / len(rates)


def derive(rows=None, lrc_rows=None, flops_per_clock: int = 4096) -> Calibration:
    """The four figures of ``schedules.Machine`` from the measured lines (module docstring),
    averaged over fp16 and bf16."""
    rows = load_rows() if rows is None else rows
    out = []
    for dt in ("float16", "bfloat16"):
        coop = fit_line(rows, "persistent 128x256", dt, (128, 256))
        pp5 = fit_line(rows, "ping-pong 64x256 S=5", dt, (64, 256))
        pp4 = fit_line(rows, "ping-pong 64x256", dt, (64, 256))
        mma = 2 * 64 * 256 * 64 / flops_per_clock  # one 64x256 k-tile's MMAs, in clocks
        latency_clocks = 4 * pp4.per_k_tile - pp5.per_k_tile - mma
        out.append(((64 + 256) * 64 * 2 / pp5.per_k_tile, latency_clocks / pp4.mhz * 1e3,
                    64 * 256 * 2 / coop.per_tile, pp5.per_tile, (coop, pp5, pp4)))
    mean = [sum(v[i] for v in out) / len(out) for i in range(4)]
    return Calibration(*mean, delivered_bytes_per_clock(lrc_rows),
                       tuple(line for v in out for line in v[4]))


@dataclass(frozen=True)
class Comparison:
    """One shape: measured and modelled TFLOP/s of the cooperative and ping-pong kernels."""

    shape: tuple[int, int, int]
    dtype: str
    mhz: float
    measured: dict  # schedule -> TFLOP/s
    model: dict

    def ratio(self, which: str) -> float:  # ping-pong / cooperative
        d = self.measured if which == "measured" else self.model
        return d["pingpong"] / d["cooperative"]

    def error(self, schedule: str) -> float:  # model / measured - 1
        return self.model[schedule] / self.measured[schedule] - 1

    def __str__(self) -> str:
        m, n, k = self.shape
        dt = {"float16": "fp16", "bfloat16": "bf16"}.get(self.dtype, self.dtype)
        return (f"{m}x{n}x{k} {dt} at {self.mhz:4.0f} MHz: ping-pong/cooperative measured "
                f"{self.ratio('measured'):.2f}x, model {self.ratio('model'):.2f}x; model error "
                f"cooperative {self.error('cooperative'):+.0%}, ping-pong {self.error('pingpong'):+.0%}")


def model_vs_measured(rows=None, machine=None, shapes=None) -> list[Comparison]:
    """The model at each measured shape and clock beside the measurement (``KERNELS``' rows)."""
    from . import schedules as sc

    rows = load_rows() if rows is None else rows
    machine = sc.H100 if machine is None else machine
    found: dict = {}
    for r in rows:
        if r["kernel"] in KERNELS:
            found.setdefault((r["m"], r["n"], r["k"], r["dtype"]), {})[r["kernel"]] = r
    out = []
    for (m, n, k, dt), by in found.items():
        if len(by) < len(KERNELS) or (shapes is not None and (m, n, k) not in shapes):
            continue
        mhz = sum(r["sm_mhz"] for r in by.values()) / len(by)
        model = {s: sc.simulate(s, m, n, k, tile=t, machine=machine.at_clock(by[name]["sm_mhz"])).tflops
                 for name, (s, t) in KERNELS.items()}
        out.append(Comparison((m, n, k), dt, mhz, {s: by[name]["tflops"] for name, (s, _) in KERNELS.items()},
                              model))
    return out


@functools.lru_cache(maxsize=4)
def committed_comparisons(machine=None) -> tuple[Comparison, ...]:
    """:func:`model_vs_measured` on the committed table, computed once per machine."""
    return tuple(model_vs_measured(machine=machine))


def error_lines(shape=None, tile=(128, 256, 64), rows=None, machine=None) -> list[str]:
    """What the notebook and the widget print beside the model's picture: for a measured
    ``shape``, the model against the H100 at the same clock, per dtype; for another shape, how far
    off the model is on the measured ones; ``shape=None``: every measured row."""
    comps = committed_comparisons(machine) if rows is None else tuple(model_vs_measured(rows, machine))
    if shape is None:
        return [str(c) for c in comps]
    if tuple(tile) != tuple(KERNELS["persistent 128x256"][1]):
        return ["measured with 128x256 tiles only (ping-pong: 64x256 per warpgroup)"]
    here = [str(c) for c in comps if c.shape == tuple(shape)]
    if here:
        return here
    ratio = max(abs(c.ratio("model") / c.ratio("measured") - 1) for c in comps)
    err = max(abs(c.error(s)) for c in comps for s in ("cooperative", "pingpong"))
    shapes = sorted({c.shape for c in comps}, key=lambda s: (s[0], s[2]))
    return [f"{'x'.join(map(str, shape))} was not measured. On the {len(shapes)} measured shapes "
            f"({', '.join('x'.join(map(str, s)) for s in shapes)}) the model's ping-pong/cooperative is "
            f"within {ratio:.0%} of the H100's and its TFLOP/s within {err:.0%} ({SOURCE})"]
