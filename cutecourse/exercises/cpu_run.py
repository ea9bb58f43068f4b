"""Run a learner's CuTe DSL function on numbers, on the CPU: the CPU model of notebook 07's hooks.

A hook such as the group search or the FP8 promotion is ordinary Python over a few DSL names
(``@cute.jit``, ``cute.size``, ``cutlass.range_constexpr``, ``cutlass.Int32``, ``while`` over a
flag). Executed again with those names standing for their plain-Python meaning (:class:`_Cute`,
:class:`_Cutlass`), and given plain numbers and recording fakes for the kernel's objects, it
computes what the compiled code computes. The checker then holds the result to the course's model
(``models/group_scheduler`` for the search; ``acc + part * sa * sb`` for the promotion) and names
the first difference in the learner's terms. The source is executed from the learner's cell text
with the cell's line numbers, so an error points at the learner's line.
"""

from __future__ import annotations

import builtins
import random

from ..models import group_scheduler as gs
from .learner_code import LearnerCode, reason


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


def _load(code: LearnerCode, name: str):
    """The learner's function ``name``, executed again from its cell text over plain Python."""
    import cutlass
    import cutlass.cute as cute

    ns = dict(code.globals)
    ns.update(cute=_Cute(cute), cutlass=_Cutlass(cutlass), __builtins__=builtins)
    for seg in code.segments:
        padded = "\n" * (seg.first - 1) + seg.text  # the cell's line numbers in tracebacks
        exec(compile(padded, seg.filename, "exec"), ns)  # noqa: S102  (the learner's own cell)
    return ns[name]


def _call(code: LearnerCode, fn, *args):
    try:
        return fn(*args)
    except CpuModelError:
        raise
    except Exception as exc:
        if "MLIR" in str(exc) or "Context" in str(exc):  # a device-only DSL operation
            raise CpuModelSkipped(reason(exc)) from None
        where = code.locate(exc)
        at = f" at {code.describe(*where)}" if where else ""
        why = reason(exc)
        for fake, real in _FAKES.items():  # name the kernel's object, not the model's stand-in
            why = why.replace(f"'{fake}' object", real)
        raise CpuModelError(f"your {code.name} fails on the CPU model{at}: {why}") from None


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


#: (sizes, CTAs) the model runs: empty groups first, in the middle and last; one group; more CTAs
#: than items.
SEARCH_CASES = [
    (gs.moe_sizes(6, 1024, 512, m_range=(0, 600), seed=1), 8),
    ([(0, 512, 256), (300, 512, 256), (0, 512, 256), (0, 512, 256), (129, 512, 256), (0, 512, 256)], 3),
    (gs.moe_sizes(16, 2048, 256, m_range=(0, 1024), seed=3), 13),
    ([(1000, 1024, 128)], 5),
    ([(128, 256, 64), (0, 256, 64), (256, 256, 64)], 40),
]


def run_search(code: LearnerCode, name: str) -> str | None:
    """Walk every CTA of :data:`SEARCH_CASES` with the learner's search, as the kernel does
    (first item from group 0, then each next item from where the last search stopped); the
    first disagreement with ``models.group_scheduler``, or None."""
    fn = _load(code, name)
    for sizes, ctas in SEARCH_CASES:
        problem = gs.GroupedProblem(sizes, tile=(128, 256), tile_k=64)
        ends = [o + t for o, t in zip(problem.offsets, problem.tiles_per_group)]
        for cta in range(ctas):
            groups = _Groups(problem, ctas)
            group, first, calls, work = 0, 0, 0, cta
            while True:
                groups.shapes.floor = group
                got = _call(code, fn, groups, work, group, first)
                if not (isinstance(got, tuple) and len(got) == 2):
                    return f"your search returns {got!r}; return the pair (group, first)"
                group, first, calls = int(got[0]), int(got[1]), calls + 1
                if work >= problem.total:
                    want = problem.groups
                    if group != want:
                        return (f"{problem.groups} groups, {problem.total} items: item {work} is past "
                                f"the last one, so the search must return group = groups.count = "
                                f"{want} (the walk's end); yours returns group {group}")
                    break
                owner = problem.locate(work).group
                if group != owner:
                    return (f"{problem.groups} groups of {problem.tiles_per_group} items: item {work} "
                            f"belongs to group {owner} (its items {problem.offsets[owner]} to "
                            f"{ends[owner] - 1}); your search says group {group}"
                            + _why_group(problem, work, group, owner))
                if first == ends[owner] and ends[owner] != problem.offsets[owner]:
                    return (f"item {work}: group {owner} is right, but you return {first}, the "
                            f"end of its items; return its first item, {problem.offsets[owner]} "
                            "(the next search resumes from it)")
                if first != problem.offsets[owner]:
                    return (f"item {work}: group {owner} is right, but its first item is "
                            f"{problem.offsets[owner]}, not {first}: `first` must move past the "
                            "items of every group the search passes")
                work += ctas
            allowed = problem.groups + 2 * calls
            if groups.shapes.reads > allowed:
                head = (f"your search finds every group, but on CTA {cta} of {ctas} it read group "
                        f"shapes {groups.shapes.reads} times for {calls} items ({problem.groups} "
                        f"groups; resuming, at most {allowed})")
                if groups.shapes.went_back:
                    return (head + ": it starts again from group 0. A CTA's items only grow: "
                            "start from `group` and `first`, where the last search stopped")
                return (head + ": it reads a group's items more than once per step (in the "
                        "loop's condition and again in its body?). Read group_items once per "
                        "group into a variable, and carry a flag")
    return None


