"""The course in one place: its notebooks, what each needs, and how long each takes.

One list, :data:`NOTEBOOKS`, says for every notebook its file, title, what it teaches, which GPU
runs its kernels and what a reader without that GPU sees. The README's notebook table, the
notebooks' own "Time" sentences, the course site (``cutecourse.site``), the workshop agendas
(``cutecourse.workshop``) and the seat check (``cutecourse.check``) all read it, so they cannot
disagree.

Times are *estimated from the files*, never typed in: :func:`estimate` counts a notebook's prose
words, code cells, pictures and listings, and weighs each exercise by what it asks (its heading:
``### Exercise N (kernel): ...`` is writing kernel code, ``(lab)`` is change-and-measure, a plain
heading a short answer sized by the code the learner writes). ``cutecourse.generate`` writes the
results into the files that quote them; this module imports none of the modules that read it.
``python -m cutecourse.course`` is the same command as ``python -m cutecourse.generate``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# -- reading and working rates (minutes), the whole model of "how long" ----------------------------
#: Careful reading of technical prose. General prose reads at ~240 words a minute; text that
#: defines a term per sentence and asks the reader to check a claim against code reads slower.
#: Calibrated on cold reads of notebooks 01-05 by readers who know CUDA and not CuTe (these two
#: rates put each lesson at or a little under the times they took, 45-120 minutes).
READING_WPM = 120
#: One code cell: read it, run it, read what it printed.
CODE_CELL_MIN = 1.0
#: One picture or widget: find what its title claims in it.
FIGURE_MIN = 1.0
#: One rendered listing or table (source on screen, a PTX excerpt, a measured table): find it, then
#: read it against the prose line by line, so its time grows with its length. Calibrated on a cold
#: read of notebooks 01-05: a 36-line kernel excerpt with new APIs took minutes, a 10-line one two.
LISTING_MIN = 1.0
LISTING_LINE_MIN = 0.15
#: A printed table or annotated excerpt (a code cell's text output of at least
#: PRINTED_TABLE_MIN_LINES lines: a benchmark table, a PTX excerpt with a note per line): found and
#: read against the prose like a listing, but scanned by row rather than read as code. A cold read
#: of notebook 04 (five printed tables and a 12-line annotated PTX excerpt) took a quarter longer
#: than the listings and prose alone predicted. Shorter outputs are a result, priced with the cell.
PRINTED_TABLE_MIN_LINES = 5
PRINTED_TABLE_MIN = 0.5
PRINTED_LINE_MIN = 0.05
#: Work on an exercise beyond reading it, by what it asks (the heading's "(kernel)" / "(lab)"):
#: writing CuTe DSL code inside a course kernel, compiling it and acting on the checker's verdict
#: about its PTX; changing a kernel's parameter and measuring or reading what changed; a short
#: answer (a tuple, a mask, a count), a base plus a little per line of the answer.
KERNEL_WORK_MIN = 20.0
LAB_WORK_MIN = 12.0
SHORT_WORK_MIN = 3.0
SHORT_PER_LINE_MIN = 0.5
SHORT_MAX_MIN = 10.0
#: Estimates are rounded to this many minutes (an estimate, not a stopwatch).
ROUND_MIN = 5

_EXERCISE_HEADING = re.compile(r"^(#+)\s*Exercise\s+\d+[a-z]?\s*(?:\((kernel|lab)\))?", re.MULTILINE)
_SECTION_HEADING = re.compile(r"^##\s+(\S.*)$", re.MULTILINE)
_SOLUTION = re.compile(r"# BEGIN SOLUTION[^\n]*\n(.*?)# END SOLUTION", re.DOTALL)
_KERNEL_CODE = re.compile(r"@cute\.(kernel|jit)\b")
#: "section 5", "sections 2-3", "notebook 07, section 6": the lesson sections an exercise names.
_SECTION_NAMED = re.compile(r"(?:notebook\s+(\d\d),?\s+)?\b[Ss]ections?\s+(\d+)(?:\s*[-–]\s*(\d+))?")
#: The "Time" sentence of a lesson notebook's header, in the spellings the notebooks have used
#: ("**Time.** About 60 minutes, ...", "**Time**: about 45 minutes.", "**Time:** about ..."), and
#: an exercises notebook's "About 20 minutes." Both are generated (``cutecourse.generate``).
TIME_SENTENCE = re.compile(r"\*\*Time(?:\.\*\*|\*\*:|:\*\*)\s*[Aa]bout \d+ minutes[^\n]*?\.(?=\s|$)")
EXERCISES_TIME = re.compile(r"\bAbout \d+ minutes\.(?=\s|$)")


from .catalogue import NOTEBOOKS, Notebook, notebook  # noqa: E402,F401  (the one list; re-exported)


# -- the estimator -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Counts:
    """What a reader meets in some cells of a notebook."""

    words: int = 0  # markdown words (not the "Time" sentences: they are generated from these)
    code_cells: int = 0
    figures: int = 0  # stored pictures and widgets
    listings: int = 0  # stored HTML outputs: source listings, tables
    listing_lines: int = 0  # their lines
    printed: int = 0  # printed tables and excerpts (text outputs of PRINTED_TABLE_MIN_LINES+ lines)
    printed_lines: int = 0  # their non-blank lines

    def __add__(self, other: "Counts") -> "Counts":
        return Counts(self.words + other.words, self.code_cells + other.code_cells,
                      self.figures + other.figures, self.listings + other.listings,
                      self.listing_lines + other.listing_lines, self.printed + other.printed,
                      self.printed_lines + other.printed_lines)

    @property
    def minutes(self) -> float:
        return (self.words / READING_WPM + self.code_cells * CODE_CELL_MIN
                + self.figures * FIGURE_MIN + self.listings * LISTING_MIN
                + self.listing_lines * LISTING_LINE_MIN
                + self.printed * PRINTED_TABLE_MIN + self.printed_lines * PRINTED_LINE_MIN)


@dataclass(frozen=True)
class Exercise:
    """One exercise of an exercises notebook: its heading, what it asks, estimated minutes."""

    file: str  # exercises/ file name
    title: str  # its heading, e.g. "Exercise 2: the phase bit after n advances"
    counts: Counts
    kind: str = "short"  # "kernel", "lab" or "short"
    answer_lines: int = 0  # code lines of the answer in the solution: what the learner writes
    sections: tuple[int, ...] = ()  # the sections of its own notebook its text names

    @property
    def needs(self) -> int | None:
        """The last lesson section the exercise builds on: the highest it names; None (the whole
        lesson) where it names none."""
        return max(self.sections) if self.sections else None

    @property
    def work_min(self) -> float:
        if self.kind == "kernel":
            return KERNEL_WORK_MIN
        if self.kind == "lab":
            return LAB_WORK_MIN
        return min(SHORT_MAX_MIN, SHORT_WORK_MIN + SHORT_PER_LINE_MIN * self.answer_lines)

    @property
    def minutes(self) -> float:
        return self.counts.minutes + self.work_min


@dataclass(frozen=True)
class Estimate:
    """A notebook's estimated time: the lesson (and its ``##`` sections), and each exercise."""

    notebook: Notebook
    lesson: Counts
    exercises: tuple[Exercise, ...]
    sections: tuple[tuple[str, Counts], ...] = field(default=())  # (heading, counts), in order

    @property
    def lesson_min(self) -> int:
        return round_minutes(self.lesson.minutes)

    @property
    def exercises_min(self) -> int:
        return round_minutes(sum(e.minutes for e in self.exercises))

    def file_min(self, name: str) -> int:
        """Minutes of the exercises in the exercises file ``name``."""
        return round_minutes(sum(e.minutes for e in self.exercises if e.file == name))


