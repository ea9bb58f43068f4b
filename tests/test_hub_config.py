"""The room's pieces that need neither root nor a running hub: the roster, the hub's
configuration as JupyterHub loads it, and the roll-up's environment kept in step with it.
(tests/test_room_hub.py runs the whole room, as root.)"""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from traitlets.config import Config

from cutecourse.hub import FIRST_NOTEBOOK, accounts, rollup, shared_env

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "cutecourse" / "hub" / "jupyterhub_config.py"


def test_roster_reads_names_and_skips_comments(tmp_path):
    f = tmp_path / "roster.txt"
    f.write_text("# day one\nada\n\n  grace   # the second\nalan-t\n")
    assert accounts.read_roster(f) == ["ada", "grace", "alan-t"]


@pytest.mark.parametrize("text, words", [
    ("ada\nGrace Hopper\n", ["line 2", "'Grace Hopper'", "lowercase"]),
    ("ada\nal\n", ["line 2", "3 to 32 characters"]),
    ("ada\nada\n", ["line 2", "twice"]),
    ("# nobody\n\n", ["names no learner"]),
])
def test_a_bad_roster_names_the_line_and_the_fix(tmp_path, text, words):
    f = tmp_path / "roster.txt"
    f.write_text(text)
    with pytest.raises(accounts.RosterError) as err:
        accounts.read_roster(f)
    for w in words:
        assert w in str(err.value)


def test_a_missing_roster_says_what_to_give(tmp_path):
    with pytest.raises(accounts.RosterError, match="one learner's account name a line"):
        accounts.read_roster(tmp_path / "none.txt")


def test_passwords_are_readable_off_paper():
    pw = accounts.new_password()
    assert len(pw) == 10 and not set(pw) & set("0O1lI")


def _load(tmp_path, gpu="compile", **more):
    """Load the configuration as ``jupyterhub -f`` does: a ``c`` and ``__file__``, nothing else."""
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "api_token").write_text("t0ken\n")
    room = {"env": "/opt/r/env", "learner": "/opt/r/learner", "learners": ["ada", "grace"],
            "teacher": "root", "ip": "127.0.0.1", "port": 8123, "gpu": gpu,
            "gpu_queue": "/opt/r/gpu-queue", "proxy": "/usr/bin/chp", "home_folder": "cutecourse",
            "first_notebook": FIRST_NOTEBOOK, "ssl_cert": None, "ssl_key": None, "prefix": "/opt/r", **more}
    (tmp_path / "room.json").write_text(json.dumps(room))
    config_file = tmp_path / "jupyterhub_config.py"
    config_file.write_text(CONFIG.read_text())
    c = Config()
    exec(compile(config_file.read_text(), str(config_file), "exec"), {"c": c, "__file__": str(config_file)})
    return c, room


def _env_for(c, name, monkeypatch):
    """The environment the hub gives ``name``'s server: what the pre-spawn hook sets (its copies,
    made with runuser, are recorded instead of run)."""
    ran = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: ran.append(cmd))
    spawner = SimpleNamespace(user=SimpleNamespace(name=name), environment={})
    c.Spawner.pre_spawn_hook(spawner)
    assert ran and all(cmd[:4] == ["runuser", "-u", name, "--"] for cmd in ran)  # never as root
    return spawner.environment


def test_config_sets_up_the_hub_the_room_chose(tmp_path):
    c, room = _load(tmp_path)
    assert c.JupyterHub.bind_url == "http://127.0.0.1:8123"
    assert c.JupyterHub.hub_port == 8124 and c.ConfigurableHTTPProxy.api_url.endswith(":8125")
    assert c.Authenticator.allowed_users == {"ada", "grace", "root"}
    assert c.Authenticator.admin_users == {"root"}
    assert c.Spawner.cmd == ["/opt/r/env/bin/jupyterhub-singleuser"]
    assert c.Spawner.default_url == f"/lab/tree/{FIRST_NOTEBOOK}"
    assert c.Spawner.notebook_dir == "~/cutecourse"
    assert "PATH" not in c.Spawner.env_keep  # root's PATH never reaches a learner
    assert all(len(r["name"]) >= 3 for r in c.JupyterHub.load_roles)
    assert c.JupyterHub.services[0]["api_token"] == "t0ken"


