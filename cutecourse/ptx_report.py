"""What the compiler made of one kernel: :class:`Report` (PTX, SASS, ptxas's resource remarks) and
the parsing behind it. :mod:`cutecourse.inspect` compiles and returns one; this module only reads.

The questions the notebooks ask of a kernel are counts of instruction patterns (``PTX_FEATURES``:
vector loads, wgmma, TMA, multicast, tcgen05, ...), the registers and spills ptxas reports, and
excerpts of the PTX around an instruction, which ``Report.show`` prints.
"""

from __future__ import annotations

import html
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

# The instructions the course reads, one spelling each (regular expressions over one PTX
# instruction, its predicate guard and comment stripped). ``ptx_loops`` names the same ones.
#: A TMA tensor load global -> shared. 4.8.1 writes ``shared::cta`` for a CTA-local destination
#: and ``shared::cluster`` for a multicast one: both are loads.
TMA_LOAD = r"^cp\.async\.bulk\.tensor\.\w+\.shared::(cta|cluster)\.global"
#: A TMA load that one CTA issues for every CTA of its ctaMask.
TMA_MULTICAST_LOAD = r"^cp\.async\.bulk\.tensor.*multicast::cluster"
TMA_STORE = r"^cp\.async\.bulk\.tensor\.\w+\.global\.shared"
WGMMA = r"^wgmma\.mma_async"
WGMMA_FENCE = r"^wgmma\.fence"
WGMMA_COMMIT = r"^wgmma\.commit_group"
WGMMA_WAIT = r"^wgmma\.wait_group"
MBARRIER_WAIT = r"^mbarrier\.try_wait"
MBARRIER_ARRIVE = r"^mbarrier\.arrive"  # expect_tx arrives too
MBARRIER_EXPECT_TX = r"^mbarrier\.arrive\.expect_tx"

#: Named instruction patterns (regular expressions over PTX) that the notebooks ask about.
PTX_FEATURES: dict[str, str] = {
    "vector global loads": r"^ld\.global(\.[\w:]+)*\.v[248]\.",
    "scalar global loads": r"^ld\.global(?!(\.[\w:]+)*\.v[248]\.)",
    "vector global stores": r"^st\.global(\.[\w:]+)*\.v[248]\.",
    "scalar global stores": r"^st\.global(?!(\.[\w:]+)*\.v[248]\.)",
    "wgmma": WGMMA,
    "wgmma wait_group": WGMMA_WAIT,
    "TMA loads": TMA_LOAD,
    "TMA stores": TMA_STORE,
    "TMA multicast loads": TMA_MULTICAST_LOAD,
    "mbarrier waits": MBARRIER_WAIT,
    "mbarrier arrives": MBARRIER_ARRIVE,
    "tcgen05": r"^tcgen05\.",
    "block-scaled MMA": r"^tcgen05\.mma.*block_scale",
    "tensormap.replace": r"^tensormap\.replace",
    # Blackwell block-scaled GEMM (kernels/blackwell_grouped_gemm.py)
    "NVFP4 MMA": r"^tcgen05\.mma\.cta_group::[12]\.kind::mxf4nvf4\.block_scale\.block16\b",
    "MXFP8 MMA": r"^tcgen05\.mma\.cta_group::[12]\.kind::mxf8f6f4\.block_scale\.block32\b",
    "tcgen05.cp": r"^tcgen05\.cp\.",
    "tcgen05.ld": r"^tcgen05\.ld\.",
    "tcgen05.wait::ld": r"^tcgen05\.wait::ld",
    "tcgen05.alloc": r"^tcgen05\.alloc\.",
    "tcgen05.dealloc": r"^tcgen05\.dealloc\.",
    "tcgen05.commit multicast": r"^tcgen05\.commit\.\S*multicast::cluster",
    "tensormap release": r"^tensormap\.cp_fenceproxy\.global\.shared::cta\.tensormap::generic\.release",
    "tensormap acquire": r"^fence\.proxy\.tensormap::generic\.acquire",
    "setmaxnreg": r"^setmaxnreg",
    # programmatic dependent launch (kernels/hopper_gemm_persistent.py, pdl=True)
    "griddepcontrol.wait": r"^griddepcontrol\.wait",
    "griddepcontrol.launch_dependents": r"^griddepcontrol\.launch_dependents",
}

#: Colour escapes some tools put in their logs (the package's one spelling of them).
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class KernelResources:
    """What ptxas reported for one kernel entry."""

    name: str
    registers: int | None = None
    stack_frame: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    smem_static: int = 0


