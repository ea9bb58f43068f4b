"""The child process of ``kernel_check``: import the learner's module, compile or run the kernel.

Run as ``python -m cutecourse.exercises.kernel_child`` with a JSON spec on stdin (written by
``kernel_check._child``): ``module`` (the learner's code, as ``learner_code.LearnerCode``
wrote it), ``kernel`` (an expression over its names), ``out`` (where to write the result JSON)
and ``job``:

* ``"compile"``: ``args`` / ``args_params`` make the compile arguments; the DSL settings for the
  target architecture came in the environment. Writes the PTX.
* ``"run"``: ``runner`` / ``runner_params`` run the kernel (and ``baseline``) and return a dict;
  :func:`gemm_runner`, the default, checks a dense GEMM against torch and times it.

An exception writes ``{"error": one line, "line": the module line of the learner's innermost
frame}``; the parent maps that line back to the learner's cell.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import sys
import time

from .. import gpu_queue


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

            from .kernel_check import _owner, spy, summarize

            t0 = time.perf_counter()
            with contextlib.ExitStack() as stack:
                calls = {t: stack.enter_context(spy(*_owner(t))) for t in spec.get("spies", ())}
                compiled = cute.compile(kernel, *_resolve(spec["args"])(kernel, **spec["args_params"]))
            art = compiled.artifacts
            result = {"ptx": art.PTX, "sass": art.SASS, "cubin_bytes": len(art.CUBIN or b""),
                      "seconds": time.perf_counter() - t0,
                      "calls": {t: [summarize(kw) for _, kw in c] for t, c in calls.items()}}
        else:
            baseline = eval(spec["baseline"], names) if spec.get("baseline") else None  # noqa: S307
            result = _resolve(spec["runner"])(kernel, baseline, **spec["runner_params"])
    except Exception as exc:  # the parent turns this into the learner's message
        result = {"error": reason(exc), "line": _module_line(exc, spec["module"])}
    with open(spec["out"], "w") as f:
        json.dump(result, f)


def _launch(kernel, a, b, c):
    """The host layer's launch of a kernel object (the learner's), its scratch tensors allocated."""
    from ..kernels import gemm_launch

    return gemm_launch.Entry(type(kernel)).launch(kernel, a, b, c)


def gemm_runner(kernel, baseline=None, m: int = 2048, n: int = 2048, k: int = 4096,
                dtype: str = "float16", time_it: bool = True) -> dict:
    """C = A @ B.T with the learner's kernel against torch; then both kernels timed (in a child)."""
    import torch

    from .. import bench

    torch.manual_seed(0)
    dt = getattr(torch, dtype)
    a = torch.randn(m, k, device="cuda", dtype=dt)
    b = torch.randn(n, k, device="cuda", dtype=dt)
    ref = (a.float() @ b.float().T)
    c = torch.empty(m, n, device="cuda", dtype=dt)
    fn = _launch(kernel, a, b, c)
    try:
        case = bench.checked_case("yours", fn, c, ref, max_rel_err=5e-3)
    except AssertionError:
        bad = ((c.float() - ref).abs() > 5e-3 * ref.abs().max()) | c.isnan()
        rows, cols = bad.nonzero(as_tuple=True)
        where = (f", the first at ({int(rows[0])}, {int(cols[0])})" if len(rows) else "")
        return {"ok": False, "message": f"wrong result: {int(bad.sum())} of {c.numel()} elements of "
                f"C differ from torch by more than 0.5% of its largest value{where}"}
    out = {"ok": True, "shape": [m, n, k]}
    message = f"C = A @ B.T matches torch for {m}x{n}x{k} {dtype} on {torch.cuda.get_device_name()}"
    if time_it:
        try:  # both timings in one turn of a shared GPU's queue (a room); checking never waits
            with gpu_queue.turn("an exercise's kernel and the course's"):
                out.update(_timed(case, baseline, a, b, c, ref, 2 * m * n * k))
        except gpu_queue.QueueTimeout:
            message += ("; not timed: the room's GPU queue stayed busy for longer than this check "
                        "waits (run the check again later to see the speed)")
        else:
            message += f"; {out['tflops']:.0f} TFLOP/s"
            if "baseline_us" in out:
                message += (f", {out['baseline_us'] / out['us']:.2f}x the course kernel's speed "
                            f"({2 * m * n * k / out['baseline_us'] / 1e6:.0f} TFLOP/s)")
    out["message"] = message
    return out


def _timed(case, baseline, a, b, c, ref, flops) -> dict:
    """The learner's kernel timed, and the course's ``baseline`` (checked first) beside it."""
    import torch

    from .. import bench

    mine = sorted(bench.time_us(case, repeats=3))[1]
    out = {"us": mine, "tflops": flops / mine / 1e6}
    if baseline is not None:
        c2 = torch.empty_like(c)
        base = bench.checked_case("course", _launch(baseline, a, b, c2), c2, ref, max_rel_err=5e-3)
        out["baseline_us"] = sorted(bench.time_us(base, repeats=3))[1]
    return out


def compile_runner(kernel, baseline=None, **_) -> dict:
    """A runner for machines without the GPU: compile both kernels (dense GEMM arguments) instead
    of running them. It exercises everything a GPU run does in the child except the launch (the
    tests use it on the CPU)."""
    import cutlass.cute as cute

    from .kernel_check import gemm_args

    names = []
    for k in (kernel, baseline):
        if k is not None:
            cute.compile(k, *gemm_args(k))
            names.append(type(k).__name__)
    return {"ok": True, "message": f"compiled {' and '.join(names)} in the child (no GPU run)"}


if __name__ == "__main__":
    main()
