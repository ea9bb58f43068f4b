"""From torch tensors to a launched GEMM kernel: checks, fake operands, compile cache, launch.

Every course GEMM takes the same operands, ``C = A @ B.T`` with A (M, K) and B (N, K) K-major
(row-major in torch terms), so they share this module:

* :func:`check_operands` refuses what the kernels cannot take (wrong dtype or dimensions,
  mismatched K, not K-major, rows TMA cannot address, tensors on different devices), saying why
  and what to do, on any machine: the checks run before anything touches a GPU;
* :func:`fake_operands` makes symbolic-size stand-ins for compiling without a GPU;
* :func:`launcher` compiles a kernel once per configuration (M, N and K are run-time values, so a
  new shape reuses it: :func:`compile_once`, which the grouped GEMMs use too) and returns a
  zero-overhead ``fn()`` that launches it;
* :func:`run` allocates C and launches once: what ``gemm(a, b)`` does.
"""

from __future__ import annotations

from ..errors import AlignmentError, DeviceError, DTypeError, LayoutError, ShapeError
from ..models.gemm_plan import BYTES, FP8_DTYPES, IN_DTYPES, check_dtype_names

_COMPILED: dict = {}


def _name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def check_operands(a, b, out_dtype=None, c=None, in_dtypes=None) -> tuple[str, str]:
    """Check torch operands (and ``c`` if given); return (input, output) dtype names.
    ``in_dtypes``: the input dtypes the kernel takes (default float16 and bfloat16)."""
    import torch

    in_dtypes = in_dtypes or (torch.float16, torch.bfloat16)
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor):
            raise DTypeError(f"{name} is a {type(t).__name__}, not a torch.Tensor", "pass torch tensors")
        if t.dtype not in in_dtypes:
            names = " or ".join(_name(d) for d in in_dtypes)
            raise DTypeError(f"{name} is {_name(t.dtype)}; this Hopper GEMM takes {names} inputs",
                             f"convert it, e.g. {name}.to(torch.{_name(in_dtypes[0])})")
        if t.dim() != 2:
            raise ShapeError(f"{name} has {t.dim()} dimensions; the GEMM takes 2-D A (M, K) and B (N, K)",
                             "reshape to 2-D (batch by calling once per matrix)")
    if a.dtype != b.dtype:
        raise DTypeError(f"a is {a.dtype} but b is {b.dtype}", "give A and B the same dtype")
    out = (c.dtype if c is not None else a.dtype) if out_dtype is None else out_dtype
    if not isinstance(out, torch.dtype) or _name(out) not in BYTES:
        raise DTypeError(f"out_dtype {out} is not supported", "use torch.float16, torch.bfloat16 or torch.float32")
    if a.shape[1] != b.shape[1]:
        raise ShapeError(f"A is {tuple(a.shape)} and B is {tuple(b.shape)}: their K (dim 1) differ",
                         "B is (N, K), like a torch Linear weight: C = A @ B.T")
    if min(a.shape[0], b.shape[0], a.shape[1]) < 1:
        raise ShapeError(f"empty operand: A {tuple(a.shape)}, B {tuple(b.shape)}", "M, N and K must be >= 1")
    el = a.element_size()
    for name, t in (("a", a), ("b", b)):
        if t.stride(1) != 1:
            raise LayoutError(
                f"{name} is not K-major: its strides are {tuple(t.stride())}, and the kernel's TMA reads "
                "rows of K contiguous elements (stride 1 along dim 1)",
                f"pass {name}.contiguous(); if you hold B as (K, N), pass b.T.contiguous()")
        if t.data_ptr() % 16:
            raise AlignmentError(f"{name} starts at an address that is not 16-byte aligned (TMA needs 16 B)",
                                 f"pass {name}.clone() (fresh allocations are 256-byte aligned)")
        if (t.stride(0) * el) % 16:
            raise AlignmentError(
                f"{name}'s rows are {t.stride(0) * el} bytes apart; TMA needs a multiple of 16 bytes "
                f"(K = {t.shape[1]} is not a multiple of {16 // el})",
                f"pad K to a multiple of {16 // el} with zeros (torch.nn.functional.pad)")
    out_bytes = BYTES[_name(out)]
    if (b.shape[0] * out_bytes) % 16:
        raise AlignmentError(f"C would have rows of {b.shape[0]} elements, not a multiple of 16 bytes (TMA store)",
                             f"pad N to a multiple of {16 // out_bytes}")
    if a.device != b.device:
        raise DeviceError(f"a is on {a.device}, b on {b.device}", "put both on the same GPU")
    if c is not None:
        if tuple(c.shape) != (a.shape[0], b.shape[0]) or not c.is_contiguous():
            raise ShapeError(f"c is {tuple(c.shape)} with strides {tuple(c.stride())}, expected a "
                             f"contiguous {(a.shape[0], b.shape[0])}", "allocate c as torch.empty(M, N)")
        if c.device != a.device:
            raise DeviceError(f"c is on {c.device}, a and b on {a.device}", "put A, B and C on the same GPU")
    return _name(a.dtype), _name(out)


