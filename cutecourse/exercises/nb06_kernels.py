"""Kernel exercises of notebook 06: a tile order for the persistent kernel, a fused epilogue, and a
lab that gives ping-pong its fourth C buffer back.

Each checker follows ``kernel_check``'s manual: compiled for sm_90a here (a child process), facts
read from the PTX, the learner's logic on a CPU model (the tile order on ``models/tile_order``'s
grid, the epilogue op on Python floats); on an H100 run against torch in a child with a timeout,
timed beside the course's kernel.
"""

from __future__ import annotations

import re

from . import Result, answered, failed, passed
from . import epilogue_run as er
from .kernel_check import KernelExercise, LearnerError, gpu_here, kernel_checker, run_on_gpu

PERSISTENT = '__import__("cutecourse.kernels.hopper_gemm_persistent", fromlist=["x"])'


# -- Exercise 9 (kernel): a fused epilogue, bias + ReLU --------------------------------------------
def fused_args(kernel):
    """Compile arguments of a persistent GEMM whose epilogue op reads one fp32 vector: fake A, B, C,
    the scheduler's counters, a stream, then ``bias`` (N,)."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_tensor

    from ..kernels import gemm_launch

    bias = make_fake_tensor(cutlass.Float32, (cute.sym_int(symbol="N"),), (1,), assumed_align=4)
    return gemm_launch.Entry(type(kernel)).fake_arguments(kernel, epilogue_args=(bias,))


#: The CPU model of an op's ``apply`` and of a ``tile_of`` (Python numbers for the DSL's).
python_arithmetic = er.plain_arithmetic

#: The CPU model of an op: ``apply`` on every element of a 5 x 24 C (``epilogue_run``).
op_verdict = er.op_verdict


def epilogue_facts(report) -> dict:
    """What the compiled epilogue does per consumer thread: bias loads (4-byte global loads),
    fp32 adds, and clamps at 0. ``cutlass.max(v, 0)`` compiles to a compare-select (``setp`` +
    ``selp``); ``cute.arch.fmax`` and ``cute.max`` to one ``max.f32``: both are a ReLU."""
    lines = report.instructions()
    return {"bias loads": sum(bool(re.match(r"^ld\.global(\.\w+)*\.(b32|f32)\b", ln)) for ln in lines),
            "adds": sum(ln.startswith("add.f32") or ln.startswith("add.rn.f32") for ln in lines),
            "subs": sum(ln.startswith("sub.f32") or ln.startswith("sub.rn.f32") for ln in lines),
            "clamps at 0": sum(bool(re.match(r"^(setp\.\w+|max(\.\w+)*)\.f32\b.*0f00000000", ln))
                               for ln in lines)}


#: The course's answer compiles to these counts per thread (128 accumulators, 64 columns of a
#: 128x256 tile per consumer thread): the tests hold the solution to them.
EXPECTED = {"bias loads": 64, "adds": 128, "clamps at 0": 128}

EX9 = ("Exercise 9 (kernel): a fused epilogue, bias + ReLU",
       "relu(x + bias[n]): add the column's bias first, then clamp at 0 with cutlass.max. x is a "
       "value the GPU computes, which Python cannot compare while the kernel is being built: "
       "Python's max, min, `if v < 0` or `a if c else b` on it do not compile.")


def _op_on_numbers(attempt) -> str | None:
    """The op's apply on Python floats, every element of a 5 x 24 C (``epilogue_run``)."""
    try:
        objection = op_verdict(attempt.answer(), attempt.code)
        attempt.notes["cpu"] = (f"numbers checked on the CPU model: your apply gives relu(x + bias[n]) "
                                f"on all {2 * er.ROWS * er.COLS} (x, m, n) of a {er.ROWS} x {er.COLS} C "
                                "(every column's bias different, x of either sign and 100.0)")
    except er.DslOnly as exc:
        objection = None
        attempt.notes["cpu"] = (f"numbers NOT checked on the CPU: at {exc} your apply calls a DSL "
                                "operation that exists only inside a kernel, which the CPU model "
                                "cannot run; the exact PTX counts below are the only proof here")
    return objection and objection + " (checked on the CPU: your apply on Python floats)"


def _op_compiled(attempt) -> str | None:
    attempt.notes["facts"] = facts = epilogue_facts(attempt.report)
    return _ptx_problem(facts, numbers_checked=attempt.notes["cpu"].startswith("numbers checked"))


