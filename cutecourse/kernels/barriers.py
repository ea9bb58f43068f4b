"""The named hardware barriers of the course kernels, one id each, in one place.

A CTA has 16 named barriers (``bar.sync id, threads`` / ``bar.arrive id, threads``). Barrier 0 is
the one ``__syncthreads`` uses. A named barrier lets a *subset* of the warps meet without the
others (e.g. the consumer warpgroups, while the producer warp keeps loading), so two groups that
sync at the same time must use different ids, or they would count each other's threads. Giving
every use its own id here, once, makes that impossible to get wrong by accident.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import cutlass.cute as cute


class Barrier(IntEnum):
    """Named barrier ids. ``+ w`` selects warpgroup w's barrier where a pair exists."""

    CTA = 0  # the whole CTA (``cute.arch.sync_threads``)
    EPILOGUE = 1  # the threads that run an epilogue (ping-pong: consumer warpgroup 0's)
    EPILOGUE_WG1 = 2  # ping-pong: consumer warpgroup 1's epilogue
    MMA_TURN = 3  # warpgroup 0's turn on the tensor cores (ping-pong, the FP8 kernel's turns)
    MMA_TURN_WG1 = 4  # warpgroup 1's turn
    TMEM_ADDRESS = 5  # Blackwell: the allocating warp hands the TMEM address to the MMA warp


@dataclass(frozen=True)
class MmaTurn:
    """Two consumer warpgroups taking turns to issue their MMAs (ping-pong's *ordered barrier*).

    Warpgroup w waits on barrier ``MMA_TURN + w`` before its first MMA of a tile and passes the
    turn on by arriving on the other's, ``MMA_TURN + 1 - w``, once its MMAs are issued. Each
    barrier completes with 256 threads: the 128 that wait (``bar.sync``) and the 128 that arrive
    (``bar.arrive``). Every tile passes the turn on, the last one too: the warpgroup that would
    own the item after the CTA's last takes that turn at the end of its walk, so no arrive is
    left over at exit (``hopper_gemm_pingpong``'s docstring says why).
    """

    warpgroup: int

    def wait(self):
        cute.arch.barrier(barrier_id=Barrier.MMA_TURN + self.warpgroup, number_of_threads=256)

    def pass_on(self):
        cute.arch.barrier_arrive(barrier_id=Barrier.MMA_TURN + 1 - self.warpgroup, number_of_threads=256)