@dataclass
class Report:
    """What the compiler made of one kernel, for one architecture."""

    target: str
    arch: str
    params: dict[str, Any]
    ptx: str
    sass: str | None
    cubin_bytes: int
    log: str  # everything the compile printed: the DSL's prints, remarks, warnings
    seconds: float
    kernels: list[KernelResources] = field(default_factory=list)

    # -- resources -------------------------------------------------------------------------
    @property
    def registers(self) -> int | None:
        regs = [k.registers for k in self.kernels if k.registers is not None]
        return max(regs) if regs else None

    @property
    def spill_bytes(self) -> int:
        return sum(k.spill_stores + k.spill_loads for k in self.kernels)

    @property
    def smem_static(self) -> int:
        return max((k.smem_static for k in self.kernels), default=0)

    # -- instructions ----------------------------------------------------------------------
    def instructions(self, source: str = "ptx") -> list[str]:
        """The instruction lines of the PTX or SASS, stripped of labels, offsets and comments."""
        return _ptx_instructions(self.ptx) if source == "ptx" else _sass_instructions(self.sass or "")

    def histogram(self, source: str = "ptx") -> Counter:
        """Opcode -> count. PTX opcodes keep their qualifiers (``ld.global.v4.b32``); so do
        SASS opcodes (``LDG.E.128``), since the qualifiers carry the widths the course studies."""
        return Counter(_opcode(line) for line in self.instructions(source))

    def count(self, pattern: str, source: str = "ptx") -> int:
        """How many instructions match ``pattern`` (a regex, or a name from PTX_FEATURES)."""
        rx = re.compile(PTX_FEATURES.get(pattern, pattern))
        return sum(1 for line in self.instructions(source) if rx.search(line))

    def features(self) -> dict[str, int]:
        """Count of every named PTX feature (zero counts included: absence is information)."""
        return {name: self.count(name) for name in PTX_FEATURES}

    def diagnostics(self, pattern: str = r"warning|skipped|error") -> list[str]:
        """Lines of the compile log matching ``pattern`` (e.g. the pipelining diagnostic)."""
        return [ln for ln in self.log.splitlines() if re.search(pattern, ln, re.IGNORECASE)]

    def summary(self) -> dict[str, Any]:
        """One dict a table or a test can use."""
        return {
            "target": self.target,
            "arch": self.arch,
            "registers": self.registers,
            "spill_bytes": self.spill_bytes,
            "smem_static": self.smem_static,
            "ptx_instructions": len(self.instructions("ptx")),
            "sass_instructions": len(self.instructions("sass")) if self.sass else None,
            **{k: v for k, v in self.features().items() if v},
        }

    # -- reading ---------------------------------------------------------------------------
    def excerpt(self, patterns: list[str] | str, source: str = "ptx", context: int = 1,
                max_lines: int = 30) -> list[tuple[bool, str]]:
        """Instruction lines around the matches of ``patterns``: [(is_match, line), ...]."""
        if isinstance(patterns, str):
            patterns = [patterns]
        rx = re.compile("|".join(f"(?:{PTX_FEATURES.get(p, p)})" for p in patterns))
        lines = self.instructions(source)
        hits = [i for i, ln in enumerate(lines) if rx.search(ln)]
        keep: list[int] = []
        for i in hits:
            for j in range(max(0, i - context), min(len(lines), i + context + 1)):
                if not keep or j > keep[-1]:
                    keep.append(j)
        out, prev = [], None
        for j in keep[:max_lines]:
            if prev is not None and j != prev + 1:
                out.append((False, "..."))
            out.append((j in hits, lines[j]))
            prev = j
        return out

    def show(self, patterns: list[str] | str, source: str = "ptx", context: int = 1,
             max_lines: int = 30, title: str | None = None):
        """Display an excerpt with the matching instructions highlighted (HTML in Jupyter)."""
        rows = self.excerpt(patterns, source, context, max_lines)
        head = title or f"{self.target} [{self.arch}] {source.upper()}"
        try:
            from IPython.display import HTML, display
        except ImportError:  # pragma: no cover
            display = None
        text = "\n".join(("▶ " if hit else "  ") + line for hit, line in rows)
        if display is None:
            print(head + "\n" + text)
            return
        body = "\n".join(
            f'<span style="background:#ffe08a;font-weight:bold">{html.escape(line)}</span>'
            if hit else html.escape(line) for hit, line in rows)
        display(HTML(f"<b>{html.escape(head)}</b><pre style='font-size:12px'>{body}</pre>"))
        return None

    def __repr__(self) -> str:
        s = self.summary()
        feats = ", ".join(f"{k}={v}" for k, v in s.items()
                          if k not in ("target", "arch", "registers", "spill_bytes", "smem_static"))
        return (f"<Report {self.target} [{self.arch}] registers={s['registers']} "
                f"spills={s['spill_bytes']}B smem_static={s['smem_static']}B {feats}>")


# ----------------------------------------------------------------------------------------
# Parsing
# ----------------------------------------------------------------------------------------
def _ptx_instructions(ptx: str) -> list[str]:
    out = []
    for raw in ptx.splitlines():
        line = raw.split("//")[0].strip()
        if not line or line.startswith((".", "{", "}", ")", "(")) or line.endswith(":"):
            continue
        if line.startswith("@"):  # predicate guard: "@%p1 bra ..."
            line = line.split(None, 1)[1] if " " in line else line
        out.append(line.rstrip(";").strip())
    return out


_SASS_LINE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")


def _sass_instructions(sass: str) -> list[str]:
    out = []
    for raw in sass.splitlines():
        m = _SASS_LINE.search(raw)
        if not m:
            continue
        line = m.group(1).strip()
        if line.startswith("@"):
            line = line.split(None, 1)[1]
        if line != "NOP":  # alignment padding after EXIT, not code
            out.append(line)
    return out


def _opcode(line: str) -> str:
    return line.split()[0] if line.split() else line


def parse_ptxas_remarks(log: str) -> list[KernelResources]:
    """Registers, stack, spills and static smem per kernel from ``remarks{ptx}`` output."""
    kernels: list[KernelResources] = []
    cur: KernelResources | None = None
    for line in ANSI.sub("", log).splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            cur = KernelResources(m.group(1))
            kernels.append(cur)
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            cur.stack_frame, cur.spill_stores, cur.spill_loads = map(int, m.groups())
        m = re.search(r"Used (\d+) registers", line)
        if m:
            cur.registers = int(m.group(1))
        m = re.search(r"(\d+) bytes smem", line)
        if m:
            cur.smem_static = int(m.group(1))
    return kernels