def _fused_passes(attempt) -> str:
    facts = attempt.notes["facts"]
    return (f"{attempt.notes['cpu']}. Compiled for sm_90a, per consumer thread: exactly "
            f"{facts['bias loads']} bias loads (one per column it holds), {facts['adds']} adds (one "
            f"per accumulator) and {facts['clamps at 0']} clamps at 0 (compare-selects or max.f32), "
            f"then the conversion to fp16; registers {attempt.report.registers}.")


FUSED = KernelExercise(
    *EX9, kernel=lambda op_cls: f"{PERSISTENT}.PersistentHopperGemm(epilogue_op={op_cls.__name__}())",
    args="cutecourse.exercises.nb06_kernels:fused_args", model=(_op_on_numbers,),
    objections=(_op_compiled,), passes=_fused_passes,
    elsewhere="not run on a GPU here: on an H100 this notebook runs it against torch and times it "
              "beside a GEMM followed by torch's bias and ReLU",
    baseline=f"{PERSISTENT}.PersistentHopperGemm()", runner="cutecourse.exercises.nb06_kernels:fused_runner",
    run_params={"timeout": 300})


@FUSED.checker
def check_fused_epilogue(op_cls) -> Result:
    """``op_cls``: your ``EpilogueOp`` subclass for C = relu(A @ B.T + bias), bias[n] per column.
    Its ``apply`` on numbers on the CPU (every element of a 5 x 24 C), then compiled into the
    persistent kernel for sm_90a (exact counts of bias loads, adds and clamps per thread)."""
    return FUSED.check(op_cls)


def _ptx_problem(facts: dict, numbers_checked: bool) -> str | None:
    """The compiled epilogue against the counts relu(x + bias[n]) fixes (:data:`EXPECTED`): bias
    loads and adds exactly (adds or subtracts, where the numbers were checked); where they were
    not, the PTX is the only proof, and the clamps at 0 must be exactly one per value too."""
    loads, adds, clamps = (facts[k] for k in ("bias loads", "adds", "clamps at 0"))
    if numbers_checked:  # right on numbers: x - (-b) or max(x, -b) + b are forms of the same sum
        adds += facts.get("subs", 0)
    want = EXPECTED
    if loads == 0:
        return ("the compiled epilogue reads no bias from global memory: apply must use its bias "
                "argument (bias[n])")
    if loads != want["bias loads"]:
        return (f"the compiled epilogue loads {loads} bias values per thread, where a thread holds "
                f"{want['bias loads']} columns of C: read bias[n], the value of the column n, once "
                "per column" + (" (fewer: is it indexed by the row m?)" if loads < want["bias loads"] else ""))
    if adds != want["adds"]:
        return (f"the compiled epilogue has {adds} fp32 adds per thread, where relu(x + bias[n]) needs "
                f"one per accumulator, {want['adds']}" + (": do you subtract?" if adds == 0 else ""))
    if not numbers_checked and clamps != want["clamps at 0"]:
        return (f"the compiled epilogue clamps {clamps} of a thread's {want['clamps at 0']} values at 0: "
                "one ReLU per value (cutlass.max(v, cutlass.Float32(0.0)) compiles to a setp + selp pair)")
    return None


