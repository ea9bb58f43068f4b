"""The learner edition: ``./course.sh site --learner`` and ``./course.sh handout``.

A teacher gives a room the site and the zip built here and releases the answers later, so
neither may hold a solution, link to one, or carry the teacher's notes (they answer the
predictions) or the design notes. The site is built for real into a temporary folder (seconds:
nothing is executed) and every HTML file is read.
"""

import re
import stat
import subprocess
import zipfile
from pathlib import Path

import nbformat
import pytest

from cutecourse import course
from cutecourse.site import build, missing_builder
from cutecourse.site import handout, learner
from cutecourse.site.stage import Staged, plan, stage

ROOT = Path(__file__).resolve().parent.parent


def test_learner_plan_leaves_out_answers_and_notes():
    full, learner = Staged(ROOT), Staged(ROOT, learner=True)
    plan(full)
    plan(learner)
    assert full.solutions and not learner.solutions
    assert learner.exercises == full.exercises and learner.notebooks == full.notebooks
    assert not learner.notes
    for page in learner.other:
        assert not page.startswith(("docs/workshop.md", "docs/instructor/", "docs/DEVELOPING.md")), page
    assert "docs/workshop.md" in full.other


@pytest.fixture(scope="module")
def learner_site(tmp_path_factory):
    why = missing_builder()
    if why:
        pytest.skip(f"the site builder is missing ({why}): ./course.sh site installs it")
    out = tmp_path_factory.mktemp("learner") / "site"
    return build(out, learner=True, jobs="1")


def test_learner_site_has_no_solution_page_and_no_link_to_one(learner_site):
    out = learner_site.out
    pages = list(out.rglob("*.html"))
    assert len(pages) > 20 and (out / "exercises").is_dir()
    assert not (out / "solutions").exists(), "a solutions folder in the learner site"
    assert not any("solution" in p.relative_to(out).parts[0] for p in pages)
    for page in pages:
        html = page.read_text(encoding="utf-8", errors="replace")
        links = re.findall(r'(?:href|src)="([^"]+)"', html)
        bad = [u for u in links if "solutions/" in u or "/notes/" in u or u.startswith("notes/")
               or "instructor/" in u or u.endswith("workshop.html")]
        assert not bad, f"{page.relative_to(out)} links {bad[:3]}"
    text = (out / "exercises" / "03_hopper_gemm_prefetch.html").read_text(encoding="utf-8")
    assert "Your teacher gives out the answers" in text
    assert learner_site.report.ok


def test_handout_has_no_solutions_and_starts_with_course_sh(tmp_path):
    learner_zip, answers = handout.write(tmp_path)
    with zipfile.ZipFile(learner_zip) as z:
        names = z.namelist()
        mode = z.getinfo("course.sh").external_attr >> 16
        how_to = z.read("HANDOUT.md").decode()
    assert not [n for n in names if n.startswith(("solutions/", "tests/", "tools/", "docs/notes/",
                                                  "docs/instructor/"))
                or n in ("docs/workshop.md", "docs/DEVELOPING.md")]
    for nb in course.NOTEBOOKS:
        assert f"notebooks/{nb.file}" in names
        for ex in nb.exercise_files:
            assert f"exercises/{ex.name}" in names
    assert "cutecourse/__init__.py" in names and "pyproject.toml" in names and "LICENSE" in names
    assert mode & stat.S_IXUSR, "course.sh must stay executable"
    assert "./course.sh lab" in how_to and "ssh -L 8888:localhost:8888" in how_to and "macOS" in how_to.replace("Mac", "macOS")
    assert "./course.sh check --json > YOUR-NAME.json" in how_to, "the step that sends the seat check to the teacher"


def test_answers_come_as_one_zip_per_notebook(tmp_path):
    _, answers = handout.write(tmp_path)
    assert [p.name for p in answers] == [handout.solutions_zip(nb.number) for nb in course.NOTEBOOKS]
    for nb, path in zip(course.NOTEBOOKS, answers):
        with zipfile.ZipFile(path) as z:
            assert sorted(z.namelist()) == sorted(f"solutions/{p.name}" for p in nb.exercise_files), path.name


def test_every_file_in_the_zips_has_plain_modes(tmp_path):
    """0644, or 0755 for what the course has executable: never zipfile's 0600, which a learner
    on a shared server unzips into files the others cannot read."""
    learner_zip, answers = handout.write(tmp_path)
    for path in (learner_zip, *answers):
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                mode = info.external_attr >> 16
                assert stat.S_ISREG(mode) and stat.S_IMODE(mode) in (0o644, 0o755), \
                    f"{path.name}:{info.filename} has mode {oct(mode)}"
                want = 0o755 if info.filename == "course.sh" else 0o644
                if info.filename in ("course.sh", "HANDOUT.md", "README.md") or info.filename.endswith(".ipynb"):
                    assert stat.S_IMODE(mode) == want, info.filename


#: Named in the learner README and HANDOUT.md but made later, not shipped: by whom.
MADE_LATER = {".venv": "./course.sh setup", "YOUR-NAME.json": "./course.sh check --json > ..."}
#: What the learner README must not send a learner to: the handout has none of it.
NOT_IN_THE_HANDOUT = ("./course.sh test", "solutions/", "docs/instructor", "tools/", "tests/",
                      "DEVELOPING", "docs/workshop.md", "docs/notes")


