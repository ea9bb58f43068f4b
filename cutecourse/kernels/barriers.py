"""The named hardware barriers of the course kernels, one id each, in one place.

A CTA has 16 named barriers (``bar.sync id, threads`` / ``bar.arrive id, threads``). Barrier 0 is
the one ``__syncthreads`` uses. A named barrier lets a *subset* of the warps meet without the
others (e.g. the consumer warpgroups, while the producer warp keeps loading), so two groups that
sync at the same time must use different ids, or they would count each other's threads. Giving
every use its own id here, once, makes that impossible to get wrong by accident.
"""

from __future__ import annotations

from enum import IntEnum


class Barrier(IntEnum):
    """Named barrier ids. ``+ w`` selects warpgroup w's barrier where a pair exists."""

    CTA = 0  # the whole CTA (``cute.arch.sync_threads``)
    EPILOGUE = 1  # the threads that run an epilogue (ping-pong: consumer warpgroup 0's)
    EPILOGUE_WG1 = 2  # ping-pong: consumer warpgroup 1's epilogue
    MMA_TURN = 3  # warpgroup 0's turn on the tensor cores (ping-pong, the FP8 kernel's turns)
    MMA_TURN_WG1 = 4  # warpgroup 1's turn
    TMEM_ADDRESS = 5  # Blackwell: the allocating warp hands the TMEM address to the MMA warp
