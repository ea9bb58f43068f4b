"""Notebook 07's kernel exercises on numbers, on the CPU: the learner's search (and, through
``nb07_cpu_promote``, its promotion) run as written, every value compared with the course's model.

A hook such as the group search or a promotion is ordinary Python over a few DSL names
(``@cute.jit``, ``cute.size``, ``cutlass.range_constexpr``, ``cutlass.min``, ``while`` over a
flag). Executed again with those names standing for their plain-Python meaning (``cpu_run``'s
``_Cute`` and ``_Cutlass``) and given plain numbers, it computes what the compiled code
computes. Two more things are recorded on the way:

* **passes**: each ``while`` test that lets the loop run once more, and each trip of a run-time
  ``for`` (a ``range_constexpr`` loop is unrolled by the compiler: not a pass), counted by
  rewriting the learner's loops before they run (:class:`_CountPasses`): exercise 9 asks for a
  search that reads two groups per pass, and this is how the check sees it does;
* **reads**: ``groups.shapes`` counts the group shapes the search reads and refuses a group past
  the last (``cpu_run._Shapes``), which on the GPU would read past the metadata.

The source runs from the learner's cell text with the cell's line numbers, so an error points at
the learner's line, and is named in the learner's terms (:func:`call`).
"""

from __future__ import annotations

import ast
import builtins

from .cpu_run import _FAKES, CpuModelError, CpuModelSkipped, _Cute, _Cutlass
from .learner_code import LearnerCode, reason


class _CountPasses(ast.NodeTransformer):
    """``while T:`` -> ``while __pass__(T):``; ``for x in R:`` -> ``for x in __trips__(R):``
    unless ``R`` is a ``range_constexpr`` (unrolled at compile time)."""

    def visit_While(self, node):
        self.generic_visit(node)
        node.test = ast.copy_location(ast.Call(ast.Name("__pass__", ast.Load()), [node.test], []), node.test)
        return node

    def visit_For(self, node):
        self.generic_visit(node)
        unrolled = isinstance(node.iter, ast.Call) and \
            getattr(node.iter.func, "attr", getattr(node.iter.func, "id", "")) == "range_constexpr"
        if not unrolled:
            node.iter = ast.copy_location(ast.Call(ast.Name("__trips__", ast.Load()), [node.iter], []), node.iter)
        return node


class Passes:
    """How many times the learner's run-time loops ran (reset by the caller)."""

    def __init__(self):
        self.count = 0

    def test(self, value):
        if value:
            self.count += 1
        return value

    def trips(self, iterable):
        for x in iterable:
            self.count += 1
            yield x


def load(code: LearnerCode, name: str, passes: Passes | None = None):
    """The learner's function ``name``, executed again from its cell text over plain Python, its
    run-time loops counted into ``passes``."""
    import cutlass
    import cutlass.cute as cute

    passes = passes or Passes()
    ns = dict(code.globals)
    ns.update(cute=_Cute(cute), cutlass=_Cutlass(cutlass), __builtins__=builtins,
              __pass__=passes.test, __trips__=passes.trips)
    for seg in code.segments:
        tree = _CountPasses().visit(ast.parse(seg.text))
        ast.increment_lineno(tree, seg.first - 1)  # the cell's line numbers in tracebacks
        ast.fix_missing_locations(tree)
        exec(compile(tree, seg.filename, "exec"), ns)  # noqa: S102  (the learner's own cell)
    return ns[name]


#: What the learner's objects are, in the CPU model: for "'X' object has no attribute" messages.
_NUMBERS = {"'float' object": "a number (a scale or a register value)",
            "'int' object": "a number (an index, a count or a coordinate)",
            "'tuple' object": "a tuple (at0[i] is a (row, column) pair)",
            "'str' object": "a label the CPU model passes"}


def call(code: LearnerCode, fn, *args, hints: dict | None = None):
    """``fn(*args)``; a failure raised as :class:`CpuModelError` in the learner's terms: the
    learner's line, the object by the name the learner knows it (``hints``: a name the function
    may wrongly use -> what to say about it)."""
    try:
        return fn(*args)
    except CpuModelError:
        raise
    except Exception as exc:
        text = str(exc)
        where = code.locate(exc)
        at = f" at {code.describe(*where)}" if where else ""
        if "MLIR" in text or "Context" in text:  # a device-only DSL operation: name the line
            raise CpuModelSkipped(code.describe(*where) if where else "a DSL operation") from None
        if isinstance(exc, NameError) and hints and getattr(exc, "name", None) in hints:
            raise CpuModelError(f"your {code.name} uses `{exc.name}`{at}: {hints[exc.name]}") from None
        why = reason(exc)
        for fake, real in {**{f"'{k}' object": v for k, v in _FAKES.items()}, **_NUMBERS}.items():
            why = why.replace(fake, real)
        if isinstance(exc, AttributeError) and "has no attribute" in why:
            why += (": call only what the exercise lists on these arguments (the mainloop around "
                    "your function does the rest)")
        raise CpuModelError(f"your {code.name} fails on the CPU model{at}: {why}") from None


