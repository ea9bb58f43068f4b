"""Notebook 07's kernel exercises on numbers, on the CPU: the learner's search and promotion run
as written, and every value they produce is compared with the course's model.

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
                    return (f"item {work}: your `first`, {first}, is right (group {owner}'s first "
                            f"item), but `group` says {group}: move `group` on by one each time "
                            "`first` moves past a group's items"), seen
                boundary = group == owner - 1 and work == problem.offsets[owner] and \
                    _probe(code, fn, problem, work, start, start_first) == owner
                if group != owner and not boundary and _moves_on(fn, problem, work, group, first):
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
                if passes.count > stepped // 2 + 1:
                    return (f"right answers, but one pass per group: from group {start} to group "
                            f"{owner} ({stepped} groups passed over) your loop ran {passes.count} "
                            f"times, where two groups a pass takes {stepped // 2 + 1}. Read the "
                            "items of `group` and of the next group in the same pass, before "
                            "testing either"), seen
                if work >= problem.total:
                    break
                work += ctas
            allowed = problem.groups + 2 * calls
            if groups.shapes.reads > allowed:
                head = (f"right answers, but on CTA {cta} of {ctas} your search read group shapes "
                        f"{groups.shapes.reads} times for {calls} items ({problem.groups} groups; "
                        f"resuming, at most {allowed})")
                return (head + ": it reads a group's items more than once per pass. Read "
                        "group_items once per group into a variable"), seen
    return None, seen


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


# -- Exercise 10: a promotion across two blocks of B's scales -------------------------------------
BLOCK = 128  # columns of one block of B's scales (and rows: 128 x 128 blocks)


def fragment_coords(thread: int, n: int) -> list[tuple[int, int]]:
    """(row, column) of each accumulator register of ``thread`` (0-255: two warpgroups of 64
    rows) in a 128 x n part of wgmma m64nNk32: four lanes share a row, lane l holds rows l // 4
    and l // 4 + 8 of its warp's 16, register i its row + 8 * ((i // 2) % 2) and column
    2 * (l % 4) + i % 2 + 8 * (i // 4)."""
    warp, lane = divmod(thread % 128, 32)
    row0 = 64 * (thread // 128) + 16 * warp + lane // 4
    return [(row0 + 8 * ((i // 2) % 2), 2 * (lane % 4) + i % 2 + 8 * (i // 4)) for i in range(n // 2)]


#: (part columns, first): the one-part kernel's calls. 128x128 tiles: first 0; 128x192: 0 for an
#: even tile (it starts on a block), 64 for an odd one; 128x256: two parts of 128, first 0 and 128.
PROMOTE_CASES = [(192, 64), (192, 0), (128, 0), (128, 128)]


class _Fragment(list):
    """A register fragment on numbers: indexable, ``load()`` / ``store(v)`` as a whole (the
    TensorSSA form ``acc.store(acc.load() + ...)``)."""

    def load(self):
        import numpy as np

        return np.array(self, dtype=float)

    def store(self, values):
        self[:] = [float(v) for v in values]


_HINTS = {n: ("the promotion gets no ring and no ring state: in the one-part kernel the "
              "mainloop frees the k-tile's stage itself (consumer_release, then "
              "release.advance()) before it calls you. Only add part, scaled, into acc")
          for n in ("ring", "release", "read", "warpgroup")}


def run_promote_columns(code: LearnerCode, name: str, threads=range(0, 256, 3),
                        k_tiles: int = 3) -> tuple[str | None, int]:
    """Every case of :data:`PROMOTE_CASES`, ``k_tiles`` promotions in a row (each k-block its own
    scales: a distinct sa per row, sb0 != sb1) for each thread of ``threads``: the first register
    whose sum differs from sum_k part * sa[row, k] * sb[block of first + column, k], or None; and
    how many register values were compared."""
    import random

    fn = load(code, name)
    compared = 0
    for n, first in PROMOTE_CASES:
        rnd = random.Random(n + first)
        sa = [[rnd.choice((0.5, 0.25, 3.0, 0.125, 1.5, 6.0)) * (1 + r / 256) for r in range(128)]
              for _ in range(k_tiles)]
        sb = [(rnd.choice((0.0625, 2.0, 0.75)), rnd.choice((0.5, 4.0, 0.375))) for _ in range(k_tiles)]
        at0 = [tuple(c) for c in fragment_coords(0, n)]
        for t in threads:
            coords = fragment_coords(t, n)
            lo_row, hi_row = coords[0][0], coords[2][0]
            acc = _Fragment(rnd.uniform(-4, 4) for _ in coords)
            want = list(acc)
            for k in range(k_tiles):
                part = [rnd.uniform(-100, 100) for _ in coords]
                sab = (sa[k][lo_row], sa[k][hi_row], *sb[k])
                before = list(acc)
                call(code, fn, acc, _Fragment(part), sab, at0, first, hints=_HINTS)
                for i, (row, col) in enumerate(coords):
                    want[i] += part[i] * sa[k][row] * sb[k][(first + col) // BLOCK]
                bad = [i for i in range(len(coords)) if not _close(acc, want, i)]
                if bad:  # a register away from the block edge first: the edge alone is an off-by-one
                    bad = next((i for i in bad if first + coords[i][1] not in (BLOCK - 1, BLOCK)), bad[0])
                    return _name_promote(acc, want, before, part, sab, coords, bad, k, n, first, t), compared
                compared += len(coords)
    return None, compared


def _close(got, want, i) -> bool:
    try:
        return len(got) == len(want) and abs(float(got[i]) - want[i]) <= 1e-4 * max(1.0, abs(want[i]))
    except (TypeError, ValueError):
        return False


def _name_promote(acc, want, before, part, sab, coords, i, k, n, first, t) -> str:
    """The mistake behind register ``i``'s wrong value, in the learner's terms."""
    lo, hi, sb0, sb1 = sab
    row, col = coords[i]
    first_row = row == coords[0][0]
    mine_sa, other_sa = (lo, hi) if first_row else (hi, lo)
    block = (first + col) // BLOCK
    mine_sb, other_sb = (sb0, sb1) if block == 0 else (sb1, sb0)
    where = (f"128x{n} part, first = {first}, thread {t}, register {i} (row {row}, column {col}), "
             f"k-tile {k}")
    if len(acc) != len(want):
        return f"{where}: acc has {len(acc)} values after your promotion, not {len(want)}"
    try:
        got = float(acc[i])
    except (TypeError, ValueError):
        return f"{where}: acc[{i}] is {acc[i]!r}, not a number"
    d = got - before[i]
    edge = (" (only at the block edge: first + column == 128 is the second block's first column, "
            "< 128 the first's)") if first + col in (BLOCK - 1, BLOCK) else ""
    candidates = [
        (part[i] * mine_sa * other_sb,
         f"it lies in B's {'second' if block else 'first'} block (first + column = {first + col}, "
         f"{'>=' if block else '<'} {BLOCK}), so its scale is {'sb1' if block else 'sb0'}; yours "
         f"took {'sb0' if block else 'sb1'}{edge}"),
        (part[i] * other_sa * mine_sb,
         f"its row is the thread's {'first' if first_row else 'second'} (row {row}), scale "
         f"{'lo' if first_row else 'hi'}; yours took the other row's. at0[i][0] is register i's "
         "row (thread 0's): compare it with at0[0][0]"),
        (part[i] * other_sa * other_sb, "both its scales are the other row's and the other "
         "block's: at0[i] is (row, column), in that order"),
        (part[i] * mine_sa, "it adds part * sa without sb, B's scale of its column's block"),
        (part[i] * mine_sb, "it adds part * sb without sa, A's scale of its row"),
        (part[i], "it adds part without its scales"),
        (part[i] / (mine_sa * mine_sb), "it divides by the scales: the stored values are x / "
         "scale, so x = part * scale: multiply"),
        (0.0, "acc did not change: write the sum back into acc[i]"),
    ]
    for value, why in candidates:
        if abs(d - value) <= 1e-4 * max(1.0, abs(value)):
            return f"{where}: {why}"
    if abs(got - part[i] * mine_sa * mine_sb) <= 1e-4 * max(1.0, abs(got)):
        return f"{where}: it overwrites acc with this k-tile's product: acc[i] = acc[i] + ..."
    return (f"{where}: acc was {before[i]:.6g}, part {part[i]:.4g}, sa {mine_sa:.4g}, sb "
            f"{mine_sb}; acc should become {want[i]:.6g}, yours is {got:.6g}")
