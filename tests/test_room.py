"""The teacher's table: one row per learner, from a drop folder or the learners' own folders."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from cutecourse import check, progress, room

ROOT = Path(__file__).resolve().parent.parent
OK = [check.Line("Python", "ok", "3.11.7"), check.Line("CuTe DSL", "ok", "nvidia-cutlass-dsl 4.8.1"),
      check.Line("torch", "ok", "2.13.0+cpu (CPU-only build)")]
BROKEN = OK[:2] + [check.Line("torch", "fail", "torch is not installed", check.SETUP_FIX)]


def _seat(lines, learner="", exercises=None, host="gpu-server"):
    data = json.loads(room.seat_json(lines, 20.8, [("01 Layouts", "compiles for sm_90a and inspects")],
                                     forced_compile=True))
    data.update(host=host, learner=learner, progress=exercises or {})
    return data


def _rows(text):
    return {ln.split(" | ")[0][2:]: ln.split(" | ") for ln in text.splitlines()
            if ln.startswith("| ") and not ln.startswith(("| learner", "| ---"))}


def _passing(*keys):
    return {k: {"ok": True, "notebook": progress.notebook_of(k.split(".")[0]), "title": k} for k in keys}


def test_a_drop_folder_of_files_named_by_learner(tmp_path):
    """Every seat of one server has the same host name: the rows are the learners, and each
    notebook's cell counts the exercises passed out of the check cells of its notebooks."""
    drop = tmp_path / "seats"
    drop.mkdir()
    totals = progress.exercises(ROOT)
    done = _passing(*totals["03"][:2], *totals["01"])
    done["nb03.check_stages"] = {"ok": False}  # tried, failing now
    (drop / "alice.json").write_text(json.dumps(_seat(OK, "root", done)))
    (drop / "bob.json").write_text(json.dumps(_seat(BROKEN, "root")))
    rows = _rows(room.rollup([drop]))
    assert list(rows) == ["alice", "bob"]
    header = room.rollup([drop]).splitlines()[0]
    assert header.startswith("| learner | ready | track | 01 | 02 | 03 |")
    alice = rows["alice"]
    assert alice[1:3] == ["yes", "compile"]
    assert alice[3] == f"{len(totals['01'])}/{len(totals['01'])}"
    assert alice[5] == f"2/{len(totals['03'])}" and alice[4] == f"0/{len(totals['02'])}"
    assert rows["bob"][1] == "**NO**" and "torch is not installed" in rows["bob"][-1]
    assert "1 of 2 learners ready" in room.rollup([drop])


def test_learners_own_folders_on_a_shared_server(tmp_path):
    """``python -m cutecourse.room /home/*/.cutecourse``: the seat check each learner last ran,
    and their progress file as it is now (fresher than the copy inside the check)."""
    homes = tmp_path / "home"
    for name, seat, now in (("alice", OK, ["nb02.check_tv_layout"]), ("bob", None, ["nb02.check_coalesced"])):
        folder = homes / name / ".cutecourse"
        folder.mkdir(parents=True)
        if seat is not None:
            (folder / "seat.json").write_text(json.dumps(_seat(seat, name, {})))
        for key in now:
            assert progress.record(f"cutecourse.exercises.{key.split('.')[0]}", key.split(".")[1],
                                   key, True, file=folder / "progress.json")
    text = room.rollup(sorted(homes.glob("*/.cutecourse")))
    rows = _rows(text)
    assert set(rows) == {"alice", progress.learner()}, "bob's progress file names its writer"
    assert rows["alice"][1] == "yes" and rows["alice"][4] == f"1/{len(progress.exercises(ROOT)['02'])}"
    assert rows[progress.learner()][1] == "not checked" and "./course.sh check" in rows[progress.learner()][-1]


def test_a_folder_with_nothing_named_falls_back_to_its_owner(tmp_path):
    folder = tmp_path / "carol" / ".cutecourse"
    folder.mkdir(parents=True)
    seat = _seat(OK)
    seat.pop("learner")
    (folder / "seat.json").write_text(json.dumps(seat))
    import pwd

    owner = pwd.getpwuid(folder.stat().st_uid).pw_name
    assert list(_rows(room.rollup([folder]))) == [owner]


def test_same_learner_twice_and_unreadable_files_are_shown(tmp_path):
    a, b = tmp_path / "a" / ".cutecourse", tmp_path / "b" / ".cutecourse"
    for folder in (a, b):
        folder.mkdir(parents=True)
        (folder / "seat.json").write_text(json.dumps(_seat(OK, "sam")))
    (tmp_path / "sam.json").write_text("[1, 2]")
    (tmp_path / "empty").mkdir()
    text = room.rollup([a, b, tmp_path / "sam.json", tmp_path / "empty"])
    assert sorted(_rows(text)) == [f"sam ({a})", f"sam ({b})"]
    assert "sam.json: not a JSON object" in text and "empty: no NAME.json files" in text


def test_older_seat_files_without_progress_still_read(tmp_path):
    old = _seat(OK)
    for key in ("learner", "progress"):
        old.pop(key)
    old["schema"] = 1
    (tmp_path / "seat-vm.json").write_text(json.dumps(old))
    rows = _rows(room.rollup([tmp_path / "seat-vm.json"]))
    assert rows["seat-vm"][3].startswith("0/")


def test_the_command_line(tmp_path):
    (tmp_path / "alice.json").write_text(json.dumps(_seat(OK, "alice")))
    run = [sys.executable, "-m", "cutecourse.room"]
    ok = subprocess.run(run + [str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert ok.returncode == 0 and "| alice | yes |" in ok.stdout, ok.stderr
    none = subprocess.run(run, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert none.returncode == 2 and "usage" in none.stderr
