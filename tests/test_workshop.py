"""cutecourse.workshop: the one-day and two-day agendas laid out from the estimates, and
docs/workshop.md's presenter notes held to the notebooks they cite.

The layout is checked on small days whose clocks are worked out by hand, then on the course's
own agendas (``python -m cutecourse.course --write`` rewrites them).
"""

import re
from pathlib import Path

import nbformat

from cutecourse import course, workshop

ROOT = Path(__file__).resolve().parent.parent


def test_lay_out_makes_blocks_of_at_most_90_minutes_with_breaks_and_lunch():
    items = [workshop.Item(f"item {i}", 40, "lesson") for i in range(12)]
    day = workshop.lay_out(items, closing=workshop.Item("wrap-up", 15))
    clock = [(f"{s // 60:02d}:{s % 60:02d}", i.what) for s, i in day.rows]
    # Worked by hand: two 40-minute items and 10 minutes of questions fill a 90-minute block; the
    # first break ending a block after 11:45 is lunch; the wrap-up (15) is kept for the end: item 8
    # would start after a break at 16:45 and end with its questions at 17:35, so it is left over;
    # 80 minutes of items and the wrap-up make 95, so a break comes before the wrap-up.
    assert clock == [
        ("09:00", "item 0"), ("09:40", "item 1"), ("10:20", "questions, catching up"), ("10:30", "break"),
        ("10:45", "item 2"), ("11:25", "item 3"), ("12:05", "questions, catching up"), ("12:15", "lunch"),
        ("13:15", "item 4"), ("13:55", "item 5"), ("14:35", "questions, catching up"), ("14:45", "break"),
        ("15:00", "item 6"), ("15:40", "item 7"), ("16:20", "questions, catching up"),
        ("16:30", "break"), ("16:45", "wrap-up")]
    assert [i.what for i in day.left_over] == [f"item {i}" for i in range(8, 12)]
    assert all(sum(i.minutes for _, i in b) <= workshop.BLOCK_MAX for b in day.blocks())


def test_a_long_lesson_is_taught_in_parts_split_at_its_sections():
    sec = [(f"{n}. part", course.Counts(words=course.READING_WPM * 20)) for n in range(1, 6)]  # 5 x 20 minutes
    nb = course.NOTEBOOKS[0]
    est = course.Estimate(nb, sum((c for _, c in sec), course.Counts()), (), tuple(sec))
    parts = workshop.lesson(est)
    # 100 minutes cannot be two parts of at most 50 at section boundaries (60 + 40): three parts.
    assert [p.minutes for p in parts] == [40, 20, 40]
    assert all(p.minutes <= workshop.LESSON_PART_MAX for p in parts)
    assert "part 1 of" in parts[0].what and "sections 1-" in parts[0].what


def test_kernel_exercises_come_first_and_stay_on_the_day():
    ests = course.estimates()
    for est in ests:
        items = workshop.exercises(est, "day")
        kernels = [e for e in est.exercises if e.kind == "kernel" and e.file.startswith(est.notebook.number + "_")]
        if kernels:
            assert items[0].kind == "kernel" and "(kernel)" in items[0].what
    for day in workshop.one_day(ests) + workshop.two_days(ests):
        rows = [i for _, i in day.rows]
        for est in ests:
            n = est.notebook.number
            last_part = workshop.lesson(est)[-1].what  # the whole lesson is taught that day
            has_kernel = any(e.kind == "kernel" and e.file.startswith(n + "_") for e in est.exercises)
            if has_kernel and last_part in [i.what for i in rows]:
                assert any(i.kind == "kernel" and i.what.startswith(f"[exercises {n}]") for i in rows), n


def test_agendas_are_teachable():
    """No block over 90 minutes, one lunch a day, an opening talk, a wrap-up, within the day;
    the two-day agenda teaches every lesson up to 05 (what day one leaves opens day two)."""
    ests = course.estimates()
    days = workshop.one_day(ests) + workshop.two_days(ests)
    for day in days:
        assert day.end <= workshop.DAY_END
        assert [i.what for _, i in day.rows].count("lunch") == 1
        for block in day.blocks():
            assert sum(i.minutes for _, i in block) <= workshop.BLOCK_MAX, block
    for first in (days[0], days[1]):
        assert any("opening talk" in i.what for _, i in first.rows)
    assert "wrap-up" in days[0].rows[-1][1].what and "wrap-up" in days[-1].rows[-1][1].what
    two_text = workshop.agenda_markdown(ests).split("### Two days")[1].split("After the day")[0]
    for nb in course.NOTEBOOKS[:5]:
        assert f"[{nb.number} · {nb.title}](../notebooks/{nb.file})" in two_text
    assert "[03 · " in workshop.agenda_markdown(ests).split("### Two days")[0].split("After the day")[0]


