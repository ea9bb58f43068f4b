"""Checkers for notebook 02 (thread-value layouts): ``solutions/02_tv_layouts.ipynb``.

* 2.1 write a TV layout by hand: compared with ``make_layout_tv`` as a function of
  (thread, value), evaluated by CuTe on the CPU; a wrong one gets the first (thread, value)
  where the two differ, as offsets and as tile coordinates (m, n).
* 2.2 choose thread and value layouts that read a *column-major* tensor with coalesced
  128-bit loads: checked by computing what each warp instruction touches (``viz.tv``).
* 2.3 write the TV kernel body for C = A * B: compiled for sm_90a on any machine and checked
  for 128-bit loads and stores in its PTX; on a GPU also launched and compared with torch.
"""

from __future__ import annotations

from typing import Callable

from .. import layouts, modes
from ..errors import CourseError
from ..layouts import to_text
from . import Result, checker, failed, passed
from .layout_checks import as_table, compare

# -- 2.1 -----------------------------------------------------------------------------------------
TV_THR, TV_VAL = "(4,8):(8,1)", "(2,4):(4,1)"
TV_HINT = ("mode 0 is the thread index, split like the thread layout but counted CuTe's way "
           "(colexicographic: the fastest thread index first, here the 8 threads along n); mode 1 "
           "is the value index, split the same way over the value layout (the 4 values along n "
           "first). Strides are steps in the tile's column-major index m + 8*n: one step along n "
           "is 8, one step along m is 1")


@checker("2.1 a TV layout by hand", TV_HINT)
def check_tv_layout(layout) -> Result:
    """The TV layout of make_layout_tv((4,8):(8,1), (2,4):(4,1)), as shape:stride text."""
    tv = layouts.make_layout_tv(TV_THR, TV_VAL)
    res = compare(layout, tv.tv, "2.1 a TV layout by hand", TV_HINT, names=("thread", "value"),
                  what="TV layout")
    if res.ok:
        return res
    # Say it in tile coordinates too: offsets are column-major indices into the (8, 32) tile.
    try:
        mine = as_table(layout)
        diff = [i for i, (a, b) in enumerate(zip(mine.offsets, tv.tv.offsets)) if a != b]
        if diff and mine.size == tv.tv.size:
            i, M = diff[0], tv.tiler[0]
            t, v = i % tv.threads, i // tv.threads
            res.message += (f"\nIn the {to_text(tv.tiler)} tile: thread {t}'s value {v} should be "
                            f"element (m={tv.tv.offsets[i] % M}, n={tv.tv.offsets[i] // M}); yours "
                            f"points at (m={mine.offsets[i] % M}, n={mine.offsets[i] // M}).")
    except Exception:  # the comparison above already said what is wrong
        pass
    return res


# -- 2.2 -----------------------------------------------------------------------------------------
COLUMN_MAJOR = "(64,64):(1,64)"  # 64 x 64 fp16, column-major: stride 1 runs down m
COALESCE_HINT = ("in a column-major tensor consecutive addresses run down m (mode 0). Give "
                 "consecutive threads consecutive m (thread layout stride 1 on mode 0) and each "
                 "thread 8 consecutive values along m (value layout (8,1)): then one instruction "
                 "of a warp reads whole 128-byte lines")


