"""Operands a kernel describes itself, for the kernels whose operands are not A, B and C.

``gemm_launch`` serves the dense GEMMs' K-major A (M, K), B (N, K) and C (M, N) by default. A
kernel that takes other tensors (the mixed-input GEMM: x, packed int4 weights, group scales, y,
and its split-K buffers) says what they are in ``operands()``: a :class:`Tensor` for each, in
the order its ``__call__`` takes them, before and after the stream. Its entry is a
:class:`DescribedEntry`, which from that one description fakes them for a compile on any
machine (:func:`fake_tensors`) and launches on them (:func:`arguments`), every size a run-time
value; :func:`check_tensors` checks the torch tensors' layout (after the kernel's own checks in
the learner's terms, which its module makes). A tensor described as ``scratch`` (the kernel's
own buffer, as ``gemm_launch.Scratch`` is a dense kernel's: the mixed-input GEMM's split-K
partial sums and counters) is allocated by the entry's ``launch`` (:func:`allocate_scratch`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import AlignmentError, CourseError, DeviceError, LayoutError
from ..models.gemm_plan import BYTES
from .epilogue_op import OPERAND_BYTES
from .gemm_launch import Entry, Launch, compile_once


@dataclass(frozen=True)
class Tensor:
    """A tensor operand as a kernel describes it: ``name`` (the learner's, for messages), ``dtype``
    (a torch dtype name), ``shape`` (symbol names: the sizes stay run-time values; one name in two
    tensors is one size), row-major with rows 16-byte aligned; ``ld``: the symbols of its row
    strides (default ``ld`` + name). ``scratch``: the entry allocates it at launch, its sizes
    read from the other tensors' (one symbol, one size) or given; ``zero``: zeroed there (the
    kernel leaves it zero, so it stays so from launch to launch)."""

    name: str
    dtype: str
    shape: tuple
    ld: tuple = ()
    scratch: bool = False
    zero: bool = False

    def strides(self) -> tuple:
        """Symbol names of the strides of every dimension but the last (which is 1)."""
        return tuple(self.ld) or tuple(f"ld{self.name}{'' if i == len(self.shape) - 2 else i}"
                                       for i in range(len(self.shape) - 1))


def fake_tensors(described, sizes: dict) -> tuple:
    """Fake tensors for these :class:`Tensor` descriptions; ``sizes``: symbol -> ``cute.sym_int``,
    shared by every call for one kernel (a symbol not in it yet is made and added)."""
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_tensor

    from .sm90 import TENSOR_TYPES

    out = []
    for t in described:
        for s in t.shape:
            if s not in sizes:
                sizes[s] = cute.sym_int(symbol=s)
        shape = tuple(sizes[s] for s in t.shape)
        div = max(1, 16 // BYTES_OF[t.dtype])
        strides = tuple(cute.sym_int64(divisibility=div, symbol=ld) for ld in t.strides()) + (1,)
        out.append(make_fake_tensor(TENSOR_TYPES[t.dtype], shape, strides, assumed_align=16))
    return tuple(out)


#: Bytes per element of the dtypes a described tensor may have: the GEMM operands' (gemm_plan),
#: the epilogue operands' (epilogue_op), and the int4 zero points' uint8.
BYTES_OF = {**BYTES, **OPERAND_BYTES, "uint8": 1}


def check_tensors(named) -> None:
    """(name, tensor) pairs (None: an operand not given) against what TMA reads: contiguous
    row-major, 16-byte aligned, all on one device; a CourseError in the learner's names."""
    given = [(name, t) for name, t in named if t is not None]
    for name, t in given:
        if t.stride(-1) != 1 or (t.dim() == 2 and t.shape[0] > 1 and t.stride(0) != t.shape[1]):
            raise LayoutError(f"{name} is not a contiguous row-major tensor (strides {tuple(t.stride())})",
                              f"pass {name}.contiguous()")
        if t.data_ptr() % 16:
            raise AlignmentError(f"{name} starts at an address that is not 16-byte aligned (TMA needs 16 B)",
                                 f"pass {name}.clone()")
    devices = {t.device for _, t in given}
    if len(devices) > 1:
        raise DeviceError(f"the operands are on different devices: {sorted(map(str, devices))}",
                          f"move {', '.join(name for name, _ in given)} to the same GPU")


def allocate_scratch(kernel, tensors: dict, sizes=None) -> dict:
    """The ``scratch`` tensors ``kernel.operands()`` describes that ``tensors`` (name -> torch
    tensor) lacks, allocated on their device: each symbol's size is ``sizes``' (symbol -> int) or
    read from a given tensor of that symbol."""
    import torch

    before, after = kernel.operands()
    known = dict(sizes or {})
    for t in before + after:
        if tensors.get(t.name) is not None:
            for symbol, size in zip(t.shape, tensors[t.name].shape):
                known.setdefault(symbol, size)
    device = next(v.device for v in tensors.values() if v is not None)
    out = {}
    for t in before + after:
        if t.scratch and tensors.get(t.name) is None:
            unknown = [s for s in t.shape if s not in known]
            if unknown:
                raise CourseError(f"the size {unknown[0]!r} of {t.name} {t.shape} is in no tensor given",
                                  f"pass sizes={{{unknown[0]!r}: ...}} to launch, or the tensor {t.name} itself")
            out[t.name] = (torch.zeros if t.zero else torch.empty)(
                tuple(known[s] for s in t.shape), dtype=getattr(torch, t.dtype), device=device)
    return out


