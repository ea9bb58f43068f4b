"""Check a kernel the learner wrote: compile it, read what the compiler made, run it in a child.

This is the manual for writing a *kernel* checker (an exercise where the learner writes CuTe DSL:
one hook of a course kernel, or a function a kernel calls). Every such checker does the same
steps; each has one call here.

**0. Name the learner's code.** ``code = LearnerCode(MyGemm)`` (``learner_code.py``): the class or
function from the notebook cell (plus any helper from another cell it calls, found by name). It
knows the cell lines, and writes itself out as a module for a child process: its source after a
preamble that re-imports the names it uses from the notebook (modules, course classes and
functions, constants); ``code.missing`` lists names it could not re-create. A function hook is
passed the same way: ``LearnerCode(my_op)`` and the kernel expression ``"Kernel(epilogue_op=my_op)"``.
A stub left in (``raise NotImplementedError``, what ``exercises.build`` puts in place of the
answer) makes the check say "not answered yet" before anything compiles.

**1. Compile it for its real target, on the CPU.** ::

    report = compile_kernel(code, "MyGemm(tile_mn=(128, 256), variant='prefetch')",
                            args="cutecourse.exercises.kernel_check:gemm_args")

``kernel`` is a Python expression over the learner's names that builds the kernel object;
``args`` is ``"module:function"``, called as ``function(kernel, **args_params)``, that returns
the compile arguments (fake tensors, stream). :func:`gemm_args` serves every dense GEMM taking
``(A, B, C, stream)``. The result is an ``inspect.Report`` (PTX, SASS, registers, log).
It compiles in a child process given the learner's source (a compiler crash on learner code
then costs a message, not the notebook's kernel; ``arch="sm_100a"`` works the same way), or
here with ``child=False``. Every call compiles afresh (no cache), so a changed cell is what gets
checked. ``spies=("cutecourse.kernels.sm90:issue_tma",)`` records the keyword arguments the
learner's code passed to a course function during the compile (``report.calls``), in either mode.

**2. A compile error names the learner's line.** ``compile_kernel`` raises :class:`LearnerError`
with a message like ``your code does not compile: line 13 of your cell (`warpgroup.wait_group(k)`):
std::bad_cast: a run-time value where ...``: no MLIR, no traceback. Decorate the check with
:func:`kernel_checker` (not ``checker``): it turns a ``LearnerError`` into the red Result.
An error in the course's own code (not in the learner's lines) is reported as such.

**3. Facts from the PTX.** :func:`mainloop` is the generated loop that issues the wgmmas (a
:class:`Loop` of instruction lines); :func:`ops` names each interesting instruction of a list
of lines (``wait``, ``expect_tx``, ``tma``, ``tma_multicast``, ``fence``, ``wgmma``, ``commit``,
``wait_group 1``, ``arrive``), :func:`compact` collapses runs (``wgmma x4``) for messages,
:func:`first` / :func:`wait_group_depths` / :func:`loops` answer the usual questions ("does the
arrive come after the wait_group?", "what depth does the loop wait at?"). ``report.count(...)``
and ``report.diagnostics()`` (inspect.py) count instructions and read compiler warnings;
``ptx_loops.loop_structure`` says whether a loop was software-pipelined. What the
PTX cannot show (the arguments the learner passed to a course helper) ``compile_kernel(...,
spies=("module:function",))`` records, in the child too (:func:`spy` is the in-process tool).

**4. The CPU model.** ``pipeline_replay.replay(hook_function, stages=, k_tiles=)`` runs a
learner's mainloop, as written, on ``models/pipeline`` (deadlocks and races, named). Notebook-
specific models (multicast, schedulers, group walk) are called by the checker directly. Where the
learner's code is arithmetic over indices, run it on numbers on every element, on a shape that is
not symmetric, before compiling: ``elementwise_run`` (notebook 01's kernels, the host's launch and
every thread), ``tv_run`` (notebook 02's TV kernel), ``epilogue_run`` (an epilogue op's ``apply``
with a bias that records every index), ``cpu_run`` (notebook 07's hooks). An exception there is a
finding at the learner's line; only a DSL operation the model cannot run leaves the numbers
unchecked, and the pass message then says so.

**5. On a matching GPU, run it against torch in a child with a timeout.** ::

    run = run_on_gpu(code, "MyGemm(tile_mn=(128, 256))", baseline="HopperGemm(tile_mn=(128, 256))")

The child (``kernel_child.py``) imports the learner's module, builds both kernels, and calls
``runner`` (default ``kernel_child.gemm_runner``: C = A @ B.T in fp16 against torch, then both timed by
``bench.time_us``). ``run.ok``; ``run.message`` says "matches torch ... 612 TFLOP/s, 0.98x the
course kernel", or names the failure: a hang ("your kernel did not finish in 60 s: ..."), wrong
values (where), or the learner's line of a run-time error. Without a GPU, ``run_on_gpu`` is not
called: ``gpu_here()`` says whether to. A runner for other operands is ``"module:function"``
taking ``(kernel, baseline, **runner_params)`` and returning a dict with ``ok`` and ``message``.
``run_on_gpu(None, "HopperGemm(stages=2)", ...)`` runs course kernels only (a lab's knob).
``runner="cutecourse.exercises.kernel_child:compile_runner"`` compiles instead of running: the
whole child path, testable on a machine without a GPU.

**Tests** (``tests/test_exercises_nb03_kernels.py`` is an example): read the solution's cell from
``solutions/NN_*.ipynb`` (regions stripped), run it with ``learner_code.as_cell`` (what IPython
does: a file name, the text in linecache, so the DSL and the line numbers work), feed the checker
the solution and text-edited wrong answers, and assert on words of the messages.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

from .. import gpu_queue
from ..errors import CompileError
from ..ptx_loops import OPS, Loop, compact, first, loops, mainloop, ops, wait_group_depths  # noqa: F401
from ..ptx_report import ANSI
from . import Result, checker, failed, passed
from .learner_code import LearnerCode, map_line, reason

__all__ = ["CompilerCrash", "LearnerCode", "LearnerError", "Loop", "GpuRun", "compact", "compile_kernel", "first",
           "gemm_args", "gpu_here", "gpu_verdict", "kernel_checker", "loops", "mainloop", "ops",
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


def _learner_message(code: LearnerCode, exc: BaseException) -> str:
    where = code.locate(exc)
    why = _with_hint(reason(exc))
    if where is None:
        return (f"your {code.name} does not compile, and the error is not on one of its lines: "
                f"{why}. Check the arguments your code passes to the course's functions.")
    return f"your {code.name} does not compile: {code.describe(*where)}: {why}"


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
            raise LearnerError(_learner_message(code, exc.__context__ or exc)) from None
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
        raise LearnerError(_child_error(code, res, "does not compile"))
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
    from ..inspect import dsl_environment

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with tempfile.TemporaryDirectory(prefix="cutecourse-learner-") as work:
        source, spans = code.module_source() if code is not None else ("", [])
        source += "\n" + COURSE_KERNELS  # a baseline names a course kernel the learner's code may not import
        module = os.path.join(work, "learner_module.py")
        with open(module, "w") as f:
            f.write(source)
        env = dict(os.environ)
        if spec["job"] == "compile":
            os.makedirs(os.path.join(work, "dump"))
            env.update(dsl_environment(spec["arch"], os.path.join(work, "dump"), False))
        env["PYTHONPATH"] = os.pathsep.join([work, root, env.get("PYTHONPATH", "")])
        if spec["job"] == "run" and gpu_queue.folder() is not None:
            # a room's GPU queue: wait at most half this check's time for a turn, so a busy queue
            # reads as "not timed", never as the hang this timeout is there to catch
            env[gpu_queue.TIMEOUT_ENV] = str(max(10.0, timeout / 2))
        spec = {**spec, "module": module, "out": os.path.join(work, "result.json")}
        try:
            proc = subprocess.run([sys.executable, "-m", "cutecourse.exercises.kernel_child"],
                                  input=json.dumps(spec), capture_output=True, text=True, env=env,
                                  timeout=timeout, cwd=work)
        except subprocess.TimeoutExpired:
            return None, ""
        log = ANSI.sub("", proc.stdout + proc.stderr)
        if not os.path.exists(spec["out"]) and proc.returncode < 0:
            return {"error": f"signal {-proc.returncode}", "crashed": True}, log
        if not os.path.exists(spec["out"]):
            tail = [ln for ln in log.splitlines() if ln.strip()][-1:] or [f"exit code {proc.returncode}"]
            return {"error": f"the child process died: {tail[0][:200]}", "line": None}, log
        with open(spec["out"]) as f:
            res = json.load(f)
        if res.get("line"):
            res["where"] = map_line(spans, res["line"])
        return res, log


#: The module a child imports when no learner code is involved (a lab times course kernels).
COURSE_KERNELS = ("from cutecourse.kernels.hopper_gemm import HopperGemm\n"
                  "from cutecourse.kernels.hopper_gemm_cluster import ClusterHopperGemm\n")


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


def _with_hint(text: str) -> str:
    for key, hint in DSL_HINTS.items():
        if key in text and hint not in text:
            return f"{text} ({hint})"
    return text


def _child_error(code: LearnerCode | None, res: dict, what: str) -> str:
    res = dict(res, error=_with_hint(res["error"]))
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
        return GpuRun(False, _child_error(code, res, "failed on the GPU"), {"log": log[-2000:]})
    return GpuRun(bool(res.get("ok")), res.get("message", ""), res)


def gpu_verdict(code: LearnerCode | None, kernel: str, title: str, message: str, elsewhere: str,
                hang: str = "", **run_params) -> Result:
    """A kernel check's last step: ``message`` (what the CPU proved) passes, and on an H100 the
    learner's kernel also runs against torch (``run_on_gpu(code, kernel, **run_params)``) and what it
    measured is added; without one, ``elsewhere`` says what an H100 would add. ``hang``: what a
    hang means in this exercise, said in place of the general guess."""
    if not gpu_here("sm_90a"):
        return passed(title, f"{message} ({elsewhere})")
    run = run_on_gpu(code, kernel, **run_params)
    if not run.ok:
        if hang and "did not finish" in run.message:
            return failed(title, run.message.split(":")[0] + ": " + hang)
        return failed(title, run.message)
    return passed(title, message + " On the GPU: " + run.message)
