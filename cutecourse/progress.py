"""Which exercises a learner has passed, kept in the learner's own file.

Every exercise check (``cutecourse.exercises.checker``) records its verdict here: the notebook
(from the checker's module: ``nb03`` -> ``"03"``, ``nb07_kernels`` -> ``"07"``), the exercise (the
call a learner writes, ``nb03.check_phase``, with the check's title), pass or fail, and when.
The latest verdict of an exercise counts, so an answer broken after it passed reads as failing.

The file is ``~/.cutecourse/progress.json``, or the path in ``CUTECOURSE_PROGRESS``
(``CUTECOURSE_PROGRESS=off`` records nothing). A teacher's roll-up (``cutecourse.room``) reads
it, on a shared server straight from each learner's home folder. Recording never gets in a
learner's way: a file that cannot be read or written is skipped without a word, and the check's
verdict is shown as always. Test runs (pytest, and the notebook kernels nbval starts from it)
record nothing unless ``CUTECOURSE_PROGRESS`` names a file, so ``./course.sh test`` never
rewrites a learner's progress with the solutions' verdicts.

The exercises a notebook has are read from the exercise notebooks (``exercises/*.ipynb``): each
check cell calls ``nbNN.check_...(...)``, and those calls are what a learner can pass.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import json
import os
import re
import tempfile
import time
from pathlib import Path

ENV = "CUTECOURSE_PROGRESS"
LEARNER_ENV = "CUTECOURSE_LEARNER"
ROOT = Path(__file__).resolve().parent.parent
#: A check call in an exercise notebook: ``nb03.check_phase(`` or ``nb07_kernels.check_search(``.
CHECK_CALL = re.compile(r"\b(nb\d\d\w*)\.(check_\w+)\s*\(")
SCHEMA = 1


def learner() -> str:
    """The learner's name: ``CUTECOURSE_LEARNER`` (a hub sets it per learner), else the user."""
    name = os.environ.get(LEARNER_ENV, "").strip()
    if name:
        return name
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a container user without a passwd entry
        return f"uid{os.getuid()}"


def default_folder() -> Path:
    return Path.home() / ".cutecourse"


def path() -> Path | None:
    """Where this learner's verdicts go; None when nothing is recorded (off, or a test run)."""
    value = os.environ.get(ENV, "").strip()
    if value.lower() == "off":
        return None
    if value:
        return Path(value).expanduser()
    if "PYTEST_CURRENT_TEST" in os.environ:
        return None
    return default_folder() / "progress.json"


def notebook_of(module: str) -> str | None:
    """``"cutecourse.exercises.nb07_kernels"`` -> ``"07"``; None for a module of no notebook."""
    m = re.match(r"nb(\d\d)", module.rsplit(".", 1)[-1])
    return m.group(1) if m else None


def exercise_key(module: str, function: str) -> str:
    """The name of an exercise: the call a learner writes, ``nb03.check_phase``."""
    return f"{module.rsplit('.', 1)[-1]}.{function}"


def read(file: Path | str) -> dict:
    """A progress file's contents, or an empty record if it is missing or unreadable."""
    try:
        data = json.loads(Path(file).read_text())
    except (OSError, ValueError):
        return {"schema": SCHEMA, "learner": None, "exercises": {}}
    if not isinstance(data, dict) or not isinstance(data.get("exercises"), dict):
        return {"schema": SCHEMA, "learner": None, "exercises": {}}
    return data


def record(module: str, function: str, title: str, ok: bool, file: Path | None = None) -> bool:
    """Record one verdict; True if it was written. Never raises: a check must not fail because
    the home folder is read-only or full."""
    notebook = notebook_of(module)
    target = file if file is not None else path()
    if notebook is None or target is None:
        return False
    try:
        _update(Path(target), notebook, exercise_key(module, function), title, bool(ok))
        return True
    except Exception:  # noqa: BLE001 - progress is a convenience, never a reason to fail
        return False


def _update(file: Path, notebook: str, key: str, title: str, ok: bool) -> None:
    """Read, change and replace the file under a lock (two notebooks of one learner may check at
    the same moment), writing a temporary file first so a crash never leaves half a file."""
    file.parent.mkdir(parents=True, exist_ok=True)
    lock = os.open(file.parent / f".{file.name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = read(file)
        data.update(schema=SCHEMA, learner=learner())
        now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        entry = data["exercises"].setdefault(key, {"notebook": notebook, "tries": 0})
        entry.update(notebook=notebook, title=title, ok=ok, when=now, tries=entry.get("tries", 0) + 1)
        if ok:
            entry.setdefault("first_passed", now)
        fd, tmp = tempfile.mkstemp(dir=file.parent, prefix=f".{file.name}.")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1, sort_keys=True)
            os.chmod(tmp, 0o644)  # the teacher's roll-up reads it
            os.replace(tmp, file)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    finally:
        os.close(lock)


def exercises(root: Path | str = ROOT) -> dict[str, list[str]]:
    """notebook -> the exercise keys its exercise notebooks check, in notebook order, from the
    check cells of ``exercises/*.ipynb`` (``01`` and ``01b`` are both notebook 01)."""
    found: dict[str, list[str]] = {}
    for nb in sorted(Path(root, "exercises").glob("[0-9][0-9]*.ipynb")):
        try:
            cells = json.loads(nb.read_text())["cells"]
        except (OSError, ValueError, KeyError):
            continue
        for cell in cells:
            if cell.get("cell_type") != "code":
                continue
            source = "".join(cell.get("source", ""))
            for module, function in CHECK_CALL.findall(source):
                notebook = notebook_of(module)
                key = exercise_key(module, function)
                if notebook and key not in found.setdefault(notebook, []):
                    found[notebook].append(key)
    return found


def passed(data: dict, keys: list[str]) -> int:
    """How many of ``keys`` the progress record ``data`` has passing (latest verdict)."""
    done = data.get("exercises", {})
    return sum(1 for k in keys if isinstance(done.get(k), dict) and done[k].get("ok") is True)
