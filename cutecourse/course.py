"""The course in one place: its notebooks, what each needs, and how long each takes.

One list, :data:`NOTEBOOKS`, says for every notebook its file, title, what it teaches, which GPU
runs its kernels and what a reader without that GPU sees. The README's notebook table, the
course site (``cutecourse.site``), the workshop agenda (``cutecourse.workshop``) and the seat check
(``cutecourse.check``) all read it, so they cannot disagree.

Times are *estimated from the files*, never typed in: :func:`estimate` counts a notebook's prose
words, code cells, pictures and listings and its exercises, at the rates below. Notebooks change;
``python -m cutecourse.course --write`` recomputes the README table and the agenda, and
``tests/test_course.py`` fails while they are stale.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# -- reading and working rates (minutes), the whole model of "how long" ----------------------------
#: Careful reading of technical prose. General prose reads at ~240 words a minute; text that
#: defines a term per sentence and asks the reader to check a claim against code reads slower.
READING_WPM = 150
#: One code cell: read it, run it, read what it printed.
CODE_CELL_MIN = 1.0
#: One picture or widget: find what its title claims in it.
FIGURE_MIN = 1.0
#: One rendered listing or table (source on screen, a measured table): read it against the prose.
LISTING_MIN = 2.0
#: One exercise beyond reading it: write the answer, run the checker, fix it once.
EXERCISE_WORK_MIN = 8.0
#: Estimates are rounded to this many minutes (an estimate, not a stopwatch).
ROUND_MIN = 5

_EXERCISE_HEADING = re.compile(r"^(#+)\s*Exercise\s+\d+", re.MULTILINE)


@dataclass(frozen=True)
class Notebook:
    """One notebook of the course, as the README table and the site describe it."""

    number: str  # "01" ... "07": the syllabus order
    file: str  # file name under notebooks/ (exercises/ and solutions/ use the same stem)
    title: str
    learn: str  # what you learn, one line of markdown
    gpu: str  # the GPU its kernels run on
    without: str  # what a reader without that GPU sees
    targets: tuple[str, ...]  # cutecourse.modes targets of its kernels: "any", "sm_90a", "sm_100a"

    @property
    def path(self) -> Path:
        return ROOT / "notebooks" / self.file

    @property
    def exercise_files(self) -> list[Path]:
        """``exercises/NN*.ipynb``: the notebook's exercises (01 has a second set, 01b)."""
        return sorted((ROOT / "exercises").glob(f"{self.number}*.ipynb"))

    def solution_file(self, exercise: Path) -> Path:
        return ROOT / "solutions" / exercise.name


NOTEBOOKS: tuple[Notebook, ...] = (
    Notebook(
        "01", "01_layouts_and_elementwise_add.ipynb", "Layouts and elementwise add",
        "layouts as functions, printing at trace vs run time, `zipped_divide`, a naive and a 128-bit "
        "vectorized kernel, reading PTX/SASS, measuring GB/s",
        "any NVIDIA GPU, sm_80+",
        "kernels compiled for sm_90a; load widths read from PTX and SASS; committed H100 figures shown",
        ("any",)),
    Notebook(
        "02", "02_tv_layouts.ipynb", "Thread-value layouts",
        "block tile → thread tile, `make_layout_tv`, coalescing, a layout explorer, a tuning sweep",
        "any NVIDIA GPU, sm_80+",
        "TV pictures and explorer work; sweep results from the committed H100 run",
        ("any",)),
    Notebook(
        "03", "03_hopper_gemm_prefetch.ipynb", "Hopper GEMM with prefetch",
        "TMA, mbarriers, the smem pipeline, WGMMA, naive vs prefetching mainloop, stage count",
        "Hopper (H100/H200)",
        "sm_90a compile: wgmma/TMA/mbarrier counts; pipeline widget and timeline model on the CPU",
        ("sm_90a",)),
    Notebook(
        "04", "04_compiler_pipelining.ipynb", "Letting the compiler pipeline",
        "`cutlass.range(..., prefetch_stages=)`, what the compiler needs, proof from its diagnostics "
        "and generated code",
        "Hopper",
        "the compiler's diagnostic and the generated loop are shown",
        ("sm_90a",)),
    Notebook(
        "05", "05_tma_multicast.ipynb", "TMA multicast and clusters",
        "clusters, multicast masks derived from first principles, L2 traffic",
        "Hopper",
        "multicast planner, cluster widget, `multicast::cluster` loads in the PTX",
        ("sm_90a",)),
    Notebook(
        "06", "06_kernel_schedules.ipynb", "Kernel schedules",
        "CUTLASS 2.x vs 3.x, the persistent producer and consumer loops and the tile scheduler "
        "(static, dynamic), warp specialization and `setmaxnreg`, cooperative vs ping-pong and its "
        "ordered barrier, epilogue schedules (smem + TMA store vs direct stores), stream-K's split "
        "and fix-up, programmatic dependent launch, which schedule when and why the 700 W cap "
        "disagrees with the talk",
        "Hopper",
        "the kernels' code beside their PTX, timeline model and widget, ordered-barrier and stream-K "
        "models and pictures, one committed H100 table (the rest in `docs/schedules_measured.md`)",
        ("sm_90a",)),
    Notebook(
        "07", "07_grouped_block_scaled_gemm.ipynb", "Grouped, block-scaled GEMM",
        "grouped GEMM for MoE experts, the group walk on the GPU beside its CPU model, per-CTA "
        "tensor maps (host templates, initialised by their owner warp, rewritten with a release and "
        "an acquire), NVFP4 with its per-tensor scale, MXFP8 and both MX rounding rules, FP8 block "
        "scales promoted in software on Hopper (`_issue`, `_promote`), a Blackwell primer (tensor "
        "memory, one-thread `tcgen05.mma`, `tcgen05.cp` and `tcgen05.ld`, UMMA vs WGMMA, 2-CTA MMA), "
        "the scale-factor layout as a CuTe layout, the Blackwell MMA warp beside its PTX",
        "Hopper (grouped GEMM, bf16 and FP8 block-scaled); Blackwell (block-scaled)",
        "scheduler and block-scaling models, the TMEM picture, widgets; every kernel compiled and "
        "inspected (the Hopper grouped GEMMs run and timed on an H100; the Blackwell kernel never run)",
        ("sm_90a", "sm_100a")),
)