def test_agenda_links_resolve_from_docs():
    text = workshop.agenda_markdown(course.estimates())
    for target in re.findall(r"\]\((\.\./[^)]+)\)", text):
        assert (ROOT / "docs" / target).resolve().exists(), target


def _presenter_notes():
    """(notebook, {"Projector": text, "Widget or picture": text, ...}) per presenter-notes block."""
    notes = (ROOT / "docs" / "workshop.md").read_text().split("## Presenter notes")[1]
    blocks = re.split(r"^#### ", notes, flags=re.MULTILINE)[1:]
    assert [b[:2] for b in blocks] == [nb.number for nb in course.NOTEBOOKS]
    for block, nb in zip(blocks, course.NOTEBOOKS):
        items = re.split(r"^- \*\*([^*]+):\*\*", block, flags=re.MULTILINE)[1:]
        yield nb, {k: " ".join(v.split()) for k, v in zip(items[::2], items[1::2])}


def _notebook_sections(nb) -> dict[str, list]:
    """The notebook's cells by ``## N`` section ("0": before the first numbered one)."""
    out, sec = {"0": []}, "0"
    for cell in nbformat.read(nb.path, as_version=4).cells:
        m = re.search(r"^##\s+(\d+)\b", cell.source, re.MULTILINE) if cell.cell_type == "markdown" else None
        if m:
            sec = m.group(1)
            out.setdefault(sec, [])
        out[sec].append(cell)
    return out


def test_presenter_notes_name_widgets_the_notebooks_have():
    """Each notebook's presenter notes name the code to show and the widget or picture function
    to drive; it must still be called in that notebook (06 and 07 are rewritten often)."""
    for nb, notes in _presenter_notes():
        code = "\n".join(c.source for c in nbformat.read(nb.path, as_version=4).cells if c.cell_type == "code")
        for key in ("Projector", "Widget or picture"):
            for name in re.findall(r"`(\w+)`", notes[key]):
                assert re.search(rf"\b{name}\b", code), f"notebook {nb.number} no longer uses {name}"


def test_presenter_notes_cite_the_sections_that_hold_what_they_name():
    """Every "section N" (or "§N") the notes cite for notebook NN is a ``## N`` heading of NN; a
    widget or function cited with its section, "(`schedule_widget`, section 5)", is called in
    that section's code; a prediction cited with its section is asked there."""
    for nb, notes in _presenter_notes():
        sections = _notebook_sections(nb)
        for key, text in notes.items():
            for n in re.findall(r"(?:[Ss]ection |§\s?)(\d+)", text):
                assert n in sections, f"{nb.number} {key}: section {n} is not a heading of {nb.file}"
            for inside, n in re.findall(r"\(([^()]*?)section (\d+)[^()]*\)", text):
                code = "\n".join(c.source for c in sections[n] if c.cell_type == "code")
                for name in re.findall(r"`(\w+)`", inside):
                    assert re.search(rf"\b{name}\b", code), \
                        f"{nb.number} {key}: {name} is not in section {n}'s code"
        for n in re.findall(r"section (\d+)", notes["Predict"]):
            prose = "\n".join(c.source for c in sections[n] if c.cell_type == "markdown")
            assert "Predict" in prose, f"{nb.number}: no prediction in section {n}"


def test_a_lesson_is_not_taught_at_the_end_of_a_day_without_its_exercises():
    """After a break at 16:05 the 50-minute lesson and its questions alone would fit before the
    wrap-up; with its 30-minute kernel exercise the block ends at 17:25 and the wrap-up no longer
    fits, so both wait for the next day."""
    fill = [workshop.Item(f"fill {i}", m, "lesson") for i, m in enumerate((80, 80, 80, 40))]
    pair = workshop.taught_with([workshop.Item("[09 · X](x)", 50, "lesson")],
                                [workshop.Item("[exercises 09](y): 1 (kernel)", 30, "kernel")])
    day = workshop.lay_out(fill + pair, closing=workshop.Item("wrap-up", 15))
    assert [i.what for i in day.left_over] == [p.what for p in pair]
    assert day.rows[-1][1].what == "wrap-up"


def _times(day):
    return [(f"{s // 60:02d}:{s % 60:02d}", i.what) for s, i in day.rows]


def test_a_lesson_whose_exercises_fit_its_block_needs_no_break():
    """At 16:00 a 35-minute lesson and its 30-minute exercise make 65 minutes; with the 15-minute
    wrap-up (the block's questions) 80, under 90: no break between them, and the day ends at
    17:20. Reserving a break after every lesson would have left both for the next day."""
    pair = workshop.taught_with([workshop.Item("[09 · X](x)", 35, "lesson")],
                                [workshop.Item("[exercises 09](y): 1 (kernel)", 30, "kernel")])
    day = workshop.lay_out(pair, start=16 * 60, closing=workshop.Item("wrap-up", 15))
    assert _times(day) == [("16:00", "[09 · X](x)"), ("16:35", "[exercises 09](y): 1 (kernel)"),
                           ("17:05", "wrap-up")]
    assert not day.left_over and day.end == 17 * 60 + 20


