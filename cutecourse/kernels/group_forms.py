"""The forms of a batch of groups (how a caller holds them) and the metadata a grouped kernel reads.

Every grouped kernel (Hopper bf16 and FP8, Blackwell block-scaled) takes, besides the templates
of its tensor maps, the group metadata (:class:`Metadata`: ``shapes`` (G, 4), ``ptrs`` and
``strides`` (G, operands)). A form (:class:`GroupForm`) checks its tensors, allocates its outputs
and builds that metadata: :class:`ListGroups` (lists As, Bs, Cs: :func:`list_metadata` from host
sizes), :class:`PackedGroups` (``torch._grouped_mm``'s packed MoE form: :func:`packed_metadata`,
on the GPU from ``offs``, no host sync), their FP8 subclasses :class:`ScaledListGroups` and
:class:`ScaledPackedGroups` (the block scales, through the hooks ``check_scales`` and
``scale_columns``, in both forms: two more columns), :class:`QuantizedGroups` (the
Blackwell kernel's). A new form is a subclass of :class:`GroupForm`. The entry that launches a
form is ``grouped_launch.GroupedEntry``; the torch-facing functions are in ``grouped.py``.
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import DTypeError
from ..tensors import dtype_name
from . import gemm_launch
from . import grouped_checks as checks
from .group_walk import OPERANDS


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
        """(M, N) the epilogue operands are checked against: N, the columns of every C_g (a grouped
        GEMM takes no per-row operand, ``grouped_launch.refuse_row_operands``)."""
        raise NotImplementedError

    def out_dtype(self):
        """The outputs' torch dtype (they exist: given or allocated)."""
        raise NotImplementedError

    def metadata(self, kernel):
        """(Metadata, the templates of the tensor maps, tensors to keep alive while it runs)."""
        raise NotImplementedError


class ListGroups(GroupForm):
    """As[g] (M_g, K_g), Bs[g] (N_g, K_g), Cs[g] (M_g, N_g) (None: :meth:`allocate` makes them).
    Hooks of the scaled subclass: ``check_scales``, ``scale_columns``."""

    def __init__(self, As, Bs, Cs=None):
        self.As, self.Bs, self.Cs = As, Bs, Cs

    def check(self, in_dtypes, out_dtype=None, outputs=False):
        """The inputs (the dense GEMM's checks per group), and with ``outputs`` the Cs too."""
        in_dtypes = gemm_launch.torch_dtypes(in_dtypes)
        checks.check_groups(self.As, self.Bs, self.Cs[0].dtype if outputs and self.Cs else out_dtype, in_dtypes)
        self.check_scales()
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
        columns = [(ts, [t.stride(0) for t in ts]) for ts in (self.As, self.Bs, self.Cs)] + self.scale_columns()
        meta = list_metadata(kernel, sizes, columns, self.As[0].device)
        live = next((g for g, (m, _, _) in enumerate(sizes) if m), 0)
        return meta, (self.As[live], self.Bs[live], self.Cs[live]), columns[3:]

    def check_scales(self):
        """Hook: the block scales' checks (none here)."""

    def scale_columns(self) -> list:
        """Hook: the metadata columns after A, B, C, as (tensors, row strides) (none here)."""
        return []


class ScaledListGroups(ListGroups):
    """The FP8 kernel's list form: ``ListGroups`` with block scales SAs[g] (M_g, K_g/128) and
    SBs[g] (N_g/128, K_g/128), fp32 (two more metadata columns)."""

    COLUMNS = 5  # A, B, C, SFA, SFB

    def __init__(self, As, Bs, SAs, SBs, Cs=None):
        super().__init__(As, Bs, Cs)
        self.scales = (SAs, SBs)

    def check_scales(self):
        checks.check_scales(self.As, self.scales[0], self.Bs, self.scales[1])

    def scale_columns(self) -> list:
        """SFA: each sa's k-block stride (it is M-major), SFB: each sb's row stride."""
        sas = [checks.m_major(sa) for sa in self.scales[0]]
        return [(sas, [sa.stride(1) for sa in sas]), (self.scales[1], [sb.stride(0) for sb in self.scales[1]])]


class PackedGroups(GroupForm):
    """``torch._grouped_mm``'s 2d x 3d form: a (sum M, K), b (G, K, N) (the transpose of K-major
    weights (G, N, K)), ``offs`` the int32 cumulative row ends, c (sum M, N). Hooks of the
    scaled subclass: ``check_scales``, ``scale_columns`` (as in ``ListGroups``)."""

    def __init__(self, a, b, offs, c=None):
        self.a, self.b, self.offs, self.c = a, b, offs, c

    def check(self, in_dtypes, out_dtype=None, outputs=False):
        in_dtypes = gemm_launch.torch_dtypes(in_dtypes)
        checks.check_packed(self.a, self.b, self.offs, self.c.dtype if outputs else out_dtype, in_dtypes)
        self.check_scales()
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
        scales = self.scale_columns()
        meta = packed_metadata(kernel, self.a, self.b, self.c, self.offs, scales)
        return meta, (self.a, self.b[0].transpose(0, 1), self.c), scales or ()

    def check_scales(self):
        """Hook: the block scales' checks (none here)."""

    def scale_columns(self):
        """Hook: the metadata's scale columns, as ``packed_metadata`` reads them: (sa, sb), or None
        (none here). The list form's hook of that name gives them per group, with row strides."""
        return None


class ScaledPackedGroups(PackedGroups):
    """The FP8 kernel's packed form: ``PackedGroups`` with block scales sa (sum M, K/128) and
    sb (G, N/128, K/128), fp32 (two more metadata columns)."""

    COLUMNS = 5  # A, B, C, SFA, SFB

    def __init__(self, a, b, sa, sb, offs, c=None):
        super().__init__(a, b, offs, c)
        self.scales = (sa, sb)

    def check_scales(self):
        checks.check_packed_scales(self.a, self.scales[0], self.b, self.scales[1])

    def scale_columns(self):
        """sa M-major (its k-block stride), sb as given."""
        return checks.m_major(self.scales[0]), self.scales[1]


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
