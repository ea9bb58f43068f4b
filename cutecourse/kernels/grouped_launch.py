"""Grouped GEMMs on the one host layer: :class:`GroupedEntry` is ``gemm_launch.Entry`` for a batch of groups.

Every grouped kernel (Hopper bf16 and FP8, Blackwell block-scaled) takes the templates of its
tensor maps (A, B, C; Blackwell's also SFA, SFB), the group metadata (``group_forms.Metadata``), a
workspace for its CTAs' tensor maps, a trace and a bound on the work items. What changes from
one grouped launcher to the next is only the *form* in which the caller holds its groups
(``group_forms.GroupForm``: it checks its tensors, allocates its outputs and builds the
metadata). Compiled once per configuration: G and every size are run-time values. The
torch-facing functions are in ``grouped.py``.
"""

from __future__ import annotations

from ..errors import CourseError
from ..tensors import dtype_name
from . import gemm_launch
from .group_forms import GroupForm
from .tensor_maps import MAP_BYTES, MAP_WORDS


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
                 templates=None):
        super().__init__(build, arch)
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

    def kernel(self, **params):
        """``gemm_launch.Entry.kernel``, refusing an op with a per-row operand (every verb builds
        its kernel here: :func:`refuse_row_operands`)."""
        kernel = super().kernel(**params)
        refuse_row_operands(getattr(kernel, "epilogue_op", None))
        return kernel


def refuse_row_operands(op):
    """A grouped GEMM takes no "row" operand: its kernels pass ``apply`` the row inside the
    group's C (``tile_origin`` counts from the group's first row), so one tensor of per-row values
    cannot name a row of the packed or stacked C. Per-column and scalar operands are the same for
    every group."""
    from .epilogue_op import described

    rows = [o.name for o in described(op) if o.kind == "row"]
    if rows:
        raise CourseError(f"{type(op).__name__} reads {', '.join(rows)} per row of C, which a grouped GEMM does "
                          "not support: its kernels give the op the row inside each group, not the row of the "
                          "packed C, so the values would belong to other rows",
                          "scale the rows of A before the GEMM (or of C after it), e.g. "
                          "a * scale[:, None]; or use an op whose operands are per column or scalar")
