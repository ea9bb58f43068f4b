"""The course as a static site: ``python -m cutecourse.site [OUT]`` (``./course.sh site``).

Three steps, one module each: ``stage`` writes a Sphinx source tree of copies of the pages
(notebooks with their stored outputs, widgets as their pictures, a box per notebook saying which
GPU it needs); Sphinx with myst-nb renders it (``conf.py``; notebooks are never executed, and any
warning, a broken cross-reference included, fails the build); ``verify`` reads the HTML it wrote
and fails on a broken link, a missing picture or a widget shown as its repr. The result is a
folder of plain files that any web server or GitHub Pages can serve.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import CourseError
from .stage import ROOT, Staged, stage
from .verify import Report, verify

CONF_DIR = Path(__file__).resolve().parent
DEFAULT_OUT = ROOT / "build" / "site"
LEARNER_OUT = ROOT / "build" / "site-learner"


class SiteError(CourseError):
    """The site could not be built, or what was built has broken links or pictures."""

    def __init__(self, what: str, fix: str = "", log: str = ""):
        super().__init__(what, fix)
        self.log = log


@dataclass
class Built:
    out: Path
    staged: Staged
    report: Report
    seconds: float


def missing_builder() -> str | None:
    """Why the site builder cannot run here, or None."""
    for module, pip in (("sphinx", "sphinx"), ("myst_nb", "myst-nb"), ("sphinx_book_theme", "sphinx-book-theme")):
        try:
            __import__(module)
        except ImportError:
            return f"{pip} is not installed"
    return None


def run_sphinx(src: Path, out: Path, doctrees: Path, jobs: str = "auto") -> None:
    """Render ``src`` into ``out`` with the course's configuration; any warning (a reference that
    does not resolve, a page outside the navigation) is an error."""
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-q", "-j", jobs,
           "-c", str(CONF_DIR), "-d", str(doctrees), str(src), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ))
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        problems = [ln for ln in log.splitlines() if "WARNING" in ln or "ERROR" in ln]
        raise SiteError(f"Sphinx reported {len(problems) or 'a'} problem(s) building the site: "
                        + ("; ".join(problems[:3]) or log.strip()[-500:]),
                        f"each line names the page (a staged copy under {src}) and what is wrong; "
                        "fix the page in the repository and build again", log)


def check_out(out: Path) -> None:
    """``out`` must be missing, empty or an earlier site: the build replaces it, and must never
    delete a folder that is something else."""
    if out.exists():
        earlier = (out / "index.html").exists() and (out / "objects.inv").exists()
        if not out.is_dir() or (any(out.iterdir()) and not earlier):
            raise SiteError(f"{out} exists and is not a site built by this command",
                            "give an empty or new folder: ./course.sh site /path/to/new-folder")


def publish(html: Path, out: Path) -> None:
    """Replace ``out`` with a copy of the finished site ``html``."""
    check_out(out)
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(html, out)


def build(out: Path = DEFAULT_OUT, work: Path | None = None, jobs: str = "auto",
          learner: bool = False) -> Built:
    """Build the site into ``out``; ``work`` keeps the staged sources and Sphinx's cache between
    builds (default: ``out`` + ``-work``), so a second build redoes only the pages that changed.
    ``learner``: the edition to give learners (no solutions, no design notes)."""
    why = missing_builder()
    if why:
        raise SiteError(f"the site builder is missing: {why}",
                        "./course.sh site installs it into .venv (pip install -e '.[site]')")
    t0 = time.perf_counter()
    out = Path(out).resolve()
    work = Path(work).resolve() if work else out.with_name(out.name + "-work")
    check_out(out)
    staged = stage(work / "src", learner=learner)
    # Sphinx writes into work/html (myst-nb puts its picture files beside that folder, in
    # work/jupyter_execute), then the finished site is copied to ``out``.
    run_sphinx(work / "src", work / "html", work / "doctrees", jobs)
    publish(work / "html", out)
    report = verify(out)
    if not report.ok:
        raise SiteError(f"the built site has {len(report.problems)} problem(s): "
                        + "; ".join(report.problems[:5]),
                        "fix the link or picture in the page it names and build again",
                        "\n".join(report.problems))
    return Built(out, staged, report, time.perf_counter() - t0)
