"""The learner's code as a kernel checker sees it: its source, its cell lines, a module to ship.

A learner writes a hook (a subclass of a course kernel, or a function a kernel calls) in a
notebook cell. A checker needs three things from it:

* **where a line is**: a compile error must point at "line 13 of your cell", not at the DSL's
  internals. IPython compiles each cell as its own file (``/tmp/ipykernel_*/123.py``), so the
  line numbers in a traceback frame of that file *are* cell lines; :meth:`LearnerCode.locate`
  finds the innermost frame inside the learner's code, following ``__cause__`` / ``__context__``
  (the DSL wraps the learner's exception in its own);
* **the reason in one line**: :func:`reason` strips colour codes, MLIR and the DSL's banners;
* **a module a child process can import**: a class defined in a cell cannot be pickled or
  imported elsewhere, so :meth:`LearnerCode.module_source` writes its *source* after a preamble
  that re-creates the names it uses (``import cutlass.cute as cute``, ``from
  cutecourse.kernels.hopper_gemm import HopperGemm``, constants, and the source of helper
  functions or classes from other cells), and keeps a map from module lines back to cell lines.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import linecache
import re
import sys
import textwrap
import types
from dataclasses import dataclass

from ..ptx_report import ANSI as _ANSI

_CELL_FILE = re.compile(r"ipykernel_\d+|<ipython-input-|/tmp/ipykernel")


@dataclass
class Segment:
    """One learner object's source: ``lines`` start at line ``first`` of ``filename``."""

    name: str
    filename: str
    first: int
    text: str  # dedented source

    @property
    def last(self) -> int:
        return self.first + self.text.count("\n") - (1 if self.text.endswith("\n") else 0)

    def holds(self, filename: str, lineno: int) -> bool:
        return filename == self.filename and self.first <= lineno <= self.last


def _unwrap(obj):
    obj = inspect.unwrap(obj) if callable(obj) else obj
    return getattr(obj, "__func__", obj)


def _file_lines(filename: str) -> list[str]:
    lines = linecache.getlines(filename)
    if not lines:
        raise OSError(f"the source of {filename} is not available")
    return lines


def _functions_of(cls) -> list[types.FunctionType]:
    out = []
    for value in vars(cls).values():
        fn = _unwrap(value)
        if isinstance(fn, types.FunctionType):
            out.append(fn)
    return out


def segment_of(obj) -> Segment:
    """The source of a learner function or class, with the file and line it starts at.

    A class's source is found through its methods' code (``inspect.getsource`` of a class
    defined in a notebook cell fails on Python < 3.13: ``__main__`` has no file).
    """
    fn = _unwrap(obj)
    if isinstance(fn, types.FunctionType):
        code = fn.__code__
        lines = _file_lines(code.co_filename)
        start = code.co_firstlineno
        block = inspect.getblock(lines[start - 1:])
        return Segment(fn.__name__, code.co_filename, start, textwrap.dedent("".join(block)))
    if isinstance(obj, type):
        methods = [f for f in _functions_of(obj) if f.__qualname__.startswith(obj.__qualname__)]
        if not methods:
            raise TypeError(f"class {obj.__name__} defines no method the checker can read")
        filename = methods[0].__code__.co_filename
        lines = _file_lines(filename)
        tree = ast.parse("".join(lines))
        line = methods[0].__code__.co_firstlineno
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name == obj.__name__ and \
                    node.lineno <= line <= node.end_lineno:
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                text = "".join(lines[start - 1:node.end_lineno])
                return Segment(obj.__name__, filename, start, textwrap.dedent(text))
        raise OSError(f"could not find class {obj.__name__} in {filename}")
    raise TypeError(f"expected a function or a class, got {type(obj).__name__}")


def _globals_of(obj) -> dict:
    fn = _unwrap(obj)
    if isinstance(fn, types.FunctionType):
        return fn.__globals__
    for f in _functions_of(obj):
        return f.__globals__
    return vars(sys.modules.get(obj.__module__, builtins))


def _used_names(text: str) -> tuple[list[str], set[str]]:
    """(names read, names defined at top level) of a piece of source."""
    tree = ast.parse(text)
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    used: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in used:
            used.append(node.id)
    return used, defined


