"""The loops of a kernel's PTX: where they are, the order of the operations in them, and whether
the mainloop is software-pipelined. It works on any PTX text, e.g.
``cutecourse.inspect.compile_report(...).ptx``; the instruction patterns are ``ptx_report``'s.

**Loops.** :func:`loops` finds every loop of the generated code: a ``$L__`` label and a backward
branch to it. The spin loops inside ``mbarrier.try_wait`` blocks use local labels and are not
loops here. Each :class:`Loop` keeps its body's instructions, in order.

**Order.** A learner's mistake in a pipeline is usually visible as an *order*: the release
(``mbarrier.arrive``) before the ``wgmma.wait_group`` that proves the stage is no longer read, a
wgmma with no barrier wait before it, a ``wait_group 0`` where one group should stay in flight.
:func:`ops` names each instruction that matters (``OPS``), :func:`compact` turns the names into a
sequence a message can quote (``wait, fence, wgmma x4, commit, wait_group 1, arrive``), and
:func:`mainloop` is the loop that issues the wgmmas. ``exercises.kernel_check`` re-exports them.

**Pipelining.** A missing "pipelining skipped" warning proves nothing; the code the compiler
wrote does. A pipelined mainloop has a recognisable shape (:func:`loop_structure`):

* a **prologue**: TMA loads issued before the loop that runs the wgmmas (they fill the ring);
* a **steady-state loop** that contains both TMA loads (for a later k-tile) and wgmmas;
* for the compiler's pipeliner, a **drain loop**: wgmmas but no TMA loads (the last P k-tiles,
  whose loads were issued earlier).

The naive mainloop has none of that: one loop, its TMA loads right before its wgmmas.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .ptx_report import (MBARRIER_ARRIVE, MBARRIER_EXPECT_TX, MBARRIER_WAIT, TMA_LOAD, TMA_MULTICAST_LOAD,
                         TMA_STORE, WGMMA, WGMMA_COMMIT, WGMMA_FENCE, WGMMA_WAIT)

#: The instruction kinds a message talks about, by name; the first that matches names an
#: instruction (a multicast load is "tma_multicast", not also "tma").
OPS = {
    "expect_tx": MBARRIER_EXPECT_TX,
    "arrive": MBARRIER_ARRIVE + r"(?!\.expect_tx)",
    "wait": MBARRIER_WAIT,
    "tma_multicast": TMA_MULTICAST_LOAD,
    "tma": TMA_LOAD,
    "tma_store": TMA_STORE,
    "fence": WGMMA_FENCE,
    "wgmma": WGMMA,
    "commit": WGMMA_COMMIT,
    "wait_group": WGMMA_WAIT,
}
_TMA_LOAD, _WGMMA = re.compile(TMA_LOAD), re.compile(WGMMA)
_LABEL = re.compile(r"^(\$L__\w+):")
_BRANCH = re.compile(r"\bbra(?:\.uni)?\s+(\$L__\w+)")


def _count(rx: re.Pattern, lines) -> int:
    return sum(bool(rx.match(line)) for line in lines)


@dataclass(frozen=True)
class Loop:
    """A loop of the generated code: a ``$L__`` label and the backward branch to it."""

    label: str
    start: int  # position of the label among the PTX's instructions and labels
    end: int  # position of the backward branch
    lines: tuple[str, ...]  # the body's instructions in order (an inner loop's included)

    def ops(self) -> list[str]:
        return ops(self.lines)

    @property
    def tma_loads(self) -> int:
        return _count(_TMA_LOAD, self.lines)

    @property
    def wgmmas(self) -> int:
        return _count(_WGMMA, self.lines)

    @property
    def kind(self) -> str:
        if self.wgmmas and self.tma_loads:
            return "steady"  # loads for later k-tiles overlap this k-tile's MMAs
        if self.wgmmas:
            return "drain"  # MMAs only: the tiles whose loads were issued before
        if self.tma_loads:
            return "prologue"  # loads only: filling the ring
        return "other"


def _lines(ptx: str, guards: bool = False) -> list[str]:
    """The instructions and labels of the PTX, in order: no comments, directives or braces, and
    no predicate guards unless ``guards`` (the positions are the same either way)."""
    out = []
    for raw in ptx.splitlines():
        line = raw.split("//")[0].strip().rstrip(";").strip()
        if line.startswith("@") and not guards:
            line = line.split(None, 1)[1] if " " in line else line
        if line and not line.startswith((".", "{", "}", "(", ")")):
            out.append(line)
    return out


def _loops(lines: list[str]) -> list[Loop]:
    seen, found = {}, []
    for i, line in enumerate(lines):
        m = _LABEL.match(line)
        if m:
            seen[m.group(1)] = i
            continue
        b = _BRANCH.search(line)
        if b and b.group(1) in seen:
            start = seen[b.group(1)]
            body = tuple(ln for ln in lines[start + 1:i + 1] if not _LABEL.match(ln))
            found.append(Loop(b.group(1), start, i, body))
    return sorted(found, key=lambda lp: lp.start)


def loops(ptx: str) -> list[Loop]:
    """Every loop of the PTX (outer loops contain their inner loops' lines), in code order."""
    return _loops(_lines(ptx))


def ops(lines) -> list[str]:
    """The named kind of each interesting instruction (``OPS``), in order; ``wait_group N``
    carries its depth."""
    out = []
    for line in lines:
        for name, rx in OPS.items():
            if re.search(rx, line):
                if name == "wait_group":
                    depth = re.search(r"(\d+)\s*$", line)
                    name = f"wait_group {depth.group(1) if depth else '?'}"
                out.append(name)
                break
    return out


def compact(names: list[str]) -> str:
    """``wait, wgmma x4, commit, wait_group 1, arrive``: a sequence for a message."""
    out: list[list] = []
    for n in names:
        if out and out[-1][0] == n:
            out[-1][1] += 1
        else:
            out.append([n, 1])
    return ", ".join(n if c == 1 else f"{n} x{c}" for n, c in out)


def first(names: list[str], kind: str, after: int = -1) -> int:
    """Index of the first op of ``kind`` (a prefix: "wait_group" matches "wait_group 1") after
    position ``after``; -1 if none."""
    for i in range(after + 1, len(names)):
        if names[i] == kind or names[i].startswith(kind + " "):
            return i
    return -1


def wait_group_depths(lines) -> list[int]:
    """The N of every ``wgmma.wait_group N`` in ``lines``."""
    return [int(n.split()[1]) for n in ops(lines) if n.startswith("wait_group ") and n.split()[1].isdigit()]


def mainloop(report_or_ptx) -> Loop | None:
    """The innermost generated loop that issues wgmmas (None: no loop does)."""
    ptx = getattr(report_or_ptx, "ptx", report_or_ptx)
    with_mma = [lp for lp in loops(ptx) if "wgmma" in lp.ops()]
    return min(with_mma, key=lambda lp: len(lp.lines)) if with_mma else None


@dataclass(frozen=True)
class LoopStructure:
    loops: tuple[Loop, ...]
    tma_loads: int  # all TMA load instructions in the kernel
    prologue_tma_loads: int  # TMA loads placed before the first loop that runs wgmmas

    def kinds(self) -> list[str]:
        return [lp.kind for lp in self.loops if lp.kind != "other"]

    @property
    def pipelined(self) -> bool:
        """Loads are issued ahead (a prologue) and overlap MMAs inside a loop."""
        return self.prologue_tma_loads > 0 and "steady" in self.kinds()

    def __str__(self) -> str:
        return (f"TMA loads: {self.tma_loads} ({self.prologue_tma_loads} in the prologue); "
                f"loops: {', '.join(self.kinds()) or 'none'}; pipelined: {self.pipelined}")


def loop_structure(ptx: str) -> LoopStructure:
    """The loops of the PTX, each with its kind (prologue, steady, drain), and where its TMA
    loads are: the reading behind "is the mainloop software-pipelined?"."""
    lines = _lines(ptx)
    found = _loops(lines)
    mma_loops = [lp for lp in found if lp.wgmmas]
    first_mma_loop = mma_loops[0].start if mma_loops else len(lines)
    return LoopStructure(tuple(found), _count(_TMA_LOAD, lines), _count(_TMA_LOAD, lines[:first_mma_loop]))


def annotate(ptx: str, loop: Loop, notes, width: int = 60, branches: bool = False) -> str:
    """The lines of ``loop`` that ``notes`` names, in order, each with its note: a loop's PTX as a
    reader wants it, with its ``@%p`` guards (a guarded instruction runs where its predicate holds).

    ``notes``: ``(pattern, note)`` pairs or a dict; the first pattern found in a line names it. A
    note that is a list gives its n-th entry to the pattern's n-th line (its last to any more).
    The loop's own backward branch is named the back-edge; with ``branches``, every other guarded
    branch is named as the forward branch it is."""
    pairs = list(notes.items()) if isinstance(notes, dict) else list(notes)
    body = [" ".join(ln.split()) for ln in _lines(ptx, guards=True)[loop.start + 1:loop.end + 1]
            if not _LABEL.match(ln)]
    seen: dict[str, int] = {}
    out = []
    for i, line in enumerate(body):
        guard = line.split()[0][1:] if line.startswith("@") else None
        key, note = next(((k, n) for k, n in pairs if k in line), (None, None))
        if i == len(body) - 1:
            note = f"back-edge: to {loop.label}, the next k-tile" + (f", if {guard} is true" if guard else "")
        elif branches and guard and line.split()[1] == "bra":  # not the spin loops' bra.uni
            note = f"forward branch: skip to its label if {guard} is true"
        elif isinstance(note, list):
            seen[key] = seen.get(key, 0) + 1
            note = note[min(seen[key], len(note)) - 1]
        if note:
            out.append(f"  {line[:width]:<{width}}  <- {note}")
    return "\n".join(out)
