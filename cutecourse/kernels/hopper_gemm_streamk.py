"""Stream-K: the persistent GEMM with its last, partial wave split along K.

``StreamKHopperGemm`` is ``hopper_gemm_persistent.PersistentHopperGemm`` (cooperative consumers,
producer warp, ring, static tile order) with a different list of work per CTA
(``models/stream_k.py``): the tiles that fill whole waves are dealt out whole, as before; the
k-tiles of the rest (``tiles mod P`` of them, P CTAs) are dealt out evenly, so every CTA computes
``tiles / P`` tiles' worth of MMAs instead of some computing one more tile than the others.

A CTA computes its whole tiles first, so that the waves run in step as in the static schedule,
then its *stream-K range*, walked backwards: the piece that starts at k-tile 0 of a tile (the
*head*), then the one that ends at its last k-tile (the *tail*), so that the CTAs in flight stay
at two common k-tiles and share their loads in L2 (``models/stream_k.py`` says what the other
orders cost on the H100):

* after a piece that does not reach the tile's last k-tile, the consumers write their fp32
  accumulators to this CTA's partial-sums slot (one tile, laid out so that each warp writes 512
  contiguous bytes per store) and raise this CTA's flag: a named barrier, so every consumer
  thread's stores come first, then one thread's ``fence.acq_rel.gpu`` and a store of 1;
* after a tail piece, they wait for the flags of the CTAs that computed the rest of the tile
  (one thread spins on ``ld.acquire.gpu``, then the named barrier), add those partial sums
  (loads that skip L1: ``ld.global.cg``), reset the flags to 0 for the next launch, and run the
  usual epilogue.

A flag is raised after the first unit of a CTA's range (whole tiles before it wait for nothing)
and waited for after another CTA's last unit, so no wait depends on another wait: it always
ends, since a persistent grid has every CTA resident at once.

The producer needs no change beyond walking the same list: it loads k-tiles ``k_begin`` to
``k_end`` of each unit. The partial sums cost one fp32 tile written by one SM and read by another
through L2 (128 KiB for 128x256) per split tile, about 9-13 k-tiles of time, so the kernel splits
only where each CTA saves ``MIN_SAVED`` = 16 k-tiles or more. Measured (docs/hopper_gemm.md,
"Stream-K"): 1.4-2.2% faster than the static schedule at a fixed clock where it splits, and
0.99-1.01x at the H100's 700 W cap, where the SMs that idle through a partial wave lend their
power to the others.

The kernel takes one more argument than the persistent one, ``partial_sums``: one fp32 tile per
CTA; and its ``counters`` are one flag per CTA (``counters[s]``: CTA slot s's partial sums are
in ``partial_sums``), where the persistent kernel's are the dynamic scheduler's two tickets.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute

from ..errors import ShapeError
from ..models import stream_k
from ..models.gemm_plan import TILES
from ..models.stream_k import MIN_SAVED
from . import gemm_launch
from .barriers import Barrier
from .hopper_gemm_persistent import CONSUMER_THREADS, PersistentHopperGemm
from .persistent_setup import CtaSetup
from .stream_k_scheduler import SCHEDULERS, StreamKArgs, StreamKScheduler


class StreamKHopperGemm(PersistentHopperGemm):
    """C = A @ B.T, persistent, cooperative, stream-K for the last partial wave (module docstring).
    ``min_saved``: split only where that saves each CTA this many k-tiles (``models/stream_k``).
    ``scheduler``: a name of ``SCHEDULERS`` (``stream_k_scheduler.SCHEDULERS``), or
    ``StreamKScheduler`` or a subclass of it (e.g. another ``tile_of``: the order of the whole tiles).

    The persistent kernel with two hooks changed: its scheduler (``StreamKScheduler``: the
    same loops walk units, pieces of a tile's K) and what a unit's accumulators become
    (``store_tile``: partial sums, or the sum of them all and the epilogue)."""

    TILES = TILES  # gemm_plan's: 256x128 is the persistent kernel's alone (not measured here)
    SCHEDULER, SCHEDULERS, MIN_SAVED = StreamKScheduler, SCHEDULERS, MIN_SAVED

    def __init__(self, tile_mn=None, *, min_saved: int | None = None, **options):
        """``options``: the persistent kernel's keywords."""
        super().__init__(tile_mn, **options)
        if min_saved < 1:  # (left None, it arrives as MIN_SAVED: configured.py)
            raise ShapeError(f"min_saved={min_saved}: must be >= 1 k-tile", "use the default, MIN_SAVED")
        self.min_saved = min_saved

    def scratch(self):
        """The counters (one "partial sums ready" flag per CTA, zero between launches) and the
        partial sums (one fp32 tile per CTA)."""
        return (gemm_launch.Scratch("counters", "int32", self.sms, 8),
                gemm_launch.Scratch("partial_sums", "float32", self.sms * self.tile_mn[0] * self.tile_mn[1], 16,
                                    zero=False))

    def make_scheduler(self, scheduler_args: StreamKArgs, setup: CtaSetup):
        """The static scheduler's fields plus this launch's split: only where it saves each cluster
        at least ``min_saved`` k-tiles (``models/stream_k.plan``, here on the device)."""
        dense = self.grid_fields(scheduler_args, setup)
        dp, sk_ctas, sk_iters = stream_k.plan(dense["total"], dense["stride"], dense["k_tiles"], self.min_saved,
                                              min_=cutlass.min)
        return self.Scheduler(**dense, dp=dp, sk_ctas=sk_ctas, sk_iters=sk_iters,
                              done=dense["total"] * dense["k_tiles"], partial_sums=scheduler_args.partial_sums)

    @cute.jit
    def store_tile(self, scheduler, epilogue, mma, gC, tile, ctid, warp_idx):
        """After a head or middle piece, save the partial sums (the CTA of the tail piece finishes
        the tile); after a tail piece (or a whole tile), add the others' partial sums, then the
        epilogue."""
        cluster_size = self.cluster_mn[0] * self.cluster_mn[1]
        rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        sums, flags = scheduler.partial_sums, scheduler.counters
        if tile.k_end < scheduler.k_tiles:
            save_partial(sums, flags, mma.acc, scheduler.first * cluster_size + rank, ctid)
        else:
            first, stop = scheduler.helpers(tile)
            for other in cutlass.range(first, stop, unroll=1):
                add_partial(sums, flags, mma.acc, other * cluster_size + rank, ctid)
            # (super named: inside @cute.jit the bare super() starts from type(self); DEVELOPING.md)
            super(StreamKHopperGemm, self).store_tile(scheduler, epilogue, mma, gC, tile, ctid, warp_idx)


# -- the partial sums: one slot per CTA, and its flag ---------------------------------------------
def _slot_view(partial_sums, acc, slot, ctid):
    """Thread ``ctid``'s part of slot ``slot`` of the partial sums, and its accumulators, both as (4, n/4):
    four consecutive fp32 (one 16-byte access) per column, the 256 threads' columns interleaved so
    that a warp's access covers 512 contiguous bytes."""
    n = cute.size(acc)
    slots = cute.make_tensor(partial_sums.iterator, cute.make_layout(
        (4, n // 4, CONSUMER_THREADS, cute.size(partial_sums) // (n * CONSUMER_THREADS)),
        stride=(1, 4 * CONSUMER_THREADS, 4, n * CONSUMER_THREADS)))
    mine = slots[(None, None, ctid, slot)]
    regs = cute.make_tensor(acc.iterator, cute.make_layout((4, n // 4)))
    return mine, regs


@cute.jit
def save_partial(partial_sums, counters, acc, slot, ctid):
    """Write this CTA's accumulators to its slot, then raise its flag (release)."""
    mine, regs = _slot_view(partial_sums, acc, slot, ctid)
    cute.copy(cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), cutlass.Float32, num_bits_per_copy=128),
              regs, mine)
    cute.arch.barrier(barrier_id=Barrier.EPILOGUE, number_of_threads=CONSUMER_THREADS)
    flag = counters.iterator + slot
    if ctid == 0:
        cute.arch.fence_acq_rel_gpu()  # every consumer thread's stores (ordered by the barrier)
        cute.arch.store(flag, cutlass.Int32(1), sem="relaxed", scope="gpu")


@cute.jit
def add_partial(partial_sums, counters, acc, slot, ctid):
    """Wait for CTA slot ``slot``'s flag (acquire), add its partial sums, reset the flag."""
    flag = counters.iterator + slot
    if ctid == 0:
        ready = cutlass.Int32(0)
        while ready == 0:
            ready = cute.arch.load(flag, cutlass.Int32, sem="acquire", scope="gpu")
        cute.arch.store(flag, cutlass.Int32(0), sem="relaxed", scope="gpu")  # for the next launch
    cute.arch.barrier(barrier_id=Barrier.EPILOGUE, number_of_threads=CONSUMER_THREADS)
    theirs, regs = _slot_view(partial_sums, acc, slot, ctid)
    part = cute.make_rmem_tensor_like(regs)
    load = cute.make_copy_atom(cute.nvgpu.CopyG2ROp(), cutlass.Float32, num_bits_per_copy=128,
                               load_cache_mode=cute.nvgpu.LoadCacheMode.GLOBAL)
    cute.copy(load, theirs, part)
    regs.store(regs.load() + part.load())


# ------------------------------------------------------------------------------------------
# Python entry points (gemm_launch.Entry): a launcher owns its flags and partial sums
# (``fn.counters``, ``fn.partial_sums``), so two launchers may run on different streams at once.
# ------------------------------------------------------------------------------------------
ENTRY = gemm_launch.Entry(StreamKHopperGemm)
compile_target, validate, launcher, gemm = ENTRY.compile_target, ENTRY.validate, ENTRY.launcher, ENTRY.gemm
gemm_streamk = gemm  # the name docs/hopper_gemm.md gives; gemm is the one every dense module has
