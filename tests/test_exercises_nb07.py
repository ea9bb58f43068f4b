"""Checkers of notebook 07: right answers pass, each kind of wrong answer fails usefully."""

import math

import torch

from cutecourse.exercises import nb07


# -- 1. locate ---------------------------------------------------------------------------------
def locate(t, sizes, tile_mn):
    start = 0
    for g, (m, n, _) in enumerate(sizes):
        tiles_m, tiles_n = math.ceil(m / tile_mn[0]), math.ceil(n / tile_mn[1])
        if t < start + tiles_m * tiles_n:
            i = t - start
            return g, i % tiles_m, i // tiles_m
        start += tiles_m * tiles_n


def test_locate_right():
    r = nb07.check_locate(locate)
    assert r and "work items" in r.message


def test_locate_n_fastest():
    def wrong(t, sizes, tile_mn):
        g, _, _ = locate(t, sizes, tile_mn)
        start = sum(math.ceil(m / tile_mn[0]) * math.ceil(n / tile_mn[1]) for m, n, _ in sizes[:g])
        cols = math.ceil(sizes[g][1] / tile_mn[1])
        return g, (t - start) // cols, (t - start) % cols

    r = nb07.check_locate(wrong)
    assert not r and "m fastest" in r.message and "you gave" in r.message


def test_locate_floor_and_boundary():
    def floor(t, sizes, tile_mn):
        start = 0
        for g, (m, n, _) in enumerate(sizes):
            tm, tn = m // tile_mn[0], n // tile_mn[1]
            if t < start + tm * tn:
                return g, (t - start) % tm, (t - start) // tm
            start += tm * tn

    r = nb07.check_locate(floor)
    assert not r and "ceil" in r.message

    def inclusive(t, sizes, tile_mn):
        start = 0
        for g, (m, n, _) in enumerate(sizes):
            tm, tn = math.ceil(m / tile_mn[0]), math.ceil(n / tile_mn[1])
            if t <= start + tm * tn:
                return g, (t - start) % max(tm, 1), (t - start) // max(tm, 1)
            start += tm * tn

    r = nb07.check_locate(inclusive)
    assert not r and "off by one" in r.message


def test_locate_unanswered_and_raising():
    assert "not answered" in nb07.check_locate(lambda t, s, tile: ...).message
    r = nb07.check_locate(lambda t, s, tile: 1 / 0)
    assert not r and "ZeroDivisionError" in r.message


# -- 2. tensor-map rewrites ----------------------------------------------------------------------
def rewrites(sizes, tile_mn, ctas):
    items = []
    for g, (m, n, _) in enumerate(sizes):
        items += [g] * (math.ceil(m / tile_mn[0]) * math.ceil(n / tile_mn[1]))
    p = min(ctas, len(items))
    out = []
    for c in range(p):
        last, count = -1, 0
        for g in items[c::p]:
            count += g != last
            last = g
        out.append(count)
    return out


def test_tensormap_updates_right():
    assert nb07.check_tensormap_updates(rewrites)


