"""The stand-ins that let a learner's CuTe DSL hook run on numbers, on the CPU (notebook 07).

A hook such as the group search or the FP8 promotion is ordinary Python over a few DSL names
(``@cute.jit``, ``cute.size``, ``cutlass.range_constexpr``, ``cutlass.Int32``, ``while`` over a
flag). Executed again with those names standing for their plain-Python meaning (:class:`_Cute`,
:class:`_Cutlass`), and given plain numbers and recording fakes for the kernel's objects, it
computes what the compiled code computes. ``nb07_cpu`` (the search) and ``nb07_cpu_promote`` (the
promotion) run the hooks with these and hold the results to the course's models.
"""

from __future__ import annotations

from ..models import group_scheduler as gs


class CpuModelError(Exception):
    """The learner's function failed or never ended on the CPU model: a message for the learner."""


class CpuModelSkipped(Exception):
    """The learner's function calls a DSL operation that only exists inside a kernel (a wgmma
    wait, a barrier): the CPU model cannot run it, and the PTX checks judge it instead."""


class _Cute:
    """``cute`` as plain Python: ``jit`` leaves the function as it is, ``size`` is ``len``."""

    def __init__(self, real):
        self._real = real

    @staticmethod
    def jit(fn=None, **_):
        return fn if fn is not None else (lambda f: f)

    @staticmethod
    def size(x, mode=None):
        return len(x)

    def __getattr__(self, name):
        return getattr(self._real, name)


class _Cutlass:
    """``cutlass`` as plain Python: numbers are ints and floats, ranges are ``range``."""

    @staticmethod
    def range(*args, **options):  # unroll=, pipelining=: no meaning in plain Python
        return range(*args)

    range_constexpr = range_dynamic = range
    Int32 = Int64 = staticmethod(int)
    Float32 = staticmethod(float)
    min, max = staticmethod(min), staticmethod(max)

    @staticmethod
    def const_expr(x):
        return x

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)


#: The CPU model's stand-ins, by the names a learner knows them by (in error messages).
_FAKES = {"_Groups": "`groups` (its fields: count, shapes, cluster_tile)",
          "_Ring": "`ring`", "_Fragment": "a register fragment"}


# -- the group search -----------------------------------------------------------------------------
class _Shapes:
    """``groups.shapes`` of a problem: counts the reads of each group's M, refuses group ``count``."""

    def __init__(self, sizes, limit: int):
        self.sizes, self.limit, self.reads = sizes, limit, 0
        self.floor, self.went_back = 0, False  # a read below the call's `group`: a restart

    def __getitem__(self, key):
        g, col = key
        g = int(g)
        if not 0 <= g < len(self.sizes):
            raise CpuModelError(f"your search reads group {g}'s shape, past the last group "
                                f"(groups.count = {len(self.sizes)}): stop when group reaches "
                                "groups.count, the walk's signal that no items are left")
        if col == 0:
            self.reads += 1
            self.went_back |= g < self.floor
            if self.reads > self.limit:
                raise CpuModelError("your search does not end on the CPU model: it read group "
                                    f"shapes {self.limit} times for one problem. Each pass of "
                                    "the loop must move on a group or stop (on the GPU it would "
                                    "hang)")
        return (*self.sizes[g], 1)[col]


class _Groups:
    """The fields of ``group_walk.GroupScheduler`` the search reads, over plain numbers."""

    def __init__(self, problem: gs.GroupedProblem, ctas: int):
        self.shapes = _Shapes(problem.sizes, 50 * (problem.groups + 1) * (problem.total + 1))
        self.count = problem.groups
        self.cluster_tile = (*problem.cluster_tile[:2], problem.tile_k)
        self.stride = ctas
