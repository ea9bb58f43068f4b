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

Needs Debian's ``chromium`` (``apt-get install chromium``; ``.ci/run`` installs it) and pip
``playwright`` (driven with ``executable_path``, no browser download); skips without either.
One JupyterLab server and one browser serve all the notebooks; every wait is bounded; the
server is shut down whatever happens. Screenshots go to ``artifacts/browser/`` (or
``$CUTECOURSE_ARTIFACTS``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
#: Known to work headless in a container: no sandbox (no user namespaces), no GPU, and nothing
#: that phones home (QUIC, component updates, sync, background networking).
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SERVER_START_S = 90
RUN_ALL_S = int(os.environ.get("CUTECOURSE_BROWSER_RUN_S", 600))  # compiles on the CPU: minutes
#: Text a widget output shows when its model cannot be drawn: the failure a learner must not see.
NOT_DRAWN = re.compile(r"VBox\(children=|HBox\(children=|Error displaying widget|Loading widget")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Change:
    """One thing a learner does to a widget: ``how`` is "text" (type ``value`` and press Enter),
    "select" (pick the next option), "slider" (one step right with the keyboard) or "click";
    ``control`` is a CSS selector inside the widget's root element."""

    control: str
    how: str
    value: str = ""


@dataclass(frozen=True)
class Widget:
    root: str  # the root's CSS class
    changes: tuple[Change, ...]


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


def _missing() -> str | None:
    if not os.path.exists(CHROMIUM):
        return "chromium is not installed (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install playwright)"
    if shutil.which("jupyter-lab", path=os.path.dirname(sys.executable)) is None and \
            shutil.which("jupyter-lab") is None:
        return "jupyterlab is not installed"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _lab_settings(settings: Path) -> None:
    """A fresh settings dir with the news/update notifications off (a toast that appears
    mid-test can cover the menu the test clicks), and notebook windowing off, so that every
    cell stays in the page and its prompt can be read (JupyterLab 4 detaches off-screen cells)."""
    for ext, name, value in [
        ("apputils-extension", "notification",
         {"fetchNews": "false", "checkForUpdates": False, "doNotDisturbMode": True}),
        ("notebook-extension", "tracker", {"windowingMode": "none"}),
    ]:
        d = settings / "@jupyterlab" / ext
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{name}.jupyterlab-settings").write_text(json.dumps(value))


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """One JupyterLab on 127.0.0.1 for all the notebooks, serving copies of them (a run never
    rewrites the repository's files); yields its URL; always shut down."""
    why = _missing()
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
    # A data dir of its own: its notary knows only the copies in trusted/, signed here.
    data = dict(os.environ, JUPYTER_DATA_DIR=str(tmp / "data"))
    signed = subprocess.run([sys.executable, "-m", "jupyter", "trust", *(root / "trusted").iterdir()],
                            env=data, capture_output=True, text=True, timeout=120)
    assert signed.returncode == 0, signed.stderr
    _lab_settings(tmp / "settings")
    port = _free_port()
    env = dict(data,
               JUPYTERLAB_SETTINGS_DIR=str(tmp / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"),
               JUPYTER_CONFIG_DIR=str(tmp / "config"),
               JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
               CUTECOURSE_MODE="compile")
    log = open(tmp / "lab.log", "w")
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
           "--IdentityProvider.token=", "--ServerApp.password=", f"--ServerApp.root_dir={root}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # CI containers run as root
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"jupyter lab exited with {proc.returncode}: "
                            f"{(tmp / 'lab.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/api/status", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"jupyter lab did not answer within {SERVER_START_S} s")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()  # the server shuts its kernels down on SIGTERM
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)  # its own session: the server and the kernels it started
            proc.wait(timeout=10)
        log.close()


@pytest.fixture(scope="module")
def browser_context():
    """One headless Chromium (fresh profile) for all the notebooks; closed whatever happens."""
    if _missing():
        pytest.skip(_missing())
    from playwright.sync_api import sync_playwright

    profile = Path(os.environ.get("TMPDIR", "/tmp")) / f"cc-chromium-{os.getpid()}"
    shutil.rmtree(profile, ignore_errors=True)  # a fresh profile: no state from other runs
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": 1400, "height": 1000})
        try:
            ctx.set_default_timeout(60_000)
            yield ctx
        finally:
            ctx.close()
            shutil.rmtree(profile, ignore_errors=True)


def _artifact_dir() -> Path:
    d = Path(os.environ.get("CUTECOURSE_ARTIFACTS", ROOT / "artifacts")) / "browser"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _shut_down_kernels(url: str) -> None:
    """Free the CPU for the next notebook: shut down every kernel the server runs."""
    with urllib.request.urlopen(f"{url}/api/kernels", timeout=10) as r:
        kernels = json.load(r)
    for k in kernels:
        req = urllib.request.Request(f"{url}/api/kernels/{k['id']}", method="DELETE")
        try:
            urllib.request.urlopen(req, timeout=30).close()
        except OSError:
            pass


