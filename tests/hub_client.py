"""A client for a running room, as a browser and a learner's notebook would use it: the hub's
REST API (spawn a server, issue a token), a learner's Jupyter server REST API, and a kernel's
websocket (run a notebook's code cells in that learner's kernel, as that learner).

Standard library plus tornado (Jupyter's own web framework, in every course environment).
"""

from __future__ import annotations

import asyncio
import http.cookiejar
import json
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path


class Hub:
    def __init__(self, port: int, token: str):
        self.base, self.token = f"http://127.0.0.1:{port}", token

    def call(self, method: str, path: str, body=None, token: str | None = None):
        """(status, JSON or None) of one request; an HTTP error is a status, not an exception."""
        req = urllib.request.Request(self.base + path, method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": f"token {token or self.token}"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                text = r.read()
                return r.status, json.loads(text) if text else None
        except urllib.error.HTTPError as exc:
            return exc.code, None

    def spawn(self, name: str, deadline_s: float = 180) -> float:
        """Start ``name``'s server through the REST API; the seconds until the hub says ready."""
        t0 = time.monotonic()
        status, _ = self.call("POST", f"/hub/api/users/{name}/server")
        assert status in (201, 202), f"spawning {name}: HTTP {status}"
        while time.monotonic() - t0 < deadline_s:
            _, user = self.call("GET", f"/hub/api/users/{name}")
            if user and user.get("servers", {}).get("", {}).get("ready"):
                return time.monotonic() - t0
            time.sleep(0.25)
        raise AssertionError(f"{name}'s server was not ready within {deadline_s:.0f} s")

    def user_token(self, name: str) -> str:
        status, answer = self.call("POST", f"/hub/api/users/{name}/tokens", {"note": "room test"})
        assert status == 201, f"a token for {name}: HTTP {status}"
        return answer["token"]

    def log_in(self, name: str, password: str) -> bool:
        """The login form, as a browser fills it: True when the hub lets ``name`` in."""
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar), _NoRedirect)
        opener.open(self.base + "/hub/login", timeout=30).read()
        xsrf = next((c.value for c in jar if c.name == "_xsrf"), "")
        form = urllib.parse.urlencode({"username": name, "password": password, "_xsrf": xsrf}).encode()
        try:
            opener.open(urllib.request.Request(self.base + "/hub/login?next=", data=form), timeout=60)
        except urllib.error.HTTPError as exc:
            if exc.code == 302:  # logged in: redirected to the server, with a login cookie
                return any(c.name == "jupyterhub-hub-login" for c in jar)
            return False
        return False  # 200: the form again, with "Invalid username or password"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


async def _run_cells(base: str, name: str, token: str, kernel_id: str,
                     cells: list[str]) -> tuple[list[str], str]:
    """Run ``cells`` in order in one kernel over its websocket; the errors (empty: all ran) and
    what the cells printed."""
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    url = f"ws{base[4:]}/user/{name}/api/kernels/{kernel_id}/channels"
    ws = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {token}"}),
                                 max_message_size=64 << 20)
    session, errors, printed = uuid.uuid4().hex, [], []
    try:
        for i, code in enumerate(cells):
            msg_id = uuid.uuid4().hex
            ws.write_message(json.dumps({
                "header": {"msg_id": msg_id, "msg_type": "execute_request", "session": session,
                           "username": name, "version": "5.3"},
                "parent_header": {}, "metadata": {}, "channel": "shell",
                "content": {"code": code, "silent": False, "store_history": True,
                            "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}}))
            replied = idle = False  # a cell is done at its reply (shell) AND its idle (iopub):
            while not (replied and idle):  # output can still arrive after the reply
                raw = await asyncio.wait_for(ws.read_message(), timeout=600)
                assert raw is not None, f"{name}'s kernel closed its websocket at cell {i}"
                msg = json.loads(raw)
                if msg.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind, content = msg["msg_type"], msg["content"]
                if kind == "stream":
                    printed.append(content["text"])
                elif kind == "execute_reply":
                    replied = True
                    if content["status"] != "ok":
                        errors.append(f"cell {i}: {content.get('ename')}: {content.get('evalue')}")
                elif kind == "status" and content["execution_state"] == "idle":
                    idle = True
            if errors:
                break
    finally:
        ws.close()
    return errors, "".join(printed)


def run_notebook(hub: Hub, name: str, token: str, path: str, cells: list[str]) -> dict:
    """Open ``path`` in ``name``'s server (a kernel session, as JupyterLab does) and run ``cells``
    in it: ``errors``, ``printed`` and ``seconds``. The kernel is shut down afterwards."""
    status, sess = hub.call("POST", f"/user/{name}/api/sessions", token=token,
                            body={"path": path, "type": "notebook", "name": Path(path).name,
                                  "kernel": {"name": "python3"}})
    assert status == 201, f"a kernel for {name}: HTTP {status}"
    kid, t0 = sess["kernel"]["id"], time.monotonic()
    try:
        errors, printed = asyncio.run(_run_cells(hub.base, name, token, kid, cells))
    finally:
        hub.call("DELETE", f"/user/{name}/api/sessions/{sess['id']}", token=token)
    return {"errors": errors, "printed": printed, "seconds": time.monotonic() - t0}


def code_cells(notebook: Path) -> list[str]:
    nb = json.loads(notebook.read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
