"""The DSL's own ``PipelineState`` arithmetic, run on the CPU, to check the model's against.

:func:`dsl_state_walks` compiles a host-only ``@cute.jit`` function that advances the DSL's
``PipelineState`` as a kernel does and prints each step, runs it in a fresh process, and
returns the rows; :func:`model_state_walk` is the same walk on this package's
:class:`~.state.PipelineState`. ``tests/test_pipeline_model.py`` compares the two.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import textwrap

from ...errors import CourseError
from .state import _check_positive, make_pipeline_state

_DSL_SCRIPT = textwrap.dedent("""
    import cutlass, cutlass.cute as cute
    from cutlass import pipeline

    WALKS = {walks!r}  # (user, stages, steps, advance-by)

    @cute.jit
    def walk():
        # A host-side @cute.jit function: the DSL's PipelineState, advanced as a kernel does,
        # compiled and run on the CPU (there is no kernel in it, so no GPU is needed).
        for w in cutlass.range_constexpr(len(WALKS)):
            user, stages, steps, by = WALKS[w]
            kind = pipeline.PipelineUserType.Producer if user == "producer" else pipeline.PipelineUserType.Consumer
            s = pipeline.make_pipeline_state(kind, stages)
            for i in cutlass.range_constexpr(steps):
                cute.printf("walk %d state %d %d %d", w, s.count, s.index, s.phase)
                if cutlass.const_expr(by == 1):
                    s.advance()
                else:
                    s.advance(by)
            cute.printf("walk %d state %d %d %d", w, s.count, s.index, s.phase)

    cute.compile(walk)()
""")


def dsl_state_walks(walks: list[tuple[str, int, int, int]],
                    timeout: float = 300.0) -> list[list[tuple[int, int, int]]]:
    """Run the DSL's own ``PipelineState`` through each walk ``(user, stages, steps, by)``.

    For every walk: ``make_pipeline_state(user, stages)``, then ``steps`` calls of
    ``advance()`` (``by == 1``) or ``advance(by)``, recording (count, index, phase) before each
    and after the last. All walks are compiled into one host-only ``@cute.jit`` function and
    run on the CPU in a fresh process (the DSL prints from native code, and a fresh process
    leaves this one's DSL settings alone).
    """
    for user, stages, steps, by in walks:
        _check_positive("stages", stages)
        _check_positive("advance-by", by)
        if user not in ("producer", "consumer"):
            raise CourseError(f"user must be 'producer' or 'consumer', not {user!r}")
    script = _DSL_SCRIPT.format(walks=[tuple(w) for w in walks])
    with tempfile.TemporaryDirectory(prefix="cutecourse-state-") as work:
        path = os.path.join(work, "walk.py")  # cute.compile needs the function in a real file
        with open(path, "w") as f:
            f.write(script)
        env = dict(os.environ, CUTE_DSL_ARCH=os.environ.get("CUTE_DSL_ARCH", "sm_90a"),
                   CUTE_DSL_KEEP="", CUTE_DSL_DISABLE_FILE_CACHING="1")
        proc = subprocess.run([sys.executable, path], capture_output=True, text=True,
                              env=env, timeout=timeout, cwd=work)
    out: list[list[tuple[int, int, int]]] = [[] for _ in walks]
    for m in re.finditer(r"walk (\d+) state (-?\d+) (-?\d+) (-?\d+)", proc.stdout):
        out[int(m.group(1))].append(tuple(map(int, m.groups()[1:])))
    if proc.returncode != 0 or any(len(rows) != w[2] + 1 for rows, w in zip(out, walks)):
        last = (proc.stderr or proc.stdout or "no output").strip().splitlines()[-1]
        raise CourseError(f"the DSL state walk did not run: {last}",
                          "check that nvidia-cutlass-dsl imports in this environment")
    return out


def model_state_walk(user: str, stages: int, steps: int, by: int = 1) -> list[tuple[int, int, int]]:
    """The same walk as :func:`dsl_state_walks`, on this module's :class:`PipelineState`."""
    s = make_pipeline_state(user, stages)
    rows = [s.as_tuple()]
    for _ in range(steps):
        s.advance(by)
        rows.append(s.as_tuple())
    return rows
