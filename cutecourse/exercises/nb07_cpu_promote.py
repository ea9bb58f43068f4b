"""Exercise 10 of notebook 07 on numbers, on the CPU: the learner's promotion across two blocks of
B's scales, run as written (:func:`nb07_cpu.load`) for threads of both consumer warpgroups, on
every part shape and ``first`` the one-part kernel calls it with, several k-tiles in a row each
with its own scales (a distinct ``sa`` per row, ``sb0 != sb1``), every register compared with
``sum_k part * sa[row, k] * sb[block of first + column, k]``; the first wrong register is named
with the mistake that explains its value.
"""

from __future__ import annotations

from .learner_code import LearnerCode
from .nb07_cpu import call, load

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
    ]
    untouched = [j for j in range(len(acc)) if float(acc[j]) == before[j]]
    if 0 < len(untouched) < len(acc) and i in untouched:
        return (f"{where}: your promotion left {len(untouched)} of the {len(acc)} registers "
                f"unchanged, register {i} among them: loop over every register of the part, "
                "cutlass.range_constexpr(cute.size(part))")
    candidates.append((0.0, "acc did not change: write the sum back into acc[i]"))
    for value, why in candidates:
        if abs(d - value) <= 1e-4 * max(1.0, abs(value)):
            return f"{where}: {why}"
    if abs(got - part[i] * mine_sa * mine_sb) <= 1e-4 * max(1.0, abs(got)):
        return f"{where}: it overwrites acc with this k-tile's product: acc[i] = acc[i] + ..."
    return (f"{where}: acc was {before[i]:.6g}, part {part[i]:.4g}, sa {mine_sa:.4g}, sb "
            f"{mine_sb}; acc should become {want[i]:.6g}, yours is {got:.6g}")
