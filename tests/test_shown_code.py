"""The code the notebooks show is still there: every ``show_source`` / ``show_diff`` call of every
notebook and solution names a function that exists and markers (``start=``, ``stop=``) that still
cut out a non-empty piece of it.

Without running a notebook: its import statements are executed in a fresh namespace, then each
call's arguments are evaluated there and handed to ``viz.source.snippet`` (which raises where a
marker moved). So a refactor that renames a hook or moves a comment fails here in seconds, not
after a whole nbval run, and names the notebook and the call.

And the listings a notebook *stores* are the package's current code: a reader of the static
site, or of a notebook not run yet, sees the stored outputs, and nbval does not compare these
cells (``# NBVAL_IGNORE_OUTPUT``: their HTML is not text output). Each stored ``show_source`` /
``show_diff`` output is compared, as text (file, line numbers, code), with what the same call
displays now.
"""

from __future__ import annotations

import ast
import html
import json
import re
from pathlib import Path

import pytest

from cutecourse.viz import source as viz_source
from cutecourse.viz.source import snippet

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted([*ROOT.glob("notebooks/*.ipynb"), *ROOT.glob("solutions/*.ipynb")])


def _code(nb_path: Path) -> list[str]:
    cells = json.loads(nb_path.read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def _parse(src: str):
    lines = [ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def _is_show(node) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute))
            and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr)
            in ("show_source", "show_diff"))


def shown_calls(nb_path: Path) -> tuple[list[str], list[tuple[ast.Call, list]]]:
    """(the notebook's import statements, its show_source / show_diff calls, each with the loops
    around it as (variable, iterable source): ``for step in STEPS: show_diff(...step...)`` is
    checked once per value of ``STEPS``)."""
    imports, calls = [], []
    for src in _code(nb_path):
        tree = _parse(src)
        if tree is not None:
            imports += [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
            calls += show_calls_in(tree)
    return imports, calls


def show_calls_in(tree) -> list[tuple[ast.Call, list]]:
    """The show_source / show_diff calls of one cell in display order, each with the loops
    around it as (variable, iterable source)."""
    calls = []

    def visit(node, loops):
        if _is_show(node):
            calls.append((node, loops))
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name):
            loops = [*loops, (node.target.id, ast.unparse(node.iter))]
        for child in ast.iter_child_nodes(node):
            visit(child, loops)

    visit(tree, [])
    return calls


CASES = [(nb, i) for nb in NOTEBOOKS for i in range(len(shown_calls(nb)[1]))]


@pytest.mark.parametrize("nb, index", CASES, ids=[f"{nb.stem}-{i}" for nb, i in CASES])
def test_shown_code_exists(nb, index):
    imports, calls = shown_calls(nb)
    namespace: dict = {}
    for statement in imports:
        try:
            exec(statement, namespace)  # noqa: S102  (the notebook's own imports)
        except ImportError as e:
            pytest.fail(f"{nb.name}: {statement!r} fails: {e}")
    call, loops = calls[index]
    name = call.func.id if isinstance(call.func, ast.Name) else call.func.attr
    where = f"{nb.name}: {ast.unparse(call)[:120]}"
    bindings = [{}]
    for var, iterable in loops:
        bindings = [{**b, var: v} for b in bindings for v in eval(iterable, namespace, b)]  # noqa: S307
    for b in bindings:
        scope = {**namespace, **b}
        try:
            args = [eval(ast.unparse(a), scope) for a in call.args]  # noqa: S307
            kwargs = {k.arg: eval(ast.unparse(k.value), scope) for k in call.keywords}  # noqa: S307
        except (AttributeError, NameError) as e:
            pytest.fail(f"{where}: the shown code is gone ({e})")
        if name == "show_source":
            piece = snippet(args[0], kwargs.get("start"), kwargs.get("stop"))
            assert any(ln.strip() for ln in piece.lines), f"{where}: an empty piece"
        else:
            for fn in args[:2]:
                snippet(fn)


# -- the stored listings are the current code ----------------------------------------------------
def _text(html_text: str) -> str:
    """What a reader sees of a listing's HTML: the text, tags dropped, blank edges trimmed."""
    return "\n".join(ln.rstrip() for ln in html.unescape(re.sub(r"<[^>]+>", "", html_text)).strip().splitlines())


def _stored_listings(cell) -> list[str]:
    """The show_source / show_diff outputs a code cell stores: HTML that starts with its header."""
    out = []
    for o in cell.get("outputs", []):
        h = o.get("data", {}).get("text/html")
        if h is not None:
            h = "".join(h)
            if h.startswith(("<b>", "<code>")):
                out.append(h)
    return out


def shown_cells(nb_path: Path) -> list[tuple[int, str]]:
    """(index, source) of every executed code cell that calls show_source / show_diff."""
    cells = json.loads(nb_path.read_text())["cells"]
    return [(i, "".join(c["source"])) for i, c in enumerate(cells)
            if c["cell_type"] == "code" and c.get("outputs")
            and (tree := _parse("".join(c["source"]))) is not None
            and any(_is_show(n) for n in ast.walk(tree))]


STORED = [(nb, i) for nb in NOTEBOOKS for i, _ in shown_cells(nb)]


@pytest.mark.parametrize("nb, cell", STORED, ids=[f"{nb.stem}-cell{i}" for nb, i in STORED])
def test_stored_listing_is_current(nb, cell, monkeypatch):
    imports, _ = shown_calls(nb)
    namespace: dict = {}
    for statement in imports:
        exec(statement, namespace)  # noqa: S102  (the notebook's own imports)
    shown: list[str] = []
    monkeypatch.setattr(viz_source, "_display", lambda html_text, plain: shown.append(html_text))
    namespace.update(show_source=viz_source.show_source, show_diff=viz_source.show_diff)
    for call, loops in show_calls_in(_parse(dict(shown_cells(nb))[cell])):
        bindings = [{}]
        for var, iterable in loops:
            bindings = [{**b, var: v} for b in bindings for v in eval(iterable, namespace, b)]  # noqa: S307
        for b in bindings:
            fn = call.func.id if isinstance(call.func, ast.Name) else call.func.attr
            scope = {**namespace, **b}
            args = [eval(ast.unparse(a), scope) for a in call.args]  # noqa: S307
            kwargs = {k.arg: eval(ast.unparse(k.value), scope) for k in call.keywords}  # noqa: S307
            getattr(viz_source, fn)(*args, **kwargs)
    stored = _stored_listings(json.loads(nb.read_text())["cells"][cell])
    fix = f"python tools/execute_notebooks.py {nb.relative_to(ROOT)}"
    assert len(stored) == len(shown), (
        f"{nb.name} cell {cell} stores {len(stored)} listing(s), its calls show {len(shown)} now: {fix}")
    where = lambda h: html.unescape(re.search(r"<code>(.*?)</code>", h).group(1))  # noqa: E731
    for old, new in zip(stored, shown):
        assert _text(old) == _text(new), (
            f"{nb.name} cell {cell}: the stored listing of {where(old)} is not the package's code "
            f"any more (now {where(new)}): {fix}")
