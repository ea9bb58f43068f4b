"""``room rollup``: every learner's seat check, run as that learner, in one table for the teacher.

Each learner's ``check --json`` runs under their own account with the environment their
JupyterLab gets (the room's Python, their compile cache, the room's GPU mode), so it proves what
that learner's notebooks will meet: the environment importable and working for them, the
compiles, which notebooks run kernels. The files land in ``PREFIX/rollup/NAME.json`` (one per
learner, named after the account) and the table in ``PREFIX/rollup/room.md``.
"""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .server_env import learner_env


def check_as(room: dict, name: str, out: Path) -> int:
    """``python -m cutecourse.check --json`` as ``name``, from their home; the JSON into ``out``."""
    env = learner_env(room, name)
    cmd = ["runuser", "-u", name, "--", "env", "-i", *(f"{k}={v}" for k, v in env.items()),
           f"{room['env']}/bin/python", "-m", "cutecourse.check", "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=env["HOME"], timeout=600)
    out.write_text(proc.stdout if proc.stdout.strip() else "")
    return proc.returncode


def room_table(python: str, files: list[Path]) -> subprocess.CompletedProcess:
    """The teacher's table from the seat files: the one place that names the roll-up's command."""
    return subprocess.run([python, "-m", "cutecourse.room", *map(str, files)],
                          capture_output=True, text=True)


def run(room: dict, jobs: int, say) -> int:
    folder = Path(room["prefix"]) / "rollup"
    folder.mkdir(mode=0o700, exist_ok=True)
    names = room["learners"]
    say(f"checking {len(names)} learners' seats as each learner, {jobs} at a time "
        "(about 20-30 s each on a busy machine) ...")
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(lambda n: check_as(room, n, folder / f"{n}.json"), names))
    files = [folder / f"{n}.json" for n in names]
    table = room_table(f"{room['env']}/bin/python", files)
    (folder / "room.md").write_text(table.stdout)
    print(table.stdout + table.stderr, end="")
    say(f"the seat files and the table: {folder}")
    return table.returncode
