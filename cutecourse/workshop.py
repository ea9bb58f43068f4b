"""Workshop agendas laid out from the estimated times (``cutecourse.course.estimate``).

A plan is the order of things in a day: the welcome and an opening talk, each notebook's lesson
(in parts, split at its ``##`` sections, where it is long), its first kernel-writing exercise
(the point of a hands-on day, right after the part that teaches what it names; a short one after
the last part where lesson parts follow it), a wrap-up. ``cutecourse.timetable.lay_out`` gives them clock times: blocks, breaks, lunch.
A lesson goes on a day only with the exercises after it; from the first that would end after
:data:`DAY_END`, what did not fit is listed for after the day, so a notebook that grows moves the
agenda instead of silently overrunning it, and the day's last minutes go to the other exercises of
what it taught: a day teaches one more notebook rather than practise the last one to the end. Each day says when to release which notebook's answers. ``python -m
cutecourse.course --write`` writes the agendas into ``docs/workshop.md`` between the markers
:data:`START` and :data:`END`.
"""

from __future__ import annotations

import math
import re

from .course import Counts, Estimate, Exercise, rates_text, round_minutes
from .timetable import (BLOCK_MAX, BREAK_MIN, CATCH_UP_MIN, DAY_END, DAY_START, LUNCH_AFTER,  # noqa: F401
                        LUNCH_MIN, Day, Item, lay_out)

START, END = "<!-- agenda:start -->", "<!-- agenda:end -->"

LESSON_PART_MAX = 50  # a longer lesson is taught in parts, split at its sections
EXERCISE_ITEM_MAX = 45  # a longer run of exercises is split into items (a break may fall between)
WELCOME_MIN = 15  # welcome; every seat runs ./course.sh check (under a minute) and opens JupyterLab
TALK_MIN = 15  # the opening talk: why the CuTe DSL, a Hopper SM in one picture, the day's plan
RECAP_MIN = 10  # the second morning: yesterday's recaps, questions
WRAP_UP_MIN = 15  # questions, what to read next, the feedback form

#: Where the room's feedback goes (``docs/instructor/feedback.md``: the teacher sends the
#: summary there), and a report of a Blackwell run: a mail address, a form's or an issue tracker's
#: URL. Fill it in for your course; ``./course.sh handout`` writes the form with it.
FEEDBACK_TO = ""


def solutions_zip(number: str) -> str:
    """The answers to notebook ``number``'s exercises, as ``./course.sh handout`` writes them."""
    return f"cutecourse-solutions-{number}.zip"


def _link(est: Estimate) -> str:  # links are relative to docs/, where the agenda lives
    nb = est.notebook
    return f"[{nb.number} · {nb.title}](../notebooks/{nb.file})"


def _section_number(title: str) -> str:
    m = re.match(r"(\d+)", title)
    return m.group(1) if m else ""


def _parts(est: Estimate) -> list[list[tuple[str, Counts]]]:
    """The lesson's ``##`` sections in parts of at most :data:`LESSON_PART_MAX` minutes (one part
    where the whole lesson is that short)."""
    if est.lesson_min <= LESSON_PART_MAX or len(est.sections) < 2:
        return [list(est.sections)]
    for parts_n in range(math.ceil(est.lesson.minutes / LESSON_PART_MAX), len(est.sections) + 1):
        parts = _split(est.sections, parts_n)
        if all(round_minutes(sum((c for _, c in p), Counts()).minutes) <= LESSON_PART_MAX for p in parts):
            break
    return parts


def lesson(est: Estimate) -> list[Item]:
    """The lesson as one item, or in parts of about equal length split at its ``##`` sections
    when it is longer than :data:`LESSON_PART_MAX` minutes."""
    parts = _parts(est)
    if len(parts) == 1:
        return [Item(_link(est), est.lesson_min, "lesson")]
    items = []
    for i, part in enumerate(parts, 1):
        nums = [n for n in (_section_number(t) for t, _ in part) if n]
        where = f"sections {nums[0]}-{nums[-1]}" if len(nums) > 1 else (f"section {nums[0]}" if nums else "")
        minutes = round_minutes(sum((c for _, c in part), Counts()).minutes)
        items.append(Item(f"{_link(est)}, part {i} of {len(parts)}" + (f" ({where})" if where else ""),
                          minutes, "lesson"))
    return items


def _split(sections, parts_n: int) -> list[list[tuple[str, Counts]]]:
    """``sections`` in ``parts_n`` runs of about equal minutes: a section opens the next run
    when more than half of it lies past that run's share."""
    target = sum(c.minutes for _, c in sections) / parts_n
    parts: list[list[tuple[str, Counts]]] = [[]]
    done = 0.0
    for title, counts in sections:
        if parts[-1] and done + counts.minutes / 2 > target * len(parts) and len(parts) < parts_n:
            parts.append([])
        parts[-1].append((title, counts))
        done += counts.minutes
    return parts


