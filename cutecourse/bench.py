"""One benchmark harness for the whole course.

Every figure the course quotes comes from here: the kernel and its torch baseline are timed in
the same run, by the same code, on the same stream, and the result is written as JSON under
``benchmarks/results/``. Notebooks and the README read those files; they never quote a number
from memory.

Timing uses ``cutlass.testing.benchmark``: CUDA events recorded around a loop of launches on the
launch stream (torch's current stream is the default stream, and so is the DSL's launch stream
unless told otherwise), after warm-up launches, so that compilation and module loading stay out
of the numbers. That gives a mean per launch; we repeat it and keep the median of the repeats,
and their spread tells whether a difference is noise. For a cold L2, give a case several copies
of its operands (``cold_l2_sets``): the harness cycles through them, so each launch finds its
inputs outside the L2 cache. (Operands far larger than the L2, like notebook 01's 2 GiB
tensors, are cold anyway.)

On a GPU shared by a room (``CUTECOURSE_GPU_QUEUE``), every timing waits for its turn
(``cutecourse.gpu_queue``): ``compare`` holds the GPU across all its cases, ``time_us`` on its
own. Checks of correctness (``checked_case``) never wait.

Throughput: ``Work(bytes=...)`` for memory-bound kernels (GB/s, bytes read + written, 1 GB =
1e9 B), ``Work(flops=...)`` for GEMMs (TFLOP/s, 2·M·N·K).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import platform
import random
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from . import gpu_queue

# The result files and their classes live in cutecourse.results (readers need no harness); the
# harness writes them, and its users reach them through here as bench.load, bench.Work, ...
from .results import (RESULTS_DIR, BenchResult, Row, Work, load, load_set, paired_ratio,  # noqa: F401
                      save_json, save_set)


@dataclass
class Case:
    """One thing to time: ``fn(*args)`` for each ``args`` in ``arg_sets`` in turn."""

    name: str
    fn: Callable[..., Any]
    arg_sets: Sequence[tuple] = ((),)
    work: Work | None = None  # if this case moves other bytes than the rest (a copy: 2 not 3)


def environment() -> dict[str, Any]:
    """Device and software versions, recorded with every result."""
    env: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
    }
    try:
        import torch

        env["torch"] = torch.__version__
        env["cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            env.update(device=p.name, capability=f"{p.major}.{p.minor}", sms=p.multi_processor_count)
    except ImportError:  # pragma: no cover
        pass
    try:
        import cutlass

        env["nvidia-cutlass-dsl"] = cutlass.__version__
    except ImportError:  # pragma: no cover
        pass
    return env


def l2_bytes() -> int:
    """The GPU's L2 cache size (50 MiB on an H100)."""
    import torch

    return int(torch.cuda.get_device_properties(0).L2_cache_size)


