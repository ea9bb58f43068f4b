"""./course.sh check: the seat check's report on this machine, and its error paths.

On this CPU machine the check must pass and say that every notebook compiles and inspects; each
way a seat can be broken (no DSL, the wrong DSL release, a DSL that does not import, no torch, a
compile that fails or makes the wrong code, a GPU torch cannot see, too old a Python) is forced
with monkeypatch and must give a FAIL or WARN line with a fix, and exit code 1 where the seat
cannot follow the course.
"""

import collections
import os
import subprocess
import sys
from pathlib import Path

import pytest

import cutecourse
from cutecourse import check, course, modes, progress
from cutecourse.errors import CompileError

ROOT = Path(__file__).resolve().parent.parent


def _by_label(lines):
    return {ln.label: ln for ln in lines}


@pytest.mark.slow
def test_course_sh_check_on_this_machine():
    """The real command, as a teacher runs it: versions, two compiles, the table, READY, rc 0."""
    env = dict(os.environ, CUTECOURSE_VENV=os.path.dirname(os.path.dirname(sys.executable)))
    proc = subprocess.run(["bash", str(ROOT / "course.sh"), "check"], capture_output=True,
                          text=True, timeout=120, env=env, cwd=ROOT)
    out = proc.stdout
    assert proc.returncode == (0 if "READY (" in out else 1), out + proc.stderr
    assert f"nvidia-cutlass-dsl {cutecourse.DSL_VERSION}" in out
    for arch in ("sm_90a", "sm_100a"):
        assert any(ln.split()[:2] == ["ok", arch] for ln in out.splitlines()), out
    for nb in course.NOTEBOOKS:
        assert f"{nb.number} {nb.title}" in out
    if modes.gpu() is None:  # this machine (CI, developers): no GPU, every kernel compiles
        assert proc.returncode == 0, out
        assert "READY (no-GPU track" in out
        assert "runs its kernels" not in out


def test_course_sh_check_before_the_venv_exists(tmp_path):
    """No .venv: the check runs on the system Python and says how to set the course up."""
    env = dict(os.environ, CUTECOURSE_VENV=str(tmp_path / "no-venv"), PYTHON=sys.executable)
    proc = subprocess.run(["bash", str(ROOT / "course.sh"), "check"], capture_output=True,
                          text=True, timeout=120, env=env, cwd=ROOT)
    assert "No " in proc.stdout and "yet: checking" in proc.stdout
    assert "./course.sh lab sets the course up" in proc.stdout
    assert not (tmp_path / "no-venv").exists(), "check must not install anything"


