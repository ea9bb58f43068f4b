"""Elementwise add, C = A + B, with a thread-value (TV) layout: notebook 02's kernel.

Notebook 01's vectorized kernel gives each thread one 16-byte vector and computes by hand which
vector that is. Here the hierarchy is written down as layouts and CuTe does the arithmetic:

1. **Block tile.** ``make_layout_tv(thr_layout, val_layout)`` returns ``tiler_mn``, the
   (TileM, TileN) tile one thread block owns, and ``tv_layout``, a layout that maps
   (thread, value) -> coordinate inside that tile. ``thr_layout`` arranges the block's threads
   over the tile, ``val_layout`` is the block of values each thread owns: with threads (4, 32)
   and values (4, 8) the tile is (16, 256) and every thread owns a 4 x 8 patch.
2. **Tile the tensor.** ``zipped_divide(mA, tiler_mn)`` regroups the (M, N) tensor into
   ((TileM, TileN), (RestM, RestN)): mode 0 is a coordinate inside a tile, mode 1 says which tile.
   A block slices out its tile with ``gA[((None, None), block)]``: (TileM, TileN) -> address.
3. **Thread tile.** ``composition(blkA, tv_layout)`` is (thread, value) -> address: first the TV
   layout picks the coordinate, then the tile's layout turns it into an address. Slicing
   ``(tidx, None)`` keeps this thread's values: value -> address. ``.load()`` reads them all;
   values that are contiguous in memory and 16 bytes together become one 128-bit load.

Why the default shapes: the tensors are row-major, so consecutive *threads* sit along N (a warp
of 32 threads covers 32 x 8 contiguous fp16 = 512 bytes per load instruction: coalesced) and each
thread's 8 values along N are one 16-byte vector. More values per thread (rows of the value
layout) keep more loads in flight per thread: thread coarsening. The benchmark
``benchmarks/elementwise_tv.py`` sweeps these shapes; ``TUNED`` records its winner.

Block order ("raster"): with ``raster="n"`` the grid is 2-D and ``blockIdx.x`` walks along N,
so blocks that run at the same time read neighbouring memory; ``raster="m"`` is the 1-D grid of
the CuTe DSL blog post on elementwise add ("An applied introduction to CuTeDSL"), whose linear
block index walks down M first (mode 1 of the zipped tensor is column-major).

Entry point for torch tensors: ``add(a, b, thr=(4, 32), val=(4, 8))``. Compile targets for
``cutecourse.inspect``: ``compile_target(thr=..., val=..., dtype=..., m=..., n=...)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import cutlass
import cutlass.cute as cute

from .. import modes, tensors
from ..errors import CourseError, DTypeError, ShapeError
from .elementwise import DTYPE_NAMES, torch_dtypes

#: The widest global access one thread can issue: 16 bytes (128 bits).
VECTOR_BYTES = 16
#: CUDA's limits on the block and on the grid's y dimension (used by raster="n").
MAX_THREADS = 1024
MAX_GRID_Y = 65535


@dataclass(frozen=True)
class TVShape:
    """A thread layout and a value layout, both row-major (N fastest), and the block order."""

    thr: tuple[int, int] = (4, 32)  # threads of one block arranged as (rows, columns)
    val: tuple[int, int] = (4, 8)  # values of one thread arranged as (rows, columns)
    raster: str = "n"  # "n": neighbouring blocks along N (2-D grid); "m": the blog post's 1-D order
    hint: str = ""  # a cache hint on the loads, a key of LOAD_HINTS ("" = plain loads)

    @property
    def threads(self) -> int:
        return self.thr[0] * self.thr[1]

    @property
    def values(self) -> int:
        return self.val[0] * self.val[1]

    @property
    def tile(self) -> tuple[int, int]:
        """(TileM, TileN): what make_layout_tv returns as tiler_mn for row-major layouts."""
        return (self.thr[0] * self.val[0], self.thr[1] * self.val[1])

    @property
    def name(self) -> str:
        t, v = self.thr, self.val
        return (f"thr({t[0]},{t[1]}) val({v[0]},{v[1]})" + ("" if self.raster == "n" else " m-order")
                + (f" {self.hint}" if self.hint else ""))


#: The configuration of the CuTe DSL blog post on elementwise add, the one notebook 02 starts from
#: and calls "the seed" (the post measured 2961 GB/s on an H100 with it).
SEED = TVShape((4, 32), (4, 8), "m")
#: The configuration the sweep in benchmarks/elementwise_tv.py chose for fp16 32768 x 32768 on
#: an H100 (benchmarks/results/elementwise_tv_sweep_fp16_32768.json holds the evidence).
TUNED = TVShape((1, 256), (1, 4), "n")


#: Cache hints a load can carry (PTX qualifier -> the copy atom's attribute). Each byte of A and
#: B is read exactly once, so caching it is useless; whether saying so helps is measured by the
#: sweep, not assumed.
LOAD_HINTS = {
    "": None,  # plain ld.global
    "nc": ("invariant", True),  # ld.global.nc: the read-only (texture) path
    "cs": ("load_cache_mode", "STREAMING"),  # ld.global.cs: evict-first in L1 and L2
    "L1::no_allocate": ("l1c_evict_priority", "NO_ALLOCATE"),  # do not keep it in L1
    "L2::256B": ("l2_prefetch_size", "SIZE_256B"),  # L2 fetches the whole 256-byte block
}


def _hint_attributes(hint: str) -> dict:
    """The copy-atom keyword for a LOAD_HINTS entry (evaluated while the kernel is traced)."""
    name, value = LOAD_HINTS[hint]
    enum = {"load_cache_mode": cute.nvgpu.LoadCacheMode,
            "l1c_evict_priority": cute.nvgpu.CacheEvictionPriority,
            "l2_prefetch_size": cute.nvgpu.L2PrefetchSize}.get(name)
    return {name: getattr(enum, value) if enum else value}


# ----------------------------------------------------------------------------------------------
# Device side
# ----------------------------------------------------------------------------------------------
@cute.kernel
def tv_add_kernel(gA: cute.Tensor, gB: cute.Tensor, gC: cute.Tensor, tv_layout: cute.Layout,
                  raster: cutlass.Constexpr, hint: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, bidy, _ = cute.arch.block_idx()

    # Which tile: mode 1 of ((TileM, TileN), (RestM, RestN)).
    if cutlass.const_expr(raster == "n"):
        block = (bidy, bidx)  # 2-D grid: x runs along N, y along M
    else:
        block = bidx  # 1-D grid: a linear index into (RestM, RestN), M fastest

    # Block tile: (TileM, TileN) -> address.
    blkA = gA[((None, None), block)]
    blkB = gB[((None, None), block)]
    blkC = gC[((None, None), block)]

    # (thread, value) -> (TileM, TileN) -> address, composed into one layout.
    tvA = cute.composition(blkA, tv_layout)
    tvB = cute.composition(blkB, tv_layout)
    tvC = cute.composition(blkC, tv_layout)

    # Thread tile: this thread's values, value -> address.
    thrA = tvA[(tidx, None)]
    thrB = tvB[(tidx, None)]
    thrC = tvC[(tidx, None)]

    # Both loads are issued before the add needs them, so all of this thread's vectors are in
    # flight at once; the store is vectorized the same way.
    if cutlass.const_expr(hint != ""):
        # The same 128-bit loads through an explicit copy atom that carries a cache hint
        # (see LOAD_HINTS): every byte here is read once, and the hints say so to the caches.
        atom = cute.make_copy_atom(cute.nvgpu.CopyG2ROp(), gA.element_type,
                                   num_bits_per_copy=VECTOR_BYTES * 8, **_hint_attributes(hint))
        rA = cute.make_rmem_tensor_like(thrA)  # registers shaped like this thread's values
        rB = cute.make_rmem_tensor_like(thrB)
        cute.copy(atom, thrA, rA)
        cute.copy(atom, thrB, rB)
        thrC.store(rA.load() + rB.load())
    else:
        a = thrA.load()
        b = thrB.load()
        thrC.store(a + b)


@cute.jit
def tv_add(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor,
           thr: cutlass.Constexpr = (4, 32), val: cutlass.Constexpr = (4, 8),
           raster: cutlass.Constexpr = "n", hint: cutlass.Constexpr = ""):
    # Row-major thread and value layouts: the last mode has stride 1, like the tensors, so
    # thread t+1 and value v+1 sit one step further along N.
    thr_layout = cute.make_ordered_layout(thr, order=(1, 0))
    val_layout = cute.make_ordered_layout(val, order=(1, 0))
    tiler_mn, tv_layout = cute.make_layout_tv(thr_layout, val_layout)

    gA = cute.zipped_divide(mA, tiler_mn)  # ((TileM, TileN), (RestM, RestN))
    gB = cute.zipped_divide(mB, tiler_mn)
    gC = cute.zipped_divide(mC, tiler_mn)

    rest_m, rest_n = gC.shape[1]
    grid = [rest_n, rest_m, 1] if cutlass.const_expr(raster == "n") else [cute.size(gC, mode=[1]), 1, 1]
    tv_add_kernel(gA, gB, gC, tv_layout, raster, hint).launch(
        grid=grid, block=[cute.size(tv_layout, mode=[0]), 1, 1])


# ----------------------------------------------------------------------------------------------
# Host side: validation, compilation cache, launch
# ----------------------------------------------------------------------------------------------
def _pair(name: str, value) -> tuple[int, int]:
    try:
        pair = tuple(int(x) for x in value)
    except (TypeError, ValueError):
        pair = ()
    if len(pair) != 2 or min(pair) <= 0:
        raise ShapeError(f"{name} = {value!r} is not a pair of positive integers (rows, columns)",
                         f"write it like {name}=(4, 32)")
    return pair


def make_shape(thr=(4, 32), val=(4, 8), raster: str = "n", hint: str = "",
               itemsize: int = 2) -> TVShape:
    """A checked TVShape: a block of whole warps within CUDA's limit, a known raster and hint."""
    shape = TVShape(_pair("thr", thr), _pair("val", val), raster, hint)
    if hint not in LOAD_HINTS:
        raise CourseError(f"hint={hint!r} is not a load hint this kernel knows",
                          f"pass hint= one of {sorted(LOAD_HINTS)} ('': no hint)")
    if hint and (shape.val[1] * itemsize) % VECTOR_BYTES:
        raise ShapeError(f"val = {shape.val} puts {shape.val[1] * itemsize} contiguous bytes in a "
                         f"row; a hinted load moves whole {VECTOR_BYTES}-byte vectors",
                         f"use a multiple of {VECTOR_BYTES // itemsize} columns, or hint=''")
    if raster not in ("n", "m"):
        raise CourseError(f"raster={raster!r} is not a raster order",
                          "pass raster='n' (neighbouring blocks along N, a 2-D grid) or raster='m' (the 1-D grid)")
    if shape.threads > MAX_THREADS or shape.threads % 32:
        raise ShapeError(f"thr = {shape.thr} is {shape.threads} threads; a block needs a whole "
                         f"number of 32-thread warps, at most {MAX_THREADS}",
                         "use e.g. (4, 32), (2, 64) or (1, 256)")
    if shape.values * itemsize > 256:
        raise ShapeError(f"val = {shape.val} is {shape.values * itemsize} bytes per operand per "
                         "thread; three operands of that would crowd the registers",
                         "keep a thread's values at or under 256 bytes, e.g. (4, 8) for fp16")
    return shape