def _number(ex: Exercise) -> str:
    m = re.search(r"Exercise\s+(\d+[a-z]?)", ex.title)
    return m.group(1) if m else "?"


def _after_part(est: Estimate, ex: Exercise) -> int:
    """The index of the lesson part after which ``ex`` is done: the first that teaches the last
    section it names (the last part where it names none: it needs the whole lesson)."""
    last_section = [max((int(n) for n in (_section_number(t) for t, _ in p) if n), default=0)
                    for p in _parts(est)]
    return next((i for i, s in enumerate(last_section) if ex.needs is not None and s >= ex.needs),
                len(last_section) - 1)


def _chosen(est: Estimate, which: str, file_prefix: str | None) -> list[Exercise]:
    """The notebook's exercises (``NN_*``, or ``file_prefix`` e.g. ``01b_``) that ``which`` picks,
    kernel-writing ones first. The day's are the first kernel-writing one (or lab) and, where
    that leaves lesson parts after it, one more after the last part (code where there is some,
    else a short one): every part taught is followed by practice."""
    prefix = file_prefix or est.notebook.number + "_"
    mine = [e for e in est.exercises if e.file.startswith(prefix)]
    by_kind = {k: [e for e in mine if e.kind == k] for k in ("kernel", "lab", "short")}
    day = (by_kind["kernel"] or by_kind["lab"] or by_kind["short"])[:1]
    last = len(_parts(est)) - 1
    if day and _after_part(est, day[0]) < last:  # practice after the last part too: code where there is some
        after_last = [e for e in mine if e not in day and _after_part(est, e) == last]
        day += ([e for e in after_last if e.kind in ("kernel", "lab")] or
                [e for e in after_last if e.kind == "short"])[:1]
    chosen = {"all": mine, "day": day, "rest": [e for e in mine if e not in day]}[which]
    return sorted(chosen, key=lambda e: (e.kind != "kernel", e.kind != "lab", mine.index(e)))


def _exercise_items(chosen: list[Exercise]) -> list[Item]:
    """``chosen`` as agenda items; a run longer than :data:`EXERCISE_ITEM_MAX` minutes is split."""
    items, run = [], []
    for ex in chosen + [None]:
        if ex is None or (run and sum(e.minutes for e in run) + ex.minutes > EXERCISE_ITEM_MAX):
            if run:
                name = run[0].file.split("_")[0]  # "01", "01b"
                nums = ", ".join(_number(e) + (" (kernel)" if e.kind == "kernel" else
                                               " (lab)" if e.kind == "lab" else "") for e in run)
                kind = "kernel" if any(e.kind == "kernel" for e in run) else "exercises"
                items.append(Item(f"[exercises {name}](../exercises/{run[0].file}): {nums}",
                                  round_minutes(sum(e.minutes for e in run)), kind))
            run = []
        if ex is not None:
            run.append(ex)
    return items


def exercises(est: Estimate, which: str = "all", file_prefix: str | None = None) -> list[Item]:
    """Items for the exercises of the notebook's file (``NN_*``, or ``file_prefix`` e.g. ``01b_``):
    ``which`` is "all", "day" (the first kernel-writing exercise, or the first lab where there is
    none; one more after the last part where lesson parts follow it) or "rest" (what "day" leaves). Kernel-writing exercises come
    first; a run longer than :data:`EXERCISE_ITEM_MAX` minutes is split into several items."""
    return _exercise_items(_chosen(est, which, file_prefix))


def taught_with(lesson_items: list[Item], exercise_items: list[Item]) -> list[Item]:
    """A lesson followed by its exercises: every part of it is chained to the next item, so that
    :func:`lay_out` puts the lesson on a day only where the first exercise item fits after it."""
    if not exercise_items:
        return lesson_items
    return [Item(i.what, i.minutes, i.kind, True) for i in lesson_items] + exercise_items


def with_day_exercises(est: Estimate) -> list[Item]:
    """The lesson with its day's exercises (:func:`exercises` "day"), each right after the part
    that teaches the last section it names (one that names none needs the whole lesson): a day
    that cannot hold the whole of a long lesson teaches its first parts and practises them."""
    items = lesson(est)
    after: dict[int, list[Exercise]] = {}
    for ex in _chosen(est, "day", None):
        after.setdefault(_after_part(est, ex), []).append(ex)
    out, pending = [], []
    for k, part in enumerate(items):
        pending.append(part)
        if k in after:
            out += taught_with(pending, _exercise_items(after[k]))
            pending = []
    return out + pending


