"""Saving a result set (one ``BenchResult`` per problem, ``bench.save_set``) and printing what it
holds: where it went, how long the run took, each row's ratio to the baseline and its TFLOP/s.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from cutecourse import bench


def save_and_show(name: str, results: dict, out: str, t0: float) -> Path:
    """Write ``results`` as ``<name>.json`` under ``out``; ``t0``: the run's ``time.perf_counter()`` start."""
    path = bench.save_set(name, results, out)
    print(f"wrote {path} ({time.perf_counter() - t0:.0f} s)", flush=True)
    print(json.dumps({p: {r.name: f"{r.ratio:.3f}x, {r.tflops:.0f} TFLOP/s" for r in res.rows}
                      for p, res in results.items()}, indent=1))
    return path