def check_operands(a, b, c, shape: TVShape, need_cuda: bool = True) -> None:
    """Everything the TV kernel assumes about its operands, with actionable errors."""
    ops = {"a": a, "b": b, "out": c}
    tensors.check_elementwise(ops, torch_dtypes(), need_cuda)
    check_tile(tuple(a.shape), shape)
    tensors.check_alignment(ops, VECTOR_BYTES)


def check_tile(mn: tuple[int, int], shape: TVShape) -> None:
    """The tile must divide the tensor: this kernel has no predication for ragged edges."""
    (m, n), (tm, tn) = mn, shape.tile
    fix = (f"pick thr/val shapes whose tile (thr * val = {shape.tile}) divides ({m}, {n}), "
           "or pad the tensor")
    tensors.check_divisible("M (rows)", m, tm, f"the tile {shape.tile} has {tm} rows", fix)
    tensors.check_divisible("N (columns)", n, tn, f"the tile {shape.tile} has {tn} columns", fix)
    if shape.raster == "n" and m // tm > MAX_GRID_Y:
        raise ShapeError(f"{m // tm} tiles along M exceed the grid's y limit of {MAX_GRID_Y}",
                         "use taller tiles (more rows in thr or val) or raster='m'")


def _constexprs(shape: TVShape) -> dict:
    return {"thr": shape.thr, "val": shape.val, "raster": shape.raster, "hint": shape.hint}