def _import_line(name: str, value) -> str | None:
    """A line that re-creates ``name`` in a fresh module, or None if it cannot."""
    if isinstance(value, types.ModuleType):
        return f"import {value.__name__} as {name}"
    mod = getattr(value, "__module__", None)
    qual = getattr(value, "__qualname__", None)
    if mod and qual and mod != "__main__" and "." not in qual and \
            getattr(sys.modules.get(mod), qual, None) is value:
        return f"from {mod} import {qual} as {name}"
    if isinstance(value, (bool, int, float, str, type(None))) or (
            isinstance(value, tuple) and all(isinstance(v, (bool, int, float, str)) for v in value)):
        return f"{name} = {value!r}"
    return None


class LearnerCode:
    """The learner's objects (the hook class or function, plus helpers it calls from other cells)."""

    def __init__(self, *objects):
        if not objects:
            raise TypeError("LearnerCode needs at least one function or class")
        self.objects = objects
        self.globals = _globals_of(objects[0])
        self.segments: list[Segment] = []
        self.preamble: list[str] = []
        self.missing: list[str] = []
        for obj in objects:
            self._add(obj)

    def _add(self, obj) -> None:
        seg = segment_of(obj)
        if any(s.name == seg.name and s.filename == seg.filename for s in self.segments):
            return
        used, defined = _used_names(seg.text)
        for name in used:
            if name in defined or hasattr(builtins, name) or name not in self.globals:
                continue
            value = self.globals[name]
            line = _import_line(name, value)
            if line is not None:
                if line not in self.preamble:
                    self.preamble.append(line)
            elif isinstance(value, (type, types.FunctionType)) and \
                    getattr(value, "__module__", "") == "__main__":
                self._add(value)  # a helper from another cell: ship its source first
            elif name not in self.missing:
                self.missing.append(name)
        self.segments.append(seg)

    @property
    def name(self) -> str:
        return self.segments[-1].name

    @property
    def unanswered(self) -> bool:
        """The exercise's stub (``raise NotImplementedError``) is still in the code. (The DSL
        refuses a ``raise`` inside a run-time loop, so it must be caught before compiling.)"""
        return any(re.search(r"^\s*raise NotImplementedError", s.text, re.M) for s in self.segments)

    # -- where --------------------------------------------------------------------------------
    def describe(self, filename: str, lineno: int) -> str:
        """``line 13 of your cell (`code`)`` for a line of the learner's code."""
        code = linecache.getline(filename, lineno).strip()
        where = (f"line {lineno} of your cell" if _CELL_FILE.search(filename)
                 else f"line {lineno} of {filename.rsplit('/', 1)[-1]}")
        return f"{where} (`{code[:80]}`)" if code else where

    def locate(self, exc: BaseException) -> tuple[str, int] | None:
        """(file, line) of the innermost frame of the learner's code in ``exc`` or its causes."""
        seen, found = set(), None
        while exc is not None and id(exc) not in seen:
            seen.add(id(exc))
            if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
                if any(s.holds(exc.filename, exc.lineno) for s in self.segments):
                    return exc.filename, exc.lineno
            tb = exc.__traceback__
            while tb is not None:
                f, n = tb.tb_frame.f_code.co_filename, tb.tb_lineno
                if any(s.holds(f, n) for s in self.segments):
                    found = (f, n)
                tb = tb.tb_next
            if found:
                return found
            m = re.search(r"-->\s*(\S+):(\d+)", _ANSI.sub("", str(exc)))
            if m and any(s.holds(m.group(1), int(m.group(2))) for s in self.segments):
                return m.group(1), int(m.group(2))
            exc = exc.__cause__ or exc.__context__
        return None

    # -- a module for a child process ---------------------------------------------------------
    def module_source(self) -> tuple[str, list[tuple[int, str, int, int]]]:
        """(source of an importable module, [(module line, cell file, cell line, count)])."""
        head = ["# The learner's code, copied by cutecourse.exercises.learner_code for a child process."]
        head += self.preamble
        text, spans, line = "\n".join(head) + "\n", [], len(head) + 1
        for seg in self.segments:
            text += "\n"
            line += 1
            n = seg.last - seg.first + 1
            spans.append((line, seg.filename, seg.first, n))
            text += seg.text if seg.text.endswith("\n") else seg.text + "\n"
            line += n
        return text, spans


def map_line(spans, module_line: int) -> tuple[str, int] | None:
    """The learner's (file, line) of a line of :meth:`LearnerCode.module_source`'s module."""
    for start, filename, first, count in spans:
        if start <= module_line < start + count:
            return filename, first + module_line - start
    return None


