"""Which mode a notebook runs in, decided in one place.

Every kernel in the course targets one architecture: ``sm_90a`` (Hopper) or ``sm_100a``
(Blackwell); the elementwise kernels run on any GPU the DSL supports. For each kernel the
course either

* **runs** it: a GPU of that architecture is present, so the kernel is launched, checked
  against torch and timed; or
* **compiles** it: no such GPU, so the kernel is compiled for its target architecture on the
  CPU and what the compiler made is inspected (PTX, SASS, registers, instructions).

``mode_for(target)`` makes that decision and says why; ``banner(target)`` prints it as the one
line at the top of each notebook. Set ``CUTECOURSE_MODE=compile`` to force compile mode on a
GPU machine (the CPU path is then exercised there too). Compile mode never touches the GPU: the
variable is read before torch is asked about CUDA, so a room of learners in compile mode puts no
CUDA context on a shared GPU (``gpu()`` is None then). ``CUDA_VISIBLE_DEVICES=`` (empty) hides
the GPUs from the process itself, the same mode from outside the course's code. On a machine
without a GPU the variable changes nothing: that machine compiles already.

This module also fixes the DSL's architecture for the process: the DSL reads ``CUTE_DSL_ARCH``
once, when ``cutlass`` is first imported (changing it later has no effect; the tests show it),
so ``cutecourse`` sets it before anything imports ``cutlass``: the GPU's own architecture in
run mode, ``sm_90a`` otherwise. Compiles for any other architecture go through
``cutecourse.inspect``, which runs them in a separate process.
"""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass

from .errors import DeviceError

#: The course's default compile target when no GPU is present.
DEFAULT_ARCH = "sm_90a"

#: Compute capability -> the DSL's architecture name (the "a" suffix unlocks wgmma, tcgen05, ...).
_ARCH_OF_CAPABILITY = {
    (8, 0): "sm_80",
    (8, 6): "sm_86",
    (8, 9): "sm_89",
    (9, 0): "sm_90a",
    (10, 0): "sm_100a",
    (10, 3): "sm_103a",
    (12, 0): "sm_120a",
}

#: Friendly names for the targets the notebooks use.
ARCH_NAMES = {"sm_90a": "Hopper (H100/H200)", "sm_100a": "Blackwell (B200/GB200)", "any": "any CUDA GPU"}


@dataclass(frozen=True)
class Gpu:
    """The CUDA device this process sees (device 0)."""

    name: str
    capability: tuple[int, int]
    sm_count: int

    @property
    def arch(self) -> str:
        major, minor = self.capability
        return _ARCH_OF_CAPABILITY.get(self.capability, f"sm_{major}{minor}")


def gpu() -> Gpu | None:
    """The GPU if there is a usable one, else ``None`` (no torch CUDA, no driver, no device, or
    compile mode forced: then CUDA is not even initialised)."""
    return None if forced_compile() else _probe_gpu()


@functools.lru_cache(maxsize=None)
def _probe_gpu() -> Gpu | None:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return None
    try:
        if not torch.cuda.is_available():
            return None
        props = torch.cuda.get_device_properties(0)
        return Gpu(props.name, (props.major, props.minor), props.multi_processor_count)
    except Exception:  # a broken driver is "no GPU" for the course's purposes
        return None


def _why_no_gpu() -> str:
    try:
        import torch
    except ImportError:  # pragma: no cover
        return "torch is not installed"
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU-only build"
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None and hidden.strip() in ("", "-1"):
        return f"CUDA_VISIBLE_DEVICES={hidden.strip()!r} hides every GPU from this process"
    return "torch.cuda.is_available() is False (no NVIDIA GPU or driver visible)"


@dataclass(frozen=True)
class Mode:
    """The decision for one kernel target: run it here, or compile it for ``arch`` and inspect."""

    target: str  # "sm_90a", "sm_100a" or "any"
    arch: str  # the architecture the kernel is compiled for
    run: bool  # True: launch, verify, benchmark; False: compile + inspect only
    device: str  # what this machine has, in words
    reason: str  # why this mode

    @property
    def name(self) -> str:
        return "run" if self.run else "compile"

    def banner(self) -> str:
        if self.run:
            return (f"GPU mode: {self.device} ({self.arch}) runs this notebook's kernels; they are "
                    "checked against torch and timed.")
        what = ARCH_NAMES.get(self.arch, self.arch)
        return (f"CPU mode: {self.reason}. Kernels are compiled for {self.arch} ({what}) and "
                "inspected; cells that need the GPU say so and skip.")


def forced_compile() -> bool:
    """``CUTECOURSE_MODE=compile``: compile and inspect even where a GPU could run the kernels."""
    return os.environ.get("CUTECOURSE_MODE", "").strip().lower() == "compile"


def mode_for(target: str = "any") -> Mode:
    """Decide run or compile for a kernel that targets ``target`` ("sm_90a", "sm_100a", "any")."""
    if target not in ARCH_NAMES:
        raise ValueError(f"unknown target {target!r}; use one of {sorted(ARCH_NAMES)}")
    compile_arch = DEFAULT_ARCH if target == "any" else target
    if forced_compile():  # decided before torch is asked: compile mode leaves the GPU alone
        return Mode(target, compile_arch, False, "a GPU, if any, not touched",
                    "CUTECOURSE_MODE=compile is set")
    g = gpu()
    if g is None:
        return Mode(target, compile_arch, False, "no GPU", f"no GPU: {_why_no_gpu()}")
    device = f"{g.name}"
    if target == "any":
        if g.capability >= (8, 0):
            return Mode(target, g.arch, True, device, "the elementwise kernels run on sm_80 and newer")
        return Mode(target, compile_arch, False, device, f"{g.name} ({g.arch}) is older than sm_80")
    if g.arch == target:
        return Mode(target, target, True, device, f"{g.name} is {target}")
    return Mode(target, target, False, device,
                f"this GPU ({g.name}, {g.arch}) is not {target}, the architecture these kernels need")


def banner(target: str = "any") -> Mode:
    """Print the one-line mode banner for a notebook and return the decision."""
    m = mode_for(target)
    print(("▶ " if m.run else "◇ ") + m.banner())
    return m


def require_gpu(target: str = "any") -> Gpu:
    """Return the GPU if kernels for ``target`` can run here; otherwise a clear DeviceError."""
    m = mode_for(target)
    if not m.run:
        raise DeviceError(
            f"this step launches a {ARCH_NAMES[target]} kernel, and {m.reason}",
            "the compile-and-inspect cells show what the kernel compiles to; run this notebook "
            "on a matching GPU to launch it",
        )
    return gpu()


def process_arch() -> str:
    """The architecture the DSL compiles for in this process (see the module docstring)."""
    env = os.environ.get("CUTE_DSL_ARCH")
    if env:
        return env
    g = gpu()  # None in compile mode, without asking CUDA
    if g is not None and g.capability >= (8, 0):
        return g.arch
    return DEFAULT_ARCH


def configure_dsl() -> str:
    """Set ``CUTE_DSL_ARCH`` for this process before ``cutlass`` is imported; return the arch.

    Nothing else is set globally: asking the DSL to keep PTX for every compile would turn off its
    JIT cache and warn on each call; ``cutecourse.inspect.compile_here`` asks for it per compile.
    """
    arch = process_arch()
    if "cutlass" not in sys.modules:
        os.environ["CUTE_DSL_ARCH"] = arch
    return arch
