"""Shared test setup: import cutecourse first (it fixes the DSL's arch before cutlass loads)."""

import pytest

import cutecourse  # noqa: F401


def gpu_for(target: str):
    """A pytest mark that skips unless kernels for ``target`` can run on this machine."""
    m = cutecourse.modes.mode_for(target)
    return pytest.mark.skipif(not m.run, reason=f"needs a GPU for {target}: {m.reason}")


def _run_gpu_script(script: str, cases, timeout: float = 300):
    """Run a GPU check ``script`` (argv[1]: the JSON ``cases``) in a subprocess; return the JSON
    it prints after ``RESULT``. A pipeline that deadlocks becomes a TimeoutExpired, not a stuck
    test run, and a crash (illegal instruction) fails this test only."""
    import json
    import os
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", script, json.dumps(cases)], capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.split("RESULT", 1)[1])


@pytest.fixture
def run_gpu_script():
    """``run_gpu_script(script, cases, timeout=300)``: see :func:`_run_gpu_script`."""
    return _run_gpu_script
