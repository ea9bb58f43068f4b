"""CPU models of what the kernels do: pipelines, timelines, tile plans.

Each module answers one question without a GPU: ``pipeline`` (what the smem pipeline's barriers
and states do, step by step), ``timeline`` (how long a mainloop takes and why prefetch helps),
``gemm_plan`` (how many stages fit in shared memory, how many waves over the SMs).
"""
