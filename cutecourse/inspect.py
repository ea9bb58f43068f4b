"""Compile a kernel for sm_90a or sm_100a on any machine and look at what the compiler made.

No GPU is needed to compile: ``cute.compile`` on fake tensors produces PTX (the virtual ISA),
a cubin (machine code for the chosen architecture) and, with ``nvdisasm`` installed, SASS (that
machine code as text). From those this module reads what a kernel really does: how wide its
loads are, whether it issues wgmma / TMA / multicast / tcgen05 instructions, how many registers
it needs and whether it spills.

Two ways in:

* ``compile_report("cutecourse.kernels.elementwise:compile_target", arch="sm_100a", ...)``
  compiles a *course kernel* named by ``"module:function"`` in a fresh Python process. That
  function (a "compile target") takes JSON-able keyword arguments and returns
  ``(jit_function, args)`` or ``(jit_function, args, kwargs)``, the arguments usually fake
  tensors and the keyword arguments compile-time constants. A fresh process is needed
  because the DSL reads ``CUTE_DSL_ARCH`` once, at import: one process cannot compile for two
  architectures through the public settings. It also hides the DSL's other quirks: the dump
  directory must exist, the file cache must be off for artifacts to appear, ``KEEP`` must list
  ``ptx`` or the PTX is dropped.
* ``compile_here(jit_function, *args)`` compiles *your own* function (a notebook cell's) in this
  process, for this process's architecture (``cutecourse.ARCH``).

Both return a :class:`Report`.
"""

from __future__ import annotations

import contextlib
import html
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from .errors import CompileError

ARCHS = ("sm_90a", "sm_100a")

