"""``./course.sh room COMMAND``: set up, start, stop and inspect a workshop room (as root).

    room setup --roster roster.txt --teacher NAME [--gpu compile|queue] [--port 8000] [--ip IP]
               [--prefix /opt/cutecourse-room] [--python /usr/bin/python3] [--ssl-cert F --ssl-key F]
    room start | stop | status
    room rollup [--jobs N]      every learner's seat check, run as that learner, in one table
    room teardown --yes         stop, delete the accounts the room created (homes too), the folder

``setup`` can be run again (a new roster, another port): accounts that exist are kept, the
environment is reinstalled only when the learner edition changed.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from . import (DEFAULT_PORT, DEFAULT_PREFIX, FIRST_NOTEBOOK, GPU_MODES, HOME_FOLDER,
               PROXY_VERSION, accounts, rollup, shared_env)

CLONE = Path(__file__).resolve().parents[2]  # the teacher's clone (solutions and all)


def say(msg: str) -> None:
    print(f"room: {msg}", flush=True)


def fail(msg: str) -> SystemExit:
    return SystemExit(f"room: {msg}")


# -- the room's folder -----------------------------------------------------------------------------
def load(prefix: Path) -> dict:
    try:
        return json.loads((prefix / "room.json").read_text())
    except OSError:
        raise fail(f"no room in {prefix}: run ./course.sh room setup --roster FILE --teacher NAME "
                   "first (or give --prefix)") from None


def api(room: dict, method: str, path: str, body: dict | None = None, token: str | None = None):
    """JupyterHub's REST API, with the room's service token unless ``token`` is given."""
    token = token or (Path(room["prefix"]) / "state" / "api_token").read_text().strip()
    req = urllib.request.Request(f"http://127.0.0.1:{room['port']}/hub/api{path}", method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        text = r.read()
        return json.loads(text) if text else None


def find_proxy(prefix: Path) -> str:
    """configurable-http-proxy: the one on PATH, else installed into the room from npm."""
    found = shutil.which("configurable-http-proxy")
    if found:
        return found
    local = prefix / "proxy" / "node_modules" / ".bin" / "configurable-http-proxy"
    if not local.exists():
        if not shutil.which("npm"):
            raise fail("JupyterHub needs configurable-http-proxy, from the npm registry, and this "
                       "machine has no npm: install Node.js 20 (with its npm), then run setup again")
        say(f"installing configurable-http-proxy@{PROXY_VERSION} from the npm registry into {prefix / 'proxy'}")
        subprocess.run(["npm", "install", "--silent", "--no-fund", "--no-audit", "--prefix",
                        str(prefix / "proxy"), f"configurable-http-proxy@{PROXY_VERSION}"], check=True)
    return str(local)


def make_handout(out: Path) -> Path:
    """The learner edition, made from the teacher's clone by ``./course.sh handout``: it needs the
    course's packages (nbformat), so it runs in the teacher's ``.venv``, which ``course.sh`` sets up
    once if it is not there yet (this Python has the standard library only)."""
    proc = subprocess.run(["bash", str(CLONE / "course.sh"), "handout", str(out)], cwd=CLONE,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
        raise SystemExit(f"room setup: making the learner edition (./course.sh handout) failed:\n{tail}\n"
                         "Fix: run ./course.sh setup in the course's folder (it needs the package "
                         "registries once), then room setup again.")
    return out / "cutecourse-learner.zip"


def warn_if_clone_readable() -> None:
    """The answers must stay out of the learners' reach: the clone holds solutions/."""
    sol = CLONE / "solutions"
    chain = [sol, *sol.parents]
    if sol.exists() and all(os.stat(p).st_mode & 0o001 for p in chain) and os.stat(sol).st_mode & 0o004:
        say(f"WARNING: learners can read {sol} (every folder above it is open to all): move the "
            f"clone into a private home, or chmod o-rx {CLONE}")