def _by_number(ests: list[Estimate]) -> dict[str, Estimate]:
    return {e.notebook.number: e for e in ests}


def _opening() -> list[Item]:
    return [Item("welcome; every seat: ./course.sh check, JupyterLab open", WELCOME_MIN),
            Item("opening talk: why the CuTe DSL, a Hopper SM in one picture, the plan", TALK_MIN)]


def _untaught(day: Day, ests: list[Estimate]) -> tuple[list[str], list[str]]:
    """The notebooks ``day`` does not teach at all, and those it teaches only in part."""
    shown = {i.what for _, i in day.rows}
    none, some = [], []
    for est in ests:
        parts = [p.what in shown for p in lesson(est)]
        if not any(parts):
            none.append(est.notebook.number)
        elif not all(parts):
            some.append(est.notebook.number)
    return none, some


def _numbers(numbers: list[str]) -> str:
    """"notebook 07", "notebooks 04-07" (a run), "notebooks 04, 06 and 07"."""
    if len(numbers) == 1:
        return f"notebook {numbers[0]}"
    if [int(n) for n in numbers] == list(range(int(numbers[0]), int(numbers[-1]) + 1)):
        return f"notebooks {numbers[0]}-{numbers[-1]}"
    return f"notebooks {', '.join(numbers[:-1])} and {numbers[-1]}"


def _with_wrap_up(day: Day, ests: list[Estimate], days: list[Day]) -> Day:
    """``day`` whose last row, the wrap-up, names what ``days`` (the whole workshop) leave for
    after it: the road the wrap-up points to."""
    none, some = _untaught(Day(tuple(r for d in days for r in d.rows), ()), ests)
    what = ([f"the rest of {_numbers(some)}"] if some else []) + ([_numbers(none)] if none else [])
    verb = "adds" if len(what) == 1 and len(none) + len(some) == 1 else "add"
    text = (f"wrap-up: what {' and '.join(what)} {verb}, questions, feedback form" if what
            else "wrap-up, questions, feedback form")
    start, last = day.rows[-1]
    return Day(day.rows[:-1] + ((start, Item(text, last.minutes, last.kind)),), day.left_over)


def _rest(est: Estimate) -> list[Item]:
    """The exercises of a notebook that its day leaves (01's second set, 01b, included)."""
    return exercises(est, "rest") + (exercises(est, file_prefix="01b_") if est.notebook.number == "01" else [])


def _practice(ests: list[Estimate], days: list[Day]) -> list[Item]:
    """The other exercises of the notebooks ``days`` teach whole, the newest notebook first, as
    optional items: what fills a day's last minutes where the next lesson does not fit (those an
    earlier day practised are done)."""
    none, some = _untaught(Day(tuple(r for d in days for r in d.rows), ()), ests)
    taught = [e for e in ests if e.notebook.number not in none + some]
    done = {i.what for d in days for _, i in d.rows}
    return [Item(i.what, i.minutes, i.kind, optional=True) for e in reversed(taught) for i in _rest(e)
            if i.what not in done]


def _day(items: list[Item], ests: list[Estimate], closing: Item, before: list[Day] = ()) -> Day:
    """``items`` laid out, then the day's last minutes filled with practice (:func:`_practice`)."""
    first = lay_out(items, closing=closing)
    return lay_out(items + _practice(ests, [*before, first]), closing=closing)


def one_day(ests: list[Estimate]) -> list[Day]:
    """Notebooks 01-05 as far as one day reaches (layouts to a multicast Hopper GEMM), each
    with its first kernel-writing exercise (its other exercises fill the day's last minutes)."""
    e = _by_number(ests)
    items = _opening()
    for n in ("01", "02", "03", "04", "05"):
        items += with_day_exercises(e[n])
    day = _day(items, ests, Item("wrap-up", WRAP_UP_MIN))
    return [_with_wrap_up(day, ests, [day])]


def two_days(ests: list[Estimate]) -> list[Day]:
    """Every notebook in order, each with its first kernel-writing exercise (and a short one
    where lesson parts follow that), as far as two days reach: what does not fit into day one
    opens day two, what does not fit into day two is listed for after the days (with the other
    exercises)."""
    e = _by_number(ests)
    items = []
    for n in sorted(e):
        items += with_day_exercises(e[n])
    first = _day(_opening() + items, ests, Item("feedback form (day one)", 5))
    second = _day([Item("recap of day one, questions", RECAP_MIN), *first.left_over], ests,
                  Item("wrap-up", WRAP_UP_MIN), [first])
    first = Day(first.rows, ())
    return [first, _with_wrap_up(second, ests, [first, second])]


