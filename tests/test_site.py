"""The course site (``./course.sh site``, ``cutecourse.site``): staged copies, the build, a browser.

Fast tests check the pieces on small inputs: widgets become their stored pictures, paths in
backticks become links, the HTML check finds broken links and widget reprs, and Sphinx fails on a
reference that does not resolve. The slow ones build the real site into a temporary folder
(seconds: nothing is executed) and open every page in Debian's chromium through playwright, as a
reader would: every notebook page shows all its pictures and no widget repr, and every link
between pages resolves. Screenshots go to ``artifacts/site/`` (or ``$CUTECOURSE_ARTIFACTS/site``).
Without the site builder, chromium or playwright the tests that need them skip and say why.
"""

from __future__ import annotations

import base64
import functools
import http.server
import threading
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import nbformat
import pytest

import browser
from cutecourse import course
from cutecourse.site import SiteError, build, missing_builder, run_sphinx
from cutecourse.site.stage import linkify, source_markdown, sources_named
from cutecourse.site.verify import verify
from cutecourse.site.widgets import (NO_PICTURE_NOTE, SNAPSHOT_NOTE, WIDGET_VIEW, make_static,
                                     static_outputs)

PNG_A, PNG_B = base64.b64encode(b"\x89PNG a").decode(), base64.b64encode(b"\x89PNG b").decode()


# -- widgets as pictures ----------------------------------------------------------------------------
def _view(model_id="m1", png=None, text="VBox(children=(HBox(...),))"):
    data = {WIDGET_VIEW: {"model_id": model_id, "version_major": 2, "version_minor": 0},
            "text/plain": text}
    if png:
        data["image/png"] = png
    return {"output_type": "display_data", "metadata": {}, "data": data}


def _state():
    """A VBox holding an HBox of controls, an Image widget and an Output widget with a picture."""
    return {
        "m1": {"model_name": "VBoxModel", "state": {"children": ["IPY_MODEL_h", "IPY_MODEL_img", "IPY_MODEL_out"]}},
        "h": {"model_name": "HBoxModel", "state": {"children": ["IPY_MODEL_s"]}},
        "s": {"model_name": "IntSliderModel", "state": {"value": 3}},
        "img": {"model_name": "ImageModel", "state": {"format": "png"},
                "buffers": [{"path": ["value"], "encoding": "base64", "data": PNG_A}]},
        "out": {"model_name": "OutputModel", "state": {"outputs": [
            {"output_type": "display_data", "data": {"image/png": PNG_B, "text/plain": "fig"}}]}},
    }


def test_bundle_picture_wins_and_the_view_goes():
    outs = static_outputs(_view(png=PNG_A, text="LayoutExplorer: (4,8):(8,1)"), {})
    assert outs[0]["data"] == {"image/png": PNG_A, "text/plain": "LayoutExplorer: (4,8):(8,1)"}
    assert SNAPSHOT_NOTE in outs[1]["data"]["text/html"]


def test_pictures_come_from_the_stored_state_in_display_order():
    outs = static_outputs(_view(), _state())
    assert [o["data"].get("image/png") for o in outs[:2]] == [PNG_A, PNG_B]
    assert all("children=" not in o["data"]["text/plain"] for o in outs)
    assert SNAPSHOT_NOTE in outs[2]["data"]["text/html"]


def test_a_widget_without_a_picture_gets_a_note_not_a_repr():
    outs = static_outputs(_view(model_id="unknown"), _state())
    assert len(outs) == 1 and NO_PICTURE_NOTE in outs[0]["data"]["text/html"]
    assert "children=" not in str(outs)


def test_other_outputs_are_untouched():
    out = {"output_type": "stream", "name": "stdout", "text": "hello"}
    assert static_outputs(out, {}) == [out]


def test_every_course_notebook_keeps_a_picture_or_a_note_for_each_widget():
    for nb_info in course.NOTEBOOKS:
        nb = nbformat.read(nb_info.path, as_version=4)
        before = sum(WIDGET_VIEW in o.get("data", {}) for c in nb.cells if c.cell_type == "code"
                     for o in c.outputs)
        assert make_static(nb) == before
        assert "widgets" not in nb.metadata
        for cell in nb.cells:
            for out in cell.get("outputs", []):
                assert WIDGET_VIEW not in out.get("data", {})
                assert "children=" not in str(out.get("data", {}).get("text/plain", ""))


# -- links ------------------------------------------------------------------------------------------
PAGES = {"docs/hopper_gemm.md", "notebooks/03_x.ipynb", "exercises/03_x.ipynb", "index.md"}


