"""A workshop room on one Linux server: JupyterHub, one account per learner, one shared environment.

``./course.sh room setup --roster roster.txt --teacher NAME`` (as root) turns a GPU server into a
room for 20-30 learners, each in their own JupyterLab, without 30 copies of a multi-GB ``.venv``:

* :mod:`.accounts`: the roster, one unix account per learner (home readable by its owner only),
  a first-use password each, set with ``chpasswd``;
* :mod:`.shared_env`: the course environment installed ONCE under the room's folder, read-only,
  from a Python every account can run, built from the learner edition (no solutions in it);
* :mod:`.jupyterhub_config`: the hub's configuration (PAM log-in, one local process per learner,
  the per-learner environment, the learner edition copied into each home at first log-in);
* :mod:`.cli`: ``setup``, ``start``, ``stop``, ``status``, ``rollup`` and ``teardown``.

Everything the room needs lives in one folder (default ``/opt/cutecourse-room``): ``room.json``
(what ``setup`` decided), ``env/``, ``learner/``, ``state/`` (the hub's database, its log, the
token the teacher's commands use; root only) and ``gpu-queue/`` in queue mode.
The modules import only the standard library: they run as root from the teacher's clone with any
Python 3.10+, before the room's environment exists.
"""

from __future__ import annotations

from pathlib import Path

#: JupyterHub from PyPI, and the proxy in front of it from the npm registry (measured together).
JUPYTERHUB_VERSION = "6.1.1"
PROXY_VERSION = "5.3.0"
DEFAULT_PREFIX = Path("/opt/cutecourse-room")
DEFAULT_PORT = 8000
#: Where a learner's JupyterLab opens, relative to the learner edition in their home.
FIRST_NOTEBOOK = "notebooks/01_layouts_and_elementwise_add.ipynb"
HOME_FOLDER = "cutecourse"  # ~/cutecourse: the learner's own copy of the learner edition
GPU_MODES = ("compile", "queue")
