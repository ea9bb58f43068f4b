"""Compile a kernel for sm_90a or sm_100a on any machine and look at what the compiler made.

No GPU is needed to compile: ``cute.compile`` on fake tensors produces PTX (the virtual ISA),
a cubin (machine code for the chosen architecture) and, with ``nvdisasm`` installed, SASS (that
machine code as text). From those this module reads what a kernel really does: how wide its
loads are, whether it issues wgmma / TMA / multicast / tcgen05 instructions, how many registers
it needs and whether it spills.

Two ways in:

* ``compile_report("cutecourse.kernels.elementwise:compile_target", arch="sm_100a", ...)``
  compiles a *course kernel* named by ``"module:function"`` in a fresh Python process. That
  function (a "compile target") takes JSON-able keyword arguments and returns
  ``(jit_function, args)`` or ``(jit_function, args, kwargs)``, the arguments usually fake
  tensors and the keyword arguments compile-time constants. A fresh process is needed
  because the DSL reads ``CUTE_DSL_ARCH`` once, at import: one process cannot compile for two
  architectures through the public settings. It also hides the DSL's other quirks: the dump
  directory must exist, the file cache must be off for artifacts to appear, ``KEEP`` must list
  ``ptx`` or the PTX is dropped.
* ``compile_here(jit_function, *args)`` compiles *your own* function (a notebook cell's) in this
  process, for this process's architecture (``cutecourse.ARCH``).

Both return a :class:`Report` (:mod:`cutecourse.ptx_report`, re-exported here).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Callable

from .child import COMPILER_OPT, dsl_environment, run_child  # noqa: F401  (dsl_environment: re-exported)
from .errors import CompileError
from .ptx_report import ANSI as _ANSI
from .ptx_report import PTX_FEATURES, KernelResources, Report, parse_ptxas_remarks  # noqa: F401

ARCHS = ("sm_90a", "sm_100a")



# ----------------------------------------------------------------------------------------
# Compiling
# ----------------------------------------------------------------------------------------
def _nvdisasm_available() -> bool:
    try:
        from cutlass.base_dsl.env_manager import _find_nvdisasm_binary

        _find_nvdisasm_binary()
        return True
    except Exception:
        return False


def _resolve(target: str) -> Callable:
    import importlib

    if ":" not in target:
        raise ValueError(f"compile target {target!r} must look like 'package.module:function'")
    mod, fn = target.split(":", 1)
    return getattr(importlib.import_module(mod), fn)


@contextlib.contextmanager
def _captured_output():
    """Capture Python-level and native (fd 1/2) output of a compile into one string."""
    buf = io.StringIO()
    with tempfile.TemporaryFile(mode="w+") as native:
        saved = []
        for fd in (1, 2):
            try:
                saved.append((fd, os.dup(fd)))
            except OSError:
                pass
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, _ in saved:
            os.dup2(native.fileno(), fd)
        try:
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
                yield buf
        finally:
            for fd, orig in saved:
                os.dup2(orig, fd)
                os.close(orig)
            native.seek(0)
            buf.write(native.read())


def _report(target: str, arch: str, params: dict, compiled, log: str, seconds: float) -> Report:
    art = compiled.artifacts
    if art is None or art.PTX is None:
        raise CompileError(
            "the compiler produced no PTX",
            "the DSL did not keep the PTX; this release may have renamed its keep settings",
            log)
    log = _ANSI.sub("", log)
    return Report(target, arch, params, art.PTX, art.SASS, len(art.CUBIN or b""), log, seconds,
                  parse_ptxas_remarks(log))


@contextlib.contextmanager
def _keeping_artifacts(dump_dir: str, sass: bool):
    """Ask this process's DSL to keep PTX/cubin/SASS for the compiles inside the block.

    The public switch, ``CUTE_DSL_KEEP``, is read once at import and would apply to every compile
    (turning off the JIT cache); these are the attributes it sets, set here for one compile and
    then restored. tests/test_inspect.py checks that this still works on the pinned release.
    """
    import warnings

    from cutlass.cutlass_dsl import CuTeDSL

    env = CuTeDSL._get_dsl().envar
    names = ("keep_ptx", "keep_cubin", "keep_sass", "dump_dir")
    saved = {n: getattr(env, n) for n in names}
    env.keep_ptx, env.keep_cubin, env.keep_sass, env.dump_dir = True, True, sass, dump_dir
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Cache is disabled")
            yield
    finally:
        for n, v in saved.items():
            setattr(env, n, v)


def compile_here(jit_function: Callable, *args, name: str | None = None, **kwargs) -> Report:
    """Compile ``jit_function(*args, **kwargs)`` in this process, for this process's arch."""
    import cutlass.cute as cute

    from . import ARCH

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cutecourse-here-") as dump, \
            _keeping_artifacts(dump, _nvdisasm_available()), _captured_output() as out:
        try:
            compiled = cute.compile(jit_function, *args, options=COMPILER_OPT, **kwargs)
        except Exception as exc:  # the DSL's own error text is the useful part
            raise CompileError(f"{getattr(jit_function, '__name__', 'kernel')} did not compile: "
                               f"{_first_line(exc)}",
                               "read the compiler's message above the line it points at",
                               out.getvalue()) from None
    return _report(name or getattr(jit_function, "__name__", "kernel"), ARCH, {}, compiled,
                   out.getvalue(), time.perf_counter() - t0)


