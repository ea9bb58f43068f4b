"""The grouped GEMMs compiled without a GPU, for ``cutecourse.inspect.compile_report``.

Each name is its entry's ``compile_target`` (``grouped.HOPPER``, ``FP8``, ``BLACKWELL``), with
the kernel's own defaults: it returns ``(kernel, fake_args)`` with symbolic sizes, strides and
group count G, so ``compile_report("cutecourse.kernels.grouped_targets:hopper", arch="sm_90a")``
compiles the kernel exactly as a launch would (one compile serves every batch of groups). Each
takes the input and output dtypes (torch names; by default the kernel's first input dtype and
the entry's C), then the launchers' keywords (tile, cluster, sms, stages, scheduler and epilogue_op by name,
the FP8 kernel's ``variant``, the Blackwell kernel's ``fmt`` ...).
"""

from __future__ import annotations

from . import grouped

#: The Hopper grouped GEMM (``hopper_grouped_gemm``), fp16/bf16.
hopper = grouped.HOPPER.compile_target
#: The FP8 block-scaled one (``grouped.fp8_kernel``): ``variant="twopart"`` (or ``parts=2``) is the
#: two-part kernel notebook 07 teaches (``hopper_grouped_gemm_fp8``), the default "onepart" (``parts=1``)
#: the one-part kernel; a name of ``grouped.FP8_KERNELS``.
hopper_fp8 = grouped.FP8.compile_target
#: The Blackwell grouped block-scaled GEMM (``blackwell_grouped_gemm``), for ``arch="sm_100a"``;
#: ``fmt`` fixes the input dtype.
blackwell = grouped.BLACKWELL.compile_target
