"""Grouped GEMMs on the one host layer: :class:`GroupedEntry` is ``gemm_launch.Entry`` for a batch of groups.

Every grouped kernel (Hopper bf16 and FP8, Blackwell block-scaled) takes the templates of its
tensor maps (A, B, C; Blackwell's also SFA, SFB), the group metadata (:class:`Metadata`:
``shapes`` (G, 4), ``ptrs`` and ``strides`` (G, operands)), a workspace for its CTAs' tensor
maps, a trace and a bound on the work items. What changes from one grouped launcher to the next is only the
*form* in which the caller holds its groups (:class:`GroupForm`); a form checks its tensors, allocates its outputs and
builds the metadata: :class:`ListGroups` (lists As, Bs, Cs: :func:`list_metadata` from host
sizes), :class:`PackedGroups` (``torch._grouped_mm``'s packed MoE form: :func:`packed_metadata`,
on the GPU from ``offs``, no host sync), their FP8 subclasses :class:`ScaledListGroups` and
:class:`ScaledPackedGroups` (the block scales: two more columns), :class:`QuantizedGroups` (the
Blackwell kernel's). A new form is a subclass of :class:`GroupForm`. Compiled once per
configuration: G and every size are run-time values. The torch-facing functions are in ``grouped.py``.
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import CourseError, DTypeError
from ..tensors import dtype_name
from . import gemm_launch
from . import grouped_checks as checks
from .group_walk import OPERANDS
from .tensor_maps import MAP_BYTES, MAP_WORDS


class Metadata(NamedTuple):
    """What a grouped kernel takes besides the templates (torch tensors, on the groups' device)."""

    shapes: object  # (G, 4) int32: M, N, K, 1
    ptrs: object  # (G, operands) int64: addresses, in group_walk.OPERANDS order
    strides: object  # (G, operands) int64: each operand's stride (A, B, C: rows, in elements)
    work_bound: int  # >= the work items (cluster tiles) of all groups: it sizes the grid


def list_metadata(kernel, sizes, columns, device) -> Metadata:
    """The list forms' metadata: ``sizes`` [(M, N, K)] per group, ``columns`` one (tensors,
    strides) pair per operand in OPERANDS order (each group's tensor and its stride)."""
    import torch

    bm, bn = (t * c for t, c in zip(kernel.tile_mn, kernel.cluster_mn))  # C covered by one work item
    groups = range(len(sizes))
    return Metadata(
        torch.tensor([[m, n, k, 1] for m, n, k in sizes], dtype=torch.int32, device=device),
        torch.tensor([[ts[g].data_ptr() for ts, _ in columns] for g in groups], dtype=torch.int64, device=device),
        torch.tensor([[st[g] for _, st in columns] for g in groups], dtype=torch.int64, device=device),
        sum(-(-m // bm) * -(-n // bn) for m, n, _ in sizes))


def packed_metadata(kernel, a, b, c, offs, scales=None) -> Metadata:
    """The packed form's metadata, computed on the GPU from ``offs`` (no host sync): group g is
    rows ``offs[g-1]:offs[g]`` of A and C, and B = b[g] (K, N) read as its transpose (N, K).
    ``scales``: (sa, sb) of the FP8 kernel, sa M-major (sum M, K/128), sb (G, N/128, K/128)."""
    import torch

    ends = offs.to(torch.int64)
    starts = torch.cat([ends.new_zeros(1), ends[:-1]])
    groups, k, n = b.shape
    rows = ends - starts
    shapes = torch.stack([rows, torch.full_like(rows, n), torch.full_like(rows, k), torch.ones_like(rows)],
                         dim=1).to(torch.int32)
    g = torch.arange(groups, device=offs.device, dtype=torch.int64)
    ptrs = [a.data_ptr() + starts * a.stride(0) * a.element_size(),
            b.data_ptr() + g * b.stride(0) * b.element_size(),
            c.data_ptr() + starts * c.stride(0) * c.element_size()]
    strides = [a.stride(0), b.stride(2), c.stride(0)]
    if scales is not None:
        sa, sb = scales
        ptrs += [sa.data_ptr() + starts * 4, sb.data_ptr() + g * sb.stride(0) * 4]
        strides += [sa.stride(1), sb.stride(1)]
    # Without reading offs on the host: the tiles of all groups are at most ceil(sum M / BM) + G
    # rows (each group wastes less than one) times ceil(N / BN) columns.
    bm, bn = (t * c for t, c in zip(kernel.tile_mn, kernel.cluster_mn))
    return Metadata(shapes, torch.stack(ptrs, dim=1),
                    torch.tensor(strides, dtype=torch.int64, device=offs.device).expand(groups, len(strides))
                    .contiguous(), (-(-a.shape[0] // bm) + groups) * -(-n // bn))


# -- the forms: how a caller holds its groups -------------------------------------------------------
class GroupForm:
    """What :class:`GroupedEntry` asks of a form of groups, in the order it asks: ``params`` (the
    kernel keywords the groups fix), ``check`` (then ``device`` and ``dtype``, the inputs' torch
    dtype, are set), ``allocate`` (the outputs, for ``gemm``; then ``empty`` says whether there is
    nothing to launch), ``rows``, ``extent``, ``out_dtype`` and ``metadata``. ``COLUMNS``: the
    operands its metadata has per group, which must be the entry's."""

    empty = False  # nothing to launch (set when the outputs are allocated)
    COLUMNS = 3  # A, B, C

    def params(self) -> dict:
        """The kernel keywords the groups themselves fix (none, unless a form says otherwise)."""
        return {}

    def check(self, in_dtypes, out_dtype=None, outputs=False):
        """Check the inputs (dtypes among ``in_dtypes``, torch names), and with ``outputs`` the
        outputs the caller gave; C's dtype ``out_dtype`` where they are still to be allocated."""
        raise NotImplementedError

    def allocate(self, dtype):
        """Allocate the outputs (C of torch dtype ``dtype``) and return them."""
        raise NotImplementedError

    def rows(self) -> tuple[int, int]:
        """(rows of all groups, groups), what the FP8 launchers choose their cluster by."""
        raise NotImplementedError

    def extent(self) -> tuple[int, int]:
        """The largest C_g's (M, N): an epilogue operand's length."""
        raise NotImplementedError

    def out_dtype(self):
        """The outputs' torch dtype (they exist: given or allocated)."""
        raise NotImplementedError

    def metadata(self, kernel):
        """(Metadata, the templates of the tensor maps, tensors to keep alive while it runs)."""
        raise NotImplementedError


class ListGroups(GroupForm):
    """As[g] (M_g, K_g), Bs[g] (N_g, K_g), Cs[g] (M_g, N_g) (None: :meth:`allocate` makes them)."""

    scales = None  # the scaled subclass's (SAs, SBs)

    def __init__(self, As, Bs, Cs=None):
        self.As, self.Bs, self.Cs = As, Bs, Cs

    def check(self, in_dtypes, out_dtype=None, outputs=False):
        """The inputs (the dense GEMM's checks per group), and with ``outputs`` the Cs too."""
        in_dtypes = gemm_launch.torch_dtypes(in_dtypes)
        checks.check_groups(self.As, self.Bs, self.Cs[0].dtype if outputs and self.Cs else out_dtype, in_dtypes)
        if self.scales is not None:
            checks.check_scales(self.As, self.scales[0], self.Bs, self.scales[1])
        if outputs:
            checks.check_outputs(self.As, self.Bs, self.Cs)
        self.device, self.dtype = self.As[0].device, self.As[0].dtype

    def allocate(self, dtype):
        import torch

        self.Cs = [torch.empty((a.shape[0], b.shape[0]), dtype=dtype, device=a.device)
                   for a, b in zip(self.As, self.Bs)]
        return self.Cs

    def rows(self):
        return sum(a.shape[0] for a in self.As), len(self.As)

    def extent(self):
        return max(a.shape[0] for a in self.As), max(b.shape[0] for b in self.Bs)

    def out_dtype(self):
        return self.Cs[0].dtype

    def metadata(self, kernel):
        """(Metadata, templates, tensors to keep alive). Zeroes the C_g of empty groups (M_g or
        K_g = 0): the kernel never visits them. Templates: a non-empty group's A, B, C."""
        sizes = [(a.shape[0] if a.shape[1] else 0, b.shape[0], a.shape[1]) for a, b in zip(self.As, self.Bs)]
        for (m, _, _), c in zip(sizes, self.Cs):
            if m == 0 and c.numel():
                c.zero_()
        columns = [(ts, [t.stride(0) for t in ts]) for ts in (self.As, self.Bs, self.Cs)]
        if self.scales is not None:  # SFA: sa's k-block stride (it is M-major), SFB: sb's row stride
            sas = [checks.m_major(sa) for sa in self.scales[0]]
            columns += [(sas, [sa.stride(1) for sa in sas]), (self.scales[1], [sb.stride(0) for sb in self.scales[1]])]
        meta = list_metadata(kernel, sizes, columns, self.As[0].device)
        live = next((g for g, (m, _, _) in enumerate(sizes) if m), 0)
        return meta, (self.As[live], self.Bs[live], self.Cs[live]), columns[3:]


class ScaledListGroups(ListGroups):
    """The FP8 kernel's list form: ``ListGroups`` with block scales SAs[g] (M_g, K_g/128) and
    SBs[g] (N_g/128, K_g/128), fp32 (two more metadata columns)."""

    COLUMNS = 5  # A, B, C, SFA, SFB

    def __init__(self, As, Bs, SAs, SBs, Cs=None):
        super().__init__(As, Bs, Cs)
        self.scales = (SAs, SBs)


class PackedGroups(GroupForm):
    """``torch._grouped_mm``'s 2d x 3d form: a (sum M, K), b (G, K, N) (the transpose of K-major
    weights (G, N, K)), ``offs`` the int32 cumulative row ends, c (sum M, N)."""

    scales = None  # the scaled subclass's (sa, sb)

    def __init__(self, a, b, offs, c=None):
        self.a, self.b, self.offs, self.c = a, b, offs, c

    def check(self, in_dtypes, out_dtype=None, outputs=False):
        in_dtypes = gemm_launch.torch_dtypes(in_dtypes)
        checks.check_packed(self.a, self.b, self.offs, self.c.dtype if outputs else out_dtype, in_dtypes)
        if self.scales is not None:
            checks.check_packed_scales(self.a, self.scales[0], self.b, self.scales[1])
        if outputs:
            checks.check_packed_output(self.a, self.b, self.c)
        self.device, self.dtype = self.a.device, self.a.dtype

    def allocate(self, dtype):
        """C; rows past ``offs[-1]`` belong to no group and are zero (checking offs: one host sync)."""
        import torch

        self.c = torch.empty((self.a.shape[0], self.b.shape[2]), dtype=dtype, device=self.a.device)
        self.c[checks.check_offs(self.offs, self.a.shape[0]):].zero_()
        self.empty = self.a.shape[0] == 0 or self.a.shape[1] == 0  # C = 0, nothing to launch
        if self.empty:
            self.c.zero_()
        return self.c

    def rows(self):
        return self.a.shape[0], self.b.shape[0]

    def extent(self):
        return self.a.shape[0], self.b.shape[2]

    def out_dtype(self):
        return self.c.dtype

    def metadata(self, kernel):
        scales = None if self.scales is None else (checks.m_major(self.scales[0]), self.scales[1])
        meta = packed_metadata(kernel, self.a, self.b, self.c, self.offs, scales)
        return meta, (self.a, self.b[0].transpose(0, 1), self.c), scales or ()


class ScaledPackedGroups(PackedGroups):
    """The FP8 kernel's packed form: ``PackedGroups`` with block scales sa (sum M, K/128) and
    sb (G, N/128, K/128), fp32 (two more metadata columns)."""

    COLUMNS = 5  # A, B, C, SFA, SFB

    def __init__(self, a, b, sa, sb, offs, c=None):
        super().__init__(a, b, offs, c)
        self.scales = (sa, sb)


class QuantizedGroups(GroupForm):
    """The Blackwell kernel's groups: a list of ``grouped_checks.QuantizedGroup`` (data,
    interleaved scale factors and C of each group: the outputs come with the groups)."""

    COLUMNS = 5  # A, B, C, SFA, SFB

    def __init__(self, groups, fmt: str = "nvfp4"):
        self.groups, self.fmt = groups, fmt

    def params(self):
        """The kernel keyword the groups fix: their format."""
        return {"fmt": self.fmt}

    def check(self, in_dtypes=None, out_dtype=None, outputs=True):
        """Dtypes, shapes, scale-factor sizes, alignment and devices (C is part of each group;
        ``in_dtypes``: the format's data, which ``check_quantized`` checks by the format)."""
        self.sizes = checks.check_quantized(self.groups, self.fmt)
        self.device, self.dtype = self.groups[0].a.device, self.groups[0].a.dtype
        if out_dtype is not None and out_dtype != self.out_dtype():
            raise DTypeError(f"out_dtype {dtype_name(out_dtype)}, but the groups' C are {dtype_name(self.out_dtype())}",
                             "each QuantizedGroup brings its C: quantize_blockscaled(..., out_dtype=) makes it")

    def allocate(self, dtype=None):
        """The groups' own C (``quantize_blockscaled`` made them)."""
        return [op.c for op in self.groups]

    def rows(self):
        return sum(m for m, _, _ in self.sizes), len(self.sizes)

    def extent(self):
        return max(m for m, _, _ in self.sizes), max(n for _, n, _ in self.sizes)

    def out_dtype(self):
        return self.groups[0].c.dtype

    def metadata(self, kernel):
        """Strides count elements (fp4: 2 per byte); the interleaved scale factors have none (0)."""
        per_byte = 2 if kernel.format.data == "e2m1" else 1
        times = {"a": per_byte, "b": per_byte, "c": 1, "sfa": 0, "sfb": 0}
        columns = [([getattr(op, n) for op in self.groups], [getattr(op, n).stride(0) * times[n] for op in self.groups])
                   for n in OPERANDS]
        meta = list_metadata(kernel, self.sizes, columns, self.groups[0].a.device)
        t = next(op for op, (m, _, _) in zip(self.groups, self.sizes) if m)  # templates: a non-empty group
        return meta, (t.a, t.b, t.c, t.sfa, t.sfb), self.groups


# -- the entry ---------------------------------------------------------------------------------------
class GroupedEntry(gemm_launch.Entry):
    """``gemm_launch.Entry`` for a batch of groups in any form (:class:`GroupForm`), with its verbs
    (``validate``, ``gemm``, ``launcher``, ``launch``, ``compile_target``) taking ``groups`` where the dense
    entry takes A, B, C. ``columns``: the metadata's operands (3: A, B, C; 5 with scales: a form
    with that many ``COLUMNS``); ``out_dtype``: C's default (None:
    the inputs'); ``choose``: the launcher defaults the checked groups decide (a function of the
    form, e.g. the FP8 cluster); ``templates``: fakes of the tensor maps' templates. The inputs
    it takes are the kernel's ``IN_DTYPES``."""

    def __init__(self, build, arch: str = "sm_90a", columns: int = 3, out_dtype=None, choose=None,
                 templates=None, **defaults):
        super().__init__(build, arch, **defaults)
        self.columns, self.out_dtype = columns, out_dtype
        self.choose = choose or (lambda groups: {})
        self.templates = templates or (lambda kernel, in_dtype, out: gemm_launch.fake_operands(in_dtype, out))

    def validate(self, groups, out_dtype=None, **params):
        """Check the inputs of ``groups`` on any machine; return the kernel's plan for their
        dtypes and ``out_dtype`` (default: as ``gemm`` allocates C)."""
        import torch

        self._check_form(groups)
        out_dtype = out_dtype or (getattr(torch, self.out_dtype) if self.out_dtype else None)
        groups.check(self._in_dtypes(groups, params), out_dtype)
        out_dtype = out_dtype or groups.dtype  # known once checked
        kernel = self.kernel(**{**self.choose(groups), **groups.params(), **params})
        return kernel.plan(dtype_name(groups.dtype), dtype_name(out_dtype))

    def launcher(self, groups, epilogue_args=(), **params):
        """Check ``groups`` with their outputs (any machine), compile once: a ``gemm_launch.Launch``
        (``fn.trace`` (CTAs, 2): each CTA's work items and groups entered; ``fn.ctas``: the grid)."""
        self._check_form(groups)
        groups.check(self._in_dtypes(groups, params), outputs=True)
        return self._launch(groups, epilogue_args, params)

    def gemm(self, groups, out_dtype=None, epilogue_args=(), **params):
        """Check the inputs, allocate the outputs (``out_dtype``), launch once; return them."""
        import torch

        self._check_form(groups)
        out_dtype = out_dtype or (getattr(torch, self.out_dtype) if self.out_dtype else None)
        groups.check(self._in_dtypes(groups, params), out_dtype)
        out = groups.allocate(out_dtype or groups.dtype)
        if not groups.empty:
            self._launch(groups, epilogue_args, params)()
        return out

    def _check_form(self, groups):
        """A form of groups whose metadata this entry's kernel reads (A, B, C; or with scales)."""
        if not isinstance(groups, GroupForm) or groups.COLUMNS != self.columns:
            what = getattr(groups, "COLUMNS", None)
            raise CourseError(f"{type(groups).__name__} groups ({what} operands per group) do not fit "
                              f"{getattr(self.build, '__name__', 'this kernel')}, which reads {self.columns}",
                              "FP8: ScaledListGroups / ScaledPackedGroups; fp16/bf16: ListGroups / "
                              "PackedGroups; Blackwell: QuantizedGroups (grouped.py's functions build them)")

    def _in_dtypes(self, groups, params):
        """The inputs the kernel these keywords build takes (its own checks first)."""
        return self.kernel(**{**groups.params(), **params}).IN_DTYPES

    def _launch(self, groups, epilogue_args, params):
        """The op's operands checked, then the kernel built once, for this GPU's SMs (without a
        GPU it is built anyway, so that a wrong keyword is named before the missing GPU), and its
        plan made for the groups' dtypes (a clear error before anything is compiled)."""
        params = {**self.choose(groups), **groups.params(), **params}
        op = params["epilogue_op"] = gemm_launch.named_epilogue_op(params.get("epilogue_op"))
        gemm_launch.check_epilogue_args(op, epilogue_args, groups.device, *groups.extent())
        self.kernel(**params).plan(dtype_name(groups.dtype), dtype_name(groups.out_dtype()))
        params = self.on_gpu(params)
        return self.launch(self.kernel(**params), groups, epilogue_args)

    def compile_target(self, in_dtype: str | None = None, out_dtype: str | None = None, **params):
        """(kernel, fake arguments) for ``cutecourse.inspect.compile_report``: symbolic sizes and
        group count. ``in_dtype``: by default the kernel's first ``IN_DTYPES``; ``out_dtype``: by
        default the entry's, else the inputs' where they are fp16 or bf16, else float16."""
        kernel = self.kernel(**params)
        in_dtype = in_dtype or kernel.IN_DTYPES[0]
        out_dtype = out_dtype or self.out_dtype or (in_dtype if in_dtype in ("float16", "bfloat16") else "float16")
        kernel.plan(in_dtype, out_dtype)  # clear errors before tracing
        return kernel, self.fake_arguments(kernel, in_dtype, out_dtype)

    def launch(self, kernel, groups, epilogue_args=()):
        """A ``gemm_launch.Launch`` of a kernel object on checked ``groups``, with no checks:
        compiled once, the workspace of the CTAs' tensor maps and the trace allocated."""
        import cutlass
        import torch

        meta, templates, keep = groups.metadata(kernel)
        if meta.work_bound == 0:  # every group empty
            return gemm_launch.Launch.empty(meta)
        device = meta.shapes.device
        map_workspace = torch.empty((kernel.sms, kernel.MAPS, MAP_WORDS), dtype=torch.int64, device=device)
        trace = torch.zeros((kernel.sms, 2), dtype=torch.int32, device=device)
        cs = kernel.cluster_mn[0] * kernel.cluster_mn[1]
        return gemm_launch._launch_compiled(
            kernel, *templates, extra=[(meta.shapes, 16), (meta.ptrs, 8), (meta.strides, 8),
                                       (map_workspace, MAP_BYTES), (trace, 8)],
            scalars=(cutlass.Int32(meta.work_bound),), tail=gemm_launch.epilogue_tail(kernel, epilogue_args),
            arch=self.arch, keep=(meta, keep), trace=trace, metadata=meta,
            ctas=min(meta.work_bound, kernel.sms // cs) * cs)

    def fake_arguments(self, kernel, in_dtype: str = "float16", out_dtype: str = "float16", epilogue_args=None):
        """Fake templates (symbolic sizes), metadata with a symbolic group count G, the workspace,
        the trace, the work bound and a stream, then the epilogue op's operands."""
        import cuda.bindings.driver as cuda
        import cutlass

        from .grouped_fakes import fake_metadata

        templates = self.templates(kernel, in_dtype, out_dtype)
        tail = gemm_launch.fake_epilogue_operands(kernel.epilogue_op) if epilogue_args is None else epilogue_args
        return (*templates, *fake_metadata(self.columns, kernel.sms, kernel.MAPS), cutlass.Int32(kernel.sms),
                cuda.CUstream(0), *tail)