def test_practice_fills_the_last_minutes_and_is_never_left_over():
    """A 60-minute lesson does not fit after 16:30; the optional 10-minute practice does, the
    optional 50-minute one does not and is dropped (it stays in the exercises for after the day)."""
    items = [workshop.Item("lesson", 60, "lesson"),
             workshop.Item("practice 50", 50, "exercises", optional=True),
             workshop.Item("practice 10", 10, "exercises", optional=True)]
    day = workshop.lay_out(items, start=16 * 60 + 30, closing=workshop.Item("wrap-up", 15))
    assert _times(day) == [("16:30", "practice 10"), ("16:40", "wrap-up")]
    assert [i.what for i in day.left_over] == ["lesson"]


def test_exercises_follow_the_part_that_teaches_the_sections_they_name():
    """Five 20-minute sections are taught in three parts (1-2, 3, 4-5). The kernel exercise names
    section 2, so it follows part 1; the short one names none, so it needs the whole lesson.
    Each part is chained to what follows it: a day never ends on a lesson part whose exercises
    it cannot hold."""
    nb = course.notebook("07")
    sec = tuple((f"{n}. part", course.Counts(words=course.READING_WPM * 20)) for n in range(1, 6))
    kernel = course.Exercise("07_x.ipynb", "Exercise 9 (kernel): k", course.Counts(words=course.READING_WPM), "kernel", 5, (2,))
    short = course.Exercise("07_x.ipynb", "Exercise 1: s", course.Counts(words=course.READING_WPM), "short", 2)
    est = course.Estimate(nb, sum((c for _, c in sec), course.Counts()), (short, kernel), sec)
    items = workshop.with_day_exercises(est)
    assert [(i.kind, i.with_next) for i in items] == [
        ("lesson", True), ("kernel", False),  # part 1, then exercise 9
        ("lesson", True), ("lesson", True), ("exercises", False)]
    assert "part 1 of 3 (sections 1-2)" in items[0].what and items[1].what.endswith("9 (kernel)")
    assert items[4].what.endswith(": 1")


def test_the_wrap_up_names_what_the_days_leave():
    assert workshop._numbers(["07"]) == "notebook 07"
    assert workshop._numbers(["04", "05", "06", "07"]) == "notebooks 04-07"
    assert workshop._numbers(["04", "06", "07"]) == "notebooks 04, 06 and 07"
    ests = course.estimates()
    one = workshop.one_day(ests)[0]
    none, some = workshop._untaught(one, ests)
    wrap = one.rows[-1][1].what
    assert none and workshop._numbers(none) in wrap, wrap
    assert all(f"[{n} · " not in i.what for n in none for _, i in one.rows)


def test_the_two_days_fill_their_hours_and_practise_through_notebook_05():
    """Every day ends within half an hour of its end, never on a lesson whose exercises it does
    not hold; at the stated reading times (a cold reader's, notebooks 01-05) the second day
    practises notebook 05's kernel exercises, and what it cannot reach is listed for after it."""
    ests = course.estimates()
    days = workshop.one_day(ests) + workshop.two_days(ests)
    for day in days:
        assert day.end >= workshop.DAY_END - 30, f"a day ends at {day.end // 60}:{day.end % 60:02d}"
        taught = [i for _, i in day.rows if i.kind in ("lesson", "kernel", "exercises")]
        assert taught[-1].kind != "lesson", f"the day ends on {taught[-1].what} without its exercises"
    assert any(i.what.startswith("[exercises 05]") and i.kind == "kernel" for _, i in days[-1].rows)


def test_every_exercise_is_in_each_plan_once():
    """On a day or after it, never lost and never twice: each exercise of every notebook appears
    once in each plan, and each lesson part once (the one-day plan lists 06 and 07 whole)."""
    ests = course.estimates()
    one, two = workshop.agenda_markdown(ests).split("### Two days")
    for name, text in (("one day", one), ("two days", two)):
        for est in ests:
            for ex in est.exercises:
                file = ex.file.split("_")[0]
                runs = re.findall(rf"\[exercises {file}\]\([^)]*\): ([^|;\n]*)", text)
                numbers = [n.split(" ")[0] for run in runs for n in run.rstrip(".").split(", ")]
                assert numbers.count(workshop._number(ex)) == 1, (name, ex.title, numbers)
            parts = workshop.lesson(est)
            if len(parts) > 1 and text.count(parts[0].what.split(", part")[0] + ";") == 1:
                continue  # listed whole for after the day
            for part in parts:
                assert text.count(part.what) == 1, (name, part.what)
