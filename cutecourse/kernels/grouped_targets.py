"""The grouped GEMMs compiled without a GPU, for ``cutecourse.inspect.compile_report``.

Each function is its entry's ``compile_target`` (``grouped.HOPPER``, ``FP8``, ``BLACKWELL``) with
the defaults notebook 07 compiles: it returns ``(kernel, fake_args)`` with symbolic sizes,
strides and group count G, so ``compile_report("cutecourse.kernels.grouped_targets:hopper",
arch="sm_90a")`` compiles the kernel exactly as a launch would (one compile serves every batch of
groups). Keywords: the launchers' (tile, cluster, sms, stages, epilogue_op by name ...).
"""

from __future__ import annotations

from . import grouped


def hopper(in_dtype: str = "float16", out_dtype: str = "float16", **params):
    """The Hopper grouped GEMM (``hopper_grouped_gemm``), fp16/bf16."""
    return grouped.HOPPER.compile_target(in_dtype, out_dtype, **params)


def hopper_fp8(out_dtype: str = "bfloat16", tile=(128, 128), cluster=(1, 1), parts: int = 2, **params):
    """The FP8 block-scaled one: two parts at 128x128 (``hopper_grouped_gemm_fp8``, the kernel
    notebook 07 teaches); ``parts=1``: the one-part kernel (``hopper_grouped_gemm_fp8_onepart``)."""
    return grouped.FP8.compile_target("float8_e4m3fn", out_dtype, tile=tile, cluster=cluster, parts=parts, **params)


def blackwell(fmt: str = "nvfp4", tile=(128, 128), cluster=(1, 1), out_dtype: str = "float16", **params):
    """The Blackwell grouped block-scaled GEMM (``blackwell_grouped_gemm``), for ``arch="sm_100a"``."""
    kernel = grouped.BLACKWELL.kernel(fmt=fmt, tile=tile, cluster=cluster, out_dtype=out_dtype, **params)
    return kernel, grouped.BLACKWELL.fake_arguments(kernel, fmt, out_dtype)
