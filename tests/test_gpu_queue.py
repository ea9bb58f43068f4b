"""The room's GPU queue on the CPU: several processes, each "timing" through the queue.

Each worker is its own Python process (as each learner's notebook kernel is), so the locks are
the kernel's flocks between processes, not anything shared in memory. What must hold: no two
timed regions overlap, a waiter says how many are ahead of it and is served in its turn, a
timeout says what to do and leaves no ticket behind, and a dead process's ticket blocks nobody.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cutecourse import bench, gpu_queue
from cutecourse.errors import DeviceError

ROOT = Path(__file__).resolve().parent.parent


def _path() -> str:
    """This checkout first, then what the caller's PYTHONPATH holds (where the DSL may live)."""
    return os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))

#: A learner's process: queue, then "time" for ``hold`` seconds (or until ``release`` exists),
#: writing when its turn began and ended. ``via``: "turn" or "compare" (bench.compare, whose
#: time_us stands in for the GPU's work here).
WORKER = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    from cutecourse import bench, gpu_queue
    spec = json.loads(sys.argv[1])
    go = Path(spec["go"])
    while not go.exists():
        time.sleep(0.01)
    spans = []

    def fake_time_us(case, warmup=10, iterations=100, repeats=5):
        start = time.time()
        time.sleep(spec["hold"])
        spans.append((start, time.time()))
        return [1.0] * repeats

    def hold():
        start = time.time()
        release = spec.get("release")
        while release and not Path(release).exists():
            time.sleep(0.01)
        time.sleep(spec["hold"])
        spans.append((start, time.time()))

    try:
        if spec["via"] == "compare":
            bench.time_us = fake_time_us
            bench.environment = lambda: {}  # no torch, no DSL: this is about the queue
            cases = [bench.Case("torch.add", None), bench.Case("mine", None)]
            bench.compare("add", cases, bench.Work(bytes=1), "torch.add", progress=False)
        else:
            with gpu_queue.turn(spec["name"], timeout_s=spec.get("timeout", 60)):
                hold()
        Path(spec["out"]).write_text(json.dumps({"spans": spans}))
    except gpu_queue.QueueTimeout as exc:
        Path(spec["out"]).write_text(json.dumps({"timeout": exc.what, "fix": exc.fix}))
