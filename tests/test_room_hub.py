"""A workshop room, for real: ``./course.sh room`` sets up JupyterHub with three learners and a
teacher, and each learner runs notebook 01 in their own server, as themselves.

What it proves, end to end (CI runs it as root; elsewhere it skips and says why):
* ``room setup`` makes the accounts (private homes), the shared read-only environment from
  the learner edition, and a hub that starts; ``room start`` brings it up on 127.0.0.1;
* a learner logs in with the first-use password ``setup`` set (PAM), and a wrong one is refused;
* each learner's server, spawned through the hub's REST API, opens on notebook 01 of their own
  copy (no ``solutions/``) and runs notebook 01 top to bottom in its kernel (compile mode, on
  the CPU), as that learner, with the room's environment (PATH, the compile cache in the home);
* a learner can neither read another's home (from their kernel) nor use another's server (403);
* ``room rollup`` checks each learner's seat as that learner: a file per learner, a row each;
* ``room teardown`` removes the accounts, their processes and the room's folder.
11 minutes on a busy 2-core machine (7 passed, 2026-12-01), most of it installing the room's
environment (from pip's cache after ``./course.sh test``'s own set-up) and removing it.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hub_client import Hub, code_cells, run_notebook

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = "notebooks/01_layouts_and_elementwise_add.ipynb"


def _why_not_here() -> str | None:
    if os.geteuid() != 0:
        return "a room creates unix accounts: this test runs as root (CI does)"
    if not shutil.which("useradd") or not shutil.which("runuser"):
        return "no useradd/runuser here"
    if not shutil.which("node") or not (shutil.which("configurable-http-proxy") or shutil.which("npm")):
        return ("no Node.js with configurable-http-proxy or npm: .ci/run installs it "
                "(npm install -g configurable-http-proxy)")
    if subprocess.run(["/usr/bin/python3", "-c", "import venv, ensurepip"], capture_output=True).returncode:
        return "/usr/bin/python3 cannot make a virtual environment (apt install python3-venv)"
    return None


pytestmark = [pytest.mark.slow, pytest.mark.skipif(_why_not_here() is not None, reason=str(_why_not_here()))]


def _room(*args, timeout=1200) -> subprocess.CompletedProcess:
    proc = subprocess.run(["bash", str(ROOT / "course.sh"), "room", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)
    print(proc.stdout[-3000:], proc.stderr[-3000:])
    return proc


def _free_ports() -> int:
    """A port P with P+1 and P+2 free too, below the ephemeral range (32768 and up), where no
    outgoing connection takes it while the room is set up."""
    for _ in range(200):
        port = 20000 + secrets.randbelow(10000)
        with socket.socket() as a, socket.socket() as b, socket.socket() as c:
            try:
                for sock, p in ((a, port), (b, port + 1), (c, port + 2)):
                    sock.bind(("127.0.0.1", p))
                return port
            except OSError:
                continue
    raise AssertionError("no three free ports in 20000-30000")


@pytest.fixture(scope="module")
def room():
    """A room of three learners and a teacher, with names no machine already has; afterwards the
    accounts, their processes and the room's folder are gone, whatever happened."""
    tag = secrets.token_hex(2)
    learners = [f"ccl{tag}{i}" for i in "abc"]
    teacher = f"cct{tag}"
    # Learners must reach the room's folder: not under /tmp/pytest-of-root, and not mkdtemp's 0700.
    prefix = Path(tempfile.mkdtemp(prefix="cutecourse-room-", dir="/opt"))
    (prefix / "roster.txt").write_text("# three learners\n" + "\n".join(learners) + "\n")
    port = _free_ports()
    try:
        (prefix / "closed").mkdir(mode=0o700)
        proc = _room("setup", "--roster", str(prefix / "roster.txt"), "--teacher", teacher,
                     "--prefix", str(prefix / "closed" / "room"))
        assert proc.returncode == 1 and "learners could not reach" in proc.stderr, proc.stderr
        prefix.chmod(0o755)
        proc = _room("setup", "--roster", str(prefix / "roster.txt"), "--teacher", teacher,
                     "--prefix", str(prefix / "room"), "--port", str(port), "--gpu", "compile")
        assert proc.returncode == 0, f"room setup failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        info = json.loads((prefix / "room" / "room.json").read_text())
        proc = _room("start", "--prefix", str(prefix / "room"), timeout=180)
        assert proc.returncode == 0 and "answers at" in proc.stdout, proc.stdout + proc.stderr
        yield info
    finally:
        try:  # removing 1.7 GB of environment takes a while on a busy machine
            _room("teardown", "--yes", "--prefix", str(prefix / "room"), timeout=600)
        except subprocess.TimeoutExpired:
            pass  # what it left is removed below
        for name in [*learners, teacher]:  # a setup that failed half-way left them to us
            subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
            subprocess.run(["userdel", "--remove", name], capture_output=True)
        shutil.rmtree(prefix, ignore_errors=True)
        for name in [*learners, teacher]:
            with pytest.raises(KeyError):
                pwd.getpwnam(name)
        assert not prefix.exists()


@pytest.fixture(scope="module")
def hub(room):
    return Hub(room["port"], (Path(room["prefix"]) / "state" / "api_token").read_text().strip())


def test_accounts_have_private_homes_and_the_teacher_is_an_admin(room, hub):
    for name in room["learners"]:
        assert os.stat(pwd.getpwnam(name).pw_dir).st_mode & 0o077 == 0, f"{name}'s home is open to others"
    _, teacher = hub.call("GET", f"/hub/api/users/{room['teacher']}")
    assert teacher["admin"] is True
    _, learner = hub.call("GET", f"/hub/api/users/{room['learners'][0]}")
    assert learner["admin"] is False
    env = Path(room["env"])
    assert os.stat(env).st_uid == 0 and not os.stat(env).st_mode & 0o022, "the environment is writable by learners"
    assert not (Path(room["learner"]) / "solutions").exists()


