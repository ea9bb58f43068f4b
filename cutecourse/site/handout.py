"""``./course.sh handout [OUT]``: what a teacher gives a room, and the answers to release later.

Zip files in ``OUT`` (default ``build/handout``):

* ``cutecourse-learner.zip``: the notebooks, the exercises, the ``cutecourse`` package the
  notebooks import, the committed benchmark results they show, the background docs, ``course.sh``,
  the learner edition's own ``README.md`` and ``HANDOUT.md`` (one page: how to start, on Linux,
  WSL2 or a remote machine, and how to send the seat check to the teacher;
  ``cutecourse.site.learner``). No solutions, no tests, no teacher's notes (they answer the
  notebooks' predictions), no design notes, no developer tools.
* ``FEEDBACK.md``: the feedback form to print (``docs/instructor/feedback.md``), saying where
  the teacher sends the room's summary (``cutecourse.workshop.FEEDBACK_TO``).
* ``cutecourse-solutions-NN.zip``, one per notebook: its ``solutions/NN*.ipynb`` (01's holds 01b
  too), to release once the room has tried that notebook's exercises. Unzipped in the course
  folder, it adds them as ``solutions/``.

Files come from ``git ls-files`` where the course is a git checkout (so nothing untracked or
built leaks in), else from the folders on disk. Every entry gets the same plain modes (0644, 0755
for what is executable in the course), whatever the teacher's umask. ``cutecourse.site.stage``
builds the matching learner edition of the site (``./course.sh site --learner``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from .. import workshop
from . import learner
from .stage import LEFT_OUT_OF_LEARNER, ROOT

DEFAULT_OUT = ROOT / "build" / "handout"
#: What learners get: top-level files, and folders (every file under them). README.md is the
#: learner edition's own (``learner.readme``), not the repository's.
LEARNER_FILES = ("course.sh", "pyproject.toml", "environment.yml", "LICENSE", "LICENSE-lessons.md")
LEARNER_DIRS = ("cutecourse/", "notebooks/", "exercises/", "benchmarks/", "docs/")
#: Never in the learner zip, even under a folder above.
LEFT_OUT = LEFT_OUT_OF_LEARNER
LEARNER_ZIP = "cutecourse-learner.zip"
#: Files whose sentences the learner edition rewords (``learner.REWORDED``).
REWORDED_SUFFIXES = (".ipynb", ".md")


solutions_zip = workshop.solutions_zip  # cutecourse-solutions-03.zip: the agendas name them too


def _tracked() -> list[str] | None:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return [p for p in out.stdout.decode().split("\0") if p] if out.returncode == 0 else None


def _on_disk() -> list[str]:
    return [str(p.relative_to(ROOT)) for p in ROOT.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and ".venv" not in p.parts]


def learner_files(files: list[str]) -> list[str]:
    """The learner zip's files among ``files`` (repository-relative paths)."""
    keep = [f for f in files if f in LEARNER_FILES or f.startswith(LEARNER_DIRS)]
    return sorted(f for f in keep if not f.startswith(LEFT_OUT) and (ROOT / f).is_file())


def solution_files(files: list[str]) -> dict[str, list[str]]:
    """The solution notebooks among ``files``, by notebook number ("01": 01 and 01b)."""
    out: dict[str, list[str]] = {}
    for f in sorted(files):
        if f.startswith("solutions/") and f.endswith(".ipynb") and (ROOT / f).is_file():
            out.setdefault(Path(f).name[:2], []).append(f)
    return out


def _entry(name: str, executable: bool = False) -> zipfile.ZipInfo:
    """A zip entry with plain modes: -rw-r--r--, or -rwxr-xr-x for an executable (zipfile's own
    default, 0600, would leave a file the other users of a shared server cannot read)."""
    info = zipfile.ZipInfo(name, time.localtime()[:6])
    info.external_attr = (0o100755 if executable else 0o100644) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def _zip(path: Path, files: list[str], extra: dict[str, str], reword: bool = False) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for f in files:
            data = (ROOT / f).read_bytes()
            if reword and f.endswith(REWORDED_SUFFIXES):
                data = learner.reword(data.decode("utf-8")).encode("utf-8")
            z.writestr(_entry(f, os.access(ROOT / f, os.X_OK)), data)
        for name, text in extra.items():
            z.writestr(_entry(name), text)


FEEDBACK_FORM = ROOT / "docs" / "instructor" / "feedback.md"
FEEDBACK_UNSET = ("not set yet: put the course's issue tracker or its maintainers' address in "
                  "`FEEDBACK_TO` (`cutecourse/workshop.py`) and run `./course.sh handout` again")


def feedback_form(send_to: str | None = None) -> str:
    """The feedback form with, under its title, where the teacher sends the room's summary."""
    send_to = workshop.FEEDBACK_TO if send_to is None else send_to
    title, _, rest = FEEDBACK_FORM.read_text(encoding="utf-8").partition("\n")
    return f"{title}\n\n**The room's summary goes to:** {send_to.strip() or FEEDBACK_UNSET}.\n{rest}"


def write(out: Path = DEFAULT_OUT) -> tuple[Path, list[Path]]:
    """Write the learner zip, one answers zip per notebook, and HANDOUT.md beside them into
    ``out``; return the learner zip's path and the answers zips' paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files = _tracked() or _on_disk()
    for old in out.glob("cutecourse-solutions*.zip"):  # a notebook renamed since the last run
        old.unlink()
    path = out / LEARNER_ZIP
    _zip(path, learner_files(files), {"README.md": learner.readme(), "HANDOUT.md": learner.HOW_TO},
         reword=True)
    answers = []
    for number, notebooks in solution_files(files).items():
        answers.append(out / solutions_zip(number))
        _zip(answers[-1], notebooks, {})
    (out / "HANDOUT.md").write_text(learner.HOW_TO)
    if FEEDBACK_FORM.exists():
        (out / "FEEDBACK.md").write_text(feedback_form())
    return path, answers


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="./course.sh handout", description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", default=str(DEFAULT_OUT), help="output folder (default: %(default)s)")
    args = ap.parse_args(argv)
    path, answers = write(Path(args.out))
    for p in (path, *answers):
        with zipfile.ZipFile(p) as z:
            size = p.stat().st_size
            print(f"handout: {p} ({len(z.namelist())} files, "
                  + (f"{size / 1e6:.1f} MB)" if size >= 1e6 else f"{size / 1e3:.0f} kB)"))
    print(f"handout: give out {path.name} (and the learner site: ./course.sh site --learner); "
          f"release {solutions_zip('NN')} once the room has tried notebook NN's exercises "
          f"(docs/workshop.md's agendas say when). How to start: {path.parent / 'HANDOUT.md'}")
    if not workshop.FEEDBACK_TO.strip():
        print(f"handout: the feedback form ({path.parent / 'FEEDBACK.md'}) does not say where the "
              "room's summary goes: set FEEDBACK_TO in cutecourse/workshop.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