""")


@pytest.fixture
def queue(tmp_path):
    folder = tmp_path / "gpu-queue"
    folder.mkdir()
    folder.chmod(0o1777)
    return folder


def _start(tmp_path, queue, name, **spec):
    spec = {"name": name, "go": str(tmp_path / "go"), "out": str(tmp_path / f"{name}.json"),
            "hold": 0.0, "via": "turn", **spec}
    env = dict(os.environ, PYTHONPATH=_path(), CUTECOURSE_MODE="compile",
               CUTECOURSE_GPU_QUEUE=str(queue))
    log = open(tmp_path / f"{name}.log", "w")
    return subprocess.Popen([sys.executable, "-c", WORKER, json.dumps(spec)], stdout=log,
                            stderr=subprocess.STDOUT, env=env)


def _finish(procs, tmp_path, timeout=120):
    for p in procs:
        assert p.wait(timeout=timeout) == 0, [f.read_text() for f in tmp_path.glob("*.log")]


def _wait_for(predicate, timeout=60.0):
    t0 = time.monotonic()
    while not predicate():
        assert time.monotonic() - t0 < timeout, "timed out waiting for the workers"
        time.sleep(0.02)


def _tickets(queue):
    return sorted(p.name for p in queue.glob("t-*.json"))


@pytest.mark.parametrize("via", ["turn", "compare"])
def test_no_two_timed_regions_overlap(tmp_path, queue, via):
    """Five learners start at the same instant; their timed regions follow one another. With
    ``compare`` each learner times two cases, and the whole comparison is one turn."""
    procs = [_start(tmp_path, queue, f"learner{i}", hold=0.15, via=via) for i in range(5)]
    time.sleep(0.5)  # let every interpreter start and wait at the line
    (tmp_path / "go").touch()
    _finish(procs, tmp_path)
    per_learner = [json.loads((tmp_path / f"learner{i}.json").read_text())["spans"] for i in range(5)]
    assert all(len(s) == (2 if via == "compare" else 1) for s in per_learner)
    turns = sorted((s[0][0], s[-1][1]) for s in per_learner)  # each learner's first start, last end
    for (_, end), (start, _) in zip(turns, turns[1:]):
        assert end <= start, f"two timed regions overlap: {turns}"
    assert _tickets(queue) == [], "every ticket is gone once its timing is done"


def test_waiters_say_how_many_are_ahead_and_are_served_in_order(tmp_path, queue):
    (tmp_path / "go").touch()
    release = tmp_path / "release"
    holder = _start(tmp_path, queue, "holder", release=str(release))
    _wait_for(lambda: len(_tickets(queue)) == 1)
    waiters = []
    for i in range(3):  # one after the other, so their tickets are in this order
        waiters.append(_start(tmp_path, queue, f"w{i}"))
        _wait_for(lambda: len(_tickets(queue)) == i + 2)
    _wait_for(lambda: all("ahead" in (tmp_path / f"w{i}.log").read_text() for i in range(3)))
    release.touch()
    _finish([holder, *waiters], tmp_path)
    for i in range(3):
        log = (tmp_path / f"w{i}.log").read_text()
        assert f"waiting for the GPU: {i + 1} ahead of you" in log, log
        assert f"({gpu_queue.learner()} is timing holder)" in log, log  # who is first in line
        assert "the GPU is yours after" in log, log
        assert log.count(f"{i + 1} ahead") == 1, "a log line per change of place, not per poll"
    starts = [json.loads((tmp_path / f"w{i}.json").read_text())["spans"][0][0] for i in range(3)]
    assert starts == sorted(starts), "first come, first served"


def test_a_timeout_says_what_to_do_and_leaves_no_ticket(tmp_path, queue):
    (tmp_path / "go").touch()
    release = tmp_path / "release"
    holder = _start(tmp_path, queue, "holder", release=str(release))
    _wait_for(lambda: len(_tickets(queue)) == 1)
    waiter = _start(tmp_path, queue, "late", timeout=0.5)
    assert waiter.wait(timeout=60) == 0
    result = json.loads((tmp_path / "late.json").read_text())
    assert "still ahead of you" in result["timeout"] and "holder" in result["timeout"]
    assert "run the cell again" in result["fix"] and "python -m cutecourse.gpu_queue" in result["fix"]
    assert len(_tickets(queue)) == 1, "the late learner's ticket is removed, the holder's stays"
    release.touch()
    _finish([holder], tmp_path)


def test_a_killed_learner_blocks_nobody(tmp_path, queue):
    """A process killed while it holds the GPU leaves its ticket file, but the kernel has dropped
    its locks: the next learner is served at once and the stale ticket is cleared."""
    (tmp_path / "go").touch()
    holder = _start(tmp_path, queue, "killed", release=str(tmp_path / "never"))
    _wait_for(lambda: len(_tickets(queue)) == 1)
    time.sleep(0.3)  # inside its turn now
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    assert len(_tickets(queue)) == 1, "SIGKILL runs no clean-up: the ticket file is left"
    t0 = time.monotonic()
    with gpu_queue.turn("next", path=queue, timeout_s=10, out=io.StringIO()):
        waited = time.monotonic() - t0
        assert [t.learner for t in gpu_queue.tickets(queue)] == [gpu_queue.learner()]
    assert waited < 5 and _tickets(queue) == []


def test_a_ticket_nobody_holds_is_skipped(queue):
    """A ticket file with no live owner (ahead of everyone: the oldest stamp) is stale."""
    (queue / "t-00000000000000000001-99999.json").write_text(json.dumps({"learner": "ghost"}))
    out = io.StringIO()
    with gpu_queue.turn("mine", path=queue, timeout_s=5, out=out):
        assert [t.learner for t in gpu_queue.tickets(queue)] == [gpu_queue.learner()]
    assert out.getvalue() == "", "nobody was ahead, so nothing was said"
    assert _tickets(queue) == []


def test_nested_turns_wait_once_and_compare_holds_the_gpu(monkeypatch, queue):
    """bench.compare holds the GPU across its cases: while it times, another open of the lock
    cannot take it; the time_us inside it does not wait for itself."""
    monkeypatch.setenv("CUTECOURSE_GPU_QUEUE", str(queue))
    held = []

    def fake_time_us(case, warmup, iterations, repeats):
        fd = os.open(queue / gpu_queue.LOCK_NAME, os.O_RDONLY)  # as another learner would
        try:
            held.append(gpu_queue.inside() and not gpu_queue._locked(fd, fcntl.LOCK_EX))
        finally:
            os.close(fd)
        with gpu_queue.turn("inner", timeout_s=1):  # as the real time_us does: no wait for itself
            pass
        return [1.0] * repeats

    monkeypatch.setattr(bench, "time_us", fake_time_us)
    monkeypatch.setattr(bench, "environment", lambda: {})
    cases = [bench.Case("base", None), bench.Case("mine", None)]
    bench.compare("t", cases, bench.Work(bytes=1), "base", progress=False)
    assert held == [True, True] and not gpu_queue.inside()
    assert len(gpu_queue.tickets(queue)) == 0


def test_without_the_variable_nothing_waits(monkeypatch, tmp_path):
    monkeypatch.delenv("CUTECOURSE_GPU_QUEUE", raising=False)
    assert gpu_queue.folder() is None
    with gpu_queue.turn("alone"):
        assert gpu_queue.inside()
    assert not gpu_queue.inside()
    assert gpu_queue.main([]) == 0


def test_a_missing_folder_or_a_bad_timeout_says_how_to_fix_it(monkeypatch, tmp_path):
    with pytest.raises(DeviceError, match="not a folder") as exc:
        with gpu_queue.turn("x", path=tmp_path / "nowhere"):
            pass
    assert "install -d -m 1777" in exc.value.fix
    monkeypatch.setenv("CUTECOURSE_GPU_QUEUE_TIMEOUT", "ten minutes")
    with pytest.raises(DeviceError, match="not a number of seconds"):
        with gpu_queue.turn("x", path=tmp_path):
            pass


def test_the_lock_file_opens_for_every_learner_whatever_the_umask(queue):
    code = "import os; os.umask(0o077); from cutecourse import gpu_queue as q; from pathlib import Path; " \
           f"os.close(q._open_shared(Path({str(queue)!r}) / q.LOCK_NAME))"
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ, PYTHONPATH=_path()))
    assert (queue / gpu_queue.LOCK_NAME).stat().st_mode & 0o777 == 0o666


def test_the_status_line_refreshes_in_place_where_it_can():
    first = gpu_queue.Ticket("t-1", "alice", "'GEMM'", time.time(), 1, "h")
    live = io.StringIO()
    s = gpu_queue._Status(live)
    s.live = True
    s.show(3, first, 0.0)
    s.show(3, first, 0.2)  # same place within a second: nothing new
    s.show(2, first, 0.4)  # one moved on: refreshed at once
    s.done(5.0)
    text = live.getvalue()
    assert text.count("\r") == 3 and "3 ahead of you (alice is timing 'GEMM')" in text
    assert "2 ahead" in text and text.endswith("timing now" + " " * 20 + "\n")
    log = io.StringIO()
    s = gpu_queue._Status(log)
    s.live = False
    for ahead in (3, 3, 3, 2):
        s.show(ahead, first, 0.0)
    assert log.getvalue().count("\n") == 2 and "\r" not in log.getvalue()


def test_the_teacher_sees_the_queue(queue, capsys):
    assert gpu_queue.main([str(queue)]) == 0
    assert "empty" in capsys.readouterr().out
    with gpu_queue.turn("'GEMM fp16'", path=queue, out=io.StringIO()):
        assert gpu_queue.main([str(queue)]) == 0
    out = capsys.readouterr().out
    assert gpu_queue.learner() in out and "'GEMM fp16'" in out
    assert gpu_queue.main([str(queue / "missing")]) == 1


@pytest.mark.gpu("any")
def test_four_learners_time_a_course_kernel_through_the_queue(tmp_path):
    """Four learner processes on one GPU each check notebook 01's add against torch and time it
    with bench.compare: no two timed regions overlap, and each learner's time is within 3 % of
    the same run alone (benchmarks/gpu_queue_room.py, which the lead runs for the record)."""
    out = tmp_path / "room.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_queue_room.py"),
                           "--learners", "4", "--kernel", "add", "--out", str(out)],
                          capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, PYTHONPATH=_path()))
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())
    summary = data["summary"]
    assert len(data["room"]) == 4 and all("matches torch" in r["verified"] for r in data["room"])
    assert all(len(r["spans"]) >= 2 for r in data["room"]), "each learner timed both cases"
    assert summary["overlaps"] == [], summary
    assert summary["max_abs_deviation"] <= 0.03, summary
    assert sorted(summary["waits_s"])[-1] > 0.5, "the last learner waited for the others"
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
