"""The run-or-compile decision, and the DSL arch fixed at import."""

import os
import subprocess
import sys

import pytest

import cutecourse
from cutecourse import errors, modes


def _fake_gpu(monkeypatch, name, capability):
    monkeypatch.setattr(modes, "gpu", lambda: modes.Gpu(name, capability, 132))


def test_no_gpu_means_compile_mode_with_a_reason(monkeypatch):
    monkeypatch.setattr(modes, "gpu", lambda: None)
    m = modes.mode_for("sm_90a")
    assert not m.run and m.arch == "sm_90a" and "no GPU" in m.reason
    assert m.banner().startswith("CPU mode") and "sm_90a" in m.banner()
    with pytest.raises(errors.DeviceError, match="compile-and-inspect"):
        modes.require_gpu("sm_90a")


def test_hopper_runs_hopper_kernels_but_only_compiles_blackwell_ones(monkeypatch):
    _fake_gpu(monkeypatch, "NVIDIA H100 80GB HBM3", (9, 0))
    assert modes.mode_for("sm_90a").run
    assert modes.mode_for("any").run
    bw = modes.mode_for("sm_100a")
    assert not bw.run and bw.arch == "sm_100a" and "not sm_100a" in bw.reason


def test_older_gpu_compiles_only(monkeypatch):
    _fake_gpu(monkeypatch, "Tesla T4", (7, 5))
    assert not modes.mode_for("any").run
    assert not modes.mode_for("sm_90a").run


def test_forced_compile_mode(monkeypatch):
    _fake_gpu(monkeypatch, "NVIDIA H100 80GB HBM3", (9, 0))
    monkeypatch.setenv("CUTECOURSE_MODE", "compile")
    m = modes.mode_for("sm_90a")
    assert not m.run and "CUTECOURSE_MODE" in m.reason


def test_unknown_target():
    with pytest.raises(ValueError, match="unknown target"):
        modes.mode_for("sm_75")


def test_arch_names_of_capabilities():
    assert modes.Gpu("x", (9, 0), 1).arch == "sm_90a"
    assert modes.Gpu("x", (10, 0), 1).arch == "sm_100a"
    assert modes.Gpu("x", (8, 6), 1).arch == "sm_86"


def test_import_sets_the_dsl_arch_before_cutlass():
    assert os.environ["CUTE_DSL_ARCH"] == cutecourse.ARCH


def test_the_dsl_reads_its_arch_once_per_process():
    """Why cutecourse.inspect compiles other archs in a fresh process: changing CUTE_DSL_ARCH
    after import does not change what the DSL compiles for."""
    code = (
        "import os, cutecourse\n"
        "from cutecourse.kernels import elementwise as ew\n"
        "from cutecourse.inspect import compile_here\n"
        "fn, args, kw = ew.compile_target(m=64, n=64)\n"
        "os.environ['CUTE_DSL_ARCH'] = 'sm_100a'\n"
        "print(compile_here(fn, *args, **kw).ptx.split('.target')[1].split()[0])\n"
    )
    env = dict(os.environ, CUTE_DSL_ARCH="sm_90a")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.strip().splitlines()[-1] == "sm_90a", out.stderr[-2000:]
