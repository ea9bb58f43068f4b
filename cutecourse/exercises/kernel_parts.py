"""The course kernels cut into the hooks the kernel exercises of notebooks 03-05 write.

An exercise that writes one part of a mainloop must not print the other parts in its skeleton:
the neighbouring exercise asks for them. So each class here is the course kernel with its loop
split into methods; an exercise subclasses it and overrides one method, and the others come from
here (the course's own code, the same instructions as ``HopperGemm``'s loops).

* :class:`PrefetchParts` (notebook 03): ``mainloop_prefetch`` calls ``_fill_ring`` (the
  prologue, Exercise 5), then per k-tile ``_consume`` and the refill, then ``_drain``
  (``_consume`` and ``_drain``: Exercise 4).
* :class:`CompilerParts` (notebook 04): ``mainloop_compiler`` calls ``_states(k)`` (Exercise 4)
  for the consumer's and the producer's pipeline state of k-tile ``k``.
* :class:`MaskedCluster` (notebook 05): ``load`` multicasts with the masks ``_masks()``
  returns (Exercise 4 writes ``_masks``).

Pipeline states go in and come back out (``prod = self._fill_ring(..., prod, ...)``): a value
changed inside a traced ``if`` or loop is rebuilt by the DSL, so a helper hands back the state it
advanced rather than relying on the caller's object being changed in place.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass.cute.nvgpu import warpgroup

from ..kernels import sm90
from ..kernels.hopper_gemm import HopperGemm
from ..kernels.hopper_gemm_cluster import ClusterHopperGemm


def returned(value, method: str, what: str, n: int):
    """``value``, checked while tracing: a part must hand back its states (``return what``)."""
    if value is None or (n > 1 and (not isinstance(value, tuple) or len(value) != n)):
        raise TypeError(f"your {method} returned {value!r:.60}: end it with `return {what}`")
    return value


class PrefetchParts(HopperGemm):
    """``HopperGemm``'s prefetch mainloop as prologue, consumer step, refill and drain."""

    @cute.jit
    def mainloop_prefetch(self, ring, loads, mma, k_tiles, is_producer):
        prod = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        cons = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        released = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        prod = returned(self._fill_ring(ring, loads, prod, k_tiles, is_producer), "_fill_ring", "prod", 1)
        for k in cutlass.range(k_tiles, unroll=1):
            cons, released = returned(self._consume(ring, mma, k, cons, released), "_consume",
                                      "cons, released", 2)
            if is_producer and prod.count < k_tiles:  # refill the stage k-1 just released
                ring.producer_acquire(prod)
                self.load(ring, loads, prod)
                prod.advance()
        self._drain(ring, k_tiles, released)

    @cute.jit
    def _fill_ring(self, ring, loads, prod, k_tiles, is_producer):
        """The prologue: warp 0 loads the first k-tiles before the first MMA; returns ``prod``."""
        if is_producer:
            for _ in cutlass.range(cutlass.min(self.stages - 1, k_tiles), unroll=1):
                ring.producer_acquire(prod)
                self.load(ring, loads, prod)
                prod.advance()
        return prod

    @cute.jit
    def _consume(self, ring, mma, k, cons, released):
        """K-tile ``k``'s MMAs, one group kept in flight; returns ``(cons, released)``."""
        ring.consumer_wait(cons)
        sm90.issue_mma(mma, cons.index)
        warpgroup.wait_group(1)
        cons.advance()
        if k > 0:
            ring.consumer_release(released)
            released.advance()
        return cons, released

    @cute.jit
    def _drain(self, ring, k_tiles, released):
        """After the loop: the last group, then the last stage back to the producer."""
        warpgroup.wait_group(0)
        if k_tiles > 0:
            ring.consumer_release(released)


class CompilerParts(HopperGemm):
    """``HopperGemm``'s compiler-pipelined loop, its two pipeline states from ``_states(k)``."""

    @cute.jit
    def mainloop_compiler(self, ring, loads, mma, k_tiles, is_producer):
        producer_only = cute.make_rmem_tensor((1,), cutlass.Boolean)
        producer_only[0] = is_producer
        for k in cutlass.range(k_tiles, prefetch_stages=self.prefetch, unroll=1):
            cons, prod = returned(self._states(k), "_states", "cons, prod", 2)
            if is_producer:
                ring.producer_acquire(prod)
            self.load(ring, loads, prod, pred=producer_only)
            ring.consumer_wait(cons)
            sm90.issue_mma(mma, cons.index)
            warpgroup.wait_group(0)
            ring.consumer_release(cons)

    @cute.jit
    def _states(self, k):
        """(consumer state, producer state) of k-tile ``k``, from ``k`` alone."""
        stage, phase = k % self.stages, (k // self.stages) % 2
        return (pipeline.PipelineState(self.stages, k, stage, phase),
                pipeline.PipelineState(self.stages, k, stage, phase ^ 1))


class MaskedCluster(ClusterHopperGemm):
    """``ClusterHopperGemm`` whose loads multicast with the masks of ``_masks()``."""

    def _masks(self):
        _, _, a_mask, b_mask = sm90.multicast_masks(self.cluster_mn)
        return a_mask, b_mask

    def load(self, ring, loads, state, pred=None):
        a_mask, b_mask = self._masks()
        bar = ring.producer_get_barrier(state)
        cute.copy(loads.tma_a, loads.tAgA[(None, state.count)], loads.tAsA[(None, state.index)],
                  tma_bar_ptr=bar, mcast_mask=a_mask)
        cute.copy(loads.tma_b, loads.tBgB[(None, state.count)], loads.tBsB[(None, state.index)],
                  tma_bar_ptr=bar, mcast_mask=b_mask)
