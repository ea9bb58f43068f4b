"""CPU models of what the kernels do: pipelines, timelines, tile plans, schedules.

Each module answers one question without a GPU: ``pipeline`` (what the smem pipeline's barriers
and states do, step by step), ``timeline`` (how long a mainloop takes and why prefetch helps),
``gemm_plan`` (how many stages fit in shared memory, how many waves over the SMs),
``tile_order`` (the order the GEMMs visit C's tiles in), ``multicast`` (who loads which slice in
a cluster), ``schedules`` (one CTA per tile, persistent cooperative, ping-pong and 2 CTAs per SM
as timelines; ``schedule_calibration``: its H100 figures, read off the measurements),
``group_scheduler`` (a grouped GEMM's work items and tensor-map updates), ``coalescing``
(which 32-byte sectors a warp's loads touch, for a TV layout over a tensor) and
``block_scaling`` (quantization with block scale factors, and the references scaled GEMMs are
checked against; ``sf_layout``: where Blackwell's MMA finds each scale factor).
"""
