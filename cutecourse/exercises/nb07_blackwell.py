"""Checkers for notebook 07's Blackwell primer: tensor-memory columns and the scale-factor byte.

The expected answers come from the course's models: the Blackwell kernel's plan
(``models.blackwell_plan.plan``: its TMEM columns, which the tests hold to CuTe's own TMEM tensors)
and the interleaved scale-factor layout (``models.sf_layout.sf_offset``, which the tests hold to
CuTe's ``tile_atom_to_shape_SF``). A layout the learner writes is evaluated by CuTe itself
(``cutecourse.layouts``), coordinate by coordinate. Wrong answers are matched against the usual
mistakes to say which one it was (``diagnosis.py``). Exercises 6-8; the others are ``nb07.py``.
"""

from __future__ import annotations

import itertools
import math

from .. import layouts
from ..models import blackwell_plan as bp
from ..models import sf_layout
from . import Result, answered, checker, failed, passed
from .diagnosis import diagnose

# --------------------------------------------------------------- 6. TMEM columns of a tile ----

#: Every configuration the kernel compiles, with one and two accumulator stages.
TMEM_CASES = [(fmt, tile, stages) for fmt, tile in itertools.product(bp.FORMATS, bp.TILES)
              for stages in (1, 2)]


def tmem_columns_of(fmt: str, tile_mn, acc_stages: int) -> int:
    """The plan's TMEM columns for ``acc_stages`` accumulator stages: the plan fixes the stages
    that fit; each stage more or less is one tile's width of columns more or less."""
    p = bp.plan(fmt, tuple(tile_mn))
    return p.tmem_columns + (acc_stages - p.acc_stages) * tile_mn[1]


