"""Checkers for notebook 01's exercises (layouts, tilers, the vectorized kernel)."""

from __future__ import annotations

from .. import layouts, modes
from . import Result, checker, failed, passed


def _first_difference(mine: layouts.LayoutTable, want: layouts.LayoutTable) -> str:
    for coord, got, exp in zip(want.coords, mine.offsets, want.offsets):
        if got != exp:
            return f"at coordinate {coord} your layout gives offset {got}, the tensor's is {exp}"
    return ""


def compare_layouts(answer, intended: str, title: str, hint: str) -> Result:
    """The learner's layout must be the same *function* as ``intended``: same shape, and the
    same offset at every coordinate (two different-looking layouts may pass)."""
    want = layouts.evaluate(intended)
    mine = layouts.evaluate(answer)
    if layouts.flatten(mine.shape) != layouts.flatten(want.shape):
        return failed(title, f"your layout has shape {layouts.to_text(mine.shape)}; the tensor's shape "
                      f"is {layouts.to_text(want.shape)}", hint)
    where = _first_difference(mine, want)
    if where:
        return failed(title, f"{mine.layout} is a different function: {where}", hint)
    return passed(title, f"{mine.layout} maps every coordinate to the right offset")


EX1 = ("Exercise 1: a column-major 6 x 4 matrix",
       "In column-major order the row index moves fastest: stride 1 along mode 0; the next column "
       "starts one whole column (6 elements) later.")
EX2 = ("Exercise 2: tilers for 16-byte vectors",
       "A 16-byte vector holds 16 / sizeof(element) elements, all in one row of a row-major tensor: "
       "the tiler is (1, that many).")
EX3 = ("Exercise 3: your vectorized kernel",
       "Slice the thread's tile with gA[(None, (mi, ni))], .load() it, add, and store the sum into "
       "gC's slice; zipped_divide's mode 1 enumerates the tiles.")


@checker(*EX1)
def check_column_major(answer) -> Result:
    return compare_layouts(answer, "(6,4):(1,6)", *EX1)


@checker(*EX2)
def check_tilers(tiler_bf16, tiler_fp32) -> Result:
    title, hint = EX2
    for name, tiler, itemsize in (("tiler_bf16", tiler_bf16, 2), ("tiler_fp32", tiler_fp32, 4)):
        want = (1, 16 // itemsize)
        if tuple(tiler) != want:
            rows, cols = tuple(tiler)
            return failed(title, f"{name} = {tuple(tiler)} gives each thread {rows * cols} elements = "
                          f"{rows * cols * itemsize} bytes in {rows} row(s); a 16-byte vector is "
                          f"{want[1]} elements of one row", hint)
    return passed(title, "bf16: (1, 8), fp32: (1, 4): one 16-byte vector per thread each")


@checker(*EX3)
def check_vector_kernel(host_fn, m: int = 256, n: int = 256) -> Result:
    """Compile the learner's host function for fp16 (m, n): it must issue 128-bit loads and
    stores only; on a GPU it must also compute A + B exactly."""
    import cutlass
    from cutlass.cute.runtime import make_fake_compact_tensor

    from ..inspect import compile_here

    title, hint = EX3
    fake = make_fake_compact_tensor(cutlass.Float16, (m, n), stride_order=(1, 0), assumed_align=16)
    try:
        report = compile_here(host_fn, fake, fake, fake)
    except Exception as exc:  # the compiler's first line is the useful part
        return failed(title, f"it does not compile: {str(exc).splitlines()[0]}", hint)
    wide = report.count(r"^ld\.global(\.[\w:]+)*\.v4\.b32")
    narrow = report.count("scalar global loads")
    if narrow or wide != 2:
        return failed(title, f"the PTX has {wide} 128-bit and {narrow} narrower global loads per "
                      "thread; one 128-bit load of A and one of B was the goal", hint)
    if report.count("vector global stores") != 1 or report.count("scalar global stores"):
        return failed(title, "the loads are right but the store is not one 128-bit store", hint)
    if not modes.mode_for("any").run:
        return passed(title, "compiles to one 128-bit load of A, one of B and one 128-bit store per "
                      "thread (no GPU here to run it)")
    return _run_on_gpu(host_fn, m, n, title, hint)


def _run_on_gpu(host_fn, m: int, n: int, title: str, hint: str) -> Result:
    import cutlass.cute as cute
    import torch
    from cutlass.cute.runtime import from_dlpack

    a, b = (torch.randn(m, n, device="cuda", dtype=torch.float16) for _ in range(2))
    c = torch.full_like(a, float("nan"))
    args = [from_dlpack(t, assumed_align=16) for t in (a, b, c)]
    cute.compile(host_fn, *args)(*args)
    torch.cuda.synchronize()
    bad = (c != a + b).nonzero()
    if len(bad):
        r, col = bad[0].tolist()
        return failed(title, f"{len(bad)} of {c.numel()} results are wrong, the first at ({r}, {col}): "
                      f"{c[r, col].item()} instead of {(a + b)[r, col].item()}", hint)
    return passed(title, f"128-bit loads and stores, and A + B is exact on {torch.cuda.get_device_name()}")
