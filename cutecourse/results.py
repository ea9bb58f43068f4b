"""The course's measured results: the ``benchmarks/results/*.json`` files and what they hold.

:class:`BenchResult` is one problem timed in one run (rows of kernels, each a median over
repeats, and its ratio to the baseline row measured in the same run); ``load`` / ``load_set``
read the committed files, ``save_json`` / ``save_set`` write them. :mod:`cutecourse.bench` (the
timing harness, GPU only) writes them; notebooks, docs, models and pictures read them from here,
without touching the harness. :func:`paired_ratio` says whether a difference between two rows is
larger than the run's own noise.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent.parent / "benchmarks" / "results"


@dataclass(frozen=True)
class Work:
    """How much work one launch does: bytes moved through device memory, or flops."""

    bytes: int = 0
    flops: int = 0


@dataclass
class Row:
    name: str
    us: float  # median over repeats of the mean time per launch, microseconds
    us_repeats: list[float]
    gbps: float | None = None
    tflops: float | None = None
    ratio: float | None = None  # throughput relative to the baseline (>1: faster)
    # interleaved runs (compare(..., rounds=R)): this case's ratio to the baseline in each round
    round_ratios: list[float] = field(default_factory=list)
    # what the GPU did while this case ran (GpuMonitor): median SM clock (MHz), mean power (W)
    sm_mhz: float | None = None
    power_w: float | None = None

    @property
    def spread(self) -> float:
        """(max - min) / median of the repeats: differences below this are noise."""
        return (max(self.us_repeats) - min(self.us_repeats)) / self.us if self.us else 0.0


@dataclass
class BenchResult:
    title: str
    work: Work
    baseline: str
    rows: list[Row]
    params: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)

    def row(self, name: str) -> Row:
        for r in self.rows:
            if r.name == name:
                return r
        raise KeyError(f"no row {name!r}; rows are {[r.name for r in self.rows]}")

    @property
    def unit(self) -> str:
        return "TFLOP/s" if self.work.flops else "GB/s"

    def speed(self, r: Row) -> float:
        return (r.tflops if self.work.flops else r.gbps) or 0.0

    def table(self) -> str:
        """A small fixed-width table: name, time, throughput, ratio to the baseline."""
        lines = [f"{self.title}  ({self.environment.get('device', '?')})",
                 f"{'kernel':<28}{'time (us)':>12}{self.unit:>12}{'vs ' + self.baseline:>22}"]
        rounds = any(r.round_ratios for r in self.rows)
        clocks = any(r.sm_mhz for r in self.rows)
        if rounds:
            lines[1] += f"{'ratio per round':>18}"
        if clocks:
            lines[1] += f"{'SM MHz':>8}{'W':>6}"
        for r in self.rows:
            line = f"{r.name:<28}{r.us:>12.1f}{self.speed(r):>12.1f}{r.ratio:>21.3f}x"
            if rounds:
                lo, hi = (min(r.round_ratios), max(r.round_ratios)) if r.round_ratios else (0, 0)
                line += f"{lo:>11.3f}-{hi:.3f}"
            if clocks:
                line += f"{r.sm_mhz or 0:>8.0f}{r.power_w or 0:>6.0f}"
            lines.append(line)
        return "\n".join(lines)

    def plot(self, ax=None, title: str | None = None):
        """Bar chart of throughput; the baseline's bar in grey, ratios printed on the bars."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(7, 0.5 + 0.45 * len(self.rows)))
        names = [r.name for r in self.rows][::-1]
        speeds = [self.speed(r) for r in self.rows][::-1]
        colors = ["#9e9e9e" if n == self.baseline else "#2e7d32" for n in names]
        bars = ax.barh(names, speeds, color=colors)
        for bar, r in zip(bars, self.rows[::-1]):
            ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {r.ratio:.2f}x",
                    va="center", fontsize=9)
        ax.set_xlabel(self.unit)
        ax.set_xlim(0, max(speeds) * 1.18)
        dev = self.environment.get("device", "")
        ax.set_title(title or f"{self.title}\n{dev}, {self.environment.get('date', '')[:10]}", fontsize=10)
        return ax

    # -- files --------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["unit"] = self.unit
        return d

    def save(self, name: str, directory: Path | str | None = None) -> Path:
        return save_json(name, self.to_dict(), directory)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "BenchResult":
        return cls(d["title"], Work(**d["work"]), d["baseline"], [Row(**r) for r in d["rows"]],
                   d.get("params", {}), d.get("environment", {}))


def load(name: str, directory: Path | str | None = None) -> BenchResult:
    """A committed result, by file name without ``.json``: ``load("elementwise_add_float16_32768")``
    reads ``benchmarks/results/elementwise_add_float16_32768.json`` (``directory``: read elsewhere)."""
    path = Path(directory or RESULTS_DIR) / f"{name}.json"
    if not path.exists():
        raise FileNotFoundError(f"no benchmark result {path}; run the benchmark script on a GPU first")
    return BenchResult.from_dict(json.loads(path.read_text()))


def save_json(name: str, body: Any, directory: Path | str | None = None) -> Path:
    """Write ``body`` as ``name.json`` under ``directory`` (default: the results folder): every
    result file of the course, a ``BenchResult``, a set of them or an experiment's own layout."""
    path = Path(directory or RESULTS_DIR) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body, indent=1) + "\n")
    return path


def save_set(name: str, results: dict[str, BenchResult], directory: Path | str | None = None) -> Path:
    """Several problems measured in one run (e.g. one GEMM per shape), in one file ``name.json``."""
    return save_json(name, {"set": {key: res.to_dict() for key, res in results.items()}}, directory)


def load_set(name: str, directory: Path | str | None = None) -> dict[str, BenchResult]:
    """A committed result set (``save_set``): problem name -> ``BenchResult``, in the run's order."""
    path = Path(directory or RESULTS_DIR) / f"{name}.json"
    if not path.exists():
        raise FileNotFoundError(f"no benchmark result {path}; run the benchmark script on a GPU first")
    return {key: BenchResult.from_dict(d) for key, d in json.loads(path.read_text())["set"].items()}


def paired_ratio(result, case: str, baseline: str = "cluster 1x1") -> str:
    """How ``case`` compares with ``baseline`` in a result, and whether the run can tell.

    The interleaved benchmark times every case once per round, so repeat i of one case ran in
    the same round as repeat i of the other: their ratio, repeat by repeat, shows how much of a
    difference in the medians is noise (the clocks drift between rounds, the pairs together).
    """
    a, b = result.row(case), result.row(baseline)
    ratio = b.us / a.us
    pairs = [y / x for x, y in zip(a.us_repeats, b.us_repeats)]
    faster = sum(p > 1 for p in pairs)
    n = len(pairs)
    if faster >= 0.9 * n:
        verdict = f"faster in {faster} of {n} paired repeats"
    elif faster <= 0.1 * n:
        verdict = f"slower in {n - faster} of {n} paired repeats"
    else:
        verdict = f"no consistent difference: faster in {faster} of {n} paired repeats"
    return (f"{case} vs {baseline}: {ratio:.3f}x (medians), paired repeats "
            f"{statistics.median(pairs):.3f}x [{min(pairs):.3f} .. {max(pairs):.3f}]; {verdict}")