_compiled: dict = {}


def compiled_kernel(a, b, c, shape: TVShape):
    """The compiled kernel for these operands (compiled once per dtype, shape and TVShape) and
    the operands as CuTe tensors, ready to launch: ``fn(*args)``."""
    from cutlass.cute.runtime import from_dlpack

    # assumed_align=16 promises the compiler 16-byte aligned bases (checked above), which is
    # what lets it turn 8 contiguous fp16 values into one 128-bit access.
    args = tuple(from_dlpack(t, assumed_align=VECTOR_BYTES) for t in (a, b, c))
    key = (a.dtype, tuple(a.shape), shape)
    if key not in _compiled:
        _compiled[key] = cute.compile(tv_add, *args, **_constexprs(shape))
    return _compiled[key], args


def add(a, b, out=None, thr=(4, 32), val=(4, 8), raster: str = "n", hint: str = ""):
    """C = A + B on the GPU with the TV-layout kernel; checks its operands first."""
    import torch

    modes.require_gpu("any")
    shape = make_shape(thr, val, raster, hint, a.element_size())
    if out is None:
        out = torch.empty_like(a)
    check_operands(a, b, out, shape)
    fn, args = compiled_kernel(a, b, out, shape)
    fn(*args)
    return out


# ----------------------------------------------------------------------------------------------
# Compile targets for cutecourse.inspect (no GPU needed)
# ----------------------------------------------------------------------------------------------
def compile_target(thr=(4, 32), val=(4, 8), raster: str = "n", hint: str = "",
                   dtype: str = "float16", m: int = 4096, n: int = 4096):
    """``(jit_function, args, kwargs)`` for ``cute.compile``: fake row-major (m, n) tensors."""
    from cutlass.cute.runtime import make_fake_compact_tensor

    if dtype not in DTYPE_NAMES:
        raise DTypeError(f"dtype={dtype!r} is not one this kernel is compiled for",
                         f"pass dtype= one of {sorted(DTYPE_NAMES)}")
    cdtype = getattr(cutlass, DTYPE_NAMES[dtype])
    shape = make_shape(thr, val, raster, hint, cdtype.width // 8)
    check_tile((m, n), shape)
    fake = make_fake_compact_tensor(cdtype, (m, n), stride_order=(1, 0), assumed_align=VECTOR_BYTES)
    return tv_add, (fake, fake, fake), _constexprs(shape)