def round_minutes(minutes: float) -> int:
    """Round to the nearest :data:`ROUND_MIN` minutes, never below one step."""
    return max(ROUND_MIN, int(math.floor(minutes / ROUND_MIN + 0.5)) * ROUND_MIN)


def _cell_counts(cell) -> Counts:
    if cell.cell_type == "markdown":
        text = EXERCISES_TIME.sub("", TIME_SENTENCE.sub("", cell.source))
        return Counts(words=len(text.split()))
    if cell.cell_type != "code":
        return Counts()
    figures = listings = lines = printed = printed_lines = 0
    for out in cell.get("outputs", []):
        data = out.get("data", {})
        if "image/png" in data or "application/vnd.jupyter.widget-view+json" in data:
            figures += 1
        elif "text/html" in data:
            listings += 1
            lines += max(1, "".join(data["text/html"]).count("\n"))  # one per source or table line
        else:  # printed text: a stream, or a plain result
            text = "".join(out.get("text", "") if out.get("output_type") == "stream"
                           else data.get("text/plain", ""))
            n = sum(1 for ln in text.splitlines() if ln.strip())
            if n >= PRINTED_TABLE_MIN_LINES:
                printed += 1
                printed_lines += n
    return Counts(code_cells=1, figures=figures, listings=listings, listing_lines=lines,
                  printed=printed, printed_lines=printed_lines)


