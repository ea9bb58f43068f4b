"""The schedule model's ranking of the schedules, and how it agrees with a measured one.

``predict_ranking`` runs ``models.schedules.simulate`` for each shape and tile and orders the
schedules by predicted TFLOP/s; ``compare_with_measured`` sets a prediction beside TFLOP/s measured
on a GPU (``benchmarks/results``): the two orders, their rank correlations and the pairs the model
gets the wrong way round.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import CourseError
from .schedules import SCHEDULES, simulate_all


@dataclass
class Ranking:
    shape: tuple[int, int, int]
    tile: tuple[int, int, int]
    tflops: dict[str, float]  # predicted, per schedule
    order = property(lambda self: sorted(self.tflops, key=self.tflops.get, reverse=True))

    def __str__(self) -> str:
        head = "x".join(map(str, self.shape)) + f" tile {self.tile[0]}x{self.tile[1]}: "
        return head + " > ".join(f"{s} {self.tflops[s]:.0f}" for s in self.order)


def predict_ranking(shapes, tiles=((128, 256, 64),), schedules=SCHEDULES, **kw) -> dict[tuple, Ranking]:
    """Predicted TFLOP/s and order of the schedules, per (shape, tile)."""
    return {(tuple(sh), tuple(t)): Ranking(tuple(sh), tuple(t), {
        s: r.tflops for s, r in simulate_all(*sh, tile=tuple(t), schedules=schedules, **kw).items()})
        for sh in shapes for t in tiles}


@dataclass
class Agreement:
    predicted_order: list[str]
    measured_order: list[str]
    spearman: float
    kendall: float
    flips: list[tuple[str, str]]  # (a, b): predicted a faster than b, measured b faster

    def __str__(self) -> str:
        flips = ", ".join(f"{a} > {b}" for a, b in self.flips) or "none"
        return (f"predicted: {' > '.join(self.predicted_order)}\nmeasured:  {' > '.join(self.measured_order)}"
                f"\nSpearman {self.spearman:+.2f}, Kendall {self.kendall:+.2f}; reversed pairs: {flips}")


def compare_with_measured(predicted, measured: dict[str, float]) -> Agreement:
    """How well a prediction (a Ranking, {schedule: TFLOP/s} or an order) matches measured TFLOP/s."""
    predicted = (predicted.order if isinstance(predicted, Ranking) else
                 sorted(predicted, key=predicted.get, reverse=True) if isinstance(predicted, dict) else list(predicted))
    unknown = [s for s in list(predicted) + list(measured) if s not in SCHEDULES]
    if unknown:
        raise CourseError(f"unknown schedule names {unknown}", f"name schedules as in {SCHEDULES}")
    common = [s for s in predicted if s in measured]
    if len(common) < 2:
        raise CourseError(f"only {common} is both predicted and measured", "compare at least two schedules")
    meas = sorted(common, key=measured.get, reverse=True)
    n, d2 = len(common), sum((common.index(s) - meas.index(s)) ** 2 for s in common)
    pairs = [(a, b) for i, a in enumerate(common) for b in common[i + 1:]]
    flips = [(a, b) for a, b in pairs if measured[b] > measured[a]]
    return Agreement(common, meas, 1 - 6 * d2 / (n * (n * n - 1)),
                     (len(pairs) - 2 * len(flips)) / len(pairs), flips)
