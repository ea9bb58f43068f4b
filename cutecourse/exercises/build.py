"""Write exercises/NN_*.ipynb from solutions/NN_*.ipynb by blanking the solution regions.

In a solution notebook, a code cell's answer sits between ``# BEGIN SOLUTION`` and
``# END SOLUTION``; the exercise keeps everything else and puts, in place of the region,
the line after ``# BEGIN SOLUTION`` if it is a ``# EXERCISE: ...`` comment (a stub the learner
edits, e.g. ``# EXERCISE: tiler = ...``) or ``raise NotImplementedError  # your code here``.
A cell tagged ``solution-only`` (the "why" after an exercise, read once the learner has tried)
is left out of the exercise. Outputs are cleared. Run: ``python -m cutecourse.exercises.build`` (``--check`` to verify only).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_REGION = re.compile(r"^([ \t]*)# BEGIN SOLUTION[^\n]*\n(.*?)^[ \t]*# END SOLUTION[^\n]*(\n|$)",
                     re.MULTILINE | re.DOTALL)

SOLUTION_ONLY = "solution-only"  # cell tag: kept in solutions/, dropped from exercises/


def blank(source: str) -> str:
    def repl(m: re.Match) -> str:
        indent, body = m.group(1), m.group(2)
        stubs = [ln.strip()[len("# EXERCISE:"):].strip() for ln in body.splitlines()
                 if ln.strip().startswith("# EXERCISE:")]
        lines = stubs or ["raise NotImplementedError  # your code here"]
        return "".join(f"{indent}{ln}\n" for ln in lines)

    return _REGION.sub(repl, source)


def exercise_notebook(solution_path: Path):
    import nbformat

    nb = nbformat.read(solution_path, as_version=4)
    nb.cells = [c for c in nb.cells if SOLUTION_ONLY not in c.get("metadata", {}).get("tags", [])]
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.source = blank(cell.source).rstrip("\n")
            cell.outputs = []
            cell.execution_count = None
        elif cell.cell_type == "markdown":
            cell.source = cell.source.replace("(solution)", "(exercise)")
    nb.metadata.pop("widgets", None)
    return nb


def main(argv: list[str] | None = None) -> int:
    import nbformat

    check = "--check" in (argv if argv is not None else sys.argv[1:])
    stale = []
    for sol in sorted((ROOT / "solutions").glob("*.ipynb")):
        target = ROOT / "exercises" / sol.name
        text = nbformat.writes(exercise_notebook(sol)) + "\n"
        if not target.exists() or target.read_text() != text:
            stale.append(target.name)
            if not check:
                target.write_text(text)
    if check and stale:
        print("out of date (run python -m cutecourse.exercises.build):", ", ".join(stale))
        return 1
    print(("checked" if check else "wrote"), ", ".join(stale) or "nothing to change")
    return 0


if __name__ == "__main__":
    sys.exit(main())
