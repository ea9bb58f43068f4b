"""cutecourse.course and cutecourse.workshop: one notebook list, estimated times, the agendas.

The README's notebook table and docs/workshop.md's agendas are generated from the notebooks;
these tests fail when a notebook changed and the generated text was not rewritten
(``python -m cutecourse.course --write``), and check the estimator and the agenda layout on
small cases whose answers are worked out by hand.
"""

import re
from pathlib import Path

import nbformat
import pytest

from cutecourse import course, modes, workshop

ROOT = Path(__file__).resolve().parent.parent


def test_readme_and_agenda_are_generated_from_the_notebooks():
    stale = [str(p.relative_to(ROOT)) for p, text in course.generated_files().items()
             if p.read_text() != text]
    assert not stale, f"{stale} are out of date: run python -m cutecourse.course --write"


def test_readme_table_is_the_one_the_module_renders():
    readme = (ROOT / "README.md").read_text()
    block = readme.split(course.README_START)[1].split(course.README_END)[0]
    assert block.strip() == course.readme_table().strip()
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
    assert total == course.Counts(words=300, code_cells=4, figures=2, listings=1)
    expected = (300 / course.READING_WPM + 4 * course.CODE_CELL_MIN + 2 * course.FIGURE_MIN
                + 1 * course.LISTING_MIN)
    assert total.minutes == pytest.approx(expected)


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
        for ex in est.exercises:
            assert ex.minutes >= course.EXERCISE_WORK_MIN
        assert est.exercises_min == course.round_minutes(sum(e.minutes for e in est.exercises))


def test_stale_block_markers_are_reported():
    with pytest.raises(ValueError, match="put the two markers back"):
        course.replace_block("no markers", course.README_START, course.README_END, "x", "README.md")
    assert course.replace_block(f"a\n{course.README_START}\nold\n{course.README_END}\nb",
                                course.README_START, course.README_END, "new", "x") == \
        f"a\n{course.README_START}\nnew\n{course.README_END}\nb"


def test_check_mode_exits_1_when_stale(monkeypatch, tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("old")
    monkeypatch.setattr(course, "generated_files", lambda: {readme: "new"})
    monkeypatch.setattr(course, "ROOT", tmp_path)
    assert course.main(["--check"]) == 1
    assert "run python -m cutecourse.course --write" in capsys.readouterr().out
    assert readme.read_text() == "old"
    assert course.main(["--write"]) == 0 and readme.read_text() == "new"


# -- agendas ------------------------------------------------------------------------------------------
def test_lay_out_puts_breaks_in_the_nearest_gap_and_stops_at_the_day_end():
    items = [workshop.Item(f"item {i}", 60) for i in range(10)]
    day = workshop.lay_out(items)
    clock = [(f"{s // 60:02d}:{s % 60:02d}", i.what) for s, i in day.rows]
    # Worked by hand: the 10:30 break is as near before item 1 (10:00) as after it (11:00), so
    # it goes before; lunch (12:30) is nearer 12:15 than 13:15; the 15:15 break falls exactly
    # between items 4 and 5; item 6 ends at 17:30, the day's end; item 7 would end at 18:30.
    assert clock == [("09:00", "item 0"), ("10:00", "break"), ("10:15", "item 1"),
                     ("11:15", "item 2"), ("12:15", "lunch"), ("13:15", "item 3"),
                     ("14:15", "item 4"), ("15:15", "break"), ("15:30", "item 5"),
                     ("16:30", "item 6")]
    assert day.end == workshop.DAY_END
    assert [i.what for i in day.left_over] == ["item 7", "item 8", "item 9"]


def test_agendas_fit_their_days_and_cover_the_course():
    ests = course.estimates()
    one = workshop.one_day(ests)
    two = workshop.two_days(ests)
    for day in one + two:
        assert day.end <= workshop.DAY_END
        breaks = [i.what for _, i in day.rows if i.what in ("break", "lunch")]
        assert breaks.count("lunch") == 1, breaks
    # Two days: every notebook's lesson is on the agenda, not after it.
    text = workshop.agenda_markdown(ests)
    two_text = text.split("### Two days")[1]
    for nb in course.NOTEBOOKS:
        assert f"[{nb.number} · {nb.title}](../notebooks/{nb.file})" in two_text
    assert "After the day" not in two_text, "the two-day agenda no longer fits: rebalance two_days()"
    # One day reaches notebook 03 at least.
    assert "[03 · " in text.split("### Two days")[0].split("After the day")[0]


def test_agenda_links_resolve_from_docs():
    text = workshop.agenda_markdown(course.estimates())
    for target in re.findall(r"\]\((\.\./[^)]+)\)", text):
        assert (ROOT / "docs" / target).resolve().exists(), target


def test_presenter_notes_name_widgets_the_notebooks_have():
    """Each notebook's presenter notes name the widget or picture function to drive; it must
    still be called in that notebook (06 and 07 are rewritten often)."""
    notes = (ROOT / "docs" / "workshop.md").read_text().split("## Presenter notes")[1]
    blocks = re.split(r"^#### ", notes, flags=re.MULTILINE)[1:]
    assert [b[:2] for b in blocks] == [nb.number for nb in course.NOTEBOOKS]
    for block, nb in zip(blocks, course.NOTEBOOKS):
        line = next(ln for ln in block.splitlines() if ln.startswith("- **Widget or picture:**"))
        names = re.findall(r"`(\w+)`", line)
        code = "\n".join(c.source for c in nbformat.read(nb.path, as_version=4).cells if c.cell_type == "code")
        for name in names:
            assert re.search(rf"\b{name}\b", code), f"notebook {nb.number} no longer uses {name}"
