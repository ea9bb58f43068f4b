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
COMMANDS = ("lab", "test", "check", "site", "handout", "setup")


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
        assert "site" in proc.stderr and "WSL2" in proc.stderr
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
    if not (stamp.exists() and stamp.read_text().strip() == pins_hash()):
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
    if os.geteuid() == 0:
        assert "running as root" in out and "--allow-root" in out


def test_lab_starts_with_every_package_index_unreachable(set_up_venv, tmp_path):
    """Offline on the day: the stamp says the set-up is done, so no pip runs and the lab starts."""
    offline = {"PIP_INDEX_URL": "http://127.0.0.1:9/", "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "",
               "PIP_EXTRA_INDEX_URL": "", "CUTECOURSE_TORCH_INDEX": "http://127.0.0.1:9/"}
    _, out = _start_lab(set_up_venv, tmp_path, offline)
    assert "matches the pins" in out and "installing" not in out
