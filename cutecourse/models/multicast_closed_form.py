"""TMA multicast's closed form: the formula a kernel can afford, when it holds, where it fails.

:class:`~cutecourse.models.multicast.Plan` answers "which CTAs load the same tile, who issues,
with which mask" by brute force, from the definition. A kernel cannot loop over tiles to find
out: it computes its masks from its rank alone, ``(2**C - 1) << ...`` for the operand whose
sharers are adjacent in rank and a comb for the other, which is only right under divisibility
conditions (the nvFuser multicast issue, NVIDIA/Fuser#3689). This module is that half of the
planner, mixed into ``Plan``: :meth:`ClosedFormMixin.closed_form`, its text, its
:meth:`~ClosedFormMixin.conditions`, and the :meth:`~ClosedFormMixin.differences` from the brute
force, so a learner can see the conditions bite (e.g. a persistent grid of 127 CTAs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..errors import ShapeError

#: ctaMask is 16 bits wide: multicast reaches the first 16 CTAs of a cluster, no more.
MASK_BITS = 16
Operand = Literal["A", "B"]


@dataclass(frozen=True)
class ClosedForm:
    """The formula answer for one rank: the mask, the single-issuer predicate and the slice."""

    operand: str
    rank: int
    mask: int
    single_issuer: bool  # nvFuser's predicate: this rank issues the whole box
    slice_index: int  # CUTLASS: this rank issues slice ``slice_index`` of ``slice_count``
    slice_count: int


@dataclass(frozen=True)
class Condition:
    text: str
    holds: bool

    def __repr__(self) -> str:
        return f"[{'ok' if self.holds else 'FAILS'}] {self.text}"


@dataclass(frozen=True)
class Difference:
    """Where the closed form and the brute force disagree, for one rank in one wave."""

    operand: str
    cluster: int
    wave: int
    rank: int
    brute_mask: int
    closed_mask: int
    why: str

    def __repr__(self) -> str:
        return (f"{self.operand}: cluster {self.cluster}, wave {self.wave}, rank {self.rank}: "
                f"brute force {fmt_mask(self.brute_mask)} vs closed form "
                f"{fmt_mask(self.closed_mask)} ({self.why})")


def bits(mask: int) -> list[int]:
    """The ranks whose bit is set in ``mask``, lowest first."""
    return [r for r in range(MASK_BITS) if mask >> r & 1]


def fmt_mask(mask: int, width: int = 4) -> str:
    """``0b0101``-style, at least ``width`` bits, the way PTX's ctaMask reads (bit 0 = rank 0)."""
    return "0b" + format(mask, f"0{width}b")


def _check_operand(operand: str) -> None:
    if operand not in ("A", "B"):
        raise ShapeError(f"operand must be 'A' or 'B', got {operand!r}",
                         "A is shared along N (same rows of C), B along M (same columns)")



