"""Stage the course as a Sphinx source tree: copies of the pages, made fit for a static site.

The tree mirrors the repository (``notebooks/``, ``exercises/``, ``solutions/``, ``docs/``,
``benchmarks/README.md``), so a relative link that works on GitHub works on the site too; its root
page, ``index.md``, is the README plus the navigation. Nothing in the repository is edited: each
page is copied and, in the copy,

* every widget output becomes its stored picture (``cutecourse.site.widgets``);
* a notebook gets a box under its title: which GPU runs its kernels, what a reader without one
  sees, what the stored outputs on the page come from, its estimated time and its exercises
  (from ``cutecourse.course``, the README table's source);
* an exercises page links its answers; an answers page is left out of the navigation (reached
  only through that link). The *learner edition* (``learner=True``) has no answers pages, no
  link to one, no teacher's kit (its notes answer the predictions), no design notes or
  contributors' guide: the site a teacher gives a room;
* a path in backticks that names another page of the site (```docs/hopper_gemm.md```) becomes a
  link to it, since the notebooks and docs name each other that way; a path that names a source
  file of the course (```cutecourse/kernels/hopper_gemm.py```, a results file) links to a page
  that shows the file, so a reader without a clone can read the kernels too;
* nbval's ``# NBVAL_...`` marker lines, which are for the tests, are dropped from code cells.

A file is rewritten only when its text changes, so Sphinx rebuilds only the pages that changed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .. import course
from . import learner as learner_edition
from .widgets import make_static

ROOT = course.ROOT
_NBVAL_LINE = re.compile(r"^[ \t]*# NBVAL_[A-Z_]+[^\n]*\n?", re.MULTILINE)
_CODE_SPAN = re.compile(r"(?<![`\[])`([^`\s]+)`(?!`|\]\()")
_FENCE = re.compile(r"^\s*(```|~~~)")
#: Files a page may name in backticks that get a page of their own (language for highlighting).
SOURCE_DIRS = ("cutecourse/", "benchmarks/", "tools/")
SOURCE_LANGUAGES = {".py": "python", ".json": "json"}
MAX_SOURCE_BYTES = 300_000  # a results file larger than this stays a name, not a page


@dataclass
class Staged:
    """What was staged: the page paths (relative, with suffix) by section, and widget counts."""

    root: Path
    notebooks: list[str] = field(default_factory=list)
    exercises: list[str] = field(default_factory=list)
    solutions: list[str] = field(default_factory=list)
    docs: list[str] = field(default_factory=list)  # background pages
    notes: list[str] = field(default_factory=list)  # docs/notes/
    other: list[str] = field(default_factory=list)  # workshop, benchmarks, developing
    sources: list[str] = field(default_factory=list)  # repository files named by a page
    widgets: dict[str, int] = field(default_factory=dict)  # page -> widget outputs made static
    learner: bool = False  # the learner edition: no solutions, no design notes

    @property
    def pages(self) -> list[str]:
        return (["index.md"] + self.notebooks + self.exercises + self.solutions + self.docs
                + self.notes + self.other + [source_page(p) for p in self.sources])


# -- text transforms -----------------------------------------------------------------------------
def _outside_fences(markdown: str):
    """(line, in a fenced code block) for every line of ``markdown``."""
    fenced = False
    for line in markdown.splitlines(keepends=True):
        if _FENCE.match(line):
            fenced = not fenced
            yield line, True
        else:
            yield line, fenced


def linkify(markdown: str, page: str, targets) -> str:
    """Turn `` `path` `` into a link where ``path`` (relative to the repository root, as the course
    writes it) has a page on the site; leave code blocks, links and other spans alone.
    ``targets`` maps such paths to their page (a set: each path is its own page)."""
    targets = targets if isinstance(targets, dict) else {t: t for t in targets}
    base = os.path.dirname(page) or "."

    def repl(m: re.Match) -> str:
        path = m.group(1).split("#")[0]
        target = targets.get(path)
        if target is None or target == page:
            return m.group(0)
        return f"[`{m.group(1)}`]({os.path.relpath(target, base)}{m.group(1)[len(path):]})"

    return "".join(line if fenced else _CODE_SPAN.sub(repl, line)
                   for line, fenced in _outside_fences(markdown))


_MD_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")


def unlink_left_out(markdown: str, page: str) -> str:
    """For the learner edition: a markdown link to a page it leaves out (an answer, the
    teacher's kit, a design note) becomes its text, so no page of it leads there."""
    base = os.path.dirname(page)

    def repl(m: re.Match) -> str:
        target = m.group(2).split("#")[0]
        if not target or "://" in target or target.startswith(("mailto:", "/")):
            return m.group(0)
        path = os.path.normpath(os.path.join(base, target))
        return m.group(1) if path.startswith(LEFT_OUT_OF_LEARNER) else m.group(0)

    return "".join(line if fenced else _MD_LINK.sub(repl, line)
                   for line, fenced in _outside_fences(markdown))


def source_page(path: str) -> str:
    """The site page that shows the repository file ``path``."""
    return f"source/{path}.md"


def sources_named(texts) -> list[str]:
    """Course source files named in backticks in ``texts``, that exist and are not too large."""
    found = set()
    for text in texts:
        for line, fenced in _outside_fences(text):
            if fenced:
                continue
            for m in _CODE_SPAN.finditer(line):
                path = m.group(1).split("#")[0]
                f = ROOT / path
                if (path.startswith(SOURCE_DIRS) and f.suffix in SOURCE_LANGUAGES and f.is_file()
                        and f.stat().st_size <= MAX_SOURCE_BYTES and ".." not in Path(path).parts):
                    found.add(path)
    return sorted(found)


def source_markdown(path: str) -> str:
    """A page with the file's text, highlighted; reached only from the pages that name it."""
    text = (ROOT / path).read_text(encoding="utf-8", errors="replace")
    fence = "`" * max(3, 1 + max((len(r) for r in re.findall(r"`+", text)), default=0))
    return (f"---\norphan: true\n---\n\n# `{path}`\n\nThe file as the course repository has it "
            f"when this site was built.\n\n{fence}{SOURCE_LANGUAGES[Path(path).suffix]}\n"
            f"{text.rstrip()}\n{fence}\n")


def _stored_mode(nb) -> str:
    """What the stored outputs come from, read from the banner the first code cell printed."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            text = "".join(o.get("text", "") for o in cell.get("outputs", []))
            if "GPU mode" in text:
                return ("The outputs on this page were stored by a run on a GPU: its kernels ran, "
                        "were checked against torch and timed.")
            if "CPU mode" in text:
                return ("The outputs on this page were stored by a run without a GPU: what you see "
                        "is what a reader without one sees. Kernels were compiled and inspected, "
                        "models ran on the CPU, and the H100 figures come from the committed "
                        "results in `benchmarks/results/`.")
            break
    return "The outputs on this page were stored by the last run of the notebook."


def about_box(est: course.Estimate, nb, page: str, learner: bool = False) -> str:
    """The box under a notebook's title (MyST markdown)."""
    n = est.notebook
    ex = [f"[`exercises/{p.name}`]({os.path.relpath(f'exercises/{p.name}', os.path.dirname(page))})"
          for p in n.exercise_files]
    return "\n".join([
        ":::{admonition} Before you start",
        ":class: note cc-about",
        f"**Runs its kernels on:** {n.gpu}.  ",
        f"**Without that GPU:** {n.without}.  ",
        f"**Estimated time:** {est.lesson_min} min for the notebook, {est.exercises_min} min for "
        f"its exercises ({', '.join(ex) or 'none'}"
        + ("; your teacher gives out the answers)." if learner else "; each exercises page links its answers)."),
        "",
        _stored_mode(nb),
        ":::",
    ])


# -- staging -------------------------------------------------------------------------------------
def _write(path: Path, text: str) -> None:
    """Write ``text`` unless the file already holds it (keeps mtimes for incremental builds)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def _markdown_cell(source: str):
    import nbformat

    return nbformat.v4.new_markdown_cell(source)


def _notebook_copy(src: Path, page: str, pages: dict[str, str], staged: Staged):
    """The common transforms of every staged notebook; returns the notebook node."""
    import nbformat

    nb = nbformat.read(src, as_version=4)
    staged.widgets[page] = make_static(nb)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = linkify(cell.source, page, pages)
            if staged.learner:
                cell.source = learner_edition.reword(unlink_left_out(cell.source, page))
        elif cell.cell_type == "code":
            cell.source = _NBVAL_LINE.sub("", cell.source)
    nb = nbformat.from_dict(nb)  # replaced outputs are plain dicts
    return nb


def _save(nb, dest: Path) -> None:
    import nbformat

    _write(dest, nbformat.writes(nb) + "\n")


def _nav_entry(page: str) -> str:
    """A toctree line: notebooks and exercises get the course's short titles ("03 · Hopper GEMM
    with prefetch"), other pages their own first heading."""
    doc = page.rsplit(".", 1)[0]
    name = Path(page).name
    if page.startswith(("notebooks/", "exercises/")):
        number = name.split("_")[0]  # "03", "01b"
        for nb in course.NOTEBOOKS:
            if nb.number == number:
                return f"{number} · {nb.title} <{doc}>"
        heading = next((ln for ln in _first_heading(ROOT / page).splitlines() if ln.strip()), number)
        return f"{heading.replace('(exercise)', '').strip()} <{doc}>"
    return doc


def _first_heading(path: Path) -> str:
    import nbformat

    for cell in nbformat.read(path, as_version=4).cells:
        for line in cell.source.splitlines():
            if cell.cell_type == "markdown" and line.startswith("# "):
                return line[2:]
    return ""


def _index(staged: Staged, pages: dict[str, str]) -> str:
    """The root page: the README (the learner edition's own, in that edition), then the
    navigation (hidden toctrees: the theme's sidebar)."""
    if staged.learner:
        readme = unlink_left_out(linkify(learner_edition.readme(site=True), "index.md", pages), "index.md")
    else:
        readme = linkify((ROOT / "README.md").read_text(encoding="utf-8"), "index.md", pages)

    def toc(caption: str, entries: list[str]) -> str:
        if not entries:
            return ""
        lines = "\n".join(_nav_entry(e) for e in entries)
        return f"\n```{{toctree}}\n:hidden:\n:caption: {caption}\n\n{lines}\n```\n"

    return (readme.rstrip("\n") + "\n"
            + toc("Course", staged.notebooks)
            + toc("Exercises", staged.exercises)
            + toc("Workshop", [p for p in staged.other if p.startswith(TEACHERS_ONLY)])
            + toc("Background", staged.docs + ["benchmarks/README.md"])
            + toc("Design notes", staged.notes)
            + toc("Contributing", ["docs/DEVELOPING.md"] if "docs/DEVELOPING.md" in pages else []))


#: Left out of the learner edition (besides the answers and the design notes): the teacher's kit,
#: whose instructor notes hold the answers to the predictions, and the contributors' guide.
TEACHERS_ONLY = ("docs/workshop.md", "docs/instructor/")
AUTHORS_ONLY = ("docs/DEVELOPING.md",)
LEFT_OUT_OF_LEARNER = ("solutions/", "docs/notes/", *TEACHERS_ONLY, *AUTHORS_ONLY)


def _markdown_texts(staged: Staged):
    """The markdown of every page the site copies (notebooks' markdown cells, the docs, README)."""
    import nbformat

    yield learner_edition.readme(site=True) if staged.learner else (ROOT / "README.md").read_text(encoding="utf-8")
    for page in staged.notebooks + staged.exercises + staged.solutions:
        for cell in nbformat.read(ROOT / page, as_version=4).cells:
            if cell.cell_type == "markdown":
                yield cell.source
    for page in staged.docs + staged.notes + staged.other:
        yield (ROOT / page).read_text(encoding="utf-8")


def plan(staged: Staged) -> None:
    """Fill ``staged``'s page lists from the repository (the site's table of contents)."""
    staged.notebooks = [f"notebooks/{n.file}" for n in course.NOTEBOOKS]
    staged.exercises = [f"exercises/{p.name}" for n in course.NOTEBOOKS for p in n.exercise_files]
    staged.solutions = [f"solutions/{Path(e).name}" for e in staged.exercises
                        if (ROOT / "solutions" / Path(e).name).exists()]
    special = {"docs/workshop.md", "docs/DEVELOPING.md"}
    staged.docs = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")
                         if str(p.relative_to(ROOT)) not in special)
    staged.notes = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "notes").glob("*.md"))
    instructor = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "instructor").glob("*.md"))
    staged.other = [p for p in ["docs/workshop.md", *instructor, "docs/DEVELOPING.md", "benchmarks/README.md"]
                    if (ROOT / p).exists()]
    if staged.learner:
        staged.solutions, staged.notes = [], []
        staged.other = [p for p in staged.other if not p.startswith(TEACHERS_ONLY + AUTHORS_ONLY)]