def test_tensormap_updates_forgot_the_first_and_strided_order():
    r = nb07.check_tensormap_updates(lambda s, t, c: [x - 1 for x in rewrites(s, t, c)])
    assert not r and "first item" in r.message

    def chunks(sizes, tile_mn, ctas):
        items = []
        for g, (m, n, _) in enumerate(sizes):
            items += [g] * (math.ceil(m / tile_mn[0]) * math.ceil(n / tile_mn[1]))
        p = min(ctas, len(items))
        per = -(-len(items) // p)
        return [len({g for g in items[c * per:(c + 1) * per]}) for c in range(p)]

    r = nb07.check_tensormap_updates(chunks)
    assert not r and "c + P" in r.message


def test_tensormap_updates_too_many_ctas():
    r = nb07.check_tensormap_updates(lambda s, t, c: rewrites(s, t, c) + [0])  # one CTA too many
    assert not r and "min(ctas, items)" in r.message


# -- 3. the workspace ------------------------------------------------------------------------------
def test_workspace_bytes():
    assert nb07.check_workspace_bytes(lambda ctas, scaled: ctas * (5 if scaled else 3) * 128)
    r = nb07.check_workspace_bytes(lambda ctas, scaled: ctas * 3 * 128)
    assert not r and "SFA/SFB" in r.message
    r = nb07.check_workspace_bytes(lambda ctas, scaled: ctas * (5 if scaled else 3) * 64)
    assert not r and "128 bytes" in r.message
    r = nb07.check_workspace_bytes(lambda ctas, scaled: (5 if scaled else 3) * 128)
    assert not r and "per CTA" in r.message


# -- 4. a block's scale --------------------------------------------------------------------------------
DATA_MAX = {"nvfp4": 6.0, "mxfp8": 448.0, "mxfp4": 6.0}
EMAX = {"mxfp8": 8, "mxfp4": 2}


def scale_factor(values, fmt):  # NVIDIA's rule for MX
    r = max(abs(v) for v in values) / DATA_MAX[fmt]
    if fmt == "nvfp4":
        return torch.tensor(min(r, 448.0)).to(torch.float8_e4m3fn).item()
    return 2.0 ** math.ceil(math.log2(r))


def scale_factor_ocp(values, fmt):  # the OCP MX spec's rule: amax's exponent minus emax
    if fmt == "nvfp4":
        return scale_factor(values, fmt)
    return 2.0 ** (math.floor(math.log2(max(abs(v) for v in values))) - EMAX[fmt])


def test_scale_factor_right():
    r = nb07.check_scale_factor(scale_factor)
    assert r and "21 blocks" in r.message and "NVIDIA's rule" in r.message
    # a tensor answer is accepted too
    assert nb07.check_scale_factor(lambda v, f: torch.tensor(scale_factor(v, f)))


def test_scale_factor_accepts_the_ocp_spec_rule_too():
    r = nb07.check_scale_factor(scale_factor_ocp)
    assert r and "OCP MX spec's rule" in r.message


def test_scale_factor_rules_must_not_be_mixed():
    def mixed(values, fmt):  # NVIDIA's rule for MXFP8, the spec's for MXFP4
        return scale_factor(values, fmt) if fmt != "mxfp4" else scale_factor_ocp(values, fmt)

    r = nb07.check_scale_factor(mixed)
    assert not r and "pick one rule" in r.message


def test_scale_factor_typical_mistakes():
    r = nb07.check_scale_factor(lambda v, f: max(abs(x) for x in v) / DATA_MAX[f])
    assert not r and "before rounding" in r.message and "nearest e4m3" in r.message

    def floor(values, fmt):
        if fmt == "nvfp4":
            return scale_factor(values, fmt)
        return 2.0 ** math.floor(math.log2(max(abs(v) for v in values) / DATA_MAX[fmt]))

    r = nb07.check_scale_factor(floor)
    assert not r and "down to a power of two: neither rule" in r.message

    def nearest(values, fmt):
        if fmt == "nvfp4":
            return scale_factor(values, fmt)
        return 2.0 ** round(math.log2(max(abs(v) for v in values) / DATA_MAX[fmt]))

    r = nb07.check_scale_factor(nearest)
    assert not r and ("nearest power of two" in r.message or "neither rule" in r.message)

    def six_for_all(values, fmt):  # e2m1's maximum used for MXFP8's e4m3 data
        r = max(abs(v) for v in values) / 6.0
        if fmt == "nvfp4":
            return torch.tensor(r).to(torch.float8_e4m3fn).item()
        return 2.0 ** math.ceil(math.log2(r))

    r = nb07.check_scale_factor(six_for_all)
    assert not r and "wrong data maximum" in r.message and "448" in r.message

    def unclamped(values, fmt):  # a rounding that does not saturate: r past 448 is kept
        r = max(abs(v) for v in values) / DATA_MAX[fmt]
        return r if fmt == "nvfp4" and r > 448 else scale_factor(values, fmt)

    r = nb07.check_scale_factor(unclamped)
    assert not r and "amax 3000" in r.message and "448" in r.message

    def nan_past_448(values, fmt):  # a cast that does not saturate (some torch builds give NaN)
        r = max(abs(v) for v in values) / DATA_MAX[fmt]
        return float("nan") if fmt == "nvfp4" and r > 448 else scale_factor(values, fmt)

    r = nb07.check_scale_factor(nan_past_448)
    assert not r and "saturates at 448" in r.message and "clamp to 448 before the cast" in r.message


def test_scale_factor_hint_clamps_at_448_and_names_both_rules():
    r = nb07.check_scale_factor(lambda v, f: 1 / 0)  # the hint comes with a raising answer
    assert not r and "min(r, 448.0)" in r.hint and "OCP spec" in r.hint and "NVIDIA" in r.hint


# -- 5. FP8 block scales -----------------------------------------------------------------------
def blockwise_product(qa, sa, qb, sb):
    m, n = qa.shape[0], qb.shape[0]
    acc = torch.zeros(m, n)
    sb_cols = sb.repeat_interleave(128, 0)[:n]  # (N, K/128): each column's block of scales
    for kb in range(qa.shape[1] // 128):
        k = slice(kb * 128, (kb + 1) * 128)
        acc += (qa[:, k].float() @ qb[:, k].float().T) * sa[:, kb, None] * sb_cols[None, :, kb]
    return acc


def test_blockwise_product_right():
    r = nb07.check_blockwise_product(blockwise_product)
    assert r and "scaled_mm_reference" in r.message


def test_blockwise_product_dequantize_first_is_also_right():
    from cutecourse.models import blockwise_fp8 as fp8b

    def dequantized(qa, sa, qb, sb):
        return fp8b.dequantize_blockwise(qa, sa, (1, 128)) @ fp8b.dequantize_blockwise(qb, sb, (128, 128)).T

    assert nb07.check_blockwise_product(dequantized)


def test_blockwise_product_mistakes_are_named():
    def variant(**kw):
        return lambda qa, sa, qb, sb: nb07._fp8_variant(qa, sa, qb, sb, **kw)

    assert "first k-block's scales" in nb07.check_blockwise_product(variant(first_block=True)).message
    assert "no scale was applied" in nb07.check_blockwise_product(variant(no_sa=True, no_sb=True)).message
    assert "A's scales are missing" in nb07.check_blockwise_product(variant(no_sa=True)).message
    assert "B's scales are missing" in nb07.check_blockwise_product(variant(no_sb=True)).message

    def transposed(qa, sa, qb, sb):  # right where sb is not square, wrong where it is
        if sb.shape[0] == sb.shape[1]:
            return nb07._fp8_variant(qa, sa, qb, sb, sb_t=True)
        return blockwise_product(qa, sa, qb, sb)

    r = nb07.check_blockwise_product(transposed)
    assert not r and "wrong way round" in r.message
    r = nb07.check_blockwise_product(lambda *a: 3)
    assert not r and "you returned int" in r.message
