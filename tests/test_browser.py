"""A real browser: JupyterLab serves the course, headless Chromium runs every notebook with
widgets top to bottom, and each widget answers a change of its controls with a new picture.

For each notebook (02, 03, 05, 06, 07; 04 has no widget), one test:

1. opens the notebook *before* running it, as a learner who has just cloned the course does.
   JupyterLab does not trust a notebook it did not run, so it draws no widget at all; what the
   learner sees is each widget output's fallback, which must be its stored picture (the PNG of
   ``cutecourse.viz.widgets.widget_bundle``), not a ``VBox(children=...)`` line;
2. opens a *trusted* copy before running it (a learner who ran and saved it, or clicked
   "trust"): every widget must be drawn from the widget state stored in the file
   (``tools/execute_notebooks.py``), its ``cc-picture`` showing the stored PNG;
3. runs all cells (compile mode: no GPU), then checks that no cell shows an error;
4. changes each widget's controls as a learner does (types into a box, picks another option,
   moves a slider, clicks a button) and checks that the widget's ``cc-picture`` is replaced by
   a different one and that its ``cc-message`` stays empty.

What this catches that nbval cannot: the notebook in the front end a learner uses (widgets
rendered by JupyterLab's own ipywidgets manager, not just their state in a file), a widget
whose Python callbacks work but whose picture never reaches the page, and a saved notebook
that shows nothing until it is run. The widgets' CSS classes are the convention of
``cutecourse.viz.widgets``.

Needs Debian's ``chromium`` and pip ``playwright`` (``tests/browser``); skips without either.
One JupyterLab server (``tests/browser/lab.py``) and one browser serve all the notebooks; the
page helpers are ``tests/browser/pages.py``. Screenshots go to ``artifacts/browser/`` (or
``$CUTECOURSE_ARTIFACTS/browser``).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from browser import artifact_dir, launch, missing
from browser.lab import running_lab, shut_down_kernels
from browser.pages import (Change, Widget, change_and_see, errors, fallback_pictures_shown,
                           open_notebook, run_all, stored_widgets_drawn, wait_for_run, wait_idle,
                           widget_cells)

ROOT = Path(__file__).resolve().parents[1]
RUN_ALL_S = int(os.environ.get("CUTECOURSE_BROWSER_RUN_S", 600))  # compiles on the CPU: minutes

pytestmark = pytest.mark.slow


#: The widgets of each notebook and what the test does to them. 06 and 07 are driven through
#: controls found by kind (the view toggle, the first slider or dropdown), not by name.
NOTEBOOKS = {
    "02_tv_layouts.ipynb": (
        # the tile column-major: every thread gets new addresses
        Widget("cc-explorer", (Change(".cc-layout-text input", "text", "(4,16):(1,4)"),
                               Change(".cc-op select", "select"))),
        # number the threads down the tile's columns instead of along its rows
        Widget("cc-tv-explorer", (Change(".cc-tv-thr input", "text", "(4,32):(1,4)"),
                                  Change(".cc-tv-view button:not(.mod-active)", "click"))),
    ),
    "03_hopper_gemm_prefetch.ipynb": (
        Widget("cc-pipeline-widget", (Change("button.cc-next", "click"),
                                      Change(".cc-variant select", "select"),
                                      Change(".cc-stages", "slider"))),
    ),
    "05_tma_multicast.ipynb": (
        Widget("cc-cluster-widget", (Change(".cc-cluster-m select", "select"),
                                     Change(".cc-rank select", "select"))),
    ),
    "06_kernel_schedules.ipynb": (
        Widget("cc-schedule-widget", (Change(".widget-toggle-buttons button:not(.mod-active)", "click"),)),
    ),
    "07_grouped_block_scaled_gemm.ipynb": (
        Widget("cc-group-widget", (Change(".widget-slider", "slider"),)),
        Widget("cc-block-scaling-widget", (Change("select", "select"),)),
    ),
}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """One JupyterLab on 127.0.0.1 for all the notebooks, serving copies of them (a run never
    rewrites the repository's files): ``notebooks/`` as cloned, ``trusted/`` signed; its URL."""
    why = missing(jupyterlab=True)
    if why:
        pytest.skip(why)
    tmp = tmp_path_factory.mktemp("lab")
    root = tmp / "course"
    (root / "notebooks").mkdir(parents=True)
    (root / "trusted").mkdir()
    for name in NOTEBOOKS:
        if (ROOT / "notebooks" / name).exists():
            shutil.copy(ROOT / "notebooks" / name, root / "notebooks" / name)
            # Trust goes by content, not path: the trusted copy differs by one metadata key.
            nb = json.loads((ROOT / "notebooks" / name).read_text())
            nb["metadata"]["cutecourse_browser_test"] = "trusted copy"
            (root / "trusted" / name).write_text(json.dumps(nb))
    try:
        with running_lab(tmp, root, trusted=list((root / "trusted").iterdir())) as url:
            yield url
    except AssertionError as e:  # the server did not start: this test's failure, with its log
        pytest.fail(str(e))


@pytest.fixture(scope="module")
def browser_context():
    """One headless Chromium (fresh profile) for all the notebooks; closed whatever happens."""
    why = missing()
    if why:
        pytest.skip(why)
    from playwright.sync_api import sync_playwright

    profile = Path(os.environ.get("TMPDIR", "/tmp")) / f"cc-chromium-{os.getpid()}"
    shutil.rmtree(profile, ignore_errors=True)  # a fresh profile: no state from other runs
    with sync_playwright() as p:
        ctx = launch(p, profile, viewport={"width": 1400, "height": 1000})
        try:
            ctx.set_default_timeout(60_000)
            yield ctx
        finally:
            ctx.close()
            shutil.rmtree(profile, ignore_errors=True)


@pytest.mark.parametrize("notebook", list(NOTEBOOKS))
def test_notebook_widgets_in_the_browser(notebook, lab, browser_context, capsys):
    source = ROOT / "notebooks" / notebook
    if not source.exists():
        pytest.skip(f"notebooks/{notebook} does not exist yet")
    widgets = NOTEBOOKS[notebook]
    shots = artifact_dir("browser")
    stem = notebook.split("_")[0]
    # 1. trusted, before running: the widgets drawn from their stored state
    page = browser_context.new_page()
    try:
        panel = open_notebook(page, lab, f"trusted/{notebook}")
        stored_widgets_drawn(page, panel, notebook, widgets)
        panel.locator(f".{widgets[0].root}").first.screenshot(path=str(shots / f"nb{stem}_stored_state.png"))
    finally:
        page.close()
        shut_down_kernels(lab)

    page = browser_context.new_page()
    try:
        # 2. as cloned (untrusted), before running: each widget output's stored picture
        panel = open_notebook(page, lab, f"notebooks/{notebook}")
        fallback_pictures_shown(page, panel, source, widgets)
        panel.locator(".jp-Cell").nth(widget_cells(source)[0]).screenshot(
            path=str(shots / f"nb{stem}_stored_picture.png"))

        # 3. run all: no cell shows an error
        run_all(page)
        ran = wait_for_run(panel, RUN_ALL_S)
        wait_idle(page, 60)
        shown = errors(panel)
        assert not shown, shown[0][-2000:]
        assert ran >= 5, f"only {ran} code cells"

        # 4. every widget answers its controls with a new picture
        for spec in widgets:
            root = panel.locator(f".{spec.root}").first
            root.scroll_into_view_if_needed(timeout=60_000)
            for change in spec.changes:
                change_and_see(page, root, spec, change)
            root.screenshot(path=str(shots / f"nb{stem}_{spec.root}.png"))
    finally:
        page.close()
        shut_down_kernels(lab)
    with capsys.disabled():
        print(f"\nbrowser screenshots: {shots}/nb{stem}_*.png")
