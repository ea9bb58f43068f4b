"""The grouped GEMMs compiled without a GPU, for ``cutecourse.inspect.compile_report``.

Each function is its entry's ``compile_target`` (``grouped.HOPPER``, ``FP8``, ``BLACKWELL``) with
the defaults notebook 07 compiles: it returns ``(kernel, fake_args)`` with symbolic sizes,
strides and group count G, so ``compile_report("cutecourse.kernels.grouped_targets:hopper",
arch="sm_90a")`` compiles the kernel exactly as a launch would (one compile serves every batch of
groups). Each takes the input and output dtypes (torch names), then keywords: the launchers'
(tile, cluster, sms, stages, epilogue_op by name ...).
"""

from __future__ import annotations

from . import grouped


def hopper(in_dtype: str = "float16", out_dtype: str = "float16", **params):
    """The Hopper grouped GEMM (``hopper_grouped_gemm``), fp16/bf16."""
    return grouped.HOPPER.compile_target(in_dtype, out_dtype, **params)


def hopper_fp8(in_dtype: str = "float8_e4m3fn", out_dtype: str = "bfloat16", *, tile=(128, 128),
               cluster=(1, 1), parts: int = 2, **params):
    """The FP8 block-scaled one: two parts at 128x128 (``hopper_grouped_gemm_fp8``, the kernel
    notebook 07 teaches); ``parts=1``: the one-part kernel (``hopper_grouped_gemm_fp8_onepart``)."""
    return grouped.FP8.compile_target(in_dtype, out_dtype, tile=tile, cluster=cluster, parts=parts, **params)


def blackwell(in_dtype: str | None = None, out_dtype: str = "float16", *, fmt: str = "nvfp4", tile=(128, 128),
              cluster=(1, 1), **params):
    """The Blackwell grouped block-scaled GEMM (``blackwell_grouped_gemm``), for ``arch="sm_100a"``;
    ``fmt`` fixes the input dtype (``in_dtype``: by default the format's data)."""
    return grouped.BLACKWELL.compile_target(in_dtype, out_dtype, fmt=fmt, tile=tile, cluster=cluster, **params)
