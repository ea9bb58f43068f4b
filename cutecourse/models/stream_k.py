"""Stream-K: splitting the last, partial wave of tiles along K so that no SM idles through it.

A persistent grid of P CTAs over W tiles runs ceil(W / P) waves. When P does not divide W the
last wave is partial: 4096x4096 in 128x256 tiles is 512 tiles, 3 full waves on 132 SMs and 116
tiles in a fourth, during which 16 SMs idle for a whole tile's time. Every large shape of the
schedules table loses ~3% this way (``timeline.py``: waves).

Stream-K (Osama et al., PPoPP 2023) deals out the *k-tiles* (64-wide slices of K, the mainloop's
iterations) of the tiles that do not fill a wave, instead of the tiles: here the last
``W mod P`` tiles of the banded order, ``sk_tiles * k_tiles`` iterations in all, go to the CTAs
in equal contiguous ranges, each CTA computing ``sk_tiles / P`` of a tile (0.88 in the example)
after its ``W // P`` whole tiles. A range may begin in the middle of one tile (a *tail* piece,
up to the tile's last k-tile) and end in the middle of the next (a *head* piece, from k-tile 0),
so a tile is computed in pieces by neighbouring CTAs.

The order matters as much as the split, because the CTAs of a wave share their loads in L2 only
while they run in step (measured on the H100, docs/hopper_gemm.md):

* whole tiles first: the waves start together and stay in step, as in the static schedule.
  (With the stream-K range first, the CTAs left it at different times, the whole tiles after
  it ran out of step, and L2 moved 1.5x the bytes: slower at the 700 W cap than no split.)
* the range walked backwards, the head piece first: then every CTA in its head piece is at the
  same k-tile, and every CTA in its tail piece at another one, so the tiles in flight still
  share their k-tiles. (Walked forwards, the 132 ranges start at 132 different k-tiles: the
  stream-K phase of MLP down then read its operands from DRAM, 885 us instead of 601.)

Who finishes a tile, and why nothing deadlocks:

* after a piece that does not reach the tile's last k-tile (a head or a middle), the CTA writes
  its fp32 partial sums to a workspace slot of its own and raises a flag. That piece is the
  first of its CTA's range, after whole tiles only, so nothing delays it;
* the CTA of the tail piece, the last unit of its range, waits for the flags of the CTAs before
  it that computed the rest of the tile, adds their partial sums and runs the epilogue. It only
  ever waits for pieces that wait for nothing: the wait always ends, given all CTAs are resident
  (one per SM, the persistent grid).

Pieces stay large enough to pay for their fixup (an fp32 tile written by one SM and read by
another): stream-K is used only when there is at least one full wave (W > P), and the split
tiles go to at most ``SPLIT`` CTAs each (``sk_ctas``). A shape that fills its waves exactly
(W mod P = 0) has no stream-K tiles and runs as the plain static schedule.

The functions take ``min_`` and ``max_`` so the kernel runs the same arithmetic on the GPU (DSL
integers, ``cutlass.min``/``cutlass.max``) as the CPU model here (Python ints), like
``tile_order.band_coord``.
"""

from __future__ import annotations

#: CTAs that share the k-tiles of one stream-K tile, at most (fewer when there are enough tiles):
#: stream-K then uses min(P, SPLIT * sk_tiles) CTAs.
SPLIT = 2
#: Split only if it saves each CTA at least this many k-tiles of the partial wave's tile. The
#: partial sums cost about 9-13 k-tiles of a 128x256 tile (measured on the H100: writing 128 KiB
#: and reading it back on another SM, docs/hopper_gemm.md), so 4096^3 (7.8 saved) is not split
#: and MLP down (27 saved) is.
MIN_SAVED = 16


