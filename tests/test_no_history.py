"""The tree says what is, not how it came to be: no issue numbers, no talk of work periods.

Scans every tracked text file (``git ls-files``; a notebook's cell sources, not its outputs) for
words that belong in a commit message or a tracker, not in a course: "issue N" or "(issue #N)"
with a number for N, "this session", a session or run counted by an ordinal, "earlier version", as
chapters of the project's history. The patterns are narrow on purpose: "issue" the verb ("warp 0 issues 4 wgmmas"), a
JupyterHub or process session, benchmark "rounds", a JIT's "first call" are the course's own words
and pass. ``docs/gpu_verification.md`` is a dated log of GPU runs: dates and devices are its
content, and the same patterns hold for it.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ORDINAL = r"(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|\d+(?:st|nd|rd|th))"

#: (name, pattern): each names what it catches in the failure message. Case-insensitive.
PATTERNS = [
    # "issue #N", "issue N", "issues N and M" (numbers): an issue number ends at punctuation, the line's end
    # or a possessive; the verb is followed by what is issued ("issue N wgmmas", "issues 1/CN").
    ("issue number", r"\bissues?\s*#\d+"),
    ("issue number", r"\bissues?\s+\d+(?:\s*(?:,|and)\s*\d+)*(?=\s*(?:[),;:]|\.(?:\s|$)|$|'s\b|asked\b|"
                     r"waited\b|item\b))"),
    ("tracker reference", r"\b(?:PR|pull request|ticket)\s*#\d+"),
    ("work session", rf"\b(?:this|that|last|previous|earlier|later|next|same|current)\s+session\b"),
    ("work session", rf"\b{ORDINAL}\s+sessions?\b"),
    ("work session", rf"\b{ORDINAL}(?:\s*,\s*{ORDINAL})*\s*,?\s+(?:and|or)\s+{ORDINAL}\s+sessions\b"),
    ("work session", r"\bsession\s+\d+\b"),
    ("work round", r"\b(?:this|last|previous|next)\s+round\s+of\s+(?:work|reviews?|changes)\b"),
    ("work round", r"\bthis round\b(?!\s+of\s+(?:the|its|a)\b)(?!'s\s+(?:ratio|repeat|case))"),
    ("earlier version", r"\b(?:earlier|previous|older|first|old)\s+(?:version|draft)s?\b"),
    ("run ordinal", rf"\b{ORDINAL}\s+(?:run|rerun)\b"),
    ("work period", r"\bwork(?:ing)?\s+period\b"),
    ("dated update", r"\bupdate,\s+\d{4}-\d{2}-\d{2}\b"),
]
COMPILED = [(name, re.compile(rx, re.I | re.M)) for name, rx in PATTERNS]

#: Files whose subject is these patterns: this test.
EXEMPT = {"tests/test_no_history.py"}
BINARY = {".png", ".jpg", ".jpeg", ".gif", ".svg", ".ico", ".pdf", ".zip", ".xz", ".gz", ".whl", ".so"}


def tracked() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"not a git checkout ({exc}): the scan reads `git ls-files`")
    return [p for p in out.stdout.decode().split("\0") if p]


def texts(path: str) -> list[tuple[str, str]]:
    """(where, text) pieces of one file: a notebook's cells one by one, any other file whole."""
    full = ROOT / path
    if full.suffix.lower() in BINARY or not full.is_file():
        return []
    try:
        raw = full.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return []
    if full.suffix == ".ipynb":
        cells = json.loads(raw)["cells"]
        return [(f"{path} cell {i}", "".join(c["source"])) for i, c in enumerate(cells)]
    return [(path, raw)]


def findings(where: str, text: str) -> list[str]:
    found = []
    for name, rx in COMPILED:
        for m in rx.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            found.append(f"{where}:{line}: {name}: {m.group(0)!r}")
    return found


def test_no_issue_numbers_or_work_periods_in_the_tree():
    found = [f for path in tracked() if path not in EXEMPT for where, text in texts(path)
             for f in findings(where, text)]
    assert not found, ("the tree should say what is, not how it came to be (issue numbers and work "
                       "periods belong in commit messages); rephrase:\n  " + "\n  ".join(found))


N, SESSION = 33, "session"  # the examples below are built from these, so this file holds none


@pytest.mark.parametrize("text", [
    f"Issue {N} asked for the bf16 kernel", f"(issue {N}, item 3)", f"see issue #{N}", f"issues {N} and {N + 1}.",
    f"the GPU runs issue {N} waited for", "in this session", "the last session", f"fourth and eighth {SESSION}s",
    f"second, third, fourth and eighth {SESSION}s", "(same session)", "session 3", "an earlier version of the script",
    "its first version loaded", "A third run (H100)", "First rerun of the script", "this work period",
    "**Update, 2026-11-26 (H100).**", "in this round the tests",
])
def test_catches(text):
    assert findings("example", text), text


@pytest.mark.parametrize("text", [
    f"The {4} `cute.gemm` calls issue {4} `wgmma.mma_async`", "each CTA issues 8 copies", "it issues 1/CN of A's box",
    f"it must issue {128}-bit loads", "a JupyterHub session", "start_new_session=True", "its own session: the server",
    "3 interleaved rounds in a shuffled order", "repeat i ran in the same round", "Round 1 starts at tile 127",
    "DeepGEMM's first call compiles", "the earlier revision's package", "grouped_speed_session.sh",
    "after the session, your teacher gives out the answers", "issue the wgmmas, then commit",
])
def test_passes(text):
    assert not findings("example", text), findings("example", text)
