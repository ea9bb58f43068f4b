"""The recipes of docs/DEVELOPING.md, applied as written: each is a ```diff block of the page.

A block names its file (``+++ b/PATH``) and holds hunks whose header is only an anchor
(``@@ class AddBias(EpilogueOp):``, a line of the file the hunk comes after), so that the page reads
as code, not as line numbers. ``apply`` puts a hunk where a reader would: the first place after the
anchor where its old lines (context and ``-``) stand, replaced by its new lines (context and ``+``).
A hunk whose old lines are not there is an error naming the page's section: on an unedited
package, the page went stale (on a tree that already holds the recipe, it is the recipe's own
change; the page's tests are for the page, the recipes name the tests of a contributor's class).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "DEVELOPING.md"


def section(title: str) -> str:
    """The text of the page's section ``title`` (its heading's text), up to the next heading of
    its level or above; a ``#`` line inside a code block is not a heading."""
    lines, out, level, fenced = PAGE.read_text().splitlines(), None, 0, False
    for line in lines:
        if line.startswith("```"):
            fenced = not fenced
        heading = re.match(r"(#+) (.*)", line) if not fenced else None
        if out is None:
            if heading and heading.group(2) == title:
                out, level = [], len(heading.group(1))
        elif heading and len(heading.group(1)) <= level:
            break
        else:
            out.append(line)
    if out is None:
        raise LookupError(f"docs/DEVELOPING.md has no section {title!r}")
    return "\n".join(out) + "\n"


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


def exercise_cells(title: str = "Adding an exercise"):
    """The section's notebook cells, as the page shows them: (heading, class cell, check cell),
    and the test it shows (dedented: it sits in a list item)."""
    import textwrap

    sec = section(title)
    heading = re.search(r"```markdown\n(.*?)```", sec, re.S).group(1).strip()
    class_cell, check_cell = (c.rstrip() for c in re.findall(r"^```python\n(.*?)^```", sec, re.S | re.M)[:2])
    test = textwrap.dedent(re.search(r"( *)```python\n(\1CELLS = .*?)\1```", sec, re.S).group(2))
    return heading, class_cell, check_cell, test


def add_exercise(root: Path, notebook: str = "03_hopper_gemm_prefetch.ipynb", after: str = "## Exercise 6"):
    """Apply "Adding an exercise" to the tree at ``root`` (a copy with ``cutecourse``, ``solutions``
    and ``tests/solution_cells.py``): its diff, its three cells after the cells of ``after``, and
    its test as ``tests/test_page_exercise.py``; returns that test's path."""
    import nbformat

    apply("Adding an exercise", root)
    heading, class_cell, check_cell, test = exercise_cells()
    path = root / "solutions" / notebook
    nb = nbformat.read(path, as_version=4)
    start = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and c.source.startswith(after))
    end = next((i for i in range(start + 1, len(nb.cells))
                if nb.cells[i].cell_type == "markdown" and nb.cells[i].source.startswith("## ")), len(nb.cells))
    nb.cells[end:end] = [nbformat.v4.new_markdown_cell(heading), nbformat.v4.new_code_cell(class_cell),
                         nbformat.v4.new_code_cell(check_cell)]
    nbformat.write(nb, path)
    out = root / "tests" / "test_page_exercise.py"
    out.write_text("import pytest\nfrom solution_cells import SolutionCells\n\nfrom cutecourse.exercises import nb03\n\n"
                   + test)
    return out