def plan(tiles, ctas, k_tiles, min_saved=MIN_SAVED, min_=min):
    """(dp_tiles, sk_ctas, sk_iters): whole tiles dealt out round-robin, CTAs that share the
    stream-K tiles, and those tiles' k-tiles. No stream-K (sk_ctas = sk_iters = 0) when the tiles
    fill their waves or do not fill one, or when splitting saves fewer than ``min_saved`` k-tiles
    per CTA: ``k_tiles * (1 - sk_tiles / ctas)``. (Integer arithmetic only, written so that the
    kernel can run it on DSL integers.)"""
    sk_tiles = (tiles % ctas) * min_(1, tiles // ctas)
    pays = min_(1, k_tiles * (ctas - sk_tiles) // (min_saved * ctas))
    sk_tiles = sk_tiles * pays
    return tiles - sk_tiles, min_(ctas, SPLIT * sk_tiles), sk_tiles * k_tiles


def sk_begin(cta, sk_ctas, sk_iters, min_=min, max_=max):
    """The first stream-K iteration of CTA ``cta``; its range is [sk_begin(cta), sk_begin(cta + 1)).
    CTAs from ``sk_ctas`` on have an empty range."""
    return min_(cta, sk_ctas) * sk_iters // max_(sk_ctas, 1)


def sk_range(cta, dp, k_tiles, sk_ctas, sk_iters, min_=min, max_=max):
    """CTA ``cta``'s stream-K range [begin, end) in the iteration space (tile * k_tiles + k), after
    the ``dp`` whole tiles' iterations."""
    begin = dp * k_tiles
    return (begin + sk_begin(cta, sk_ctas, sk_iters, min_, max_),
            begin + sk_begin(cta + 1, sk_ctas, sk_iters, min_, max_))


def piece(pos, end, k_tiles, max_=max):
    """(tile, k_begin, k_end): the last piece of the range [pos, end) that lies inside one tile
    (a range is walked backwards, so this is the next unit)."""
    tile = (end - 1) // k_tiles
    first = tile * k_tiles
    return tile, max_(pos - first, 0), end - first


def owner(it, sk_ctas, sk_iters):
    """The CTA whose stream-K range holds iteration ``it``: the last one with sk_begin <= it."""
    return ((it + 1) * sk_ctas - 1) // sk_iters


def units(cta, ctas, tiles, k_tiles, min_saved=MIN_SAVED):
    """CTA ``cta``'s work, in order: (tile, k_begin, k_end) per unit, its whole tiles first, then
    its stream-K range walked backwards (the module docstring). ``tile`` numbers the banded order
    (``tile_order.band_coord``); a unit is a whole tile when (k_begin, k_end) = (0, k_tiles)."""
    dp, sk_ctas, sk_iters = plan(tiles, ctas, k_tiles, min_saved)
    out = [(tile, 0, k_tiles) for tile in range(cta, dp, ctas)]
    pos, end = sk_range(cta, dp, k_tiles, sk_ctas, sk_iters)
    while pos < end:
        tile, k0, k1 = piece(pos, end, k_tiles)
        out.append((tile, k0, k1))
        end -= k1 - k0
    return out


def helpers(cta, ctas, tiles, k_tiles, min_saved=MIN_SAVED):
    """The CTAs whose partial sums CTA ``cta`` adds before its stream-K epilogue: those before it
    whose range holds a part of the tile of its tail piece (none if it has no tail piece)."""
    dp, sk_ctas, sk_iters = plan(tiles, ctas, k_tiles, min_saved)
    tail = [u for u in units(cta, ctas, tiles, k_tiles, min_saved) if u[0] >= dp and u[1] > 0 and u[2] == k_tiles]
    if not tail:
        return []
    return list(range(owner((tail[0][0] - dp) * k_tiles, sk_ctas, sk_iters), cta))


def makespan(tiles, ctas, k_tiles, fixup=0.0, min_saved=MIN_SAVED):
    """Mainloop time of the slowest CTA, in k-tiles, plus ``fixup`` k-tiles per partial sum it
    writes or adds: the stream-K schedule's length against ceil(tiles / ctas) * k_tiles."""
    worst = 0.0
    for cta in range(min(ctas, tiles)):
        work = units(cta, ctas, tiles, k_tiles, min_saved)
        partials = (sum(1 for t, k0, k1 in work if k1 < k_tiles)
                    + len(helpers(cta, ctas, tiles, k_tiles, min_saved)))
        worst = max(worst, sum(k1 - k0 for _, k0, k1 in work) + fixup * partials)
    return worst
