"""Execute course notebooks in place, with their widgets' state, and keep the files small.

    python tools/execute_notebooks.py notebooks/03_hopper_gemm_prefetch.ipynb [...]
    python tools/execute_notebooks.py --check                 # sizes of every notebook, no run
    python tools/execute_notebooks.py --compact notebooks/06_kernel_schedules.ipynb   # no run

Why: a learner who opens a notebook before running it sees its stored outputs. A course widget
(``cutecourse.viz.widgets``) is drawn from its *widget state*, which only a run that records it
leaves in the file; without it JupyterLab has nothing to draw. So this tool runs each notebook
with nbclient (``store_widget_state=True``) the way CI sees it: compile mode
(``CUTECOURSE_MODE=compile`` where a GPU is visible: none is used), the kernel's working
directory the notebook's folder, a time limit per cell, this repository's ``cutecourse`` first
on the kernel's path, consecutive prints of a cell stored as one output (as nbval compares
them). Then it makes the file small, since every byte is downloaded by every reader:

* PNGs (outputs, image widgets, pictures inside Output widgets) become palette PNGs: matplotlib
  writes 32-bit RGBA, and 256 colours draw a figure of flat fills and text just as well at a
  quarter of the bytes;
* the widget state keeps only the models a displayed widget refers to (nbclient records every
  widget the run created, including ones the notebook replaced), and of each model only the
  values that differ from the model's defaults: ipywidgets' own ``drop_defaults`` (what
  ``ipywidgets.embed`` does), which the front end fills back in.

It prints each notebook's stored outputs, widget state and file size; ``--check`` only prints
them and exits 1 when a notebook's outputs exceed ``--limit-kb`` (400 KB, the course's rule).
Run it from the repository root.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from cutecourse import torch_build  # noqa: E402  (standard library only: the driver probe)
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
LIMIT_KB = 400


# -- sizes -----------------------------------------------------------------------------------
def sizes(nb: dict) -> dict[str, int]:
    """Bytes of a notebook's code-cell outputs, of its widget state, and of the whole file."""
    outputs = sum(len(json.dumps(c.get("outputs", []))) for c in nb["cells"] if c["cell_type"] == "code")
    widgets = len(json.dumps(nb.get("metadata", {}).get("widgets", {})))
    # nbformat's own layout (indent 1, sorted keys, UTF-8), so "file" is the size on disk
    text = json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    return {"outputs": outputs, "widgets": widgets, "file": len(text.encode())}


def report(path: Path, nb: dict, limit_kb: int = LIMIT_KB) -> bool:
    """Print one line of sizes (the file's as written on disk); True if the outputs are within
    the limit."""
    s = sizes(nb)
    if path.is_file():
        s["file"] = path.stat().st_size
    ok = s["outputs"] <= limit_kb * 1024
    name = path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path
    print(f"{'ok  ' if ok else 'OVER'} {name}: outputs {s['outputs'] / 1024:.0f} KB "
          f"(limit {limit_kb}), widget state {s['widgets'] / 1024:.0f} KB, file {s['file'] / 1024:.0f} KB")
    return ok


# -- compact PNGs ----------------------------------------------------------------------------
def compact_png(png: bytes) -> bytes:
    """The same picture as a palette PNG (256 colours, no dithering), if that is smaller."""
    from PIL import Image

    im = Image.open(io.BytesIO(png))
    if im.mode == "P":
        return png  # already a palette image
    if im.mode in ("RGBA", "LA") and im.getchannel("A").getextrema() == (255, 255):
        im = im.convert("RGB")  # opaque: the alpha channel carries nothing
    # FASTOCTREE also quantises RGBA (transparent figures); no dithering: flat fills stay flat
    small = im.quantize(colors=256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
    out = io.BytesIO()
    small.save(out, format="PNG", optimize=True)
    return out.getvalue() if len(out.getvalue()) < len(png) else png


def _compact_b64(data: str) -> str:
    return base64.b64encode(compact_png(base64.b64decode(data))).decode("ascii")


def _compact_bundles(node) -> None:
    """Compact every ``image/png`` found in outputs (also inside an Output widget's state)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "image/png" and isinstance(value, str):
                node[key] = _compact_b64(value)
            else:
                _compact_bundles(value)
    elif isinstance(node, list):
        for item in node:
            _compact_bundles(item)


# -- widget state ----------------------------------------------------------------------------
def _refs(node, found: set[str]) -> None:
    """Model ids a state refers to ("IPY_MODEL_<id>" strings, at any depth)."""
    if isinstance(node, str) and node.startswith("IPY_MODEL_"):
        found.add(node[len("IPY_MODEL_"):])
    elif isinstance(node, dict):
        for v in node.values():
            _refs(v, found)
    elif isinstance(node, list):
        for v in node:
            _refs(v, found)


def _displayed(nb: dict) -> set[str]:
    """Model ids of the widgets the notebook's outputs display."""
    ids = set()
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            view = out.get("data", {}).get(WIDGET_VIEW)
            if view:
                ids.add(view["model_id"])
    return ids


_DEFAULTS: dict[tuple[str, str], dict] = {}


def _defaults(module: str, name: str) -> dict | None:
    """The default state of an ipywidgets model class (made once, outside any kernel)."""
    if not _DEFAULTS:
        import ipywidgets

        classes, todo = set(), [ipywidgets.Widget]
        while todo:  # every model class ipywidgets defines, styles and layouts included
            for sub in todo.pop().__subclasses__():
                if sub not in classes:
                    classes.add(sub)
                    todo.append(sub)
        for cls in classes:
            if cls.__module__.startswith("ipywidgets"):
                try:
                    widget = cls()
                except Exception:  # classes that need arguments: their models keep every key
                    continue
                # as stored: tuples become lists; binary values (an image's bytes) never match
                state = json.loads(json.dumps(widget.get_state(), default=lambda _: "<binary>"))
                widget.close()
                key = (state["_model_module"], state["_model_name"])
                if key in _DEFAULTS:  # helper classes share a model (GridBox, AppLayout): keep
                    state = {k: v for k, v in state.items() if _DEFAULTS[key].get(k, v) == v}
                _DEFAULTS[key] = state  # only the defaults they agree on
    return _DEFAULTS.get((module, name))


def compact_widget_state(nb: dict) -> None:
    """Keep the models the displayed widgets need, without their default values; PNGs compact."""
    meta = nb.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE)
    if not meta:
        return
    models = meta["state"]
    keep, todo = set(), [m for m in _displayed(nb) if m in models]
    while todo:
        mid = todo.pop()
        if mid in keep or mid not in models:
            continue
        keep.add(mid)
        found: set[str] = set()
        _refs(models[mid]["state"], found)
        todo.extend(found - keep)
    for mid in list(models):
        if mid not in keep:
            del models[mid]
    for model in models.values():
        state, buffers = model["state"], model.get("buffers", [])
        binary = {b["path"][0] for b in buffers if b.get("path")}
        default = _defaults(model["model_module"], model["model_name"]) or {}
        for key in list(state):
            if key not in binary and key in default and state[key] == default[key]:
                del state[key]
        if model["model_name"] == "ImageModel" and state.get("format", "png") == "png":
            for b in buffers:
                if b.get("path") == ["value"] and b.get("encoding") == "base64":
                    b["data"] = _compact_b64(b["data"])
        _compact_bundles(state)  # an Output widget's outputs
    if not models:
        del nb["metadata"]["widgets"]


