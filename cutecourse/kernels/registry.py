"""The course's dense Hopper GEMMs by name: one place that lists them.

Each name maps to the module that holds the kernel class and its :class:`gemm_launch.Entry`
(``ENTRY``): ``compile_target``, ``launcher``, ``gemm``. ``tools/ptx_fingerprints.py``, the
schedules benchmark (``benchmarks/schedules.py``) and the dense GPU test
(``tests/test_dense_gemms.py``) walk this table, so a new kernel is one line here plus its module.
Modules are imported on first use (a kernel module never imports this one: no import circles).
"""

from __future__ import annotations

import importlib

from ..errors import CourseError

#: name -> module under ``cutecourse.kernels``
DENSE = {
    "one": "hopper_gemm",  # one CTA per tile (notebooks 03, 04)
    "cluster": "hopper_gemm_cluster",  # with clusters and TMA multicast (notebook 05)
    "persistent": "hopper_gemm_persistent",  # persistent, warp-specialized, cooperative (notebook 06)
    "pingpong": "hopper_gemm_pingpong",  # one tile per consumer warpgroup, taking turns
    "streamk": "hopper_gemm_streamk",  # the last partial wave split along K
    "directstore": "hopper_gemm_direct_store",  # the epilogue storing from registers
}


def entry(name: str):
    """The :class:`gemm_launch.Entry` of dense GEMM ``name`` (its module imported on first use)."""
    return importlib.import_module(f"{__package__}.{_module_name(name)}").ENTRY


def target(name: str) -> str:
    """``"module:compile_target"``: what ``cutecourse.inspect.compile_report`` takes."""
    return f"{__package__}.{_module_name(name)}:compile_target"


def _module_name(name: str) -> str:
    """The module name of dense GEMM ``name`` (without importing it), or a CourseError."""
    if name not in DENSE:
        raise CourseError(f"no dense GEMM named {name!r}", f"use one of {list(DENSE)}, or list the kernel in DENSE")
    return DENSE[name]
