"""cutecourse.course and .generate: one notebook list, estimated times, the generated text.

The README's notebook table, docs/workshop.md's agendas and the notebooks' own "Time" sentences
are generated from the notebooks; these tests fail when a notebook changed and the generated text
was not rewritten (``python -m cutecourse.course --write --write-headers``), and check the
estimator on small cases whose answers are worked out by hand. The agendas: test_workshop.py.
"""

import re
from pathlib import Path

import nbformat
import pytest

from cutecourse import course, generate, modes

ROOT = Path(__file__).resolve().parent.parent


def test_readme_and_agenda_are_generated_from_the_notebooks():
    stale = [str(p.relative_to(ROOT)) for p in generate.stale(generate.generated_files())]
    assert not stale, f"{stale} are out of date: run python -m cutecourse.course --write"


def test_notebook_time_sentences_are_the_estimators():
    """Each lesson notebook's "**Time.** About L minutes, plus about E ..." and each exercises
    notebook's "About N minutes." are the estimator's numbers (solutions/ and exercises/ alike)."""
    files = generate.headers()
    stale = [str(p.relative_to(ROOT)) for p in generate.stale(files)]
    assert not stale, f"{stale}: run python -m cutecourse.course --write-headers"
    for est in course.estimates():  # and every lesson notebook has one
        assert course.header_sentence(est) in files[est.notebook.path], est.notebook.file


def test_readme_table_is_the_one_the_module_renders():
    readme = (ROOT / "README.md").read_text()
    block = readme.split(generate.README_START)[1].split(generate.README_END)[0]
    assert block.strip() == generate.readme_table().strip()
    for nb in course.NOTEBOOKS:  # every notebook has its row, with its link and its estimate
        est = course.estimate(nb)
        assert f"| {nb.number} | [{nb.title}](notebooks/{nb.file}) |" in block
        assert f"| {est.lesson_min} + {est.exercises_min} min |" in block


def test_the_list_is_the_notebooks_folder_in_syllabus_order():
    listed = [nb.file for nb in course.NOTEBOOKS]
    assert listed == sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert [nb.number for nb in course.NOTEBOOKS] == [f"{i:02d}" for i in range(1, len(listed) + 1)]
    for nb in course.NOTEBOOKS:
        assert nb.exercise_files, f"notebook {nb.number} has no exercises/{nb.number}*.ipynb"
        for ex in nb.exercise_files:
            assert nb.solution_file(ex).exists()


def test_targets_are_the_ones_each_notebook_asks_modes_for():
    """The run-or-compile table of ./course.sh check comes from ``targets``: they must be the
    targets the notebook's own banner cell passes to cutecourse.modes.banner."""
    for nb in course.NOTEBOOKS:
        first_code = next(c for c in nbformat.read(nb.path, as_version=4).cells if c.cell_type == "code")
        asked = re.findall(r"modes\.banner\(\"([\w]+)\"\)", first_code.source)
        assert tuple(asked) == nb.targets, f"notebook {nb.number}: banner asks {asked}, course.py says {nb.targets}"
        for t in nb.targets:
            assert t in modes.ARCH_NAMES


def test_unknown_notebook_names_the_known_ones():
    with pytest.raises(KeyError, match="01, 02"):
        course.notebook("09")
    assert course.notebook("03").file.startswith("03_")


