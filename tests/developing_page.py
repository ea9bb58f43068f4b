"""The recipes of docs/DEVELOPING.md, applied as written: each is a ```diff block of the page.

A block names its file (``+++ b/PATH``) and holds hunks whose header is only an anchor
(``@@ class AddBias(EpilogueOp):``, a line of the file the hunk comes after), so that the page reads
as code, not as line numbers. ``apply`` puts a hunk where a reader would: the first place after the
anchor where its old lines (context and ``-``) stand, replaced by its new lines (context and ``+``).
A hunk whose old lines are not there is an error naming the page's section: the page went stale.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "DEVELOPING.md"


def section(title: str) -> str:
    """The text of the page's section ``### title`` (up to the next heading)."""
    page = PAGE.read_text()
    found = re.search(rf"^#+ {re.escape(title)}\n(.*?)(?=^#+ |\Z)", page, re.S | re.M)
    if not found:
        raise LookupError(f"docs/DEVELOPING.md has no section {title!r}")
    return found.group(1)


def diffs(title: str) -> list[tuple[str, list[tuple[str, list[str]]]]]:
    """The section's diff blocks: (file, [(anchor, hunk lines)]), in page order."""
    out = []
    for block in re.findall(r"```diff\n(.*?)```", section(title), re.S):
        lines = block.splitlines()
        path = next((ln[len("+++ b/"):] for ln in lines if ln.startswith("+++ b/")), None)
        hunks = []
        for ln in lines:
            if ln.startswith("@@"):
                hunks.append((ln[2:].strip(), []))
            elif hunks:
                hunks[-1][1].append(ln)
            elif not ln.startswith(("---", "+++")):  # a block of added lines only (a new cell)
                hunks.append(("", [ln]))
        out.append((path, hunks))
    return out


def apply_hunk(text: str, anchor: str, lines: list[str], where: str) -> str:
    """``text`` with one hunk applied after the line ``anchor`` (``where`` names it in errors)."""
    old = [ln[1:] for ln in lines if ln[:1] in (" ", "-") or ln == ""]
    new = [ln[1:] for ln in lines if ln[:1] in (" ", "+") or ln == ""]
    start = 0
    if anchor:
        at = text.find(anchor)
        if at < 0:
            raise AssertionError(f"{where}: the anchor {anchor!r} is not in the file")
        start = text.index("\n", at) + 1
    if not old:
        raise AssertionError(f"{where}: a hunk needs a line of the file (context or -) to stand before")
    old_text, new_text = "\n".join(old) + "\n", "\n".join(new) + "\n"
    at = text.find(old_text, start)
    if at < 0:
        raise AssertionError(f"{where}: these lines are not in the file after {anchor!r}:\n{old_text}")
    return text[:at] + new_text + text[at + len(old_text):]


def apply(title: str, root: Path) -> list[Path]:
    """Apply every diff of the section ``title`` to the tree at ``root``; the files changed."""
    changed = []
    for path, hunks in diffs(title):
        target = root / path
        text = target.read_text()
        for anchor, lines in hunks:
            text = apply_hunk(text, anchor, lines, f"DEVELOPING.md, {title!r}, {path}")
        target.write_text(text)
        changed.append(target)
    return changed


def scratch_package(tmp: Path) -> Path:
    """A copy of the ``cutecourse`` package under ``tmp`` (its root), to apply recipes to."""
    shutil.copytree(ROOT / "cutecourse", tmp / "cutecourse",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return tmp