def test_paths_in_backticks_become_links_relative_to_the_page():
    text = "See `docs/hopper_gemm.md` and `exercises/03_x.ipynb`; the kernel is `cutecourse/k.py`."
    got = linkify(text, "notebooks/03_x.ipynb", PAGES)
    assert "[`docs/hopper_gemm.md`](../docs/hopper_gemm.md)" in got
    assert "[`exercises/03_x.ipynb`](../exercises/03_x.ipynb)" in got
    assert "`cutecourse/k.py`" in got and "(../cutecourse" not in got
    assert linkify("`docs/hopper_gemm.md`", "index.md", PAGES) == "[`docs/hopper_gemm.md`](docs/hopper_gemm.md)"


def test_code_blocks_links_and_the_page_itself_are_left_alone():
    text = ("```bash\ncat `docs/hopper_gemm.md`\n```\n[`docs/hopper_gemm.md`](x.md) "
            "and `notebooks/03_x.ipynb`\n")
    assert linkify(text, "notebooks/03_x.ipynb", PAGES) == text


def test_named_source_files_get_pages_that_show_them():
    assert sources_named(["the checker `cutecourse/course.py`, not `cutecourse/nope.py`, "
                          "`README.md` or `cutecourse/../course.sh`",
                          "```\n`tools/run_notebook.py` in a code block\n```"]) == ["cutecourse/course.py"]
    text = source_markdown("cutecourse/site/stage.py")  # its docstring holds ``` runs
    fence = text.split("\n")[8]
    assert fence == "````python" and text.rstrip().endswith("\n````")
    assert "orphan: true" in text and "def linkify(" in text
    got = linkify("see `cutecourse/course.py`", "notebooks/01.ipynb",
                  {"cutecourse/course.py": "source/cutecourse/course.py.md"})
    assert got == "see [`cutecourse/course.py`](../source/cutecourse/course.py.md)"


def _html(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"<html><body>{body}</body></html>")


def test_verify_finds_broken_links_missing_sections_pictures_and_widget_reprs(tmp_path):
    _html(tmp_path / "index.html", '<h1 id="top">x</h1><a href="a/page.html#sec">ok</a>'
          '<a href="https://example.org/">external</a><a href="#top">self</a>')
    _html(tmp_path / "a" / "page.html", '<h2 id="sec">s</h2><img src="../_images/p.png">'
          '<a href="../index.html#nowhere">bad anchor</a><a href="gone.html">bad</a>'
          '<pre>VBox(children=(HBox(),))</pre>')
    report = verify(tmp_path)
    problems = "\n".join(report.problems)
    assert "a/page.html: link gone.html points to a missing file" in problems
    assert "missing section #nowhere of index.html" in problems
    assert "resource ../_images/p.png points to a missing file" in problems
    assert "VBox(children=" in problems
    assert len(report.problems) == 4 and report.images == {"index.html": 0, "a/page.html": 1}
    (tmp_path / "_images").mkdir()
    (tmp_path / "_images" / "p.png").write_bytes(b"png")
    _html(tmp_path / "a" / "page.html", '<h2 id="sec">s</h2><img src="../_images/p.png">')
    assert verify(tmp_path).ok


needs_builder = pytest.mark.skipif(missing_builder() is not None,
                                   reason=f"the site builder is missing: {missing_builder()} "
                                          "(./course.sh site installs it)")


@needs_builder
def test_sphinx_fails_on_a_link_to_a_page_that_does_not_exist(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "index.md").write_text("# Home\n\nSee [the notes](docs/missing.md).\n")
    with pytest.raises(SiteError, match="missing"):
        run_sphinx(src, tmp_path / "out", tmp_path / "doctrees", jobs="1")


# -- the real site ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def site(tmp_path_factory):
    if missing_builder():
        pytest.skip(f"the site builder is missing: {missing_builder()} (./course.sh site installs it)")
    root = tmp_path_factory.mktemp("site")
    return build(root / "site", root / "work")


def _stored_pictures(staged_notebook: Path) -> int:
    nb = nbformat.read(staged_notebook, as_version=4)
    return sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code"
               for o in c.outputs)


