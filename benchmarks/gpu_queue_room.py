"""A room on one GPU: do learners' timings through the GPU queue match a timing alone?

    python benchmarks/gpu_queue_room.py [--learners 4] [--kernel add|gemm] --out FILE.json

Each learner is its own process, as each notebook kernel on a shared server is. A learner
compiles a course kernel, checks it against torch (no queue: correctness runs share the GPU),
says it is ready and, once every learner is, times it beside torch with ``cutecourse.bench``
through the queue (``CUTECOURSE_GPU_QUEUE``, a temporary folder) with the course's sustained
protocol: each case runs ``--settle`` seconds back to back before it is timed. The same learner
runs alone before and after the room. The JSON written to ``--out`` holds every learner's time,
its timed regions (wall-clock start and end of each ``bench.time_us``), its wait for the GPU,
the overlaps between learners (there must be none) and each learner's deviation from the median
of the runs alone (``--tolerance``, 3 % by default). Exit 1 if a learner's result differs from
torch, two timed regions overlap, or a deviation is over the tolerance.

The kernels: ``add`` is notebook 01's vectorized add (fp16, 8192 x 8192: memory-bound, any
sm_80+ GPU); ``gemm`` is notebook 03's prefetching Hopper GEMM (fp16, 4096^3, 128x256 tiles:
sm_90a, power-limited, so the settle time matters).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def learner(spec: dict) -> dict:
    """One learner: compile, check (no queue), wait for the others, time (queued)."""
    import cutecourse  # noqa: F401  (sets the DSL's arch before cutlass is imported)
    import torch

    from cutecourse import bench, gpu_queue

    torch.manual_seed(spec["seed"])
    if spec["kernel"] == "add":
        from cutecourse.kernels import elementwise as ew

        n = 8192
        a, b = (torch.randn(n, n, device="cuda", dtype=torch.float16) for _ in "ab")
        c, c2 = torch.empty_like(a), torch.empty_like(a)
        fn, args = ew.compiled_kernel(a, b, c)
        mine = bench.checked_case("course add", fn, c, a + b, args=args)  # fp16 adds are exact
        base = bench.Case("torch.add", lambda: torch.add(a, b, out=c2))
        work, error = bench.Work(bytes=3 * a.nbytes), 0.0
    else:
        from cutecourse.kernels import hopper_gemm_cluster as hc

        n = 4096
        a, b = (torch.empty(n, n, device="cuda", dtype=torch.float16).random_(-2, 2) for _ in "ab")
        c, c2 = (torch.empty(n, n, device="cuda", dtype=torch.float16) for _ in "cc")
        ref = torch.matmul(a, b.T)
        fn = hc.launcher(a, b, c, tile=(128, 256), cluster=(1, 1), variant="prefetch")
        mine = bench.checked_case("course GEMM", fn, c, ref, max_rel_err=1e-2)
        base = bench.Case("torch.matmul", lambda: torch.matmul(a, b.T, out=c2))
        work, error = bench.Work(flops=2 * n ** 3), 1e-2
    torch.cuda.synchronize()
    Path(spec["ready"]).touch()
    while not Path(spec["go"]).exists():
        time.sleep(0.01)

    spans, time_us = [], bench.time_us

    def recorded(case, *a, **k):  # the timed region of each bench.time_us, wall clock
        start = time.time()
        try:
            return time_us(case, *a, **k)
        finally:
            spans.append((start, time.time()))

    bench.time_us = recorded
    t0 = time.time()
    # as a notebook's timed cell: bench.compare queues by itself (one turn for both cases)
    res = bench.compare(f"{spec['kernel']} ({spec['name']})", [base, mine], work, base.name,
                        iterations=spec["iterations"], repeats=spec["repeats"],
                        settle_s=spec["settle"], progress=False)
    waited = spans[0][0] - t0  # its first timing began when the turn came
    assert not gpu_queue.inside()
    return {"name": spec["name"], "us": res.row(mine.name).us, "baseline_us": res.row(base.name).us,
            "reps_us": res.row(mine.name).us_repeats, "verified": f"matches torch (max rel. error <= {error:g})",
            "spans": spans, "waited_s": round(waited, 3), "environment": res.environment}


def run_learners(names: list[str], args, queue: str, scratch: Path) -> list[dict]:
    """Start one process per learner, release them together once all are ready, collect."""
    go = scratch / f"go-{names[0]}"
    procs = []
    for i, name in enumerate(names):
        spec = {"name": name, "kernel": args.kernel, "seed": i, "go": str(go),
                "ready": str(scratch / f"ready-{name}"), "iterations": args.iterations,
                "repeats": args.repeats, "settle": args.settle}
        out = scratch / f"{name}.json"
        env = dict(os.environ, CUTECOURSE_GPU_QUEUE=queue, CUTECOURSE_LEARNER=name)
        procs.append((name, out, subprocess.Popen(
            [sys.executable, __file__, "--learner", json.dumps(spec), "--out", str(out)], env=env)))
    t0 = time.monotonic()
    while not all((scratch / f"ready-{n}").exists() for n in names):
        if any(p.poll() not in (None, 0) for _, _, p in procs) or time.monotonic() - t0 > 600:
            break
        time.sleep(0.05)
    go.touch()
    results = []
    for name, out, p in procs:
        if p.wait(timeout=900) != 0 or not out.exists():
            raise SystemExit(f"learner {name} failed (exit {p.returncode}): see its output above")
        results.append(json.loads(out.read_text()))
    return results


def overlaps(results: list[dict]) -> list[str]:
    """Every timed region that starts before an earlier one of another learner has ended."""
    found, last = [], None  # last: the region that ends latest so far
    for span in sorted((s, e, r["name"]) for r in results for s, e in r["spans"]):
        if last and span[0] < last[1] and span[2] != last[2]:
            found.append(f"{last[2]} {last[0]:.3f}-{last[1]:.3f} and {span[2]} {span[0]:.3f}-{span[1]:.3f}")
        if last is None or span[1] > last[1]:
            last = span
    return found


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--learners", type=int, default=4)
    p.add_argument("--kernel", choices=["add", "gemm"], default="add")
    p.add_argument("--iterations", type=int, default=100)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--settle", type=float, default=1.0, help="seconds each case runs before it is timed")
    p.add_argument("--tolerance", type=float, default=0.03)
    p.add_argument("--out", required=True, help="the JSON file to write")
    p.add_argument("--learner", help=argparse.SUPPRESS)  # internal: run as one learner
    args = p.parse_args()
    if args.learner:
        Path(args.out).write_text(json.dumps(learner(json.loads(args.learner))))
        return 0

    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        queue = scratch / "gpu-queue"
        queue.mkdir(mode=0o1777)
        before = run_learners(["alone-before"], args, str(queue), scratch)
        room = run_learners([f"learner{i + 1}" for i in range(args.learners)], args, str(queue), scratch)
        after = run_learners(["alone-after"], args, str(queue), scratch)
    alone = statistics.median([before[0]["us"], after[0]["us"]])
    for r in room:
        r["deviation"] = round(r["us"] / alone - 1, 4)
    bad = overlaps(room)
    far = [r["name"] for r in room if abs(r["deviation"]) > args.tolerance]
    summary = {"kernel": args.kernel, "learners": args.learners, "alone_us": [before[0]["us"], after[0]["us"]],
               "room_us": [r["us"] for r in room], "max_abs_deviation": max(abs(r["deviation"]) for r in room),
               "tolerance": args.tolerance, "overlaps": bad, "over_tolerance": far,
               "waits_s": [r["waited_s"] for r in room]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"summary": summary, "alone": before + after, "room": room,
                                          "params": vars(args)}, indent=1))
    print(json.dumps(summary, indent=1))
    print(f"wrote {args.out}")
    return 1 if bad or far else 0


if __name__ == "__main__":
    sys.exit(main())
