"""Checkers for notebook 06 (kernel schedules).

Each answer is compared with what the course's code or the hardware rule says, computed here by
the definition, never with a table of numbers: the wave arithmetic of ``models.gemm_plan`` (the whole grid's wave efficiency), the
``setmaxnreg`` rule (multiples of 8, at most 256 per thread, and only the registers the CTA was
launched with: a per-CTA pool, never the whole 64 K register file), the order
in which the ping-pong kernel's producer fills the ring (enumerated step by step), the
busy time of a profiled loop of launches (the union of their intervals), the ordered barrier's
waits and arrives (``models.ordered_barrier``) and who finishes a stream-K split tile
(``models.stream_k``).
"""

from __future__ import annotations

from ..models import gemm_plan, ordered_barrier, stream_k
from . import Result, answered, checker, failed, passed


def _calls(fn, names: tuple[str, ...]) -> str | None:
    """The first of ``names`` (model functions that hold the answer) that ``fn``'s source calls."""
    import inspect
    import re

    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return None
    # a call of the model's function (``stream_k.units(...)`` or an imported ``units(...)``), not
    # of a helper the learner defined under the same name
    return next((n for n in names if re.search(rf"\b{n}\s*\(", source)
                 and not re.search(rf"\bdef\s+{n}\s*\(", source)), None)

#: Shapes (M, N) the wave checker tries: square, LLM-like, ragged, smaller than one wave.
WAVE_SHAPES = [(1024, 1024), (2048, 2048), (4096, 4096), (8192, 8192), (4096, 6144),
               (4096, 14336), (1000, 3000), (128, 256), (129, 257), (16896, 256)]
REGISTER_FILE = 65536


@checker("wave efficiency of a one-CTA-per-tile grid",
         hint="CTAs = ceil(M / tile_m) * ceil(N / tile_n); the grid runs in ceil(CTAs / SMs) "
              "waves and pays for every wave in full: efficiency = CTAs / (waves * SMs). (The last "
              "wave alone is CTAs - (waves - 1) * SMs CTAs: 68 of 132 at 8192^3, 128x256.)")
