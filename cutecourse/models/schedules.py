"""Four GEMM kernel schedules on one H100, as a timeline: who waits for whom, and for how long.

All four run the same mainloop (TMA streams k-tiles of A and B into a ring of smem stages, the
tensor cores multiply them) and epilogue (accumulators -> C). They differ in what the tensor cores
do while a tile *starts* (ring empty: a load latency) and while it *ends* (the epilogue):

* ``one_cta``: one CTA per C tile, one CTA per SM (its ring fills shared memory), CTAs in waves.
  Each CTA pays launch + ring fill (prologue) + mainloop + epilogue; all of it on the critical path.
* ``cooperative``: persistent, one CTA per SM loops over tiles. The producer warp keeps loading
  across tile boundaries, so tile t+1's ring fill hides under tile t's epilogue; the two consumer
  warpgroups share one tile, so its epilogue is exposed (the tensor cores wait for it).
* ``pingpong``: persistent; each consumer warpgroup owns a whole tile and they alternate: an
  ordered barrier hands the tensor cores to the other warpgroup at the end of a mainloop, so one's
  epilogue hides under the other's MMAs; each hand-over costs the tensor cores a little time
  (``turn_clocks``). A warpgroup holds a whole tile's fp32 accumulators: 128x256 needs 256
  registers per thread, more than a consumer can get (CUTLASS's ``HeavyRegisterPressure`` rule,
  ``RegsPerThread >= 208``, only moves the ``setmaxnreg`` split from 40/232 to 24/240: it
  changes registers, never the tile). So, like the course's kernel (``hopper_gemm_pingpong.TILES``)
  and CUTLASS users, who pick a ping-pong ``TileShape`` of 64x256 or 128x128, the model gives
  ping-pong the 64-row half of such a tile: 64x256, which reads 1.67x the bytes per flop.
* ``two_cta``: the Ampere picture: two non-persistent CTAs per SM, each with half the smem and
  registers (a half tile, one consumer warpgroup, a smaller ring); their mainloops interleave on
  the tensor cores, so one's prologue and epilogue hide under the other's MMAs.

Per SM: a discrete-event simulation of two shared servers, the load port (a k-tile streams into
shared memory in ``load_ns`` after ``latency_ns``; transfers queue, latencies overlap) and the
tensor cores (a k-tile's MMAs take ``mma_ns``, one at a time). A stage is free again when its
k-tile's MMAs end. Tiles go round robin (tile i to SM i mod 132), as the block scheduler does when
all CTAs cost the same; SMs with the same work behave alike, so one per class is simulated.

**Calibrated on the H100** (:class:`Machine`; the derivations are code in
:mod:`cutecourse.models.schedule_calibration`, checked by ``tests/test_schedules.py``): the load
port, the load latency, the epilogue and the ping-pong hand-over come from the committed
fixed-clock measurements, not from guesses. A guess of 80 B/ns of L2 bandwidth per SM (44 bytes
per clock at 1.83 GHz) would predict the 64x256 ping-pong at 0.61x the cooperative kernel; the
H100 delivers at least 77 bytes per clock into every SM at once (the
5-stage ping-pong's k-tiles measure that), and ping-pong runs level with the cooperative kernel
at a fixed clock. ``benchmarks/experiments/tma_load_rate.py`` measures the port directly.

Ignored: L2 hit rates, L2 bandwidth and tile order (the L2 request coalescer merged 57% of the
ping-pong's requests, and L2 was 52-55% busy for both 1x1 kernels:
``experiment_schedules_fixed_clock_lrc.json``; HBM only bounds the compulsory traffic, A, B, C
once), power: at the 700 W cap an H100 runs dense GEMMs at 1.3-1.7 GHz and ping-pong 5-9% lower
than the cooperative kernel (docs/hopper_gemm.md), so the model predicts the *fixed-clock*
ranking; pass ``machine=H100.at_clock(mhz)`` to compare with a measurement at that clock. Also:
WGMMA issue costs, register spills, the grid launch (equal for all four), stream-K, partial
tiles' smaller work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import partialmethod

from ..errors import CourseError, ShapeError

SCHEDULES = ("one_cta", "cooperative", "pingpong", "two_cta")
TITLES = {"one_cta": "one CTA per tile", "cooperative": "persistent cooperative", "pingpong": "ping-pong",
          "two_cta": "2 CTAs per SM"}
KINDS = ("load", "mma", "epilogue", "idle")
LLM_SHAPES = ((4096, 4096, 4096), (4096, 14336, 4096), (4096, 4096, 14336))


@dataclass(frozen=True)
class Machine:
    """One H100 SXM5: published figures, and the ones measured on the course's H100.

    Per-SM work (MMAs, the load port, the epilogue, the hand-over) is in clocks, so it scales with
    ``clock_ghz``; latencies and launches are in ns. Measured figures say where they came from;
    ``schedule_calibration.derive()`` recomputes them from the committed files.
    """

    sms: int = 132
    # Dense fp16/bf16 tensor-core peak: 989.4 TFLOP/s (H100 SXM5 whitepaper) at the 1830 MHz boost
    # clock over 132 SMs: 989.4e12 / (132 x 1.83e9) = 4096 flop per clock per SM = 2048 FMA (an
    # FMA is 2 flop) = 512 FMA per clock in each of the SM's 4 tensor cores (A100: 256).
    clock_ghz: float = 1.83
    flops_per_clock: int = 4096
    # Bytes one SM's TMA loads deliver into its shared memory per SM clock. Measured lower bound:
    # the 5-stage 64x256 ping-pong at the base clock takes 530 clocks per 40 KiB k-tile (slope of
    # its time per tile over K = 512..8192, experiment_schedules_fixed_clock_s5.json) where the
    # tensor cores need 512: 40960 / 530 = 77.3 B/clock, on all 132 SMs at once. (Nsight
    # Compute's L2 request coalescer agrees: 336M sectors in 771 us at 1428 MHz is 74 B/clock per
    # SM over the whole kernel, experiment_schedules_fixed_clock_lrc.json.) TMA alone, measured
    # (benchmarks/experiments/tma_load_rate.py, experiment_tma_load_rate.json, H100 2026-11-25):
    # one SM takes 107 B/clock; all 132 loading k-tiles they share (a GEMM band's A and B panels,
    # merged by L2's request coalescer) 78-81 B/clock each; all 132 loading distinct data 29:
    # L2's own limit, 7.6 TB/s. A GEMM is the shared case, so the port stays at 77.3.
    load_port_bytes_per_clock: float = 77.3
    # Issue of a TMA load to its first byte: the 4-stage ping-pong takes 552 clocks per k-tile,
    # the 5-stage one 530. Four stages do not cover a stage's round trip (latency + transfer +
    # MMA), so latency = 4 x 552 - 530 - 512 = 1170 clocks = 830 ns at 1.41 GHz (same file).
    # (models.timeline assumes 700 ns for an idle GPU.)
    latency_ns: float = 830.0
    # Epilogue: the cooperative kernel's tensor cores idle 3290 clocks per 128x256 fp16 tile
    # (intercept of its time per tile over k-tiles, same file), while each of its two consumer
    # warpgroups stores a 64x256 half (32 KiB: registers -> smem -> TMA store, and the MMA
    # pipeline's drain): 32768 / 3290 = 9.96 bytes per clock per warpgroup.
    epilogue_bytes_per_clock: float = 9.96
    # Ping-pong's hand-over: its time per tile has an intercept of 442 clocks (same file; its
    # epilogues hide under the other warpgroup's MMAs): the tensor cores' idle time per turn of
    # the ordered barrier (wake-up, the next warpgroup's first wgmma, the epilogue's smem traffic
    # beside the MMAs: one measurement does not separate them).
    turn_clocks: float = 442.0
    # HBM3: 3.35 TB/s (datasheet). Only the compulsory traffic (A, B, C once) is charged to it.
    hbm_bytes_per_ns: float = 3350.0
    # A CTA's start: block scheduler, smem carve-out, mbarrier init, descriptor prefetch (assumed).
    # Persistent schedules pay it once per SM, one_cta/two_cta once per tile.
    cta_launch_ns: float = 500.0
    smem_bytes: int = 232448  # 227 KiB per SM a CTA may opt in to
    barrier_bytes: int = 1024

    sm_flops_per_ns = property(lambda self: self.flops_per_clock * self.clock_ghz)
    peak_tflops = property(lambda self: self.sms * self.sm_flops_per_ns / 1e3)
    load_bytes_per_ns = property(lambda self: self.load_port_bytes_per_clock * self.clock_ghz)

    def at_clock(self, mhz: float) -> "Machine":
        """This machine with its SM clock fixed at ``mhz`` (as Nsight Compute's base clock)."""
        return replace(self, clock_ghz=mhz / 1e3)


H100 = Machine()


@dataclass(frozen=True)
class Interval:
    kind: str  # one of KINDS
    start: float  # us
    end: float  # us
    tile: int  # tile id in this schedule's grid (-1 for idle)
    lane: int  # consumer warpgroup (pingpong) or CTA slot (two_cta); 0 otherwise


@dataclass
class ScheduleResult:
    """One schedule's run. ``waves``: tiles / lanes running at once (SMs x 1 or 2 lanes)."""
    schedule: str
    problem: tuple[int, int, int]
    tile: tuple[int, int, int]  # the tile one consumer lane computes
    lanes: int
    stages: int
    tiles: int
    sms: int
    k_tiles: int
    mma_ns: float  # one k-tile
    load_ns: float
    epilogue_ns: float
    k_tile_ns: float  # steady state: max(T, X, (L + X + T) / (stages x rings)), see simulate()
    total_us: float
    hbm_floor_us: float
    mma_flops: float  # flops the simulated MMAs did, all SMs
    work: list = field(repr=False)  # per SM: [(tile, lane)]
    _classes: dict = field(repr=False)  # key -> simulated SM
    _class_of: list = field(repr=False)
    clock_ghz: float = 1.83  # the machine's SM clock: every µs and TFLOP/s here assume it

    name = property(lambda self: TITLES[self.schedule])
    tflops = property(lambda self: 2 * math.prod(self.problem) / (self.total_us * 1e6))
    waves = property(lambda self: self.tiles / (self.sms * self.lanes))
    last_wave_utilisation = property(lambda self: self.waves - (math.ceil(self.waves) - 1))

    def _sm(self, sm: int) -> dict:
        return self._classes[self._class_of[sm]]

    def intervals(self, sm: int, start: float = 0.0, end: float | None = None) -> list[Interval]:
        """SM ``sm``'s timeline between ``start`` and ``end`` us (idle: a lane waiting, tail included)."""
        end = self.total_us if end is None else end
        tiles = [t for t, _ in self.work[sm]]
        out = [Interval(k, s / 1e3, e / 1e3, tiles[i], ln) for k, s, e, i, ln in self._sm(sm)["raw"]
               if e / 1e3 > start and s / 1e3 < end]
        for lane in range(self.lanes):
            t = start
            for a, b in sorted((iv.start, iv.end) for iv in out if iv.lane == lane and iv.kind != "load") + [(end, end)]:
                if a - t > 1e-3:
                    out.append(Interval("idle", t, a, -1, lane))
                t = max(t, b)
        return out

    def tile_spans(self, sm: int) -> list[tuple[int, int, float, float]]:
        """(tile, lane, first MMA start, epilogue end) in us for each tile on this SM."""
        c = self._sm(sm)
        if "spans" not in c:
            spans = {}
            for kind, s, e, i, ln in c["raw"]:
                if kind in ("mma", "epilogue"):
                    a, b, _ = spans.get(i, (s, e, ln))
                    spans[i] = (min(a, s), max(b, e), ln)
            c["spans"] = sorted((i, ln, a / 1e3, b / 1e3) for i, (a, b, ln) in spans.items())
        tiles = [t for t, _ in self.work[sm]]
        return [(tiles[i], ln, a, b) for i, ln, a, b in c["spans"]]

    def _mean(self, what: str, sm: int | None = None) -> float:
        sms = range(self.sms) if sm is None else [sm]
        return sum(self._sm(s)[what] for s in sms) / len(sms) / 1e3

    # Time the tensor cores sat idle on SM ``sm`` (None: the mean over SMs), by cause: the
    # ping-pong hand-over; the lane's own epilogue; a tile's first k-tile (launch, latency, ring
    # fill); later k-tiles (the loads fall behind).
    handover_us = partialmethod(_mean, "turn")
    exposed_epilogue_us = partialmethod(_mean, "epilogue")
    exposed_prologue_us = partialmethod(_mean, "prologue")
    stall_us = partialmethod(_mean, "stall")
    # The busiest SM's k-tiles at the tensor cores' rate (nothing on this tile grid is faster), and
    # at the steady-state rate (the MMA bound, or the loads' or the ring latency's if slower).
    mma_bound_us = property(lambda self: max(map(len, self.work)) * self.k_tiles * self.mma_ns / 1e3)
    mainloop_bound_us = property(lambda self: max(map(len, self.work)) * self.k_tiles * self.k_tile_ns / 1e3)

    def summary(self) -> str:
        turns = f", hand-overs {self.handover_us():.1f} us" if self.schedule == "pingpong" else ""
        return (f"{self.name:23s}{self.total_us:8.1f} us {self.tflops:4.0f} TFLOP/s {self.tile[0]}x{self.tile[1]}, "
                f"{self.stages} stages, {self.waves:.2f} waves; per SM exposed: epilogue "
                f"{self.exposed_epilogue_us():.1f} us, prologue {self.exposed_prologue_us():.1f} us, "
                f"loads {self.stall_us():.1f} us{turns}")


#: The most registers a consumer thread can hold under ``setmaxnreg``: CUTLASS gives consumers 232
#: (producer 40), or 240 (producer 24) when a warpgroup's accumulators need >= 208 (its
#: ``HeavyRegisterPressure``); addresses and loop counters need some of them too.
MAX_CONSUMER_REGISTERS = 240


def lane_tile(schedule: str, tile: tuple[int, int, int], acc_bytes: int = 4) -> tuple[int, int, int]:
    """The tile one consumer lane computes under ``schedule`` (see the module docstring): for
    ping-pong, the 64-row half of a tile whose accumulators would not fit one warpgroup's
    registers (as the course's kernel picks 64x256 where the cooperative kernel has 128x256)."""
    m, n, k = tile
    regs = m * n * acc_bytes // (128 * 4)  # per thread of one warpgroup holding the whole tile
    halve = schedule == "two_cta" or (schedule == "pingpong" and regs >= MAX_CONSUMER_REGISTERS)
    return (m // 2, n, k) if halve else tuple(tile)


def _simulate_sm(work, kt, S, L, X, T, E, launch, lanes, own_rings, drain, turn=0.0):
    """One SM: ``work`` = [(tile, lane)], ``kt`` k-tiles each, rings of ``S`` stages (one per lane if
    ``own_rings``); ``drain``: each tile is a new CTA (its loads wait for the last one's epilogue
    + launch); ``turn``: the tensor cores' idle time when the next MMA is another lane's (the
    ping-pong hand-over). Returns the timeline (ns; tile = index into ``work``) and the idle time
    by cause."""
    R = lanes if own_rings else 1
    jobs = [[] for _ in range(R)]  # per ring: (tile index, lane, k) in load order
    for i, (_, lane) in enumerate(work):
        jobs[lane if own_rings else 0] += [(i, lane, k) for k in range(kt)]
    landed, done = [[] for _ in range(R)], [[] for _ in range(R)]  # per ring, per job
    nl, nm, issued, epi_end = [0] * R, [0] * R, [0.0] * R, [0.0] * R
    lane_free, lane_epi = [0.0] * lanes, [0.0] * lanes
    port = tc = 0.0  # when the load port / the tensor cores are next free
    last_lane = None  # the lane of the last MMA: another lane's MMA waits for the hand-over
    raw, why = [], {"turn": 0.0, "epilogue": 0.0, "prologue": 0.0, "stall": 0.0}
    while any(nm[r] < len(jobs[r]) for r in range(R)):
        cands = []  # (start, MMAs before loads, oldest data first, kind, ring, issue)
        for r in range(R):
            j = nl[r]
            new_cta = drain and j > 0 and j < len(jobs[r]) and jobs[r][j][2] == 0
            # Load j needs its stage back (k-tile j-S multiplied) and, for a new CTA, the old
            # CTA gone: every MMA issued, the epilogue over, the launch paid.
            if j < len(jobs[r]) and (j < S or nm[r] > j - S) and not (new_cta and nm[r] < j):
                gate = epi_end[r] + launch if new_cta else launch
                issue = max(gate, issued[r], done[r][j - S] if j >= S else 0.0)
                start = max(issue + L, port)  # latencies overlap, transfers queue
                cands.append((start, 1, issue, "load", r, issue))
            j = nm[r]
            if j < nl[r]:
                lane = jobs[r][j][1]
                handed = tc + turn if last_lane not in (None, lane) else tc
                start = max(landed[r][j], lane_free[lane], handed)
                cands.append((start, 0, landed[r][j], "mma", r, None))
        start, _, _, kind, r, issue = min(cands)
        tile, lane, k = jobs[r][nl[r] if kind == "load" else nm[r]]
        if kind == "load":
            issued[r], port = issue, start + X
            landed[r].append(port)
            raw.append(("load", start, port, tile, lane))
            nl[r] += 1
            continue
        # The tensor cores sat idle from tc to start: first blame the hand-over to this lane,
        # then its epilogue, then the data (a tile's first k-tile: prologue; a later one: the
        # loads fall behind).
        handover = min(turn, start - tc) if last_lane not in (None, lane) else 0.0
        epi = max(0.0, min(start, lane_epi[lane]) - tc - handover)
        why["turn"] += handover
        why["epilogue"] += epi
        why["prologue" if k == 0 else "stall"] += start - tc - handover - epi
        tc = lane_free[lane] = start + T
        last_lane = lane
        done[r].append(tc)
        raw.append(("mma", start, tc, tile, lane))
        nm[r] += 1
        if k == kt - 1:
            lane_free[lane] = lane_epi[lane] = epi_end[r] = tc + E
            raw.append(("epilogue", tc, tc + E, tile, lane))
    end = max((iv[2] for iv in raw), default=0.0)
    why["epilogue"] += end - tc  # after the last MMA only epilogues remain
    return {"raw": _merge(raw), "end": end, "mmas": sum(map(len, done)), **why}


def _merge(raw):
    """Join back-to-back intervals of the same kind, tile and lane (fewer bars to draw)."""
    out = []
    for iv in sorted(raw, key=lambda x: (x[0], x[4], x[1])):
        if out and out[-1][0] == iv[0] and out[-1][3] == iv[3] and out[-1][4] == iv[4] and iv[1] - out[-1][2] < 1e-6:
            out[-1] = (iv[0], out[-1][1], iv[2], iv[3], iv[4])
        else:
            out.append(iv)
    return out


def simulate(schedule: str, m: int, n: int, k: int, tile: tuple[int, int, int] = (128, 256, 64),
             dtype_bytes: int = 2, out_bytes: int | None = None, acc_bytes: int = 4,
             sms: int | None = None, machine: Machine = H100) -> ScheduleResult:
    """Run ``schedule`` for C (m x n) = A (m x k) @ B.T on ``machine`` (``sms`` overrides its SM count)."""
    if schedule not in SCHEDULES:
        raise CourseError(f"unknown schedule {schedule!r}", f"use one of {SCHEDULES}")
    sms = sms or machine.sms
    for name, v in (("M", m), ("N", n), ("K", k), ("dtype_bytes", dtype_bytes), ("sms", sms),
                    *zip(("tile_m", "tile_n", "tile_k"), tile)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ShapeError(f"{name} must be a positive integer, not {v!r}", "e.g. M=N=K=4096, tile=(128, 256, 64)")
    if tile[0] % 128:
        raise ShapeError(f"tile_m = {tile[0]}: two consumer warpgroups need 64 rows each", "use tile_m = 128 or 256")
    out_bytes = out_bytes or dtype_bytes
    tm, tn, tk = lt = lane_tile(schedule, tile, acc_bytes)
    lanes = 1 if schedule in ("one_cta", "cooperative") else 2
    tiles, kt = math.ceil(m / tm) * math.ceil(n / tn), math.ceil(k / tk)
    # Stages: what is left of the CTA's smem after barriers and C buffers, as the course's kernels
    # plan it: one_cta/two_cta stage C in the drained ring; the cooperative kernel has 4 buffers
    # of 128x32, ping-pong 2 of 64x32 per warpgroup (so 5 stages of 64x256, not 4).
    ctas = 2 if schedule == "two_cta" else 1
    stage_bytes = (tm + tn) * tk * dtype_bytes
    c_buffer = {"cooperative": 4 * 128 * 32, "pingpong": 2 * 2 * 64 * 32}.get(schedule, 0) * out_bytes
    stages = (machine.smem_bytes // ctas - machine.barrier_bytes - c_buffer) // stage_bytes
    if stages < 1:
        raise ShapeError(f"a {tm}x{tn}x{tk} stage ({stage_bytes} B) does not fit in shared memory",
                         "use a smaller tile")
    clock = machine.clock_ghz  # clocks -> ns
    T, X = 2 * tm * tn * tk / machine.sm_flops_per_ns, stage_bytes / machine.load_bytes_per_ns
    # Epilogue: each consumer warpgroup stores its rows of the lane's tile (the cooperative and
    # one-CTA kernels split a tile between two warpgroups, which store at the same time).
    rows_per_wg = tm // (2 if schedule in ("one_cta", "cooperative") else 1)
    E = rows_per_wg * tn * out_bytes / machine.epilogue_bytes_per_clock / clock
    turn = machine.turn_clocks / clock if schedule == "pingpong" else 0.0
    slots = sms * ctas
    work = [[] for _ in range(sms)]  # per SM: (tile, lane); two_cta: slot s -> SM s % sms
    for t in range(tiles):
        sm = t % slots % sms
        work[sm].append((t, t % slots // sms if schedule == "two_cta" else len(work[sm]) % lanes))
    classes, class_of = {}, []
    for w in work:
        key = tuple(ln for _, ln in w)
        if key not in classes:
            classes[key] = _simulate_sm(w, kt, stages, machine.latency_ns, X, T, E, machine.cta_launch_ns,
                                        lanes, schedule == "two_cta", schedule in ("one_cta", "two_cta"), turn)
        class_of.append(key)
    hbm_floor = ((m * k + n * k) * dtype_bytes + m * n * out_bytes) / machine.hbm_bytes_per_ns
    total = max(max(c["end"] for c in classes.values()), hbm_floor)
    flops = sum(classes[c]["mmas"] for c in class_of) * 2 * tm * tn * tk
    # Steady state per k-tile: tensor cores, load port, or the ring's latency loop (a stage comes
    # back L + X + T after its release; the stages of all rings on the SM share that wait).
    k_tile = max(T, X, (machine.latency_ns + X + T) / (stages * ctas))
    return ScheduleResult(schedule, (m, n, k), lt, lanes, stages, tiles, sms, kt, T, X, E, k_tile, total / 1e3,
                          hbm_floor / 1e3, flops, work, classes, class_of, machine.clock_ghz)


def simulate_all(m: int, n: int, k: int, tile=(128, 256, 64), schedules=SCHEDULES, **kw) -> dict[str, ScheduleResult]:
    return {s: simulate(s, m, n, k, tile, **kw) for s in schedules}