def arguments(kernel, tensors: dict) -> tuple:
    """The DSL arguments of ``kernel`` on ``tensors`` (name -> checked torch tensor, as
    ``kernel.operands()`` names them) and the current stream: every size a run-time value, as
    the fakes had it."""
    import cuda.bindings.driver as cuda
    import torch
    from cutlass.cute.runtime import from_dlpack

    before, after = kernel.operands()
    wrap = [[from_dlpack(tensors[t.name], assumed_align=16).mark_layout_dynamic(leading_dim=tensors[t.name].dim() - 1)
             for t in part] for part in (before, after)]
    return (*wrap[0], cuda.CUstream(torch.cuda.current_stream().cuda_stream), *wrap[1])


class DescribedEntry(Entry):
    """``gemm_launch.Entry`` for a kernel that describes its own operands (``operands()``), with
    the verbs of every entry taking those operands where the dense entry takes A, B, C:
    ``compile_target`` fakes them from the description; ``validate``, ``launcher`` and ``gemm``
    are the kernel's torch-facing functions, given here (its module checks the operands in the
    learner's terms and plans the problem: which kernel a shape wants); ``launch(kernel,
    tensors)`` launches a kernel object on checked torch tensors, with no further checks, and
    allocates its scratch tensors as ``Entry.launch`` does.
    ``validate(*operands, **kw)`` checks on any machine; ``launcher(*operands, **kw)`` returns a
    ``gemm_launch.Launch``; ``gemm(*operands, **kw)`` its output, launched once."""

    def __init__(self, build, arch: str = "sm_90a", *, validate=None, launcher=None, gemm=None):
        super().__init__(build, arch)
        self._verbs = dict(validate=validate, launcher=launcher, gemm=gemm)

    def _verb(self, name: str, args, kw):
        verb = self._verbs[name]
        if verb is None:
            kernel = getattr(self.build, "__name__", "this kernel")
            raise CourseError(f"this entry of {kernel} was built without a torch-facing {name}",
                              f"build it as DescribedEntry({kernel}, validate=..., launcher=..., gemm=...), "
                              f"or launch a kernel object with entry.launch(kernel, tensors)")
        return verb(*args, **kw)

    def validate(self, *operands, **params):
        """Check torch operands on any machine, as the kernel's module does (its ``validate``)."""
        return self._verb("validate", operands, params)

    def launcher(self, *operands, **params):
        """Check, plan, compile once: a ``gemm_launch.Launch`` (the kernel's module's ``launcher``)."""
        return self._verb("launcher", operands, params)

    def gemm(self, *operands, **params):
        """The output, launched once (the kernel's module's ``gemm``: for the mixed-input GEMM, y)."""
        return self._verb("gemm", operands, params)

    def compile_target(self, in_dtype=None, out_dtype=None, **params):
        """(kernel, fake arguments) for ``cutecourse.inspect.compile_report``: symbolic sizes;
        keyword arguments: the constructor's (it makes the kernel's own checks). The operands'
        dtypes are the description's: an ``in_dtype`` or ``out_dtype`` is refused, not ignored."""
        kernel = self.kernel(**params)
        if in_dtype is not None or out_dtype is not None:
            raise CourseError(f"{type(kernel).__name__} describes its operands' dtypes itself (operands()): "
                              f"in_dtype={in_dtype!r}, out_dtype={out_dtype!r} would change nothing",
                              "leave in_dtype and out_dtype out; pass the constructor's keyword arguments")
        return kernel, self.fake_arguments(kernel)

    def fake_arguments(self, kernel, *_, epilogue_args=None):
        """The kernel's operands as it describes them, faked, with a stream between the two parts."""
        import cuda.bindings.driver as cuda

        sizes: dict = {}
        before, after = kernel.operands()
        return (*fake_tensors(before, sizes), cuda.CUstream(0), *fake_tensors(after, sizes))

    def launch(self, kernel, tensors: dict, /, sizes=None, **attrs):
        """Compile once and return a ``gemm_launch.Launch`` of ``kernel`` on ``tensors`` (name ->
        checked torch tensor, as ``operands()`` names them; None: an operand not given), its
        ``scratch`` tensors allocated (:func:`allocate_scratch`, ``sizes``: symbol -> int for the
        sizes no given tensor has) and attributes of the Launch (``fn.partials``), as ``attrs``."""
        from ..modes import require_gpu

        require_gpu(self.arch)
        scratch = allocate_scratch(kernel, tensors, sizes)
        tensors = {**tensors, **scratch}
        args = arguments(kernel, tensors)
        compiled = compile_once(kernel, args, key=tuple(t.dtype for t in tensors.values() if t is not None))
        return Launch(compiled, args, keep=list(tensors.values()), **scratch, **attrs)
