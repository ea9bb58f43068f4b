"""The small kernels notebook 08's exercises compile the learner's code into, and their GPU runs.

* :class:`RegisterKernel` (exercise 1): each thread takes one packed word and its scale and
  writes the 4 registers the learner's ``fn(word, j, ss)`` makes, as the mixed-input kernel's
  ``convert`` makes them from a word of its weights;
* :class:`UnpackKernel` (exercise 2): one warpgroup unpacks a 64 x 64 block of packed weights:
  thread t finds value v of slice s at nibble ``layout((t, s, v))`` of the block (the learner's
  layout) and writes it where the wgmma fragment puts it (``reorder.BLOCK_LAYOUT``).

Compile arguments (``*_args``) are fake tensors, so both compile for sm_90a on any machine; the
runners (``kernel_child``'s ``runner``, in a child with a timeout) run them on a Hopper GPU on the
same inputs as the CPU models and compare every bit.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute

from ..quant import reorder

THREADS = 128
REGISTERS = 4


class RegisterKernel:
    """out[i, j] = fn(words[i], j, scales[i]) for j = 0..3: the learner's conversion, one word a thread."""

    def __init__(self, fn):
        self.fn = fn

    @cute.jit
    def __call__(self, words: cute.Tensor, scales: cute.Tensor, out: cute.Tensor, stream):
        n = cute.size(words)
        self.kernel(words, scales, out).launch(grid=[cute.ceil_div(n, THREADS), 1, 1], block=[THREADS, 1, 1],
                                               stream=stream)

    @cute.kernel
    def kernel(self, words: cute.Tensor, scales: cute.Tensor, out: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        i = bidx * THREADS + tidx
        if i < cute.size(words):
            word, ss = words[i], scales[i]
            for j in cutlass.range_constexpr(REGISTERS):
                out[i, j] = self.fn(word, j, ss)


@cute.jit
def passthrough(word: cutlass.Int32, j: cutlass.Constexpr[int], ss: cutlass.Int32) -> cutlass.Int32:
    """No conversion: register j is the word itself. :class:`RegisterKernel` over it is the harness
    alone, whose instructions (indexing, bounds, stores) the checker subtracts from the learner's."""
    return word


def harness_target():
    """(``RegisterKernel(passthrough)``, its fake arguments), for ``inspect.compile_report``."""
    kernel = RegisterKernel(passthrough)
    return kernel, register_args(kernel)


class UnpackKernel:
    """out[m, k] of a 64 x 64 block = the nibble the learner's layout says holds (m, k)."""

    def __init__(self, fn):
        self.fn = fn

    @cute.jit
    def __call__(self, packed: cute.Tensor, out: cute.Tensor, stream):
        self.kernel(packed, out).launch(grid=[1, 1, 1], block=[THREADS, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, packed: cute.Tensor, out: cute.Tensor):
        t, _, _ = cute.arch.thread_idx()
        nibbles = self.fn()  # (thread, slice, value) -> nibble of the block, yours
        block = cute.make_layout(((4, 8, 4), reorder.SLICES, (2, 2, 2)),
                                 stride=((128, 1, 16), 1024, (64, 8, 512)))  # reorder.BLOCK_LAYOUT
        flat = cute.make_tensor(packed.iterator, cute.make_layout(reorder.BLOCK_N * reorder.BLOCK_K // 8))
        for s in cutlass.range_constexpr(reorder.SLICES):
            for v in cutlass.range_constexpr(reorder.VALUES):
                nib = nibbles((t, s, v))
                q = (cutlass.Uint32(flat[nib // 8]) >> (4 * (nib % 8))) & 0xF
                off = block((t, s, v))
                out[off % reorder.BLOCK_N, off // reorder.BLOCK_N] = cutlass.Int32(q)


def _fake(dtype, shape):
    from cutlass.cute.runtime import make_fake_compact_tensor

    return make_fake_compact_tensor(dtype, shape)


def register_args(kernel):
    """Fake words (4096,), scales (4096,) and registers (4096, 4), int32; a stream."""
    import cuda.bindings.driver as cuda

    n = 4096
    return (_fake(cutlass.Int32, (n,)), _fake(cutlass.Int32, (n,)),
            _fake(cutlass.Int32, (n, REGISTERS)), cuda.CUstream(0))


def unpack_args(kernel):
    """A fake packed block (64, 8) and its values (64, 64), int32; a stream."""
    import cuda.bindings.driver as cuda

    return (_fake(cutlass.Int32, (reorder.BLOCK_N, 8)),
            _fake(cutlass.Int32, (reorder.BLOCK_N, reorder.BLOCK_K)), cuda.CUstream(0))


def _run(kernel, *tensors):
    """Compile ``kernel`` for these torch tensors, launch it on torch's stream, wait for it."""
    import cuda.bindings.driver as cuda
    import cutlass.cute as cute
    import torch
    from cutlass.cute.runtime import from_dlpack

    args = [from_dlpack(t) for t in tensors] + [cuda.CUstream(torch.cuda.current_stream().cuda_stream)]
    cute.compile(kernel, *args)(*args)
    torch.cuda.synchronize()


def register_runner(kernel, baseline=None, **_) -> dict:
    """The learner's conversion on the GPU, every test word and scale of the CPU model."""
    import torch
    from . import nb08_cpu as cpu

    words = cpu.test_words()
    rows = [(cpu.s32(w), cpu.s32(s | s << 16)) for s in cpu.SCALES for w in words]
    w = torch.tensor([r[0] for r in rows], dtype=torch.int32, device="cuda")
    ss = torch.tensor([r[1] for r in rows], dtype=torch.int32, device="cuda")
    out = torch.zeros(len(rows), REGISTERS, dtype=torch.int32, device="cuda")
    _run(kernel, w, ss, out)
    got = out.cpu().tolist()
    for i, (s, word) in enumerate((s, word) for s in cpu.SCALES for word in words):
        for j in range(REGISTERS):
            if got[i][j] != cpu.expected(word, j, s):
                return {"ok": False, "message": f"on the GPU, word {word:#010x} register {j} is "
                        f"{got[i][j] & cpu.MASK:#010x}, not {cpu.expected(word, j, s) & cpu.MASK:#010x} "
                        "(the CPU model agreed with you: tell the course's maintainers)"}
    return {"ok": True, "message": f"{len(rows) * REGISTERS} registers bit for bit on "
            f"{torch.cuda.get_device_name()}"}


def unpack_runner(kernel, baseline=None, **_) -> dict:
    """The learner's layout unpacking a random packed block on the GPU, against ``reorder.unpack``."""
    import torch

    q = torch.randint(0, 16, (reorder.BLOCK_N, reorder.BLOCK_K), generator=torch.Generator().manual_seed(8))
    packed = reorder.pack(q).cuda()
    out = torch.full((reorder.BLOCK_N, reorder.BLOCK_K), -1, dtype=torch.int32, device="cuda")
    _run(kernel, packed, out)
    bad = int((out.cpu() != q.to(torch.int32)).sum())
    if bad:
        return {"ok": False, "message": f"on the GPU {bad} of 4096 values of the block came back wrong "
                "(the CPU model agreed with you: tell the course's maintainers)"}
    return {"ok": True, "message": f"a packed block unpacked through your layout, all 4096 values, on "
            f"{torch.cuda.get_device_name()}"}


def split_runner(kernel=None, baseline=None, splits=(1,), m: int = 4, n: int = 28672, k: int = 8192,
                 group: int = 128) -> dict:
    """Exercise 3 on the GPU: ``mixed_mm`` with each number of ``splits``, checked against x @ W'.T,
    then timed in one interleaved comparison on cold weights (copies beyond the L2)."""
    import torch

    from .. import bench, gpu_queue
    from ..kernels import mixed_input as mi
    from ..quant import dequantize, quantize_int4

    torch.manual_seed(0)
    w = torch.randn(n, k, device="cuda") * 0.02
    packed, scales, _ = quantize_int4(w, group)
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    ref = x.float() @ dequantize(packed, scales).float().T
    copies = bench.cold_l2_sets(lambda: (packed.clone(), scales.clone()), packed.numel() * 4)
    cases = []
    for s in splits:
        runs = [mi.launcher(x, p, sc, splits=s) for p, sc in copies]
        bench.checked_case(f"splits={s}", runs[0], runs[0].y, ref, 1e-2)
        cases.append(bench.Case(f"splits={s}", lambda fn: fn(), [(fn,) for fn in runs]))
    try:
        with gpu_queue.turn("the split-K lab"):
            res = bench.compare(f"int4 x bf16, W {n} x {k}, M = {m}", cases, bench.Work(flops=2 * m * n * k),
                                baseline=f"splits={splits[0]}", progress=False, rounds=2, repeats=3)
    except gpu_queue.QueueTimeout:
        return {"ok": True, "message": "all splits match x @ W'.T; not timed: the room's GPU queue stayed busy"}
    return {"ok": True, "message": "all splits match x @ W'.T; " + ", ".join(
        f"{r.name} {r.us:.1f} us ({r.ratio:.2f}x splits={splits[0]})" for r in res.rows)
        + f" on {torch.cuda.get_device_name()}"}
