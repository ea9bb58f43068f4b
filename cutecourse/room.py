"""A room in one table, one row per learner: the seat check and the exercises passed.

Each learner's ``./course.sh check`` writes one JSON object (``--json`` prints it; every run also
keeps it as ``~/.cutecourse/seat.json``): the learner's name, the verdict, every line of the
check, the run-or-compile table and the learner's exercise progress (``cutecourse.progress``).
The teacher gets one markdown table from either source:

* **a drop folder** of files named by learner (``alice.json``: ``./course.sh check --json >
  alice.json``, collected through a shared folder, the chat, ``scp``): the room of laptops;
* **the learners' own folders** on a shared server: ``python -m cutecourse.room
  /home/*/.cutecourse`` (as root, or as a user who can read them): the seat check and the
  progress file as they are now, without asking anyone to send anything.

Rows are keyed by learner (the file's name, or the name the folder's files record), never by
host name: on one server every learner has the same host. The columns: learner, ready, track,
then per notebook "exercises passed/total" (the totals are the check cells of the exercise
notebooks, ``progress.exercises``), then a not-ready seat's first problem and its fix.
"""

from __future__ import annotations

import json
import platform
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import progress

SCHEMA = 2
SEAT_FILE = "seat.json"
USAGE = ("usage: python -m cutecourse.room PATH...  (each PATH: a learner's check, NAME.json "
         "from ./course.sh check --json; a learner's ~/.cutecourse folder; or a folder of NAME.json "
         "files)")


def seat(lines, seconds: float, table, forced_compile: bool = False) -> dict:
    """The check's findings (``cutecourse.check.Line`` objects) and the learner's progress."""
    failed = [ln.label for ln in lines if ln.status == "fail"]
    runs = bool(table) and any("runs" in what for _, what in table)
    file = progress.path()
    return {
        "schema": SCHEMA,
        "learner": progress.learner(),
        "host": socket.gethostname(),
        "machine": f"{platform.system()} {platform.machine()}",
        "when": time.strftime("%Y-%m-%d %H:%M", time.localtime()),
        "seconds": round(seconds, 1),
        "ready": not failed,
        "track": "gpu" if runs else ("compile" if forced_compile else "no-gpu"),
        "lines": [{"label": ln.label, "status": ln.status, "detail": ln.detail, "fix": ln.fix}
                  for ln in lines],
        "notebooks": [{"notebook": n, "here": what} for n, what in (table or [])],
        "progress": progress.read(file)["exercises"] if file else {},
    }


def seat_json(lines, seconds: float, table, forced_compile: bool = False) -> str:
    return json.dumps(seat(lines, seconds, table, forced_compile), indent=1)


def save_seat(text: str) -> Path | None:
    """Keep the check beside the learner's progress file (where the roll-up of a shared server
    reads it); None if progress is off here or the folder cannot be written."""
    file = progress.path()
    if file is None:
        return None
    target = file.parent / SEAT_FILE
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{SEAT_FILE}.tmp")
        tmp.write_text(text)
        tmp.chmod(0o644)
        tmp.replace(target)
        return target
    except OSError:
        return None


@dataclass
class Learner:
    """One row: who, their last seat check (None: never run) and their exercise verdicts."""

    name: str
    seat: dict | None
    exercises: dict = field(default_factory=dict)
    source: str = ""


def _read_json(path: Path) -> dict:
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


def _owner(folder: Path) -> str:
    """The user a learner's folder belongs to, for a folder whose files name nobody."""
    try:
        import pwd

        return pwd.getpwuid(folder.stat().st_uid).pw_name
    except (ImportError, KeyError, OSError):
        return folder.resolve().parent.name


def _from_file(path: Path) -> Learner:
    data = _read_json(path)
    if "lines" in data:  # a seat check (older ones carry no progress)
        return Learner(path.stem, data, data.get("progress") or {}, str(path))
    if isinstance(data.get("exercises"), dict):  # a progress file on its own
        return Learner(path.stem, None, data["exercises"], str(path))
    raise ValueError("neither a seat check (./course.sh check --json) nor a progress file")