def test_config_https_when_given_a_certificate(tmp_path):
    c, _ = _load(tmp_path, ssl_cert="/etc/ssl/r.crt", ssl_key="/etc/ssl/r.key")
    assert c.JupyterHub.bind_url.startswith("https://")
    assert c.JupyterHub.ssl_cert == "/etc/ssl/r.crt" and c.JupyterHub.ssl_key == "/etc/ssl/r.key"


def test_compile_mode_for_learners_and_not_for_the_teacher(tmp_path, monkeypatch):
    c, _ = _load(tmp_path, gpu="compile", teacher="someone-else")  # root plays a learner
    assert _env_for(c, "root", monkeypatch)["CUTECOURSE_MODE"] == "compile"
    (tmp_path / "teacher").mkdir()
    c, _ = _load(tmp_path / "teacher", gpu="compile")  # root is the teacher here
    teacher = _env_for(c, "root", monkeypatch)
    assert "CUTECOURSE_MODE" not in teacher
    assert teacher["PATH"].startswith("/opt/r/env/bin:")
    assert teacher["CUTE_DSL_CACHE_DIR"] == "/root/.cache/cutlass_python_cache"
    assert "CUTECOURSE_GPU_QUEUE" not in teacher


def test_queue_mode_gives_everyone_the_queue(tmp_path, monkeypatch):
    c, _ = _load(tmp_path, gpu="queue")
    env = _env_for(c, "root", monkeypatch)
    assert env["CUTECOURSE_GPU_QUEUE"] == "/opt/r/gpu-queue" and "CUTECOURSE_MODE" not in env


@pytest.mark.parametrize("gpu", ["compile", "queue"])
def test_rollup_checks_a_learner_in_the_environment_their_server_gets(tmp_path, gpu, monkeypatch):
    c, room = _load(tmp_path, gpu=gpu, teacher="someone-else")  # root plays a learner
    ran = []
    monkeypatch.setattr(rollup.subprocess, "run", lambda cmd, **kw: ran.append(cmd) or
                        SimpleNamespace(stdout="{}", returncode=0))
    rollup.check_as(room, "root", tmp_path / "root.json")
    env = dict(a.split("=", 1) for a in ran[0][ran[0].index("-i") + 1:] if "=" in a)
    assert env == _env_for(c, "root", monkeypatch)


def test_the_environment_is_rebuilt_only_when_the_learner_edition_changes(tmp_path):
    z = tmp_path / "learner.zip"
    with zipfile.ZipFile(z, "w") as f:
        f.writestr("course.sh", "a")
    first = shared_env.stamp_of(z, "/usr/bin/python3")
    assert shared_env.stamp_of(z, "/usr/bin/python3") == first
    with zipfile.ZipFile(z, "a") as f:
        f.writestr("notebooks/01.ipynb", "{}")
    assert shared_env.stamp_of(z, "/usr/bin/python3") != first
    assert shared_env.stamp_of(z, "/usr/local/bin/python3") != shared_env.stamp_of(z, "/usr/bin/python3")


def test_course_sh_accepts_the_stamp_the_room_writes(tmp_path):
    """The room writes course.sh's stamp into its environment, so a learner's ./course.sh (with
    CUTECOURSE_VENV pointing there) finds it set up instead of installing a .venv of its own."""
    for f in ("course.sh", "pyproject.toml"):
        (tmp_path / f).write_text((ROOT / f).read_text())
    venv = tmp_path / "env"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("#!/bin/sh\nexit 0\n")
    (venv / "bin" / "python").chmod(0o755)
    (venv / ".cutecourse-setup").write_text(
        shared_env.course_pins_hash(tmp_path / "course.sh", tmp_path / "pyproject.toml") + "\n")
    proc = subprocess.run(["bash", str(tmp_path / "course.sh"), "setup"], capture_output=True, text=True,
                          env=dict(os.environ, CUTECOURSE_VENV=str(venv)), timeout=60)
    assert proc.returncode == 0 and "matches the pins" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="as root, setup would really run")
def test_setup_as_a_learner_says_to_run_it_as_root(tmp_path):
    (tmp_path / "r.txt").write_text("ada\n")
    proc = subprocess.run([sys.executable, "-m", "cutecourse.hub", "setup", "--roster", str(tmp_path / "r.txt"),
                           "--teacher", "anna", "--prefix", str(tmp_path / "room")],
                          capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 1 and "run it as root" in proc.stderr