def stage(dest: Path, learner: bool = False) -> Staged:
    """Write the Sphinx source tree for the whole course into ``dest`` (the learner edition with
    ``learner``); return what it holds."""
    dest = Path(dest)
    staged = Staged(dest, learner=learner)
    plan(staged)
    staged.sources = sources_named(_markdown_texts(staged))
    pages = {p: p for p in staged.pages}
    pages.update({p: source_page(p) for p in staged.sources})
    ests = {e.notebook.file: e for e in course.estimates()}

    for page in staged.notebooks:
        nb = _notebook_copy(ROOT / page, page, pages, staged)
        nb.cells.insert(1, _markdown_cell(about_box(ests[Path(page).name], nb, page, learner)))
        _save(nb, dest / page)
    for page in staged.exercises:
        nb = _notebook_copy(ROOT / page, page, pages, staged)
        answers = f"solutions/{Path(page).name}"
        note = ("These are the exercises with blanks to fill in; run them in JupyterLab, where each "
                "checker says what is wrong and gives a hint. ")
        if answers in pages:
            note += f"The answers, with their checks run: [{answers}](../{answers}) (try first)."
        elif learner:
            note += "Your teacher gives out the answers after the block."
        nb.cells.insert(1, _markdown_cell(note))
        _save(nb, dest / page)
    for page in staged.solutions:
        nb = _notebook_copy(ROOT / page, page, pages, staged)
        nb.metadata["orphan"] = True  # reached from its exercises page only, not from the sidebar
        exercise = f"exercises/{Path(page).name}"
        nb.cells.insert(1, _markdown_cell(
            f"The answers to [{exercise}](../{exercise}), with the output of each check."))
        _save(nb, dest / page)
    for page in staged.docs + staged.notes + staged.other:
        text = linkify((ROOT / page).read_text(encoding="utf-8"), page, pages)
        _write(dest / page, learner_edition.reword(unlink_left_out(text, page)) if learner else text)
    for path in staged.sources:
        _write(dest / source_page(path), source_markdown(path))
    _write(dest / "index.md", _index(staged, pages))
    _remove_stale(dest, set(staged.pages))
    return staged


def _remove_stale(dest: Path, pages: set[str]) -> None:
    """Delete staged pages that no longer exist in the repository (a renamed notebook)."""
    for path in list(dest.rglob("*")):
        if path.is_file() and path.suffix in (".md", ".ipynb"):
            if str(path.relative_to(dest)) not in pages:
                path.unlink()