def notebook(number: str) -> Notebook:
    """The notebook numbered ``number`` ("01" ... "07"); a clear error for any other."""
    for nb in NOTEBOOKS:
        if nb.number == number:
            return nb
    raise KeyError(f"no notebook {number!r}; the course has {', '.join(n.number for n in NOTEBOOKS)}")


# -- the estimator -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Counts:
    """What a reader meets in some cells of a notebook."""

    words: int = 0  # markdown words
    code_cells: int = 0
    figures: int = 0  # stored pictures and widgets
    listings: int = 0  # stored HTML outputs: source listings, tables

    def __add__(self, other: "Counts") -> "Counts":
        return Counts(self.words + other.words, self.code_cells + other.code_cells,
                      self.figures + other.figures, self.listings + other.listings)

    @property
    def minutes(self) -> float:
        return (self.words / READING_WPM + self.code_cells * CODE_CELL_MIN
                + self.figures * FIGURE_MIN + self.listings * LISTING_MIN)


@dataclass(frozen=True)
class Exercise:
    """One exercise of an exercises notebook: its heading and estimated minutes."""

    file: str  # exercises/ file name
    title: str  # its heading, e.g. "Exercise 2: the phase bit after n advances"
    counts: Counts

    @property
    def minutes(self) -> float:
        return self.counts.minutes + EXERCISE_WORK_MIN


@dataclass(frozen=True)
class Estimate:
    """A notebook's estimated time: the lesson, and each exercise."""

    notebook: Notebook
    lesson: Counts
    exercises: tuple[Exercise, ...]

    @property
    def lesson_min(self) -> int:
        return round_minutes(self.lesson.minutes)

    @property
    def exercises_min(self) -> int:
        return round_minutes(sum(e.minutes for e in self.exercises))


def round_minutes(minutes: float) -> int:
    """Round to the nearest :data:`ROUND_MIN` minutes, never below one step."""
    return max(ROUND_MIN, int(math.floor(minutes / ROUND_MIN + 0.5)) * ROUND_MIN)


def _cell_counts(cell) -> Counts:
    if cell.cell_type == "markdown":
        return Counts(words=len(cell.source.split()))
    if cell.cell_type != "code":
        return Counts()
    figures = listings = 0
    for out in cell.get("outputs", []):
        data = out.get("data", {})
        if "image/png" in data or "application/vnd.jupyter.widget-view+json" in data:
            figures += 1
        elif "text/html" in data:
            listings += 1
    return Counts(code_cells=1, figures=figures, listings=listings)


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


def _read(path: Path):
    import nbformat

    try:
        return nbformat.read(path, as_version=4)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} is listed in cutecourse/course.py but does not exist; "
                                "add the file or correct NOTEBOOKS") from None