def _columns_variant(fmt, tile, stages, *, sf=True, acc_width=None, per_atom=bp.SF_COLUMNS_PER_ATOM,
                     sf_per_stage=False, tile_k=None, b_atoms_per_128=True):
    """A reimplementation of the count with one knob per classic mistake."""
    f = bp.check_format(fmt)
    m, n = tile
    k = tile_k or bp.MMA_K[f.data] * bp.K_BLOCKS
    k_atoms = k // (4 * f.block)
    atoms = k_atoms * (m // 128) + k_atoms * (n // 128 if b_atoms_per_128 else 1)
    sf_cols = per_atom * atoms if sf else 0
    width = n if acc_width is None else acc_width(m, n)
    return stages * (width + sf_cols) if sf_per_stage else stages * width + sf_cols


_TMEM_MISTAKES = [
    (lambda *c: _columns_variant(*c, sf=False),
     "the scale factors of the k-tile being multiplied live in TMEM too (the block-scaled MMA reads "
     "them there): add SFA's and SFB's columns after the accumulators"),
    (lambda *c: _columns_variant(*c, acc_width=lambda m, n: m),
     "lanes are rows: a 128 x N fp32 accumulator takes N columns (lane r holds row r), so its "
     "width is the tile's N, not its M"),
    (lambda *c: _columns_variant(*c, per_atom=1),
     "tcgen05.cp.32x128b.warpx4 writes each 512-byte atom (32 lanes x 16 bytes) to all four lane "
     "quarters: 4 columns per atom, not 1"),
    (lambda *c: _columns_variant(*c, sf_per_stage=True),
     "there is one set of scale-factor columns, for the k-tile the MMA warp is reading; only the "
     "accumulator has stages (the MMA warp's next tcgen05.cp overwrites the columns in place, as "
     "in NVIDIA's block-scaled example: PTX orders a copy before later MMAs of the same thread; "
     "the accumulator is read by other warps, the epilogue, and needs its own stages)"),
    (lambda *c: _columns_variant(*c, tile_k=256),
     "a k-tile is 4 MMAs deep: 4 x 64 = 256 of K for NVFP4 but 4 x 32 = 128 for MXFP8, and an atom "
     "covers 4 blocks (64 of K for NVFP4, 128 for MXFP8): MXFP8 has 1 k-atom per k-tile"),
    (lambda *c: _columns_variant(*c, b_atoms_per_128=False),
     "an atom covers 128 rows: B's tile of N = 256 rows needs two atoms per k-atom"),
]


@checker("TMEM columns of a configuration",
         hint="accumulator: acc_stages x N columns (lane = row, one fp32 column per column of the "
              "tile); then one k-tile of scale factors for A and for B: 4 columns per 512-byte atom, "
              "an atom = 128 rows x 4 blocks (NVFP4: block 16, k-tile 256; MXFP8: block 32, k-tile 128).")
def check_tmem_columns(fn) -> Result:
    """``fn(fmt, tile_mn, acc_stages) -> int``: the TMEM columns the Blackwell kernel uses."""
    title = "TMEM columns of a configuration"
    answers = {}
    for fmt, tile, stages in TMEM_CASES:
        got = fn(fmt, tile, stages)
        if not answers:
            answered(got, "tmem_columns")
        answers[(fmt, tile, stages)] = got
    for case, got in answers.items():
        want = tmem_columns_of(*case)
        if got != want:
            why = diagnose(got, case, _TMEM_MISTAKES, "count the accumulator stages' columns, then "
                            "SFA's and SFB's atoms for one k-tile, 4 columns each", answers)
            fmt, tile, stages = case
            return failed(title, f"{fmt.upper()}, {tile[0]}x{tile[1]} tile, {stages} accumulator "
                          f"stage{'s' * (stages > 1)}: you gave {got!r}, it takes {want} columns; {why}")
    big = tmem_columns_of("nvfp4", (128, 256), 2)
    return passed(title, f"all {len(answers)} configurations agree with blackwell_plan.plan. So an "
                  f"NVFP4 128x256 tile with 2 stages would need {big} > {bp.TMEM_COLUMNS} columns: the "
                  f"plan gives it {bp.plan('nvfp4', (128, 256)).acc_stages}")


# ---------------------------------------------- 7. a scale factor's byte, by formula ----

SF_SHAPES = [(128, 4), (256, 8), (200, 6), (512, 3), (100, 12), (384, 1)]


def _row_major(row, kb, rows, kbl):
    return row * kbl + kb


def _unpadded(row, kb, rows, kbl):  # k-atoms per row of atoms counted without padding K
    atom = (row // 128) * (kbl // 4) + kb // 4
    return 512 * atom + 16 * (row % 32) + 4 * ((row // 32) % 4) + kb % 4


def _swapped(row, kb, rows, kbl):  # 4 and 16 exchanged inside the atom
    atom = (row // 128) * math.ceil(kbl / 4) + kb // 4
    return 512 * atom + 4 * (row % 32) + 16 * ((row // 32) % 4) + kb % 4


def _m_fastest(row, kb, rows, kbl):  # atoms numbered down M first
    atom = (kb // 4) * math.ceil(rows / 128) + row // 128
    return 512 * atom + 16 * (row % 32) + 4 * ((row // 32) % 4) + kb % 4


def _row_in_atom(row, kb, rows, kbl):  # row-major inside each atom: 4 bytes per row
    atom = (row // 128) * math.ceil(kbl / 4) + kb // 4
    return 512 * atom + 4 * (row % 128) + kb % 4


def sf_mismatch(answers: dict, mistakes, default: str):
    """The first coordinate ``(row, kblock, rows, kblocks)`` whose answer is not ``sf_offset``'s,
    as (coordinate, answer, right byte, the mistake that explains the answers); None if all agree."""
    for case, got in answers.items():
        want = sf_layout.sf_offset(*case)
        if got != want:
            return case, got, want, diagnose(got, case, mistakes, default, answers)
    return None


@checker("the byte of a scale factor in Blackwell's interleaved layout",
         hint="atoms of 128 rows x 4 k-blocks, 512 bytes each, k-atoms fastest (k-blocks padded "
              "to a multiple of 4); inside an atom row r starts at 16*(r % 32) + 4*((r // 32) % 4), "
              "and k-block k adds k % 4.")
def check_sf_offset(fn) -> Result:
    """``fn(row, kblock, rows, kblocks) -> int``: the byte offset of the scale factor of
    (row, kblock) in the interleaved buffer of a ``rows x kblocks`` scale-factor matrix."""
    title = "the byte of a scale factor in Blackwell's interleaved layout"
    answers = {(row, kb, rows, kbl): fn(row, kb, rows, kbl)
               for rows, kbl in SF_SHAPES for row in range(rows) for kb in range(kbl)}
    answered(answers[(0, 0) + SF_SHAPES[0]], "sf_offset")
    miss = sf_mismatch(answers, [
        (_row_major, "that is plain row-major order; the MMA reads scale factors "
         "in 128x4 atoms, 4 k-blocks of rows r, r+32, r+64, r+96 per 16 bytes"),
        (_unpadded, "k-blocks are padded to a multiple of 4: a row of atoms holds "
         "ceil(kblocks / 4) atoms, not kblocks // 4"),
        (_swapped, "inside an atom row r starts at 16*(r % 32) + 4*((r // 32) % 4): "
         "32 lines of 16 bytes, one per TMEM lane"),
        (_m_fastest, "atoms are numbered k fastest: all of a row of atoms' k-atoms, "
         "then the next 128 rows"),
        (_row_in_atom, "inside an atom the 128 rows are interleaved by 32, not "
         "stored one after the other"),
    ], "write it as 512 * atom + 16 * (row % 32) + 4 * ((row // 32) % 4) + kblock % 4")
    if miss:
        (row, kb, rows, kbl), got, want, why = miss
        return failed(title, f"(row {row}, k-block {kb}) of {rows} x {kbl}: you gave {got!r}, "
                      f"the scale factor is at byte {want}; {why}")
    tried = len(answers)
    return passed(title, f"all {tried} coordinates of {len(SF_SHAPES)} shapes agree with "
                  "sf_layout.sf_offset (the layout CuTe's tile_atom_to_shape_SF builds)")

# ------------------------------------------------- 8. the SF layout as a CuTe layout ----

#: (rows, k-blocks): whole atoms (rows a multiple of 128, k-blocks of 4), one and several of each.
SF_LAYOUT_SHAPES = [(128, 4), (256, 8), (384, 4), (128, 12)]


def _table(answer):
    """The learner's layout evaluated by CuTe: text, a (shape, stride) pair or a LayoutTable."""
    if isinstance(answer, tuple) and len(answer) == 2 and not isinstance(answer[0], int):
        return layouts.evaluate(*answer)
    return layouts.evaluate(answer)


def _mode_sizes(t) -> tuple[int, ...]:
    return tuple(layouts.size(m) for m in (t.shape if isinstance(t.shape, tuple) else (t.shape,)))


@checker("a scale factor's byte through a CuTe layout",
         hint="(row, k-block) -> byte: rows split as (32, 4, rows/128) with strides (16, 4, 512 x "
              "kblocks/4), k-blocks as (4, kblocks/4) with strides (1, 512); or compose CuTe's "
              "element layout (tile_atom_to_shape_SF) with (rows, kblocks):(1, 16 x rows).")
def check_sf_layout(fn) -> Result:
    """``fn(rows, kblocks)`` -> a CuTe layout (text ``shape:stride``, a ``(shape, stride)`` pair
    or a ``layouts`` table) from (row, k-block) to the byte of that block's scale factor."""
    title = "a scale factor's byte through a CuTe layout"
    answers, shown = {}, {}  # every coordinate of every shape first: a mistake shows in all of them
    for rows, kbl in SF_LAYOUT_SHAPES:
        t = _table(answered(fn(rows, kbl), "sf_layout"))
        sizes = _mode_sizes(t)
        if sizes != (rows, kbl):
            if len(sizes) == 2 and sizes[0] == rows and sizes[1] in (16 * kbl, 32 * kbl):
                why = (f"it indexes elements (row, k) of a {rows} x {sizes[1]} operand, one offset per "
                       f"value; compose it with ({rows},{kbl}):(1,{rows * sizes[1] // kbl}) so that "
                       f"k-block kb picks element {sizes[1] // kbl} x kb, the block's first")
            else:
                why = f"it must take (row, k-block) coordinates: rank 2, sizes ({rows}, {kbl})"
            return failed(title, f"{rows} x {kbl} scale factors: your layout {t.layout} has modes "
                          f"of sizes {sizes}; {why}")
        grid, shown[(rows, kbl)] = t.grid(), t.layout
        for row, kb in itertools.product(range(rows), range(kbl)):
            answers[(row, kb, rows, kbl)] = int(grid[row, kb])
    miss = sf_mismatch(answers, [
        (_row_major, "that is row-major order; the MMA reads 128x4 atoms, 4 k-blocks of "
         "rows r, r+32, r+64, r+96 in each 16-byte line"),
        (_swapped, "inside an atom r % 32 picks the 16-byte line (stride 16) and r // 32 "
         "the 4-byte word (stride 4)"),
        (_m_fastest, "atoms are numbered k fastest: the k-atoms' stride is 512, the "
         "row-atoms' 512 x kblocks / 4"),
        (_row_in_atom, "inside an atom the 128 rows are interleaved by 32: shape (32, 4), "
         "strides (16, 4)"),
    ], "compare your strides with the atom ((32,4),4):((16,4),1)")
    if miss:
        (row, kb, rows, kbl), got, want, why = miss
        return failed(title, f"{rows} x {kbl}: your layout {shown[(rows, kbl)]} puts (row {row}, "
                      f"k-block {kb}) at byte {got}, sf_offset says {want}; {why}")
    return passed(title, f"every coordinate of {len(SF_LAYOUT_SHAPES)} shapes agrees with "
                  "sf_layout.sf_offset: the interleaved layout, as CuTe evaluates it")

