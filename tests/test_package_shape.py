"""The package's shape (docs/DEVELOPING.md): no module of ``cutecourse`` imports, directly or
through others, a module that imports it back, and no module is over 400 lines; nor is any file
of ``tools/``, ``benchmarks/`` and ``tests/``, and no script there reaches into another's private
helpers (a shared helper lives in a module of its own).

The import graph is read from the source (every ``import``, at the top of a file or inside a
function: a lazy import still ties two modules together), so it needs no GPU and imports nothing.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "cutecourse"
#: The rest of the tree's Python, held to the same length.
SCRIPT_DIRS = ("tools", "benchmarks", "tests")
MAX_LINES = 400

#: Circles and long files that are known and being taken apart; each entry must still exist, so
#: the list shrinks as they go (an entry that no longer applies fails the test: delete it).
KNOWN_CIRCLES: set[frozenset] = set()
KNOWN_LONG: set[str] = set()


def _modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports (a package's own ``__init__`` excluded)."""
    mods = _modules()
    graph = {m: set() for m in mods}
    for m, (path, is_pkg) in mods.items():
        here = m.split(".") if is_pkg else m.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(here[:len(here) - node.level + 1] + [node.module or ""]).strip(".") \
                    if node.level else (node.module or "")
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                while name and name not in mods:
                    name = name.rpartition(".")[0]
                if name and name != m and not m.startswith(name + "."):
                    graph[m].add(name)
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(frozenset(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles():
    found = set(circles(import_graph()))
    new = [sorted(c) for c in found - KNOWN_CIRCLES]
    assert not new, f"modules that import each other (directly or through others): {new}"
    assert KNOWN_CIRCLES <= found, f"no longer circles, delete from KNOWN_CIRCLES: {KNOWN_CIRCLES - found}"


def test_no_module_over_400_lines():
    long = {str(p.relative_to(PACKAGE.parent)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    new = {p: n for p, n in long.items() if p not in KNOWN_LONG}
    assert not new, f"split these along their seams (one idea per module): {new}"
    assert KNOWN_LONG <= set(long), f"no longer long, delete from KNOWN_LONG: {KNOWN_LONG - set(long)}"


def _scripts() -> list[Path]:
    return sorted(p for d in SCRIPT_DIRS for p in (ROOT / d).rglob("*.py"))


def test_no_tool_benchmark_or_test_file_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in _scripts() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these along their ideas (a test file: along the modules it tests): {long}"


def private_reaches(path: Path, siblings: set[str]) -> list[str]:
    """``module._name`` and ``from module import _name`` in ``path``, for the sibling modules it
    imports (the scripts of its own folder, of benchmarks/ and of tools/)."""
    tree = ast.parse(path.read_text())
    aliases, found = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update({a.asname or a.name: a.name for a in node.names if a.name in siblings})
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module in siblings:
            found += [f"from {node.module} import {a.name}" for a in node.names if a.name.startswith("_")]
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            found.append(f"{aliases[node.value.id]}.{node.attr}")
    return sorted(set(found))


def test_the_private_reach_finder_finds_both_forms(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("import peers as p\nfrom kit import _describe, build\np._err(1)\np.run()\nother._x\n")
    assert private_reaches(f, {"peers", "kit"}) == ["from kit import _describe", "peers._err"]


def test_no_script_uses_another_scripts_private_helpers():
    """A benchmark or tool that needs another's helper imports it from a shared module, under a
    public name (``benchmarks/row_checks.py``), so that the helper's owner can see who uses it."""
    dirs = [ROOT / "benchmarks", ROOT / "benchmarks" / "experiments", ROOT / "tools"]
    siblings = {p.stem for d in dirs for p in d.glob("*.py")}
    found = {str(p.relative_to(ROOT)): r for d in dirs for p in sorted(d.glob("*.py"))
             if (r := private_reaches(p, siblings))}
    assert not found, f"move these helpers to a shared module, public: {found}"
