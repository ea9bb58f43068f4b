"""A real browser: JupyterLab serves the course, headless Chromium runs notebook 02 top to bottom,
and the layout explorer widget answers a change of its controls with a new picture.

What this catches that nbval cannot: the notebook in the front end a learner uses (widgets
rendered by JupyterLab's own ipywidgets manager, not just their state in a file), and a widget
whose Python callbacks work but whose picture never reaches the page.

Needs Debian's ``chromium`` (``apt-get install chromium``; ``.ci/run`` installs it) and pip
``playwright`` (driven with ``executable_path``, no browser download); skips without either.
Every wait is bounded; the server is shut down whatever happens. The screenshot is written to
``artifacts/browser/`` (or ``$CUTECOURSE_ARTIFACTS``) and its path printed.
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
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "02_tv_layouts.ipynb"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
#: Known to work headless in a container: no sandbox (no user namespaces), no GPU, and nothing
#: that phones home (QUIC, component updates, sync, background networking).
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SERVER_START_S = 90
RUN_ALL_S = int(os.environ.get("CUTECOURSE_BROWSER_RUN_S", 600))  # compiles on the CPU: minutes

pytestmark = pytest.mark.slow


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


@pytest.fixture
def lab(tmp_path):
    """JupyterLab on 127.0.0.1 serving a copy of the notebook (so the run never rewrites the
    repository's file); yields its URL; always shut down."""
    why = _missing()
    if why:
        pytest.skip(why)
    src = ROOT / "notebooks" / NOTEBOOK
    if not src.exists():
        pytest.skip(f"{src} does not exist yet")
    root = tmp_path / "course"
    (root / "notebooks").mkdir(parents=True)
    shutil.copy(src, root / "notebooks" / NOTEBOOK)
    _lab_settings(tmp_path / "settings")
    port = _free_port()
    env = dict(os.environ,
               JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"),
               JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
               CUTECOURSE_MODE="compile")
    log = open(tmp_path / "lab.log", "w")
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
                            f"{(tmp_path / 'lab.log').read_text()[-2000:]}")
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


def _artifact_dir() -> Path:
    d = Path(os.environ.get("CUTECOURSE_ARTIFACTS", ROOT / "artifacts")) / "browser"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _wait_idle(page, timeout_s: float) -> None:
    """Wait until the status bar says the kernel is Idle (the text, not only the circle icon:
    the icon is idle for a moment before the kernel has even started)."""
    page.locator("#jp-main-statusbar").get_by_text(re.compile(r"\bIdle\b")).first.wait_for(
        timeout=timeout_s * 1000)


def _run_all(page) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()


def _wait_for_run(page, timeout_s: float) -> int:
    """Wait until every code cell has an execution count (none queued or running); return
    how many code cells ran."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        prompts = page.locator(".jp-CodeCell .jp-InputArea-prompt").all_inner_texts()
        if prompts and all(re.fullmatch(r"\[\d+\]:", p.strip()) for p in prompts):
            return len(prompts)
        time.sleep(1)
    pending = [p for p in page.locator(".jp-CodeCell .jp-InputArea-prompt").all_inner_texts()
               if not re.fullmatch(r"\[\d+\]:", p.strip())]
    raise AssertionError(f"the notebook did not finish within {timeout_s:.0f} s "
                         f"({len(pending)} cells not run: {pending[:5]})")


def _change_and_see(page, widget, control: str, text: str) -> None:
    """Type ``text`` into ``control`` of ``widget`` and press Enter, as a learner does; assert the
    widget's picture is replaced by a different one and no error message appears."""
    picture = widget.locator(".cc-picture").first
    picture.wait_for(state="visible", timeout=60_000)
    page.wait_for_function("img => img.complete && img.naturalWidth > 0",
                           arg=picture.element_handle(), timeout=60_000)
    src_before = picture.get_attribute("src")
    pixels_before = picture.screenshot()
    box = widget.locator(control).first
    assert box.input_value() != text
    box.fill(text)
    box.press("Enter")
    # Either a new picture arrives or the widget shows a message (then the test says which).
    page.wait_for_function(
        "([img, before, msg]) => (img.src !== before && img.complete && img.naturalWidth > 0)"
        " || msg.innerText.trim() !== ''",
        arg=[picture.element_handle(), src_before,
             widget.locator(".cc-message").first.element_handle()], timeout=60_000)
    message = widget.locator(".cc-message").first.inner_text().strip()
    assert message == "", f"the widget answered {text} with: {message}"
    assert picture.screenshot() != pixels_before, f"the picture did not change after {text}"


def test_notebook_02_runs_and_the_explorers_answer(lab, capsys):
    from playwright.sync_api import sync_playwright

    shot = _artifact_dir() / "nb02_explorer.png"
    with sync_playwright() as p:
        profile = Path(os.environ.get("TMPDIR", "/tmp")) / f"cc-chromium-{os.getpid()}"
        shutil.rmtree(profile, ignore_errors=True)  # a fresh profile: no state from other runs
        ctx = p.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": 1400, "height": 1000})
        try:
            ctx.set_default_timeout(60_000)
            page = ctx.new_page()
            page.goto(f"{lab}/lab/tree/notebooks/{NOTEBOOK}", timeout=120_000)
            page.locator(".jp-NotebookPanel .jp-Notebook").first.wait_for(timeout=120_000)
            _wait_idle(page, 120)

            _run_all(page)
            ran = _wait_for_run(page, RUN_ALL_S)
            _wait_idle(page, 60)
            tracebacks = page.locator(".jp-RenderedText[data-mime-type='application/vnd.jupyter.error']")
            assert tracebacks.count() == 0, tracebacks.first.inner_text()[:2000]
            assert ran >= 10, f"only {ran} code cells"

            # The explorer: rendered by JupyterLab's widget manager, with its picture.
            explorer = page.locator(".cc-explorer").first
            explorer.scroll_into_view_if_needed(timeout=60_000)
            _change_and_see(page, explorer, ".cc-layout-text input",
                            "(4,16):(1,4)")  # the tile column-major: every thread gets new addresses
            explorer.screenshot(path=str(shot))  # the whole widget: controls and new picture
            page.screenshot(path=str(shot.with_name("nb02_page.png")))

            # The TV explorer: number the threads down the tile's columns instead of along its rows.
            tv_explorer = page.locator(".cc-tv-explorer").first
            tv_explorer.scroll_into_view_if_needed(timeout=60_000)
            _change_and_see(page, tv_explorer, ".cc-tv-thr input", "(4,32):(1,4)")
            tv_explorer.screenshot(path=str(shot.with_name("nb02_tv_explorer.png")))
        finally:
            ctx.close()
            shutil.rmtree(profile, ignore_errors=True)
    with capsys.disabled():
        print(f"\nbrowser screenshots: {shot} {shot.with_name('nb02_tv_explorer.png')}")
    assert shot.stat().st_size > 10_000
