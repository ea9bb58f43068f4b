"""Running CuTe on the host: one ``@cute.jit`` trace with the DSL's dry-run switch on, so that CuTe
folds a static layout's algebra and nothing is compiled (see :mod:`cutecourse.layouts`)."""

from __future__ import annotations

import contextlib
import functools
import warnings
from typing import Any, Callable


@contextlib.contextmanager
def dry_run():
    """Let a @cute.jit call (or ``cute.compile``) trace (and fold) but not compile: the DSL's own
    dry-run switch. The one home of that switch in the package: anything that only needs the
    trace (a layout's table, what a kernel passes to CuTe) uses it.

    ``CUTE_DSL_DRYRUN=1`` makes the DSL generate IR and stop. The DSL reads it once, at import,
    into its settings object; we flip that setting for the duration of one call and put it back.
    """
    from cutlass.cutlass_dsl import CuTeDSL

    envar = CuTeDSL._get_dsl().envar
    saved = envar.dryrun
    envar.dryrun = True
    try:
        with warnings.catch_warnings():  # "cache is disabled ..." is about kernels, not us
            warnings.simplefilter("ignore", UserWarning)
            yield
    finally:
        envar.dryrun = saved


#: The job the host function traces next: (fn, box). A slot rather than arguments, because a
#: @cute.jit function's arguments must be values the DSL knows how to pass (tensors, numbers,
#: Constexpr), and ours is an arbitrary Python callable.
_JOB: list = []


def _capture() -> None:
    fn, box = _JOB[-1]
    try:
        box["value"] = fn()
    except Exception as e:  # handed back to the caller outside the trace
        box["error"] = e


@functools.lru_cache(maxsize=1)
def _host_function():
    import cutlass.cute as cute

    @cute.jit
    def host_trace():
        # Runs on the host, at trace time: every CuTe call inside the job is folded by CuTe.
        _capture()

    return host_trace


def in_jit() -> bool:
    """True while a @cute.jit function is being traced (CuTe objects can be made right here)."""
    try:
        from cutlass._mlir import ir

        ir.InsertionPoint.current  # raises outside a trace
        return True
    except Exception:
        return False


def trace(jit_fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """Trace your own ``@cute.jit`` function without compiling it; return what it returns.

    Its ``print(...)`` calls run (that is where compile-time values such as static layouts
    are printed) and CuTe folds its static layout algebra, but no code is generated: this works
    on any machine, and for host-only functions (no kernel launch) that have nothing to compile.
    """
    with dry_run():
        return jit_fn(*args, **kwargs)


def run_on_host(fn: Callable[[], Any]) -> Any:
    """Call ``fn()`` inside a host-side ``@cute.jit`` trace and return what it returns.

    ``fn`` may build CuTe layouts and must return plain Python values (ints, tuples, strings):
    the CuTe objects do not outlive the trace. An exception raised by ``fn`` is re-raised here.
    Already inside a trace (your own ``@cute.jit`` function), ``fn`` is simply called.
    """
    if in_jit():
        return fn()
    box: dict = {}
    _JOB.append((fn, box))
    try:
        with dry_run():
            _host_function()()
    finally:
        _JOB.pop()
    if "error" in box:
        raise box["error"]
    return box.get("value")