# -- Exercise 9: the search that reads two groups per pass ----------------------------------------
def _search_cases():
    from ..models import group_scheduler as gs

    e = lambda m: (m, 512, 256)  # noqa: E731  (one group: M rows, N = 512, K = 256)
    return [  # (sizes, CTAs): ragged M (few multiples of 128), empty groups alone and in runs
        (gs.moe_sizes(6, 1024, 512, m_range=(0, 600), seed=1), 8),
        ([e(0), e(300), e(0), e(0), e(129), e(0)], 3),
        ([e(0), e(0), e(200), e(0), e(0), e(0), e(130), e(1), e(0), e(0), e(257)], 2),
        (gs.moe_sizes(16, 2048, 256, m_range=(0, 1024), seed=3), 13),
        ([(1000, 1024, 128)], 5),
        ([(128, 256, 64), (0, 256, 64), (256, 256, 64)], 40),
        ([e(127), e(0), e(385), e(0), e(0), e(128), e(0)], 1),
    ]


def run_pair_search(code: LearnerCode, name: str) -> tuple[str | None, dict]:
    """Walk every CTA of the cases with the learner's search, as the kernel does (first item from
    group 0, then each next item from where the last search stopped): the first disagreement with
    ``models.group_scheduler`` or with two groups per pass, or None; and what was compared."""
    from ..models import group_scheduler as gs
    from .cpu_run import _Groups

    passes = Passes()
    fn = load(code, name, passes)
    seen = {"calls": 0, "problems": 0}
    slow = None  # the call with the most groups passed over among those that took too many passes
    for sizes, ctas in _search_cases():
        problem = gs.GroupedProblem(sizes, tile=(128, 256), tile_k=64)
        ends = [o + t for o, t in zip(problem.offsets, problem.tiles_per_group)]
        seen["problems"] += 1
        for cta in range(ctas):
            groups = _Groups(problem, ctas)
            group, first, calls, work = 0, 0, 0, cta
            while True:
                groups.shapes.floor, start, start_first, passes.count = group, group, first, 0
                try:
                    got = call(code, fn, groups, work, group, first)
                except CpuModelError as e:
                    if "past the last group" in str(e):
                        raise CpuModelError(f"{e}. The pass's second group is group + 1: it exists "
                                            "only while group + 1 < groups.count (cutlass.min(group + "
                                            "1, groups.count - 1) reads the last group instead)") from None
                    raise
                if groups.shapes.went_back:
                    return ("your search reads groups before the `group` it was given: it starts "
                            "again from group 0. A CTA's items only grow: start from `group` and "
                            "`first`, where the last search stopped"), seen
                if not (isinstance(got, tuple) and len(got) == 2):
                    return f"your search returns {got!r}; return the pair (group, first)", seen
                group, first, calls = int(got[0]), int(got[1]), calls + 1
                seen["calls"] += 1
                owner = problem.locate(work).group if work < problem.total else problem.groups
                if work >= problem.total and group != owner:
                    return (f"{problem.groups} groups, {problem.total} items: item {work} is past the "
                            f"last one, so the search must return group = groups.count = {owner} (the "
                            f"walk's end); yours returns group {group}"
                            + _why_end(problem, group)), seen
                if group != owner and owner < problem.groups and first == problem.offsets[owner] \
                        and problem.offsets[group if group < problem.groups else -1] != first:
                    fix = ("move `group` on by one each time `first` moves past a group's items"
                           if group < owner else "return the group whose items start at `first`, "
                           "not the one after it")
                    return (f"item {work}: your `first`, {first}, is right (group {owner}'s first "
                            f"item), but `group` says {group}: {fix}"), seen
                boundary = group == owner - 1 and work == problem.offsets[owner] and \
                    _probe(code, fn, problem, work, start, start_first) == owner
                moves_on = group != owner and not boundary and _moves_on(fn, problem, work, group, first)
                if moves_on and group > start and (group - start) % 2 == 1:
                    return (f"{problem.groups} groups of {problem.tiles_per_group} items, searching "
                            f"from group {start}: item {work} belongs to group {owner}; your search "
                            f"stops at group {group}, right after passing group {group - 1}, the "
                            f"first group of a pass, though item {work} lies past group {group} too. "
                            "Test the pass's second group, work >= first + items2, with `first` "
                            "already moved past the first group (its items start there)"), seen
                if moves_on:
                    return (f"{problem.groups} groups of {problem.tiles_per_group} items, searching "
                            f"from group {start}: item {work} belongs to group {owner}; your search "
                            f"stops at group {group}, yet called again from there it moves on: it "
                            "stopped before the item's group. The loop must go on while the item "
                            "lies past the groups read (a `while`, whose flag stays true)"), seen
                if group != owner:
                    return (f"{problem.groups} groups of {problem.tiles_per_group} items, searching "
                            f"from group {start}: item {work} belongs to group {owner} (its items "
                            f"{problem.offsets[owner]} to {ends[owner] - 1}); your search says group "
                            f"{group}" + _why_group(problem, work, group, owner, boundary)), seen
                want_first = problem.offsets[owner] if owner < problem.groups else problem.total
                if owner < problem.groups and first != want_first:
                    if first == ends[owner] and ends[owner] != want_first:
                        return (f"item {work}: group {owner} is right, but you return {first}, the end "
                                f"of its items; return its first item, {want_first} (the next search "
                                "resumes from it)"), seen
                    return (f"item {work}: group {owner} is right, but its first item is {want_first}, "
                            f"not {first}: `first` must move past the items of every group the "
                            "search passes, both groups of a pass"), seen
                stepped = owner - start
                if passes.count > stepped // 2 + 1 and (slow is None or stepped > slow[0]):
                    slow = (stepped, passes.count, start, owner)  # judged once every answer is right
                if work >= problem.total:
                    break
                work += ctas
            allowed = problem.groups + 2 * calls
            if groups.shapes.reads > allowed and slow:  # the extra reads are extra passes
                return _too_many_passes(*slow), seen
            if groups.shapes.reads > allowed:
                head = (f"right answers, but on CTA {cta} of {ctas} your search read group shapes "
                        f"{groups.shapes.reads} times for {calls} items ({problem.groups} groups; "
                        f"resuming, at most {allowed})")
                return (head + ": it reads a group's items more than once per pass. Read "
                        "group_items once per group into a variable"), seen
    return (_too_many_passes(*slow) if slow else None), seen