#: Named instruction patterns (regular expressions over PTX) that the notebooks ask about.
PTX_FEATURES: dict[str, str] = {
    "vector global loads": r"^ld\.global(\.[\w:]+)*\.v[248]\.",
    "scalar global loads": r"^ld\.global(?!(\.[\w:]+)*\.v[248]\.)",
    "vector global stores": r"^st\.global(\.[\w:]+)*\.v[248]\.",
    "scalar global stores": r"^st\.global(?!(\.[\w:]+)*\.v[248]\.)",
    "wgmma": r"^wgmma\.mma_async",
    "wgmma wait_group": r"^wgmma\.wait_group",
    "TMA loads": r"^cp\.async\.bulk\.tensor\.\w+\.shared::(cta|cluster)\.global",
    "TMA stores": r"^cp\.async\.bulk\.tensor\.\w+\.global\.shared",
    "TMA multicast loads": r"^cp\.async\.bulk\.tensor.*multicast::cluster",
    "mbarrier waits": r"^mbarrier\.try_wait",
    "mbarrier arrives": r"^mbarrier\.arrive",
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

_ANSI = re.compile(r"\x1b\[[0-9;]*m")

#: ptxas's resource remarks (registers, spills) and every warning. With remarks{} alone the DSL
#: hides untagged warnings, among them "software pipelining ('prefetch_stages') skipped".
COMPILER_OPT = "remarks{ptx} warnings"


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
    for line in _ANSI.sub("", log).splitlines():
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


# ----------------------------------------------------------------------------------------
# Compiling
# ----------------------------------------------------------------------------------------
def _nvdisasm_available() -> bool:
    try:
        from cutlass.base_dsl.env_manager import _find_nvdisasm_binary

        _find_nvdisasm_binary()
        return True
    except Exception:
        return False


def dsl_environment(arch: str, dump_dir: str, sass: bool) -> dict[str, str]:
    """The DSL settings a compile-and-inspect run needs (see the module docstring)."""
    return {
        "CUTE_DSL_ARCH": arch,
        "CUTE_DSL_KEEP": "ptx,cubin,sass" if sass else "ptx,cubin",
        "CUTE_DSL_DUMP_DIR": dump_dir,
        "CUTE_DSL_DISABLE_FILE_CACHING": "1",
        "CUTE_DSL_COMPILER_OPT": COMPILER_OPT,
    }


def _resolve(target: str) -> Callable:
    import importlib

    if ":" not in target:
        raise ValueError(f"compile target {target!r} must look like 'package.module:function'")
    mod, fn = target.split(":", 1)
    return getattr(importlib.import_module(mod), fn)


@contextlib.contextmanager
def _captured_output():
    """Capture Python-level and native (fd 1/2) output of a compile into one string."""
    buf = io.StringIO()
    with tempfile.TemporaryFile(mode="w+") as native:
        saved = []
        for fd in (1, 2):
            try:
                saved.append((fd, os.dup(fd)))
            except OSError:
                pass
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, _ in saved:
            os.dup2(native.fileno(), fd)
        try:
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
                yield buf
        finally:
            for fd, orig in saved:
                os.dup2(orig, fd)
                os.close(orig)
            native.seek(0)
            buf.write(native.read())


def _report(target: str, arch: str, params: dict, compiled, log: str, seconds: float) -> Report:
    art = compiled.artifacts
    if art is None or art.PTX is None:
        raise CompileError(
            "the compiler produced no PTX",
            "the DSL did not keep the PTX; this release may have renamed its keep settings",
            log)
    log = _ANSI.sub("", log)
    return Report(target, arch, params, art.PTX, art.SASS, len(art.CUBIN or b""), log, seconds,
                  parse_ptxas_remarks(log))


@contextlib.contextmanager
def _keeping_artifacts(dump_dir: str, sass: bool):
    """Ask this process's DSL to keep PTX/cubin/SASS for the compiles inside the block.

    The public switch, ``CUTE_DSL_KEEP``, is read once at import and would apply to every compile
    (turning off the JIT cache); these are the attributes it sets, set here for one compile and
    then restored. tests/test_inspect.py checks that this still works on the pinned release.
    """
    import warnings

    from cutlass.cutlass_dsl import CuTeDSL

    env = CuTeDSL._get_dsl().envar
    names = ("keep_ptx", "keep_cubin", "keep_sass", "dump_dir")
    saved = {n: getattr(env, n) for n in names}
    env.keep_ptx, env.keep_cubin, env.keep_sass, env.dump_dir = True, True, sass, dump_dir
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Cache is disabled")
            yield
    finally:
        for n, v in saved.items():
            setattr(env, n, v)


def compile_here(jit_function: Callable, *args, name: str | None = None, **kwargs) -> Report:
    """Compile ``jit_function(*args, **kwargs)`` in this process, for this process's arch."""
    import cutlass.cute as cute

    from . import ARCH

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cutecourse-here-") as dump, \
            _keeping_artifacts(dump, _nvdisasm_available()), _captured_output() as out:
        try:
            compiled = cute.compile(jit_function, *args, options=COMPILER_OPT, **kwargs)
        except Exception as exc:  # the DSL's own error text is the useful part
            raise CompileError(f"{getattr(jit_function, '__name__', 'kernel')} did not compile: "
                               f"{_first_line(exc)}",
                               "read the compiler's message above the line it points at",
                               out.getvalue()) from None
    return _report(name or getattr(jit_function, "__name__", "kernel"), ARCH, {}, compiled,
                   out.getvalue(), time.perf_counter() - t0)


def _first_line(exc: BaseException) -> str:
    text = _ANSI.sub("", str(exc)).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[0][:300] if lines else type(exc).__name__


_CACHE: dict[str, Report] = {}


def compile_report(target: str, arch: str = "sm_90a", timeout: float = 300.0, **params) -> Report:
    """Compile the course kernel ``target`` for ``arch`` in a fresh process; return a Report.

    Results are cached per (target, arch, params) for the life of this process.
    """
    if arch not in ARCHS:
        raise ValueError(f"arch must be one of {ARCHS}, not {arch!r}")
    key = json.dumps([target, arch, params], sort_keys=True, default=str)
    if key in _CACHE:
        return _CACHE[key]
    work = tempfile.mkdtemp(prefix="cutecourse-inspect-")
    try:
        dump = os.path.join(work, "dump")
        os.makedirs(dump)  # the DSL silently treats a missing dump dir as a file path
        env = dict(os.environ)
        env.update(dsl_environment(arch, dump, _nvdisasm_available()))
        env["CUTECOURSE_INSPECT_WORKER"] = "1"
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        spec = json.dumps({"target": target, "params": params, "out": work})
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, "-m", "cutecourse.inspect"], input=spec,
                                  capture_output=True, text=True, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise CompileError(f"compiling {target} for {arch} took over {timeout:.0f} s",
                               "a compile takes seconds; pass a larger timeout= if the machine is slow") from None
        seconds = time.perf_counter() - t0
        log = _ANSI.sub("", proc.stdout + proc.stderr)
        result_path = os.path.join(work, "result.json")
        if proc.returncode != 0 or not os.path.exists(result_path):
            err = ""
            if os.path.exists(os.path.join(work, "error.txt")):
                with open(os.path.join(work, "error.txt")) as f:
                    err = f.read().strip()
            raise CompileError(f"{target} did not compile for {arch}: {err or 'the compiler exited with code %d' % proc.returncode}",
                               "the compiler's log is in the exception's .log attribute", log)
        with open(result_path) as f:
            res = json.load(f)
        report = Report(target, arch, params, res["ptx"], res["sass"], res["cubin_bytes"], log,
                        seconds, parse_ptxas_remarks(log))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _CACHE[key] = report
    return report


def _worker() -> None:
    """Entry point of the compile process: read the spec on stdin, write result.json."""
    spec = json.loads(sys.stdin.read())
    out = spec["out"]
    try:
        import cutlass.cute as cute

        factory = _resolve(spec["target"])
        fn, args, *rest = factory(**spec["params"])  # (fn, args) or (fn, args, kwargs)
        compiled = cute.compile(fn, *args, **(rest[0] if rest else {}))
        art = compiled.artifacts
        res = {"ptx": art.PTX, "sass": art.SASS, "cubin_bytes": len(art.CUBIN or b"")}
    except Exception as exc:
        with open(os.path.join(out, "error.txt"), "w") as f:
            f.write(_first_line(exc))
        print(_ANSI.sub("", str(exc)), file=sys.stderr)
        sys.exit(1)
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump(res, f)


if __name__ == "__main__":
    _worker()
