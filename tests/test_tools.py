"""tools/run_notebook.py: runs a notebook's code cells as plain Python, from the repository root."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "run_notebook.py"


def _notebook(path: Path, *cells: str) -> Path:
    nb = {"cells": [{"cell_type": "markdown", "source": ["# title"], "metadata": {}}]
          + [{"cell_type": "code", "source": [c], "metadata": {}, "outputs": [], "execution_count": None}
             for c in cells],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb))
    return path


def _run(*args: str) -> subprocess.CompletedProcess:
    # From the repository root, as the GPU machine runs it: cells import cutecourse from there.
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def test_help_names_the_tools_path():
    out = _run("--help")
    assert out.returncode == 0 and "python tools/run_notebook.py" in out.stdout


def test_runs_cells_in_one_namespace_and_shows_the_last_value(tmp_path):
    nb = _notebook(tmp_path / "ok.ipynb", "x = 20", "%matplotlib inline\nx + 22")
    out = _run(str(nb))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "42" in out.stdout and f"OK {nb}: 2 code cells" in out.stdout


def test_stops_at_the_first_failing_cell(tmp_path):
    nb = _notebook(tmp_path / "bad.ipynb", "y = 1", "raise ValueError('boom')", "print('never')")
    out = _run(str(nb))
    assert out.returncode == 1
    assert f"FAILED {nb} cell 1" in out.stdout and "never" not in out.stdout


# -- tools/execute_notebooks.py: run in place with widget state, compact, check sizes ----------
EXECUTE = ROOT / "tools" / "execute_notebooks.py"


def _load_tool():
    import importlib.util

    spec = importlib.util.spec_from_file_location("execute_notebooks", EXECUTE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _execute(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(EXECUTE), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout)


def _rgba_png(width=600, height=300) -> bytes:
    """A matplotlib figure as matplotlib writes it: 32-bit RGBA."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width / 100, height / 100))
    ax.imshow([[i * j for i in range(40)] for j in range(20)], cmap="viridis")
    ax.set_title("a title")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def test_compact_png_is_a_palette_png_of_the_same_picture():
    import io

    import numpy as np
    from PIL import Image

    tool = _load_tool()
    png = _rgba_png()
    small = tool.compact_png(png)
    before, after = Image.open(io.BytesIO(png)), Image.open(io.BytesIO(small))
    assert after.mode == "P" and after.size == before.size
    assert len(small) < len(png) / 2
    diff = np.abs(np.asarray(before.convert("RGB"), float) - np.asarray(after.convert("RGB"), float))
    assert diff.mean() < 2.0  # 0..255 per channel: the same picture to the eye
    assert tool.compact_png(small) == small  # idempotent


def test_execute_stores_the_displayed_widgets_compactly(tmp_path):
    nb = _notebook(
        tmp_path / "w.ipynb",
        "import ipywidgets as w\nfrom IPython.display import Image, display\n"
        "orphan = w.Button(description='never shown')",
        "slider = w.IntSlider(5, description='n')\nw.VBox([slider, w.HTML('<b>hi</b>')])",
        f"display(Image(data={_rgba_png()!r}))")
    out = _execute(str(nb))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "executed in" in out.stdout and "ok   " in out.stdout
    stored = json.loads(nb.read_text())
    models = stored["metadata"]["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    names = sorted(m["model_name"] for m in models.values())
    # the VBox, its two children and what they refer to; not the orphan button
    assert "ButtonModel" not in names and {"VBoxModel", "IntSliderModel", "HTMLModel"} <= set(names)
    slider = next(m["state"] for m in models.values() if m["model_name"] == "IntSliderModel")
    assert slider["value"] == 5 and slider["description"] == "n"
    assert "max" not in slider and "orientation" not in slider  # defaults dropped (100, horizontal)
    import base64
    import io

    from PIL import Image

    png = next(o["data"]["image/png"] for c in stored["cells"] for o in c.get("outputs", [])
               if "image/png" in o.get("data", {}))
    assert Image.open(io.BytesIO(base64.b64decode(png))).mode == "P"
    assert all("execution" not in c["metadata"] for c in stored["cells"])


def test_execute_names_the_failing_notebook_and_leaves_it_alone(tmp_path):
    nb = _notebook(tmp_path / "bad.ipynb", "raise ValueError('boom')")
    before = nb.read_text()
    out = _execute(str(nb))
    assert out.returncode == 1 and f"FAILED {nb}" in out.stderr and "boom" in out.stderr
    assert nb.read_text() == before
    missing = _execute(str(tmp_path / "nope.ipynb"))
    assert missing.returncode == 2 and "no such notebook" in missing.stderr


def test_check_reports_sizes_against_the_limit(tmp_path):
    nb = _notebook(tmp_path / "big.ipynb", "x = 1")
    data = json.loads(nb.read_text())
    data["cells"][1]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "x" * 3000}]
    nb.write_text(json.dumps(data))
    over = _execute("--check", "--limit-kb", "2", str(nb))
    assert over.returncode == 1 and "OVER" in over.stdout and "outputs 3 KB (limit 2)" in over.stdout
    ok = _execute("--check", str(nb))
    assert ok.returncode == 0 and ok.stdout.startswith("ok ")


# -- tools/ptx_fingerprints.py ---------------------------------------------------------------------
def test_fingerprints_cover_every_registry_kernel_and_the_committed_file():
    import importlib.util

    from cutecourse.kernels import registry

    spec = importlib.util.spec_from_file_location("ptx_fingerprints", ROOT / "tools" / "ptx_fingerprints.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    configs = tool.configurations()
    targets = {target for target, _ in configs.values()}
    assert {registry.target(name) for name in registry.DENSE} <= targets
    committed = json.loads((ROOT / "tools" / "ptx_fingerprints.json").read_text())
    assert set(committed) == set(configs)  # a new configuration comes with its fingerprint
    assert not [n for n, h in committed.items() if h.startswith("error")]


def test_fingerprints_follow_the_variant_tables_and_the_registry(monkeypatch):
    """A new one-CTA mainloop, dense GEMM or FP8 grouped kernel class is fingerprinted without an
    edit of the tool."""
    import importlib.util

    from cutecourse.kernels import grouped, hopper_gemm, registry

    spec = importlib.util.spec_from_file_location("ptx_fingerprints", ROOT / "tools" / "ptx_fingerprints.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    before = len(tool.configurations())
    monkeypatch.setitem(hopper_gemm.DEMO_VARIANTS, "mine", hopper_gemm.HopperGemm)
    monkeypatch.setitem(tool.DENSE, "mine", "cutecourse.kernels.my_gemm:compile_target")
    monkeypatch.setitem(grouped.FP8_KERNELS, "mine", grouped.FP8_KERNELS["onepart"])
    configs = tool.configurations()
    assert configs["one/mine/128x256/1x1"] == (tool.ONE, {"variant": "mine", "tile": [128, 256]})
    assert configs["one/mine/128x128/2x1"][0] == tool.CLUSTER and "cluster/mine/128x256/2x2" not in configs
    assert configs["mine/default"] == ("cutecourse.kernels.my_gemm:compile_target", {})
    assert configs["grouped/fp8/mine/128x192/2x1"] == (tool.GROUPED_FP8, {"variant": "mine", "tile": [128, 192],
                                                                          "cluster": [2, 1]})
    # 2 tiles x 3 clusters, defaults, the FP8 class's 3 tiles x 2 clusters
    assert len(configs) == before + 6 + 1 + 6 and "mine" not in registry.DENSE