@pytest.mark.slow
def test_site_has_every_page_and_every_picture(site):
    out = site.out
    assert site.report.ok and site.report.pages >= len(site.staged.pages)
    for page in site.staged.pages:
        html = out / (page.rsplit(".", 1)[0] + ".html")
        assert html.exists(), f"{page} was not built"
    for nb in course.NOTEBOOKS:
        page = f"notebooks/{nb.file[:-6]}.html"
        text = (out / page).read_text()
        expected = _stored_pictures(site.staged.root / "notebooks" / nb.file)
        assert site.report.images[page] >= expected > 0, page
        assert "Runs its kernels on:" in text and nb.gpu.split(" (")[0] in text
        assert "VBox(children" not in text
    # The answers are reached from their exercises page, not from the navigation.
    index = (out / "index.html").read_text()
    assert "exercises/02_tv_layouts.html" in index and "solutions/02_tv_layouts.html" not in index
    assert "../solutions/02_tv_layouts.html" in (out / "exercises" / "02_tv_layouts.html").read_text()
    assert (out / ".nojekyll").exists(), "GitHub Pages would drop the _static folder"
    # Notebook 03 names its kernel's file; the site shows that file.
    nb03 = (out / "notebooks" / "03_hopper_gemm_prefetch.html").read_text()
    assert "../source/cutecourse/kernels/hopper_gemm.py.html" in nb03
    assert "class " in (out / "source" / "cutecourse" / "kernels" / "hopper_gemm.py.html").read_text()
    assert not (site.out.parent / "jupyter_execute").exists(), "myst-nb's files belong in the work folder"
    assert (out / "docs" / "workshop.html").exists()


# -- the real site in a real browser ---------------------------------------------------------------
class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # the test reports what matters
        pass


@pytest.fixture
def served(site):
    """The built site on 127.0.0.1 (a web server, as GitHub Pages serves it); always shut down."""
    why = browser.missing()
    if why:
        pytest.skip(why)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(_Quiet, directory=str(site.out)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_every_page_in_a_browser_has_its_pictures_and_no_broken_link(site, served, capsys):
    from playwright.sync_api import sync_playwright

    shots = browser.artifact_dir("site")
    # Source pages (plain text) are reached by their links below, not opened one by one.
    pages = [p.rsplit(".", 1)[0] + ".html" for p in site.staged.pages if not p.startswith("source/")]
    links: dict[str, set[str]] = {}  # target url (no fragment) -> fragments asked for
    with sync_playwright() as p:
        chromium = browser.launch(p)
        try:
            ctx = chromium.new_context(viewport={"width": 1300, "height": 900})
            ctx.set_default_timeout(30_000)
            # Nothing leaves the machine: MathJax (one page) and any other CDN are refused.
            ctx.route("**/*", lambda r: r.continue_() if r.request.url.startswith(served) else r.abort())
            page = ctx.new_page()
            for rel in pages:
                url = urljoin(served, rel)
                response = page.goto(url, wait_until="load")
                assert response and response.ok, f"{rel}: HTTP {response and response.status}"
                body = page.locator("article").first.inner_text()
                assert "children=" not in body, f"{rel} shows a widget repr"
                for href in page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)"):
                    if href.startswith(served):
                        target, _, fragment = href.partition("#")
                        links.setdefault(target, set()).add(fragment)
                if rel.startswith("notebooks/"):
                    nb = next(n for n in course.NOTEBOOKS if rel.endswith(n.file[:-6] + ".html"))
                    expected = _stored_pictures(site.staged.root / "notebooks" / nb.file)
                    shown = page.eval_on_selector_all(
                        ".cell_output img", "imgs => imgs.filter(i => i.complete && i.naturalWidth > 0).length")
                    assert shown == expected, f"{rel}: {shown} of {expected} pictures rendered"
                    about = page.locator(".cc-about").first
                    assert nb.gpu.split(" (")[0] in about.inner_text()
                    about.scroll_into_view_if_needed()
                    page.screenshot(path=str(shots / f"{nb.number}_about.png"))
                    note = page.locator(".cc-widget-note")
                    if note.count():  # the first widget, shown as its stored picture
                        note.first.scroll_into_view_if_needed()
                        page.screenshot(path=str(shots / f"{nb.number}_widget.png"))
            page.goto(served, wait_until="load")
            page.screenshot(path=str(shots / "index.png"))

            broken = []
            for target, fragments in sorted(links.items()):
                r = ctx.request.get(target)
                if not r.ok:
                    broken.append(f"{target} (HTTP {r.status})")
                    continue
                wanted = {f for f in fragments if f}
                if wanted and target.endswith(".html"):
                    page.goto(target, wait_until="domcontentloaded")
                    ids = set(page.eval_on_selector_all("[id]", "els => els.map(e => e.id)"))
                    broken += [f"{target}#{f}" for f in sorted(wanted - ids)]
            assert not broken, f"{len(broken)} broken links: {broken[:10]}"
        finally:
            chromium.close()
    with capsys.disabled():
        print(f"\nsite: {len(pages)} pages and {len(links)} link targets checked in chromium; "
              f"screenshots in {shots}")
    assert (shots / "index.png").stat().st_size > 10_000
    assert urlsplit(served).hostname == "127.0.0.1"
