"""``./course.sh handout [OUT]``: what a teacher gives a room, and the answers to release later.

Two zip files in ``OUT`` (default ``build/handout``):

* ``cutecourse-learner.zip``: the notebooks, the exercises, the ``cutecourse`` package the
  notebooks import, the committed benchmark results they show, the background docs, ``course.sh``
  and ``HANDOUT.md`` (one page: how to start, on Linux, WSL2 or a remote machine). No solutions,
  no tests, no teacher's notes (they answer the notebooks' predictions), no design notes.
* ``cutecourse-solutions.zip``: ``solutions/``, to hand out after each block (or at the end).

Files come from ``git ls-files`` where the course is a git checkout (so nothing untracked or
built leaks in), else from the folders on disk. ``cutecourse.site.stage`` builds the matching
learner edition of the site (``./course.sh site --learner``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import zipfile
from pathlib import Path

from .stage import LEFT_OUT_OF_LEARNER, ROOT

DEFAULT_OUT = ROOT / "build" / "handout"
#: What learners get: top-level files, and folders (every file under them).
LEARNER_FILES = ("course.sh", "pyproject.toml", "README.md", "environment.yml", "LICENSE",
                 "LICENSE-lessons.md")
LEARNER_DIRS = ("cutecourse/", "notebooks/", "exercises/", "benchmarks/", "docs/")
#: Never in the learner zip, even under a folder above.
LEFT_OUT = LEFT_OUT_OF_LEARNER

HOW_TO = """\
# cutecourse: how to start

This folder is the course without its answers (your teacher releases them after each block).

**You need** a Linux machine (x86-64 or aarch64) with Python 3.10 or newer, or WSL2 on Windows.
A GPU is optional: without one every kernel is compiled for its real target on your CPU and
the course shows what the compiler made. On a Mac the course cannot be installed (NVIDIA's CuTe
DSL has no macOS package): read the site your teacher gives out, and run the notebooks on a
remote Linux machine (below).

**Start** (the set-up downloads the packages once; afterwards everything works offline):

```bash
unzip cutecourse-learner.zip -d cutecourse && cd cutecourse
./course.sh setup    # once: sets up .venv (about 1.8 GB without a GPU)
./course.sh check    # under a minute: must end with READY
./course.sh lab      # opens notebook 01 in JupyterLab
```

**On a remote Linux machine** (a GPU server, a cloud machine):
run `./course.sh lab --no-browser` there (as root it adds `--allow-root` itself), then on your
laptop `ssh -L 8888:localhost:8888 user@host` and open the `http://localhost:8888/lab?token=...`
address it printed. Another port: `./course.sh lab --no-browser --port 9999` and
`ssh -L 9999:localhost:9999 user@host`.

**Working through it:** read a notebook top to bottom, running each cell; each notebook ends with
exercises in `exercises/`: fill in the cells marked for you, run them, and run the check cell
under each, which says what is wrong and gives a hint. `./course.sh COMMAND --help` explains
each command.

**Licences:** the code is MIT (`LICENSE`), the lesson text CC BY 4.0 (`LICENSE-lessons.md`).
"""


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


def solution_files(files: list[str]) -> list[str]:
    return sorted(f for f in files if f.startswith("solutions/") and (ROOT / f).is_file())


def _zip(path: Path, files: list[str], extra: dict[str, str]) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for f in files:
            info = zipfile.ZipInfo.from_file(ROOT / f, f)
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, (ROOT / f).read_bytes())  # keeps course.sh executable
        for name, text in extra.items():
            z.writestr(name, text)


def write(out: Path = DEFAULT_OUT) -> tuple[Path, Path]:
    """Write both zips (and HANDOUT.md beside them) into ``out``; return the two zip paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files = _tracked() or _on_disk()
    learner, answers = out / "cutecourse-learner.zip", out / "cutecourse-solutions.zip"
    _zip(learner, learner_files(files), {"HANDOUT.md": HOW_TO})
    _zip(answers, solution_files(files), {})
    (out / "HANDOUT.md").write_text(HOW_TO)
    return learner, answers


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="./course.sh handout", description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", default=str(DEFAULT_OUT), help="output folder (default: %(default)s)")
    args = ap.parse_args(argv)
    learner, answers = write(Path(args.out))
    for p in (learner, answers):
        with zipfile.ZipFile(p) as z:
            size = p.stat().st_size
            print(f"handout: {p} ({len(z.namelist())} files, "
                  + (f"{size / 1e6:.1f} MB)" if size >= 1e6 else f"{size / 1e3:.0f} kB)"))
    print(f"handout: give out {learner.name} (and the learner site: ./course.sh site --learner); "
          f"release {answers.name} after each block. How to start: {learner.parent / 'HANDOUT.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
