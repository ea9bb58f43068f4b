"""Checkers for notebook 07 (grouped, block-scaled GEMM).

Every expected answer comes from the course's models, never from a table of numbers: the group
scheduler (``models.group_scheduler``: ``locate``, ``schedule``, ``tensormap_updates``) and the
block-scaling references (``models.block_scaling.quantize``, ``models.blockwise_fp8``). When an
answer is wrong, the checker names the case and tries the usual mistakes (N before M, floor
instead of ceil, an unrounded or wrongly rounded scale ...) to say which one it was
(``diagnosis.py``). The Blackwell primer's checkers, the scale-factor byte among them, are in
``nb07_blackwell.py``.
"""

from __future__ import annotations

import math
import numbers

import torch

from ..models import block_scaling as bs
from ..models import blockwise_fp8 as fp8b
from ..models import group_scheduler as gs
from . import Result, answered, checker, failed, passed
from .diagnosis import diagnose
from .nb07_blackwell import check_sf_offset  # noqa: F401  (exercise 7, with the Blackwell checkers)

#: Problems for the scheduler exercises: ragged M, an empty group, N differing between groups,
#: MoE-like sizes. Each is (sizes, tile (BM, BN)).
PROBLEMS = [
    ([(300, 512, 256), (128, 512, 256), (0, 512, 256), (520, 512, 256)], (128, 256)),
    ([(256, 256, 64), (128, 768, 64), (384, 128, 64)], (128, 128)),
    (gs.moe_sizes(8, 1024, 512, (0, 700), seed=3), (128, 256)),
    ([(1, 4096, 7168)], (128, 256)),
]
#: Bytes of one tensor map (CUtensorMap), and the maps each CTA keeps per kind of kernel.
MAP_BYTES = 128
MAPS = {False: 3, True: 5}  # A, B, C; block-scaled adds SFA, SFB


# ------------------------------------------------------------------ 1. locate a work item ----


def _tiles(m, n, tile, rnd):
    return rnd(m / tile[0]) * rnd(n / tile[1])