def fused_runner(kernel, baseline=None, m: int = 4096, n: int = 4096, k: int = 1024) -> dict:
    """In a child on the GPU: relu(A @ B.T + bias) with the learner's fused kernel against torch;
    then timed beside the unfused way, the course GEMM followed by torch's bias add and ReLU."""
    import torch

    from .. import bench
    from ..kernels import gemm_launch

    torch.manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16)
    bias = torch.randn(n, device="cuda", dtype=torch.float32)
    ref = torch.relu(a.float() @ b.float().T + bias)
    c = torch.empty(m, n, device="cuda", dtype=torch.float16)
    # the kernel's scratch (the scheduler's counters) allocated, the bias passed after the stream
    fused = gemm_launch.Entry(type(kernel)).launch(kernel, a, b, c, epilogue_args=(bias,))
    try:
        mine = bench.checked_case("fused", fused, c, ref, max_rel_err=5e-3)
    except AssertionError:
        bad = ((c.float() - ref).abs() > 5e-3 * ref.abs().max()) | c.isnan()
        rows, cols = bad.nonzero(as_tuple=True)
        return {"ok": False, "message": f"wrong result: {int(bad.sum())} of {c.numel()} elements of C "
                f"differ from relu(A @ B.T + bias), the first at ({int(rows[0])}, {int(cols[0])})"}
    out = {"ok": True, "message": f"relu(A @ B.T + bias) matches torch for {m}x{n}x{k} fp16"}
    if baseline is not None:
        c2 = torch.empty_like(c)
        plain = gemm_launch.Entry(type(baseline)).launch(baseline, a, b, c2)

        def unfused():
            plain()
            torch.relu_(c2.add_(bias))  # two more passes over C: read and write it again

        base = bench.checked_case("unfused", unfused, c2, ref, max_rel_err=5e-3)
        t_mine, t_base = (sorted(bench.time_us(cs, repeats=3))[1] for cs in (mine, base))
        out.update(us=t_mine, baseline_us=t_base)
        out["message"] += (f"; fused {t_mine:.1f} us, GEMM + torch's bias and ReLU {t_base:.1f} us "
                           f"({t_base / t_mine:.2f}x)")
    return out


# -- Exercise 10 (lab): ping-pong with four C buffers per warpgroup --------------------------------
EX10 = ("Exercise 10 (lab): ping-pong's fifth stage",
        "a stage holds (64 + 256) x 64 fp16 values of A and B; the stages share 232448 bytes with "
        "1024 of barriers and 2 warpgroups x epi_stages buffers of 64x32 fp16 for C.")

LAB_SHAPE = (8192, 8192, 1024)  # the epilogue matters (K = 1024), where ping-pong is chosen


@kernel_checker(*EX10)
def check_pingpong_lab(epi_stages, stages, c_kib) -> Result:
    """Your prediction for ping-pong with ``epi_stages`` C buffers per warpgroup: the ring's
    ``stages`` and the C staging in KiB (``c_kib``). Checked against the kernel's own plan; then
    both configurations compiled (registers, smem, the ring's wrap in the PTX) and, on an H100,
    timed beside the cooperative kernel at 8192 x 8192 x 1024."""
    from ..inspect import compile_report
    from ..kernels import hopper_gemm_pingpong as hpp

    title = EX10[0]
    epi_stages, stages, c_kib = (answered(v, name) for v, name in
                                 ((epi_stages, "epi_stages"), (stages, "stages"), (c_kib, "c_kib")))
    if epi_stages not in (2, 4):
        return failed(title, f"epi_stages = {epi_stages!r}: set 4 (the cooperative kernel's count) or "
                      "the default 2. A tile's 8 epilogue tiles cycle through the buffers, and the "
                      "kernel needs at least 2, so a TMA store can fly while the next epilogue tile is written")
    plan = hpp.PingPongHopperGemm((64, 256), epi_stages=epi_stages).plan("float16", "float16")
    want_c = plan.epi_bytes // 1024
    if c_kib != want_c:
        return failed(title, f"you predict {c_kib} KiB of C staging; 2 warpgroups x {epi_stages} "
                      f"buffers x 64x32 fp16 (4 KiB) = {want_c} KiB")
    if stages != plan.stages:
        return failed(title, f"you predict {stages} stages next to {want_c} KiB of C; "
                      f"{plan.stages} fit ({plan.bytes_per_stage // 1024} KiB per stage)",
                      "round down: a stage is whole")
    rows = []
    for n in dict.fromkeys((epi_stages, hpp.EPI_STAGES)):
        rep = compile_report("cutecourse.kernels.hopper_gemm_pingpong:compile_target", epi_stages=n)
        p = hpp.PingPongHopperGemm((64, 256), epi_stages=n).plan("float16", "float16")
        rows.append(f"epi_stages={n}: {p.stages} stages, {p.smem_bytes // 1024} KiB smem, "
                    f"{rep.registers} registers, {rep.count('wgmma')} wgmma")
    message = ("your prediction matches the kernel's plan. Compiled for sm_90a: " + "; ".join(rows)
               + ". Only the ring's depth and the C buffers changed.")
    if not gpu_here("sm_90a"):
        message += (" Nothing was timed here (no H100): on one, this check runs ping-pong with "
                    f"epi_stages={epi_stages} against torch and times it beside the cooperative kernel "
                    f"at {' x '.join(map(str, LAB_SHAPE))}, which is what tells whether the stage or "
                    "the C buffers are worth more.")
    else:
        m, n_, k = LAB_SHAPE
        pp = '__import__("cutecourse.kernels.hopper_gemm_pingpong", fromlist=["x"])'
        run = run_on_gpu(None, f"{pp}.PingPongHopperGemm(epi_stages={epi_stages})",
                         baseline=f"{PERSISTENT}.PersistentHopperGemm()",
                         runner="cutecourse.exercises.nb06_kernels:persistent_runner", m=m, n=n_, k=k,
                         timeout=300)
        if not run.ok:
            return failed(title, message + " On the GPU: " + run.message)
        message += " On the GPU: " + run.message
    return passed(title, message)