def _sections(cells) -> list[tuple[str | None, list]]:
    """Split cells into runs: (exercise title or None, cells). An exercise is a markdown cell with
    an "Exercise N" heading and the code cells right after it (its answer and its checker); the
    next markdown cell ends it. A notebook that holds exercises inline (05) has those cells
    counted once, as exercises, not also as lesson."""
    runs: list[tuple[str | None, list]] = [(None, [])]
    for cell in cells:
        if cell.cell_type == "markdown":
            ex = _EXERCISE_HEADING.search(cell.source)
            if ex:
                runs.append((cell.source[ex.start():].splitlines()[0].lstrip("#").strip(), []))
            elif runs[-1][0] is not None:
                runs.append((None, []))
        runs[-1][1].append(cell)
    return [r for r in runs if r[1]]


def exercise_kind(title: str, in_kernel: bool = False) -> str:
    """What an exercise asks: its heading's "(kernel)" or "(lab)"; a plain heading whose answer
    is written inside a ``@cute.kernel`` / ``@cute.jit`` function is kernel writing too; else
    "short"."""
    m = _EXERCISE_HEADING.search("# " + title)
    if m and m.group(2):
        return m.group(2)
    return "kernel" if in_kernel else "short"


def _answer(cells) -> tuple[str, bool]:
    """The code between ``# BEGIN SOLUTION`` and ``# END SOLUTION`` in ``cells``, and whether a
    cell holding such a region defines a kernel (the answer is kernel code)."""
    answered = [c.source for c in cells if c.cell_type == "code" and _SOLUTION.search(c.source)]
    return ("".join(m.group(1) for src in answered for m in _SOLUTION.finditer(src)),
            any(_KERNEL_CODE.search(src) for src in answered))


def _code_lines(code: str) -> int:
    return sum(1 for ln in code.splitlines() if ln.strip() and not ln.strip().startswith("#"))


def sections_named(cells, number: str) -> tuple[int, ...]:
    """The sections of notebook ``number`` that the markdown of ``cells`` names ("section 5",
    "sections 2-3"; "notebook 03, section 10" names another notebook's, and does not count)."""
    found = set()
    for c in cells:
        if c.cell_type == "markdown":
            for m in _SECTION_NAMED.finditer(c.source):
                if m.group(1) in (None, number):
                    found.update(range(int(m.group(2)), int(m.group(3) or m.group(2)) + 1))
    return tuple(sorted(found))


def _read(path: Path):
    import nbformat

    try:
        return nbformat.read(path, as_version=4)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} is listed in cutecourse/course.py but does not exist; "
                                "add the file or correct NOTEBOOKS") from None