def _from_folder(folder: Path) -> Learner:
    """A learner's ~/.cutecourse: the last seat check, and the progress file (fresher than the
    copy inside the check)."""
    seat_path, progress_path = folder / SEAT_FILE, folder / "progress.json"
    seat_data = _read_json(seat_path) if seat_path.exists() else None
    prog = progress.read(progress_path) if progress_path.exists() else None
    name = ((seat_data or {}).get("learner") or (prog or {}).get("learner") or _owner(folder))
    exercises = prog["exercises"] if prog else (seat_data or {}).get("progress") or {}
    return Learner(str(name), seat_data, exercises, str(folder))


def load(paths) -> tuple[list[Learner], list[str]]:
    """The learners behind ``paths`` (files, learners' folders, drop folders), and the paths
    that could not be read, each with why."""
    learners, unreadable = [], []
    for p in map(Path, paths):
        if p.is_dir() and not ((p / SEAT_FILE).exists() or (p / "progress.json").exists()):
            items = sorted(p.glob("*.json"))  # a drop folder
            if not items:
                unreadable.append(f"{p}: no NAME.json files and no {SEAT_FILE} or progress.json")
        else:
            items = [p]
        for item in items:
            try:
                learners.append(_from_folder(item) if item.is_dir() else _from_file(item))
            except (OSError, ValueError) as exc:
                unreadable.append(f"{item}: {exc}")
    return learners, unreadable


def _cell(text: str) -> str:
    return str(text).replace("|", "/").replace("\n", " ")


def _problem(seat_data: dict | None) -> str:
    if seat_data is None:
        return "no seat check yet -> ./course.sh check"
    bad = [ln for ln in seat_data.get("lines", []) if ln.get("status") in ("fail", "warn")]
    if not bad:
        return ""
    first = bad[0]
    return (f"{first['label']}: {first['detail']}" + (f" -> {first['fix']}" if first.get("fix") else ""))[:300]


def tabulate(learners: list[Learner], root: Path | str = progress.ROOT) -> str:
    """One markdown table, a row per learner, sorted by name."""
    exercises = progress.exercises(root)
    notebooks = sorted(exercises)
    rows = ["| learner | ready | track | " + " | ".join(notebooks) + " | first problem and its fix |",
            "| --- | --- | --- | " + " | ".join("---" for _ in notebooks) + " | --- |"]
    counts = {}
    for who in learners:
        counts[who.name] = counts.get(who.name, 0) + 1
    for who in sorted(learners, key=lambda w: (w.name.lower(), w.source)):
        name = who.name if counts[who.name] == 1 else f"{who.name} ({who.source})"
        s = who.seat
        ready = "not checked" if s is None else ("yes" if s.get("ready") else "**NO**")
        done = {"exercises": who.exercises}
        rows.append("| " + " | ".join(_cell(c) for c in (
            name, ready, "?" if s is None else s.get("track", "?"),
            *(f"{progress.passed(done, exercises[nb])}/{len(exercises[nb])}" for nb in notebooks),
            _problem(s))) + " |")
    ready = sum(1 for w in learners if w.seat and w.seat.get("ready"))
    gpu = sum(1 for w in learners if w.seat and w.seat.get("track") == "gpu")
    return "\n".join(rows) + (f"\n\n{ready} of {len(learners)} learners ready; {gpu} run kernels "
                              "on a GPU of their own.")


def rollup(paths, root: Path | str = progress.ROOT) -> str:
    """The room's table for ``paths`` (see the module docstring), unreadable paths listed under it."""
    return _text(*load(paths), root)


def _text(learners: list[Learner], unreadable: list[str], root: Path | str = progress.ROOT) -> str:
    text = tabulate(learners, root)
    for u in unreadable:
        text += f"\nnot read (run ./course.sh check --json > NAME.json on that seat again): {u}"
    return text


def main(argv: list[str] | None = None) -> int:
    """Print the table; exit 1 if a learner is not ready or a path cannot be read, 2 on no path."""
    paths = sys.argv[1:] if argv is None else argv
    if not paths or paths[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not paths else sys.stdout)
        return 0 if paths else 2
    learners, unreadable = load(paths)
    print(_text(learners, unreadable))
    return 0 if learners and not unreadable and all(w.seat and w.seat.get("ready")
                                                     for w in learners) else 1


if __name__ == "__main__":
    sys.exit(main())