def compile_once(kernel, args, key=()):
    """``cute.compile(kernel, *args)``, once per (kernel class, ``kernel.config``, ``key``): the
    variant's name. ``key``: what else the compiled code depends on (e.g. the dtypes)."""
    import cutlass.cute as cute

    full = (type(kernel).__qualname__, kernel.config, *key)
    if full not in _COMPILED:
        _COMPILED[full] = cute.compile(kernel, *args)
    return _COMPILED[full]


def compiled_variants() -> int:
    """How many kernel variants this process has compiled (one per configuration and dtypes)."""
    return len(_COMPILED)


def fake_operands(in_dtype="float16", out_dtype="float16"):
    """Fake K-major A (M, K), B (N, K) and N-major C (M, N) with symbolic sizes and 16-B aligned rows."""
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_tensor

    from .sm90 import DTYPES

    check_dtype_names(in_dtype, out_dtype, IN_DTYPES + FP8_DTYPES)
    div_in, div_out = 16 // BYTES[in_dtype], 16 // BYTES[out_dtype]
    m, n, k = cute.sym_int(symbol="M"), cute.sym_int(symbol="N"), cute.sym_int(symbol="K")
    lda = cute.sym_int64(divisibility=div_in, symbol="lda")
    ldb = cute.sym_int64(divisibility=div_in, symbol="ldb")
    ldc = cute.sym_int64(divisibility=div_out, symbol="ldc")
    ti, to = DTYPES[in_dtype], DTYPES[out_dtype]
    a = make_fake_tensor(ti, (m, k), (lda, 1), assumed_align=16)
    b = make_fake_tensor(ti, (n, k), (ldb, 1), assumed_align=16)
    c = make_fake_tensor(to, (m, n), (ldc, 1), assumed_align=16)
    return a, b, c


def launcher(kernel, a, b, c, extra=(), tail=()):
    """Compile ``kernel`` for these operands once (cached by its ``config``) and return ``fn()``
    that launches ``c = a @ b.T`` on the current stream with no further checks.

    ``kernel``: a course GEMM object (its ``config`` tuple names the compiled variant).
    ``extra``: (torch tensor, alignment) pairs passed after C (e.g. a scheduler's counters);
    ``tail``: pairs passed after the stream (optional arguments, e.g. a stream-K workspace). ``fn``
    keeps them alive.
    """
    import cuda.bindings.driver as cuda
    import torch
    from cutlass.cute.runtime import from_dlpack

    from ..modes import require_gpu

    require_gpu("sm_90a")
    if a.device.type != "cuda":
        raise DeviceError(f"the operands are on {a.device}", "move them to the GPU with .cuda()")
    args = [from_dlpack(t, assumed_align=16).mark_layout_dynamic(leading_dim=1) for t in (a, b, c)]
    args += [from_dlpack(t, assumed_align=align) for t, align in extra]
    after = [from_dlpack(t, assumed_align=align) for t, align in tail]
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    compiled = compile_once(kernel, (*args, stream, *after), key=(a.dtype, c.dtype))

    def fn():
        compiled(*args, stream, *after)

    fn.keep_alive = [t for t, _ in (*extra, *tail)]
    return fn


def fake_persistent_arguments(in_dtype: str, out_dtype: str) -> tuple:
    """A persistent kernel's arguments for compiling without a GPU: fake A, B, C, the dynamic
    scheduler's counters and a stream."""
    import cuda.bindings.driver as cuda
    import cutlass
    from cutlass.cute.runtime import make_fake_tensor

    counters = make_fake_tensor(cutlass.Int32, (2,), (1,), assumed_align=8)
    return (*fake_operands(in_dtype, out_dtype), counters, cuda.CUstream(0))


def counted_launcher(kernel, a, b, c):
    """:func:`launcher` for a persistent kernel, which also takes the dynamic scheduler's ticket
    counters: zero now, and zero again after every launch (the last CTA resets them). One pair
    per launcher: two launches in flight at once on different streams must not share it."""
    import torch

    counters = torch.zeros(2, dtype=torch.int32, device=a.device)
    fn = launcher(kernel, a, b, c, extra=[(counters, 8)])
    fn.counters = counters
    return fn


def run(make_launcher, a, b, out_dtype=None, **config):
    """Allocate C (M, N) of ``out_dtype`` (default: A's), launch once, return C."""
    import torch

    check_operands(a, b, out_dtype)  # before touching the GPU
    c = torch.empty((a.shape[0], b.shape[0]), dtype=out_dtype or a.dtype, device=a.device)
    make_launcher(a, b, c, **config)()
    return c