def estimate(nb: Notebook) -> Estimate:
    """Estimate ``nb``'s lesson (its cells, less the exercises it holds inline: those are counted
    once, as exercises) and each exercise in ``exercises/NN*.ipynb``."""
    lesson = Counts()
    for title, cells in _sections(_read(nb.path).cells):
        if title is None:
            for c in cells:
                lesson += _cell_counts(c)
    exercises = []
    for path in nb.exercise_files:
        for title, cells in _sections(_read(path).cells):
            if title is not None:
                counts = Counts()
                for c in cells:
                    counts += _cell_counts(c)
                exercises.append(Exercise(path.name, title, counts))
    return Estimate(nb, lesson, tuple(exercises))


def estimates() -> list[Estimate]:
    return [estimate(nb) for nb in NOTEBOOKS]


def time_text(est: Estimate) -> str:
    """The README's time column: lesson + exercises."""
    return f"{est.lesson_min} + {est.exercises_min} min"


def rates_text() -> str:
    """The estimator's rates in one sentence (quoted under the README table and in the agenda)."""
    return (f"Times are estimated from the notebooks by `python -m cutecourse.course`: prose at "
            f"{READING_WPM} words a minute, {CODE_CELL_MIN:g} min per code cell, {FIGURE_MIN:g} per "
            f"picture or widget, {LISTING_MIN:g} per listing or table, and {EXERCISE_WORK_MIN:g} min "
            f"of work per exercise on top of reading it; rounded to {ROUND_MIN} min.")


# -- the README table ----------------------------------------------------------------------------------
README_START, README_END = "<!-- notebooks:start -->", "<!-- notebooks:end -->"


def readme_table(ests: list[Estimate] | None = None) -> str:
    """The README's notebook table, from :data:`NOTEBOOKS` and the estimates."""
    ests = ests if ests is not None else estimates()
    rows = ["| # | notebook | what you learn | time: lesson + exercises | runs kernels on | "
            "without that GPU |",
            "| --- | --- | --- | --- | --- | --- |"]
    for est in ests:
        nb = est.notebook
        rows.append(f"| {nb.number} | [{nb.title}](notebooks/{nb.file}) | {nb.learn} | "
                    f"{time_text(est)} | {nb.gpu} | {nb.without} |")
    return "\n".join(rows) + "\n\n" + rates_text()


def replace_block(text: str, start: str, end: str, body: str, where: str) -> str:
    """``text`` with the lines between the ``start`` and ``end`` markers replaced by ``body``."""
    i, j = text.find(start), text.find(end)
    if i < 0 or j < i:
        raise ValueError(f"{where} has no {start} ... {end} block; put the two markers back "
                         "where the generated text belongs")
    return text[:i + len(start)] + "\n" + body.rstrip("\n") + "\n" + text[j:]


def generated_files() -> dict[Path, str]:
    """Every file that holds generated course text, with the text it should hold now."""
    from . import workshop

    ests = estimates()
    readme = ROOT / "README.md"
    guide = ROOT / "docs" / "workshop.md"
    out = {readme: replace_block(readme.read_text(), README_START, README_END,
                                 readme_table(ests), "README.md")}
    out[guide] = replace_block(guide.read_text(), workshop.START, workshop.END,
                               workshop.agenda_markdown(ests), "docs/workshop.md")
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m cutecourse.course``: print the estimates; ``--write`` updates the README table
    and the workshop agenda; ``--check`` exits 1 if either is stale."""
    args = sys.argv[1:] if argv is None else argv
    if "--write" in args or "--check" in args:
        stale = []
        for path, text in generated_files().items():
            if path.read_text() != text:
                stale.append(str(path.relative_to(ROOT)))
                if "--write" in args:
                    path.write_text(text)
        if "--check" in args and stale:
            print("out of date (run python -m cutecourse.course --write):", ", ".join(stale))
            return 1
        print(("rewrote: " + ", ".join(stale)) if stale and "--write" in args else "up to date")
        return 0
    for est in estimates():
        c = est.lesson
        print(f"{est.notebook.number} {est.notebook.title}: lesson {est.lesson_min} min "
              f"({c.words} words, {c.code_cells} code cells, {c.figures} pictures, "
              f"{c.listings} listings); exercises {est.exercises_min} min")
        for ex in est.exercises:
            print(f"     {ex.file}: {ex.title}: {ex.minutes:.0f} min")
    print(rates_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