@checker("2.2 coalesced loads from a column-major tensor", COALESCE_HINT)
def check_coalesced(thr_layout, val_layout) -> Result:
    """thr/val layouts whose every warp instruction is a 128-bit load per thread and uses every
    byte of every 32-byte sector it fetches, on the tensor COLUMN_MAJOR (fp16)."""
    from ..viz import tv as tvviz

    title = "2.2 coalesced loads from a column-major tensor"
    if thr_layout is Ellipsis or val_layout is Ellipsis:
        raise NotImplementedError
    try:
        tv = layouts.make_layout_tv(thr_layout, val_layout)
        addr = tvviz.address_map(tv, tensor=COLUMN_MAJOR)
    except CourseError as e:
        return failed(title, f"{e.what}", e.fix or COALESCE_HINT)
    if tv.threads % tvviz.WARP:
        return failed(title, f"{tv.threads} threads is not a whole number of 32-thread warps",
                      "use 32, 64, 128 ... threads")
    worst = None
    for warp in range(tv.threads // tvviz.WARP):
        for acc in tvviz.warp_accesses(addr, tv.threads, warp=warp, elem_bytes=2):
            bad = acc.vector_bits < 128 or acc.efficiency < 1.0
            if bad and worst is None:
                worst = (warp, acc)
    if worst is not None:
        warp, acc = worst
        return failed(title, f"tile {to_text(tv.tiler)}; warp {warp}, {acc} -- "
                      "every instruction should be 128-bit per thread and use 100% of its sectors",
                      COALESCE_HINT)
    n_instr = len(tvviz.warp_accesses(addr, tv.threads))
    return passed(title, f"tile {to_text(tv.tiler)}: each warp issues {n_instr} 128-bit load(s) "
                         f"per operand, every one reading whole 32-byte sectors")


# -- 2.3 -----------------------------------------------------------------------------------------
KERNEL_HINT = ("inside the kernel: blkA = gA[((None, None), bidx)] (this block's tile), "
               "tvA = cute.composition(blkA, tv_layout) ((thread, value) -> address), "
               "thrA = tvA[(tidx, None)] (this thread's values); the same for B and C; "
               "then thrC.store(thrA.load() * thrB.load())")
#: The host function in the exercise uses threads (4, 32) and values (4, 8): per thread 4 rows
#: of one 16-byte vector, so 4 vector loads for each of A and B and 4 vector stores for C.
EXPECT_LOADS, EXPECT_STORES = 8, 4


@checker("2.3 the TV kernel for C = A * B", KERNEL_HINT)
def check_tv_kernel(host_fn: Callable, m: int = 256, n: int = 512) -> Result:
    """Compile ``host_fn(mA, mB, mC)`` for this process's architecture on fake fp16 (m, n)
    tensors; run it on numbers on the CPU (``tv_run``: every element of C, A and B untouched);
    read its PTX; on a GPU, also launch it and compare with ``a * b``."""
    import cutlass
    from cutlass.cute.runtime import make_fake_compact_tensor

    from .. import inspect
    from . import elementwise_run, tv_run
    from .learner_code import LearnerCode

    title = "2.3 the TV kernel for C = A * B"
    if host_fn is Ellipsis or host_fn is None:
        raise NotImplementedError
    code = LearnerCode(host_fn)
    kseg, hseg = elementwise_run._segments(code)
    if kseg is not None and tv_run.unanswered(kseg.text):
        raise NotImplementedError  # the exercise's `pass` is still the kernel's body
    fake = make_fake_compact_tensor(cutlass.Float16, (m, n), stride_order=(1, 0), assumed_align=16)
    try:
        rep = inspect.compile_here(host_fn, fake, fake, fake)
    except CourseError as e:
        return failed(title, f"it does not compile: {e.what}", KERNEL_HINT)
    try:
        finding = tv_run.verdict(code, kseg, hseg) if kseg is not None else None
        cpu = tv_run.CHECKED if kseg is not None else "numbers NOT checked on the CPU (no kernel found)"
    except tv_run.KernelFinding as exc:
        finding = str(exc)
    except tv_run.NotModelled as exc:
        finding, cpu = None, (f"numbers NOT checked on the CPU: the CPU model does not run {exc}, so "
                              "only the PTX judged your kernel")
    if finding:
        return failed(title, finding, KERNEL_HINT)
    loads, stores = rep.count("vector global loads"), rep.count("vector global stores")
    scalar = rep.count("scalar global loads") + rep.count("scalar global stores")
    muls = rep.count(r"^mul\S*\.f16x2") + rep.count(r"^fma\S*\.f16x2")
    if stores == 0 and rep.count("scalar global stores") == 0:
        return failed(title, "the kernel compiles but writes nothing to C (no st.global in its PTX)",
                      KERNEL_HINT)
    if scalar:
        return failed(title, f"{scalar} scalar (one-element) global accesses in the PTX: the values "
                      "are not read as 128-bit vectors. Slice the composed tensor with (tidx, None) "
                      "and .load() the whole slice at once", KERNEL_HINT)
    if (loads, stores) != (EXPECT_LOADS, EXPECT_STORES):
        return failed(title, f"{loads} vector loads and {stores} vector stores; a thread owning "
                      f"(4, 8) values of A, B and C needs {EXPECT_LOADS} and {EXPECT_STORES}",
                      KERNEL_HINT)
    if muls == 0:
        return failed(title, "no fp16 multiply (mul.f16x2) in the PTX: is it C = A * B?", KERNEL_HINT)
    compiled = (f"{cpu}; compiled for {rep.arch}: {loads} 128-bit loads, {stores} 128-bit stores, "
                f"{muls} mul.f16x2 per thread")
    mode = modes.mode_for("any")
    if not mode.run:
        return passed(title, compiled + f"; not run on a GPU here ({mode.reason})")
    return _run_on_gpu(host_fn, m, n, title, compiled)


def _run_on_gpu(host_fn: Callable, m: int, n: int, title: str, compiled: str) -> Result:
    import cutlass.cute as cute
    import torch
    from cutlass.cute.runtime import from_dlpack

    torch.manual_seed(0)
    a = torch.randn(m, n, device="cuda", dtype=torch.float16)
    b = torch.randn(m, n, device="cuda", dtype=torch.float16)
    c = torch.zeros_like(a)
    args = [from_dlpack(t, assumed_align=16) for t in (a, b, c)]
    cute.compile(host_fn, *args)(*args)
    torch.cuda.synchronize()
    ref = a * b
    bad = (~torch.isclose(c, ref, rtol=1e-3, atol=1e-3)).nonzero()
    if len(bad):
        r, k = (int(x) for x in bad[0])
        return failed(title, f"{len(bad)} of {m * n} elements are wrong; the first is C[{r}, {k}] = "
                      f"{c[r, k].item():.4f}, expected A*B = {ref[r, k].item():.4f}", KERNEL_HINT)
    return passed(title, compiled + f"; ran on {modes.gpu().name}: C == A * B")