def _locate_variant(t, sizes, tile, *, n_fastest=False, rnd=math.ceil, inclusive=False):
    """A reimplementation of ``locate`` with one knob per classic mistake."""
    start = 0
    for g, (m, n, _) in enumerate(sizes):
        items = _tiles(m, n, tile, rnd)
        if t < start + items + (1 if inclusive else 0):
            within = t - start
            rows, cols = rnd(m / tile[0]), rnd(n / tile[1])
            if n_fastest:
                return (g, within // cols, within % cols)
            return (g, within % rows, within // rows)
        start += items
    return None


@checker("the group and tile of a linear work item",
         hint="group g owns ceil(M_g/BM) * ceil(N_g/BN) consecutive items; subtract the items of "
              "the groups before it, then split the rest m fastest: tile_m = i % tiles_m, "
              "tile_n = i // tiles_m.")
def check_locate(fn) -> Result:
    """``fn(t, sizes, tile_mn) -> (group, tile_m, tile_n)`` for work item ``t`` of the groups
    ``sizes = [(M, N, K), ...]`` cut into ``tile_mn = (BM, BN)`` tiles."""
    title = "the group and tile of a linear work item"
    answers = {}  # every item of every problem first, so a mistake is recognised by all its answers
    for sizes, tile in PROBLEMS:
        key = tuple(tuple(s) for s in sizes)
        for t in range(gs.GroupedProblem(sizes, tile).total):
            raw = fn(t, [tuple(s) for s in sizes], tile)
            if not answers:  # `...` or None for the very first item: not answered yet
                answered(raw, "locate")
            answers[(t, key, tile)] = tuple(int(v) for v in raw) if isinstance(raw, (tuple, list)) else raw
    for (t, sizes, tile), got in answers.items():
        problem = gs.GroupedProblem(sizes, tile)
        it = problem.locate(t)
        want = (it.group, it.tile_m, it.tile_n)
        if got != want:
            why = diagnose(got, (t, sizes, tile), [
                (lambda *c: _locate_variant(*c, n_fastest=True),
                 "you walked along N first; the scheduler goes down a column of tiles "
                 "(m fastest), then to the next column"),
                (lambda *c: _locate_variant(*c, rnd=math.floor),
                 "you rounded the tile counts down; a ragged edge (M = 300 with BM = 128) "
                 "still owns a whole tile: ceil"),
                (lambda *c: _locate_variant(*c, inclusive=True),
                 "off by one at a group boundary: item t belongs to group g while t < "
                 "(items of groups 0..g), strictly"),
            ], "compare with the running totals of items per group", answers)
            return failed(title, f"sizes {list(sizes)}, tile {tile[0]}x{tile[1]}, item {t}: you gave "
                          f"{got!r}, it is group {want[0]}, tile ({want[1]}, {want[2]}) (the "
                          f"groups own {problem.tiles_per_group} items); {why}")
    tried = len(answers)
    return passed(title, f"all {tried} work items of {len(PROBLEMS)} problems agree with "
                  "group_scheduler.locate (empty groups skipped, ragged edges rounded up)")


# ------------------------------------------------------------ 2. tensor-map rewrites per CTA ----


def _updates_variant(sizes, tile, ctas, *, first=True, chunks=False):
    problem = gs.GroupedProblem(sizes, tile)
    p = min(ctas, problem.total)
    items = problem.items()
    out = []
    for c in range(p):
        if chunks:  # contiguous ranges instead of the persistent stride
            per = -(-problem.total // p)
            mine = items[c * per:(c + 1) * per]
        else:
            mine = items[c::p]
        changes = sum(1 for a, b in zip(mine, mine[1:]) if a.group != b.group)
        out.append(changes + (1 if first and mine else 0))
    return out


@checker("tensor-map rewrites per CTA",
         hint="CTA c of P computes items c, c + P, c + 2P, ...; it rewrites its maps for its first "
              "item (last_group starts at -1) and whenever an item's group differs from the "
              "previous item's.")
def check_tensormap_updates(fn) -> Result:
    """``fn(sizes, tile_mn, ctas) -> [rewrites of CTA 0, of CTA 1, ...]``: one entry per CTA
    the persistent kernel launches (``min(ctas, total items)``)."""
    title = "tensor-map rewrites per CTA"
    tried = 0
    for sizes, tile in PROBLEMS:
        for ctas in (1, 3, 4, 16, 132):
            problem = gs.GroupedProblem(sizes, tile)
            want = gs.tensormap_updates(gs.schedule(problem, ctas)).per_cta
            raw = answered(fn([tuple(s) for s in sizes], tile, ctas), "tensormap_updates")
            got = [int(v) for v in raw] if isinstance(raw, (list, tuple)) else raw
            tried += 1
            if got != want:
                case = (sizes, tile, ctas)
                if isinstance(got, list) and len(got) != len(want):
                    why = (f"you gave {len(got)} entries; the kernel launches min(ctas, items) = "
                           f"{len(want)} CTAs (never more CTAs than work items)")
                else:
                    why = diagnose(got, case, [
                        (lambda *c: _updates_variant(*c, first=False),
                         "each CTA is one short: its first item always needs a rewrite (the maps "
                         "in its workspace slot are only a template until then)"),
                        (lambda *c: _updates_variant(*c, chunks=True),
                         "you gave each CTA a contiguous range of items; the persistent "
                         "scheduler strides: CTA c takes c, c + P, c + 2P, ..."),
                    ], "walk each CTA's items in order and count the group changes")
                return failed(title, f"sizes {sizes}, tile {tile[0]}x{tile[1]}, ctas={ctas}: you "
                              f"gave {raw!r}, the schedule rewrites {want} ({sum(want)} in all); {why}")
    return passed(title, f"all {tried} schedules agree with group_scheduler.tensormap_updates")


# ------------------------------------------------------------- 3. the tensor-map workspace ----


@checker("bytes of the tensor-map workspace",
         hint="every CTA (one per SM) has its own slot: one 128-byte map per operand it loads or "
              "stores with TMA.")
def check_workspace_bytes(fn) -> Result:
    """``fn(ctas, block_scaled) -> int``: bytes of global memory the kernel's tensor-map
    workspace takes (block_scaled: the Blackwell kernel with SFA and SFB)."""
    title = "bytes of the tensor-map workspace"
    for ctas in (1, 132, 148):
        for scaled in (False, True):
            want = ctas * MAPS[scaled] * MAP_BYTES
            got = answered(fn(ctas, scaled), "workspace_bytes")
            if got != want:
                maps = ", ".join(["A", "B", "C"] + (["SFA", "SFB"] if scaled else []))
                why = ("no SFA/SFB maps: the block-scaled kernel loads its scale factors with TMA "
                       "too" if got == ctas * 3 * MAP_BYTES else
                       "a tensor map is 128 bytes (a CUtensorMap, 128-byte aligned), and each "
                       "workspace slot holds one whole map" if got == ctas * MAPS[scaled] * 64 else
                       "one set of maps per CTA, not one for the whole kernel"
                       if got == MAPS[scaled] * MAP_BYTES else
                       f"count the maps: {maps}")
                return failed(title, f"ctas={ctas}, block_scaled={scaled}: you gave {got!r}, the "
                              f"workspace is {ctas} x {MAPS[scaled]} maps x {MAP_BYTES} B = {want}; "
                              f"{why}")
    return passed(title, f"B200 (148 SMs), block-scaled: {148 * 5 * 128} bytes = 148 x 5 maps x "
                  "128 B; H100 grouped (132 SMs): 132 x 3 x 128 = 50688")


# -------------------------------------------------------------------- 4. a block's scale ----


def _blocks():
    """(values, fmt) cases: weights at several magnitudes, blocks whose ideal scale is exact, one
    NVFP4 block beyond e4m3's range (amax / 6 > 448), and MX blocks where the two rules differ."""
    g = torch.Generator().manual_seed(7)
    cases = []
    for fmt in ("nvfp4", "mxfp8", "mxfp4"):
        n = bs.get_format(fmt).block
        for std in (0.02, 0.3, 1.0, 5.0, 30.0):
            v = torch.randn(n, generator=g) * std
            if std >= 1.0:  # an outlier, as in real weights
                v[int(torch.randint(n, (1,), generator=g))] *= 8
            cases.append((v.tolist(), fmt))
        exact = [0.0] * n
        exact[3] = -bs.get_format(fmt).data_max  # amax / data_max = 1 exactly
        cases.append((exact, fmt))
        if fmt != "nvfp4":  # amax between data_max and the next power of two (x 2^-3): the MX
            gap = [0.01 * (i % 5) for i in range(n)]  # rules differ (NVIDIA: 2^-2, OCP: 2^-3)
            gap[7] = (bs.get_format(fmt).data_max + 2.0 ** (bs.get_format(fmt).emax + 1)) / 2 / 8
            cases.append((gap, fmt))
    # Block scales alone (no per-tensor scale, as the course's Blackwell kernel takes NVFP4):
    # amax / 6 = 500 is past e4m3's 448, so the stored scale saturates at 448
    cases.append(([3000.0] + [1.0] * 15, "nvfp4"))
    return cases


def _scale_of(values, fmt: str, rule: str = "nvidia") -> float:
    return float(bs.quantize(torch.tensor([values], dtype=torch.float32), fmt, mx_rule=rule)[1].float())


def _as_float(v):
    if isinstance(v, torch.Tensor) and v.numel() == 1:
        return float(v.float())
    if isinstance(v, numbers.Real):
        return float(v)
    return v


RULES = {"nvidia": "NVIDIA's rule (round amax / data_max up to a power of two)",
         "ocp": "the OCP MX spec's rule (2^(floor(log2 amax) - emax))"}


@checker("the scale factor of one block",
         hint="r = amax(|block|) / data_max (6 for e2m1 data, 448 for e4m3 data). e4m3 scales "
              "(NVFP4): clamp r to 448, e4m3's largest value, then round to the nearest e4m3: "
              "torch.tensor(min(r, 448.0)).to(torch.float8_e4m3fn). e8m0 scales (MX formats): a power "
              "of two, by either rule the notebook teaches, the same for every block: NVIDIA's "
              "2 ** ceil(log2(r)), or the OCP spec's 2 ** (floor(log2(amax)) - emax) with emax = 2 "
              "for e2m1 data (6 = 1.5 x 2^2) and 8 for e4m3 data (448 = 1.75 x 2^8).")
def check_scale_factor(fn) -> Result:
    """``fn(values, fmt) -> float``: the stored scale factor of one block (``values``, a list
    of 16 floats for ``"nvfp4"``, 32 for ``"mxfp8"`` and ``"mxfp4"``; NVFP4 with block scales
    alone, ``bs.quantize(x, "nvfp4")``, so one case's scale saturates at 448). MX scales may
    follow either rounding rule (NVIDIA's or the OCP spec's), as long as every block follows the
    same."""
    title = "the scale factor of one block"
    cases = _blocks()
    rule = None  # the MX rule the answers so far follow (None: not told apart yet)
    for values, fmt in cases:
        f = bs.get_format(fmt)
        want = {r: _scale_of(values, fmt, r) for r in RULES}
        raw = answered(fn(list(values), fmt), "scale_factor")
        got = _as_float(raw)
        amax = max(abs(v) for v in torch.tensor(values).tolist())
        r = float(torch.tensor(amax) / f.data_max)  # in float32, as the model computes it
        if f.scale == "e8m0":
            fits = [name for name, v in want.items() if got == v]
            if rule is not None and fits and rule not in fits:
                return failed(title, f"{f.name.upper()} block with amax {amax:.6g}: you gave {raw!r}, "
                              f"{RULES[fits[0]]}; your earlier blocks followed {RULES[rule]}: pick one "
                              f"rule for all blocks ({RULES[rule].split(' (')[0]} gives {want[rule]!r})")
            if fits:
                rule = fits[0] if len(fits) == 1 else rule
                continue
        elif got == want["nvidia"]:
            continue
        if isinstance(got, float) and not math.isfinite(got):
            return failed(title, f"{f.name.upper()} block with amax {amax:.6g}: you gave {raw!r}; "
                          f"amax / {f.data_max:g} = {r:.6g} is beyond e4m3's largest value, 448, and "
                          "e4m3 has no infinity: the block's scale saturates at 448. A cast that does "
                          "not saturate gives NaN there: clamp to 448 before the cast")
        other = 448.0 if f.data_max == 6.0 else 6.0
        mistakes = [
            (lambda: r, f"that is amax / {f.data_max:g} before rounding; the scale is stored "
             f"as {f.scale}" + (", so round it to the nearest e4m3" if f.scale == "e4m3" else
                                ", a power of two")),
            (lambda: 2.0 ** math.floor(math.log2(r)),
             f"you rounded amax / {f.data_max:g} down to a power of two: neither rule does that. "
             f"NVIDIA's rounds it up; the OCP spec takes the exponent of amax itself minus {f.emax}"),
            (lambda: 2.0 ** round(math.log2(r)),
             "you rounded to the nearest power of two; NVIDIA's rule rounds up, so that nothing "
             "saturates, and the OCP spec's uses amax's own exponent"),
            (lambda: _scale_of([v * f.data_max / other for v in values], fmt),
             f"wrong data maximum: {f.name.upper()} stores {f.data} data, whose largest value "
             f"is {f.data_max:g} (e2m1: 6, e4m3: 448)"),
            (lambda: r if r > 448 else None,
             "amax / 6 is beyond e4m3's largest value: clamp it to 448 first, as the model does"),
        ]
        why = next((w for p, w in mistakes if _close(p(), got)), "check the rounding rule")
        wants = (f"{want['nvidia']!r}" if f.scale == "e4m3" else
                 f"{want['nvidia']!r} by NVIDIA's rule or {want['ocp']!r} by the OCP spec's")
        return failed(title, f"{f.name.upper()} block with amax {amax:.6g}: you gave {raw!r}, the "
                      f"stored {f.scale} scale is {wants} (amax / {f.data_max:g} = {r:.6g}); {why}")
    which = RULES[rule] if rule else "either rule (they agree on these blocks)"
    return passed(title, f"all {len(cases)} blocks agree with block_scaling.quantize: NVFP4 rounds "
                  f"amax/6 to the nearest e4m3 (at most 448); your MX scales follow {which}")


def _close(a, b) -> bool:
    return isinstance(b, float) and isinstance(a, float) and math.isclose(a, b, rel_tol=1e-6)


# ------------------------------------------ 5. FP8 block scales, the way Hopper applies them ----

#: (M, N, K) of the FP8 cases: N not a multiple of 128 (a partial block of B's scales), and a
#: square block grid (N/128 = K/128), where indexing sb the wrong way round gives no error.
FP8_SHAPES = [(64, 256, 384), (33, 200, 256), (48, 384, 384)]


def _fp8_case(m, n, k, seed):
    g = torch.Generator().manual_seed(seed)
    # rows and k-blocks of very different sizes, so that every block's scale matters
    x = torch.randn(m, k, generator=g) * 10 ** (torch.rand(m, k // 128, generator=g) * 4 - 2).repeat_interleave(128, 1)
    w = torch.randn(n, k, generator=g) * 10 ** (torch.rand(1, k // 128, generator=g) * 2 - 1).repeat_interleave(128, 1)
    qa, sa = fp8b.quantize_blockwise_fp8(x, (1, 128))
    qb, sb = fp8b.quantize_blockwise_fp8(w, (128, 128))
    return qa, sa, qb, sb


def _fp8_variant(qa, sa, qb, sb, *, first_block=False, no_sa=False, no_sb=False, sb_t=False):
    n = qb.shape[0]
    sbt = sb.T if sb_t else sb
    acc = torch.zeros(qa.shape[0], n)
    for kb in range(qa.shape[1] // 128):
        k = slice(kb * 128, (kb + 1) * 128)
        j = 0 if first_block else kb
        part = qa[:, k].float() @ qb[:, k].float().T
        a = torch.ones(qa.shape[0], 1) if no_sa else sa[:, j, None]
        b = torch.ones(1, n) if no_sb else sbt.float().repeat_interleave(128, 0)[:n, j][None, :]
        acc += part * a * b
    return acc


def _try_variant(case, kw):
    try:
        return _fp8_variant(*case, **kw)
    except (IndexError, RuntimeError):  # a mistake that does not fit this case's shapes
        return None


def _fp8_close(got, want) -> bool:
    return (isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor) and got.shape == want.shape
            and bool(((got.float() - want).abs().max() <= 1e-4 * want.abs().max()).item()))


@checker("an FP8 product with 1x128 / 128x128 block scales",
         hint="for each 128-wide k-block kb: part = qa[:, kb].float() @ qb[:, kb].float().T (one "
              "k-tile's wgmmas), then acc += part * sa[:, kb, None] * sb[n // 128, kb] with the "
              "column n's block row of sb: sb.repeat_interleave(128, 0)[:N, kb][None, :]")
def check_blockwise_product(fn) -> Result:
    """``fn(qa, sa, qb, sb) -> (M, N) float32``: qa (M, K) and qb (N, K) float8_e4m3fn, sa (M, K/128)
    and sb (ceil(N/128), K/128) float32 scales."""
    title = "an FP8 product with 1x128 / 128x128 block scales"
    for i, (m, n, k) in enumerate(FP8_SHAPES):
        case = _fp8_case(m, n, k, seed=11 + i)
        want = fp8b.scaled_mm_reference(*case)
        got = answered(fn(*(t.clone() for t in case)), "blockwise_product")
        if _fp8_close(got, want):
            continue
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != (m, n):
            what = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            return failed(title, f"M, N, K = {m}, {n}, {k}: you returned {what}; the product is an "
                          f"({m}, {n}) tensor")
        mistakes = [(dict(first_block=True), "every k-block used the first k-block's scales: the "
                     "scales change from one 128-wide block of K to the next, so each block's "
                     "partial sum gets its own"),
                    (dict(no_sa=True, no_sb=True), "no scale was applied: that is the product "
                     "of the e4m3 codes, q_a @ q_b.T, not of the values they stand for"),
                    (dict(no_sa=True), "A's scales are missing: one per row and k-block, sa[:, kb]"),
                    (dict(no_sb=True), "B's scales are missing: one per 128 columns and k-block"),
                    (dict(sb_t=True), "sb is indexed the wrong way round: it is (N/128, K/128), "
                     "row = the block of 128 columns of C, column = the k-block")]
        why = next((w for kw, w in mistakes if _fp8_close(got, _try_variant(case, kw))),
                   "compare one k-block's partial product with the reference first")
        return failed(title, f"M, N, K = {m}, {n}, {k}: your product differs from "
                      f"blockwise_fp8.scaled_mm_reference; {why}")
    return passed(title, f"all {len(FP8_SHAPES)} products agree with blockwise_fp8.scaled_mm_reference "
                  "(the sum the Hopper kernel's promotion computes)")