class ClosedFormMixin:
    """The closed-form half of ``multicast.Plan`` (it provides ``cluster``, ``order``, ``tiles``,
    ``grid``, ``mask``, ``needs``, ``ranks``, ``output_tile``...)."""

    def closed_form(self, operand: Operand, rank: int) -> ClosedForm:
        """What a kernel computes from its rank alone (no tables, no loops over tiles).

        Whichever operand is shared by CTAs *adjacent in rank* gets the contiguous mask
        ``(2**C - 1) << (rank // C * C)``; the other operand's sharers sit ``C`` ranks apart and
        its mask is a comb ``sum(1 << (rank % C + j*C))``.
        """
        _check_operand(operand)
        cm_size, cn_size = self.cluster
        # Sharers of A sit along N (same rows of C), sharers of B along M (same columns).
        along = cn_size if operand == "A" else cm_size
        # In the rank numbering, is the operand's group contiguous or a comb?
        contiguous = (self.order == "cluster") == (operand == "B")
        inner = cm_size if self.order == "cluster" else cn_size  # fastest-varying cluster dim
        if contiguous:
            mask = (2 ** along - 1) << (rank // along * along)
            index = rank % along
        else:
            mask = sum(1 << (rank % inner + j * inner) for j in range(along))
            index = rank // inner
        return ClosedForm(operand, rank, mask, index == 0, index, along)

    def closed_form_text(self, operand: Operand) -> str:
        """The closed form as the formula a kernel would write."""
        cm_size, cn_size = self.cluster
        along = cn_size if operand == "A" else cm_size
        contiguous = (self.order == "cluster") == (operand == "B")
        inner = cm_size if self.order == "cluster" else cn_size
        if contiguous:
            return (f"mask = (2**{along} - 1) << (rank // {along} * {along}); "
                    f"issuer: rank % {along} == 0; slice rank % {along} of {along}")
        return (f"mask = sum(1 << (rank % {inner} + j*{inner}) for j < {along}); "
                f"issuer: rank // {inner} == 0; slice rank // {inner} of {along}")

    def conditions(self, operand: Operand) -> list[Condition]:
        """When :meth:`closed_form` equals the brute force for ``operand``, for every cluster,
        wave and rank of this launch (the tests sweep many shapes to back this up)."""
        _check_operand(operand)
        mt, nt, _ = self.tiles
        cm_size, cn_size = self.cluster
        s, g = self.cluster_size, self.grid
        out = [
            Condition(f"M tiles {mt} % CM {cm_size} == 0 (no cluster tile hangs over the edge)",
                      mt % cm_size == 0),
            Condition(f"N tiles {nt} % CN {cn_size} == 0 (no cluster tile hangs over the edge)",
                      nt % cn_size == 0),
        ]
        if self.order == "cluster" or operand == "B":
            out.append(Condition(f"grid {g} % cluster size {s} == 0 (whole clusters; in the "
                                 "linear order each cluster is then exactly one tile group)",
                                 g % s == 0))
        else:  # the nvFuser issue's two conditions for A in the linear order
            out.append(Condition(f"grid {g} % CN {cn_size} == 0 (the groups of CN do not shift "
                                 "from one wave to the next)", g % cn_size == 0))
            out.append(Condition(f"cluster size {s} % CN {cn_size} == 0 (nor from one cluster "
                                 "to the next)", s % cn_size == 0))
        return out

    def differences(self, operand: Operand, k_tiles: int | None = None) -> list[Difference]:
        """Every working CTA (cluster, wave, rank) whose closed-form mask differs from the brute
        force: its formula names a CTA that needs another tile, has none, or does not exist (a
        partial cluster), or leaves out one that needs the same tile. Idle CTAs load nothing."""
        _check_operand(operand)
        out = []
        ks = range(min(self.tiles[2], k_tiles or self.tiles[2]))
        for wave in range(self.waves):
            for cluster in range(self.num_clusters):
                for rank in self.ranks(cluster):
                    if self.output_tile(cluster, wave, rank) is None:
                        continue  # an idle CTA issues nothing, whatever its formula says
                    closed = self.closed_form(operand, rank).mask
                    for k in ks:
                        brute = self.mask(operand, cluster, wave, rank, k)
                        if brute != closed:
                            out.append(Difference(operand, cluster, wave, rank, brute, closed,
                                                  self._why(operand, cluster, wave, rank, closed)))
                            break
        return out

    def _why(self, operand: str, cluster: int, wave: int, rank: int, closed: int) -> str:
        mine = self.needs(cluster, wave, rank, 0)
        parts = []
        for r in bits(closed):
            other = self.needs(cluster, wave, r, 0)
            if r not in self.ranks(cluster):
                parts.append(f"rank {r} does not exist: the last cluster is partial")
            elif other is None:
                parts.append(f"rank {r} has no tile")
            elif other[operand] != mine[operand]:
                parts.append(f"rank {r} needs {operand} tile {other[operand][0]}, "
                             f"not {mine[operand][0]}")
        for r in bits(self.mask(operand, cluster, wave, rank)):
            if not closed >> r & 1:
                parts.append(f"rank {r} needs the same tile but is not in the formula's mask")
        return "; ".join(parts)
