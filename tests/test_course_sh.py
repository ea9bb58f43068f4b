"""``./course.sh`` as a learner and a teacher meet it: help, the macOS stop, and JupyterLab.

The lab tests start the real server, as root where CI runs as root (course.sh must add
``--allow-root`` itself), in the already set-up ``.venv`` (the one running these tests, or
``CUTECOURSE_VENV``): a set-up whose stamp matches the pins is skipped, so the second start, with
every package index unreachable, must come up too. Each server runs in its own process group, is
polled on ``/api`` with a deadline, and is killed by that group: no test can hang.
"""

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COURSE_SH = ROOT / "course.sh"
COMMANDS = ("lab", "test", "check", "site", "handout", "setup", "room")


def _run(*args, env=None, timeout=60):
    return subprocess.run(["bash", str(COURSE_SH), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env or dict(os.environ))


def test_help_lists_every_command():
    proc = _run("--help")
    assert proc.returncode == 0, proc.stderr
    for cmd in COMMANDS:
        assert f"\n  {cmd} " in proc.stdout, cmd
    assert _run("-h").stdout == proc.stdout


@pytest.mark.parametrize("cmd", COMMANDS)
def test_help_for_each_command(cmd, tmp_path):
    env = dict(os.environ, CUTECOURSE_VENV=str(tmp_path / "none"))  # help must install nothing
    proc = _run(cmd, "--help", env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: ./course.sh {cmd}"), proc.stdout
    assert not (tmp_path / "none").exists()


def test_usage_points_at_headings_that_exist():
    """Every "(FILE, "Heading")" the usage text names is a heading of that file."""
    import re

    usage = _run("--help").stdout.replace("\n", " ")
    refs = re.findall(r'\(([\w/.]+\.md), "([^"]+)"\)', usage)
    assert refs, "the usage names no section to read"
    for path, heading in refs:
        headings = [ln.lstrip("#").strip() for ln in (ROOT / path).read_text().splitlines()
                    if ln.startswith("#")]
        assert heading in headings, f"{path} has no heading {heading!r}"


def test_unknown_command_prints_usage_and_exits_2():
    proc = _run("bogus")
    assert proc.returncode == 2 and "usage: ./course.sh COMMAND" in proc.stderr


def test_macos_stops_with_what_works_instead(tmp_path):
    """On a Mac (uname says Darwin) no pip runs: the message says to read the site and run on a
    remote Linux machine through an SSH tunnel."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "uname").write_text("#!/bin/sh\necho Darwin\n")
    (fake / "uname").chmod(0o755)
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}", CUTECOURSE_VENV=str(tmp_path / "v"))
    for cmd in ("lab", "check"):
        proc = _run(cmd, env=env)
        assert proc.returncode == 1
        assert "macOS" in proc.stderr and "ssh -L 8888:localhost:8888" in proc.stderr
        assert "site" in proc.stderr and "WSL2" in proc.stderr and "Jupyter viewer" in proc.stderr
    assert not (tmp_path / "v").exists()


# -- JupyterLab ------------------------------------------------------------------------------------
def _venv() -> Path:
    return Path(os.environ.get("CUTECOURSE_VENV") or sys.prefix)


def pins_hash() -> str:
    """What course.sh writes into the stamp: its pins block and pyproject.toml."""
    lines = COURSE_SH.read_text().splitlines(keepends=True)
    i = next(k for k, ln in enumerate(lines) if ln.startswith("# -- pins:"))
    j = next(k for k, ln in enumerate(lines) if ln.startswith("# -- end of pins"))
    data = "".join(lines[i:j + 1]).encode() + (ROOT / "pyproject.toml").read_bytes()
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def set_up_venv():
    venv = _venv()
    stamp = venv / ".cutecourse-setup"
    if not (stamp.exists() and stamp.read_text().splitlines()[:1] == [pins_hash()]):
        msg = (f"{venv} has no set-up stamp matching the pins: run ./course.sh setup first "
               "(these tests must not install anything)")
        if os.environ.get("CI"):
            pytest.fail(msg)  # CI ran ./course.sh test, which writes the stamp
        pytest.skip(msg)
    if not (venv / "bin" / "jupyter").exists():
        pytest.fail(f"{venv} has no jupyter: the lab extra is missing")
    return venv


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_lab(venv: Path, tmp_path: Path, extra_env: dict) -> tuple[int, str]:
    """Start ``./course.sh lab --no-browser --port P``; wait for ``/api`` to answer (90 s at most);
    return (P, what course.sh printed). The server is killed, with its process group, on the way out."""
    port = _free_port()
    env = dict(os.environ, CUTECOURSE_VENV=str(venv), JUPYTER_RUNTIME_DIR=str(tmp_path / "rt"),
               JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"), **extra_env)
    log = tmp_path / f"lab-{port}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(["bash", str(COURSE_SH), "lab", "--no-browser", "--port", str(port)],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline, answer = time.monotonic() + 90, None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api", timeout=2) as r:
                    answer = json.loads(r.read())
                    break
            except OSError:
                time.sleep(0.5)
        text = log.read_text()
        assert answer and "version" in answer, f"JupyterLab did not answer on {port}:\n{text[-3000:]}"
        return port, text
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def test_lab_starts_a_server_that_answers_on_its_port(set_up_venv, tmp_path):
    port, out = _start_lab(set_up_venv, tmp_path, {})
    assert "matches the pins" in out, "set-up was not skipped"
    assert f"ssh -L {port}:localhost:{port}" in out, "no SSH-tunnel recipe for a remote server"
    first = "/lab/tree/notebooks/01_layouts_and_elementwise_add.ipynb?token="
    assert f"http://localhost:{port}{first}" in out, "the printed URL does not open notebook 01"
    if os.geteuid() == 0:
        assert "running as root" in out and "--allow-root" in out


def test_lab_starts_with_every_package_index_unreachable(set_up_venv, tmp_path):
    """Offline on the day: the stamp says the set-up is done, so no pip runs and the lab starts."""
    offline = {"PIP_INDEX_URL": "http://127.0.0.1:9/", "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "",
               "PIP_EXTRA_INDEX_URL": "", "CUTECOURSE_TORCH_INDEX": "http://127.0.0.1:9/"}
    _, out = _start_lab(set_up_venv, tmp_path, offline)
    assert "matches the pins" in out and "installing" not in out


def test_lab_refuses_a_taken_port_and_names_a_free_one(set_up_venv, tmp_path):
    """Two learners on one server, one port: the second must not be moved to another port while
    its SSH recipe names the first (it would tunnel into the other learner's server)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = dict(os.environ, CUTECOURSE_VENV=str(set_up_venv), JUPYTER_RUNTIME_DIR=str(tmp_path))
        proc = _run("lab", "--no-browser", "--port", str(port), env=env)
    assert proc.returncode == 1
    assert f"port {port} is taken" in proc.stderr and "./course.sh lab --port " in proc.stderr
    assert "ssh -L" not in proc.stdout, "a recipe was printed for a server that did not start"
    assert "--ServerApp.port_retries=0" in COURSE_SH.read_text()  # and the race after the check


# -- set-up: a re-install that fails keeps the old environment ----------------------------------------
def _fake_course(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of course.sh, pyproject.toml and torch_build.py, and a .venv whose python runs
    the course (exit 0) but whose pip fails as it does offline."""
    repo = tmp_path / "course"
    (repo / "cutecourse").mkdir(parents=True)
    for f in ("course.sh", "pyproject.toml", "cutecourse/torch_build.py"):
        (repo / f).write_text((ROOT / f).read_text())
    (repo / "course.sh").chmod(0o755)
    py = repo / ".venv" / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text('#!/bin/sh\ncase "$*" in *pip*) echo "ERROR: No matching distribution found for setuptools>=68" >&2; exit 1 ;; esac\n'
                  'echo "ran: $*"\n')
    py.chmod(0o755)
    return repo, repo / ".venv" / ".cutecourse-setup"


def _stamp(repo: Path) -> str:
    """The stamp course.sh writes: the pins hash, then one hash per part."""
    lines = (repo / "course.sh").read_text().splitlines(keepends=True)
    i = next(k for k, ln in enumerate(lines) if ln.startswith("# -- pins:"))
    j = next(k for k, ln in enumerate(lines) if ln.startswith("# -- end of pins"))
    block, project = "".join(lines[i:j + 1]).encode(), (repo / "pyproject.toml").read_bytes()
    return (hashlib.sha256(block + project).hexdigest() + "\n"
            f"pins {hashlib.sha256(block).hexdigest()}\npyproject {hashlib.sha256(project).hexdigest()}\n")


@pytest.mark.parametrize("edit, why", [
    ("pyproject.toml", "pyproject.toml changed since set-up"),
    ("course.sh", "course.sh's pins changed since set-up"),
])
def test_a_failed_reinstall_says_why_and_keeps_the_old_environment(tmp_path, edit, why):
    repo, stamp = _fake_course(tmp_path)
    stamp.write_text(_stamp(repo))
    offline = dict(os.environ, PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_FIND_LINKS="",
                   CUTECOURSE_TORCH_INDEX="pypi")
    run = lambda *a: subprocess.run(["bash", str(repo / "course.sh"), *a], capture_output=True,
                                    text=True, timeout=60, env=offline)
    assert "matches the pins" in run("setup").stdout  # the stamp as course.sh writes it
    target = repo / edit
    text = target.read_text()
    target.write_text(text.replace('TORCH_VERSION=', 'TORCH_VERSION=9') if edit == "course.sh"
                      else text + "\n# a changed pin\n")
    before = stamp.read_text()
    proc = run("setup")
    assert proc.returncode == 1
    assert why in proc.stdout, proc.stdout
    assert "still works" in proc.stderr and why in proc.stderr, proc.stderr
    assert stamp.read_text() == before, "the stamp of the working set-up was removed"
    # lab, test, site and handout carry on with the old environment instead of stopping
    proc = run("handout", str(tmp_path / "out"))
    assert proc.returncode == 0 and "carrying on" in proc.stderr
    assert "ran: -m cutecourse.site.handout" in proc.stdout


def test_a_first_setup_that_fails_says_so_without_claiming_an_old_environment(tmp_path):
    repo, stamp = _fake_course(tmp_path)
    proc = subprocess.run(["bash", str(repo / "course.sh"), "setup"], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, CUTECOURSE_TORCH_INDEX="pypi"))
    assert proc.returncode == 1 and "first set-up" not in proc.stderr
    assert "set-up: FAILED" in proc.stderr and "still works" not in proc.stderr
    assert not stamp.exists()
