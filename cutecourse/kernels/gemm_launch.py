"""From torch tensors to a launched GEMM kernel: the one host layer of the course's GEMMs.

The dense GEMMs take the same operands, ``C = A @ B.T`` with A (M, K) and B (N, K) K-major
(row-major in torch terms), so one host layer serves them all:

* :func:`check_operands` refuses what the kernels cannot take (wrong dtype or dimensions,
  mismatched K, not K-major, rows TMA cannot address, tensors on different devices), saying why
  and what to do, on any machine: the checks run before anything touches a GPU;
* :class:`Entry` turns a kernel class into its torch-facing functions, one verb per level:
  ``compile_target`` (fake, symbolic-size operands for ``cutecourse.inspect``, no GPU),
  ``validate`` (check torch operands, no GPU: the plan), ``gemm`` (check, allocate C, launch once: C), ``launcher`` (check and compile once: a
  zero-overhead :class:`Launch`) and, for a kernel object already built, ``launch`` (no
  checks: a :class:`Launch`). A kernel class provides ``plan(in_dtype, out_dtype)`` (its smem
  plan: clear errors before any tracing; the dense and grouped entries call it), ``IN_DTYPES`` and ``scratch()``
  (the tensors it needs besides A, B, C: :class:`Scratch`);
* :func:`compile_once` compiles a kernel once per configuration (its class and constructor
  arguments, ``configured.py``; M, N and K are run-time values, so a new shape reuses it).

Two subclasses of :class:`Entry` take other operands, with the same verbs:
``grouped_launch.GroupedEntry`` (a batch of groups) and ``operands.DescribedEntry`` (a kernel
that describes its own operands in ``operands()``: the mixed-input GEMM).
``kernels/registry.py`` lists the dense kernels' entries by name.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import AlignmentError, CourseError, DeviceError, DTypeError, LayoutError, ShapeError
from ..models.gemm_plan import BYTES, FP8_DTYPES, IN_DTYPES, check_dtype_names
from ..tensors import dtype_name

_COMPILED: dict = {}


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
            names = " or ".join(dtype_name(d) for d in in_dtypes)
            raise DTypeError(f"{name} is {dtype_name(t.dtype)}; this Hopper GEMM takes {names} inputs",
                             f"convert it, e.g. {name}.to(torch.{dtype_name(in_dtypes[0])})")
        if t.dim() != 2:
            raise ShapeError(f"{name} has {t.dim()} dimensions; the GEMM takes 2-D A (M, K) and B (N, K)",
                             "reshape to 2-D (batch by calling once per matrix)")
    if a.dtype != b.dtype:
        raise DTypeError(f"a is {a.dtype} but b is {b.dtype}", "give A and B the same dtype")
    out = (c.dtype if c is not None else a.dtype) if out_dtype is None else out_dtype
    if not isinstance(out, torch.dtype) or dtype_name(out) not in BYTES:
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
    out_bytes = BYTES[dtype_name(out)]
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
    return dtype_name(a.dtype), dtype_name(out)


def compile_once(kernel, args, key=()):
    """``cute.compile(kernel, *args)``, once per ``kernel.key()`` (its class and constructor
    arguments) and ``key``: what else the compiled code depends on (e.g. the dtypes)."""
    import cutlass.cute as cute

    full = (kernel.key(), *key)
    if full not in _COMPILED:
        _COMPILED[full] = cute.compile(kernel, *args)
    return _COMPILED[full]


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
    from cutlass.cute.runtime import make_fake_tensor

    from .sm90 import TENSOR_TYPES

    return tuple(make_fake_tensor(TENSOR_TYPES[s.dtype], (s.size,), (1,), assumed_align=s.align)
                 for s in kernel.scratch())


class Launch:
    """``fn()`` launches a compiled kernel on fixed operands, with no checks and no allocation;
    the tensors it owns are attributes (``fn.counters``; a grouped launch's ``fn.trace``,
    ``fn.ctas``, ``fn.metadata``), so two launchers may run on different streams at once."""

    def __init__(self, compiled, args, keep=(), **attrs):
        self.compiled, self.args, self.keep_alive = compiled, args, list(keep)
        self.__dict__.update(attrs)

    def __call__(self):
        self.compiled(*self.args)

    @classmethod
    def empty(cls, metadata=None):
        """Nothing to launch (every group empty): ``fn()`` does nothing, on no CTAs."""
        return cls(lambda: None, (), trace=None, ctas=0, metadata=metadata)


def _launch_compiled(kernel, *templates, extra=(), scalars=(), tail=(), arch: str = "sm_90a", keep=(),
                     **attrs):
    """The host layer's last step (an entry's ``launch`` calls it): compile ``kernel`` for these operands once (:func:`compile_once`) and return a
    :class:`Launch` running it on the current stream with no further checks.

    ``templates``: A, B, C (row-major, 16-byte aligned; a grouped kernel builds its tensor maps
    from them), then 1-D byte tensors (scale factors); ``extra``: (torch tensor, alignment) pairs
    after them (scratch tensors; a grouped kernel's metadata, 2-D and more: their sizes stay
    run-time values); ``scalars``: run-time numbers after those; ``tail``: (tensor, alignment)
    pairs after the stream (the epilogue op's operands). ``attrs``: attributes of the Launch.
    """
    import cuda.bindings.driver as cuda
    import torch
    from cutlass.cute.runtime import from_dlpack

    from ..modes import require_gpu

    require_gpu(arch)
    if templates[0].device.type != "cuda":
        raise DeviceError(f"the operands are on {templates[0].device}", "move them to the GPU with .cuda()")
    args = [from_dlpack(t, assumed_align=16).mark_layout_dynamic(leading_dim=1) if t.dim() == 2
            else from_dlpack(t.view(torch.uint8), assumed_align=16).mark_layout_dynamic() for t in templates]
    for t, align in extra:
        arg = from_dlpack(t, assumed_align=align)
        args.append(arg.mark_layout_dynamic(leading_dim=t.dim() - 1) if t.dim() > 1 else arg)
    after = [from_dlpack(t, assumed_align=align) for t, align in tail]
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    full = (*args, *scalars, stream, *after)
    compiled = compile_once(kernel, full, key=tuple(t.dtype for t in templates) + tuple(t.dtype for t, _ in tail))
    return Launch(compiled, full, keep=[templates, extra, tail, keep], **attrs)


#: The launchers' names for constructor arguments (JSON-able, as notebooks pass them).
ALIASES = {"tile": "tile_mn", "cluster": "cluster_mn"}
_TUPLES = ("tile_mn", "cluster_mn", "epi_tile")


class Entry:
    """The torch-facing functions of one kernel class, for ``arch``. ``build``: the class, or a
    function that takes keyword arguments and returns a kernel, its class picked from a table by
    one of them (``configured.pick``: ``variant=``, in the one-CTA and the FP8 grouped GEMMs; and at a 1x1
    cluster the cluster GEMM's plain one-CTA kernel, the one choice made by value). Keyword arguments of
    every function: the constructor's, with ``tile`` / ``cluster`` for ``tile_mn`` /
    ``cluster_mn`` (a scheduler by name: the constructor looks it up in its class's ``SCHEDULERS``,
    ``configured.named``) and an epilogue op by name (:func:`named_epilogue_op`); the defaults are the
    kernel class's (``configured.py``), an entry has none of its own.

    Which verb: C from torch tensors, ``gemm``; the same launch many times (a benchmark, a CUDA
    graph), ``launcher``; a kernel object you built yourself (an exercise's), ``launch``."""

    def __init__(self, build, arch: str = "sm_90a"):
        import inspect

        self.build, self.arch = build, arch
        params = inspect.signature(build).parameters
        self.takes_sms = "sms" in params
        self.aliases = {k: v for k, v in ALIASES.items() if k not in params}  # a function may take tile=

    def kernel(self, **params):
        """The kernel these (launcher-style) keyword arguments describe: the one place a kernel is
        built from them (an unknown keyword is a ``CourseError`` naming the kernel)."""
        kw = {self.aliases.get(k, k): v for k, v in params.items()}
        for k in (*_TUPLES, *ALIASES):
            if isinstance(kw.get(k), list):
                kw[k] = tuple(kw[k])
        if kw.get("sms", 0) is None:  # None: the GPU's SM count (the launcher fills it in)
            del kw["sms"]
        if "epilogue_op" in kw:
            kw["epilogue_op"] = named_epilogue_op(kw["epilogue_op"])
        try:
            return self.build(**kw)
        except TypeError as exc:
            if isinstance(exc, CourseError):  # DTypeError is a TypeError too: the kernel's own message
                raise
            raise CourseError(f"{getattr(self.build, '__name__', 'the kernel')}: {exc}",
                              "pass only the keyword arguments the kernel's constructor takes") from None

    def on_gpu(self, params) -> dict:
        """``params`` with ``sms`` this GPU's SM count unless given (needs the GPU)."""
        from ..modes import require_gpu

        if self.takes_sms and params.get("sms") is None:
            return {**params, "sms": require_gpu(self.arch).sm_count}
        return params

    def compile_target(self, in_dtype: str = "float16", out_dtype: str = "float16", **params):
        """(kernel, fake arguments) for ``cutecourse.inspect.compile_report``: symbolic sizes.
        ``epilogue_op`` may be a class name of ``epilogue_op.py`` (JSON-able), e.g. "AddBias"."""
        kernel = self.kernel(**params)
        kernel.plan(in_dtype, out_dtype)  # clear errors before tracing
        return kernel, self.fake_arguments(kernel, in_dtype, out_dtype)

    def fake_arguments(self, kernel, in_dtype: str = "float16", out_dtype: str = "float16", epilogue_args=None):
        """A dense kernel's arguments for compiling without a GPU: fake A, B, C, its scratch
        tensors, a stream, and ``epilogue_args`` (default: fakes of its epilogue op's operands)."""
        import cuda.bindings.driver as cuda

        tail = fake_epilogue_operands(getattr(kernel, "epilogue_op", None)) if epilogue_args is None else epilogue_args
        return (*fake_operands(in_dtype, out_dtype), *fake_scratch(kernel), cuda.CUstream(0), *tail)

    def validate(self, a, b, out_dtype=None, c=None, **params):
        """Check torch operands on any machine; return the kernel's smem plan."""
        kernel = self.kernel(**params)
        return kernel.plan(*check_operands(a, b, out_dtype, c, in_dtypes=dense_dtypes(kernel)))

    def launcher(self, a, b, c, epilogue_args=(), **params):
        """Check, compile once, and return a :class:`Launch`: ``fn()`` writes A @ B.T (through
        the epilogue op, with ``epilogue_args``) into ``c``. ``sms`` defaults to the GPU's."""
        return self._launcher(a, b, c, epilogue_args, params, checked=False)

    def gemm(self, a, b, out_dtype=None, epilogue_args=(), **params):
        """C = A @ B.T on an H100: A (M, K), B (N, K), both K-major; returns C (M, N) of
        ``out_dtype`` (default: A's). Compiled once per configuration."""
        import torch

        kernel = self.kernel(**params)  # the kernel's own checks first
        check_operands(a, b, out_dtype, in_dtypes=dense_dtypes(kernel))
        c = torch.empty((a.shape[0], b.shape[0]), dtype=out_dtype or a.dtype, device=a.device)
        self._launcher(a, b, c, epilogue_args, params, checked=True)()
        return c

    def _launcher(self, a, b, c, epilogue_args, params, checked: bool):
        kernel = self.kernel(**params)
        names = (dtype_name(a.dtype), dtype_name(c.dtype)) if checked else \
            check_operands(a, b, c.dtype, c, in_dtypes=dense_dtypes(kernel))
        kernel.plan(*names)
        check_epilogue_args(kernel.epilogue_op, epilogue_args, a.device, a.shape[0], b.shape[0])
        if self.takes_sms and params.get("sms") is None:
            kernel = self.kernel(**self.on_gpu(params))
        return self.launch(kernel, a, b, c, epilogue_args)

    def launch(self, kernel, a, b, c, epilogue_args=()):
        """A :class:`Launch` of a kernel object on A, B, C, with no checks: compiled once, its
        scratch tensors allocated (zeroed where they must be). For a kernel you built yourself:
        ``Entry(type(kernel)).launch(kernel, a, b, c)``; ``launcher`` checks first."""
        import torch

        scratch = {s.name: (torch.zeros if s.zero else torch.empty)(s.size, dtype=getattr(torch, s.dtype),
                                                                    device=a.device)
                   for s in kernel.scratch()}
        return _launch_compiled(kernel, a, b, c, extra=[(scratch[s.name], s.align) for s in kernel.scratch()],
                                tail=epilogue_tail(kernel, epilogue_args), arch=self.arch, **scratch)


def named_epilogue_op(name):
    """An op of ``epilogue_op.py`` by class name, or by ``[name, {constructor keywords}]``
    (compile targets take JSON-able arguments); an op object (or None) as it is."""
    from . import epilogue_op

    if name is None or isinstance(name, epilogue_op.EpilogueOp):
        return name
    name, kwargs = (name, {}) if isinstance(name, str) else name
    op = getattr(epilogue_op, name, None)
    if not (isinstance(op, type) and issubclass(op, epilogue_op.EpilogueOp)):
        raise CourseError(f"epilogue_op={name!r} is not an op of cutecourse/kernels/epilogue_op.py",
                          "pass an EpilogueOp object, or the name of one defined there, e.g. 'Relu'")
    return op(**kwargs)


def fake_epilogue_operands(op) -> tuple:
    """Fake tensors (symbolic length) for the operands an epilogue op reads, as it describes them."""
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_tensor

    from .epilogue_op import described
    from .sm90 import TENSOR_TYPES

    return tuple(make_fake_tensor(TENSOR_TYPES[o.dtype], (cute.sym_int(symbol=o.name),), (1,), assumed_align=o.align)
                 for o in described(op))


def dense_dtypes(kernel):
    """The torch input dtypes of a kernel that takes A, B, C."""
    return torch_dtypes(kernel.IN_DTYPES)


def torch_dtypes(names):
    """The torch dtypes of these names (a kernel's ``IN_DTYPES``); None for none."""
    import torch

    return tuple(getattr(torch, name) for name in names) or None


def epilogue_tail(kernel, epilogue_args) -> list:
    """(tensor, alignment) of each epilogue operand, as the kernel's op describes them (one
    element for a tensor it does not describe: unchecked callers pass what they pass)."""
    from .epilogue_op import described

    want = described(getattr(kernel, "epilogue_op", None))
    return [(t, want[i].align if i < len(want) else t.element_size()) for i, t in enumerate(epilogue_args)]


def check_epilogue_args(op, epilogue_args, device, m: int, n: int):
    """An epilogue op's operands against its description: one torch tensor per operand, of its
    dtype, of its length (N per column, M per row: ``m``, ``n`` the largest C), on ``device``."""
    import torch

    from .epilogue_op import described

    want = described(op)
    if len(epilogue_args) != len(want):
        raise ShapeError(f"the epilogue op {op!r} reads {len(want)} tensor(s) {tuple(o.name for o in want)}, "
                         f"but {len(epilogue_args)} were given",
                         "pass epilogue_args=(...) with one torch tensor per name, in that order")
    for o, t in zip(want, epilogue_args):
        if not isinstance(t, torch.Tensor) or t.device != device:
            raise DeviceError(f"epilogue operand {o.name!r} is not a torch tensor on {device}",
                              f"pass it as a tensor on the GPU, e.g. {o.name}.to(a.device)")
        if dtype_name(t.dtype) != o.dtype:
            raise DTypeError(f"epilogue operand {o.name!r} is {dtype_name(t.dtype)}; the op reads {o.dtype}",
                             f"pass {o.name}.to(torch.{o.dtype})")
        size = o.length(m, n)
        what = {"col": f"per column of C (N = {n})", "row": f"per row of C (M = {m})", "scalar": "in all"}[o.kind]
        if t.dim() != 1 or t.numel() != size or t.stride(0) != 1 or t.data_ptr() % o.align:
            raise ShapeError(f"epilogue operand {o.name!r} is {tuple(t.shape)} with strides {tuple(t.stride())}; "
                             f"the op reads one value {what}, contiguous, {o.align}-byte aligned",
                             f"pass a contiguous 1-D tensor of {size} elements")
