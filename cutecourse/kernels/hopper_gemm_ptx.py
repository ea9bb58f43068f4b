"""Read the loop structure of a GEMM's PTX: is the mainloop software-pipelined?

A missing "pipelining skipped" warning proves nothing; the code the compiler wrote does. A
pipelined mainloop has a recognisable shape in PTX:

* a **prologue**: TMA loads issued before the loop that runs the wgmmas (they fill the ring);
* a **steady-state loop** that contains both TMA loads (for a later k-tile) and wgmmas;
* for the compiler's pipeliner, a **drain loop**: wgmmas but no TMA loads (the last P k-tiles,
  whose loads were issued earlier).

The naive mainloop has none of that: one loop, its TMA loads right before its wgmmas.

``loop_structure(ptx)`` finds the loops (a backward branch to a ``$L__BB`` label) and classifies
every TMA load. It works on any PTX text, e.g. ``cutecourse.inspect.compile_report(...).ptx``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: TMA tensor loads global -> shared. 4.8.1 writes ``shared::cta`` for a CTA-local destination and
#: ``shared::cluster`` for multicast; both are loads.
TMA_LOAD = re.compile(r"^cp\.async\.bulk\.tensor\.\w+\.shared::(cta|cluster)\.global")
WGMMA = re.compile(r"^wgmma\.mma_async")
_LABEL = re.compile(r"^(\$L__\w+):")
_BRANCH = re.compile(r"\bbra(?:\.uni)?\s+(\$L__\w+)")


@dataclass(frozen=True)
class Loop:
    start: int  # line index of the loop header label
    end: int  # line index of the backward branch
    tma_loads: int
    wgmmas: int

    @property
    def kind(self) -> str:
        if self.wgmmas and self.tma_loads:
            return "steady"  # loads for later k-tiles overlap this k-tile's MMAs
        if self.wgmmas:
            return "drain"  # MMAs only: the tiles whose loads were issued before
        if self.tma_loads:
            return "prologue"  # loads only: filling the ring
        return "other"


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


def _lines(ptx: str) -> list[str]:
    out = []
    for raw in ptx.splitlines():
        line = raw.split("//")[0].strip()
        if line.startswith("@"):
            line = line.split(None, 1)[1] if " " in line else line
        out.append(line)
    return out


def loop_structure(ptx: str) -> LoopStructure:
    lines = _lines(ptx)
    labels = {}
    for i, line in enumerate(lines):
        m = _LABEL.match(line)
        if m:
            labels[m.group(1)] = i
    loops = []
    for i, line in enumerate(lines):
        m = _BRANCH.search(line)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            start = labels[m.group(1)]
            body = lines[start:i + 1]
            loops.append(Loop(start, i, sum(bool(TMA_LOAD.match(x)) for x in body),
                              sum(bool(WGMMA.match(x)) for x in body)))
    loops.sort(key=lambda lp: lp.start)
    mma_loops = [lp for lp in loops if lp.wgmmas]
    first_mma_loop = mma_loops[0].start if mma_loops else len(lines)
    prologue = sum(bool(TMA_LOAD.match(x)) for x in lines[:first_mma_loop])
    total = sum(bool(TMA_LOAD.match(x)) for x in lines)
    return LoopStructure(tuple(loops), total, prologue)
