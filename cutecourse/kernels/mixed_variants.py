"""The mixed-input kernel's variants, by name: what ``variant=`` picks in ``mixed_input``.

A variant of :class:`~.hopper_mixed_gemm.HopperMixedGemm` is a subclass that overrides its hooks
(``weights``, ``load``, ``convert``, ``mma``, ``consume``, ``store_tile``) or sets its class
constants (``IN_FLIGHT``, ``CONVERT_MULTIPLIES``), written here and named in one of two tables,
as the one-CTA mainloops are in ``hopper_gemm.py``: ``VARIANTS`` (the course's kernel) or
``DEMO_VARIANTS`` (a counter-example or an experiment). A variant whose PTX lacks a step of the
course kernel's says so in ``PTX_STEPS`` (its register-A wgmmas and bf16x2 multiplies at
``tile_m=16``, one warpgroup; left unset: the course kernel's, which ``tests/test_mixed_variants.py``
holds). ``mixed_input.launcher``, ``mixed_mm`` and ``compile_target`` take the name
(``variant="no_mma"``; ``configured.pick`` refuses another, listing these), and run it with the
course kernel's checks, plan and split-K buffers; a variant means the fused route.

The experiments (``benchmarks/experiments/mixed_ceilings.py``) each leave one step of the work
out, so their y is wrong and only their time counts: the differences place the time. One variant
large enough for its own module is imported here: "deferred_scales" (``mixed_deferred.py``: the
group scales applied to each group's fp32 sum after its wgmmas).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute

from .configured import pick
from .hopper_mixed_gemm import WORDS_K, HopperMixedGemm
from .mixed_deferred import DeferredScalesMixedGemm


class OverlappingMixedGemm(HopperMixedGemm):
    """The counter-example of ``hopper_mixed_gemm.py``'s docstring (variant "overlap"): one chunk's
    wgmmas stay in flight while the next chunk converts. Correct, but ptxas cannot prove it and
    serializes every wgmma (C7513)."""

    IN_FLIGHT = 1


class NoConvertMixedGemm(HopperMixedGemm):
    """No int4 -> bf16 conversion: the wgmmas read whatever the registers hold (an experiment)."""

    PTX_STEPS = (16, 0)

    @cute.jit
    def convert(self, sW, sS, sZ, stage, frag, wg, t, lane_row, chunk: cutlass.Constexpr[int]):
        pass


class NoMmaMixedGemm(HopperMixedGemm):
    """The conversion and no wgmma (an experiment)."""

    PTX_STEPS = (0, 64)

    @cute.jit
    def mma(self, tiled_mma, frag, tCrX, acc, stage, chunk: cutlass.Constexpr[int]):
        pass


class LoadsOnlyMixedGemm(NoConvertMixedGemm, NoMmaMixedGemm):
    """Neither: the consumers wait for each stage and release it, so the time is the TMA stream's
    alone, plus launch, prologue and the split-K epilogue (an experiment)."""

    PTX_STEPS = (0, 0)


class TiledMixedGemm(HopperMixedGemm):
    """The same logical (N, K/8) weights, each TMA box (``rows`` x 32 words) stored contiguously
    (an experiment: does DRAM locality limit the stream?). It reads ``tiled_weights(packed, rows)``,
    not ``packed``: on those, the course kernel's bits."""

    def weights(self, w):
        n, k8 = w.shape
        kt = k8 // WORDS_K
        box = self.rows * WORDS_K
        return cute.make_tensor(w.iterator, cute.make_layout(((self.rows, n // self.rows), (WORDS_K, kt)),
                                                             stride=((WORDS_K, box * kt), (1, box))))


class TiledLoadsOnlyMixedGemm(TiledMixedGemm, LoadsOnlyMixedGemm):
    """The loads-only stream of tile-contiguous weights (an experiment)."""


def tiled_weights(packed, rows: int):
    """``packed`` (torch, (N, K/8) int32) with each (``rows`` x 32 words) box stored contiguously:
    what :class:`TiledMixedGemm` with ``rows`` weight rows a CTA (64 a warpgroup) reads."""
    n, k8 = packed.shape
    return packed.view(n // rows, rows, k8 // WORDS_K, WORDS_K).permute(0, 2, 1, 3).contiguous().view(n, k8)


#: variant name -> its kernel class: the course's kernel, then counter-examples and experiments.
#: A new variant goes in one of the two.
VARIANTS = {"course": HopperMixedGemm}
DEMO_VARIANTS = {"overlap": OverlappingMixedGemm, "no_convert": NoConvertMixedGemm, "no_mma": NoMmaMixedGemm,
                 "loads_only": LoadsOnlyMixedGemm, "tiled": TiledMixedGemm, "tiled_loads_only": TiledLoadsOnlyMixedGemm,
                 "deferred_scales": DeferredScalesMixedGemm}


def all_variants() -> dict[str, type]:
    """Every variant by name: ``VARIANTS`` then ``DEMO_VARIANTS`` (read when called, so a class
    added to a table is seen by the entry and the tests alike)."""
    return {**VARIANTS, **DEMO_VARIANTS}


def variant_class(variant: str) -> type:
    """The kernel class of a variant name (``configured.pick``: a ``CourseError`` listing them for
    another name)."""
    return pick(all_variants(), "variant", variant)


def variant_gemm(variant: str = "course", **kw) -> HopperMixedGemm:
    """The mixed-input kernel of ``variant`` (a name of ``VARIANTS`` or ``DEMO_VARIANTS``), built
    with the constructor's keyword arguments ``kw``: what ``mixed_input.ENTRY`` builds."""
    return variant_class(variant)(**kw)
