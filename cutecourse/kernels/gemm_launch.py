"""From torch tensors to a launched GEMM kernel: the one host layer of the dense GEMMs.

Every course GEMM takes the same operands, ``C = A @ B.T`` with A (M, K) and B (N, K) K-major
(row-major in torch terms), so one host layer serves them all:

* :func:`check_operands` refuses what the kernels cannot take (wrong dtype or dimensions,
  mismatched K, not K-major, rows TMA cannot address, tensors on different devices), saying why
  and what to do, on any machine: the checks run before anything touches a GPU;
* :class:`Entry` turns a kernel class into its torch-facing functions: ``compile_target`` (fake,
  symbolic-size operands for ``cutecourse.inspect``, no GPU), ``launcher`` (checked once,
  compiled once, a zero-overhead :class:`Launch`) and ``gemm`` (allocate C, launch once). A
  kernel class provides ``plan(in_dtype, out_dtype)`` (its smem plan: clear errors before any
  tracing), ``IN_DTYPES`` and ``scratch()`` (the tensors it needs besides A, B, C);
* :func:`compile_once` compiles a kernel once per configuration (its class and constructor
  arguments, ``configured.py``; M, N and K are run-time values, so a new shape reuses it). The
  grouped GEMMs use it too.

``kernels/registry.py`` lists the dense kernels' entries by name.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import AlignmentError, CourseError, DeviceError, DTypeError, LayoutError, ShapeError
from ..models.gemm_plan import BYTES, FP8_DTYPES, IN_DTYPES, check_dtype_names

_COMPILED: dict = {}


def _name(dtype) -> str:
    return str(dtype).replace("torch.", "")


@dataclass(frozen=True)
class Scratch:
    """A tensor a kernel needs besides A, B and C, passed after C (e.g. the dynamic scheduler's
    ticket counters): ``size`` elements of ``dtype`` (a torch dtype name), ``align`` bytes;
    ``zero``: it must be zero before the first launch (and the kernel leaves it so)."""

    name: str
    dtype: str
    size: int
    align: int
    zero: bool = True


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
    """``cute.compile(kernel, *args)``, once per ``kernel.key()`` (its class and constructor
    arguments) and ``key``: what else the compiled code depends on (e.g. the dtypes)."""
    import cutlass.cute as cute

    full = (kernel.key(), *key)
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


def fake_scratch(kernel) -> tuple:
    """Fake tensors for ``kernel.scratch()`` (compiling without a GPU)."""
    import cutlass
    from cutlass.cute.runtime import make_fake_tensor

    types = {"int32": cutlass.Int32, "float32": cutlass.Float32}
    return tuple(make_fake_tensor(types[s.dtype], (s.size,), (1,), assumed_align=s.align)
                 for s in kernel.scratch())


class Launch:
    """``fn()`` launches a compiled kernel on fixed operands, with no checks and no allocation;
    the scratch tensors it owns are attributes (``fn.counters``), so two launchers may run on
    different streams at once."""

    def __init__(self, compiled, args, keep=(), **scratch):
        self.compiled, self.args, self.keep_alive = compiled, args, list(keep)
        self.__dict__.update(scratch)

    def __call__(self):
        self.compiled(*self.args)


def launcher(kernel, a, b, c, extra=(), tail=()):
    """Compile ``kernel`` for these operands once (:func:`compile_once`) and return a
    :class:`Launch` that runs ``c = a @ b.T`` on the current stream with no further checks.

    ``extra``: (torch tensor, alignment) pairs passed after C (the scratch tensors);
    ``tail``: tensors passed after the stream (the epilogue op's operands).
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
    tail = [t if isinstance(t, tuple) else (t, 4) for t in tail]
    after = [from_dlpack(t, assumed_align=align) for t, align in tail]
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    compiled = compile_once(kernel, (*args, stream, *after), key=(a.dtype, c.dtype))
    return Launch(compiled, (*args, stream, *after), keep=[t for t, _ in (*extra, *tail)])


def counted_launcher(kernel, a, b, c):
    """:func:`launcher` with ``kernel.scratch()`` allocated (zeroed where it must be)."""
    return Entry.launch_kernel(kernel, a, b, c)


def fake_persistent_arguments(in_dtype: str, out_dtype: str) -> tuple:
    """A persistent kernel's arguments for compiling without a GPU: fake A, B, C, the dynamic
    scheduler's counters and a stream."""
    import cuda.bindings.driver as cuda
    import cutlass
    from cutlass.cute.runtime import make_fake_tensor

    counters = make_fake_tensor(cutlass.Int32, (2,), (1,), assumed_align=8)
    return (*fake_operands(in_dtype, out_dtype), counters, cuda.CUstream(0))


#: The launchers' names for constructor arguments (JSON-able, as notebooks pass them).
ALIASES = {"tile": "tile_mn", "cluster": "cluster_mn"}
_TUPLES = ("tile_mn", "cluster_mn", "epi_tile")


class Entry:
    """The torch-facing functions of one kernel class (``build``: the class, or a function that
    takes the same keyword arguments and returns a kernel). Keyword arguments of every function:
    the constructor's, with ``tile`` / ``cluster`` for ``tile_mn`` / ``cluster_mn`` and a
    scheduler by name (``tile_scheduler.SCHEDULERS``); ``defaults``: this entry's own defaults.
    ``single``: the class a 1x1 cluster builds instead, where it takes every other argument given
    (an argument given as None counts as not given)."""

    def __init__(self, build, *, single=None, **defaults):
        import inspect

        self.build, self.defaults, self.single = build, defaults, single
        params = inspect.signature(build).parameters
        self.takes_sms = "sms" in params
        self.aliases = {k: v for k, v in ALIASES.items() if k not in params}  # a function may take tile=
        self.single_takes = set(inspect.signature(single).parameters) if single else set()

    def _class_for(self, kw: dict):
        """(class, its keyword arguments): ``single`` for a 1x1 cluster it can build, else ``build``."""
        rest = {k: v for k, v in kw.items() if k != "cluster_mn" and v is not None}
        if self.single is not None and kw.get("cluster_mn") == (1, 1) and set(rest) <= self.single_takes:
            return self.single, rest
        return self.build, kw

    def kernel(self, **params):
        """The kernel these (launcher-style) keyword arguments describe."""
        from .tile_scheduler import SCHEDULERS

        kw = dict(self.defaults)
        kw.update({self.aliases.get(k, k): v for k, v in params.items()})
        for k in (*_TUPLES, *ALIASES):
            if isinstance(kw.get(k), list):
                kw[k] = tuple(kw[k])
        if kw.get("sms", 0) is None:  # None: the GPU's SM count (the launcher fills it in)
            del kw["sms"]
        if isinstance(kw.get("scheduler"), str):
            if kw["scheduler"] not in SCHEDULERS:
                raise ValueError(f"scheduler must be one of {list(SCHEDULERS)}, not {kw['scheduler']!r}")
            kw["scheduler"] = SCHEDULERS[kw["scheduler"]]
        build, kw = self._class_for(kw)
        try:
            return build(**kw)
        except TypeError as exc:
            raise CourseError(f"{getattr(self.build, '__name__', 'the kernel')}: {exc}",
                              "pass only the keyword arguments the kernel's constructor takes") from None

    def compile_target(self, in_dtype: str = "float16", out_dtype: str = "float16", **params):
        """(kernel, fake arguments) for ``cutecourse.inspect.compile_report``: symbolic M, N, K.
        ``epilogue_op`` may be a class name of ``epilogue_op.py`` (JSON-able), e.g. "AddBias"."""
        import cuda.bindings.driver as cuda

        if isinstance(params.get("epilogue_op"), str):
            params["epilogue_op"] = named_epilogue_op(params["epilogue_op"])
        kernel = self.kernel(**params)
        kernel.plan(in_dtype, out_dtype)  # clear errors before tracing
        return kernel, (*fake_operands(in_dtype, out_dtype), *fake_scratch(kernel), cuda.CUstream(0),
                        *fake_epilogue_operands(kernel.epilogue_op))

    def validate(self, a, b, out_dtype=None, c=None, **params):
        """Check torch operands on any machine; return the kernel's smem plan."""
        kernel = self.kernel(**params)
        return kernel.plan(*check_operands(a, b, out_dtype, c, in_dtypes=_torch_dtypes(kernel)))

    def launcher(self, a, b, c, epilogue_args=(), **params):
        """Check, compile once, and return a :class:`Launch`: ``fn()`` writes A @ B.T (through
        the epilogue op, with ``epilogue_args``) into ``c``. ``sms`` defaults to the GPU's."""
        return self._launcher(a, b, c, epilogue_args, params, checked=False)

    def gemm(self, a, b, out_dtype=None, epilogue_args=(), **params):
        """C = A @ B.T on an H100: A (M, K), B (N, K), both K-major; returns C (M, N) of
        ``out_dtype`` (default: A's). Compiled once per configuration."""
        import torch

        kernel = self.kernel(**params)  # the kernel's own checks first
        check_operands(a, b, out_dtype, in_dtypes=_torch_dtypes(kernel))
        c = torch.empty((a.shape[0], b.shape[0]), dtype=out_dtype or a.dtype, device=a.device)
        self._launcher(a, b, c, epilogue_args, params, checked=True)()
        return c

    def _launcher(self, a, b, c, epilogue_args, params, checked: bool):
        from ..modes import require_gpu

        kernel = self.kernel(**params)
        names = (_name(a.dtype), _name(c.dtype)) if checked else \
            check_operands(a, b, c.dtype, c, in_dtypes=_torch_dtypes(kernel))
        kernel.plan(*names)
        _check_epilogue_args(kernel, a, epilogue_args)
        if self.takes_sms and params.get("sms") is None:
            kernel = self.kernel(**{**params, "sms": require_gpu("sm_90a").sm_count})
        return self.launch_kernel(kernel, a, b, c, epilogue_args)

    @staticmethod
    def launch_kernel(kernel, a, b, c, epilogue_args=()):
        """:func:`launcher` with the kernel's scratch tensors allocated."""
        import torch

        scratch = {s.name: (torch.zeros if s.zero else torch.empty)(s.size, dtype=getattr(torch, s.dtype),
                                                                    device=a.device)
                   for s in kernel.scratch()}
        fn = launcher(kernel, a, b, c, extra=[(scratch[s.name], s.align) for s in kernel.scratch()],
                      tail=tuple(epilogue_args))
        fn.__dict__.update(scratch)
        return fn


def named_epilogue_op(name: str):
    """An op of ``epilogue_op.py`` by class name (compile targets take JSON-able arguments)."""
    from . import epilogue_op

    op = getattr(epilogue_op, name, None)
    if not (isinstance(op, type) and issubclass(op, epilogue_op.EpilogueOp)):
        raise CourseError(f"epilogue_op={name!r} is not an op of cutecourse/kernels/epilogue_op.py",
                          "pass an EpilogueOp object, or the name of one defined there, e.g. 'Relu'")
    return op()


def fake_epilogue_operands(op) -> tuple:
    """Fake float32 vectors (symbolic length) for the tensors an epilogue op reads."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_tensor

    names = op.operands if op is not None else ()
    return tuple(make_fake_tensor(cutlass.Float32, (cute.sym_int(symbol=n),), (1,), assumed_align=4) for n in names)


def _torch_dtypes(kernel):
    import torch

    return tuple(getattr(torch, name) for name in kernel.IN_DTYPES)


def _check_epilogue_args(kernel, a, epilogue_args):
    """The epilogue op's operands: as many as it names, torch tensors on A's device."""
    import torch

    op = getattr(kernel, "epilogue_op", None)
    names = op.operands if op is not None else ()
    if len(epilogue_args) != len(names):
        raise ShapeError(f"the epilogue op {op!r} reads {len(names)} tensor(s) {names}, "
                         f"but {len(epilogue_args)} were given",
                         "pass epilogue_args=(...) with one torch tensor per name, in that order")
    for name, t in zip(names, epilogue_args):
        if not isinstance(t, torch.Tensor) or t.device != a.device:
            raise DeviceError(f"epilogue operand {name!r} is not a torch tensor on {a.device}",
                              f"pass it as a tensor on the GPU, e.g. {name}.to(a.device)")
