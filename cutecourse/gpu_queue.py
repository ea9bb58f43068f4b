"""One GPU, a room of learners: a queue for the launches that time something.

Two learners timing kernels on one GPU at once each measure the other's load. A correctness run
(launch once, compare with torch) does not care, so it goes ahead at once; a *timing* waits for
its turn. ``CUTECOURSE_GPU_QUEUE=<folder>`` turns the queue on (the teacher creates the folder,
world-writable with the sticky bit: ``install -d -m 1777 /srv/gpu-queue``); without it nothing
changes, as for a learner with a GPU of their own. ``cutecourse.bench`` times every kernel
through :func:`turn`, so the notebooks' timed cells and the exercise checkers' timings queue
with no change to them.

Two kinds of file live in the folder:

* ``gpu.lock``: the GPU itself. A timing holds an exclusive ``flock`` on it, and the kernel
  guarantees that only one process holds it: no two timed regions overlap, even if the tickets
  below were to disagree.
* ``t-<nanoseconds>-<pid>.json``: one *ticket* per waiting or timing process, named by the time
  it queued, so sorting the names gives the order of arrival ("3 ahead of you"). Its owner keeps
  a ``flock`` on it while it lives; the kernel drops that lock when the process dies, however
  it dies. A ticket nobody locks is *stale* (its owner was killed mid-wait): it is skipped, and
  deleted where the folder allows it (the sticky bit lets only the owner delete).

A waiter takes the GPU when no live ticket is ahead of its own and the lock is free. The order
is first come, first served as far as the clocks of one machine go ("FIFO-ish"); the lock keeps
it safe even when two tickets were stamped in the same instant.

Nested turns in one thread (``bench.compare`` holds the GPU across all its cases, and each
``bench.time_us`` inside it asks again) take the lock once. ``python -m cutecourse.gpu_queue``
shows the queue: who is timing, who waits, since when.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import DeviceError
from .progress import learner

ENV = "CUTECOURSE_GPU_QUEUE"
TIMEOUT_ENV = "CUTECOURSE_GPU_QUEUE_TIMEOUT"
#: How long a timing waits for its turn: 25 learners' one-minute timings, and some slack.
DEFAULT_TIMEOUT_S = 30 * 60
#: How often a waiter looks at the queue (a lock attempt and a directory listing: cheap).
POLL_S = 0.1
LOCK_NAME = "gpu.lock"

_held = threading.local()  # .depth: how many turns this thread is inside


class QueueTimeout(DeviceError):
    """The room's GPU stayed busy for longer than the queue's timeout."""


@dataclass(frozen=True)
class Ticket:
    """A live ticket: its file name (the queue order) and what its owner wrote in it."""

    name: str
    learner: str
    what: str
    since: float
    pid: int
    host: str


def folder() -> Path | None:
    """The queue's folder from ``CUTECOURSE_GPU_QUEUE``, or None (no queue: time at once)."""
    value = os.environ.get(ENV, "").strip()
    return Path(value).expanduser() if value else None


def inside() -> bool:
    """Whether this thread holds its turn now (the GPU, or no queue to wait for)."""
    return getattr(_held, "depth", 0) > 0


def _timeout_s() -> float:
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    try:
        return float(raw) if raw else DEFAULT_TIMEOUT_S
    except ValueError:
        raise DeviceError(f"{TIMEOUT_ENV}={raw!r} is not a number of seconds",
                          f"set it to how long a timing may wait, e.g. {TIMEOUT_ENV}=600") from None


def _check_folder(path: Path) -> None:
    if not path.is_dir():
        raise DeviceError(f"{ENV}={path} is not a folder, so the room's GPU queue cannot start",
                          f"the teacher creates it once: install -d -m 1777 {path}; on a GPU of "
                          f"your own, unset {ENV}")
    if not os.access(path, os.W_OK | os.X_OK):
        raise DeviceError(f"the GPU queue's folder {path} is not writable for {learner()}",
                          f"the teacher makes it writable for every learner: chmod 1777 {path}")


def _open_shared(path: Path) -> int:
    """Open (creating if needed) the lock file, which every learner must be able to open and
    lock. A file another user created in a sticky folder must be opened without O_CREAT
    (fs.protected_regular refuses it), so the plain open comes first. Read-write, because an
    exclusive flock over NFS needs it; read-only where the file's mode allows no more."""
    while True:
        try:
            try:
                return os.open(path, os.O_RDWR)
            except PermissionError:
                return os.open(path, os.O_RDONLY)
        except PermissionError:
            raise DeviceError(f"{path} cannot be opened by {learner()}",
                              f"the teacher makes it readable for every learner: chmod 666 {path}")
        except FileNotFoundError:
            pass
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue  # someone else created it between the two opens
        os.fchmod(fd, 0o666)  # a learner's umask 077 must not lock the others out
        return fd


