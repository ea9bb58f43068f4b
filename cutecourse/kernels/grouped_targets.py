"""The grouped GEMMs compiled without a GPU: fake operands and metadata for ``cutecourse.inspect``.

Each function returns ``(kernel, fake_args)`` with symbolic sizes, strides and group count G, so
``compile_report("cutecourse.kernels.grouped_targets:hopper", arch="sm_90a")`` compiles the
kernel exactly as a launch would (one compile serves every batch of groups):

* :func:`hopper`: the Hopper grouped GEMM (``hopper_grouped_gemm``), fp16/bf16;
* :func:`hopper_fp8`: the FP8 block-scaled one (``hopper_grouped_gemm_fp8``; ``parts=1``: its
  one-part variants, ``hopper_grouped_gemm_fp8_onepart``);
* :func:`blackwell`: the Blackwell grouped block-scaled GEMM (``blackwell_grouped_gemm``), for
  ``arch="sm_100a"``.
"""

from __future__ import annotations

from ..models.blackwell_plan import B200_SMS
from ..models.gemm_plan import plan_fp8, plan_persistent
from . import gemm_launch
from .blackwell_grouped_gemm import BlackwellGroupedBlockScaledGemm
from .group_walk import OPERANDS
from .grouped import fp8_kernel
from .hopper_grouped_gemm import GroupedHopperGemm
from .tensor_maps import MAP_BYTES, MAP_WORDS


def _fake_metadata(columns: int, ctas: int, maps: int) -> tuple:
    """Fake shapes (G, 4), ptrs and strides (G, columns), workspace (ctas, maps, 16), trace."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_tensor

    g = cute.sym_int(symbol="G")
    return (make_fake_tensor(cutlass.Int32, (g, 4), (4, 1), assumed_align=16),
            make_fake_tensor(cutlass.Int64, (g, columns), (columns, 1), assumed_align=8),
            make_fake_tensor(cutlass.Int64, (g, columns), (columns, 1), assumed_align=8),
            make_fake_tensor(cutlass.Int64, (ctas, maps, MAP_WORDS), (maps * MAP_WORDS, MAP_WORDS, 1),
                             assumed_align=MAP_BYTES),
            make_fake_tensor(cutlass.Int32, (ctas, 2), (2, 1), assumed_align=8))


def _hopper_arguments(kernel, in_dtype: str, out_dtype: str, columns: int) -> tuple:
    import cuda.bindings.driver as cuda
    import cutlass

    return (*gemm_launch.fake_operands(in_dtype, out_dtype), *_fake_metadata(columns, kernel.sms, kernel.MAPS),
            cutlass.Int32(kernel.sms), cuda.CUstream(0))


def hopper(tile=(128, 256), in_dtype: str = "float16", out_dtype: str = "float16", sms: int = 132,
           stages: int | None = None, cluster=(1, 1)):
    """(jit_fn, fake_args) of the Hopper grouped GEMM for ``cutecourse.inspect.compile_report``."""
    plan_persistent(tuple(tile), in_dtype, out_dtype, stages=stages)  # clear errors before tracing
    kernel = GroupedHopperGemm(tuple(tile), cluster_mn=tuple(cluster), sms=sms, stages=stages)
    return kernel, _hopper_arguments(kernel, in_dtype, out_dtype, 3)


def hopper_fp8(tile=(128, 128), out_dtype: str = "bfloat16", sms: int = 132, stages: int | None = None,
               cluster=(1, 1), parts: int = 2):
    """(jit_fn, fake_args) of the FP8 block-scaled grouped GEMM for ``compile_report``
    (``parts``: the kernel's promotion variants)."""
    plan_fp8(tile, out_dtype, stages)  # clear errors before tracing
    kernel = fp8_kernel(tile, cluster, sms, stages, parts=parts)
    return kernel, _hopper_arguments(kernel, "float8_e4m3fn", out_dtype, len(OPERANDS))


def blackwell(fmt: str = "nvfp4", tile=(128, 128), cluster=(1, 1), out_dtype: str = "float16",
              sms: int = B200_SMS, epilogue_op: str | None = None):
    """(jit_fn, fake_args) of the Blackwell grouped block-scaled GEMM for
    ``compile_report(..., arch="sm_100a")``: symbolic sizes, strides and group count G.
    ``epilogue_op``: the name of an op of ``epilogue_op.py`` (e.g. "AddBias")."""
    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_tensor

    op = gemm_launch.named_epilogue_op(epilogue_op) if epilogue_op else None
    kernel = BlackwellGroupedBlockScaledGemm(fmt, tile_mn=tuple(tile), cluster_mn=tuple(cluster), sms=sms,
                                             out_dtype=out_dtype, epilogue_op=op)
    per_16b = 128 // kernel.data_dtype.width  # elements in 16 bytes: TMA's row alignment (32 fp4, 16 fp8)
    m, n = cute.sym_int(symbol="M"), cute.sym_int(symbol="N")
    k = cute.sym_int(divisibility=per_16b, symbol="K")
    lda, ldb = (cute.sym_int64(divisibility=per_16b, symbol=s) for s in ("lda", "ldb"))
    ldc = cute.sym_int64(divisibility=8, symbol="ldc")
    c_dtype = cutlass.Float16 if out_dtype == "float16" else cutlass.BFloat16
    a = make_fake_tensor(kernel.data_dtype, (m, k), (lda, 1), assumed_align=16)
    b = make_fake_tensor(kernel.data_dtype, (n, k), (ldb, 1), assumed_align=16)
    c = make_fake_tensor(c_dtype, (m, n), (ldc, 1), assumed_align=16)
    sfa, sfb = (make_fake_tensor(cutlass.Uint8, (cute.sym_int(symbol=s),), (1,), assumed_align=16)
                for s in ("SFA", "SFB"))
    return kernel, (a, b, c, sfa, sfb, *_fake_metadata(len(OPERANDS), kernel.sms, kernel.MAPS),
                    cutlass.Int32(kernel.sms), cuda.CUstream(0), *gemm_launch.fake_epilogue_operands(op))
