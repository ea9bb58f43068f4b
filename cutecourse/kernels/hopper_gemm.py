"""The course's Hopper GEMM, one CTA per C tile: its mainloops, the table of them, its entry points.

The kernel is ``hopper_gemm_kernel.HopperGemm`` (TMA ring, WGMMA, epilogue; its mainloop is the
prefetch one). The teaching variants differ **only in the mainloop**: each is a subclass that
overrides ``mainloop`` (or one step of it), so a notebook can show them as diffs: ``HopperGemm`` is
``prefetch`` (a prologue fills the ring, then k-tile k is computed while TMA loads k + stages - 1),
``NaiveHopperGemm`` ``naive`` (every TMA latency exposed), ``CompilerHopperGemm`` ``compiler`` (the
compiler pipelines the naive steps: docs/hopper_gemm.md); notebook 04's ``GuardedCompilerHopperGemm``
and ``OverlapCompilerHopperGemm`` change one step of that loop.

Entry points (``ENTRY``): ``gemm``, ``launcher``, ``compile_target``, ``validate``; ``variant=``
names a class of ``VARIANTS`` or ``DEMO_VARIANTS``. A new mainloop is a subclass written here and
added to one of those tables: the launchers' ``variant=``, the cluster twin
(``hopper_gemm_cluster.on_clusters``), the PTX fingerprints and the tests follow them.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass.cute.nvgpu import warpgroup

from . import gemm_launch, sm90
from .configured import pick
from .hopper_gemm_kernel import GROUP_M, WARPGROUPS, HopperGemm, default_prefetch

__all__ = ["GROUP_M", "WARPGROUPS", "HopperGemm", "default_prefetch", "NaiveHopperGemm", "CompilerHopperGemm",
           "GuardedCompilerHopperGemm", "OverlapCompilerHopperGemm", "VARIANTS", "DEMO_VARIANTS",
           "all_variants", "variant_class", "variant_gemm", "ENTRY", "compile_target", "validate",
           "launcher", "gemm"]


# -- the other mainloops: each variant is a subclass that overrides ``mainloop`` (or one step) --
class NaiveHopperGemm(HopperGemm):
    LOAD_PLACES = 1  # one loop body
    @cute.jit
    def mainloop(self, ring, loads, mma, k_tiles, is_producer):
        """Variant "naive": load k-tile k, wait for it, compute it, release it. No overlap at all.

        The pipeline state (stage index and phase bit) is a function of k: stage k % stages,
        and the phase flips each time the ring wraps around.
        """
        for k in cutlass.range(k_tiles, unroll=1):
            stage, phase = k % self.stages, (k // self.stages) % 2
            cons = pipeline.PipelineState(self.stages, k, stage, phase)
            prod = pipeline.PipelineState(self.stages, k, stage, phase ^ 1)  # empty barriers start "free"
            if is_producer:
                ring.producer_acquire(prod)  # wait until the stage is empty, expect its bytes
                self.load(ring, loads, prod)
            ring.consumer_wait(cons)  # wait until its bytes have landed: the full TMA latency
            sm90.issue_mma(mma, cons.index)
            warpgroup.wait_group(0)  # the MMAs read smem until they finish
            ring.consumer_release(cons)


class CompilerHopperGemm(HopperGemm):
    """Variant "compiler": the naive loop, plus ``prefetch_stages``; the compiler writes the prologue.

    Two changes from the naive loop make the compiler's software pipeliner take it:

    * ``prefetch_stages=P``: issue the TMA loads of k-tile k + P in iteration k (a prologue
      loads tiles 0..P-1, a drain loop computes the last P tiles).
    * the TMA copies sit at the top level of the loop body, not inside ``if is_producer``.
      The pass splits the body at a TMA copy paired with a wait on the same mbarrier and
      does not look inside an ``if``; so the copies are predicated (``pred=``) instead, and
      still only warp 0 issues them. Only the barrier bookkeeping stays under the ``if``.

    Notebook 04's two other loops are this one with one step changed: ``produce``
    (``GuardedCompilerHopperGemm``) and ``retire`` / ``retire_last`` (``OverlapCompilerHopperGemm``).
    """

    @cute.jit
    def mainloop(self, ring, loads, mma, k_tiles, is_producer):
        """The naive loop's steps, the states from ``states(k)``, in a loop the compiler pipelines."""
        producer_only = cute.make_rmem_tensor((1,), cutlass.Boolean)
        producer_only[0] = is_producer
        for k in cutlass.range(k_tiles, prefetch_stages=self.prefetch, unroll=1):
            cons, prod = self.states(k)
            self.produce(ring, loads, prod, is_producer, producer_only)
            ring.consumer_wait(cons)
            sm90.issue_mma(mma, cons.index)
            self.retire(ring, k, cons)
        self.retire_last(ring, k_tiles)

    @cute.jit
    def states(self, k):
        """(consumer state, producer state) of k-tile ``k``, from ``k`` alone: nothing is carried
        from one iteration to the next, so the compiler can compute iteration k + P's ahead."""
        stage, phase = k % self.stages, (k // self.stages) % 2
        return (pipeline.PipelineState(self.stages, k, stage, phase),
                pipeline.PipelineState(self.stages, k, stage, phase ^ 1))

    @cute.jit
    def produce(self, ring, loads, prod, is_producer, producer_only):
        """Warp 0 acquires the stage; the copies stand outside the ``if``, predicated instead."""
        if is_producer:
            ring.producer_acquire(prod)
        self.load(ring, loads, prod, pred=producer_only)

    @cute.jit
    def retire(self, ring, k, cons):
        """After k-tile ``k``'s MMAs are issued: wait for them all, release their stage."""
        warpgroup.wait_group(0)
        ring.consumer_release(cons)

    @cute.jit
    def retire_last(self, ring, k_tiles):
        """After the loop: nothing; every stage was released in its own iteration."""


class GuardedCompilerHopperGemm(CompilerHopperGemm):
    """What NOT to do (variant "compiler_guarded", notebook 04): the copies inside the ``if``.

    That is the naive loop plus ``prefetch_stages`` only. The pipeliner does not look inside an
    ``if``: it prints "software pipelining ('prefetch_stages') skipped ..." and compiles the
    naive loop (one place that loads).
    """
    LOAD_PLACES = 1

    @cute.jit
    def produce(self, ring, loads, prod, is_producer, producer_only):
        if is_producer:
            ring.producer_acquire(prod)
            self.load(ring, loads, prod)


class OverlapCompilerHopperGemm(CompilerHopperGemm):
    """The compiler variant plus the prefetch variant's MMA overlap (variant "compiler_overlap",
    an experiment of notebook 04).

    The compiler pipelines the loads; keeping one wgmma batch in flight across k-tiles is still
    ours to write: wait_group(1), then release the previous k-tile's stage.
    """

    @cute.jit
    def retire(self, ring, k, cons):
        warpgroup.wait_group(1)
        if k > 0:
            j = k - 1
            ring.consumer_release(pipeline.PipelineState(
                self.stages, j, j % self.stages, (j // self.stages) % 2))

    @cute.jit
    def retire_last(self, ring, k_tiles):
        warpgroup.wait_group(0)
        if k_tiles > 0:
            j = k_tiles - 1
            ring.consumer_release(pipeline.PipelineState(self.stages, j, j % self.stages,
                                                         (j // self.stages) % 2))


#: variant name -> its kernel class, in teaching order (the launchers' ``variant=``), then
#: notebook 04's counter-example (a loop the compiler cannot pipeline) and experiment (MMA overlap).
#: A new mainloop goes in one of the two; everything that lists the mainloops reads ``all_variants``.
VARIANTS = {"naive": NaiveHopperGemm, "prefetch": HopperGemm, "compiler": CompilerHopperGemm}
DEMO_VARIANTS = {"compiler_guarded": GuardedCompilerHopperGemm, "compiler_overlap": OverlapCompilerHopperGemm}


def all_variants() -> dict[str, type]:
    """Every one-CTA mainloop by name: ``VARIANTS`` then ``DEMO_VARIANTS`` (read when called, so a
    class added to a table is seen by the entry, the cluster twins and the fingerprints alike)."""
    return {**VARIANTS, **DEMO_VARIANTS}


def variant_class(variant: str) -> type:
    """The kernel class of a variant name (``configured.pick``: a ``CourseError`` listing them for
    another name)."""
    return pick(all_variants(), "variant", variant)


def variant_gemm(variant: str = "prefetch", **kw) -> HopperGemm:
    """The one-CTA kernel of ``variant`` (a name of ``VARIANTS`` or ``DEMO_VARIANTS``), built
    with the constructor's keyword arguments ``kw``: what ``ENTRY`` builds."""
    return variant_class(variant)(**kw)


# The entry points (module docstring); compile_target's report logs the pipeliner's warnings.
ENTRY = gemm_launch.Entry(variant_gemm)
compile_target, validate, launcher, gemm = ENTRY.compile_target, ENTRY.validate, ENTRY.launcher, ENTRY.gemm
