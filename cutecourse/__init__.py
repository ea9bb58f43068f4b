"""cutecourse: the kernels, pictures, tools and checkers behind the CuTe DSL course.

Importing the package fixes the DSL's target architecture for this process before ``cutlass``
is imported (see ``cutecourse.modes``), so import ``cutecourse`` first in every notebook.
"""

from . import modes

#: The DSL release this course teaches and tests (pip: nvidia-cutlass-dsl).
DSL_VERSION = "4.8.1"

ARCH = modes.configure_dsl()

__all__ = ["DSL_VERSION", "ARCH", "modes"]