def _locked(fd: int, how: int) -> bool:
    """Try a flock without waiting; True if it was taken."""
    try:
        fcntl.flock(fd, how | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _take_ticket(path: Path, what: str) -> tuple[str, int]:
    """Write this process's ticket and lock it. It is written and locked under a hidden name and
    renamed afterwards, so no other process ever sees it unlocked (which would read as stale)."""
    name = f"t-{time.time_ns():020d}-{os.getpid()}.json"
    hidden = path / f".{name}"
    fd = os.open(hidden, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    os.fchmod(fd, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, json.dumps({"learner": learner(), "what": what, "since": time.time(),
                             "pid": os.getpid(), "host": socket.gethostname()}).encode())
    os.rename(hidden, path / name)
    return name, fd


def tickets(path: Path) -> list[Ticket]:
    """The live tickets in arrival order; stale ones (no process holds them) are skipped and,
    where allowed, deleted."""
    live = []
    for name in sorted(os.listdir(path)):
        if not (name.startswith("t-") and name.endswith(".json")):
            continue
        try:
            fd = os.open(path / name, os.O_RDONLY)
        except (FileNotFoundError, PermissionError):
            continue
        try:
            if _locked(fd, fcntl.LOCK_SH):  # nobody holds it: its process is gone
                with contextlib.suppress(OSError):
                    os.unlink(path / name)
                continue
            try:
                info = json.loads(os.read(fd, 4096) or b"{}")
            except ValueError:
                info = {}
            live.append(Ticket(name, str(info.get("learner", "?")), str(info.get("what", "?")),
                               float(info.get("since", 0.0)), int(info.get("pid", 0)),
                               str(info.get("host", "?"))))
        finally:
            os.close(fd)
    return live


class _Status:
    """"waiting for the GPU: 3 ahead of you", kept on one line and refreshed where the output
    allows it (a terminal, Jupyter), one line per change of place elsewhere (a log)."""

    def __init__(self, out):
        self.out = out or sys.stdout
        self.live = "ipykernel" in sys.modules or getattr(self.out, "isatty", lambda: False)()
        self.shown, self.last_text, self.last_time = False, "", 0.0

    def show(self, ahead: int, first: Ticket | None, waited: float) -> None:
        who = f"{first.learner} is timing {first.what}" if first else "someone is timing"
        text = f"waiting for the GPU: {ahead} ahead of you ({who})"
        now = time.monotonic()
        if self.live and (text != self.last_text or now - self.last_time >= 1.0):
            self.out.write(f"\r{text}; {waited:.0f} s so far   ")
        elif not self.live and text != self.last_text:
            self.out.write(text + "\n")
        else:
            return
        self.out.flush()
        self.shown, self.last_text, self.last_time = True, text, now

    def done(self, waited: float) -> None:
        if self.shown:
            self.out.write(("\r" if self.live else "") + f"the GPU is yours after {waited:.0f} s "
                           "of waiting: timing now" + " " * 20 + "\n")
            self.out.flush()


def _wait(path: Path, what: str, timeout_s: float, out) -> tuple[int, int, str]:
    """Queue, wait for the turn; return (lock fd, ticket fd, ticket name) held."""
    _check_folder(path)
    lock = _open_shared(path / LOCK_NAME)
    name, ticket = _take_ticket(path, what)
    status, t0 = _Status(out), time.monotonic()
    try:
        while True:
            ahead = [t for t in tickets(path) if t.name < name]
            if not ahead and _locked(lock, fcntl.LOCK_EX):
                status.done(time.monotonic() - t0)
                return lock, ticket, name
            waited = time.monotonic() - t0
            if waited > timeout_s:
                first = ahead[0] if ahead else None
                who = (f"{first.learner} has been timing {first.what} for "
                       f"{time.time() - first.since:.0f} s" if first else "the GPU is held")
                raise QueueTimeout(
                    f"waited {waited:.0f} s for the room's GPU and {max(len(ahead), 1)} timing(s) are "
                    f"still ahead of you ({who})",
                    "run the cell again in a few minutes (checks of correctness never wait: only "
                    f"timings queue); the teacher sees the queue with python -m cutecourse.gpu_queue "
                    f"{path}; {TIMEOUT_ENV}=<seconds> waits longer")
            status.show(max(len(ahead), 1), ahead[0] if ahead else None, waited)
            time.sleep(POLL_S)
    except BaseException:
        _release(path, lock, ticket, name)
        raise


def _release(path: Path, lock: int, ticket: int, name: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path / name)
    os.close(ticket)  # closing drops the flocks
    os.close(lock)


@contextlib.contextmanager
def turn(what: str = "a kernel", path: Path | str | None = None, timeout_s: float | None = None,
         out=None):
    """Hold the room's GPU while the ``with`` block times something.

    Without a queue (``CUTECOURSE_GPU_QUEUE`` unset and no ``path``) it returns at once. With
    one, it waits its turn, saying how many timings are ahead; after ``timeout_s`` (default
    ``CUTECOURSE_GPU_QUEUE_TIMEOUT`` or 30 min) it raises :class:`QueueTimeout`, which says what
    to do. Nested turns in one thread wait once.
    """
    path = Path(path) if path is not None else folder()
    depth = getattr(_held, "depth", 0)
    if path is None or depth:
        _held.depth = depth + 1
        try:
            yield
        finally:
            _held.depth -= 1
        return
    held = _wait(path, what, _timeout_s() if timeout_s is None else timeout_s, out)
    _held.depth = 1
    try:
        yield
    finally:
        _held.depth = 0
        _release(path, *held)


def describe(path: Path) -> str:
    """The queue in words: who times now, who waits, since when."""
    live = tickets(path)
    if not live:
        return f"the GPU queue in {path} is empty: the next timing starts at once"
    now = time.time()
    lines = [f"the GPU queue in {path}: {len(live)} timing(s), first come first served"]
    for i, t in enumerate(live):
        state = "timing or next" if i == 0 else f"waiting, {i} ahead"
        lines.append(f"  {t.learner:<16} {state:<18} {t.what} (pid {t.pid} on {t.host}, "
                     f"{now - t.since:.0f} s in the queue)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] in (["-h"], ["--help"]):
        print(f"usage: python -m cutecourse.gpu_queue [FOLDER]  (default: ${ENV})")
        return 0
    path = Path(args[0]) if args else folder()
    if path is None:
        print(f"no GPU queue: {ENV} is not set (timings start at once)")
        return 0
    try:
        _check_folder(path)
    except DeviceError as exc:
        print(f"{exc.what}\n  -> {exc.fix}", file=sys.stderr)
        return 1
    print(describe(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
