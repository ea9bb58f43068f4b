"""The learner's classes of a solution notebook, for the kernel-exercise tests: each test starts
from the course's answer (read from ``solutions/``, so the two cannot drift apart) and edits it
into a typical mistake."""

import re
from pathlib import Path

import nbformat

from cutecourse.exercises.learner_code import as_cell

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"
_MARKERS = re.compile(r"[ \t]*# (BEGIN|END) SOLUTION\n|[ \t]*# EXERCISE:.*\n")


class SolutionCells:
    """The notebook's first ``import cutlass`` cell (``head``) and each ``class <name>`` cell, with
    the solution markers removed."""

    def __init__(self, notebook: str, names):
        nb = nbformat.read(SOLUTIONS / notebook, as_version=4)
        code = [c.source for c in nb.cells if c.cell_type == "code"]
        self.cells = {"head": next(s for s in code if s.startswith("import cutlass"))}
        for name in names:
            src = next(s for s in code if s.startswith(f"class {name}"))
            self.cells[name] = _MARKERS.sub("", src)

    def __getitem__(self, name: str) -> str:
        return self.cells[name]

    def learner(self, name: str, *edits):
        """The solution's class ``name`` with ``edits`` ((old, new) text replacements) applied,
        defined the way a notebook cell defines it (after the head cell)."""
        src = self.cells[name]
        for old, new in edits:
            assert old in src, old
            src = src.replace(old, new)
        ns = as_cell(self.cells["head"])
        as_cell(src, ns)
        return ns[name]



class CellsById(SolutionCells):
    """Like :class:`SolutionCells`, for cells that define a function (``@cute.jit`` then ``def``)
    or only assign: the cells ``ids``, each under the name of the function it defines (else its
    id), markers removed; ``head`` the setup cell without its ``banner(`` line."""

    def __init__(self, notebook: str, ids):
        nb = nbformat.read(SOLUTIONS / notebook, as_version=4)
        self.cells = {}
        for c in nb.cells:
            if c.get("id") in ids:
                m = re.search(r"^def (\w+)", c.source, re.M)
                self.cells[m.group(1) if m else c.id] = _MARKERS.sub("", c.source + "\n")
        setup = next(c.source for c in nb.cells if c.cell_type == "code")
        self.cells["head"] = "\n".join(ln for ln in setup.splitlines() if "banner(" not in ln) + "\n"
