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