# -- the estimator, on a notebook built here ---------------------------------------------------------
def _nb(cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    return nb


def _code(*bundles):
    """A code cell with one display output per bundle (a tuple of mime types)."""
    cell = nbformat.v4.new_code_cell("x = 1")
    cell.outputs = [nbformat.v4.new_output("display_data", data={m: "x" for m in mimes})
                    for mimes in bundles]
    return cell


def test_counts_and_minutes_at_the_stated_rates():
    words = " ".join(["word"] * 300)
    cells = [nbformat.v4.new_markdown_cell(words),
             _code(("image/png", "text/plain")),
             _code(("text/html", "text/plain")),
             _code(("application/vnd.jupyter.widget-view+json", "text/plain")),
             _code()]
    total = course.Counts()
    for c in cells:
        total += course._cell_counts(c)
    assert total == course.Counts(words=300, code_cells=4, figures=2, listings=1, listing_lines=1)
    expected = (300 / course.READING_WPM + 4 * course.CODE_CELL_MIN + 2 * course.FIGURE_MIN
                + 1 * course.LISTING_MIN + 1 * course.LISTING_LINE_MIN)
    assert total.minutes == pytest.approx(expected)


def test_a_listing_costs_by_its_lines():
    """A 30-line listing takes longer to read against the prose than a 3-line one."""
    short, long = (nbformat.v4.new_code_cell("show_source(f)") for _ in range(2))
    short.outputs = [nbformat.v4.new_output("display_data", data={"text/html": "a\nb\nc\n"})]
    long.outputs = [nbformat.v4.new_output("display_data", data={"text/html": "x\n" * 30})]
    s, lg = course._cell_counts(short), course._cell_counts(long)
    assert (s.listings, s.listing_lines, lg.listings, lg.listing_lines) == (1, 3, 1, 30)
    assert lg.minutes - s.minutes == pytest.approx(27 * course.LISTING_LINE_MIN)


def test_time_sentences_are_not_counted_as_reading():
    """The generated sentences must not change the estimate they are generated from."""
    a = nbformat.v4.new_markdown_cell("# T\n\n**Time.** About 45 minutes, plus about 30 for the "
                                      "exercises in `exercises/01_x.ipynb`.\n\nfour more words here")
    b = nbformat.v4.new_markdown_cell("# T\n\nfour more words here. About 20 minutes.")
    assert course._cell_counts(a).words == course._cell_counts(b).words == 6


@pytest.mark.parametrize("heading, in_kernel, kind", [
    ("Exercise 4 (kernel): the consumer's mainloop", False, "kernel"),
    ("Exercise 5 (lab): four stages instead of three", False, "lab"),
    ("Exercise 1 · A column-major matrix", False, "short"),
    ("Exercise 3 · The vectorized kernel", True, "kernel"),  # answer written inside @cute.kernel
])
def test_exercise_kind_comes_from_the_heading(heading, in_kernel, kind):
    assert course.exercise_kind(heading, in_kernel) == kind


def test_exercises_are_weighed_by_what_they_ask():
    counts = course.Counts(words=course.READING_WPM)  # one minute of reading
    kernel = course.Exercise("x.ipynb", "Exercise 1 (kernel): k", counts, "kernel", 12)
    lab = course.Exercise("x.ipynb", "Exercise 2 (lab): l", counts, "lab", 1)
    tiny = course.Exercise("x.ipynb", "Exercise 3: a tuple", counts, "short", 1)
    long = course.Exercise("x.ipynb", "Exercise 4: a function", counts, "short", 40)
    assert kernel.minutes == 1 + course.KERNEL_WORK_MIN
    assert lab.minutes == 1 + course.LAB_WORK_MIN
    assert tiny.minutes == 1 + course.SHORT_WORK_MIN + course.SHORT_PER_LINE_MIN
    assert long.minutes == 1 + course.SHORT_MAX_MIN
    assert kernel.minutes > lab.minutes > tiny.minutes


def test_the_header_rewrite_touches_only_the_sentence(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# 09 · X\n\nIntro. **Time**: about 45 minutes.\n\nMore."),
                nbformat.v4.new_markdown_cell("Later: **Time.** About 5 minutes.")]
    text = nbformat.writes(nb) + "\n"
    new = generate._rewrite_first(text, course.TIME_SENTENCE, "**Time.** About 60 minutes.")
    assert new == text.replace("**Time**: about 45 minutes.", "**Time.** About 60 minutes.")
    assert generate._rewrite_first(new, course.TIME_SENTENCE, "**Time.** About 60 minutes.") == new


def test_inline_exercises_are_counted_once_as_exercises():
    """An exercise is its heading cell and the code cells right after it; the next markdown
    cell is lesson again (notebook 07 puts a lesson paragraph right after exercise 6)."""
    cells = [nbformat.v4.new_markdown_cell("## 1. Lesson\n\nsome words here"),
             _code(),
             nbformat.v4.new_markdown_cell("### Exercise 1: a mask\n\nwrite it"),
             _code(), _code(),
             nbformat.v4.new_markdown_cell("**Predict, then compile.** more lesson"),
             _code()]
    runs = course._sections(cells)
    assert [(t, len(cs)) for t, cs in runs] == [(None, 2), ("Exercise 1: a mask", 3), (None, 2)]


def test_rounding_to_five_minutes():
    assert [course.round_minutes(m) for m in (0.4, 7.4, 7.5, 12.6, 61)] == [5, 5, 10, 15, 60]


def test_every_notebook_and_exercise_gets_an_estimate():
    for est in course.estimates():
        assert est.lesson_min >= 15, f"notebook {est.notebook.number}: {est.lesson}"
        assert est.exercises, f"notebook {est.notebook.number} has no 'Exercise N' headings"
        assert sum((c for _, c in est.sections), course.Counts()) == est.lesson
        for ex in est.exercises:
            assert ex.minutes >= course.SHORT_WORK_MIN
        assert est.exercises_min == course.round_minutes(sum(e.minutes for e in est.exercises))


def test_stale_block_markers_are_reported():
    g = generate
    with pytest.raises(ValueError, match="put the two markers back"):
        g.replace_block("no markers", g.README_START, g.README_END, "x", "README.md")
    assert g.replace_block(f"a\n{g.README_START}\nold\n{g.README_END}\nb",
                           g.README_START, g.README_END, "new", "x") == \
        f"a\n{g.README_START}\nnew\n{g.README_END}\nb"


def test_check_mode_exits_1_when_stale(monkeypatch, tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("old")
    monkeypatch.setattr(generate, "generated_files", lambda ests=None: {readme: "new"})
    monkeypatch.setattr(generate, "headers", lambda ests=None: {})
    monkeypatch.setattr(generate, "ROOT", tmp_path)
    assert generate.main(["--check"]) == 1
    assert "README.md (--write)" in capsys.readouterr().out
    assert readme.read_text() == "old"
    assert generate.main(["--write"]) == 0 and readme.read_text() == "new"


def test_course_and_workshop_do_not_import_each_other():
    """The estimator is imported by what reads it, never the reverse: course.py imports neither
    workshop nor generate (its ``__main__`` block hands the command to generate), and workshop
    does not import generate."""
    import ast

    def top_imports(name):
        tree = ast.parse((ROOT / "cutecourse" / f"{name}.py").read_text())
        return {(getattr(n, "module", None) or "") + ":" + ",".join(a.name for a in n.names)
                for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))}

    assert not [i for i in top_imports("course") if "workshop" in i or "generate" in i]
    assert not [i for i in top_imports("workshop") if "generate" in i]


def test_an_exercise_names_the_sections_of_its_own_notebook():
    cells = [nbformat.v4.new_markdown_cell("As section 5 computes it; see sections 2-3, and "
                                           "notebook 03, section 10 (another notebook's)."),
             nbformat.v4.new_code_cell("# section 9 in code does not count")]
    assert course.sections_named(cells, "07") == (2, 3, 5)
    assert course.sections_named(cells, "03") == (2, 3, 5, 10)


def test_a_printed_table_is_read_and_a_short_result_is_not():
    """A code cell that prints a table (or an annotated PTX excerpt) costs its rows; one that
    prints a two-line result costs only the cell."""
    table, result = (nbformat.v4.new_code_cell("print(rows)") for _ in range(2))
    table.outputs = [nbformat.v4.new_output("stream", name="stdout", text="row\n" * 8)]
    result.outputs = [nbformat.v4.new_output("stream", name="stdout", text="ok\n\n5 ns\n")]
    t, r = course._cell_counts(table), course._cell_counts(result)
    assert (t.printed, t.printed_lines, r.printed, r.printed_lines) == (1, 8, 0, 0)
    assert t.minutes - r.minutes == pytest.approx(course.PRINTED_TABLE_MIN + 8 * course.PRINTED_LINE_MIN)