def check_wave_efficiency(fn) -> Result:
    """``fn(m, n, tile_mn, sms) -> float``: busy SM-slots / SM-slots paid for over the whole grid
    (1.0 = every wave full). Not the last wave's fill: 8192^3 in 128x256 tiles is 97% efficient
    with a last wave 52% full."""
    title = "wave efficiency of a one-CTA-per-tile grid"
    tried = 0
    for m, n in WAVE_SHAPES:
        for tile in gemm_plan.TILES:
            for sms in (132, 114):
                p = gemm_plan.plan(m, n, 64, tile, sms=sms)
                got = answered(fn(m, n, tile, sms), "wave_efficiency")
                tried += 1
                if not isinstance(got, (int, float)) or abs(got - p.wave_efficiency) > 1e-9:
                    waves = -(-p.ctas // sms)
                    last = p.ctas - (waves - 1) * sms
                    why = (f"that is the last wave's fill ({last} of {sms}); the efficiency counts every "
                           "wave" if isinstance(got, (int, float)) and abs(got - last / sms) < 1e-9 else
                           "a ragged edge still takes a whole CTA (round up)")
                    return failed(title, f"M={m}, N={n}, tile {tile[0]}x{tile[1]}, {sms} SMs: you gave "
                                  f"{got!r}; {p.ctas} CTAs in {waves} waves use {p.wave_efficiency:.4f} "
                                  f"of the SM-slots", why)
    return passed(title, f"all {tried} cases agree with gemm_plan.plan(...).wave_efficiency, on the CPU: "
                  "a count of SM-slots, not a timing (measured waves: the notebook's section on them)")


#: The exercise's first name (it asked for "the last wave's use"); the same check.
check_last_wave = check_wave_efficiency


def launch_registers(threads: int) -> int:
    """Registers per thread a CTA of ``threads`` threads can be launched with when it alone fills
    the SM: 65536 / threads, rounded down to a multiple of 8 (the allocation unit), at most 256.
    (ptxas then reports this figure: 168 for the course's 384-thread kernels.)"""
    return min(256, REGISTER_FILE // threads // 8 * 8)


def _largest_consumer_count(producer: int, producer_wgs: int, consumer_wgs: int) -> int:
    """The most a consumer may take: ``setmaxnreg.inc`` draws only from the CTA's pool, the
    registers it was launched with (launch count x threads); more and it waits forever."""
    threads = 128 * (producer_wgs + consumer_wgs)
    pool = launch_registers(threads) * threads
    fits = [r for r in range(24, 257, 8) if 128 * (producer_wgs * producer + consumer_wgs * r) <= pool]
    return max(fits)


#: Splits the checker tries first, by name: the course's kernel (40 -> 232), and the two where the
#: whole register file (65536) and the CTA's pool (168 x 384 = 64512) give different answers.
NAMED_SPLITS = [(40, 1, 2), (32, 1, 2), (48, 1, 2)]
#: Then a sweep: producer counts x (producer, consumer) warpgroups, 1 + 4 with a 96-register pool.
SWEEP_SPLITS = [(p, pw, cw) for p in (24, 32, 40, 48, 56)
                for pw, cw in ((1, 1), (1, 2), (1, 3), (2, 2), (1, 4), (2, 3))]


@checker("registers per consumer thread under setmaxnreg",
         hint="setmaxnreg only moves registers inside the CTA's launch allocation: the CTA starts "
              "with floor(65536 / threads / 8) * 8 registers per thread (at most 256), e.g. 168 x 384 "
              "= 64512 for 1 + 2 warpgroups, and what the producers give back is all the consumers "
              "may take. Counts are multiples of 8 between 24 and 256.")
def check_consumer_registers(fn) -> Result:
    """``fn(producer_regs, producer_wgs, consumer_wgs) -> int``: the most a consumer thread may
    ask for (``setmaxnreg.inc``) once the producer warpgroups have given theirs back."""
    title = "registers per consumer thread under setmaxnreg"
    tried = 0
    for producer, producer_wgs, consumer_wgs in NAMED_SPLITS + SWEEP_SPLITS:
        want = _largest_consumer_count(producer, producer_wgs, consumer_wgs)
        got = answered(fn(producer, producer_wgs, consumer_wgs), "consumer_registers")
        tried += 1
        if got == want:
            continue
        threads = 128 * (producer_wgs + consumer_wgs)
        launch = launch_registers(threads)
        if not isinstance(got, int) or isinstance(got, bool):
            why = "return a whole number of registers"
        elif got % 8:
            why = "not a multiple of 8"
        elif got > 256:
            why = "more than a thread may have (256)"
        elif got > want:
            why = (f"more than the CTA's pool holds: it was launched with {launch} x {threads} = "
                   f"{launch * threads} registers, not the SM's 65536, and setmaxnreg.inc would wait "
                   "forever for the rest")
        else:
            why = "fewer than fit"
        return failed(title, f"producer {producer} x {producer_wgs} warpgroup(s), {consumer_wgs} "
                      f"consumer warpgroup(s): you gave {got!r} ({why}); the most is {want}",
                      f"the pool: {launch} registers per thread at launch x {threads} threads; "
                      "128 threads per warpgroup")
    return passed(title, f"all {tried} splits agree; the course's kernel: producer 40, 2 consumer "
                  f"warpgroups -> {_largest_consumer_count(40, 1, 2)}, inside its launch pool of "
                  f"{launch_registers(384)} x 384 = {launch_registers(384) * 384} registers (the rule, checked on "
                  "the CPU; nothing runs on a GPU here)")


def _producer_order(items: int, k_tiles: int) -> dict[tuple[int, int, int], int]:
    """Ring position of (warpgroup, its j-th tile, k): the producer loads items in order."""
    pos, count = {}, 0
    for item in range(items):
        for k in range(k_tiles):
            pos[(item % 2, item // 2, k)] = count
            count += 1
    return pos


@checker("ring positions in the ping-pong kernel",
         hint="the producer loads work item 0's k-tiles, then item 1's, ...; warpgroup w computes "
              "items w, w + 2, w + 4, ...")
def check_ring_position(fn) -> Result:
    """``fn(w, j, k, k_tiles) -> int``: how many k-tiles the producer loaded into the ring before
    k-tile ``k`` of warpgroup ``w``'s ``j``-th tile (its stage is that number % stages)."""
    title = "ring positions in the ping-pong kernel"
    tried = 0
    for k_tiles in (1, 3, 64):
        for (w, j, k), want in _producer_order(7, k_tiles).items():
            got = answered(fn(w, j, k, k_tiles), "ring_position")
            tried += 1
            if got != want:
                return failed(title, f"warpgroup {w}, its tile {j}, k-tile {k} of {k_tiles}: you gave "
                              f"{got!r}, the producer loaded it as number {want}",
                              "between two tiles of one warpgroup lie the other warpgroup's k_tiles")
    return passed(title, f"all {tried} positions agree with the producer's order, enumerated on the "
                  "CPU step by step (a model of the kernel's loop; nothing runs on a GPU here)")


#: (tile_mn, bytes of C staging) the ring checker tries: the cooperative kernel (4 buffers of
#: 128x32), ping-pong with 4 and with 2 buffers of 64x32 per warpgroup, and a few others.
RING_CASES = [((128, 256), 32768), ((64, 256), 32768), ((64, 256), 16384), ((128, 128), 32768),
              ((128, 128), 16384), ((128, 256), 0), ((64, 256), 0)]
FLOPS_PER_CLOCK = 4096  # dense fp16/bf16 per SM per clock (H100)


def _ring(tile_mn, c_bytes) -> tuple[int, float]:
    """(stages, cycles of tensor-core work they hold), from the course's own smem plan."""
    plan = gemm_plan.plan_stages(tile_mn, c_in_ring=False, epi_tile=(64, 32),
                                 epi_stages=c_bytes // (64 * 32 * 2), tiles=[tile_mn])
    return plan.stages, plan.stages * 2 * tile_mn[0] * tile_mn[1] * plan.tile_k / FLOPS_PER_CLOCK


@checker("how long a full ring lasts",
         hint="a stage holds one k-tile of A and of B: (tile_m + tile_n) x 64 fp16 values; the "
              "stages share 232448 B with 1024 B of barriers and the C staging; one k-tile is "
              "2 x tile_m x tile_n x 64 flops, at 4096 flops per clock.")
def check_ring_cycles(fn) -> Result:
    """``fn(tile_mn, c_bytes) -> (stages, cycles)``: how many 64-deep fp16 stages fit next to
    ``c_bytes`` of C staging, and how many clock cycles of MMA work a full ring holds."""
    title = "how long a full ring lasts"
    for tile, c_bytes in RING_CASES:
        want_stages, want_cycles = _ring(tile, c_bytes)
        got = answered(fn(tile, c_bytes), "ring_cycles")
        if not (isinstance(got, tuple) and len(got) == 2):
            return failed(title, f"tile {tile}, {c_bytes} B of C: return (stages, cycles), not {got!r}")
        stages, cycles = got
        if stages != want_stages:
            return failed(title, f"tile {tile[0]}x{tile[1]}, {c_bytes} B of C staging: you gave "
                          f"{stages!r} stages; {want_stages} fit", "round down: a stage is whole")
        if not isinstance(cycles, (int, float)) or abs(cycles - want_cycles) > 1e-6 * want_cycles:
            return failed(title, f"tile {tile[0]}x{tile[1]}, {want_stages} stages: you gave "
                          f"{cycles!r} cycles; they hold {want_cycles:g}",
                          "count flops (2 per multiply-add) for every stage of the ring")
    coop, pp4, pp5 = (_ring(t, c)[1] for t, c in RING_CASES[:3])
    return passed(title, f"all {len(RING_CASES)} rings agree; cooperative 128x256: {coop:g} cycles, "
                  f"ping-pong 64x256: {pp4:g} with 4 C buffers per warpgroup, {pp5:g} with 2 (arithmetic on the "
                  "CPU; whether a ring covers the round trip is the next cell's question)")


def _loops() -> list[list[tuple[float, float]]]:
    """Launch loops as a profiler records them, (start, end) in us, sorted by start: gaps as
    measured between course kernels, overlap as with PDL, one stall, jitter, a single launch."""
    import random

    rng = random.Random(6)
    regular = [(i * 24.58, i * 24.58 + 23.33) for i in range(20)]  # 2048³, 1.25 us gaps
    overlapping = [(i * 23.39, i * 23.39 + 24.29) for i in range(20)]  # PDL: 0.9 us overlap
    stall = [(s + (55.0 if i >= 10 else 0.0), e + (55.0 if i >= 10 else 0.0))
             for i, (s, e) in enumerate(regular)]
    jitter, t = [], 0.0
    for _ in range(30):
        d = rng.uniform(170, 176)
        jitter.append((t, t + d))
        t += d + rng.uniform(-0.8, 3.0)  # sometimes overlapping, sometimes idle
    return [regular, overlapping, stall, jitter, [(5.0, 12.0), (11.0, 30.0)]]


def _loop_reference(runs) -> tuple[float, float]:
    import statistics

    period = statistics.median(b[0] - a[0] for a, b in zip(runs, runs[1:]))
    busy, reach = 0.0, runs[0][0]
    for start, end in runs:
        busy += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    return period, 1 - busy / (max(e for _, e in runs) - runs[0][0])


@checker("what a loop of launches pays",
         hint="the period is the median of start-to-start differences; the GPU is idle where no "
              "launch runs: merge overlapping runs before you add up the busy time, and divide by "
              "the span from the first start to the last end.")
def check_launch_loop(fn) -> Result:
    """``fn(runs) -> (period_us, idle_fraction)`` for ``runs``: (start, end) per launch, in us,
    sorted by start, as the CUDA profiler records a loop of launches."""
    title = "what a loop of launches pays"
    loops = _loops()
    for runs in loops:
        want_period, want_idle = _loop_reference(runs)
        got = answered(fn(list(runs)), "launch_loop")
        if not (isinstance(got, tuple) and len(got) == 2):
            return failed(title, f"return (period_us, idle_fraction), not {got!r}")
        period, idle = got
        where = f"{len(runs)} launches starting at {runs[0][0]:g}, {runs[1][0]:g}, ..."
        if not isinstance(period, (int, float)) or abs(period - want_period) > 1e-6:
            return failed(title, f"{where}: you gave period {period!r}; the median start-to-start "
                          f"difference is {want_period:.3f} us", "starts, not ends; the median, not the mean")
        if not isinstance(idle, (int, float)) or abs(idle - want_idle) > 1e-6:
            hint = ("overlapping launches (PDL) leave no idle time: never count a gap below zero"
                    if isinstance(idle, (int, float)) and idle < want_idle else
                    "idle = 1 - (time covered by at least one launch) / (last end - first start)")
            return failed(title, f"{where}: you gave idle fraction {idle!r}; it is {want_idle:.4f}", hint)
    idle = _loop_reference(loops[0])[1]
    return passed(title, f"all {len(loops)} loops agree; 1.25 us of gap per 23.3 us kernel leaves the GPU "
                  f"idle {idle:.1%} of the loop, which PDL's overlap removes (checked on recorded loops; nothing "
                  "is timed here)")


# -- the ordered barrier of the ping-pong kernel ---------------------------------------------------
def _barrier_hint(w: int, got: list, want: list) -> str:
    """What a typical wrong list of barrier operations forgot."""
    if w == 1 and want[:1] == [("arrive", ordered_barrier.ORDER_BARRIER)] and got[:1] != want[:1]:
        return ("warpgroup 1 starts by arriving on barrier 3: warpgroup 0's first turn, which nobody "
                "else can give it")
    if want[-1][0] == "wait" and got == want[:-1]:
        return ("the turn passed after the last tile goes to the warpgroup that would own the item "
                "after the last (walked % 2 == w): it waits for it once at the end, or that arrive "
                "is left over at exit")
    if sum(k == "arrive" for k, _ in got) < sum(k == "arrive" for k, _ in want):
        return ("every tile passes the turn on, the last one too (MmaTurn(w)): with a dynamic "
                "scheduler the next item is read only after the tile, so whether the other "
                "warpgroup has one is not known yet")
    if any(k == "arrive" and b == ordered_barrier.ORDER_BARRIER + w for k, b in got):
        return f"warpgroup {w} waits on barrier {ordered_barrier.ORDER_BARRIER + w} (its own turn) and " \
               f"arrives on the other's, {ordered_barrier.ORDER_BARRIER + 1 - w}"
    return ("per own tile: wait for my turn, issue the MMAs, pass the turn on, then the epilogue; "
            "at the end the owner of the item after the last waits once")


@checker("the ordered barrier: who waits and who arrives, on which barrier",
         hint="read PingPongHopperGemm._warpgroup (its loop and its end) and sm90.mma_tile: barrier "
              "MMA_TURN + w (MmaTurn(w)) is warpgroup w's turn (MMA_TURN = 3); warpgroup w computes "
              "the CTA's tiles w, w + 2, ...")
def check_barrier_order(fn) -> Result:
    """``fn(w, tiles) -> [("wait" | "arrive", barrier), ...]``: the barrier operations consumer
    warpgroup ``w`` (0 or 1) of the ping-pong kernel executes, in order, in a CTA that computes
    ``tiles`` work items (``models/ordered_barrier.barrier_ops``)."""
    title = "the ordered barrier: who waits and who arrives, on which barrier"
    used = _calls(fn, ("barrier_ops", "program"))
    if used:
        return failed(title, f"your answer calls ordered_barrier.{used}, the model that holds it: "
                      "write the loop from the kernel's code instead")
    for tiles in range(1, 8):
        got = {w: answered(fn(w, tiles), "barrier_order") for w in (0, 1)}
        for w in (0, 1):
            ops = got[w]
            if not (isinstance(ops, (list, tuple)) and all(
                    isinstance(o, (list, tuple)) and len(o) == 2 and o[0] in ("wait", "arrive")
                    and isinstance(o[1], int) for o in ops)):
                return failed(title, f"warpgroup {w}, {tiles} tiles: return a list of (\"wait\" or "
                              f"\"arrive\", barrier id) pairs, not {ops!r}")
            got[w] = [tuple(o) for o in ops]
        want = {w: ordered_barrier.barrier_ops(w, tiles) for w in (0, 1)}
        if got == want:
            continue
        w = 0 if got[0] != want[0] else 1
        programs = {v: [ordered_barrier.Op(v, k, b) for k, b in got[v]] for v in (0, 1)}
        try:
            ordered_barrier.simulate(tiles, programs=programs)
            effect = "the two lists pair up, but not as the kernel's do"
        except ordered_barrier.BarrierError as e:
            effect = f"run together, {e.what}"
        return failed(title, f"{tiles} tiles, warpgroup {w}: you gave {got[w]}, the kernel does "
                      f"{want[w]}; {effect}", _barrier_hint(w, got[w], want[w]))
    return passed(title, "1 to 7 tiles agree with the kernel's loop; warpgroup 0 waits on barrier 3 "
                  "first, warpgroup 1's one arrive at the start is that turn, and the turn passed "
                  "after the last tile is taken at the walk's end (checked on the CPU against "
                  "models/ordered_barrier; nothing runs on a GPU here)")


# -- stream-K: who finishes a split tile -----------------------------------------------------------
#: (tiles, CTAs, k-tiles per tile): MLP down, MLP up and 8192^3 in 128x256 tiles on 132 SMs, and
#: small grids whose tiles are shared by two or three CTAs.
FIXUP_CASES = [(512, 132, 224), (1792, 132, 64), (2048, 132, 128), (140, 132, 32), (29, 8, 96),
               (23, 4, 96)]


def _fixup_reference(tiles: int, ctas: int, k_tiles: int) -> dict[int, tuple[int, list[int], int]]:
    """Split tile -> (finishing CTA, CTAs whose flags it waits on, owner of its k-tile 0), from
    ``models/stream_k``'s units (the kernel's own arithmetic)."""
    dp = stream_k.plan(tiles, ctas, k_tiles)[0]
    out = {}
    for cta in range(min(ctas, tiles)):
        for tile, k0, k1 in stream_k.units(cta, ctas, tiles, k_tiles):
            if tile >= dp and k0 == 0:
                out.setdefault(tile, [None, None, cta])[2] = cta
            if tile >= dp and k1 == k_tiles:
                entry = out.setdefault(tile, [None, None, None])
                entry[0], entry[1] = cta, stream_k.helpers(cta, ctas, tiles, k_tiles)
    return {t: tuple(v) for t, v in out.items()}


@checker("stream-K: who finishes a split tile, and whose flags it waits for",
         hint="a CTA's stream-K range is [sk_begin(c), sk_begin(c + 1)) of the split tiles' k-tiles "
              "(stream_k.sk_begin); the CTA whose range holds the tile's last k-tile finishes it, after "
              "the flags of every other CTA whose range holds a part of that tile")
def check_stream_k_fixup(fn) -> Result:
    """``fn(tile, tiles, ctas, k_tiles) -> (cta, [ctas])``: for a split tile (``tile >= dp`` of
    ``stream_k.plan(tiles, ctas, k_tiles)``), the CTA that finishes it (adds the partial sums
    and runs its epilogue) and the CTAs whose flags (``counters[FLAGS + c]``) it waits for."""
    title = "stream-K: who finishes a split tile, and whose flags it waits for"
    used = _calls(fn, ("units", "helpers", "owner"))
    if used:
        return failed(title, f"your answer calls stream_k.{used}, which computes it: work it out "
                      "from stream_k.plan and sk_begin")
    tried = 0
    for tiles, ctas, k_tiles in FIXUP_CASES:
        for tile, (finisher, waits, head) in _fixup_reference(tiles, ctas, k_tiles).items():
            got = answered(fn(tile, tiles, ctas, k_tiles), "stream_k_fixup")
            tried += 1
            where = f"{tiles} tiles on {ctas} CTAs, {k_tiles} k-tiles each, split tile {tile}"
            if not (isinstance(got, (tuple, list)) and len(got) == 2 and isinstance(got[1], (list, tuple))):
                return failed(title, f"{where}: return (cta, [ctas whose flags it waits for]), not {got!r}")
            cta, flags = got[0], sorted(got[1])
            if cta != finisher:
                why = (f"CTA {head} computes its k-tile 0 (the head piece) and saves partial sums; the tile "
                       "is finished by the CTA whose piece ends at its last k-tile" if cta == head else
                       f"CTA {finisher}'s range holds k-tile {k_tiles - 1}, the tile's last")
                return failed(title, f"{where}: you gave CTA {cta!r}; CTA {finisher} finishes it", why)
            if flags != waits:
                missing, extra = sorted(set(waits) - set(flags)), sorted(set(flags) - set(waits))
                why = ("a CTA does not wait for its own flag" if finisher in extra else
                       f"CTA(s) {missing} also computed a piece of it (a range can lie inside one tile: a "
                       f"middle piece)" if missing else f"CTA(s) {extra} computed no piece of tile {tile}")
                return failed(title, f"{where}: CTA {finisher} waits for the flags of CTAs {waits}, "
                              f"you gave {flags}", why)
    mlp = _fixup_reference(512, 132, 224)
    first = min(mlp)
    return passed(title, f"all {tried} split tiles agree with models/stream_k; MLP down's first split "
                  f"tile, {first}, is finished by CTA {mlp[first][0]} after CTA(s) {mlp[first][1]} (the model, "
                  "on the CPU; nothing runs on a GPU here)")
