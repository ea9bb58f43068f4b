"""Elementwise add, C = A + B, two ways: one element per thread, and one 128-bit vector per thread.

This is notebook 01's kernel. Both versions read A and B and write C once, so both move
3 x size x sizeof(dtype) bytes; the kernel is memory-bound and its speed is set by how well it
uses the memory system. The only difference between them is how work is handed to threads:

* ``naive_add``: thread i owns element i. Its layout does the index arithmetic: ``gA[mi, ni]``
  is ``A`` evaluated at coordinate (mi, ni), i.e. address ``mi * stride_m + ni * stride_n``.
  Every load is one element wide (2 bytes for fp16).
* ``vectorized_add``: ``zipped_divide(mA, (1, V))`` regroups the (M, N) tensor into
  ((1, V), (M, N/V)): mode 0 is one thread's tile of V contiguous elements, mode 1 enumerates
  tiles. Thread i slices tile i with ``gA[(None, (mi, ni))]`` and loads it as one vector. With V
  elements of 16 bytes in total (8 fp16/bf16 or 4 fp32) the compiler emits a 128-bit load
  (``ld.global.v4.b32`` in PTX, ``LDG.E.128`` in SASS): one instruction instead of eight.

Entry point for torch tensors: ``add(a, b, variant="vectorized")``. Compile targets for
``cutecourse.inspect``: ``compile_target(variant=..., dtype=..., m=..., n=...)``.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute

from .. import modes, tensors
from ..errors import CourseError, DTypeError, ShapeError

#: Bytes one thread moves per access in the vectorized kernel: 16 B = 128 bits, the widest
#: global load a thread can issue.
VECTOR_BYTES = 16
THREADS = 256

#: The fastest configuration measured on the H100 (benchmarks/results/
#: experiment_elementwise_hints_32768_run1.json, rows "4x512 none" and "8x256 none"): 8-byte
#: vectors, 512 threads per block, 3112 GB/s at fp16 32768 x 32768 against 3061 for 16-byte
#: vectors with 256 threads. The course's own benchmark (elementwise_add_float16_32768.json)
#: repeats it: 3112 against 3071 GB/s. Wider is not always faster once the loads are coalesced:
#: the difference is in how DRAM sees the request stream.
TUNED = {"vector_bytes": 8, "threads": 512}


# ----------------------------------------------------------------------------------------------
# Version 1: one element per thread
# ----------------------------------------------------------------------------------------------
@cute.kernel
def naive_add_kernel(gA: cute.Tensor, gB: cute.Tensor, gC: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    bdim, _, _ = cute.arch.block_dim()
    i = bidx * bdim + tidx  # this thread's element, counted in row-major order

    m, n = gA.shape
    if i < m * n:  # the last block may run past the end
        mi, ni = i // n, i % n  # flat index -> (row, column)
        gC[mi, ni] = gA[mi, ni] + gB[mi, ni]  # the layout turns (mi, ni) into an address


@cute.jit
def naive_add(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, threads: cutlass.Constexpr = THREADS):
    m, n = mA.shape
    naive_add_kernel(mA, mB, mC).launch(grid=((m * n + threads - 1) // threads, 1, 1),
                                        block=(threads, 1, 1))


# ----------------------------------------------------------------------------------------------
# Version 2: one vector of `elems` contiguous elements per thread
# ----------------------------------------------------------------------------------------------
@cute.kernel
def vectorized_add_kernel(gA: cute.Tensor, gB: cute.Tensor, gC: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    bdim, _, _ = cute.arch.block_dim()
    i = bidx * bdim + tidx  # this thread's tile

    m, n_tiles = gA.shape[1]  # mode 1 of ((1, V), (M, N/V)) enumerates the tiles
    if i < m * n_tiles:
        mi, ni = i // n_tiles, i % n_tiles
        a = gA[(None, (mi, ni))].load()  # (1, V) contiguous elements: one vector load
        b = gB[(None, (mi, ni))].load()
        gC[(None, (mi, ni))] = a + b


@cute.jit
def vectorized_add(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor,
                   elems: cutlass.Constexpr = 8, threads: cutlass.Constexpr = THREADS):
    tiler = (1, elems)  # one row, `elems` columns: contiguous in a row-major tensor
    gA = cute.zipped_divide(mA, tiler)  # ((1, elems), (M, N / elems))
    gB = cute.zipped_divide(mB, tiler)
    gC = cute.zipped_divide(mC, tiler)
    n_tiles = cute.size(gC, mode=[1])
    vectorized_add_kernel(gA, gB, gC).launch(grid=((n_tiles + threads - 1) // threads, 1, 1),
                                             block=(threads, 1, 1))


VARIANTS = {"naive": naive_add, "vectorized": vectorized_add}


# ----------------------------------------------------------------------------------------------
# Host side: validation, compilation cache, launch
# ----------------------------------------------------------------------------------------------
def torch_dtypes() -> dict:
    """torch dtype -> CuTe dtype, for the dtypes the elementwise kernels handle."""
    import torch

    return {torch.float16: cutlass.Float16, torch.bfloat16: cutlass.BFloat16,
            torch.float32: cutlass.Float32}


DTYPE_NAMES = {"float16": "Float16", "bfloat16": "BFloat16", "float32": "Float32"}


def vector_elems(itemsize: int) -> int:
    """Elements in one 128-bit vector: 8 for 2-byte types, 4 for fp32."""
    return VECTOR_BYTES // itemsize


def _params(variant: str, itemsize: int, elems: int | None, threads: int) -> dict:
    if variant not in VARIANTS:
        raise CourseError(f"variant={variant!r} is not an elementwise kernel of this course",
                          f"pass variant= one of {sorted(VARIANTS)}")
    if threads <= 0 or threads > 1024 or threads % 32:
        raise ShapeError(f"threads = {threads} is not a whole number of warps up to 1024",
                         "use 128, 256 or 512")
    if variant == "naive":
        return {"threads": threads}
    elems = elems or vector_elems(itemsize)
    if elems * itemsize not in (4, 8, 16, 32, 64):
        raise ShapeError(f"elems = {elems} elements of {itemsize} bytes = {elems * itemsize} bytes "
                         "per thread, which is not a 4-, 8-, 16-, 32- or 64-byte vector",
                         f"use {vector_elems(itemsize)} (one 16-byte vector) or a power-of-two "
                         "multiple or fraction of it")
    return {"elems": elems, "threads": threads}


def check_operands(a, b, c, variant: str = "vectorized", elems: int | None = None,
                   need_cuda: bool = True) -> None:
    """Everything the kernels assume about their operands, checked with actionable errors."""
    ops = {"a": a, "b": b, "out": c}
    tensors.check_elementwise(ops, torch_dtypes(), need_cuda)
    m, n = a.shape
    if m * n >= 2**31:
        raise ShapeError(f"{m} x {n} = {m * n} elements overflows the kernels' 32-bit thread index",
                         "split the tensor into chunks of fewer than 2**31 elements")
    if variant == "vectorized":
        v = elems or vector_elems(a.element_size())
        tensors.check_divisible("N (columns)", n, v, f"one thread loads {v} contiguous elements",
                                f"pad the last dimension to a multiple of {v}, or use variant='naive'")
        tensors.check_alignment(ops, min(VECTOR_BYTES, v * a.element_size()))


_compiled: dict = {}


def compiled_kernel(a, b, c, variant: str = "vectorized", elems: int | None = None,
                    threads: int = THREADS):
    """The compiled kernel for these operands' dtype and shape (compiled once, then cached),
    and the three operands as CuTe tensors, ready to launch: ``fn(*args)``."""
    from cutlass.cute.runtime import from_dlpack

    params = _params(variant, a.element_size(), elems, threads)
    # assumed_align tells the compiler the pointers are 16-byte aligned (check_operands verified
    # it): without it the compiler must assume element alignment and cannot emit vector loads.
    args = tuple(from_dlpack(t, assumed_align=VECTOR_BYTES) for t in (a, b, c))
    key = (variant, a.dtype, tuple(a.shape), tuple(sorted(params.items())))
    if key not in _compiled:
        _compiled[key] = cute.compile(VARIANTS[variant], *args, **params)
    return _compiled[key], args


def add(a, b, out=None, variant: str = "vectorized", elems: int | None = None,
        threads: int = THREADS):
    """C = A + B on the GPU with the chosen kernel; checks its operands first."""
    import torch

    modes.require_gpu("any")
    if out is None:
        out = torch.empty_like(a)
    check_operands(a, b, out, variant, elems)
    fn, args = compiled_kernel(a, b, out, variant, elems, threads)
    fn(*args)
    return out


# ----------------------------------------------------------------------------------------------
# Compile targets for cutecourse.inspect (no GPU needed)
# ----------------------------------------------------------------------------------------------
def compile_target(variant: str = "vectorized", dtype: str = "float16", m: int = 4096,
                   n: int = 4096, elems: int | None = None, threads: int = THREADS):
    """``(jit_function, args, kwargs)`` for ``cute.compile``: fake row-major (m, n) tensors."""
    from cutlass.cute.runtime import make_fake_compact_tensor

    if dtype not in DTYPE_NAMES:
        raise DTypeError(f"dtype={dtype!r} is not one this kernel is compiled for",
                         f"pass dtype= one of {sorted(DTYPE_NAMES)}")
    cdtype = getattr(cutlass, DTYPE_NAMES[dtype])
    params = _params(variant, cdtype.width // 8, elems, threads)
    if variant == "vectorized" and n % params["elems"]:
        raise ShapeError(f"n = {n} is not a multiple of {params['elems']}", "choose another n")
    fake = make_fake_compact_tensor(cdtype, (m, n), stride_order=(1, 0), assumed_align=VECTOR_BYTES)
    return VARIANTS[variant], (fake, fake, fake), params