_HINTS = {
    "std::bad_cast": "a run-time value where the compiler needs a Python constant (e.g. "
                     "wait_group(k): its count must be a number written in the code)",
}


def reason(exc: BaseException) -> str:
    """The one useful line of why ``exc`` happened: the learner's own exception if the DSL
    wrapped one, without colour codes, MLIR or banners."""
    inner = exc
    while isinstance(inner, Exception) and type(inner).__module__.startswith("cutlass") and \
            (inner.__cause__ or inner.__context__) is not None:
        inner = inner.__cause__ or inner.__context__
    if isinstance(inner, SyntaxError):
        return f"SyntaxError: {inner.msg}"
    text = _ANSI.sub("", str(inner)).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    keep = [ln for ln in lines if not re.search(r"mlir|^%|loc\(|^\||-->|^\d+ \|", ln, re.I)]
    line = (keep or lines or [""])[0]
    line = re.sub(r"^error:\s*", "", line)
    for key, hint in _HINTS.items():
        if key in line:
            line = f"{line}: {hint}"
    name = type(inner).__name__
    if type(inner).__module__ == "builtins" and not line.startswith(name):
        line = f"{name}: {line}" if line else name
    return line[:240]


_CELLS = iter(range(1, 1 << 30))


def as_cell(source: str, namespace: dict | None = None) -> dict:
    """Run ``source`` as IPython runs a notebook cell (its own file name, its text in linecache,
    so the DSL and the checkers can read it back); return the namespace. Tests use it."""
    name = f"/tmp/ipykernel_0/{next(_CELLS)}.py"
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    namespace = namespace if namespace is not None else {"__name__": "__main__"}
    exec(compile(source, name, "exec"), namespace)  # noqa: S102
    return namespace


# -- the learner's words for the DSL's errors -------------------------------------------------
#: The DSL's words for a learner's mistake, and what they mean in the learner's terms.
DSL_HINTS = {
    "expects a multicast mask to be provided": (
        "a multicast copy needs mcast_mask= a DSL integer; a mask computed from Python numbers "
        "alone is a Python int: wrap it where you compute it, e.g. cutlass.Int16(mask)"),
    "expects Tensor or Layout, but got Boolean": (
        "a predicate (pred=) is a one-element Boolean register tensor, not a Boolean: "
        "p = cute.make_rmem_tensor((1,), cutlass.Boolean); p[0] = is_producer"),
    "an illegal instruction was encountered": (
        "the kernel crashed: a tile or a load outside the tensors it was given, e.g. a group, "
        "row or tensor map your code picked wrong; the CPU check above names the first wrong one"),
    "an illegal memory access was encountered": (
        "the kernel crashed: it read or wrote outside the tensors it was given, e.g. a tile or "
        "group your code picked wrong; the CPU check above names the first wrong one"),
}


def with_hint(text: str) -> str:
    for key, hint in DSL_HINTS.items():
        if key in text and hint not in text:
            return f"{text} ({hint})"
    return text


def child_error(code: "LearnerCode | None", res: dict, what: str) -> str:
    """A child's error ``res`` (its ``error``, ``where``) as the learner's message: ``what``
    happened to their code, at their line."""
    res = dict(res, error=with_hint(res["error"]))
    if code is None:
        return f"the kernel {what}: {res['error']}"
    m = re.search(r"name '(\w+)' is not defined", res["error"])
    if m and m.group(1) in code.missing:
        return (f"your {code.name} uses `{m.group(1)}`, defined in another cell as a value the "
                "checker cannot copy into the separate process it compiles and runs your code "
                "in: make it a constant, or define it inside your class or function")
    where = res.get("where")
    if where:
        return f"your {code.name} {what}: {code.describe(*where)}: {res['error']}"
    return f"your {code.name} {what}: {res['error']}"


def learner_message(code: "LearnerCode", exc: BaseException) -> str:
    where = code.locate(exc)
    """The compile error ``exc`` in the learner's terms: their line, the reason, a DSL hint."""
    why = with_hint(reason(exc))
    if where is None:
        return (f"your {code.name} does not compile, and the error is not on one of its lines: "
                f"{why}. Check the arguments your code passes to the course's functions.")
    return f"your {code.name} does not compile: {code.describe(*where)}: {why}"
