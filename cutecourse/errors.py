"""Errors the course raises: each says what is wrong and what to do about it.

A learner who passes a misaligned tensor or a shape the tile does not divide should read one
sentence, not a page of MLIR. Every error here carries two parts, ``what`` and ``fix``; in
Jupyter it renders as those two lines instead of a traceback (``_render_traceback_`` is the
IPython hook for that).
"""

from __future__ import annotations


class CourseError(Exception):
    """Base class: ``what`` went wrong, and how to ``fix`` it."""

    def __init__(self, what: str, fix: str = ""):
        self.what = what
        self.fix = fix
        super().__init__(what if not fix else f"{what}\n  -> {fix}")

    def _render_traceback_(self) -> list[str]:  # IPython: show the message, not the stack
        red, bold, reset = "\x1b[31m", "\x1b[1m", "\x1b[0m"
        lines = [f"{red}{bold}{type(self).__name__}{reset}{red}: {self.what}{reset}"]
        if self.fix:
            lines.append(f"  -> {self.fix}")
        return lines


class ShapeError(CourseError, ValueError):
    """A shape the kernel's tile does not divide, or operands whose shapes disagree."""


class DTypeError(CourseError, TypeError):
    """A dtype the kernel was not written for, or operands whose dtypes disagree."""


class AlignmentError(CourseError, ValueError):
    """A tensor whose address or strides break the kernel's vector or TMA alignment."""


class LayoutError(CourseError, ValueError):
    """A tensor whose memory layout the kernel does not handle (non-contiguous, wrong major)."""


class DeviceError(CourseError, RuntimeError):
    """Operands on the wrong device, or no GPU of the architecture a kernel needs."""


class CompileError(CourseError, RuntimeError):
    """The DSL compiler rejected a kernel; ``log`` holds the compiler's own words."""

    def __init__(self, what: str, fix: str = "", log: str = ""):
        super().__init__(what, fix)
        self.log = log
