"""Shared test setup: import cutecourse first (it fixes the DSL's arch before cutlass loads)."""

import pytest

import cutecourse  # noqa: F401


# -- GPU markers ----------------------------------------------------------------------------------
# ``@pytest.mark.gpu`` (a Hopper GPU, sm_90a), ``@pytest.mark.gpu("sm_100a")``,
# ``@pytest.mark.gpu("any")`` (any CUDA GPU of sm_80 or newer) or ``@pytest.mark.gpu("sm_90a",
# "sm_100a")`` (either): the test runs only where cutecourse.modes would run kernels for that
# target, and is reported as skipped, with the reason, everywhere else. ``@pytest.mark.no_gpu``
# (same arguments) is the mirror image, for the compile-only path (a refusal with a DeviceError)
# that a machine able to run the target cannot take.
GPU_DEFAULT_TARGET = "sm_90a"


def _alternatives(item, name: str) -> list:
    """One tuple of targets per ``name`` marker on ``item``. A bare marker counts only when no
    marker of that name names a target: ``@pytest.mark.gpu`` stacked on
    ``@pytest.mark.gpu("sm_100a")`` means sm_100a."""
    named = [tuple(m.args) for m in item.iter_markers(name)]
    if not named:
        return []
    return [t for t in named if t] or [(GPU_DEFAULT_TARGET,)]


def pytest_collection_modifyitems(config, items):
    modes = {}

    def mode(target):
        if target not in modes:
            modes[target] = cutecourse.modes.mode_for(target)
        return modes[target]

    for item in items:
        for targets in _alternatives(item, "gpu"):
            if not any(mode(t).run for t in targets):
                why = "; ".join(dict.fromkeys(mode(t).reason for t in targets))
                item.add_marker(pytest.mark.skip(reason=f"needs a GPU for {' or '.join(targets)}: {why}"))
        for targets in _alternatives(item, "no_gpu"):
            running = [t for t in targets if mode(t).run]
            if running:
                item.add_marker(pytest.mark.skip(
                    reason=f"checks the compile-only path, but this machine runs {running[0]} "
                           f"({mode(running[0]).reason})"))


def far_from_torch(results):
    """The rows of a dense GEMM's GPU check (columns: ..., A dtype, C dtype, ..., max relative error
    against torch) above their bound: 2e-2 where bf16 is an input or the output, else 5e-3."""
    return [r for r in results if not r[-1] < (2e-2 if "bfloat16" in (r[3] + r[4]) else 5e-3)]


def _run_gpu_script(script: str, cases, timeout: float = 300):
    """Run a GPU check ``script`` (a module under tests/gpu, run with -m, or a script's text;
    argv[1]: the JSON ``cases``) in a child process; return the JSON it prints after ``RESULT``.
    A pipeline that deadlocks fails this test (killed at ``timeout``), not the test run, and so
    does a crash (illegal instruction)."""
    import json

    from cutecourse.child import run_child

    module = script if "\n" not in script else None
    run = run_child(module, timeout=timeout, source=None if module else script, argv=[json.dumps(cases)])
    assert not run.hang, f"no result in {timeout:.0f} s (a hang?): " + run.log[-2000:]
    assert run.ok, run.stdout[-2000:] + run.stderr[-3000:]
    return json.loads(run.stdout.split("RESULT", 1)[1])


@pytest.fixture
def run_gpu_script():
    """``run_gpu_script(script, cases, timeout=300)``: see :func:`_run_gpu_script`."""
    return _run_gpu_script


@pytest.fixture
def run_pdl_chain():
    """``run_pdl_chain(module, p, options)``: for each launcher-keyword dict in ``options``, 20
    chains of three PDL launches of ``module.launcher`` without syncs (read after write, write
    after read; the second GEMM is 4096 x ``p``), in a subprocess; returns [options, mismatches]
    per dict."""
    return lambda module, p, options: _run_gpu_script("tests.gpu.pdl_chain", [[module, p, o] for o in options])
