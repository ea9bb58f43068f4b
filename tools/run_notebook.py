"""Run a notebook's code cells top to bottom as plain Python (for the GPU machine, which has no
Jupyter): one namespace, matplotlib's Agg backend, `display` falling back to print.

    python tools/run_notebook.py notebooks/01_layouts_and_elementwise_add.ipynb [...]

Run it from the repository root: the cells import ``cutecourse`` from the current directory.
Exits non-zero at the first failing cell (or failing exercise check) and prints that cell. nbval
runs the same notebooks in CI (CPU); this shows that the GPU path of each notebook runs too.
"""

from __future__ import annotations

import ast
import json
import os
import sys
import tempfile
import time
import traceback
import types


def _install_ipython_stub() -> None:
    try:
        import IPython.display  # noqa: F401
        return
    except ImportError:
        pass
    ipy = types.ModuleType("IPython")
    disp = types.ModuleType("IPython.display")

    class HTML(str):
        pass

    disp.HTML = HTML
    disp.Markdown = HTML
    disp.display = lambda *objs, **kw: [print(o if not isinstance(o, HTML) else "<html output>") for o in objs]
    disp.clear_output = lambda *a, **k: None
    ipy.display = disp
    ipy.get_ipython = lambda: None  # matplotlib asks whether it runs under IPython
    ipy.version_info = (9, 0)  # and which IPython: >= 8.24 needs none of its backend workarounds
    # ipywidgets' Output widget asks whether an IPython shell runs (none here: it captures nothing)
    core, shell = types.ModuleType("IPython.core"), types.ModuleType("IPython.core.interactiveshell")

    class InteractiveShell:
        @classmethod
        def initialized(cls):
            return False

    shell.InteractiveShell, core.interactiveshell, ipy.core, ipy.__path__ = InteractiveShell, shell, core, []
    sys.modules.update({"IPython": ipy, "IPython.display": disp, "IPython.core": core,
                        "IPython.core.interactiveshell": shell})


def _run_cell(src: str, fname: str, ns: dict) -> None:
    """Run a cell as Jupyter does: its last expression's value is shown. An exercise check that
    rejects an answer (a ``cutecourse.exercises.Result`` that is not ok) fails the run."""
    tree = ast.parse(src, fname)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, fname, "exec"), ns)
    if last is not None:
        value = eval(compile(ast.Expression(last.value), fname, "eval"), ns)
        if value is not None:
            print(repr(value))
        # a blank the learner has not filled in yet (a course notebook's inline exercise) is
        # fine; an answer the check rejects is not
        if type(value).__name__ == "Result" and not value and "not answered yet" not in value.message:
            raise AssertionError(f"exercise check failed: {value!r}")


def run(path: str) -> bool:
    os.environ.setdefault("MPLBACKEND", "Agg")
    _install_ipython_stub()
    cells = [c for c in json.load(open(path))["cells"] if c["cell_type"] == "code"]
    ns: dict = {"__name__": "__main__"}
    t0 = time.time()
    tmp = tempfile.mkdtemp(prefix="nbrun-")
    for i, cell in enumerate(cells):
        src = "".join(cell["source"])
        src = "\n".join(ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!")))
        # The DSL compiles from source: give every cell a real file, as Jupyter does.
        fname = os.path.join(tmp, f"cell{i}.py")
        with open(fname, "w") as f:
            f.write(src + "\n")
        try:
            _run_cell(src, fname, ns)
        except Exception:
            print(f"FAILED {path} cell {i}:\n{src}\n")
            traceback.print_exc()
            return False
    print(f"OK {path}: {len(cells)} code cells in {time.time() - t0:.0f} s")
    return True


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if len(sys.argv) > 1 else 2)
    sys.path.insert(0, os.getcwd())
    ok = all([run(p) for p in sys.argv[1:]])
    sys.exit(0 if ok else 1)