def compact(nb: dict) -> None:
    """Compact a notebook in place: output PNGs, widget state, and no per-cell timestamps (the
    time of the run that wrote the file is noise in every diff)."""
    for cell in nb["cells"]:
        cell.get("metadata", {}).pop("execution", None)
        if cell["cell_type"] == "code":
            _compact_bundles(cell.get("outputs", []))
    compact_widget_state(nb)


# -- execute ---------------------------------------------------------------------------------
def execute(path: Path, timeout: int) -> dict:
    """Run the notebook top to bottom (compile mode, widget state recorded); the run's notebook."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    nb.metadata.pop("widgets", None)  # a stale state from an earlier run must not survive
    kernel = nb.metadata.get("kernelspec", {}).get("name", "python3")
    client = NotebookClient(nb, timeout=timeout, kernel_name=kernel, store_widget_state=True,
                            record_timing=False, coalesce_streams=True,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    return json.loads(nbformat.writes(nb))


def write(path: Path, nb: dict) -> None:
    import nbformat

    nbformat.write(nbformat.from_dict(nb), path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/execute_notebooks.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("notebooks", nargs="*", type=Path,
                    help="notebooks to execute (with --check: to measure; default notebooks/*.ipynb, "
                         "solutions/*.ipynb, exercises/*.ipynb)")
    ap.add_argument("--check", action="store_true", help="only print the sizes; exit 1 if over the limit")
    ap.add_argument("--compact", action="store_true", help="compact the stored outputs without running")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per cell (default 900)")
    ap.add_argument("--limit-kb", type=int, default=LIMIT_KB, help="outputs limit per notebook (KB)")
    args = ap.parse_args(argv)

    paths = args.notebooks
    if not paths:
        if not args.check:
            ap.error("name the notebooks to execute or compact")
        paths = sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "solutions").glob("*.ipynb")) \
            + sorted((ROOT / "exercises").glob("*.ipynb"))
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        print(f"no such notebook: {', '.join(missing)}\n-> give paths such as "
              f"notebooks/03_hopper_gemm_prefetch.ipynb", file=sys.stderr)
        return 2
    # The kernel inherits this environment: compile mode where a GPU could run the kernels (without
    # one the notebooks choose it themselves, and their banners say why, as a learner's laptop
    # shows them), and this checkout's cutecourse first.
    if torch_build.nvidia_smi("name"):
        os.environ["CUTECOURSE_MODE"] = "compile"
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in os.environ.get(
        "PYTHONPATH", "").split(os.pathsep) if p])
    ok = True
    for path in paths:
        if args.check:
            ok &= report(path, json.loads(path.read_text()), args.limit_kb)
            continue
        start = time.monotonic()
        try:
            nb = json.loads(path.read_text()) if args.compact else execute(path, args.timeout)
        except Exception as e:  # a failing cell: nbclient's message names the cell and the error
            print(f"FAILED {path}: {type(e).__name__}: {str(e)[-3000:]}", file=sys.stderr)
            return 1
        compact(nb)
        write(path, nb)
        print(f"{'compacted' if args.compact else 'executed'} in {time.monotonic() - start:.0f} s: ", end="")
        ok &= report(path, nb, args.limit_kb)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
