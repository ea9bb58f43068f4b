"""A room's seat checks in one table: ``./course.sh check --json`` on every seat, then
``python -m cutecourse.check --tabulate seats/*.json`` on the teacher's machine.

Each seat writes one JSON object (host, verdict, every line of the check, the run-or-compile table);
the teacher collects the files any way the room allows (a shared folder, a chat upload,
``scp``) and gets one markdown table: a row per seat, what it runs, and for a seat that is not
ready the first failure and its fix, so the room's problems are fixed before the first notebook.
"""

from __future__ import annotations

import json
import platform
import socket
import sys
import time
from pathlib import Path

SCHEMA = 1


def seat_json(lines, seconds: float, table) -> str:
    """The check's findings (``cutecourse.check.Line`` objects) as one JSON object."""
    failed = [ln.label for ln in lines if ln.status == "fail"]
    runs = bool(table) and any("runs" in what for _, what in table)
    return json.dumps({
        "schema": SCHEMA,
        "host": socket.gethostname(),
        "machine": f"{platform.system()} {platform.machine()}",
        "when": time.strftime("%Y-%m-%d %H:%M", time.localtime()),
        "seconds": round(seconds, 1),
        "ready": not failed,
        "track": "gpu" if runs else "no-gpu",
        "lines": [{"label": ln.label, "status": ln.status, "detail": ln.detail, "fix": ln.fix}
                  for ln in lines],
        "notebooks": [{"notebook": n, "here": what} for n, what in (table or [])],
    }, indent=1)


def _detail(seat: dict, label: str) -> str:
    for ln in seat.get("lines", []):
        if ln["label"] == label:
            return ln["detail"].split(" (")[0]
    return "-"


def _cell(text: str) -> str:
    return text.replace("|", "/").replace("\n", " ")


def tabulate(seats: list[tuple[str, dict]]) -> str:
    """One markdown table for the room: ready seats first sorted by host, then the rest."""
    rows = ["| seat | ready | track | DSL | torch | GPU | first problem and its fix |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, s in sorted(seats, key=lambda x: (not x[1].get("ready"), x[1].get("host", x[0]))):
        bad = [ln for ln in s.get("lines", []) if ln["status"] in ("fail", "warn")]
        problem = (f"{bad[0]['label']}: {bad[0]['detail']}" + (f" -> {bad[0]['fix']}" if bad[0]["fix"] else "")
                   if bad else "")
        rows.append("| " + " | ".join(_cell(c) for c in (
            s.get("host", name), "yes" if s.get("ready") else "**NO**", s.get("track", "?"),
            _detail(s, "CuTe DSL"), _detail(s, "torch"), _detail(s, "GPU"), problem[:300])) + " |")
    ready = sum(1 for _, s in seats if s.get("ready"))
    gpu = sum(1 for _, s in seats if s.get("track") == "gpu")
    return "\n".join(rows) + f"\n\n{ready} of {len(seats)} seats ready; {gpu} run kernels on a GPU."


def main(paths: list[str]) -> int:
    """Print the table for the JSON files ``paths``; exit 1 if any seat is not ready or a file
    cannot be read (named, with why)."""
    if not paths:
        print("usage: python -m cutecourse.check --tabulate seats/*.json  (each file: the output "
              "of ./course.sh check --json on one seat)", file=sys.stderr)
        return 2
    seats, unreadable = [], []
    for p in paths:
        try:
            seats.append((Path(p).stem, json.loads(Path(p).read_text())))
        except (OSError, ValueError) as exc:
            unreadable.append(f"{p}: {exc}")
    print(tabulate(seats))
    for u in unreadable:
        print(f"not a seat check (run ./course.sh check --json > FILE on that seat again): {u}")
    return 0 if seats and not unreadable and all(s.get("ready") for _, s in seats) else 1