def _why_group(problem, work, group, owner) -> str:
    if 0 <= group < problem.groups and problem.tiles_per_group[group] == 0:
        return (f": group {group} is empty (M = 0, no items), so no item belongs to it; the "
                "search must pass over it (work >= first + 0)")
    if group == owner - 1 and work == problem.offsets[owner]:
        return (": it is that group's first item. An item belongs to group g while work < first "
                "+ items, so move on while work >= first + items (not >)")
    return ""


# -- the FP8 promotion ----------------------------------------------------------------------------
class _Ring:
    """The smem ring as the promotion sees it: records what the learner's code calls on it."""

    def __init__(self):
        self.calls: list[tuple[str, object]] = []

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kw: self.calls.append((name, args[0] if args else None))


class _Fragment(list):
    """A register fragment on numbers: indexable, and ``load()`` / ``store(v)`` as a whole, as a
    CuTe tensor's TensorSSA form (``acc.store(acc.load() + ...)``) allows."""

    def load(self):
        import numpy as np

        return np.array(self, dtype=float)

    def store(self, values):
        self[:] = [float(v) for v in values]


def run_promote(code: LearnerCode, name: str) -> str | None:
    """One promotion of a 64 x 128 warpgroup tile's 64 registers per thread, on numbers: the
    first mistake against ``acc + part * sa[row] * sb`` and one release of the k-tile's stage."""
    fn = _load(code, name)
    rnd = random.Random(7)
    acc0 = [rnd.uniform(-4, 4) for _ in range(64)]
    part = [rnd.uniform(-100, 100) for _ in range(64)]
    sa = [rnd.choice((0.5, 0.25, 3.0, 0.125)) for _ in range(64)]
    sb = 0.0625
    acc, ring, state = list(acc0), _Ring(), "the k-tile's stage"
    acc = _Fragment(acc)
    _call(code, fn, ring, state, acc, _Fragment(part), _Fragment(sa), sb)
    releases = [s for op, s in ring.calls if op == "consumer_release"]
    other = [op for op, _ in ring.calls if op != "consumer_release"]
    if other:
        return (f"your promotion calls ring.{other[0]}: the mainloop has already waited for this "
                "k-tile's stage; the promotion only frees it (ring.consumer_release(release))")
    if not releases:
        return ("your promotion never frees the k-tile's ring stage: the producer would wait for "
                "it forever (a hang on the GPU). Call ring.consumer_release(release): the "
                "mainloop's wait_group has proven this k-tile's wgmmas done")
    if len(releases) > 1:
        return (f"your promotion frees the stage {len(releases)} times: each release is an "
                "arrival on its empty barrier, so the producer would refill stages still being "
                "read. Release once per k-tile")
    if any(s is not state for s in releases):
        return "your promotion frees a stage other than `release`, the k-tile's own"
    want = [a + p * s * sb for a, p, s in zip(acc0, part, sa)]
    if _close(acc, want):
        return None
    guesses = [([a + p for a, p in zip(acc0, part)], "adds part without its scales: multiply each "
                "register by its row's sa[i] and by sb"),
               ([a + p * s for a, p, s in zip(acc0, part, sa)], "forgets sb, B's scale of the "
                "tile's 128 columns for this k-block"),
               ([a + p * sb for a, p in zip(acc0, part)], "forgets sa[i], A's scale of register "
                "i's row (1x128 blocks: one per row and k-block)"),
               ([a + p * sa[0] * sb for a, p in zip(acc0, part)], "scales every register by the "
                "first row's sa[0]: register i belongs to its own row, whose scale is sa[i]"),
               ([p * s * sb for p, s in zip(part, sa)], "overwrites acc with this k-tile's "
                "product: acc[i] = acc[i] + ..., the sum over all k-tiles"),
               ([a + p / (s * sb) for a, p, s in zip(acc0, part, sa)], "divides by the "
                "scales: the stored values are x / scale, so x = part * scale: multiply"),
               (list(acc0), "leaves acc unchanged: write the sum back into acc[i]")]
    for values, why in guesses:
        if _close(acc, values):
            return f"your promotion {why} (CPU model, one k-tile of 64 registers)"
    i = next(i for i, (a, b) in enumerate(zip(acc, want)) if abs(a - b) > 1e-4 * max(1.0, abs(b)))
    return (f"register {i}: acc was {acc0[i]:.4g}, part {part[i]:.4g}, sa[i] {sa[i]}, sb {sb}; "
            f"acc should become {want[i]:.6g}, yours is {acc[i]:.6g} (CPU model)")


def _close(got, want) -> bool:
    try:
        return len(got) == len(want) and all(abs(float(a) - b) <= 1e-4 * max(1.0, abs(b))
                                             for a, b in zip(got, want))
    except (TypeError, ValueError):
        return False
