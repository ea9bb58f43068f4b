"""Workshop agendas laid out from the estimated times (``cutecourse.course.estimate``).

A plan is the order of things in a day: a seat check, each notebook's lesson, some of its
exercises, a wrap-up. :func:`lay_out` turns it into clock times: it starts the day at
:data:`DAY_START`, puts each break in the gap between two items nearest the break's time, and
stops at the first item that would end after :data:`DAY_END`; what did not fit is listed as
reading for after the day, so a notebook that grows this week moves the agenda instead of
silently overrunning it. ``python -m cutecourse.course --write`` writes the result into
``docs/workshop.md`` between the markers :data:`START` and :data:`END`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .course import Estimate, rates_text, round_minutes

START, END = "<!-- agenda:start -->", "<!-- agenda:end -->"

DAY_START = 9 * 60  # 09:00
DAY_END = 17 * 60 + 30  # 17:30
#: (clock time, minutes, name): each taken in the gap between two items nearest its time.
BREAKS = ((10 * 60 + 30, 15, "break"), (12 * 60 + 30, 60, "lunch"), (15 * 60 + 15, 15, "break"))
SEAT_CHECK_MIN = 20  # welcome; every seat runs ./course.sh check (under a minute) and opens JupyterLab
RECAP_MIN = 10  # the second morning: yesterday's recaps, questions
WRAP_UP_MIN = 15  # questions, what to read next


@dataclass(frozen=True)
class Item:
    """One row of a day: what, and for how long (minutes)."""

    what: str
    minutes: int


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


def lesson(est: Estimate) -> Item:
    nb = est.notebook  # links are relative to docs/, where the agenda lives
    return Item(f"[{nb.number} · {nb.title}](../notebooks/{nb.file})", est.lesson_min)


def exercises(est: Estimate, start: int = 0, stop: int | None = None,
              file_prefix: str | None = None) -> Item | None:
    """Exercises ``start+1`` to ``stop`` of the notebook's exercises file (``NN_*``, or the file
    ``file_prefix`` names, e.g. ``01b_``); None if there are none."""
    prefix = file_prefix or est.notebook.number + "_"
    mine = [e for e in est.exercises if e.file.startswith(prefix)]
    chosen = mine[start:stop]
    if not chosen:
        return None
    first, last = start + 1, start + len(chosen)
    nums = f"{first}-{last}" if last > first else f"{first}"
    name = chosen[0].file.split("_")[0]  # "01", "01b"
    return Item(f"[exercises {name}](../exercises/{chosen[0].file}): {nums}",
                round_minutes(sum(e.minutes for e in chosen)))


def lay_out(items: list[Item]) -> Day:
    """Clock times for ``items`` in order, with :data:`BREAKS` between them; stop at the first
    item that would end after :data:`DAY_END`."""
    clock, rows, pending = DAY_START, [], list(BREAKS)
    for i, item in enumerate(items):
        # A break goes into the gap nearest its time: before this item if that is nearer than after.
        while pending and abs(clock - pending[0][0]) <= abs(clock + item.minutes - pending[0][0]):
            _, minutes, name = pending.pop(0)
            rows.append((clock, Item(name, minutes)))
            clock += minutes
        if clock + item.minutes > DAY_END:
            return Day(tuple(rows), tuple(items[i:]))
        rows.append((clock, item))
        clock += item.minutes
    return Day(tuple(rows), ())


def _by_number(ests: list[Estimate]) -> dict[str, Estimate]:
    return {e.notebook.number: e for e in ests}


def one_day(ests: list[Estimate]) -> list[Day]:
    """Layouts to a Hopper GEMM with multicast: notebooks 01-05, the first two exercises of each."""
    e = _by_number(ests)
    items = [Item("welcome; every seat: ./course.sh check", SEAT_CHECK_MIN)]
    for n in ("01", "02", "03", "04", "05"):
        items += [lesson(e[n]), exercises(e[n], stop=2)]
    items.append(Item("wrap-up: what notebooks 06 and 07 add, questions", WRAP_UP_MIN))
    return [lay_out([i for i in items if i])]


def two_days(ests: list[Estimate]) -> list[Day]:
    """The whole course, every exercise: 01-04 and 05's lesson on day one; day two opens with
    05's exercises (after the recap), then 06 and 07. (05's lesson moved to day one when 06 and
    07 grew past one day together.)"""
    e = _by_number(ests)
    day1 = [Item("welcome; every seat: ./course.sh check", SEAT_CHECK_MIN)]
    for n in ("01", "02", "03", "04"):
        day1 += [lesson(e[n]), exercises(e[n])]
        if n == "01":
            day1.append(exercises(e[n], file_prefix="01b_"))  # the second set of layout exercises
    day1.append(lesson(e["05"]))
    day2 = [Item("recap of day one, questions", RECAP_MIN), exercises(e["05"])]
    for n in ("06", "07"):
        day2 += [lesson(e[n]), exercises(e[n])]
    day2.append(Item("wrap-up, questions", WRAP_UP_MIN))
    return [lay_out([i for i in day1 if i]), lay_out([i for i in day2 if i])]


def _clock(minute: int) -> str:
    return f"{minute // 60:02d}:{minute % 60:02d}"


def day_markdown(day: Day, title: str, extra_reading: list[str]) -> str:
    lines = [f"**{title}**", "", "| time | what | minutes |", "| --- | --- | --- |"]
    for start, item in day.rows:
        lines.append(f"| {_clock(start)}-{_clock(start + item.minutes)} | {item.what} | {item.minutes} |")
    after = [i.what for i in day.left_over] + extra_reading
    if after:
        lines += ["", "After the day (self-paced): " + "; ".join(after) + "."]
    return "\n".join(lines)


def agenda_markdown(ests: list[Estimate]) -> str:
    """Both agendas as markdown, for docs/workshop.md."""
    e = _by_number(ests)
    one = one_day(ests)[0]
    extra = exercises(e["01"], file_prefix="01b_")  # the second set of layout exercises
    after_one = [lesson(e[n]).what for n in ("06", "07")]
    after_one += [x.what for n in ("01", "02", "03", "04", "05") if (x := exercises(e[n], start=2))]
    after_one += [extra.what] if extra else []
    parts = ["### One day: layouts to a multicast Hopper GEMM", "",
             day_markdown(one, "Day 1", after_one)]
    two = two_days(ests)
    parts += ["", "### Two days: the whole course", ""]
    for i, day in enumerate(two, 1):
        parts += [day_markdown(day, f"Day {i}", []), ""]
    parts.append(rates_text() + f" Breaks near {', '.join(_clock(b[0]) for b in BREAKS)}, in the "
                 f"gap between two items nearest that time; a day ends by {_clock(DAY_END)}, and "
                 "what does not fit is listed for after the day.")
    return "\n".join(parts)
