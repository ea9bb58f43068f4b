"""A widget output made static: the picture the widget showed when the notebook was saved.

A static page has no kernel, so an ipywidget cannot run there, and its output would render as
``VBox(children=...)`` or as nothing. The course's widget outputs are mime bundles that carry the
widget view, an ``image/png`` of the current picture and a ``text/plain`` line
(``cutecourse.viz.explorer.widget_bundle``). For the site each is replaced, in this order of
preference, by

1. the bundle's own ``image/png``;
2. the pictures inside the widget's stored state (``metadata.widgets``, written by JupyterLab or by
   nbclient with ``store_widget_state=True``): an ``Image`` widget's value, or an ``Output``
   widget's ``image/png`` outputs, found by walking the widget's children from its view;
3. a note that the widget must be run in JupyterLab,

each followed by a one-line note saying that the picture is a snapshot of an interactive widget.
Only the staged copy is changed (``cutecourse.site.stage``), never the notebook.
"""

from __future__ import annotations

import re

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
_MODEL_REF = re.compile(r"^IPY_MODEL_(\S+)$")

SNAPSHOT_NOTE = ("Interactive widget: this is the picture it showed when the notebook was saved. "
                 "Run the notebook in JupyterLab to change its controls.")
NO_PICTURE_NOTE = ("Interactive widget: it has no stored picture. Run the notebook in JupyterLab "
                   "to use it.")


def widget_state(nb) -> dict:
    """``{model_id: model}`` from the notebook's stored widget state (empty if none)."""
    return (nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}) or {}).get("state", {}) or {}


def _refs(value) -> list[str]:
    """Model ids referenced by a state value (``"IPY_MODEL_<id>"``, possibly in lists)."""
    if isinstance(value, str):
        m = _MODEL_REF.match(value)
        return [m.group(1)] if m else []
    if isinstance(value, (list, tuple)):
        return [r for v in value for r in _refs(v)]
    return []


def pictures_in_state(state: dict, model_id: str) -> list[str]:
    """Base64 PNGs that the widget ``model_id`` shows, in display order (depth first)."""
    found: list[str] = []
    seen: set[str] = set()

    def walk(mid: str) -> None:
        if mid in seen or mid not in state:
            return
        seen.add(mid)
        model = state[mid]
        name, st = model.get("model_name", ""), model.get("state", {})
        if name == "ImageModel" and st.get("format", "png") == "png":
            for buf in model.get("buffers", []):
                if buf.get("path") == ["value"] and buf.get("encoding") == "base64" and buf.get("data"):
                    found.append(buf["data"])
        elif name == "OutputModel":
            for out in st.get("outputs", []):
                png = out.get("data", {}).get("image/png")
                if png:
                    found.append(png if isinstance(png, str) else "".join(png))
        for key in ("children",):
            for ref in _refs(st.get(key, [])):
                walk(ref)

    walk(model_id)
    return found


def _note(text: str) -> dict:
    return {"output_type": "display_data", "metadata": {},
            "data": {"text/html": f'<p class="cc-widget-note"><em>{text}</em></p>',
                     "text/plain": text}}


def static_outputs(output: dict, state: dict) -> list[dict]:
    """The outputs that replace one notebook output on the site (itself if it is no widget)."""
    data = output.get("data", {})
    if WIDGET_VIEW not in data:
        return [output]
    text = data.get("text/plain", "")
    if "image/png" in data:
        pictures = [data["image/png"]]
    else:
        pictures = pictures_in_state(state, data[WIDGET_VIEW].get("model_id", ""))
    if not pictures:
        return [_note(NO_PICTURE_NOTE)]
    # text/plain is kept for the record; it must not be a widget repr such as VBox(children=...)
    plain = text if text and "children=" not in text else "widget picture"
    outs = [{"output_type": "display_data", "metadata": {},
             "data": {"image/png": png, "text/plain": plain}} for png in pictures]
    return outs + [_note(SNAPSHOT_NOTE)]


def make_static(nb) -> int:
    """Replace every widget output of ``nb`` (in place) and drop its widget state, so the site
    embeds no widget manager; return how many widget outputs were replaced."""
    state = widget_state(nb)
    replaced = 0
    for cell in nb.cells:
        if cell.get("cell_type") != "code":
            continue
        new = []
        for out in cell.get("outputs", []):
            if WIDGET_VIEW in out.get("data", {}):
                replaced += 1
            new += static_outputs(out, state)
        cell["outputs"] = new
    nb.metadata.pop("widgets", None)
    return replaced