def _lesson_sections(cells) -> list[tuple[str, Counts]]:
    """The lesson's cells grouped by ``##`` heading (cells before the first one open the first
    section), inline exercises left out."""
    out: list[tuple[str, Counts]] = []
    for title, run in _sections(cells):
        if title is not None:
            continue
        for c in run:
            m = _SECTION_HEADING.search(c.source) if c.cell_type == "markdown" else None
            if m or not out:
                out.append((m.group(1).strip() if m else "introduction", Counts()))
            out[-1] = (out[-1][0], out[-1][1] + _cell_counts(c))
    return out


def estimate(nb: Notebook) -> Estimate:
    """Estimate ``nb``'s lesson (its cells, less the exercises it holds inline: those are counted
    once, as exercises) and each exercise in ``exercises/NN*.ipynb``, weighed by what it asks
    (the size of the answer is read from the matching ``solutions/`` notebook)."""
    sections = _lesson_sections(_read(nb.path).cells)
    lesson = sum((c for _, c in sections), Counts())
    exercises = []
    for path in nb.exercise_files:
        solution = nb.solution_file(path)
        answers = ({t: _answer(cs) for t, cs in _sections(_read(solution).cells) if t}
                   if solution.exists() else {})
        for title, cells in _sections(_read(path).cells):
            if title is not None:
                counts = sum((_cell_counts(c) for c in cells), Counts())
                answer, in_kernel = answers.get(title, ("", False))
                exercises.append(Exercise(path.name, title, counts, exercise_kind(title, in_kernel),
                                          _code_lines(answer), sections_named(cells, nb.number)))
    return Estimate(nb, lesson, tuple(exercises), tuple(sections))


def estimates() -> list[Estimate]:
    return [estimate(nb) for nb in NOTEBOOKS]


def time_text(est: Estimate) -> str:
    """The README's time column: lesson + exercises."""
    return f"{est.lesson_min} + {est.exercises_min} min"


def rates_text() -> str:
    """The estimator's rates in one sentence (quoted under the README table and in the agenda)."""
    return (f"Times are estimated from the notebooks by `.venv/bin/python -m cutecourse.course`: prose at "
            f"{READING_WPM} words a minute, {CODE_CELL_MIN:g} min per code cell, {FIGURE_MIN:g} per "
            f"picture or widget, {LISTING_MIN:g} per listing or table plus {LISTING_LINE_MIN:g} per line of it, "
            f"{PRINTED_TABLE_MIN:g} per printed table or excerpt of {PRINTED_TABLE_MIN_LINES}+ lines plus "
            f"{PRINTED_LINE_MIN:g} per line; on top of reading an exercise, "
            f"{KERNEL_WORK_MIN:g} min of work for one that writes kernel code, {LAB_WORK_MIN:g} for a "
            f"change-and-measure lab, {SHORT_WORK_MIN:g} plus {SHORT_PER_LINE_MIN:g} per line of the "
            f"answer (at most {SHORT_MAX_MIN:g}) for a short one; rounded to {ROUND_MIN} min.")


def header_sentence(est: Estimate) -> str:
    """The "Time" sentence of a lesson notebook's header."""
    files = [f"`exercises/{p.name}`" for p in est.notebook.exercise_files]
    return (f"**Time.** About {est.lesson_min} minutes, plus about {est.exercises_min} for the "
            f"exercises in {' and '.join(files)}.")


def exercises_sentence(est: Estimate, name: str) -> str:
    """The "About N minutes." sentence of the header of the exercises file ``name``."""
    return f"About {est.file_min(name)} minutes."


if __name__ == "__main__":  # the command lives in cutecourse.generate (which imports this module):
    import runpy  # run it as a script, so that this module imports nothing that imports it back

    runpy.run_module("cutecourse.generate", run_name="__main__", alter_sys=True)