def test_a_learner_logs_in_with_the_first_use_password(room, hub):
    sheet = dict(ln.split() for ln in (Path(room["prefix"]) / "state" / "passwords.txt").read_text().splitlines())
    name = room["learners"][0]
    assert set(sheet) == {*room["learners"], room["teacher"]}
    assert hub.log_in(name, sheet[name])
    assert not hub.log_in(name, sheet[name] + "x")
    assert not hub.log_in(room["learners"][1], sheet[name]), "one learner's password opened another's account"


@pytest.fixture(scope="module")
def servers(room, hub):
    """Every learner's server, spawned through the REST API; their tokens."""
    tokens = {}
    for name in room["learners"]:
        seconds = hub.spawn(name)
        print(f"{name}: server ready in {seconds:.1f} s")
        tokens[name] = hub.user_token(name)
    return tokens


def test_each_server_opens_notebook_01_of_the_learners_own_copy(room, hub, servers):
    for name, token in servers.items():
        _, user = hub.call("GET", f"/hub/api/users/{name}")
        assert user["servers"][""]["url"] == f"/user/{name}/"
        status, listing = hub.call("GET", f"/user/{name}/api/contents/", token=token)
        assert status == 200
        names = {item["name"] for item in listing["content"]}
        assert {"notebooks", "exercises", "HANDOUT.md"} <= names and "solutions" not in names, names
        status, nb = hub.call("GET", f"/user/{name}/api/contents/{NOTEBOOK}?content=0", token=token)
        assert status == 200 and nb["writable"], f"{name} cannot edit their notebook 01"
    assert room["first_notebook"] == NOTEBOOK


def test_a_learner_cannot_use_another_learners_server(room, hub, servers):
    a, b = room["learners"][:2]
    assert hub.call("GET", f"/user/{b}/api/contents/", token=servers[a])[0] == 403
    assert hub.call("POST", f"/user/{b}/api/kernels", body={}, token=servers[a])[0] == 403
    assert hub.call("GET", f"/hub/api/users/{b}", token=servers[a])[0] in (403, 404)


PROBE = """\
import os, pwd, cutecourse
me = pwd.getpwuid(os.getuid()).pw_name
try:
    os.listdir({other!r})
    print("LEAK: read", {other!r})
except PermissionError:
    pass
print("who", me)
print("cwd", os.getcwd())
print("package", cutecourse.__file__)
print("mode", os.environ.get("CUTECOURSE_MODE"))
print("cache", os.environ.get("CUTE_DSL_CACHE_DIR"))
print("path", os.environ["PATH"].split(":")[0])
"""


#: The first learner also answers one exercise, so the roll-up has progress to show for them.
ANSWER = 'from cutecourse.exercises import nb01_extra\nprint(nb01_extra.check_padded_rows("(6,4):(8,1)"))'


def test_every_learner_runs_notebook_01_in_their_own_kernel_at_once(room, hub, servers):
    cells = code_cells(ROOT / NOTEBOOK)
    learners = room["learners"]

    def run(name):
        other = pwd.getpwnam(learners[(learners.index(name) + 1) % len(learners)]).pw_dir
        extra = [ANSWER] if name == learners[0] else []
        return name, run_notebook(hub, name, servers[name], NOTEBOOK,
                                  [PROBE.format(other=other), *cells, *extra])

    with ThreadPoolExecutor(len(learners)) as pool:
        results = dict(pool.map(run, learners))
    for name, r in results.items():
        print(f"{name}: notebook 01 in {r['seconds']:.0f} s")
        assert not r["errors"], f"{name}'s notebook 01 failed: {r['errors']}"
        said = dict(ln.split(" ", 1) for ln in r["printed"].splitlines()[:7] if " " in ln)
        assert "LEAK:" not in r["printed"], f"{name} read another learner's home"
        home = pwd.getpwnam(name).pw_dir
        assert said["who"] == name
        assert said["cwd"] == f"{home}/cutecourse/notebooks"
        assert said["package"].startswith(room["learner"] + "/"), said["package"]
        assert said["mode"] == "compile"
        assert said["cache"] == f"{home}/.cache/cutlass_python_cache"
        assert said["path"] == f"{room['env']}/bin"


def test_rollup_checks_every_learner_as_themselves(room, servers):
    proc = _room("rollup", "--jobs", "2", "--prefix", room["prefix"], timeout=900)
    folder = Path(room["prefix"]) / "rollup"
    for name in room["learners"]:
        seat = json.loads((folder / f"{name}.json").read_text())
        assert seat["lines"], f"{name}'s seat check is empty"
    rows = {ln.split("|")[1].strip(): ln for ln in proc.stdout.splitlines()
            if ln.startswith("| ") and not ln.startswith(("| learner", "| ---"))}
    assert sorted(rows) == sorted(room["learners"]), proc.stdout  # a row per learner, by name
    first, *others = room["learners"]
    assert " 1/" in rows[first], f"{first} passed one exercise of 01b: {rows[first]}"
    assert all(" 1/" not in rows[o] for o in others), proc.stdout


def test_status_and_stop(room, servers):
    proc = _room("status", "--prefix", room["prefix"], timeout=60)
    assert proc.returncode == 0 and f"{len(room['learners'])} of 4 servers running" in proc.stdout, proc.stdout
    proc = _room("stop", "--prefix", room["prefix"], timeout=120)
    assert proc.returncode == 0
    for name in room["learners"]:
        assert subprocess.run(["pgrep", "-u", name], capture_output=True).returncode == 1, \
            f"{name} still has processes after room stop"
