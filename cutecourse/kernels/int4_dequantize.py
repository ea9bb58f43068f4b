"""int4 weights -> bf16 (fp16) W' in global memory: the first half of the mixed-input GEMM at large M.

At decode (M of 1-16 tokens) a weight is read once and used M times, so the fused kernel
(``hopper_mixed_gemm.py``) converts each weight in registers right before its wgmma: reading
int4 instead of bf16 is the whole gain. At M in the thousands the same GEMM is compute-bound:
each weight is used thousands of times, the bytes no longer matter, and the fused kernel pays
for its small batch tile (tokens 64 at most, each weight converted once per 64 tokens). There
the fastest way is to convert every weight once, into a bf16 W' (N, K), and run the dense GEMM
of notebook 06 on it: the conversion costs one pass over memory (0.5 byte read and 2 written a
weight: 59 us for 8192 x 8192 on an H200, 2.85 TB/s), the GEMM hundreds of microseconds.

This kernel is that pass. One CTA of 128 threads converts 4 reorder blocks of 64 x 64, one
after the other along K. Thread t first loads its 4 words of every block (16 bytes each, as the
fused kernel's consumer reads them from shared memory: 4 loads in flight), then, block by block,
turns each word into 4 bf16x2 registers with the same instructions (``int4_convert.py``: shift,
``lop3``, ``sub``, ``mul``), writes each register where its two weights sit in the block (the
fragment layout of ``quant/reorder.py``: rows g and g + 8, columns 2 (t % 4) + {0, 1} and + 8
of each 16-column slice) in shared memory, and the CTA stores the block as whole 128-byte rows
of W' (16 bytes a thread). Stored straight from the registers, 4 bytes a thread and 8 rows a
warp instruction, the same pass takes about 90 us. It is also a
check of the reorder: its W' equals ``quant.dequantize`` bit for bit. With fp16 scales
(``dtype="float16"``, for fp16 activations) it writes an fp16 W' with the fp16 conversion.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.utils as utils

from ..errors import DTypeError, ShapeError
from ..tensors import dtype_name
from ..quant.reorder import BLOCK_K, BLOCK_N, SLICE_K, SLICES, VALUES
from . import int4_convert
from .configured import Configured
from .mixed_tiles import check_group
from .operands import DescribedEntry, Tensor, check_tensors

THREADS = 128  # one reorder block: 128 threads x 4 words
#: Reorder blocks a CTA converts one after the other, along K (a CTA: 64 rows x 256 columns).
BLOCKS = 4
#: The block staged in shared memory: 64 rows of 32 bf16 pairs, padded to 36 (see ``kernel``).
STAGE_ROWS, STAGE_PAIRS = BLOCK_N, BLOCK_K // 2 + 4


class Int4Dequantize(Configured):
    """W' = (q - zero) * scale in bf16 (fp16), from the packed words of ``quant.quantize_int4``.
    ``group_size``: weights per scale (compiled in); ``zero_point``: read uint8 zero points
    (else the zero is 8); ``dtype``: the scales' and W''s, ``"bfloat16"`` or ``"float16"``."""

    GROUP_SIZE, ZERO_POINT, DTYPE = 128, False, "bfloat16"

    def __init__(self, *, group_size: int | None = None, zero_point: bool | None = None, dtype: str | None = None):
        a = self.arguments  # a None replaced by the class's default (configured.py)
        int4_convert.check_dtype(a["dtype"])
        if a["group_size"] % SLICE_K:
            raise ShapeError(f"group_size {a['group_size']}: a 16-column slice must lie inside one group",
                             "use a multiple of 16 (quantize_int4's groups are)")
        self.group_size, self.zero_point, self.dtype = a["group_size"], a["zero_point"], a["dtype"]

    def operands(self):
        """The tensors :meth:`__call__` takes, before and after the stream (``operands.py``)."""
        before = (Tensor("packed", "int32", ("N", "K8"), ("ldw",)),
                  Tensor("scales", self.dtype, ("groups", "N"), ("lds",)),
                  Tensor("w", "int32", ("N", "K2"), ("ldo",)))  # W' (N, K) bf16 (fp16) as pairs
        after = (Tensor("zeros", "uint8", ("groups", "N"), ("ldz",)),) if self.zero_point else ()
        return before, after

    @cute.jit
    def __call__(self, packed: cute.Tensor, scales: cute.Tensor, w: cute.Tensor, stream, zeros=None):
        n, k8 = packed.shape
        blocks = k8 // (BLOCK_K // VALUES)  # reorder blocks along K
        grid = ((blocks + BLOCKS - 1) // BLOCKS, n // BLOCK_N, 1)  # a CTA: 64 rows x BLOCKS blocks
        self.kernel(packed, scales, w, zeros).launch(grid=grid, block=(THREADS, 1, 1), stream=stream,
                                                     smem=STAGE_ROWS * STAGE_PAIRS * 4 + 128)

    @cute.kernel
    def kernel(self, mW: cute.Tensor, mS: cute.Tensor, mOut: cute.Tensor, mZ):
        t, _, _ = cute.arch.thread_idx()
        bk, bn, _ = cute.arch.block_idx()
        out = mOut  # W' as bf16 (fp16) pairs: (N, K / 2) int32
        s16 = cute.recast_tensor(mS, cutlass.Uint16)  # the scales' bit patterns
        # one block of W' in bf16 pairs, each row padded by 4 pairs (16 bytes): rows 144 bytes
        # apart, so the 8 rows a warp writes at once start in 8 different groups of 4 banks
        stage = utils.SmemAllocator().allocate_tensor(
            cutlass.Int32, cute.make_layout((STAGE_ROWS, STAGE_PAIRS), stride=(STAGE_PAIRS, 1)), 16)
        # where thread t's fragment sits (reorder.FRAGMENT): rows g, g + 8; columns c, c + 1, c + 8, c + 9
        g = (t // 4) % 8 + 16 * (t // 32)
        c = 2 * (t % 4)
        blocks = mW.shape[1] // (BLOCK_K // VALUES)
        # every block's words first (16 bytes a block): 4 loads in flight a thread, not one
        words = cute.make_rmem_tensor(cute.make_layout((BLOCKS, SLICES), stride=(SLICES, 1)), cutlass.Int32)
        for b in cutlass.range_constexpr(BLOCKS):
            if bk * BLOCKS + b < blocks:  # block row t / 2, word column 4 (t % 2)
                cute.autovec_copy(cute.local_tile(mW, (1, SLICES), (bn * BLOCK_N + t // 2, 2 * (bk * BLOCKS + b) + t % 2)),
                                  cute.local_tile(words, (1, SLICES), (b, 0)))
        for b in cutlass.range_constexpr(BLOCKS):
            block = bk * BLOCKS + b
            if block < blocks:
                self.convert_block(words, b, s16, mZ, stage, bn, block, g, c)
            cute.arch.sync_threads()  # the block is in shared memory
            if block < blocks:
                # 64 rows x 128 bytes: 8 threads a row, 16 bytes each; a warp stores 4 whole rows
                for r in cutlass.range_constexpr(BLOCK_N * 8 // THREADS):
                    row, chunk = r * (THREADS // 8) + t // 8, t % 8
                    v = cute.make_rmem_tensor((1, 4), cutlass.Int32)
                    cute.autovec_copy(cute.local_tile(stage, (1, 4), (row, chunk)), v)
                    cute.autovec_copy(v, cute.local_tile(out, (1, 4), (bn * BLOCK_N + row, block * 8 + chunk)))
            cute.arch.sync_threads()  # read before the next block overwrites it

    @cute.jit
    def convert_block(self, words, b, s16, mZ, stage, bn, block, g, c):
        """This thread's 4 words ``words[b, :]`` of reorder block (bn, block) -> 16 pairs in ``stage``."""
        rows = (bn * BLOCK_N + g, bn * BLOCK_N + g + 8)
        one_group = self.group_size % BLOCK_K == 0  # the whole block in one group: its scales read once
        for s in cutlass.range_constexpr(SLICES):
            col = block * BLOCK_K + s * SLICE_K  # the slice's first column of W
            if cutlass.const_expr(s == 0 or not one_group):
                grp = col // self.group_size  # a slice of 16 columns never straddles a group
                ss = tuple(int4_convert.both_halves(s16[grp, r]) for r in rows)
                zz = int4_convert.symmetric_zero(self.dtype)  # 136.0 twice (fp16: 1032.0)
                if cutlass.const_expr(self.zero_point):
                    zz = tuple(int4_convert.zero_word(mZ[grp, r], self.dtype) for r in rows)
            regs = cute.make_rmem_tensor((4,), cutlass.Int32)  # the fused kernel's conversion, one word
            int4_convert.convert_word(words[b, s], zz, ss, regs, 0, self.dtype)
            for j in cutlass.range_constexpr(4):  # register j: row g + 8 (j % 2), columns + 8 (j // 2)
                stage[g + 8 * (j % 2), (s * SLICE_K + c + 8 * (j // 2)) // 2] = regs[j]


# -- host side: the weights' checks (the mixed-input GEMM's too), then the entry's verbs --------
QUANTIZE = "quantize the weight with cutecourse.quant.quantize_int4(w, group_size)"


def check_packed(packed) -> tuple[int, int]:
    """(N, K) of W, from int4 weights packed as ``quantize_int4`` packs them (int32 words of 8
    nibbles, N and K multiples of 64), or a CourseError saying what to change."""
    import torch

    if not isinstance(packed, torch.Tensor) or packed.dim() != 2:
        raise ShapeError(f"packed is {getattr(packed, 'shape', type(packed).__name__)}; int4 weights are a "
                         "2-D torch.Tensor (N, K/8)", QUANTIZE)
    if packed.is_floating_point():
        raise DTypeError(f"packed is {dtype_name(packed.dtype)}: unquantized weights, not int4", QUANTIZE)
    if packed.dtype != torch.int32:
        raise DTypeError(f"packed is {dtype_name(packed.dtype)} {tuple(packed.shape)}; the kernel takes int32 words of "
                         "8 nibbles each, in the reordered layout quantize_int4 writes",
                         f"{QUANTIZE} (torch's _convert_weight_to_int4pack layout is a different one)")
    return packed.shape[0], packed.shape[1] * VALUES


def check_scales(scales, zeros, n: int, k: int) -> int:
    """The group size of ``scales`` (K / group, N) and ``zeros`` (None, or uint8 shaped like the
    scales) for W (``n``, ``k``), or a CourseError saying what to change."""
    import torch

    if n % BLOCK_N or k % BLOCK_K:
        raise ShapeError(f"W is ({n}, {k}); the reordered layout needs N and K multiples of 64",
                         "pad W with zeros to multiples of 64 before quantize_int4")
    if not isinstance(scales, torch.Tensor) or scales.dim() != 2:
        raise ShapeError(f"scales are {getattr(scales, 'shape', type(scales).__name__)}; they are a 2-D "
                         "torch.Tensor (K / group, N)", "pass the scales quantize_int4 returned")
    if scales.dtype not in (torch.bfloat16, torch.float16):
        raise DTypeError(f"scales are {dtype_name(scales.dtype)}; the kernel takes bfloat16 or float16 scales, x's dtype",
                         "pass the scales quantize_int4(w, group_size, dtype=torch.bfloat16 or float16) returned")
    if scales.shape[1] != n:
        fix = ("scales look transposed: pass scales.T.contiguous()" if scales.shape[0] == n
               else "pass the scales quantize_int4 returned with these weights")
        raise ShapeError(f"scales are {tuple(scales.shape)}; for W ({n}, {k}) they must be (K / group, N) = "
                         f"(?, {n})", fix)
    groups = scales.shape[0]
    if groups < 1 or k % groups:
        raise ShapeError(f"scales have {groups} rows, which does not divide K = {k} into whole groups",
                         "pass scales of shape (K / group_size, N), as quantize_int4 returns")
    check_group(k // groups, k)
    if zeros is not None and (not isinstance(zeros, torch.Tensor) or zeros.dtype != torch.uint8
                              or tuple(zeros.shape) != tuple(scales.shape)):
        raise DTypeError(f"zeros are {dtype_name(getattr(zeros, 'dtype', type(zeros).__name__))} "
                         f"{tuple(getattr(zeros, 'shape', ()))}; the kernel takes uint8 zero "
                         f"points shaped like the scales {tuple(scales.shape)}",
                         "pass the zeros quantize_int4(..., zero_point=True) returned")
    return k // groups


def validate(packed, scales, zeros=None) -> tuple[int, int, int]:
    """(N, K, group_size) of int4 weights this kernel converts, or a CourseError saying what to change."""
    n, k = check_packed(packed)
    group = check_scales(scales, zeros, n, k)
    check_tensors((("packed", packed), ("scales", scales), ("zeros", zeros)))
    return n, k, group


def launcher(packed, scales, zeros=None, out=None):
    """A ``gemm_launch.Launch`` writing W' into ``out`` (or a new (N, K) of the scales' dtype,
    ``fn.w``), for operands :func:`validate` accepts (it checks them)."""
    import torch

    n, k, group = validate(packed, scales, zeros)
    w = out if out is not None else torch.empty(n, k, dtype=scales.dtype, device=packed.device)
    kernel = ENTRY.kernel(group_size=group, zero_point=zeros is not None, dtype=dtype_name(scales.dtype))
    return ENTRY.launch(kernel, dict(packed=packed, scales=scales, w=w.view(torch.int32), zeros=zeros), w=w)


def dequantize(packed, scales, zeros=None):
    """W' (N, K) in the scales' dtype, on the GPU: ``quant.dequantize`` of these weights, bit for bit."""
    fn = launcher(packed, scales, zeros)
    fn()
    return fn.w


#: The kernel's entry in the one host layer, with every entry's verbs: compile_target, validate,
#: launcher, gemm and launch (``operands.py``). This kernel multiplies nothing: its ``gemm`` verb
#: returns the dequantized weights W' (it is ``dequantize``), the output its ``launcher`` writes.
ENTRY = DescribedEntry(Int4Dequantize, validate=validate, launcher=launcher, gemm=dequantize)
compile_target = ENTRY.compile_target