def test_course_sh_check_rejects_unknown_options():
    proc = subprocess.run(["bash", str(ROOT / "course.sh"), "check", "--bogus"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env=dict(os.environ, CUTECOURSE_VENV=os.path.dirname(os.path.dirname(sys.executable))))
    assert proc.returncode == 2 and "usage: ./course.sh check [--notebooks]" in proc.stderr


# -- error paths ----------------------------------------------------------------------------------
def test_dsl_missing(monkeypatch):
    monkeypatch.setattr(check, "_version", lambda dist: None)
    line = check.check_dsl()
    assert line.status == "fail" and "not installed" in line.detail and "./course.sh lab" in line.fix


def test_dsl_wrong_release(monkeypatch):
    monkeypatch.setattr(check, "_version", lambda dist: "4.9.0")
    line = check.check_dsl()
    assert line.status == "fail"
    assert "4.9.0" in line.detail and cutecourse.DSL_VERSION in line.detail
    assert f"nvidia-cutlass-dsl=={cutecourse.DSL_VERSION}" in line.fix


def _failing_import(name_to_fail, message):
    real = check.importlib.import_module

    def fake(name, *a, **k):
        if name == name_to_fail:
            raise ImportError(message)
        return real(name, *a, **k)
    return fake


def test_dsl_that_does_not_import(monkeypatch):
    monkeypatch.setattr(check.importlib, "import_module",
                        _failing_import("cutlass", "libcuda.so.1: cannot open shared object file"))
    line = check.check_dsl()
    assert line.status == "fail" and "libcuda.so.1" in line.detail and "--force-reinstall" in line.fix


def test_torch_missing(monkeypatch):
    monkeypatch.setattr(check.importlib, "import_module", _failing_import("torch", "No module named 'torch'"))
    line = check.check_torch()
    assert line.status == "fail" and line.fix == check.SETUP_FIX


def test_packages_missing(monkeypatch):
    monkeypatch.setattr(check, "_version", lambda dist: None if dist == "jupyterlab" else "1.0")
    lines = _by_label(check.check_packages())
    assert lines["jupyterlab"].status == "fail" and lines["ipywidgets"].status == "ok"


def test_python_too_old(monkeypatch):
    V = collections.namedtuple("V", "major minor micro releaselevel serial")
    monkeypatch.setattr(check.sys, "version_info", V(3, 9, 18, "final", 0))
    line = check.check_python()
    assert line.status == "fail" and "3.10 or newer" in line.detail and "PYTHON=" in line.fix


def test_compile_failure_is_a_fail_line_with_a_fix(monkeypatch):
    from cutecourse import inspect

    def broken(target, arch="sm_90a", **kw):
        raise CompileError(f"{target} did not compile for {arch}: ptxas fatal", "see the log")

    monkeypatch.setattr(inspect, "compile_report", broken)
    lines = check.check_compiles(dsl_ok=True)
    assert [ln.status for ln in lines] == ["fail", "fail"]
    assert "ptxas fatal" in lines[0].detail and "reinstall" in lines[0].fix


def test_compile_without_the_architectures_instructions_fails(monkeypatch):
    from cutecourse import inspect

    class Plain:
        def features(self):
            return {"wgmma": 0, "TMA loads": 0, "block-scaled MMA": 0, "tensormap.replace": 0}

    monkeypatch.setattr(inspect, "compile_report", lambda target, arch="sm_90a", **kw: Plain())
    lines = check.check_compiles(dsl_ok=True)
    assert all(ln.status == "fail" and "lacks" in ln.detail for ln in lines)
    assert "CUTE_DSL_ARCH" in lines[0].fix


def test_no_compile_without_the_dsl():
    lines = check.check_compiles(dsl_ok=False)
    assert [ln.label for ln in lines] == ["sm_90a", "sm_100a"]
    assert all(ln.status == "fail" for ln in lines)


def test_gpu_that_torch_cannot_see_is_a_warning(monkeypatch):
    monkeypatch.setattr(check, "_nvidia_smi", lambda: ["NVIDIA H100 80GB HBM3, 550.54.15"])
    monkeypatch.setattr(modes, "gpu", lambda: None)
    monkeypatch.setattr(check, "mismatch_fix", lambda driver: f"fix for driver {driver.strip()}")
    lines = _by_label(check.check_gpu())
    assert lines["GPU"].status == "warn" and lines["GPU"].fix == "fix for driver 550.54.15"
    assert lines["driver"].status == "ok" and lines["driver"].detail == "550.54.15 (NVIDIA H100 80GB HBM3)"


def test_no_gpu_is_information_not_a_failure(monkeypatch):
    monkeypatch.setattr(check, "_nvidia_smi", lambda: None)
    monkeypatch.setattr(modes, "gpu", lambda: None)
    lines = _by_label(check.check_gpu())
    assert lines["GPU"].status == "info" and lines["driver"].status == "info"


@pytest.mark.parametrize("gpu, expected", [
    (modes.Gpu("NVIDIA H100 80GB HBM3", (9, 0), 132),
     ["runs"] * 6 + ["Hopper kernels: runs its kernels; Blackwell kernels: compiles for sm_100a", "runs"]),
    (modes.Gpu("NVIDIA B200", (10, 0), 148),
     ["runs"] * 2 + ["compiles for sm_90a"] * 4
     + ["Hopper kernels: compiles for sm_90a and inspects; Blackwell kernels: runs", "compiles for sm_90a"]),
])
def test_notebook_table_follows_the_gpu(monkeypatch, gpu, expected):
    """The tracks of docs/workshop.md: on an H100 all but the Blackwell kernel run; on a B200
    notebooks 01-02 and 07's Blackwell kernel run, the Hopper kernels compile."""
    monkeypatch.delenv("CUTECOURSE_MODE", raising=False)
    monkeypatch.setattr(modes, "gpu", lambda: gpu)
    rows = check.notebook_modes()
    assert len(rows) == len(expected)
    for (name, what), want in zip(rows, expected):
        assert what.startswith(want), (name, what)


def test_gpu_run_failure_is_reported(monkeypatch):
    monkeypatch.setattr(modes, "gpu", lambda: modes.Gpu("NVIDIA H100 80GB HBM3", (9, 0), 132))
    monkeypatch.delenv("CUTECOURSE_MODE", raising=False)
    monkeypatch.setattr(check.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(
        a, 1, "", "RuntimeError: CUDA driver version is insufficient for CUDA runtime version"))
    line = check.check_run()
    assert line.status == "fail" and "insufficient" in line.detail and "driver" in line.fix


def test_exit_code_and_verdict(monkeypatch, capsys):
    monkeypatch.setattr(check, "collect", lambda notebooks=False: [
        check.Line("Python", "ok", "3.11"), check.Line("torch", "ok", "2.13"),
        check.Line("CuTe DSL", "fail", "nvidia-cutlass-dsl is not installed", check.SETUP_FIX),
        check.Line("sm_90a", "fail", "not compiled", check.SETUP_FIX)])
    assert check.main([]) == 1
    out = capsys.readouterr().out
    assert "NOT READY: CuTe DSL, sm_90a failed" in out
    assert out.count(check.SETUP_FIX) == 1, "the same fix is printed once"


_ROOM = [check.Line("Python", "ok", "3.11.7 (/x/python)"), check.Line("CuTe DSL", "ok", "nvidia-cutlass-dsl 4.8.1 (the release)"),
         check.Line("torch", "ok", "2.13.0+cpu (CPU-only build)"), check.Line("sm_90a", "ok", "compiled")]


def test_json_is_one_object_a_teacher_can_collect(monkeypatch, capsys):
    import json

    monkeypatch.setattr(check, "collect", lambda notebooks=False: list(_ROOM))
    monkeypatch.setattr(check, "notebook_modes", lambda: [("01 Layouts", "compiles for sm_90a and inspects")])
    assert check.main(["--json"]) == 0
    seat = json.loads(capsys.readouterr().out)
    assert seat["ready"] is True and seat["track"] == "no-gpu" and seat["host"]
    assert seat["learner"] == progress.learner() and seat["progress"] == {}
    assert [ln["label"] for ln in seat["lines"]] == ["Python", "CuTe DSL", "torch", "sm_90a"]
    assert seat["notebooks"] == [{"notebook": "01 Layouts", "here": "compiles for sm_90a and inspects"}]


def test_tabulate_is_the_room_roll_up_keyed_by_learner(monkeypatch, tmp_path, capsys):
    """``check --tabulate`` is ``python -m cutecourse.room``: two seats of one server (one host
    name) are two rows, named by their files."""
    import json

    from cutecourse import room

    seat = json.loads(room.seat_json(_ROOM, 12.0, [("01", "runs its kernels")]))
    for name in ("alice", "bob"):
        (tmp_path / f"{name}.json").write_text(json.dumps(seat))
    (tmp_path / "carol.json").write_text("Traceback: not json")
    rc = check.main(["--tabulate", *(str(tmp_path / f"{n}.json") for n in ("alice", "bob", "carol"))])
    out = capsys.readouterr().out
    assert rc == 1  # carol's file cannot be read
    assert [ln.split(" | ")[0] for ln in out.splitlines() if ln.startswith("| ") and " yes " in ln] \
        == ["| alice", "| bob"]
    assert "carol.json" in out and "not read" in out
    assert check.main(["--tabulate"]) == 2


def test_help_says_how_to_collect_the_room(capsys):
    assert check.main(["--help"]) == 0
    assert "--json" in capsys.readouterr().out


def test_before_torch_the_driver_and_the_torch_build_it_needs_are_shown(monkeypatch):
    """A teacher checking a GPU server before set-up learns the driver and which torch
    course.sh will install for it (nvidia-smi needs no torch)."""
    monkeypatch.setattr(check, "check_torch", lambda: check.Line("torch", "fail", "torch is not installed", check.SETUP_FIX))
    monkeypatch.setattr(check, "_nvidia_smi", lambda: ["NVIDIA H100 80GB HBM3, 550.54.15"])
    monkeypatch.setattr(check, "check_compiles", lambda dsl_ok: [])
    driver = _by_label(check.collect())["driver"]
    assert driver.status == "info" and "550.54.15" in driver.detail and "CUDA 12.8 build" in driver.detail


@pytest.mark.parametrize("smi", [["No devices were found"], ["NVIDIA-SMI has failed because it couldn't "
                                                            "communicate with the NVIDIA driver"]])
def test_an_nvidia_smi_line_without_a_comma_is_a_warning_not_a_traceback(monkeypatch, smi):
    monkeypatch.setattr(check, "_nvidia_smi", lambda: smi)
    monkeypatch.setattr(modes, "gpu", lambda: None)
    monkeypatch.delenv("CUTECOURSE_MODE", raising=False)
    lines = _by_label(check.check_gpu())
    assert lines["GPU"].status == "info", "a message is not a GPU name"
    assert lines["driver"].status == "warn" and smi[0][:40] in lines["driver"].detail
    assert "nvidia-smi should list the GPU" in lines["driver"].fix
    no_torch = check.Line("torch", "fail", "no torch", check.SETUP_FIX)
    monkeypatch.setattr(check, "check_torch", lambda: no_torch)
    monkeypatch.setattr(check, "check_compiles", lambda dsl_ok: [])
    assert "CPU build" in _by_label(check.collect())["driver"].detail


def test_compile_mode_reports_the_gpu_without_touching_it(monkeypatch):
    """CUTECOURSE_MODE=compile on a GPU server: the GPU line comes from nvidia-smi; torch is not
    asked (modes.gpu would initialise CUDA), and the verdict names compile mode."""
    monkeypatch.setenv("CUTECOURSE_MODE", "compile")
    monkeypatch.setattr(check, "_nvidia_smi", lambda: ["NVIDIA H100 80GB HBM3, 570.86.15"])
    monkeypatch.setattr(modes, "_probe_gpu", lambda: pytest.fail("compile mode asked CUDA for the GPU"))
    lines = _by_label(check.check_gpu())
    assert lines["GPU"].status == "info" and "not touched" in lines["GPU"].detail
    assert "H100" in lines["GPU"].detail and lines["driver"].detail.startswith("570.86.15")
    assert check.check_run() is None
    text = check.report(list(lines.values()), 3.0, check.notebook_modes())
    assert "READY (compile mode" in text and "runs its kernels" not in text


def test_the_reported_time_counts_from_the_start_of_the_process():
    """Imports before the check (torch's take seconds) are part of the wait: a process that
    sleeps 1.5 s before importing the check reports at least that."""
    code = "import time; time.sleep(1.5); from cutecourse import check; print(check.elapsed())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert 1.5 <= float(out.stdout.strip()) < 60, out.stdout + out.stderr


def test_every_check_is_kept_for_the_room(monkeypatch, tmp_path, capsys):
    """A plain check also leaves ~/.cutecourse/seat.json beside the progress file, which the
    roll-up of a shared server reads."""
    import json

    monkeypatch.setenv("CUTECOURSE_PROGRESS", str(tmp_path / ".cutecourse" / "progress.json"))
    monkeypatch.setenv("CUTECOURSE_LEARNER", "dana")
    monkeypatch.setattr(check, "collect", lambda notebooks=False: list(_ROOM))
    monkeypatch.setattr(check, "notebook_modes", lambda: [])
    assert check.main([]) == 0
    assert "READY" in capsys.readouterr().out
    seat = json.loads((tmp_path / ".cutecourse" / "seat.json").read_text())
    assert seat["learner"] == "dana" and seat["ready"] is True
