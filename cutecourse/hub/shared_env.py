"""The room's course environment: installed once, read-only, used by every learner.

One ``.venv`` per learner would cost a room of 30 about 55 GB without a GPU build of torch and
about 200 GB with one, and 30 downloads. The room installs one environment instead, owned by root
and readable by all:

* from a Python every account can run (``/usr/bin/python3``; a Python under ``/root``, as pyenv
  installs it, is out of the learners' reach);
* torch by the same rule as ``./course.sh setup`` (:mod:`cutecourse.torch_build`: the CPU build
  without a driver, the CUDA build the driver runs with one);
* the course from the **learner edition** (``./course.sh handout``'s zip, unpacked read-only into
  ``PREFIX/learner``), so nothing a learner can import or read holds a solution. It is installed
  editable from there, so the package finds the committed results beside it as in a clone;
* JupyterHub, whose ``jupyterhub-singleuser`` runs each learner's JupyterLab.

A stamp (``env/.cutecourse-room``) hashes what was installed; a later ``setup`` with the same
learner edition installs nothing. The stamp is replaced only after a successful install, so a
failed one (offline) leaves the working environment as it was. ``env/.cutecourse-setup`` is
``course.sh``'s own stamp, so a learner's ``./course.sh check`` in a terminal (``CUTECOURSE_VENV``
points at this environment) uses it instead of installing a ``.venv`` of their own.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

from .. import torch_build
from . import JUPYTERHUB_VERSION

STAMP = ".cutecourse-room"


def course_pins_hash(course_sh: Path, pyproject: Path) -> str:
    """What ``course.sh`` writes into its stamp: its pins block and pyproject.toml."""
    lines = course_sh.read_text().splitlines(keepends=True)
    i = next(k for k, ln in enumerate(lines) if ln.startswith("# -- pins:"))
    j = next(k for k, ln in enumerate(lines) if ln.startswith("# -- end of pins"))
    return hashlib.sha256("".join(lines[i:j + 1]).encode() + pyproject.read_bytes()).hexdigest()


def unpack(learner_zip: Path, dest: Path) -> None:
    """The learner edition, unpacked afresh into ``dest``: owned by root, readable by all."""
    if dest.exists():
        shutil.rmtree(dest)
    with zipfile.ZipFile(learner_zip) as z:
        z.extractall(dest)
        for info in z.infolist():  # keep the executable bit (course.sh), drop the rest of the mode
            if (info.external_attr >> 16) & 0o111:
                (dest / info.filename).chmod(0o755)
    read_only_for_others(dest)


def read_only_for_others(path: Path) -> None:
    """Everyone may read (and enter) ``path``; only its owner may write."""
    subprocess.run(["chmod", "-R", "u+rwX,go+rX,go-w", str(path)], check=True)


def stamp_of(learner_zip: Path, python: str) -> str:
    """A hash of what the environment is built from: the learner edition's files, the Python,
    JupyterHub's pin (torch's pin is in the edition's course.sh)."""
    h = hashlib.sha256(f"{python}\njupyterhub=={JUPYTERHUB_VERSION}\n".encode())
    with zipfile.ZipFile(learner_zip) as z:
        for info in sorted(z.infolist(), key=lambda i: i.filename):
            h.update(f"{info.filename}\0{info.CRC}\n".encode())
    return h.hexdigest()


def _pip(env: Path, *args: str, quiet: bool = True) -> None:
    cmd = [str(env / "bin" / "python"), "-m", "pip", "--disable-pip-version-check",
           *(["-q"] if quiet else []), *args]
    subprocess.run(cmd, check=True)


def install_torch(env: Path, learner: Path, say) -> None:
    """torch at the course's pin, the build this machine's driver runs (as ``course.sh`` does)."""
    with open(learner / "cutecourse" / "torch_build.py") as script:  # as course.sh runs it
        probe = subprocess.run([str(env / "bin" / "python"), "-"], stdin=script,
                               capture_output=True, text=True, check=True)
    index, note = (probe.stdout.splitlines() + ["", ""])[:2]
    say(f"torch: {note}")
    pin = f"torch=={torch_build.TORCH_VERSION}"
    if index:
        try:
            _pip(env, "install", "--timeout", "15", "--retries", "1", "--index-url", index, pin)
            return
        except subprocess.CalledProcessError:
            say(f"{index} failed; torch from the default index instead")
    _pip(env, "install", pin)


def build(prefix: Path, learner_zip: Path, python: str, say=print) -> Path:
    """Install (or keep) the room's environment ``prefix/env``; return it."""
    env, learner = prefix / "env", prefix / "learner"
    unpack(learner_zip, learner)
    stamp = stamp_of(learner_zip, python)
    if (env / STAMP).is_file() and (env / STAMP).read_text().strip() == stamp:
        say(f"environment: {env} matches the learner edition (nothing to install)")
        return env
    if (env / STAMP).is_file():
        say(f"environment: the learner edition or JupyterHub's pin changed since {env} was set up: "
            "updating it (until this finishes the old environment keeps working)")
    if not (env / "bin" / "python").exists():
        if not os.access(python, os.X_OK):
            raise SystemExit(f"room: {python} is not a Python this machine can run; give one every "
                             "account can run: --python /usr/bin/python3")
        say(f"environment: creating {env} from {python} (once; about 2 GB without a GPU, 6.5 GB with one)")
        r = subprocess.run([python, "-m", "venv", str(env)], capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(f"room: {python} cannot make a virtual environment ({r.stderr.strip()[-200:]}); "
                             "on Debian/Ubuntu: apt install python3-venv")
    _pip(env, "install", "--upgrade", "pip")
    install_torch(env, learner, say)
    say(f"environment: the course (learner edition) and jupyterhub=={JUPYTERHUB_VERSION}")
    # compat: a plain path entry (a .pth file), not an import hook. The hook comes after the
    # search of sys.path, where a learner's ~/cutecourse folder (no __init__.py at its top) would
    # be found first as an empty namespace package whenever Python starts in the home.
    _pip(env, "install", "--config-settings", "editable_mode=compat", "-e", f"{learner}[lab]",
         f"jupyterhub=={JUPYTERHUB_VERSION}")
    (env / ".cutecourse-setup").write_text(
        course_pins_hash(learner / "course.sh", learner / "pyproject.toml") + "\n")
    read_only_for_others(env)
    read_only_for_others(learner)  # the editable install wrote its metadata there
    (env / STAMP).write_text(stamp + "\n")
    return env