def _clock(minute: int) -> str:
    return f"{minute // 60:02d}:{minute % 60:02d}"


def releases(day: Day, ests: list[Estimate], taught: Day) -> list[tuple[int, str]]:
    """(minute, notebook) for each notebook whose answers a teacher releases on ``day``: one that
    ``taught`` (the days so far) teaches whole, after the last of its exercises on ``day``."""
    none, some = _untaught(taught, ests)
    done: dict[str, int] = {}
    for start, item in day.rows:
        m = re.match(r"\[exercises (\d\d)", item.what)
        if m and m.group(1) not in none + some:
            done[m.group(1)] = start + item.minutes
    return sorted((t, n) for n, t in done.items())


def _release_text(day: Day, ests: list[Estimate], days: list[Day], last: bool) -> str:
    taught = Day(tuple(r for d in days for r in d.rows), ())
    now = [f"`{solutions_zip(n)}` at {_clock(t)}" for t, n in releases(day, ests, taught)]
    released = {n for d in days for _, n in releases(d, ests, taught)}
    later = [f"`{solutions_zip(e.notebook.number)}`" for e in ests if e.notebook.number not in released]
    text = ("Answers to release (`./course.sh handout` writes one zip per notebook), once the room "
            "has tried the notebook's exercises: " + (", ".join(now) or "none today"))
    if last and later:
        text += f"; {', '.join(later)} after the workshop, for the self-paced exercises"
    return text + "."


def day_markdown(day: Day, title: str, extra_reading: list[str], release: str = "") -> str:
    lines = [f"**{title}**", "", "| time | what | minutes |", "| --- | --- | --- |"]
    for start, item in day.rows:
        what = f"**{item.what}**" if item.kind == "break" else item.what
        lines.append(f"| {_clock(start)}-{_clock(start + item.minutes)} | {what} | {item.minutes} |")
    if release:
        lines += ["", release]
    after = [i.what for i in day.left_over] + extra_reading
    if after:
        lines += ["", "After the day (self-paced): " + "; ".join(after) + "."]
    return "\n".join(lines)


def agenda_markdown(ests: list[Estimate]) -> str:
    """Both agendas as markdown, for docs/workshop.md."""
    e = _by_number(ests)

    def after(days: list[Day], lessons: tuple[str, ...] = ()) -> list[str]:
        """What ``days`` leave besides their left-over items: ``lessons`` (notebooks no day of
        the plan holds) whole, with all their exercises, and the other exercises not done."""
        done = {i.what for d in days for _, i in d.rows}
        whole = [[lesson(e[n])[0].what.split(", part")[0]] + [x.what for x in exercises(e[n])]
                 for n in lessons]
        return ([w for items in whole for w in items]
                + [x.what for n in sorted(e) if n not in lessons for x in _rest(e[n]) if x.what not in done])

    one = one_day(ests)[0]
    taught = sorted({m for _, i in one.rows if i.kind == "lesson"
                     for m in re.findall(r"^\[(\d\d) · ", i.what)})
    later = tuple(n for n in sorted(e) if n > "05")  # the one-day plan's notebooks are 01-05
    parts = [f"### One day: notebooks {taught[0]}-{taught[-1]}, as far as one day reaches", "",
             day_markdown(one, "Day 1", after([one], later), _release_text(one, ests, [one], True))]
    parts += ["", "### Two days: every notebook, as far as two days reach", ""]
    two = two_days(ests)
    for i, day in enumerate(two, 1):
        parts += [day_markdown(day, f"Day {i}", after(two) if i == len(two) else [],
                               _release_text(day, ests, two[:i], i == len(two))), ""]
    parts.append(
        rates_text() + f" Blocks of at most {BLOCK_MAX} minutes, each ending with {CATCH_UP_MIN} for "
        f"questions and catching up, with a {BREAK_MIN}-minute break between two and lunch "
        f"({LUNCH_MIN}) at the first break after {_clock(LUNCH_AFTER)}; lessons longer than "
        f"{LESSON_PART_MAX} minutes are taught in parts, split at their sections; exercises marked "
        "(kernel) write CuTe DSL code in a course kernel and come first, right after the part that "
        "teaches the sections they name; a lesson is taught on a day only with its first kernel "
        "exercise (and a short one after its last part where that exercise comes earlier). A day "
        f"ends by {_clock(DAY_END)}; its last minutes go to the other exercises of the notebooks it "
        "taught; what does not fit is listed for after the day.")
    return "\n".join(parts)
