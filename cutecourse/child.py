"""Run Python in a child process: the one place that decides timeouts, hangs and environments.

A pipelined kernel that deadlocks does not crash: it spins on a barrier forever, and a notebook
kernel stuck in a launch cannot be interrupted. A compiler pass can segfault on a learner's code.
So the course compiles what it inspects, and runs what can hang, in a child process with a
timeout: :func:`run_child` is that child, for ``inspect.compile_report``, the kernel checkers
(``exercises/kernel_check``), notebook 04's isolated runs, ``python -m cutecourse.check`` and the
tests' GPU scripts.

The child gets this checkout on its ``PYTHONPATH`` (so it imports the same ``cutecourse``), a
JSON ``spec`` on its stdin, and with ``arch=`` the DSL's compile settings
(:func:`dsl_environment`). Its output comes back with terminal colours stripped; a timeout kills
it and comes back as ``hang``, never as an exception.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from .ptx_report import ANSI

#: The checkout's root, so a child imports this very package.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: ptxas's resource remarks (registers, spills) and every warning. With remarks{} alone the DSL
#: hides untagged warnings, among them "software pipelining ('prefetch_stages') skipped".
COMPILER_OPT = "remarks{ptx} warnings"


def strip_ansi(text: str) -> str:
    """``text`` without terminal colour codes (the DSL colours its errors)."""
    return ANSI.sub("", text)


def dsl_environment(arch: str, dump_dir: str, sass: bool) -> dict[str, str]:
    """The DSL settings a compile-and-inspect run needs: the target, which artifacts to keep and
    where, no file cache (every compile is of the code as it is now), ptxas's resource report."""
    return {
        "CUTE_DSL_ARCH": arch,
        "CUTE_DSL_KEEP": "ptx,cubin,sass" if sass else "ptx,cubin",
        "CUTE_DSL_DUMP_DIR": dump_dir,
        "CUTE_DSL_DISABLE_FILE_CACHING": "1",
        "CUTE_DSL_COMPILER_OPT": COMPILER_OPT,
    }


@dataclass
class ChildResult:
    ok: bool          # exited with status 0 (and did not time out)
    hang: bool        # still running after the timeout: killed
    log: str          # stdout and stderr together, colours stripped
    result: Any       # the JSON the child wrote to ``result_file``, or None
    returncode: int | None = None  # None after a hang; negative: killed by that signal
    stdout: str = ""  # each stream as it came
    stderr: str = ""


def _text(out) -> str:
    return out.decode(errors="replace") if isinstance(out, bytes) else (out or "")


def run_child(module: str | None, spec: dict | None = None, timeout: float = 120.0,
              env: dict | None = None, *, source: str | None = None, argv=(), cwd: str | None = None,
              paths=(), dsl: tuple[str, str, bool] | None = None,
              result_file: str | None = None) -> ChildResult:
    """Run ``python -m module`` (or ``python -c source``) with ``argv``; ``spec`` as JSON on its
    stdin; ``env`` over this process's environment, ``paths`` and this checkout first on its
    ``PYTHONPATH``; ``dsl=(arch, dump_dir, sass)`` adds :func:`dsl_environment`. After
    ``timeout`` seconds the child is killed and the result says ``hang``. ``result_file``: where
    the child writes its JSON result, read back into ``result``."""
    full = dict(os.environ)
    full.update(env or {})
    if dsl is not None:
        full.update(dsl_environment(*dsl))
    full["PYTHONPATH"] = os.pathsep.join([*paths, ROOT, full.get("PYTHONPATH", "")])
    cmd = [sys.executable, *(["-c", source] if module is None else ["-m", module]), *map(str, argv)]
    try:
        proc = subprocess.run(cmd, input=None if spec is None else json.dumps(spec),
                              capture_output=True, text=True, env=full, timeout=timeout, cwd=cwd)
    except subprocess.TimeoutExpired as exc:
        out, err = _text(exc.stdout), _text(exc.stderr)
        return ChildResult(False, True, strip_ansi(out + err), None, None, out, err)
    result = None
    if result_file and os.path.exists(result_file):
        with open(result_file) as f:
            result = json.load(f)
    return ChildResult(proc.returncode == 0, False, strip_ansi(proc.stdout + proc.stderr), result,
                       proc.returncode, proc.stdout, proc.stderr)
