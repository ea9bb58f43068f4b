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


def test_compile_mode_never_asks_cuda(monkeypatch):
    """On a shared GPU every learner's kernel runs in compile mode: deciding it must not touch
    CUDA (torch.cuda.get_device_properties would create a context on the GPU)."""
    import torch

    def touched(*a, **k):
        raise AssertionError("compile mode asked torch.cuda")

    for name in ("is_available", "get_device_properties", "init", "device_count"):
        monkeypatch.setattr(torch.cuda, name, touched)
    monkeypatch.setattr(modes, "_probe_gpu", touched)
    monkeypatch.setenv("CUTECOURSE_MODE", "compile")
    monkeypatch.delenv("CUTE_DSL_ARCH", raising=False)
    for target in modes.ARCH_NAMES:
        m = modes.mode_for(target)
        assert not m.run and m.reason == "CUTECOURSE_MODE=compile is set"
    assert modes.gpu() is None and modes.process_arch() == modes.DEFAULT_ARCH
    assert modes.banner("sm_90a").banner().startswith("CPU mode: CUTECOURSE_MODE=compile")
    assert not modes.mode_for("sm_90a").run


def test_hidden_gpus_are_named_as_the_reason(monkeypatch):
    """CUDA_VISIBLE_DEVICES= (empty): the server-side way to the same mode, named in the banner."""
    import torch

    monkeypatch.setattr(modes, "gpu", lambda: None)
    monkeypatch.delenv("CUTECOURSE_MODE", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    assert "CUDA_VISIBLE_DEVICES='' hides every GPU" in modes.mode_for("sm_90a").reason


_UNTOUCHED = """
import os, subprocess, sys, torch
import cutecourse
from cutecourse import check, modes
from cutecourse.kernels import elementwise as ew
from cutecourse.inspect import compile_here
for target in modes.ARCH_NAMES:
    modes.banner(target)
fn, args, kw = ew.compile_target(m=256, n=256)
report = compile_here(fn, *args, **kw)
assert report.ptx, "nothing compiled"
check.check_gpu(), check.notebook_modes()
apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                      capture_output=True, text=True).stdout.split()
print("RESULT", torch.cuda.is_initialized(), str(os.getpid()) in apps)
"""


@pytest.mark.gpu("any")
def test_compile_mode_leaves_the_gpu_alone():
    """On a GPU machine, a learner's process in compile mode (banners, a kernel compiled in the
    process, the seat check's GPU line) initialises no CUDA in torch and holds no context on the
    GPU (nvidia-smi lists no compute process with its pid)."""
    env = dict(os.environ, CUTECOURSE_MODE="compile",
               PYTHONPATH=os.pathsep.join(filter(None, [
                   os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                   os.environ.get("PYTHONPATH", "")])))
    env.pop("CUTE_DSL_ARCH", None)
    out = subprocess.run([sys.executable, "-c", _UNTOUCHED], capture_output=True, text=True,
                         env=env, timeout=300)
    assert "RESULT" in out.stdout, out.stdout[-2000:] + out.stderr[-3000:]
    torch_init, listed = out.stdout.split("RESULT")[1].split()
    assert torch_init == "False", "torch initialised CUDA in compile mode"
    assert listed == "False", "the compile-mode process holds a CUDA context on the GPU"