def persistent_runner(kernel, baseline=None, m: int = 8192, n: int = 8192, k: int = 1024) -> dict:
    """In a child on the GPU: C = A @ B.T with a persistent course kernel (it takes the dynamic
    scheduler's counters) against torch, timed beside ``baseline``."""
    import torch

    from .. import bench
    from ..kernels import gemm_launch

    torch.manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16)
    ref = a.float() @ b.float().T
    cases = []
    for name, kern in (("yours", kernel), ("baseline", baseline)):
        if kern is None:
            continue
        c = torch.empty(m, n, device="cuda", dtype=torch.float16)
        try:
            cases.append(bench.checked_case(name, gemm_launch.Entry(type(kern)).launch(kern, a, b, c), c, ref,
                                            max_rel_err=5e-3))
        except AssertionError as exc:
            return {"ok": False, "message": f"{name}: wrong result ({exc})"}
    us = [sorted(bench.time_us(cs, repeats=3))[1] for cs in cases]
    flops = 2 * m * n * k
    message = f"{m}x{n}x{k} fp16 matches torch; {flops / us[0] / 1e6:.0f} TFLOP/s"
    if len(us) > 1:
        message += f", {us[1] / us[0]:.2f}x the cooperative kernel ({flops / us[1] / 1e6:.0f} TFLOP/s)"
    return {"ok": True, "message": message, "us": us}


# -- Exercise 8 (kernel): the banded tile order as a scheduler -------------------------------------
#: (tiles_m, tiles_n, group_m) grids the CPU model tries: 8192^3 and MLP up in 128x256 tiles, a
#: grid whose last band is short, one narrower than a band, a single row and a single column.
ORDER_GRIDS = [(64, 32, 16), (32, 56, 16), (23, 16, 16), (5, 9, 8), (1, 7, 4), (9, 1, 4), (12, 5, 4)]
WAVE = 132
FIELDS = dict(first=0, stride=1, k_tiles=1, cluster_mn=(1, 1), in_cluster=(0, 0), queue=None,
              slots=None, counters=None)


def learner_order(cls, tiles_m: int, tiles_n: int, group_m: int) -> list:
    """The learner's ``tile_of`` for every work item of a grid, run on Python ints (the CPU model:
    the same arithmetic the kernel runs on the GPU)."""
    sched = cls(clusters_m=tiles_m, clusters_n=tiles_n, total=tiles_m * tiles_n, group_m=group_m, **FIELDS)
    with python_arithmetic():
        return [tuple(int(v) for v in sched.tile_of(w)) for w in range(tiles_m * tiles_n)]


def panels(order, wave: int = WAVE) -> tuple[int, int]:
    """(A row panels, B column panels) the first ``wave`` tiles of an order read."""
    first = order[:wave]
    return len({m for m, _ in first}), len({n for _, n in first})


