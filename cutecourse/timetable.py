"""Clock times for a workshop day: items in blocks, breaks, lunch and a wrap-up.

:func:`lay_out` turns an ordered list of :class:`Item` (a lesson part, an exercise run, a talk)
into a :class:`Day`: blocks of at most :data:`BLOCK_MAX` minutes, each ending with
:data:`CATCH_UP_MIN` minutes for questions, a break between two (lunch, the first after
:data:`LUNCH_AFTER`), and the wrap-up by :data:`DAY_END`. What goes on a day, and in which order,
is ``cutecourse.workshop``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DAY_START = 9 * 60  # 09:00
DAY_END = 17 * 60 + 30  # 17:30
BLOCK_MAX = 90  # minutes between two breaks, at most (Carpentries and DLI plan 60-90)
BREAK_MIN, LUNCH_MIN = 15, 60
LUNCH_AFTER = 11 * 60 + 45  # the first break at or after this time is lunch
CATCH_UP_MIN = 10  # the end of every block: questions, catching up, a slow seat


@dataclass(frozen=True)
class Item:
    """One row of a day: what, for how long (minutes), and its kind (``lesson``, ``kernel``:
    exercises that include writing kernel code, ``exercises``, ``talk``, ``break``)."""

    what: str
    minutes: int
    kind: str = "talk"
    with_next: bool = False  # a lesson (part): taught that day only if what follows it fits too
    optional: bool = False  # practice for a day's last minutes: skipped, not left over, if it does not fit


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


def lay_out(items: list[Item], start: int = DAY_START, closing: Item | None = None) -> Day:
    """Clock times for ``items`` in order, in blocks of at most :data:`BLOCK_MAX` minutes (the
    last :data:`CATCH_UP_MIN` of each for questions), a break between two; ``closing`` (the
    wrap-up) always ends the day by :data:`DAY_END`. Items chained by ``with_next`` (a lesson and
    the exercises after it) go on the day together or not at all; from the first that do not fit,
    the items are left over, and only ``optional`` ones (practice) may still fill the day's last
    minutes. A break falls only where a block is full, so a lesson whose exercises fit into its
    block needs none."""
    clock = _Clock(start)
    left: list[Item] = []
    i = 0
    while i < len(items):
        j = i + 1
        while items[j - 1].with_next and j < len(items):
            j += 1
        unit = items[i:j]
        trial = clock.copy()
        for item in unit:
            trial.place(item)
        fits = not left or unit[0].optional
        if fits and trial.close(closing) <= DAY_END:
            for item in unit:
                clock.place(item)
        elif not unit[0].optional:
            left += unit
        i = j
    clock.close(closing)
    return Day(tuple(clock.rows), tuple(left))


@dataclass
class _Clock:
    """The day so far: the time, the minutes in the open block, whether lunch was had, the rows."""

    time: int
    block: int = 0
    lunch: bool = False
    rows: list = field(default_factory=list)

    def copy(self) -> "_Clock":
        return _Clock(self.time, self.block, self.lunch, list(self.rows))

    def _pause(self) -> Item:
        if not self.lunch and self.time + CATCH_UP_MIN >= LUNCH_AFTER:
            return Item("lunch", LUNCH_MIN, "break")
        return Item("break", BREAK_MIN, "break")

    def _end_block(self) -> None:
        """Questions, then a break (lunch, the first after :data:`LUNCH_AFTER`)."""
        self._add(Item("questions, catching up", CATCH_UP_MIN, "talk"))
        gap = self._pause()
        self.lunch = self.lunch or gap.what == "lunch"
        self._add(gap)
        self.block = 0

    def _add(self, item: Item) -> None:
        self.rows.append((self.time, item))
        self.time += item.minutes

    def place(self, item: Item) -> None:
        """``item`` in the open block, or after a break where the block has no room for it and
        its questions."""
        if self.block and self.block + item.minutes + CATCH_UP_MIN > BLOCK_MAX:
            self._end_block()
        self._add(item)
        self.block += item.minutes

    def close(self, closing: Item | None) -> int:
        """End the day: the wrap-up as the last block's questions where it fits into the block,
        else questions, a break and the wrap-up; return the day's end."""
        if closing and self.block + closing.minutes <= BLOCK_MAX:
            self._add(closing)
        elif self.block:
            if closing:
                self._end_block()
                self._add(closing)
            else:
                self._add(Item("questions, catching up", CATCH_UP_MIN, "talk"))
        elif closing:
            self._add(closing)
        return self.time
