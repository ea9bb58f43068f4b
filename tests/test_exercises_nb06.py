"""Checkers of notebook 06: right answers pass, each kind of wrong answer fails usefully."""

import math

from cutecourse.exercises import nb06
from cutecourse.kernels import hopper_gemm_persistent as hp


def _use(m, n, tile, sms):
    ctas = math.ceil(m / tile[0]) * math.ceil(n / tile[1])
    return ctas / (math.ceil(ctas / sms) * sms)


def test_wave_efficiency():
    assert nb06.check_wave_efficiency(_use) and nb06.check_last_wave is nb06.check_wave_efficiency
    r = nb06.check_wave_efficiency(lambda m, n, tile, sms: (m // tile[0]) * (n // tile[1]) / sms)
    assert not r and "you gave" in r.message
    assert not nb06.check_wave_efficiency(lambda m, n, tile, sms: ...)  # not answered


def test_wave_efficiency_is_not_the_last_waves_fill():
    def last_fill(m, n, tile, sms):
        ctas = math.ceil(m / tile[0]) * math.ceil(n / tile[1])
        return (ctas - (math.ceil(ctas / sms) - 1) * sms) / sms

    assert last_fill(8192, 8192, (128, 256), 132) == 68 / 132 and _use(8192, 8192, (128, 256), 132) > 0.96
    r = nb06.check_wave_efficiency(last_fill)
    assert not r and "last wave's fill" in r.hint


def _pool_rule(p, pw, cw):
    """The CTA's launch pool: floor(65536 / threads / 8) * 8 per thread, times its threads."""
    threads = 128 * (pw + cw)
    pool_per_128 = min(256, 65536 // threads // 8 * 8) * threads // 128
    return min(256, (pool_per_128 - pw * p) // cw // 8 * 8)


def test_consumer_registers():
    assert nb06.check_consumer_registers(_pool_rule)
    assert _pool_rule(hp.PRODUCER_REGISTERS, 1, 2) == hp.CONSUMER_REGISTERS  # the kernel's own split
    # the named cases: 1 + 2 warpgroups launch with 168 x 384 = 64512 registers, not 65536
    assert (_pool_rule(32, 1, 2), _pool_rule(48, 1, 2)) == (232, 224)
    assert nb06.launch_registers(384) * 384 == 64512


def test_consumer_registers_rejects_the_whole_register_file():
    def whole_sm(p, pw, cw):  # 65536 registers for the taking: 240 at (32, 1, 2) would hang
        return min(256, (65536 // 128 - pw * p) // cw // 8 * 8)

    assert whole_sm(32, 1, 2) == 240
    r = nb06.check_consumer_registers(whole_sm)
    assert not r and "producer 32 x 1" in r.message and "you gave 240" in r.message
    assert "the most is 232" in r.message and "168 x 384 = 64512" in r.message and "forever" in r.message


def test_consumer_registers_typical_mistakes():
    r = nb06.check_consumer_registers(lambda p, pw, cw: (65536 // 128 - pw * p) // cw)
    assert not r and ("multiple of 8" in r.message or "256" in r.message)
    r = nb06.check_consumer_registers(lambda p, pw, cw: 232)  # the kernel's number for every split
    assert not r and "you gave 232" in r.message
    r = nb06.check_consumer_registers(lambda p, pw, cw: 512 - p)  # forgot to share among consumers
    assert not r and "256" in r.message


def test_ring_position():
    assert nb06.check_ring_position(lambda w, j, k, kt: (2 * j + w) * kt + k)
    r = nb06.check_ring_position(lambda w, j, k, kt: (j + w) * kt + k)  # forgot the other's tiles
    assert not r and "producer loaded it as number" in r.message


def _ring(tile, c_bytes):
    stages = (232448 - 1024 - c_bytes) // ((tile[0] + tile[1]) * 64 * 2)
    return stages, stages * 2 * tile[0] * tile[1] * 64 / 4096


def test_ring_cycles():
    r = nb06.check_ring_cycles(_ring)
    assert r and "ping-pong 64x256: 2048 with 4 C buffers per warpgroup, 2560 with 2" in r.message
    assert _ring((128, 256), 32768) == (4, 4096)  # the cooperative kernel
    r = nb06.check_ring_cycles(lambda t, c: (_ring(t, c)[0], _ring(t, c)[1] / 2))  # MACs, not flops
    assert not r and "cycles" in r.message
    r = nb06.check_ring_cycles(lambda t, c: ((232448 - c) / ((t[0] + t[1]) * 128), 0))  # not whole
    assert not r and "stages" in r.message
    assert not nb06.check_ring_cycles(lambda t, c: 4)


def _loop(runs):
    """A second way to the answer: merge the runs into disjoint intervals, then add them up."""
    starts = sorted(s for s, _ in runs)
    diffs = sorted(b - a for a, b in zip(starts, starts[1:]))
    mid = len(diffs) // 2
    period = diffs[mid] if len(diffs) % 2 else (diffs[mid - 1] + diffs[mid]) / 2
    merged = []
    for s, e in sorted(runs):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    busy = sum(e - s for s, e in merged)
    return period, 1 - busy / (merged[-1][1] - merged[0][0])


def test_launch_loop():
    r = nb06.check_launch_loop(_loop)
    assert r and "idle 4.8% of the loop" in r.message

    def gaps_only(runs):  # adds up end-to-start gaps: negative where launches overlap
        period = _loop(runs)[0]
        return period, sum(b[0] - a[1] for a, b in zip(runs, runs[1:])) / (runs[-1][1] - runs[0][0])

    r = nb06.check_launch_loop(gaps_only)
    assert not r and "below zero" in r.hint
    r = nb06.check_launch_loop(lambda runs: (runs[1][1] - runs[0][1], _loop(runs)[1]))  # ends, not starts
    assert not r and "median start-to-start" in r.message
    assert not nb06.check_launch_loop(lambda runs: 0.05)


def _barrier_ops(w, tiles):
    """A second way to the answer: from the hand-overs, one per tile and one after the last (turn
    t is warpgroup t % 2's, on barrier 3 + t % 2, passed by the other warpgroup after tile t - 1;
    turn `tiles` has no tile, its warpgroup takes it at the end)."""
    ops = []
    for t in range(tiles + 1):
        if t % 2 == w:
            ops.append(("wait", 3 + w))
        if t % 2 != w:  # the other warpgroup's turn: this one passes it (at the start, or after t - 1)
            ops.append(("arrive", 3 + t % 2))
    return ops


def test_barrier_order():
    from cutecourse.models import ordered_barrier

    assert all(_barrier_ops(w, t) == ordered_barrier.barrier_ops(w, t) for w in (0, 1) for t in range(1, 9))
    r = nb06.check_barrier_order(_barrier_ops)
    assert r and "warpgroup 0 waits on barrier 3 first" in r.message and "taken at the walk's end" in r.message
    # warpgroup 1 forgets warpgroup 0's first turn: both wait forever
    r = nb06.check_barrier_order(lambda w, t: _barrier_ops(w, t)[1:] if w == 1 else _barrier_ops(w, t))
    assert not r and "waits forever on barrier 3" in r.message and "first turn" in r.hint

    def always_pass(w, t):  # passes the turn after every own tile, but nobody takes the last one
        ops = [("arrive", 3)] if w == 1 else []
        for _ in range(w, t, 2):
            ops += [("wait", 3 + w), ("arrive", 4 - w)]
        return ops

    r = nb06.check_barrier_order(always_pass)
    assert not r and "no wait completes" in r.message and "item after the last" in r.hint

    def only_if_next(w, t):  # the rule before the dynamic scheduler: pass only if there is a next tile
        ops = [("arrive", 3)] if w == 1 else []
        for tile in range(w, t, 2):
            ops.append(("wait", 3 + w))
            if tile + 1 < t:
                ops.append(("arrive", 4 - w))
        return ops

    r = nb06.check_barrier_order(only_if_next)
    assert not r and "the last one too" in r.hint and "not known yet" in r.hint
    r = nb06.check_barrier_order(lambda w, t: [(k, 3 + w) for k, _ in _barrier_ops(w, t)])  # own barrier
    assert not r and "you gave" in r.message
    r = nb06.check_barrier_order(lambda w, t: ["wait"])
    assert not r and "pairs" in r.message
    assert not nb06.check_barrier_order(lambda w, t: ...)


def _fixup(tile, tiles, ctas, k_tiles):
    """A second way: the CTA whose range [sk_begin(c), sk_begin(c + 1)) holds an iteration, by
    search; the finisher holds the tile's last k-tile, its helpers the CTAs from k-tile 0's on."""
    from cutecourse.models import stream_k

    dp, sk_ctas, sk_iters = stream_k.plan(tiles, ctas, k_tiles)

    def owner(it):
        return max(c for c in range(ctas) if stream_k.sk_begin(c, sk_ctas, sk_iters) <= it)

    first = (tile - dp) * k_tiles
    finisher = owner(first + k_tiles - 1)
    return finisher, list(range(owner(first), finisher))


def test_stream_k_fixup():
    r = nb06.check_stream_k_fixup(_fixup)
    assert r and "396, is finished by CTA 1 after CTA(s) [0]" in r.message

    def head(tile, tiles, ctas, k_tiles):  # the CTA of k-tile 0 "owns" the tile
        finisher, waits = _fixup(tile, tiles, ctas, k_tiles)
        return (waits[0] if waits else finisher), waits

    r = nb06.check_stream_k_fixup(head)
    assert not r and "head piece" in r.hint
    r = nb06.check_stream_k_fixup(lambda *a: (_fixup(*a)[0], _fixup(*a)[1][-1:]))  # forgets a middle piece
    assert not r and "middle piece" in r.hint
    r = nb06.check_stream_k_fixup(lambda *a: (_fixup(*a)[0], _fixup(*a)[1] + [_fixup(*a)[0]]))
    assert not r and "its own flag" in r.hint
    r = nb06.check_stream_k_fixup(lambda *a: _fixup(*a)[0])
    assert not r and "return (cta" in r.message


def test_answers_that_call_the_model_are_refused():
    from cutecourse.models import ordered_barrier, stream_k

    def copied_barriers(w, tiles):
        return ordered_barrier.barrier_ops(w, tiles)

    def copied_fixup(tile, tiles, ctas, k_tiles):
        done = [c for c in range(ctas) for t, _, k1 in stream_k.units(c, ctas, tiles, k_tiles)
                if t == tile and k1 == k_tiles]
        return done[0], stream_k.helpers(done[0], ctas, tiles, k_tiles)

    r = nb06.check_barrier_order(copied_barriers)
    assert not r and "barrier_ops" in r.message
    r = nb06.check_stream_k_fixup(copied_fixup)
    assert not r and "stream_k.units" in r.message