def setup(a: argparse.Namespace) -> int:
    if os.geteuid() != 0:
        raise fail("setup creates accounts and installs into a shared folder: run it as root "
                   "(sudo ./course.sh room setup ...)")
    prefix = Path(a.prefix).resolve()
    try:
        learners = accounts.read_roster(Path(a.roster))
        teacher = accounts.check_name(a.teacher, "the teacher's name")
    except accounts.RosterError as exc:
        raise fail(str(exc)) from None
    if teacher in learners:
        raise fail(f"{teacher} is both on the roster and the teacher: take them off the roster")
    if bool(a.ssl_cert) != bool(a.ssl_key):
        raise fail("HTTPS needs both --ssl-cert and --ssl-key")
    closed = [d for d in prefix.parents if d.exists() and not os.stat(d).st_mode & 0o001]
    if closed:  # learners' servers run from PREFIX/env: every folder above must let them through
        raise fail(f"learners could not reach {prefix}: {closed[0]} is closed to other accounts "
                   f"(mode {os.stat(closed[0]).st_mode & 0o777:o}); choose another --prefix "
                   f"(default {DEFAULT_PREFIX}) or chmod o+x {closed[0]}")
    t0 = time.monotonic()
    old = json.loads((prefix / "room.json").read_text()) if (prefix / "room.json").exists() else {}
    prefix.mkdir(parents=True, exist_ok=True)
    prefix.chmod(0o755)
    state = prefix / "state"
    state.mkdir(exist_ok=True)
    state.chmod(0o700)  # the database, the log, the tokens, the passwords: root only
    proxy = find_proxy(prefix)
    say("making the learner edition (./course.sh handout: no solutions, no instructor notes)")
    learner_zip = make_handout(state / "handout")
    env = shared_env.build(prefix, learner_zip, a.python, say=lambda m: say(m))

    created, passwords = list(old.get("created", [])), {}
    for name in [*learners, teacher]:
        if not accounts.exists(name):
            accounts.create(name, "cutecourse teacher" if name == teacher else "cutecourse learner")
            created.append(name)
            passwords[name] = accounts.new_password()
        elif accounts.others_can_read(accounts.home(name)):
            say(f"WARNING: others can read {accounts.home(name)}: chmod 700 it")
    accounts.set_passwords(passwords)
    sheet = state / "passwords.txt"
    with open(os.open(sheet, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "a") as f:
        f.writelines(f"{u} {p}\n" for u, p in passwords.items())

    queue = prefix / "gpu-queue"
    if a.gpu == "queue":  # everyone's lock files; sticky like /tmp: none can delete another's
        queue.mkdir(exist_ok=True)
        queue.chmod(0o1777)
    token_file = state / "api_token"
    if not token_file.exists():
        token_file.write_text(secrets.token_hex(32) + "\n")
        token_file.chmod(0o600)
    room = {"prefix": str(prefix), "env": str(env), "learner": str(prefix / "learner"),
            "learners": learners, "teacher": teacher, "created": created, "ip": a.ip,
            "port": a.port, "gpu": a.gpu, "gpu_queue": str(queue), "proxy": proxy,
            "home_folder": HOME_FOLDER, "first_notebook": FIRST_NOTEBOOK,
            "ssl_cert": a.ssl_cert, "ssl_key": a.ssl_key}
    (prefix / "room.json").write_text(json.dumps(room, indent=1) + "\n")
    shutil.copy(Path(__file__).with_name("jupyterhub_config.py"), prefix / "jupyterhub_config.py")
    warn_if_clone_readable()
    say(f"ready in {time.monotonic() - t0:.0f} s: {len(learners)} learners, teacher {teacher}, "
        f"GPU mode {a.gpu}")
    if passwords:
        say(f"first-use passwords of the {len(passwords)} new accounts: {sheet} (root only; hand "
            "them out; a learner changes theirs with passwd in a JupyterLab terminal)")
    print(HOW_TO.format(prefix=prefix, url=url(room), port=a.port))
    return 0


HOW_TO = """
  start:  sudo ./course.sh room start       (stop: room stop; who is on: room status)
  reach:  {url}  (log in with the account name and its password)
          bound to this address only; from a laptop: ssh -L {port}:localhost:{port} user@server,
          or setup --ip 0.0.0.0 with HTTPS in front (--ssl-cert/--ssl-key, or a reverse proxy:
          docs/workshop.md, "A room on JupyterHub")
  check:  sudo ./course.sh room rollup      (every learner's seat check, one table)
  folder: {prefix}   (remove everything: room teardown --yes)"""


def url(room: dict) -> str:
    scheme = "https" if room.get("ssl_cert") else "http"
    host = "localhost" if room["ip"] in ("127.0.0.1", "0.0.0.0") else room["ip"]
    return f"{scheme}://{host}:{room['port']}/"


# -- start, stop, status ---------------------------------------------------------------------------
def hub_pid(room: dict) -> int | None:
    """The running hub's process id, or None (no pid file, no such process, or one that exited
    and waits to be reaped: `room start` does not stay to reap it)."""
    try:
        pid = int((Path(room["prefix"]) / "state" / "hub.pid").read_text())
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return None if state in ("Z", "X") else pid
    except (OSError, ValueError, IndexError):
        return None


def start(room: dict, wait_s: float = 90) -> int:
    if hub_pid(room):
        say(f"the hub already runs (pid {hub_pid(room)}): {url(room)}")
        return 0
    for port in (room["port"], room["port"] + 1, room["port"] + 2):  # the hub's, its API's, the proxy's
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                raise fail(f"port {port} is taken (another program listens there): choose another "
                           f"port with ./course.sh room setup ... --port N (the room uses N, N+1, N+2)")
    state, t0 = Path(room["prefix"]) / "state", time.monotonic()
    node_dir = os.path.dirname(shutil.which("node") or "/usr/bin/node")
    env = {"PATH": f"{room['env']}/bin:{node_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "LANG": "C.UTF-8"}  # sbin: runuser, for the first-log-in hook
    with open(state / "jupyterhub.log", "ab") as log:
        proc = subprocess.Popen([f"{room['env']}/bin/jupyterhub", "-f",
                                 f"{room['prefix']}/jupyterhub_config.py"], cwd=state, env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    (state / "hub.pid").write_text(f"{proc.pid}\n")
    while time.monotonic() - t0 < wait_s:
        if proc.poll() is not None:
            raise fail(f"the hub stopped at start (exit {proc.returncode}); its log: {state / 'jupyterhub.log'}:\n"
                       + (state / "jupyterhub.log").read_text()[-2000:])
        try:
            api(room, "GET", "/")
            say(f"the hub answers at {url(room)} (started in {time.monotonic() - t0:.1f} s, pid "
                f"{proc.pid}; log: {state / 'jupyterhub.log'})")
            return 0
        except (OSError, ValueError):
            time.sleep(0.3)
    raise fail(f"the hub did not answer within {wait_s:.0f} s; its log: {state / 'jupyterhub.log'}")


def stop(room: dict) -> int:
    pid = hub_pid(room)
    if not pid:
        say("the hub is not running")
        return 0
    os.kill(pid, signal.SIGTERM)  # the hub stops every learner's server and its proxy, then exits
    t0 = time.monotonic()
    while time.monotonic() - t0 < 120:  # 20 s for three servers on a busy 2-core machine
        if not hub_pid(room):
            say(f"the hub and every learner's server are stopped ({time.monotonic() - t0:.0f} s)")
            return 0
        time.sleep(0.25)
    raise fail(f"the hub (pid {pid}) did not stop within 2 minutes: kill {pid}")


def status(room: dict) -> int:
    pid = hub_pid(room)
    if not pid:
        say(f"the hub is not running (start: ./course.sh room start); {len(room['learners'])} learners")
        return 1
    users = api(room, "GET", "/users")
    running = [u for u in users if u.get("servers", {}).get("", {}).get("ready")]
    say(f"the hub runs (pid {pid}) at {url(room)}; {len(running)} of {len(users)} servers running; "
        f"GPU mode {room['gpu']}")
    for u in sorted(users, key=lambda u: u["name"]):
        role = "teacher" if u["name"] == room["teacher"] else "learner"
        print(f"  {u['name']:<24} {role:<8} {'running' if u in running else '-':<8} "
              f"last active {u.get('last_activity') or 'never'}")
    return 0


def teardown(room: dict, yes: bool) -> int:
    prefix = Path(room["prefix"])
    if not yes:
        say(f"would stop the hub, delete the accounts {', '.join(room['created']) or '(none)'} with "
            f"their homes (their work too), and {prefix}: run again with --yes")
        return 1
    stop(room)
    for name in room["created"]:
        if accounts.exists(name):
            accounts.remove(name)
    shutil.rmtree(prefix)
    say(f"removed {len(room['created'])} accounts and {prefix}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="./course.sh room", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("setup", help="accounts, the shared environment, the hub's configuration")
    s.add_argument("--roster", required=True, help="a text file: one learner's account name a line")
    s.add_argument("--teacher", required=True, help="the teacher's account (made an admin)")
    s.add_argument("--gpu", choices=GPU_MODES, default="compile",
                   help="compile: learners compile and inspect, the teacher runs the GPU; "
                        "queue: learners run kernels one at a time (default compile)")
    s.add_argument("--port", type=int, default=DEFAULT_PORT)
    s.add_argument("--ip", default="127.0.0.1", help="the address to listen on (0.0.0.0: every "
                   "interface; put HTTPS in front)")
    s.add_argument("--prefix", default=str(DEFAULT_PREFIX))
    s.add_argument("--python", default="/usr/bin/python3",
                   help="the Python the shared environment is made from: every account must be able to run it")
    s.add_argument("--ssl-cert")
    s.add_argument("--ssl-key")
    for name, what in (("start", "start the hub"), ("stop", "stop the hub and every server"),
                       ("status", "the hub and who is on"), ("rollup", "every learner's seat check"),
                       ("teardown", "delete the room's accounts and folder")):
        q = sub.add_parser(name, help=what)
        q.add_argument("--prefix", default=str(DEFAULT_PREFIX))
        if name == "rollup":
            q.add_argument("--jobs", type=int, default=max(1, min(4, (os.cpu_count() or 2) // 2)))
        if name == "teardown":
            q.add_argument("--yes", action="store_true")
    a = p.parse_args(argv)
    if a.cmd == "setup":
        return setup(a)
    if os.geteuid() != 0:
        raise fail(f"{a.cmd} needs root (the room's tokens and the learners' accounts): sudo ./course.sh room {a.cmd}")
    room = load(Path(a.prefix))
    if a.cmd == "rollup":
        return rollup.run(room, jobs=a.jobs, say=say)
    return {"start": start, "stop": stop, "status": status}.get(a.cmd, lambda r: teardown(r, a.yes))(room)
