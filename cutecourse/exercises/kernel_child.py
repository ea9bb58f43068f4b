"""The child process of ``kernel_check``: import the learner's module, compile or run the kernel.

Run as ``python -m cutecourse.exercises.kernel_child`` with a JSON spec on stdin (written by
``kernel_check._child``): ``module`` (the learner's code, as ``learner_code.LearnerCode``
wrote it), ``kernel`` (an expression over its names), ``out`` (where to write the result JSON)
and ``job``:

* ``"compile"``: ``args`` / ``args_params`` make the compile arguments; the DSL settings for the
  target architecture came in the environment. Writes the PTX.
* ``"run"``: ``runner`` / ``runner_params`` run the kernel (and ``baseline``) and return a dict.

An exception writes ``{"error": one line, "line": the module line of the learner's innermost
frame}``; the parent maps that line back to the learner's cell.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time


def _module_line(exc: BaseException, module_file: str) -> int | None:
    seen, line = set(), None
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, SyntaxError) and exc.filename == module_file:
            return exc.lineno
        tb = exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == module_file:
                line = tb.tb_lineno
            tb = tb.tb_next
        if line:
            return line
        exc = exc.__cause__ or exc.__context__
    return None


def main() -> None:
    spec = json.loads(sys.stdin.read())
    import cutecourse  # noqa: F401  (fixes the DSL's architecture before cutlass loads)

    from .kernel_check import _resolve
    from .learner_code import reason

    result: dict
    try:
        load = importlib.util.spec_from_file_location("learner_module", spec["module"])
        module = importlib.util.module_from_spec(load)
        sys.modules["learner_module"] = module
        load.loader.exec_module(module)
        names = vars(module)
        kernel = eval(spec["kernel"], names)  # noqa: S307  (the checker's expression)
        if spec["job"] == "compile":
            import cutlass.cute as cute

            t0 = time.perf_counter()
            compiled = cute.compile(kernel, *_resolve(spec["args"])(kernel, **spec["args_params"]))
            art = compiled.artifacts
            result = {"ptx": art.PTX, "sass": art.SASS, "cubin_bytes": len(art.CUBIN or b""),
                      "seconds": time.perf_counter() - t0}
        else:
            baseline = eval(spec["baseline"], names) if spec.get("baseline") else None  # noqa: S307
            result = _resolve(spec["runner"])(kernel, baseline, **spec["runner_params"])
    except Exception as exc:  # the parent turns this into the learner's message
        result = {"error": reason(exc), "line": _module_line(exc, spec["module"])}
    with open(spec["out"], "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
