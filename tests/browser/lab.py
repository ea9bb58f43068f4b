"""A JupyterLab server for a browser test: its own settings, data and runtime folders, bound to
127.0.0.1, no token; every wait bounded; always shut down with the kernels it started."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

SERVER_START_S = 90


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_settings(settings: Path) -> None:
    """A fresh settings dir with the news/update notifications off (a toast that appears
    mid-test can cover the menu the test clicks), and notebook windowing off, so that every
    cell stays in the page and its prompt can be read (JupyterLab 4 detaches off-screen cells)."""
    for ext, name, value in [
        ("apputils-extension", "notification",
         {"fetchNews": "false", "checkForUpdates": False, "doNotDisturbMode": True}),
        ("notebook-extension", "tracker", {"windowingMode": "none"}),
    ]:
        d = settings / "@jupyterlab" / ext
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{name}.jupyterlab-settings").write_text(json.dumps(value))


@contextlib.contextmanager
def running_lab(tmp: Path, root: Path, trusted: list[Path] = ()):
    """Serve ``root`` with a JupyterLab whose state lives under ``tmp``; yield its URL. The
    notebooks in ``trusted`` are signed first, by a notary of this server's own (a data dir under
    ``tmp``), so it trusts those and nothing else. The kernels run in compile mode
    (CUTECOURSE_MODE=compile): the same pictures on any machine."""
    data = dict(os.environ, JUPYTER_DATA_DIR=str(tmp / "data"))
    if trusted:
        signed = subprocess.run([sys.executable, "-m", "jupyter", "trust", *map(str, trusted)],
                                env=data, capture_output=True, text=True, timeout=120)
        assert signed.returncode == 0, signed.stderr
    write_settings(tmp / "settings")
    port = free_port()
    env = dict(data,
               JUPYTERLAB_SETTINGS_DIR=str(tmp / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"),
               JUPYTER_CONFIG_DIR=str(tmp / "config"),
               JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
               CUTECOURSE_MODE="compile")
    log_path = tmp / "lab.log"
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
           "--IdentityProvider.token=", "--ServerApp.password=", f"--ServerApp.root_dir={root}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # CI containers run as root
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root,
                                start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_for_server(proc, url, log_path)
            yield url
        finally:
            proc.terminate()  # the server shuts its kernels down on SIGTERM
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)  # its own session: the server and the kernels it started
                proc.wait(timeout=10)


def _wait_for_server(proc, url: str, log_path: Path) -> None:
    deadline = time.monotonic() + SERVER_START_S
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"jupyter lab exited with {proc.returncode}: "
                                 f"{log_path.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/api/status", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"jupyter lab did not answer within {SERVER_START_S} s")
        time.sleep(0.5)


def shut_down_kernels(url: str) -> None:
    """Free the CPU for the next notebook: shut down every kernel the server runs."""
    with urllib.request.urlopen(f"{url}/api/kernels", timeout=10) as r:
        kernels = json.load(r)
    for k in kernels:
        req = urllib.request.Request(f"{url}/api/kernels/{k['id']}", method="DELETE")
        try:
            urllib.request.urlopen(req, timeout=30).close()
        except OSError:
            pass
