"""exercises/ is generated from solutions/: keep it in step, and never leak an answer."""

import json
from pathlib import Path

from cutecourse.exercises import build

ROOT = Path(__file__).resolve().parent.parent


def test_blank_replaces_solution_regions():
    src = "x = 1\n    # BEGIN SOLUTION\n    # EXERCISE: y = ...\n    y = 2\n    # END SOLUTION\nprint(y)"
    assert build.blank(src) == "x = 1\n    y = ...\nprint(y)"
    assert "NotImplementedError" in build.blank("# BEGIN SOLUTION\nz = 3\n# END SOLUTION\n")


def test_exercise_notebooks_are_up_to_date():
    assert build.main(["--check"]) == 0, "run: python -m cutecourse.exercises.build"


def test_every_solution_has_an_exercise_without_answers():
    solutions = sorted((ROOT / "solutions").glob("*.ipynb"))
    assert solutions
    for sol in solutions:
        ex = ROOT / "exercises" / sol.name
        assert ex.exists(), ex
        text = "".join("".join(c["source"]) for c in json.loads(ex.read_text())["cells"])
        assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text


def test_solution_only_cells_stay_out_of_the_exercise(tmp_path):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("Exercise 1: write it."),
                nbformat.v4.new_markdown_cell("Why it works: the answer.",
                                              metadata={"tags": [build.SOLUTION_ONLY]})]
    path = tmp_path / "99_x.ipynb"
    nbformat.write(nb, path)
    sources = [c.source for c in build.exercise_notebook(path).cells]
    assert sources == ["Exercise 1: write it."]
