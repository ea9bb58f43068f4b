"""Every stored notebook stays small and shows its widgets without a kernel.

The course's rule: at most 400 KB of stored outputs per notebook (every reader downloads them).
A notebook written by ``tools/execute_notebooks.py`` also keeps its widget state compact, and
every widget output carries its picture as a PNG: JupyterLab does not draw widgets in a
notebook it does not trust yet (a fresh clone), and shows that PNG instead. Fix a failure here
by re-running ``python tools/execute_notebooks.py <notebook>`` (and, for a widget without a
PNG, by displaying it through ``cutecourse.viz.widgets.widget_bundle``).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p.relative_to(ROOT) for d in ("notebooks", "solutions", "exercises")
                   for p in (ROOT / d).glob("*.ipynb"))
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE_KB = 200  # a few pictures and their controls; 02's two explorers take ~105 KB


def _tool():
    spec = importlib.util.spec_from_file_location("execute_notebooks",
                                                  ROOT / "tools" / "execute_notebooks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


TOOL = _tool()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=str)
def test_stored_outputs_within_the_limit(path):
    nb = json.loads((ROOT / path).read_text())
    s = TOOL.sizes(nb)
    assert s["outputs"] <= TOOL.LIMIT_KB * 1024, (
        f"{path} stores {s['outputs'] / 1024:.0f} KB of outputs (limit {TOOL.LIMIT_KB} KB): "
        f"python tools/execute_notebooks.py {path} (compact PNGs), or make its figures smaller")
    assert s["widgets"] <= WIDGET_STATE_KB * 1024, (
        f"{path} stores {s['widgets'] / 1024:.0f} KB of widget state: python tools/execute_notebooks.py {path}")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=str)
def test_every_stored_widget_has_its_picture_and_state(path):
    nb = json.loads((ROOT / path).read_text())
    models = nb["metadata"].get("widgets", {}).get(TOOL.WIDGET_STATE, {}).get("state", {})
    for i, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if WIDGET_VIEW not in data:
                continue
            text = "".join(data.get("text/plain", ""))  # stored as a string or a list of lines
            assert "image/png" in data, (
                f"{path} cell {i}: a widget output without a PNG shows as {text[:60]!r} in a "
                f"notebook not run yet; display the widget through cutecourse.viz.widgets.widget_bundle")
            assert data[WIDGET_VIEW]["model_id"] in models, (
                f"{path} cell {i}: the widget's state is not stored: "
                f"python tools/execute_notebooks.py {path}")


#: Lessons, not lab logs: the most markdown words a notebook may hold (measurements
#: belong in docs/). Words as ``cutecourse.course`` counts them (whitespace-separated).
#: 03 holds 360 words more than 3600: each of its listings says which loops and branches unroll while
#: tracing and which run, the kernel's start and its epilogue's set-up are shown with a line on each
#: name, the swizzle has a section of its own (`S<B,M,S>` read bit by bit), proxies and the store
#: pipeline are defined before the epilogue, and its section on the generated code shows the prefetch
#: loop's PTX with a line on each instruction (its estimated time rose with them: 125 minutes).
#: 04 holds 100 more than 2200: after the diff of its mainloop it shows the three steps the diff calls
#: (`states`, `retire`, `retire_last`) with a line on each, since its timing model rests on `retire`.
#: 08 holds 130 more than 2800: section 6 defines inline_ptx's operands and lop3's truth table before the
#: listing that uses them, section 4 states the planner's caps before the prediction that needs them and
#: the timed splits after it, and section 8 names the file or section behind each measurement its two
#: decode-size limits rest on, so that a learner can check each.
MAX_WORDS = {"notebooks/01_layouts_and_elementwise_add.ipynb": 1700, "notebooks/02_tv_layouts.ipynb": 2200,
             "notebooks/03_hopper_gemm_prefetch.ipynb": 3960, "notebooks/04_compiler_pipelining.ipynb": 2300,
             "notebooks/05_tma_multicast.ipynb": 3200,
             "notebooks/06_kernel_schedules.ipynb": 3000, "notebooks/07_grouped_block_scaled_gemm.ipynb": 4800,
             "notebooks/08_mixed_input_gemm.ipynb": 2930}


@pytest.mark.parametrize("path", sorted(MAX_WORDS), ids=str)
def test_lesson_length(path):
    nb = json.loads((ROOT / path).read_text())
    words = sum(len("".join(c["source"]).split()) for c in nb["cells"] if c["cell_type"] == "markdown")
    assert words <= MAX_WORDS[path], (
        f"{path} has {words} markdown words (limit {MAX_WORDS[path]}): move measurement prose to docs/")
