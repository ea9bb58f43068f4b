"""Check a kernel the learner wrote: compile it, read what the compiler made, run it in a child.

A *kernel* exercise is one where the learner writes CuTe DSL: one hook of a course kernel, or a
function a kernel calls. It is declared as a :class:`KernelExercise` (docs/DEVELOPING.md, "Adding
an exercise", walks through one), whose ``check`` runs the steps every such checker shares, each
one call here:

0. **Name the learner's code**: ``LearnerCode(MyGemm)`` (``learner_code.py``), the class or
   function of the cell, which writes itself out as a module a child process can import. A stub
   left in (``raise NotImplementedError``) reads "not answered yet" before anything compiles.
1. **The CPU model first**: where the learner's code is arithmetic, run it on numbers on every
   element of a shape that is not symmetric (``elementwise_run``, ``tv_run``, ``epilogue_run``,
   ``cpu_run``); a mainloop replays on ``models/pipeline`` (``pipeline_replay``,
   ``pipeline_checks``). An exception there is a finding at the learner's line.
2. **Compile for the real target, on the CPU**: :func:`compile_kernel` (``kernel`` a Python
   expression over the learner's names, ``args`` a ``"module:function"`` giving the compile
   arguments, :func:`gemm_args` for a dense GEMM), in a child, afresh. A compile error is a
   :class:`LearnerError` naming the learner's line, never MLIR; ``spies=`` records the arguments
   the learner passed to a course function.
3. **Facts from the PTX**: :func:`mainloop`, :func:`ops`, :func:`compact`, :func:`first`,
   :func:`wait_group_depths`, :func:`loops` (``ptx_loops``), ``report.count(...)``,
   ``report.diagnostics()``, ``ptx_loops.loop_structure``.
4. **On a matching GPU, against torch in a child with a timeout** (:func:`gpu_verdict`,
   :func:`run_on_gpu`; the child is ``kernel_child``, its ``runner`` a ``"module:function"``
   taking ``(kernel, baseline, **params)``): a hang, wrong values or a run-time error come back
   as a message; without the GPU the pass says what was not run.

Tests feed the checker the solution's cell (``tests/solution_cells.py``) and text-edited wrong
answers, and assert on words of the messages (``tests/test_exercises_nb03_kernels.py``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
from dataclasses import dataclass, field
from typing import Callable

from .. import gpu_queue
from ..child import run_child
from ..errors import CompileError
from . import Result, checker, failed, passed
from .learner_code import LearnerCode, child_error, learner_message, map_line, reason
from ..ptx_loops import OPS, Loop, compact, first, loops, mainloop, ops, wait_group_depths  # noqa: F401

__all__ = ["CompilerCrash", "LearnerCode", "LearnerError", "Loop", "GpuRun", "compact", "compile_kernel", "first",
           "gemm_args", "gpu_here", "gpu_verdict", "kernel_checker", "KernelExercise", "Attempt", "loops", "mainloop", "ops",
           "run_on_gpu", "spy", "wait_group_depths"]


class LearnerError(Exception):
    """A short, learner-facing reason a check stops (a compile error in the learner's code)."""


def kernel_checker(title: str, hint: str = ""):
    """``@checker`` that also turns :class:`LearnerError` into a red Result with its message."""

    def wrap(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except LearnerError as exc:
                return failed(title, str(exc), hint)

        return checker(title, hint)(inner)

    return wrap


# -- 1 and 2: compiling ------------------------------------------------------------------------
def gemm_args(kernel, in_dtype: str = "float16", out_dtype: str = "float16"):
    """Compile arguments of a dense course GEMM, as ``gemm_launch`` passes them: fake A (M, K),
    B (N, K), C (M, N), the kernel's scratch tensors (if it has any), a stream, and the operands
    of its epilogue op (if it has one)."""
    import cuda.bindings.driver as cuda

    from ..kernels import gemm_launch

    scratch = gemm_launch.fake_scratch(kernel) if hasattr(kernel, "scratch") else ()
    op = getattr(kernel, "epilogue_op", None)
    epilogue = (gemm_launch.fake_epilogue_operands(op)
                if op is not None and hasattr(gemm_launch, "fake_epilogue_operands") else ())
    return (*gemm_launch.fake_operands(in_dtype, out_dtype), *scratch, cuda.CUstream(0), *epilogue)


def _resolve(target: str):
    import importlib

    mod, fn = target.split(":", 1)
    return getattr(importlib.import_module(mod), fn)


def build_kernel(code: LearnerCode, kernel: str):
    """Evaluate the ``kernel`` expression over the learner's names (in this process)."""
    names = dict(code.globals)
    names.update({obj.__name__: obj for obj in code.objects if hasattr(obj, "__name__")})
    try:
        return eval(kernel, names)  # noqa: S307  (an expression the checker wrote, not the learner)
    except LearnerError:
        raise
    except Exception as exc:
        raise LearnerError(f"building your kernel ({kernel}) failed: "
                           f"{code.describe(*code.locate(exc)) + ': ' if code.locate(exc) else ''}"
                           f"{reason(exc)}") from None


def compile_kernel(code: LearnerCode, kernel: str, args: str = "cutecourse.exercises.kernel_check:gemm_args",
                   arch: str = "sm_90a", timeout: float = 300.0, child: bool = True,
                   spies: tuple[str, ...] = (), **args_params):
    """Compile the learner's kernel for ``arch``; an ``inspect.Report``, or :class:`LearnerError`.

    ``child`` (default): compile in a child process, so a compiler crash on the learner's code
    (it happens: a segfault in a pass) is a message, not a dead notebook kernel;
    ``child=False`` compiles here (``arch`` must be this process's). ``spies``: course functions
    (``"module:name"``) whose calls during the compile are recorded: ``report.calls[target]`` is
    a list of {keyword: type name, or None where the argument was None}.
    """
    from .. import ARCH
    from ..inspect import compile_here

    if code.unanswered:
        raise NotImplementedError  # @checker: "not answered yet"
    if child or arch != ARCH:
        return _compile_in_child(code, kernel, args, arch, timeout, args_params, spies)
    obj = build_kernel(code, kernel)
    with contextlib.ExitStack() as stack:
        calls = {t: stack.enter_context(spy(*_owner(t))) for t in spies}
        try:
            report = compile_here(obj, *_resolve(args)(obj, **args_params), name=code.name)
        except CompileError as exc:
            if _unanswered(exc):  # the exercise's stub is still there: "not answered yet"
                raise NotImplementedError from None
            raise LearnerError(learner_message(code, exc.__context__ or exc)) from None
    report.calls = {t: [summarize(kw) for _, kw in c] for t, c in calls.items()}
    return report


def _owner(target: str):
    import importlib

    mod, name = target.split(":", 1)
    return importlib.import_module(mod), name


def summarize(kwargs: dict) -> dict:
    """{keyword: type name of the value, or None}: what a spied call was given, JSON-able."""
    return {k: None if v is None else type(v).__name__ for k, v in kwargs.items()}


class CompilerCrash(LearnerError):
    """The compiler itself died on the learner's code (a signal, not an error message)."""


def _unanswered(exc: BaseException) -> bool:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, NotImplementedError) or "NotImplementedError" in str(exc).split("\n")[0]:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _compile_in_child(code, kernel, args, arch, timeout, args_params, spies=()):
    from ..inspect import Report, parse_ptxas_remarks

    res, log = _child(code, {"job": "compile", "kernel": kernel, "args": args, "spies": list(spies),
                             "args_params": args_params, "arch": arch}, timeout)
    if res is None:
        raise LearnerError(f"compiling your {code.name} for {arch} took over {timeout:.0f} s")
    if "error" in res:
        if "NotImplementedError" in res["error"]:
            raise NotImplementedError
        if res.get("crashed"):
            raise CompilerCrash(f"the compiler crashed on your {code.name} ({res['error']}): "
                                "a mistake it does not report. Compare your code with the hint")
        raise LearnerError(child_error(code, res, "does not compile"))
    report = Report(code.name, arch, {}, res["ptx"], res.get("sass"), res["cubin_bytes"], log,
                    res["seconds"], parse_ptxas_remarks(log))
    report.calls = res.get("calls", {})
    return report


@contextlib.contextmanager
def spy(owner, name: str):
    """Record every call of ``owner.name`` (a module function or a class attribute) made while
    the block runs, e.g. during a compile: a list of (args, kwargs); the call still happens.
    For what the PTX cannot show, like which arguments the learner passed to a course helper."""
    from unittest import mock

    calls: list = []
    real = getattr(owner, name)

    def record(*args, **kwargs):
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    with mock.patch.object(owner, name, record):
        yield calls


# -- child processes ---------------------------------------------------------------------------
def _child(code: LearnerCode, spec: dict, timeout: float):
    """Run ``kernel_child`` on the learner's module; (result dict or None on timeout, log)."""
    with tempfile.TemporaryDirectory(prefix="cutecourse-learner-") as work:
        source, spans = code.module_source() if code is not None else ("", [])
        source += "\n" + COURSE_KERNELS  # a baseline names a course kernel the learner's code may not import
        module = os.path.join(work, "learner_module.py")
        with open(module, "w") as f:
            f.write(source)
        env, dsl = {}, None
        if spec["job"] == "compile":
            os.makedirs(os.path.join(work, "dump"))
            dsl = (spec["arch"], os.path.join(work, "dump"), False)
        if spec["job"] == "run" and gpu_queue.folder() is not None:
            # a room's GPU queue: wait at most half this check's time for a turn, so a busy queue
            # reads as "not timed", never as the hang this timeout is there to catch
            env[gpu_queue.TIMEOUT_ENV] = str(max(10.0, timeout / 2))
        spec = {**spec, "module": module, "out": os.path.join(work, "result.json")}
        run = run_child("cutecourse.exercises.kernel_child", spec, timeout, env, cwd=work, paths=(work,),
                        dsl=dsl, result_file=spec["out"])
        if run.hang:
            return None, ""
        res, log = run.result, run.log
        if res is None and run.returncode < 0:
            return {"error": f"signal {-run.returncode}", "crashed": True}, log
        if res is None:
            tail = [ln for ln in log.splitlines() if ln.strip()][-1:] or [f"exit code {run.returncode}"]
            return {"error": f"the child process died: {tail[0][:200]}", "line": None}, log
        if res.get("line"):
            res["where"] = map_line(spans, res["line"])
        return res, log


#: The module a child imports when no learner code is involved (a lab times course kernels).
COURSE_KERNELS = ("from cutecourse.kernels.hopper_gemm import CompilerHopperGemm, HopperGemm, NaiveHopperGemm\n"
                  "from cutecourse.kernels.hopper_gemm_cluster import ClusterHopperGemm\n")


# -- 5: running on the GPU, in a child ---------------------------------------------------------
def gpu_here(target: str = "sm_90a") -> bool:
    """Whether this machine runs kernels for ``target`` (``cutecourse.modes``)."""
    from ..modes import mode_for

    return mode_for(target).run


@dataclass
class GpuRun:
    ok: bool
    message: str
    data: dict = field(default_factory=dict)


HANG = ("your kernel did not finish in {t:.0f} s (the checker stopped it): a consumer probably "
        "waits on a barrier no producer arrives on, or a producer on a stage no consumer "
        "releases. The CPU model's verdict above says which wait.")


def run_on_gpu(code: LearnerCode | None, kernel: str, baseline: str | None = None,
               runner: str = "cutecourse.exercises.kernel_child:gemm_runner", timeout: float = 120.0,
               **runner_params) -> GpuRun:
    """Run the learner's kernel (and time it beside ``baseline``) in a child; see the docstring.
    ``code=None``: no learner code, the expressions name course kernels (``COURSE_KERNELS``)."""
    res, log = _child(code, {"job": "run", "kernel": kernel, "baseline": baseline,
                             "runner": runner, "runner_params": runner_params}, timeout)
    if res is None:
        return GpuRun(False, HANG.format(t=timeout))
    if "error" in res:
        return GpuRun(False, child_error(code, res, "failed on the GPU"), {"log": log[-2000:]})
    return GpuRun(bool(res.get("ok")), res.get("message", ""), res)


def gpu_verdict(code: LearnerCode | None, kernel: str, title: str, message: str, elsewhere: str,
                hang: str = "", target: str = "sm_90a", then: str = " On the GPU: ", **run_params) -> Result:
    """A kernel check's last step: ``message`` (what the CPU proved) passes, and on a GPU for
    ``target`` the learner's kernel also runs against torch (``run_on_gpu(code, kernel,
    **run_params)``) and what it measured is added after ``then``; without one, ``elsewhere`` says
    what the GPU would add. ``hang``: what a hang means in this exercise, said in place of the
    general guess."""
    if not gpu_here(target):
        return passed(title, f"{message} ({elsewhere})")
    run = run_on_gpu(code, kernel, **run_params)
    if not run.ok:
        if hang and "did not finish" in run.message:
            return failed(title, run.message.split(":")[0] + ": " + hang)
        return failed(title, run.message)
    return passed(title, message + then + run.message)


# -- the declarative exercise ------------------------------------------------------------------
class Attempt:
    """One check of one answer, as the objections see it: the learner's object (``answer``), its
    :class:`LearnerCode` (``code``), the compile ``report`` (None before the compile), and
    ``notes``, where an objection leaves what a later one or the pass message reads."""

    def __init__(self, answer, code: LearnerCode):
        self.answer, self.code, self.report, self.notes = answer, code, None, {}


def _objection(rule, attempt: Attempt) -> str | None:
    """A rule is a function of the attempt that returns the learner's message or None, or a pair
    (predicate, message): the message (text, or a function of the attempt) where it holds."""
    if isinstance(rule, tuple):
        holds, message = rule
        if not holds(attempt):
            return None
        return message(attempt) if callable(message) else message
    return rule(attempt)


@dataclass(frozen=True)
class KernelExercise:
    """A kernel exercise, declared: what to compile, what to object to, in which order, what a
    pass says, and how the GPU runs it. ``check(answer)`` runs the pipeline every kernel
    exercise shares: the learner's code named (``LearnerCode``), "not answered yet" while the stub
    is there, the ``model`` objections (the CPU runs the learner's code on numbers), the compile
    for ``arch`` (a compile error names the learner's line), the ``objections`` (facts of the
    compiled code, and models whose message is clearer once the code is known to compile), then
    :func:`gpu_verdict` with the message ``passes`` writes. The first objection found is the
    verdict. A checker module keeps only its objections and models."""

    title: str
    hint: str
    kernel: Callable      # answer -> the expression that builds the learner's kernel
    passes: Callable      # attempt -> what the pass proved
    args: str = "cutecourse.exercises.kernel_check:gemm_args"
    spies: tuple = ()
    model: tuple = ()       # objections before the compile
    objections: tuple = ()  # objections after it
    crash: tuple = ()       # objections tried when the compiler crashes, before saying so
    arch: str = "sm_90a"
    baseline: str | Callable | None = None  # the course kernel timed beside the learner's
    runner: str = "cutecourse.exercises.kernel_child:gemm_runner"
    run_params: dict = field(default_factory=dict)
    elsewhere: str = ""     # what a run on a GPU would add, said where there is none
    hang: str = ""          # what a hang means in this exercise
    gpu: str = "sm_90a"     # the GPU the run needs (``gpu_here``)
    then: str = " On the GPU: "

    def checker(self, fn: Callable) -> Callable:
        """Decorate the notebook's check function (its name and docstring are the learner's
        handle): ``@EXERCISE.checker`` then ``def check_x(cls): return EXERCISE.check(cls)``."""
        return kernel_checker(self.title, self.hint)(fn)

    def check(self, answer) -> Result:
        attempt = Attempt(answer, LearnerCode(answer))
        if attempt.code.unanswered:
            raise NotImplementedError  # @checker: "not answered yet"
        for rule in self.model:
            if (objection := _objection(rule, attempt)):
                return failed(self.title, objection)
        expr = self.kernel(answer)
        try:
            attempt.report = compile_kernel(attempt.code, expr, args=self.args, arch=self.arch,
                                            spies=self.spies)
        except CompilerCrash:
            for rule in self.crash:
                if (objection := _objection(rule, attempt)):
                    raise LearnerError(objection) from None
            raise
        for rule in self.objections:
            if (objection := _objection(rule, attempt)):
                return failed(self.title, objection)
        baseline = self.baseline(answer) if callable(self.baseline) else self.baseline
        return gpu_verdict(attempt.code, expr, self.title, self.passes(attempt), self.elsewhere,
                           self.hang, target=self.gpu, then=self.then, baseline=baseline,
                           runner=self.runner, **self.run_params)
