"""The persistent GEMM with a direct-store epilogue: accumulators straight from registers to C.

``DirectStoreHopperGemm`` is ``hopper_gemm_persistent.PersistentHopperGemm`` with its epilogue
changed: ``store_tile`` (the epilogue schedule) and what it needs (``epilogue_c``,
``make_epilogue``, ``finish_stores``: see the end). The course's epilogue (``sm90.store_tile``) is
CUTLASS 3.x's "TMA warp-specialized" one: the consumers convert their fp32 accumulators, write
them to smem with ``stmatrix`` one *epilogue tile* (128x32) at a time, cycling through
``EPI_STAGES`` C buffers, and one warp stores each buffer with a TMA store (whole 128-byte rows
of C, clipped at its edges by the hardware). Here every consumer thread stores its own
accumulators to global memory (``st.global``), as CUTLASS's "no-smem" epilogue does:

* no shared memory, no ``fence.proxy.async`` and no barrier between the warps of a warpgroup;
* but the stores are as narrow and as scattered as the wgmma accumulator layout: a thread holds
  pairs of neighbouring columns, so each store is 4 bytes (a pair of fp16), and one warp's store
  instruction touches 8 rows x 16 bytes instead of whole lines;
* the edges of C are the kernel's business: a pair outside C is not stored (a predicate per
  pair from the coordinate tensor), where the TMA store clips in hardware.

Which epilogue is faster is a measurement (``benchmarks/schedules.py``, row
"persistent 128x256 direct store"). The smem plan is the persistent kernel's: its C buffers stay
allocated, unused. With 16-bit C they do not cost a ring stage (4 stages of 48 KiB fit with or
without them), so the two kernels differ in the epilogue alone.

The kernel needs C itself, not only its TMA view: the host hook ``epilogue_c`` hands C to the
kernel (in its ``EpilogueArgs``), and ``make_epilogue`` returns this kernel's own epilogue,
``DirectStores``: C and the op's operands, nothing else (no C buffers to write, no TMA-store
pipeline, so nothing to drain at the end: ``finish_stores`` waits for nothing).
"""

from __future__ import annotations

from typing import NamedTuple

import cutlass
import cutlass.cute as cute

from . import gemm_launch
from .epilogue_op import apply_at
from .hopper_gemm_persistent import PersistentHopperGemm

#: The tile it is checked on (tests/test_hopper_gemm_direct_store.py, on a GPU): the cooperative
#: kernel's 128x256 (each consumer warpgroup 64x256). A variant combining it with another
#: persistent variant sets its own TILES (docs/DEVELOPING.md, "The persistent kernel's hooks").
TILES = ((128, 256),)
#: Values per store: a pair (two neighbouring columns of the wgmma accumulator): 4 bytes of
#: 16-bit C, 8 of fp32.
PAIR = 2


class DirectStores(NamedTuple):
    """The direct-store epilogue of the consumers: what ``store_tile`` reads besides the kernel."""

    c: cute.Tensor  # C (M, N) in global memory (``epilogue_c``)
    operands: tuple  # the epilogue op's tensors


class DirectStoreHopperGemm(PersistentHopperGemm):
    """C = A @ B.T, persistent, cooperative, the epilogue storing from registers (module docstring)."""

    TILES = TILES

    def epilogue_c(self, c):
        """C (M, N) itself, its row stride known to be a multiple of 16 bytes. The pair stores need
        the compiler to know that every row of C starts 4-byte aligned. C's row stride is a run-time
        value; the host checked that it is a multiple of 16 bytes (gemm_launch.check_operands), so
        say so (cute.assume), or the copy does not compile."""
        ldc = cute.assume(c.stride[0], divby=128 // c.element_type.width)
        return cute.make_tensor(c.iterator, cute.make_layout(c.shape, stride=(ldc, 1)))

    def make_epilogue(self, tma_c, sC, mma, ctid, epilogue_args, unit: int = 0):
        """C to store into and the op's operands (``DirectStores``): no smem, no TMA store."""
        return DirectStores(epilogue_args.c, epilogue_args.operands)

    def finish_stores(self, epilogue, warp_idx):
        """Nothing to wait for: the stores read registers, not a C buffer in smem."""

    @cute.jit
    def store_tile(self, scheduler, epilogue, mma, gC, tile, ctid, warp_idx):
        """Each consumer thread converts its accumulators (through the epilogue op, if any) and
        stores them where they belong in C, a pair of columns per store, skipping pairs outside C."""
        c, op_operands = epilogue.c, epilogue.operands  # C (M, N) in global memory, the op's tensors
        thr = mma.tiled_mma.get_slice(ctid)
        where = (tile.tile_m, tile.tile_n)
        # The same partition as the accumulators: element i of tCgC is where acc[i] goes, and
        # element i of tCcC its (m, n) in C.
        tCgC = thr.partition_C(cute.local_tile(c, self.tile_mn, where))
        tCcC = thr.partition_C(cute.local_tile(cute.make_identity_tensor(c.shape), self.tile_mn, where))
        out = cute.make_rmem_tensor(mma.acc.layout, self.c_dtype)
        if cutlass.const_expr(self.epilogue_op is not None):
            for i in cutlass.range_constexpr(cute.size(mma.acc)):
                apply_at(self.epilogue_op, mma.acc, i, *tCcC[i], op_operands)
        out.store(mma.acc.load().to(self.c_dtype))
        # Mode 0 of the accumulator layout starts with 2 neighbouring columns: one store. (C's
        # rows are a multiple of 16 bytes, so a pair is wholly inside C or wholly outside.)
        store = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), self.c_dtype,
                                    num_bits_per_copy=PAIR * self.c_dtype.width)
        src, dst, coords = (cute.zipped_divide(t, (PAIR,)) for t in (out, tCgC, tCcC))
        for i in cutlass.range_constexpr(cute.size(src, mode=[1])):
            if cute.elem_less(coords[(0, i)], c.shape):
                cute.copy(store, src[(None, i)], dst[(None, i)])


# ------------------------------------------------------------------------------------------
# Python entry points (gemm_launch.Entry)
# ------------------------------------------------------------------------------------------
ENTRY = gemm_launch.Entry(DirectStoreHopperGemm)
compile_target, validate, launcher, gemm = ENTRY.compile_target, ENTRY.validate, ENTRY.launcher, ENTRY.gemm
gemm_direct_store = gemm  # notebook 06's name; gemm is the one every dense module has
