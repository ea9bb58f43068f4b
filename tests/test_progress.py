"""A learner's progress: every check's verdict in the learner's own file, never in the way."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cutecourse import progress
from cutecourse.exercises import checker, failed, passed

ROOT = Path(__file__).resolve().parent.parent


def _a_check(module="cutecourse.exercises.nb03", name="check_phase", title="the phase bit"):
    """A checker as the nbNN modules write them, defined as if in ``module``."""
    def check(answer):
        if answer is None:
            raise NotImplementedError
        if answer == "boom":
            raise ZeroDivisionError("division by zero")
        return passed(title) if answer == 42 else failed(title, f"{answer} is not 42")

    check.__module__, check.__name__, check.__qualname__ = module, name, name
    return checker(title)(check)


def test_each_verdict_is_recorded_and_the_latest_counts(monkeypatch, tmp_path):
    file = tmp_path / "home" / ".cutecourse" / "progress.json"
    monkeypatch.setenv("CUTECOURSE_PROGRESS", str(file))
    monkeypatch.setenv("CUTECOURSE_LEARNER", "alice")
    check = _a_check()
    assert not check(None)  # not answered yet: a failing verdict too
    assert check(42)
    entry = json.loads(file.read_text())["exercises"]["nb03.check_phase"]
    assert entry["ok"] is True and entry["notebook"] == "03" and entry["title"] == "the phase bit"
    assert entry["tries"] == 2 and entry["first_passed"] == entry["when"]
    assert not check("boom")  # the learner's code raised: recorded as a fail
    data = progress.read(file)
    assert data["learner"] == "alice"
    entry = data["exercises"]["nb03.check_phase"]
    assert entry["ok"] is False and entry["tries"] == 3 and "first_passed" in entry
    assert progress.passed(data, ["nb03.check_phase"]) == 0


def test_a_file_that_cannot_be_written_never_fails_the_check(monkeypatch, tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    monkeypatch.setenv("CUTECOURSE_PROGRESS", str(tmp_path / "a-file" / "progress.json"))
    result = _a_check()(42)
    assert result.ok and result.title == "the phase bit"
    assert progress.record("cutecourse.exercises.nb03", "check_phase", "t", True) is False


def test_where_progress_goes(monkeypatch, tmp_path):
    monkeypatch.setenv("CUTECOURSE_PROGRESS", "off")
    assert progress.path() is None and progress.record("x.nb03", "check_a", "t", True) is False
    monkeypatch.delenv("CUTECOURSE_PROGRESS")
    assert progress.path() is None, "a test run (PYTEST_CURRENT_TEST) records nothing by default"
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert progress.path() == tmp_path / ".cutecourse" / "progress.json"


def test_the_learner_is_named_by_the_variable_or_the_user(monkeypatch):
    monkeypatch.setenv("CUTECOURSE_LEARNER", "  bob ")
    assert progress.learner() == "bob"
    monkeypatch.delenv("CUTECOURSE_LEARNER")
    import getpass

    assert progress.learner() == getpass.getuser()


@pytest.mark.parametrize("module, notebook", [
    ("cutecourse.exercises.nb03", "03"), ("cutecourse.exercises.nb07_kernels", "07"),
    ("cutecourse.exercises.nb01_extra", "01"), ("cutecourse.exercises.kernel_check", None),
])
def test_the_notebook_of_a_checker_module(module, notebook):
    assert progress.notebook_of(module) == notebook


def test_the_exercises_counted_are_the_checkers_the_exercise_notebooks_call():
    """Totals come from the exercise notebooks' check cells; each call there is a recording
    checker (``@checker``) defined in the module it is called through, and every checker an
    exercises module defines is called by some exercise notebook, so each total is reachable."""
    found = progress.exercises(ROOT)
    assert sorted(found) == ["01", "02", "03", "04", "05", "06", "07", "08"]
    called = set()
    for notebook, keys in found.items():
        for key in keys:
            module, function = key.split(".")
            fn = getattr(importlib.import_module(f"cutecourse.exercises.{module}"), function)
            assert hasattr(fn, "__wrapped__") and fn.__module__.endswith(module), key
            assert progress.notebook_of(module) == notebook
            called.add(key)
    defined = set()
    for path in sorted((ROOT / "cutecourse" / "exercises").glob("nb[0-9][0-9]*.py")):
        mod = importlib.import_module(f"cutecourse.exercises.{path.stem}")
        defined |= {progress.exercise_key(path.stem, fn.__name__) for name, fn in vars(mod).items()
                    if name.startswith("check_") and getattr(fn, "__module__", "") == mod.__name__
                    and hasattr(fn, "__wrapped__")}
    assert defined == called, (f"checkers no exercise calls: {defined - called}; "
                               f"calls without a checker: {called - defined}")


def test_two_notebooks_of_one_learner_checking_at_once_lose_no_verdict(tmp_path):
    file = tmp_path / "progress.json"
    code = textwrap.dedent("""
        import sys
        from cutecourse import progress
        for i in range(25):
            progress.record("cutecourse.exercises.nb0" + sys.argv[1], "check_x", "x", i % 2 == 0)
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT), CUTECOURSE_PROGRESS=str(file), CUTECOURSE_MODE="compile")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(n)], env=env) for n in (3, 4)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    data = progress.read(file)
    assert data["exercises"]["nb03.check_x"]["tries"] == 25 == data["exercises"]["nb04.check_x"]["tries"]
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["progress.json"]


def test_an_unreadable_progress_file_reads_as_empty(tmp_path):
    (tmp_path / "p.json").write_text("{half a file")
    assert progress.read(tmp_path / "p.json")["exercises"] == {}
    assert progress.read(tmp_path / "missing.json")["exercises"] == {}
    assert progress.record("cutecourse.exercises.nb02", "check_y", "y", True, file=tmp_path / "p.json")
    assert progress.read(tmp_path / "p.json")["exercises"]["nb02.check_y"]["ok"] is True