def _named_paths(text: str) -> set[str]:
    """Paths in backticks: with a slash, or a file name with a known suffix, or LICENSE."""
    found = set()
    for span in re.findall(r"`([^`\s]+)`", text):
        if "://" in span or span.startswith(("-", "./course.sh")):
            continue
        if "/" in span or re.fullmatch(r"[\w.-]+\.(md|zip|json|toml|yml|sh|ipynb|py)", span) \
                or span in ("LICENSE", ".venv"):
            found.add(span)
    return found


def test_every_command_and_path_the_learner_readme_names_exists_in_the_handout(tmp_path):
    """Unzip the handout and read its README.md and HANDOUT.md as a learner would: every
    ``./course.sh`` command they name answers its ``--help`` there (and lists the options named
    with it), every path and link they name is in the folder (or is a zip the teacher was given,
    or is made by a command), every ``python -m`` module is there, and nothing points at what
    only the repository has."""
    learner_zip, answers = handout.write(tmp_path / "out")
    made = {p.name for p in (learner_zip, *answers)}
    here = tmp_path / "cutecourse"
    with zipfile.ZipFile(learner_zip) as z:
        z.extractall(here)
    for name in ("README.md", "HANDOUT.md"):
        text = (here / name).read_text()
        assert not [s for s in NOT_IN_THE_HANDOUT if s in text], f"{name} names {NOT_IN_THE_HANDOUT}"
        commands = re.findall(r"\./course\.sh\s+([a-z]+|--help)((?:\s+--[\w-]+)*)", text)
        assert {c for c, _ in commands} >= {"setup", "check", "lab"}, name
        for command, options in commands:
            args = [command] if command == "--help" else [command, "--help"]
            run = subprocess.run(["bash", str(here / "course.sh"), *args], capture_output=True, text=True,
                                 timeout=60)
            assert run.returncode == 0 and "usage: ./course.sh" in run.stdout, \
                f"{name}: ./course.sh {command}: {run.stdout}{run.stderr}"
            for option in set(options.split()) - {"--help"}:
                assert option in run.stdout, f"{name}: ./course.sh {command} has no {option}"
        for path in _named_paths(text):
            pattern = re.sub(r"\bNN\b|03", "*", path)  # cutecourse-solutions-03.zip: one of each
            if path in MADE_LATER:
                continue
            assert list(here.glob(path.rstrip("/"))) or any(re.fullmatch(pattern.replace("*", r"\d\d"), m)
                                                             for m in made), f"{name} names {path}"
        for target in re.findall(r"\]\(([^)#\s]+)", text):
            assert "://" in target or (here / target).exists(), f"{name} links {target}"
        for module in re.findall(r"-m\s+([\w.]+)", text):
            file = here / module.replace(".", "/")
            assert file.with_suffix(".py").exists() or (file / "__main__.py").exists(), f"{name}: -m {module}"
    assert "cutecourse.course" in (here / "README.md").read_text()  # the module check above ran


def test_the_learner_site_sends_no_one_to_what_it_leaves_out(tmp_path):
    """The staged learner site (no Sphinx needed): its root page is the learner README, and no
    notebook or exercises page says the answers are in ``solutions/`` or that the teacher's notes
    hold them; the full site keeps the repository's words."""
    staged = stage(tmp_path / "learner", learner=True)
    index = (staged.root / "index.md").read_text()
    assert "learner edition" in index and "./course.sh lab" in index
    pages = {"index.md": index}
    for page in staged.notebooks + staged.exercises:
        pages[page] = "\n".join(c.source for c in nbformat.read(staged.root / page, as_version=4).cells
                                if c.cell_type == "markdown")
    for page, text in pages.items():  # a lesson may say what the course's tests check
        bad = [s for s in NOT_IN_THE_HANDOUT if s in text and s != "tests/"]
        assert not bad, f"{page} names {bad}"
        assert "answers to each prediction" not in text, page
    assert learner.reword("Answers are in `solutions/`.") in pages["notebooks/01_layouts_and_elementwise_add.ipynb"]


def test_the_learner_words_replace_whole_sentences():
    assert learner.reword("Try it. Answers: `solutions/05_tma_multicast.ipynb`. Next.") == \
        "Try it. Your teacher gives out the answers after the block. Next."
    assert learner.reword("Answers are in `solutions/`.") == "Your teacher gives out the answers after the block."
    assert learner.reword("See `solutions/` for the answers") == "See `solutions/` for the answers"  # caught by the page test


def test_the_feedback_form_says_where_the_summary_goes(tmp_path):
    form = handout.feedback_form("https://example.org/cutecourse/issues")
    title, _, rest = form.partition("\n")
    assert title == "# Feedback form"
    assert "**The room's summary goes to:** https://example.org/cutecourse/issues." in rest
    assert "FEEDBACK_TO" in handout.feedback_form("") and "cutecourse/workshop.py" in handout.feedback_form("")
    handout.write(tmp_path)
    assert (tmp_path / "FEEDBACK.md").read_text() == handout.feedback_form()
