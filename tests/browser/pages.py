"""Page helpers for a notebook open in JupyterLab: open it, run it, read its errors, and drive
its widgets as a learner does. The widgets' CSS classes (``cc-picture``, ``cc-message``) are the
convention of ``cutecourse.viz.widgets``."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

#: Text a widget output shows when its model cannot be drawn: the failure a learner must not see.
NOT_DRAWN = re.compile(r"VBox\(children=|HBox\(children=|Error displaying widget|Loading widget")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
#: JupyterLab renders a cell's error as it renders its stderr; an error is the stderr output that
#: names an exception (a traceback, or a CourseError's "ShapeError: ..." line).
STDERR = ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
EXCEPTION = re.compile(r"Traceback \(most recent call last\)|^\s*\w*(Error|Exception)\b", re.M)


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


def open_notebook(page, url: str, path: str):
    """Open one notebook in a fresh workspace (``?reset``: no tab of an earlier test comes back);
    return its panel, the scope of every later lookup."""
    page.goto(f"{url}/lab/tree/{path}?reset", timeout=120_000)
    panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)").first
    panel.locator(".jp-Notebook").first.wait_for(timeout=120_000)
    wait_idle(page, 120)
    return panel


def wait_idle(page, timeout_s: float) -> None:
    """Wait until the status bar says the kernel is Idle (the text, not only the circle icon:
    the icon is idle for a moment before the kernel has even started)."""
    page.locator("#jp-main-statusbar").get_by_text(re.compile(r"\bIdle\b")).first.wait_for(
        timeout=timeout_s * 1000)


def run_all(page) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()


def errors(panel) -> list[str]:
    """The error outputs the notebook shows (their text)."""
    return [t for t in panel.locator(STDERR).all_inner_texts() if EXCEPTION.search(t)]


def wait_for_run(panel, timeout_s: float) -> int:
    """Wait until every code cell has an execution count (none queued or running); return
    how many code cells ran. A cell that fails stops "Run All" (the cells after it are never
    run): fail at once with its error rather than wait out the time limit."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        prompts = panel.locator(".jp-CodeCell .jp-InputArea-prompt").all_inner_texts()
        if prompts and all(re.fullmatch(r"\[\d+\]:", p.strip()) for p in prompts):
            return len(prompts)
        shown = errors(panel)
        if shown and not any(p.strip() == "[*]:" for p in prompts):
            raise AssertionError(f"a cell failed, so Run All stopped: {shown[0][-2000:]}")
        time.sleep(1)
    pending = [p for p in panel.locator(".jp-CodeCell .jp-InputArea-prompt").all_inner_texts()
               if not re.fullmatch(r"\[\d+\]:", p.strip())]
    raise AssertionError(f"the notebook did not finish within {timeout_s:.0f} s "
                         f"({len(pending)} cells not run: {pending[:5]})")


def pictures_drawn(page, root, timeout_ms: int = 60_000) -> list[str]:
    """Wait until every ``cc-picture`` of the widget has loaded a PNG; return their srcs."""
    pictures = root.locator("img.cc-picture")
    pictures.first.wait_for(state="visible", timeout=timeout_ms)
    page.wait_for_function("imgs => imgs.every(i => i.complete && i.naturalWidth > 0)",
                           arg=pictures.element_handles(), timeout=timeout_ms)
    return [p.get_attribute("src") for p in pictures.all()]


def widget_cells(notebook: Path) -> list[int]:
    """Indices (among all cells) of the code cells whose stored outputs display a widget."""
    nb = json.loads(notebook.read_text())
    return [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
            and any(WIDGET_VIEW in o.get("data", {}) for o in c.get("outputs", []))]


def fallback_pictures_shown(page, panel, notebook: Path, widgets: tuple[Widget, ...]) -> None:
    """Untrusted, before any cell runs: each widget output shows its stored PNG."""
    name = notebook.name
    cells = widget_cells(notebook)
    assert len(cells) >= len(widgets), (
        f"notebooks/{name} stores {len(cells)} widget outputs, expected {len(widgets)} "
        f"(run tools/execute_notebooks.py on it)")
    for i in cells:
        cell = panel.locator(".jp-Cell").nth(i)
        cell.scroll_into_view_if_needed()
        texts = [t for t in cell.locator(".jp-OutputArea-output").all_inner_texts() if NOT_DRAWN.search(t)]
        assert not texts, f"{name} opened before running it: cell {i} shows {texts[0][:200]!r}"
        img = cell.locator(".jp-RenderedImage img").first  # the fallback, not a widget's image
        try:
            img.wait_for(state="visible", timeout=30_000)
            page.wait_for_function("i => i.complete && i.naturalWidth > 0", arg=img.element_handle(),
                                   timeout=30_000)
        except Exception as e:
            raise AssertionError(f"{name} opened before running it: the widget output of cell {i} "
                                 f"has no stored picture (its display bundle needs an image/png: "
                                 f"cutecourse.viz.widgets.widget_bundle)") from e


def stored_widgets_drawn(page, panel, name: str, widgets: tuple[Widget, ...]) -> None:
    """Trusted, before any cell runs: each widget drawn from the widget state in the file."""
    for spec in widgets:
        root = panel.locator(f".{spec.root}").first
        try:
            root.wait_for(state="attached", timeout=60_000)
            pictures_drawn(page, root)
        except Exception as e:  # say what the learner sees instead of the widget
            shown = panel.locator(".jp-OutputArea-output").all_inner_texts()
            text = next((t for t in shown if NOT_DRAWN.search(t)), "no widget output at all")
            raise AssertionError(f"{name} trusted, opened before running it: the {spec.root} widget "
                                 f"is not drawn from its stored state; the page shows {text[:200]!r} "
                                 f"(run tools/execute_notebooks.py on it)") from e
    broken = [t for t in panel.locator(".jp-OutputArea-output").all_inner_texts()
              if re.search(r"Error displaying widget|[VH]Box\(children=", t)]
    assert not broken, f"{name} trusted, opened before running it, shows {broken[0][:200]!r}"


def apply(root, change: Change) -> None:
    """Do ``change`` to the widget under ``root``, as a learner would."""
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


def change_and_see(page, root, spec: Widget, change: Change) -> None:
    """Apply ``change``; assert one of the widget's pictures is replaced by a different one and
    no error message appears."""
    before = pictures_drawn(page, root)
    pixels = [p.screenshot() for p in root.locator("img.cc-picture").all()]
    apply(root, change)
    message = root.locator(".cc-message")
    # Either a new picture arrives or the widget shows a message (then the test says which).
    page.wait_for_function(
        "([imgs, before, msgs]) => imgs.some((img, i) => img.src !== before[i] && img.complete"
        " && img.naturalWidth > 0) || msgs.some(m => m.innerText.trim() !== '')",
        arg=[root.locator("img.cc-picture").element_handles(), before, message.element_handles()],
        timeout=60_000)
    said = " ".join(m.strip() for m in message.all_inner_texts()).strip()
    assert said == "", f"{spec.root} answered {change} with: {said}"
    pictures_drawn(page, root)
    after = [p.screenshot() for p in root.locator("img.cc-picture").all()]
    assert after != pixels, f"{spec.root}: the picture did not change after {change}"