def cold_l2_sets(make_args: Callable[[], tuple], bytes_per_set: int, l2: int | None = None) -> list[tuple]:
    """Enough independent copies of a case's operands that cycling through them (``Case(...,
    arg_sets=...)``) touches more than twice the L2 between two uses of the same copy: each launch
    then reads its inputs from device memory, as a kernel in a real program would."""
    l2 = l2 if l2 is not None else l2_bytes()
    count = max(1, -(-2 * l2 // max(1, bytes_per_set)) + 1)
    return [make_args() for _ in range(count)]


def checked_case(name: str, fn: Callable[..., Any], out, reference, max_rel_err: float = 0.0,
                 args: tuple = ()) -> Case:
    """A Case that has computed the right answer once: poison ``out`` with NaN (so an element the
    kernel never writes cannot pass), run ``fn(*args)``, and compare ``out`` with ``reference``,
    relative to the reference's largest magnitude. A wrong kernel is never timed."""
    import torch

    out.fill_(float("nan"))
    if out.is_cuda:  # fn may launch on another stream (a launcher built for a graph): poison first
        torch.cuda.synchronize()
    fn(*args)
    if out.is_cuda:
        torch.cuda.synchronize()
    ref = reference.float()
    err = ((out.float() - ref).abs().max() / ref.abs().max().clamp(min=1)).item()
    if not err <= max_rel_err:  # NaN fails here too
        raise AssertionError(f"{name}: max relative error {err:.3g} against the reference "
                             f"(allowed {max_rel_err:g})")
    return Case(name, fn, (args,))


def time_us(case: Case, warmup: int = 10, iterations: int = 100, repeats: int = 5,
            graph: bool = False) -> list[float]:
    """Mean microseconds per launch of ``case``, once per repeat (CUDA events, launch stream).
    ``graph=True``: the launches are replays of one CUDA graph (:func:`graph_time_us`)."""
    if graph:
        return graph_time_us(case, warmup, iterations, repeats)
    from cutlass.testing import JitArguments, benchmark

    sets = list(case.arg_sets)
    it = iter(range(len(sets)))

    def workspace():  # cutlass.testing.benchmark cycles through these in order
        return JitArguments(*sets[next(it)])

    out = []
    with gpu_queue.turn(f"'{case.name}'"):  # on a shared GPU: one timing at a time
        for i in range(repeats):
            it = iter(range(len(sets)))
            out.append(float(benchmark(case.fn, workspace_generator=workspace,
                                       workspace_count=len(sets),
                                       warmup_iterations=warmup if i == 0 else max(1, warmup // 4),
                                       iterations=iterations)))
    return out


_GRAPH_STREAM = None


def graph_stream():
    """The stream graphs are captured on (a graph cannot be captured on the default stream). A
    course ``Launch`` launches on the stream that was current when it was built: build the
    launchers a graph will replay under ``with torch.cuda.stream(bench.graph_stream()):``."""
    global _GRAPH_STREAM
    import torch

    if _GRAPH_STREAM is None:
        _GRAPH_STREAM = torch.cuda.Stream()
    _GRAPH_STREAM.wait_stream(torch.cuda.current_stream())  # what was queued before comes first
    return _GRAPH_STREAM


def graph_time_us(case: Case, warmup: int = 10, iterations: int = 100, repeats: int = 5) -> list[float]:
    """Mean microseconds per launch of ``case`` as replays of one CUDA graph of ``iterations``
    launches (cycling through its argument sets), once per repeat.

    A decode step runs its layers under a CUDA graph: the host's cost of a launch (12-21 us for a
    call through the DSL's Python launcher, a few us for torch's) is paid once at capture, not
    per launch. A kernel that runs for 10-20 us, launched from Python back to back, would be
    timed partly as host time; replayed from a graph, only the GPU's time between kernels
    counts, for every case alike."""
    import torch

    sets = list(case.arg_sets)
    stream = graph_stream()  # after what the current stream has queued
    with torch.cuda.stream(stream):  # compile and load outside the capture
        for args in sets:
            case.fn(*args)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):  # launches go to the capture stream
        for i in range(iterations):
            case.fn(*sets[i % len(sets)])
    out = []
    with gpu_queue.turn(f"'{case.name}'"), torch.cuda.stream(stream):
        for _ in range(max(1, -(-warmup // iterations))):
            graph.replay()
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)
            graph.replay()
            end.record(stream)
            end.synchronize()
            out.append(start.elapsed_time(end) * 1e3 / iterations)
    del graph
    return out


def compare(title: str, cases: Sequence[Case], work: Work, baseline: str,
            warmup: int = 10, iterations: int = 100, repeats: int = 5,
            params: dict[str, Any] | None = None, progress: bool = True,
            rounds: int = 1, monitor: "GpuMonitor | None" = None,
            idle_s: float = 0.0, settle_s: float = 0.0, graph: bool = False) -> BenchResult:
    """Time every case in one run and express each as a ratio to the ``baseline`` case.

    ``rounds=1``: each case is timed ``repeats`` times, one case after the other. ``rounds=R``
    interleaves: every round times every case ``repeats`` times, in a shuffled order (seeded;
    round 1 in the given order), so that a drift of the GPU's clock (a power-capped GPU slows
    down as it heats up) spreads over all cases instead of favouring the first ones, and no
    case always follows the same neighbour. ``settle_s``: before it is timed, each case first
    runs for that many seconds, so that the clock has settled to what *this* kernel's power
    allows rather than what the previous case left (the power controller lags by a fraction of
    a second: a kernel timed right after a light one borrows its headroom). Each row's time is then the
    median over all rounds, and ``Row.round_ratios`` keeps its ratio to the baseline per round:
    their spread says how sure the ratio is. With a ``GpuMonitor``, each row also records the
    SM clock and the power the GPU ran at while that case was timed. ``graph=True``: every
    case is timed as replays of a CUDA graph (:func:`graph_time_us`).

    ``idle_s > 0`` is the *burst* protocol: the GPU idles that long before each case is timed,
    so the timed launches start at the boost clock, before the power controller reacts, as in
    a short standalone script. Without it (the default, *sustained*), cases run back to back
    and a power-limited GPU is measured at the clock it can hold.
    """
    names = [c.name for c in cases]
    if baseline not in names:
        raise ValueError(f"baseline {baseline!r} is not one of the cases {names}")
    timer = (lambda *a: time_us(*a, graph=True)) if graph else time_us
    reps: dict[str, list[float]] = {c.name: [] for c in cases}
    per_round: list[dict[str, float]] = []
    launch_us: dict[str, float] = {}
    # one turn for the whole comparison: its ratios need every case timed on a quiet GPU
    with gpu_queue.turn(f"'{title}'"):
        for r in range(rounds):
            order = list(cases)
            if r:
                random.Random(r).shuffle(order)
            this_round = {}
            for c in order:
                w = warmup if r == 0 and not idle_s else max(1, warmup // 4)
                if settle_s:
                    if c.name not in launch_us:  # a rough launch time, to turn seconds into launches
                        launch_us[c.name] = timer(c, 1, 3, 1)[0]
                    w = max(w, int(settle_s * 1e6 / max(launch_us[c.name], 1.0)))
                if idle_s:
                    time.sleep(idle_s)
                if monitor is not None:
                    with monitor.window(c.name):
                        times = timer(c, w, iterations, repeats)
                else:
                    times = timer(c, w, iterations, repeats)
                reps[c.name] += times
                this_round[c.name] = statistics.median(times)
                if progress:
                    tag = f"round {r + 1}/{rounds} " if rounds > 1 else ""
                    print(f"  {tag}{c.name:<28} {this_round[c.name]:10.1f} us", flush=True)
            per_round.append(this_round)
    base_work = cases[names.index(baseline)].work or work
    rows = []
    for c in cases:
        us = statistics.median(reps[c.name])
        row = Row(c.name, us, reps[c.name])
        w = c.work or work
        if w.bytes:
            row.gbps = w.bytes / (us * 1e-6) / 1e9
        if w.flops:
            row.tflops = w.flops / (us * 1e-6) / 1e12
        if rounds > 1:  # same work per launch within a row: a time ratio is a throughput ratio
            scale = (w.bytes or w.flops) / (base_work.bytes or base_work.flops)
            row.round_ratios = [scale * t[baseline] / t[c.name] for t in per_round]
        if monitor is not None:
            row.sm_mhz, row.power_w = monitor.summary(c.name)
        rows.append(row)
    params = dict(params or {})
    if rounds > 1:
        params.setdefault("timing", f"{rounds} interleaved rounds x {repeats} repeats x "
                                    f"{iterations} launches"
                                    + (f", {idle_s:g} s idle before each (burst)" if idle_s else "")
                                    + (f", each case run {settle_s:g} s before it is timed"
                                       if settle_s else "")
                                    + (", CUDA-graph replays" if graph else ""))
    result = BenchResult(title, work, baseline, rows, params, environment())
    base = result.speed(result.row(baseline))
    for r in rows:
        r.ratio = result.speed(r) / base
    return result


class GpuMonitor:
    """What the GPU's clock and power did while each case ran (``nvidia-smi``, sampled).

    An H100 running a GEMM at full speed hits its power cap (700 W) and lowers its SM clock
    (1980 MHz -> ~1300-1700 MHz, depending on the data: random bits toggle more transistors
    than small integers). Two kernels compared at different clocks compare the clocks as much
    as the kernels; the monitor records the clock per case so a table can show it::

        with bench.GpuMonitor() as mon:
            res = bench.compare(..., rounds=10, monitor=mon)

    Without ``nvidia-smi`` it records nothing (rows keep ``sm_mhz = None``).
    """

    def __init__(self, interval_ms: int = 20):
        self.interval_ms = interval_ms
        self.samples: list[tuple[float, float, float]] = []  # (time, MHz, W)
        self.windows: dict[str, list[tuple[float, float]]] = {}
        self._proc = None
        self._thread = None

    def __enter__(self) -> "GpuMonitor":
        import shutil
        import subprocess
        import threading

        from .torch_build import nvidia_smi

        exe = shutil.which("nvidia-smi")
        if exe is None:
            return self
        # power.draw is a 1 s average; power.draw.instant (newer drivers) follows short bursts
        probe = nvidia_smi("power.draw.instant", units=False)
        power = "power.draw.instant" if probe and not any("N/A" in ln or "nvalid" in ln for ln in probe) \
            else "power.draw"
        self._proc = subprocess.Popen(
            [exe, f"--query-gpu=clocks.sm,{power}", "--format=csv,noheader,nounits",
             f"-lms={self.interval_ms}", "-i", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

        def read():
            for line in self._proc.stdout:
                try:
                    mhz, watts = (float(v) for v in line.split(","))
                except ValueError:
                    continue
                self.samples.append((time.time(), mhz, watts))

        self._thread = threading.Thread(target=read, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=10)
            self._thread.join(timeout=10)

    @contextlib.contextmanager
    def window(self, name: str):
        """Context manager: the samples taken while it is open belong to ``name``."""
        t0 = time.time()
        try:
            yield
        finally:
            self.windows.setdefault(name, []).append((t0, time.time()))

    def summary(self, name: str) -> tuple[float | None, float | None]:
        """(median SM clock in MHz, mean power in W) over ``name``'s windows, or (None, None)."""
        inside = [(mhz, w) for t, mhz, w in self.samples
                  if any(t0 <= t <= t1 for t0, t1 in self.windows.get(name, []))]
        if not inside:
            return None, None
        return (statistics.median(m for m, _ in inside),
                round(statistics.fmean(w for _, w in inside), 1))
