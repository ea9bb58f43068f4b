"""Shared test setup: import cutecourse first (it fixes the DSL's arch before cutlass loads)."""

import pytest

import cutecourse  # noqa: F401


def gpu_for(target: str):
    """A pytest mark that skips unless kernels for ``target`` can run on this machine."""
    m = cutecourse.modes.mode_for(target)
    return pytest.mark.skipif(not m.run, reason=f"needs a GPU for {target}: {m.reason}")