def _first_line(exc: BaseException) -> str:
    text = _ANSI.sub("", str(exc)).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[0][:300] if lines else type(exc).__name__


_CACHE: dict[str, Report] = {}


def compile_report(target: str, arch: str = "sm_90a", timeout: float = 300.0, **params) -> Report:
    """Compile the course kernel ``target`` for ``arch`` in a fresh process; return a Report.

    Results are cached per (target, arch, params) for the life of this process.
    """
    if arch not in ARCHS:
        raise ValueError(f"arch must be one of {ARCHS}, not {arch!r}")
    key = json.dumps([target, arch, params], sort_keys=True, default=str)
    if key in _CACHE:
        return _CACHE[key]
    work = tempfile.mkdtemp(prefix="cutecourse-inspect-")
    try:
        dump = os.path.join(work, "dump")
        os.makedirs(dump)  # the DSL silently treats a missing dump dir as a file path
        result_path = os.path.join(work, "result.json")
        t0 = time.perf_counter()
        run = run_child("cutecourse.inspect", {"target": target, "params": params, "out": work}, timeout,
                        {"CUTECOURSE_INSPECT_WORKER": "1"}, dsl=(arch, dump, _nvdisasm_available()),
                        result_file=result_path)
        if run.hang:
            raise CompileError(f"compiling {target} for {arch} took over {timeout:.0f} s",
                               "a compile takes seconds; pass a larger timeout= if the machine is slow")
        seconds = time.perf_counter() - t0
        if not run.ok or run.result is None:
            err = ""
            if os.path.exists(os.path.join(work, "error.txt")):
                with open(os.path.join(work, "error.txt")) as f:
                    err = f.read().strip()
            raise CompileError(f"{target} did not compile for {arch}: {err or 'the compiler exited with code %d' % run.returncode}",
                               "the compiler's log is in the exception's .log attribute", run.log)
        res = run.result
        report = Report(target, arch, params, res["ptx"], res["sass"], res["cubin_bytes"], run.log,
                        seconds, parse_ptxas_remarks(run.log))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _CACHE[key] = report
    return report


def _worker() -> None:
    """Entry point of the compile process: read the spec on stdin, write result.json."""
    spec = json.loads(sys.stdin.read())
    out = spec["out"]
    try:
        import cutlass.cute as cute

        factory = _resolve(spec["target"])
        fn, args, *rest = factory(**spec["params"])  # (fn, args) or (fn, args, kwargs)
        compiled = cute.compile(fn, *args, **(rest[0] if rest else {}))
        art = compiled.artifacts
        res = {"ptx": art.PTX, "sass": art.SASS, "cubin_bytes": len(art.CUBIN or b"")}
    except Exception as exc:
        with open(os.path.join(out, "error.txt"), "w") as f:
            f.write(_first_line(exc))
        print(_ANSI.sub("", str(exc)), file=sys.stderr)
        sys.exit(1)
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump(res, f)


if __name__ == "__main__":
    _worker()