def order_verdict(cls, code=None) -> str | None:
    """The CPU model's objection to the learner's tile order, or None (every grid as the kernel's
    banded order, ``models/tile_order.band_coord``). ``code`` (a ``LearnerCode``) names the
    learner's line when their ``tile_of`` raises."""
    from ..models.tile_order import band_coord

    for tm, tn, g in ORDER_GRIDS:
        want = [band_coord(w, tm, tn, g) for w in range(tm * tn)]
        try:
            got = learner_order(cls, tm, tn, g)
        except NotImplementedError:
            raise
        except Exception as exc:
            where = code.locate(exc) if code is not None else None
            at = f" at {code.describe(*where)}" if where else ""
            raise LearnerError(f"your tile_of fails on the CPU model ({tm}x{tn} tiles, group_m={g}){at}: "
                               f"{type(exc).__name__}: {exc}") from None
        if got == want:
            continue
        where = f"{tm}x{tn} tiles, group_m={g}"
        if got == [(n, m) for m, n in want]:
            return f"{where}: your tile_of returns (n, m); the kernel takes (m, n): (row, column) of the tile"
        outside = [t for t in got if not (0 <= t[0] < tm and 0 <= t[1] < tn)]
        if outside:
            short = (": the last band has only clusters_m - first_row rows, cutlass.min(group_m, "
                     "clusters_m - first_row)" if tm % g else "")
            return f"{where}: your order visits tile {outside[0]}, outside C{short}"
        if len(set(got)) < len(got):
            twice = next(t for t in got if got.count(t) > 1)
            return f"{where}: your order visits tile {twice} twice and misses another"
        if got == [(w // tn, w % tn) for w in range(tm * tn)]:
            return (f"{where}: your order walks C row by row, the launch order (bands with n "
                    f"fastest inside are that same walk): the first {WAVE} tiles read "
                    f"{panels(got)[1]} B panels. Inside a band, go down a column first (m fastest: "
                    "within % rows), then to the next column")
        i = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
        return (f"{where}: work item {i} is tile {got[i]} in your order, {want[i]} in the banded one "
                "(bands of group_m rows; inside a band m fastest, then n)")
    return None


EX8 = ("Exercise 8 (kernel): the tile order of a scheduler",
       "a band holds group_m * clusters_n work items; its first row is band * group_m, and it has "
       "cutlass.min(group_m, clusters_m - first_row) rows; inside it, m runs fastest. work is a value "
       "the GPU computes: Python's min or an `if` on it does not compile, cutlass.min does.")

#: A shape whose last band of 16 tile-rows is short (2944 = 23 x 128 rows), for the GPU run.
ORDER_SHAPE = (2944, 4096, 1024)


def _calls_the_answer(attempt) -> str | None:
    called = re.search(r"\bband_(coord|tile)\b", "".join(seg.text for seg in attempt.code.segments))
    if called:
        return (f"your tile_of calls the course's {called.group(0)}, which computes the "
                "answer: write the band arithmetic yourself")
    return None


def _order_on_numbers(attempt) -> str | None:
    objection = order_verdict(attempt.answer, attempt.code)
    return objection and objection + " (checked on the CPU: your tile_of on Python ints)"


def _order_passes(attempt) -> str:
    mine = panels(learner_order(attempt.answer, 64, 32, 16))
    rows = panels([(w // 32, w % 32) for w in range(64 * 32)])
    items = sum(tm * tn for tm, tn, _ in ORDER_GRIDS)
    return (f"numbers checked on the CPU model: your tile_of gives the banded order's tile for all "
            f"{items} work items of {len(ORDER_GRIDS)} grids, short last bands included; it "
            f"compiles into the persistent kernel for sm_90a ({attempt.report.registers} registers). "
            f"At 8192^3 in 128x256 tiles the first {WAVE} tiles read {mine[0]} A and {mine[1]} B "
            f"panels; row by row they would read {rows[0]} and {rows[1]}.")


ORDER = KernelExercise(
    *EX8, kernel=lambda cls: f"{PERSISTENT}.PersistentHopperGemm(scheduler={cls.__name__})",
    args="cutecourse.exercises.nb06_kernels:persistent_args",
    model=(_calls_the_answer, _order_on_numbers), passes=_order_passes,
    elsewhere="not run on a GPU here: on an H100 this notebook runs it against torch and times it "
              "beside the course's kernel",
    baseline=f"{PERSISTENT}.PersistentHopperGemm()",
    runner="cutecourse.exercises.nb06_kernels:persistent_runner",
    run_params=dict(zip("mnk", ORDER_SHAPE), timeout=300))


@ORDER.checker
def check_tile_order(cls) -> Result:
    """``cls``: your ``tile_scheduler.StaticScheduler`` subclass whose ``tile_of(self, work)``
    returns work item ``work``'s (m, n) C tile in bands of ``group_m`` tile-rows."""
    return ORDER.check(cls)


def persistent_args(kernel):
    """Compile arguments of a dense persistent GEMM: fake A, B, C, the counters, a stream."""
    from ..kernels import gemm_launch

    return gemm_launch.Entry(type(kernel)).fake_arguments(kernel)
