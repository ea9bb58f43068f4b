"""Facts a kernel checker reads from PTX: the generated loops and the order of the operations in them.

A learner's mistake in a pipeline is usually visible as an *order*: the release (``mbarrier.arrive``)
before the ``wgmma.wait_group`` that proves the stage is no longer read, a wgmma with no barrier
wait before it, a ``wait_group 0`` where one group should stay in flight. :func:`loops` finds the
loops of the generated code (a ``$L__`` label and the backward branch to it; the spin loops inside
``mbarrier.try_wait`` blocks use local labels and are not loops here), :func:`mainloop` the one
that issues the wgmmas, and :func:`ops` names each instruction that matters (``OPS``), so a
message can quote the sequence (:func:`compact`: ``wait, fence, wgmma x4, commit, wait_group 1,
arrive``). ``kernel_check`` re-exports all of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: Instruction kinds a kernel checker talks about (regular expressions over PTX instructions).
OPS = {
    "expect_tx": r"^mbarrier\.arrive\.expect_tx",
    "arrive": r"^mbarrier\.arrive(?!\.expect_tx)",
    "wait": r"^mbarrier\.try_wait",
    "tma_multicast": r"^cp\.async\.bulk\.tensor.*multicast::cluster",
    "tma": r"^cp\.async\.bulk\.tensor\.\w+\.shared::(cta|cluster)\.global",
    "tma_store": r"^cp\.async\.bulk\.tensor\.\w+\.global\.shared",
    "fence": r"^wgmma\.fence",
    "wgmma": r"^wgmma\.mma_async",
    "commit": r"^wgmma\.commit_group",
    "wait_group": r"^wgmma\.wait_group",
}
_LABEL = re.compile(r"^(\$L__\w+):")
_BRANCH = re.compile(r"\bbra(?:\.uni)?\s+(\$L__\w+)")


@dataclass
class Loop:
    """A loop of the generated code: a ``$L__`` label and the backward branch to it."""

    label: str
    lines: list[str] = field(default_factory=list)  # instruction lines of the body, in order

    def ops(self) -> list[str]:
        return ops(self.lines)


def _clean(ptx: str) -> list[str]:
    out = []
    for raw in ptx.splitlines():
        line = raw.split("//")[0].strip().rstrip(";").strip()
        if line.startswith("@"):
            line = line.split(None, 1)[1] if " " in line else line
        if line and not line.startswith((".", "{", "}", "(", ")")):
            out.append(line)
    return out


def loops(ptx: str) -> list[Loop]:
    """Every loop of the PTX (outer loops contain their inner loops' lines), in code order.
    The spin loops inside ``mbarrier.try_wait`` blocks (local labels) are not loops here."""
    lines, seen, found = _clean(ptx), {}, []
    for i, line in enumerate(lines):
        m = _LABEL.match(line)
        if m:
            seen[m.group(1)] = i
            continue
        b = _BRANCH.search(line)
        if b and b.group(1) in seen:
            start = seen[b.group(1)]
            body = [ln for ln in lines[start + 1:i + 1] if not _LABEL.match(ln)]
            found.append((start, Loop(b.group(1), body)))
    return [loop for _, loop in sorted(found, key=lambda x: x[0])]


def ops(lines: list[str]) -> list[str]:
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


def wait_group_depths(lines: list[str]) -> list[int]:
    """The N of every ``wgmma.wait_group N`` in ``lines``."""
    return [int(n.split()[1]) for n in ops(lines) if n.startswith("wait_group ") and n.split()[1].isdigit()]


def mainloop(report_or_ptx) -> Loop | None:
    """The innermost generated loop that issues wgmmas (None: no loop does)."""
    ptx = getattr(report_or_ptx, "ptx", report_or_ptx)
    with_mma = [lp for lp in loops(ptx) if "wgmma" in lp.ops()]
    return min(with_mma, key=lambda lp: len(lp.lines)) if with_mma else None
