"""The learner edition: ``./course.sh site --learner`` and ``./course.sh handout``.

A teacher gives a room the site and the zip built here and releases the answers later, so
neither may hold a solution, link to one, or carry the teacher's notes (they answer the
predictions) or the design notes. The site is built for real into a temporary folder (seconds:
nothing is executed) and every HTML file is read.
"""

import re
import stat
import zipfile
from pathlib import Path

import pytest

from cutecourse import course
from cutecourse.site import build, missing_builder
from cutecourse.site import handout
from cutecourse.site.stage import Staged, plan

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
    learner, answers = handout.write(tmp_path)
    with zipfile.ZipFile(learner) as z:
        names = z.namelist()
        mode = z.getinfo("course.sh").external_attr >> 16
        how_to = z.read("HANDOUT.md").decode()
    assert not [n for n in names if n.startswith(("solutions/", "tests/", "docs/notes/", "docs/instructor/"))
                or n in ("docs/workshop.md", "docs/DEVELOPING.md")]
    for nb in course.NOTEBOOKS:
        assert f"notebooks/{nb.file}" in names
        for ex in nb.exercise_files:
            assert f"exercises/{ex.name}" in names
    assert "cutecourse/__init__.py" in names and "pyproject.toml" in names and "LICENSE" in names
    assert mode & stat.S_IXUSR, "course.sh must stay executable"
    assert "./course.sh lab" in how_to and "ssh -L 8888:localhost:8888" in how_to and "macOS" in how_to.replace("Mac", "macOS")
    with zipfile.ZipFile(answers) as z:
        assert sorted(z.namelist()) == sorted(f"solutions/{p.name}" for p in (ROOT / "solutions").glob("*.ipynb")
                                              if (ROOT / "solutions" / p.name).exists())
