"""JupyterHub's configuration for a cutecourse room (``jupyterhub -f`` loads this file).

``./course.sh room setup`` copies it into the room's folder beside ``room.json``, which holds
what the teacher chose (the roster, the teacher, the port, the GPU mode); this file turns those
choices into JupyterHub's settings, using only JupyterHub's own classes:

* log-in: PAM (each learner's unix password, set by ``setup``); only the roster and the teacher
  may log in, and the teacher is an admin (sees every server on the hub's admin page);
* one JupyterLab per learner, a local process running as that learner (LocalProcessSpawner),
  from the room's read-only environment, opening notebook 01 of their own copy of the learner
  edition, which a hook copies into their home at their first log-in;
* each server's environment, from ``cutecourse.hub.server_env`` (the one definition, which
  ``room rollup`` uses too): the hub passes a learner's server no PATH and no variable of its own;
* a service token, for the teacher's ``room status`` and ``room rollup`` and for the tests.
"""

import json
import os
import pwd
import subprocess

from cutecourse.hub.server_env import learner_env  # the room's Python has the course installed

# ``c`` is the config object JupyterHub passes to this file; ``__file__`` is this file's path.
ROOM = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(ROOM, "room.json")) as f:
    room = json.load(f)
ENV, STATE, LEARNER = room["env"], os.path.join(ROOM, "state"), room["learner"]

# -- the hub and its proxy -------------------------------------------------------------------------
c.JupyterHub.bind_url = f"{'https' if room.get('ssl_cert') else 'http'}://{room['ip']}:{room['port']}"
c.JupyterHub.hub_ip = "127.0.0.1"  # the hub's own API: never reachable from outside
# The hub's API and the proxy's take the next two ports (JupyterHub's defaults, 8081 and 8001,
# would collide with a second room or another hub on the machine).
c.JupyterHub.hub_port = room["port"] + 1
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{room['port'] + 2}"
c.JupyterHub.db_url = f"sqlite:///{STATE}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = os.path.join(STATE, "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.command = [room["proxy"]]
c.ConfigurableHTTPProxy.pid_file = os.path.join(STATE, "proxy.pid")
if room.get("ssl_cert"):  # HTTPS straight from the proxy (docs/workshop.md: or a reverse proxy)
    c.JupyterHub.ssl_cert, c.JupyterHub.ssl_key = room["ssl_cert"], room["ssl_key"]
c.JupyterHub.cleanup_servers = True  # `room stop` stops every learner's server too

# -- who logs in -----------------------------------------------------------------------------------
c.JupyterHub.authenticator_class = "pam"
c.Authenticator.allowed_users = set(room["learners"]) | {room["teacher"]}
c.Authenticator.admin_users = {room["teacher"]}
c.PAMAuthenticator.open_sessions = False  # no login session per server: nothing to clean up

# -- the teacher's commands: a service with a token (role names need 3+ characters) --------------
with open(os.path.join(STATE, "api_token")) as f:
    c.JupyterHub.services = [{"name": "room-tools", "api_token": f.read().strip()}]
c.JupyterHub.load_roles = [{
    "name": "room-tools",
    "scopes": ["admin:users", "admin:servers", "tokens", "list:users", "read:users", "access:servers"],
    "services": ["room-tools"],
}]

# -- each learner's JupyterLab --------------------------------------------------------------------
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [os.path.join(ENV, "bin", "jupyterhub-singleuser")]
c.Spawner.notebook_dir = f"~/{room['home_folder']}"
c.Spawner.default_url = f"/lab/tree/{room['first_notebook']}"
c.Spawner.http_timeout = 120  # a busy 2-core server needs more than the default 30 s
c.Spawner.start_timeout = 120
c.Spawner.env_keep = ["LANG", "LC_ALL"]  # nothing else of root's environment reaches a learner


def _home(spawner):
    return pwd.getpwnam(spawner.user.name).pw_dir


def give_handout(spawner):
    """Before each server starts: its environment; and at a learner's first log-in their own copy
    of the learner edition in their home, copied as the learner (so it is theirs, and root never
    writes into a home a learner controls)."""
    name, home = spawner.user.name, _home(spawner)
    spawner.environment = learner_env(room, name)
    dest = os.path.join(home, room["home_folder"])
    if not os.path.lexists(dest):
        subprocess.run(["runuser", "-u", name, "--", "cp", "-R", LEARNER, dest], check=True)
    subprocess.run(["runuser", "-u", name, "--", "mkdir", "-p",
                    os.path.join(home, ".cache", "cutlass_python_cache")], check=True)


c.Spawner.pre_spawn_hook = give_handout
