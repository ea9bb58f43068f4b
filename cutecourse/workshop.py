"""Workshop agendas laid out from the estimated times (``cutecourse.course.estimate``).

A plan is the order of things in a day: the welcome and an opening talk, each notebook's lesson
(in parts, split at its ``##`` sections, where it is long), its exercises (those that write kernel
code first: they are the point of a hands-on day), a wrap-up. :func:`lay_out` turns it into clock
times in *blocks* of at most :data:`BLOCK_MAX` minutes, each ending with a few minutes for
questions and catching up, with a break between two blocks (lunch, the first break after
:data:`LUNCH_AFTER`). It stops at the first item that would end after :data:`DAY_END`; what did
not fit is listed for after the day, so a notebook that grows moves the agenda instead of silently
overrunning it. ``python -m cutecourse.course --write`` writes the agendas into
``docs/workshop.md`` between the markers :data:`START` and :data:`END`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .course import Counts, Estimate, Exercise, rates_text, round_minutes

START, END = "<!-- agenda:start -->", "<!-- agenda:end -->"

DAY_START = 9 * 60  # 09:00
DAY_END = 17 * 60 + 30  # 17:30
BLOCK_MAX = 90  # minutes between two breaks, at most (Carpentries and DLI plan 60-90)
BREAK_MIN, LUNCH_MIN = 15, 60
LUNCH_AFTER = 11 * 60 + 45  # the first break at or after this time is lunch
CATCH_UP_MIN = 10  # the end of every block: questions, catching up, a slow seat
LESSON_PART_MAX = 50  # a longer lesson is taught in parts, split at its sections
EXERCISE_ITEM_MAX = 45  # a longer run of exercises is split into items (a break may fall between)
WELCOME_MIN = 15  # welcome; every seat runs ./course.sh check (under a minute) and opens JupyterLab
TALK_MIN = 15  # the opening talk: why the CuTe DSL, a Hopper SM in one picture, the day's plan
RECAP_MIN = 10  # the second morning: yesterday's recaps, questions
WRAP_UP_MIN = 15  # questions, what to read next, the feedback form


@dataclass(frozen=True)
class Item:
    """One row of a day: what, for how long (minutes), and its kind (``lesson``, ``kernel``:
    exercises that include writing kernel code, ``exercises``, ``talk``, ``break``)."""

    what: str
    minutes: int
    kind: str = "talk"
    with_next: bool = False  # the end of a lesson: taught that day only if its exercises fit too


@dataclass(frozen=True)
class Day:
    rows: tuple[tuple[int, Item], ...]  # (start minute of the day, item)
    left_over: tuple[Item, ...]  # did not fit: for after the day

    @property
    def end(self) -> int:
        if not self.rows:
            return DAY_START
        start, item = self.rows[-1]
        return start + item.minutes

    def blocks(self) -> list[list[tuple[int, Item]]]:
        """The rows between two breaks."""
        out: list[list[tuple[int, Item]]] = [[]]
        for row in self.rows:
            if row[1].kind == "break":
                out.append([])
            else:
                out[-1].append(row)
        return [b for b in out if b]


def _link(est: Estimate) -> str:  # links are relative to docs/, where the agenda lives
    nb = est.notebook
    return f"[{nb.number} · {nb.title}](../notebooks/{nb.file})"


def _section_number(title: str) -> str:
    m = re.match(r"(\d+)", title)
    return m.group(1) if m else ""


def lesson(est: Estimate) -> list[Item]:
    """The lesson as one item, or in parts of about equal length split at its ``##`` sections
    when it is longer than :data:`LESSON_PART_MAX` minutes."""
    if est.lesson_min <= LESSON_PART_MAX or len(est.sections) < 2:
        return [Item(_link(est), est.lesson_min, "lesson")]
    for parts_n in range(math.ceil(est.lesson.minutes / LESSON_PART_MAX), len(est.sections) + 1):
        parts = _split(est.sections, parts_n)
        if all(round_minutes(sum((c for _, c in p), Counts()).minutes) <= LESSON_PART_MAX for p in parts):
            break
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


def exercises(est: Estimate, which: str = "all", file_prefix: str | None = None) -> list[Item]:
    """Items for the exercises of the notebook's file (``NN_*``, or ``file_prefix`` e.g. ``01b_``):
    ``which`` is "all", "day" (the first kernel-writing exercise, or the first lab where there is
    none, and the first short one) or "rest" (what "day" leaves). Kernel-writing exercises come
    first; a run longer than :data:`EXERCISE_ITEM_MAX` minutes is split into several items."""
    prefix = file_prefix or est.notebook.number + "_"
    mine = [e for e in est.exercises if e.file.startswith(prefix)]
    by_kind = {k: [e for e in mine if e.kind == k] for k in ("kernel", "lab", "short")}
    day = (by_kind["kernel"] or by_kind["lab"])[:1] + by_kind["short"][:1]
    chosen = {"all": mine, "day": day, "rest": [e for e in mine if e not in day]}[which]
    chosen = sorted(chosen, key=lambda e: (e.kind != "kernel", e.kind != "lab", mine.index(e)))
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


def taught_with(lesson_items: list[Item], exercise_items: list[Item]) -> list[Item]:
    """A lesson followed by its exercises: its last part is marked so that :func:`lay_out` puts it
    on a day only where the first exercise item fits after it."""
    if exercise_items:
        last = lesson_items[-1]
        lesson_items = lesson_items[:-1] + [Item(last.what, last.minutes, last.kind, True)]
    return lesson_items + exercise_items


def lay_out(items: list[Item], start: int = DAY_START, closing: Item | None = None) -> Day:
    """Clock times for ``items`` in order, in blocks of at most :data:`BLOCK_MAX` minutes (the
    last :data:`CATCH_UP_MIN` of each for questions), a break between two; ``closing`` (the
    wrap-up) always ends the day, and the items from the first that would not fit before it are
    left over."""
    clock, rows, block, lunch = start, [], 0, False
    day_end = DAY_END - (closing.minutes if closing else 0)

    def pause() -> Item:
        return Item("lunch", LUNCH_MIN, "break") if (not lunch and clock + CATCH_UP_MIN >= LUNCH_AFTER) \
            else Item("break", BREAK_MIN, "break")

    left: tuple[Item, ...] = ()
    for i, item in enumerate(items):
        gap = pause() if block and block + item.minutes + CATCH_UP_MIN > BLOCK_MAX else None
        begins = clock + (CATCH_UP_MIN + gap.minutes if gap else 0)
        # A lesson's end needs room for the exercises after it (and a break that may fall between).
        tail = (items[i + 1].minutes + CATCH_UP_MIN + BREAK_MIN
                if item.with_next and i + 1 < len(items) else 0)
        if begins + item.minutes + CATCH_UP_MIN + tail > day_end:
            left = tuple(items[i:])
            break
        if gap:
            rows.append((clock, Item("questions, catching up", CATCH_UP_MIN, "talk")))
            rows.append((clock + CATCH_UP_MIN, gap))
            lunch = lunch or gap.what == "lunch"
            clock, block = begins, 0
        rows.append((clock, item))
        clock += item.minutes
        block += item.minutes
    if closing and block + closing.minutes <= BLOCK_MAX:  # the wrap-up is the block's questions
        rows.append((clock, closing))
    elif block:
        rows.append((clock, Item("questions, catching up", CATCH_UP_MIN, "talk")))
        clock += CATCH_UP_MIN
        if closing:
            rows += [(clock, pause()), (clock + pause().minutes, closing)]
    elif closing:
        rows.append((clock, closing))
    return Day(tuple(rows), left)


def _by_number(ests: list[Estimate]) -> dict[str, Estimate]:
    return {e.notebook.number: e for e in ests}


def _opening() -> list[Item]:
    return [Item("welcome; every seat: ./course.sh check, JupyterLab open", WELCOME_MIN),
            Item("opening talk: why the CuTe DSL, a Hopper SM in one picture, the plan", TALK_MIN)]


def one_day(ests: list[Estimate]) -> list[Day]:
    """Notebooks 01-05 as far as one day reaches (layouts to a multicast Hopper GEMM), each
    with its first kernel-writing exercise and its first short one."""
    e = _by_number(ests)
    items = _opening()
    for n in ("01", "02", "03", "04", "05"):
        items += taught_with(lesson(e[n]), exercises(e[n], "day"))
    return [lay_out(items, closing=Item("wrap-up: what notebooks 06 and 07 add, questions, "
                                        "feedback form", WRAP_UP_MIN))]


def two_days(ests: list[Estimate]) -> list[Day]:
    """Every notebook in order, each with its first kernel-writing exercise and its first short
    one, as far as two days reach: what does not fit into day one opens day two, what does not
    fit into day two is listed for after the days (with the other exercises)."""
    e = _by_number(ests)
    day1 = _opening()
    day2 = [Item("recap of day one, questions", RECAP_MIN)]
    items = []
    for n in sorted(e):
        items += taught_with(lesson(e[n]), exercises(e[n], "day"))
    first = lay_out(day1 + items, closing=Item("feedback form (day one)", 5))
    second = lay_out(day2 + list(first.left_over),
                     closing=Item("wrap-up, questions, feedback form", WRAP_UP_MIN))
    return [Day(first.rows, ()), second]


def _clock(minute: int) -> str:
    return f"{minute // 60:02d}:{minute % 60:02d}"


def day_markdown(day: Day, title: str, extra_reading: list[str]) -> str:
    lines = [f"**{title}**", "", "| time | what | minutes |", "| --- | --- | --- |"]
    for start, item in day.rows:
        what = f"**{item.what}**" if item.kind == "break" else item.what
        lines.append(f"| {_clock(start)}-{_clock(start + item.minutes)} | {what} | {item.minutes} |")
    after = [i.what for i in day.left_over] + extra_reading
    if after:
        lines += ["", "After the day (self-paced): " + "; ".join(after) + "."]
    return "\n".join(lines)


def agenda_markdown(ests: list[Estimate]) -> str:
    """Both agendas as markdown, for docs/workshop.md."""
    e = _by_number(ests)
    after_one = [lesson(e[n])[0].what.split(", part")[0] for n in ("06", "07")]
    after_one += [x.what for n in ("01", "02", "03", "04", "05") for x in exercises(e[n], "rest")]
    after_one += [x.what for x in exercises(e["01"], file_prefix="01b_")]
    one = one_day(ests)[0]
    taught = sorted({m for _, i in one.rows if i.kind == "lesson"
                     for m in re.findall(r"^\[(\d\d) · ", i.what)})
    parts = [f"### One day: notebooks {taught[0]}-{taught[-1]}, as far as one day reaches", "",
             day_markdown(one, "Day 1", after_one)]
    parts += ["", "### Two days: every notebook, as far as two days reach", ""]
    after_two = [x.what for n in sorted(e) for x in exercises(e[n], "rest")]
    after_two += [x.what for x in exercises(e["01"], file_prefix="01b_")]
    two = two_days(ests)
    for i, day in enumerate(two, 1):
        parts += [day_markdown(day, f"Day {i}", after_two if i == len(two) else []), ""]
    parts.append(
        rates_text() + f" Blocks of at most {BLOCK_MAX} minutes, each ending with {CATCH_UP_MIN} for "
        f"questions and catching up, with a {BREAK_MIN}-minute break between two and lunch "
        f"({LUNCH_MIN}) at the first break after {_clock(LUNCH_AFTER)}; lessons longer than "
        f"{LESSON_PART_MAX} minutes are taught in parts, split at their sections; exercises marked "
        "(kernel) write CuTe DSL code in a course kernel and come first. A day ends by "
        f"{_clock(DAY_END)}; what does not fit is listed for after the day.")
    return "\n".join(parts)
