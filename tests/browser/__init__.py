"""Shared by the browser tests (``tests/test_browser.py``: JupyterLab; ``tests/test_site.py``: the
built site): where chromium is, how it runs headless here, what is missing, where screenshots go.

Debian's ``chromium`` (``apt-get install chromium``; ``.ci/run`` installs it) is driven by pip
``playwright`` through ``executable_path``: no browser download. A test that lacks either skips
and says which (:func:`missing`).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
#: Known to work headless in a container: no sandbox (no user namespaces), no GPU, and nothing
#: that phones home (QUIC, component updates, sync, background networking).
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def missing(jupyterlab: bool = False) -> str | None:
    """Why a browser test cannot run here (chromium, playwright, or, with ``jupyterlab``, the
    JupyterLab server), or None."""
    if not os.path.exists(CHROMIUM):
        return "chromium is not installed (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install playwright)"
    if jupyterlab and shutil.which("jupyter-lab", path=os.path.dirname(sys.executable)) is None \
            and shutil.which("jupyter-lab") is None:
        return "jupyterlab is not installed"
    return None


def artifact_dir(name: str) -> Path:
    """``artifacts/<name>/`` (or ``$CUTECOURSE_ARTIFACTS/<name>/``), created: where screenshots go."""
    d = Path(os.environ.get("CUTECOURSE_ARTIFACTS", ROOT / "artifacts")) / name
    d.mkdir(parents=True, exist_ok=True)
    return d


def launch(playwright, profile: Path | None = None, **options):
    """Headless chromium through ``playwright``: a browser, or with ``profile`` a persistent
    context in that (fresh) profile folder."""
    if profile is None:
        return playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                          args=CHROMIUM_FLAGS, **options)
    return playwright.chromium.launch_persistent_context(
        str(profile), executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS, **options)
