"""Write the course's times where they are quoted: one estimate (``cutecourse.course``), many places.

* the README's notebook table (between ``<!-- notebooks:start -->`` and ``<!-- notebooks:end -->``);
* the agendas in ``docs/workshop.md`` (``cutecourse.workshop``);
* each lesson notebook's "Time" sentence, and the "About N minutes." of an exercises notebook's
  header (in ``solutions/`` and the ``exercises/`` generated from it), where it has one.

``python -m cutecourse.course`` (or ``cutecourse.generate``) prints the estimates; ``--write``
rewrites the README table and the agendas, ``--write-headers`` the notebooks' time sentences
(only that sentence: the rest of each file is left byte for byte), ``--check`` exits 1 while
anything is stale. ``tests/test_course.py`` runs the same comparisons.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from . import course, workshop
from .course import ROOT, Estimate, estimates, rates_text, time_text

README_START, README_END = "<!-- notebooks:start -->", "<!-- notebooks:end -->"


def readme_table(ests: list[Estimate] | None = None) -> str:
    """The README's notebook table, from :data:`course.NOTEBOOKS` and the estimates."""
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


def generated_files(ests: list[Estimate] | None = None) -> dict[Path, str]:
    """README.md and docs/workshop.md, with the text they should hold now."""
    ests = ests if ests is not None else estimates()
    readme, guide = ROOT / "README.md", ROOT / "docs" / "workshop.md"
    return {
        readme: replace_block(readme.read_text(), README_START, README_END, readme_table(ests),
                              "README.md"),
        guide: replace_block(guide.read_text(), workshop.START, workshop.END,
                             workshop.agenda_markdown(ests), "docs/workshop.md"),
    }


# -- the notebooks' own time sentences ---------------------------------------------------------------
def _rewrite_first(text: str, pattern, sentence: str) -> str:
    """``text`` (a notebook file, as JSON) with the first match of ``pattern`` in its header (the
    first cell) replaced by ``sentence``; the edit is made in the file's text, so nothing else
    changes."""
    nb = json.loads(text)
    for cell in nb["cells"][:1]:  # the header: the first cell
        if cell["cell_type"] != "markdown":
            continue
        source = "".join(cell["source"])
        m = pattern.search(source)
        if m:
            if m.group(0) == sentence:
                return text
            old, new = json.dumps(m.group(0), ensure_ascii=False), json.dumps(sentence, ensure_ascii=False)
            if text.count(old[1:-1]) != 1:
                raise ValueError(f"the time sentence {m.group(0)!r} is split across lines or "
                                 "appears twice in the file; put it on one line, once")
            return text.replace(old[1:-1], new[1:-1])
    return text


def headers(ests: list[Estimate] | None = None) -> dict[Path, str]:
    """Every notebook that has a time sentence, with the text it should hold now: a lesson
    notebook's "**Time.** About L minutes, plus about E for the exercises in ...", and an
    exercises notebook's "About N minutes." (solutions/ and the exercises/ made from it)."""
    ests = ests if ests is not None else estimates()
    out: dict[Path, str] = {}
    for est in ests:
        path = est.notebook.path
        out[path] = _rewrite_first(path.read_text(encoding="utf-8"), course.TIME_SENTENCE,
                                   course.header_sentence(est))
        for ex in est.notebook.exercise_files:
            sentence = course.exercises_sentence(est, ex.name)
            for path in (ex, est.notebook.solution_file(ex)):
                if path.exists():
                    out[path] = _rewrite_first(path.read_text(encoding="utf-8"),
                                               course.EXERCISES_TIME, sentence)
    return out


def stale(files: dict[Path, str]) -> list[Path]:
    return [p for p, text in files.items() if p.read_text(encoding="utf-8") != text]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if {"-h", "--help"} & set(args):
        print(__doc__)
        return 0
    if {"--write", "--write-headers", "--check"} & set(args):
        ests = estimates()
        checks = []
        if "--write" in args or "--check" in args:
            checks.append(("--write", generated_files(ests)))
        if "--write-headers" in args or "--check" in args:
            checks.append(("--write-headers", headers(ests)))
        out_of_date, wrote = [], []
        for flag, files in checks:
            for path in stale(files):
                if flag in args:
                    path.write_text(files[path], encoding="utf-8")
                    wrote.append(str(path.relative_to(ROOT)))
                else:
                    out_of_date.append(f"{path.relative_to(ROOT)} ({flag})")
        if out_of_date:
            print("out of date (run python -m cutecourse.course with the flag named):",
                  ", ".join(out_of_date))
            return 1
        print(("rewrote: " + ", ".join(wrote)) if wrote else "up to date")
        return 0
    for est in estimates():
        c = est.lesson
        print(f"{est.notebook.number} {est.notebook.title}: lesson {est.lesson_min} min "
              f"({c.words} words, {c.code_cells} code cells, {c.figures} pictures, "
              f"{c.listings} listings); exercises {est.exercises_min} min")
        for ex in est.exercises:
            print(f"     {ex.file}: {ex.title} [{ex.kind}]: {ex.minutes:.0f} min")
    print(rates_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