def _wait_idle(page, timeout_s: float) -> None:
    """Wait until the status bar says the kernel is Idle (the text, not only the circle icon:
    the icon is idle for a moment before the kernel has even started)."""
    page.locator("#jp-main-statusbar").get_by_text(re.compile(r"\bIdle\b")).first.wait_for(
        timeout=timeout_s * 1000)


def _run_all(page) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()


#: JupyterLab renders a cell's error as it renders its stderr; an error is the stderr output that
#: names an exception (a traceback, or a CourseError's "ShapeError: ..." line).
STDERR = ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
EXCEPTION = re.compile(r"Traceback \(most recent call last\)|^\s*\w*(Error|Exception)\b", re.M)


def _errors(panel) -> list[str]:
    """The error outputs the notebook shows (their text)."""
    return [t for t in panel.locator(STDERR).all_inner_texts() if EXCEPTION.search(t)]


def _wait_for_run(panel, timeout_s: float) -> int:
    """Wait until every code cell has an execution count (none queued or running); return
    how many code cells ran. A cell that fails stops "Run All" (the cells after it are never
    run): fail at once with its error rather than wait out the time limit."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        prompts = panel.locator(".jp-CodeCell .jp-InputArea-prompt").all_inner_texts()
        if prompts and all(re.fullmatch(r"\[\d+\]:", p.strip()) for p in prompts):
            return len(prompts)
        errors = _errors(panel)
        if errors and not any(p.strip() == "[*]:" for p in prompts):
            raise AssertionError(f"a cell failed, so Run All stopped: {errors[0][-2000:]}")
        time.sleep(1)
    pending = [p for p in panel.locator(".jp-CodeCell .jp-InputArea-prompt").all_inner_texts()
               if not re.fullmatch(r"\[\d+\]:", p.strip())]
    raise AssertionError(f"the notebook did not finish within {timeout_s:.0f} s "
                         f"({len(pending)} cells not run: {pending[:5]})")


def _pictures_drawn(page, root, timeout_ms: int = 60_000) -> list[str]:
    """Wait until every ``cc-picture`` of the widget has loaded a PNG; return their srcs."""
    pictures = root.locator("img.cc-picture")
    pictures.first.wait_for(state="visible", timeout=timeout_ms)
    page.wait_for_function("imgs => imgs.every(i => i.complete && i.naturalWidth > 0)",
                           arg=pictures.element_handles(), timeout=timeout_ms)
    return [p.get_attribute("src") for p in pictures.all()]


def _open(page, url: str, path: str):
    """Open one notebook in a fresh workspace (``?reset``: no tab of an earlier test comes back);
    return its panel, the scope of every later lookup."""
    page.goto(f"{url}/lab/tree/{path}?reset", timeout=120_000)
    panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)").first
    panel.locator(".jp-Notebook").first.wait_for(timeout=120_000)
    _wait_idle(page, 120)
    return panel


def _widget_cells(notebook: str) -> list[int]:
    """Indices (among all cells) of the code cells whose stored outputs display a widget."""
    nb = json.loads((ROOT / "notebooks" / notebook).read_text())
    return [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
            and any(WIDGET_VIEW in o.get("data", {}) for o in c.get("outputs", []))]


def _fallback_pictures_shown(page, panel, notebook: str, widgets: tuple[Widget, ...]) -> None:
    """Untrusted, before any cell runs: each widget output shows its stored PNG."""
    cells = _widget_cells(notebook)
    assert len(cells) >= len(widgets), (
        f"notebooks/{notebook} stores {len(cells)} widget outputs, expected {len(widgets)} "
        f"(run tools/execute_notebooks.py on it)")
    for i in cells:
        cell = panel.locator(".jp-Cell").nth(i)
        cell.scroll_into_view_if_needed()
        texts = [t for t in cell.locator(".jp-OutputArea-output").all_inner_texts() if NOT_DRAWN.search(t)]
        assert not texts, f"{notebook} opened before running it: cell {i} shows {texts[0][:200]!r}"
        img = cell.locator(".jp-RenderedImage img").first  # the fallback, not a widget's image
        try:
            img.wait_for(state="visible", timeout=30_000)
            page.wait_for_function("i => i.complete && i.naturalWidth > 0", arg=img.element_handle(),
                                   timeout=30_000)
        except Exception as e:
            raise AssertionError(f"{notebook} opened before running it: the widget output of cell {i} "
                                 f"has no stored picture (its display bundle needs an image/png: "
                                 f"cutecourse.viz.widgets.widget_bundle)") from e


def _stored_widgets_drawn(page, panel, notebook: str, widgets: tuple[Widget, ...]) -> None:
    """Trusted, before any cell runs: each widget drawn from the widget state in the file."""
    for spec in widgets:
        root = panel.locator(f".{spec.root}").first
        try:
            root.wait_for(state="attached", timeout=60_000)
            _pictures_drawn(page, root)
        except Exception as e:  # say what the learner sees instead of the widget
            shown = panel.locator(".jp-OutputArea-output").all_inner_texts()
            text = next((t for t in shown if NOT_DRAWN.search(t)), "no widget output at all")
            raise AssertionError(f"{notebook} trusted, opened before running it: the {spec.root} widget "
                                 f"is not drawn from its stored state; the page shows {text[:200]!r} "
                                 f"(run tools/execute_notebooks.py on it)") from e
    broken = [t for t in panel.locator(".jp-OutputArea-output").all_inner_texts()
              if re.search(r"Error displaying widget|[VH]Box\(children=", t)]
    assert not broken, f"{notebook} trusted, opened before running it, shows {broken[0][:200]!r}"


def _apply(page, root, change: Change) -> None:
    control = root.locator(change.control).first
    control.scroll_into_view_if_needed()
    if change.how == "text":
        assert control.input_value() != change.value
        control.fill(change.value)
        control.press("Enter")
    elif change.how == "select":
        options = control.locator("option")
        current = control.evaluate("s => s.selectedIndex")
        control.select_option(index=(current + 1) % options.count())
    elif change.how == "slider":
        handle = control.locator(".noUi-handle").first
        handle.focus()
        handle.press("ArrowRight")
    elif change.how == "click":
        control.click()
    else:
        raise ValueError(f"unknown change {change.how!r}")


def _change_and_see(page, root, spec: Widget, change: Change) -> None:
    """Apply ``change``; assert one of the widget's pictures is replaced by a different one and
    no error message appears."""
    before = _pictures_drawn(page, root)
    pixels = [p.screenshot() for p in root.locator("img.cc-picture").all()]
    _apply(page, root, change)
    message = root.locator(".cc-message")
    # Either a new picture arrives or the widget shows a message (then the test says which).
    page.wait_for_function(
        "([imgs, before, msgs]) => imgs.some((img, i) => img.src !== before[i] && img.complete"
        " && img.naturalWidth > 0) || msgs.some(m => m.innerText.trim() !== '')",
        arg=[root.locator("img.cc-picture").element_handles(), before, message.element_handles()],
        timeout=60_000)
    said = " ".join(m.strip() for m in message.all_inner_texts()).strip()
    assert said == "", f"{spec.root} answered {change} with: {said}"
    _pictures_drawn(page, root)
    after = [p.screenshot() for p in root.locator("img.cc-picture").all()]
    assert after != pixels, f"{spec.root}: the picture did not change after {change}"


@pytest.mark.parametrize("notebook", list(NOTEBOOKS))
def test_notebook_widgets_in_the_browser(notebook, lab, browser_context, capsys):
    if not (ROOT / "notebooks" / notebook).exists():
        pytest.skip(f"notebooks/{notebook} does not exist yet")
    widgets = NOTEBOOKS[notebook]
    shots = _artifact_dir()
    stem = notebook.split("_")[0]
    # 1. trusted, before running: the widgets drawn from their stored state
    page = browser_context.new_page()
    try:
        panel = _open(page, lab, f"trusted/{notebook}")
        _stored_widgets_drawn(page, panel, notebook, widgets)
        panel.locator(f".{widgets[0].root}").first.screenshot(path=str(shots / f"nb{stem}_stored_state.png"))
    finally:
        page.close()
        _shut_down_kernels(lab)

    page = browser_context.new_page()
    try:
        # 2. as cloned (untrusted), before running: each widget output's stored picture
        panel = _open(page, lab, f"notebooks/{notebook}")
        _fallback_pictures_shown(page, panel, notebook, widgets)
        panel.locator(".jp-Cell").nth(_widget_cells(notebook)[0]).screenshot(
            path=str(shots / f"nb{stem}_stored_picture.png"))

        # 3. run all: no cell shows an error
        _run_all(page)
        ran = _wait_for_run(panel, RUN_ALL_S)
        _wait_idle(page, 60)
        errors = _errors(panel)
        assert not errors, errors[0][-2000:]
        assert ran >= 5, f"only {ran} code cells"

        # 4. every widget answers its controls with a new picture
        for spec in widgets:
            root = panel.locator(f".{spec.root}").first
            root.scroll_into_view_if_needed(timeout=60_000)
            for change in spec.changes:
                _change_and_see(page, root, spec, change)
            root.screenshot(path=str(shots / f"nb{stem}_{spec.root}.png"))
    finally:
        page.close()
        _shut_down_kernels(lab)
    with capsys.disabled():
        print(f"\nbrowser screenshots: {shots}/nb{stem}_*.png")