def _too_many_passes(stepped, count, start, owner) -> str:
    head = (f"right answers, but from group {start} to group {owner} ({stepped} groups passed "
            f"over) your loop ran {count} times, where two groups a pass takes {stepped // 2 + 1}")
    if stepped >= 2 and count >= stepped + 1:
        return (head + ": one pass per group. Read the items of `group` and of the next group in "
                "the same pass, before testing either")
    return (head + ". A pass that finds the item inside its pair (not past its second group) must "
            "end the loop: set the flag false there")


def _why_end(problem, group) -> str:
    if group == problem.groups - 1:
        return (": it stopped on the last group. Test the pair's second group too, and move on "
                "while work >= first + items")
    if group > problem.groups:
        return ": past groups.count. Stop as soon as group reaches groups.count"
    return ""


def _moves_on(fn, problem, work, group, first) -> bool:
    """Called again from its own answer, the learner's search returns another group: a right
    search's answer is where it stays."""
    from .cpu_run import _Groups

    if not 0 <= group < problem.groups:
        return False
    try:
        return int(fn(_Groups(problem, 1), work, group, first)[0]) != group
    except Exception:  # noqa: BLE001  (a probe only: the main verdict stands without it)
        return False


def _probe(code, fn, problem, work, start, first) -> int | None:
    """The learner's answer for the owner's second item (``work + 1``), searching from the same
    place: it tells a boundary mistake (only a group's first item is misplaced) from a search that
    stops early."""
    from .cpu_run import _Groups

    owner = problem.locate(work).group
    if work + 1 >= problem.offsets[owner] + problem.tiles_per_group[owner]:
        return None
    try:
        got = fn(_Groups(problem, 1), work + 1, start, first)
        return int(got[0])
    except Exception:  # noqa: BLE001  (a probe only: the main verdict stands without it)
        return None


def _why_group(problem, work, group, owner, boundary) -> str:
    if boundary:
        return (f": item {work} is group {owner}'s first (group {owner - 1} ends at {work - 1}), "
                f"and your search places item {work + 1} right. An item belongs to group g while "
                "work < first + items: at work == first + items it is the next group's (>=, not >)")
    if 0 <= group < problem.groups and problem.tiles_per_group[group] == 0:
        return (f": group {group} is empty (no items), so no item belongs to it; pass over it "
                "(work >= first + 0)")
    if group == owner + 1:
        return (": one group too far. A pass moves on by two groups only when the item lies "
                "past both; test the second group before you pass it")
    if group > owner:
        return ": it passed the item's group; pass a group only while work >= first + its items"
    if group < owner:
        return (": it stopped before the item's group. The loop goes on while the item lies past "
                "the groups read (first + items, then first + items + items2)")
    return ""
