"""The course kernels' hooks that the kernel exercises of notebooks 03-05 write.

An exercise that writes one part of a mainloop must not print the other parts in its skeleton:
the neighbouring exercise asks for them. The course kernels are cut into those parts already
(public hooks, ``kernels/hopper_gemm.py``), so an exercise subclasses a course kernel and
overrides one hook, and the others are the course's own code:

* :data:`PrefetchParts` (notebook 03) is ``HopperGemm``: its ``mainloop`` calls ``fill_ring``
  (the prologue, Exercise 5), then per k-tile ``consume`` and the refill, then ``drain``
  (``consume`` and ``drain``: Exercise 4).
* :data:`CompilerParts` (notebook 04) is ``CompilerHopperGemm``: Exercise 3 rewrites its
  ``mainloop``, Exercise 4 its ``states(k)``, the consumer's and the producer's pipeline state of
  k-tile ``k``.
* :class:`MaskedCluster` (notebook 05): ``ClusterHopperGemm`` whose loads multicast with the masks
  ``_masks()`` returns (Exercise 4 writes ``_masks``); the loads are the course's own.

Pipeline states go in and come back out (``prod = self.fill_ring(..., prod, ...)``): a value
changed inside a traced ``if`` or loop is rebuilt by the DSL, so a part hands back the state it
advanced rather than relying on the caller's object being changed in place (:data:`RETURNS`).
"""

from __future__ import annotations

import dataclasses

from ..kernels import sm90
from ..kernels.hopper_gemm import CompilerHopperGemm, HopperGemm
from ..kernels.hopper_gemm_cluster import ClusterHopperGemm

#: notebook 03: the prefetch mainloop, in parts
PrefetchParts = HopperGemm
#: notebook 04: the compiler-pipelined mainloop, its states from ``states(k)``
CompilerParts = CompilerHopperGemm
#: part -> what it must hand back (``return ...``)
RETURNS = {"fill_ring": "prod", "consume": "cons, released", "states": "cons, prod"}


class MaskedCluster(ClusterHopperGemm):
    """``ClusterHopperGemm`` whose loads multicast with the masks of ``_masks()``."""

    def _masks(self):
        _, _, a_mask, b_mask = sm90.multicast_masks(self.cluster_mn)
        return a_mask, b_mask

    def load(self, ring, loads, state, pred=None):
        a_mask, b_mask = self._masks()
        super().load(ring, dataclasses.replace(loads, a_mcast_mask=a_mask, b_mcast_mask=b_mask), state, pred)
