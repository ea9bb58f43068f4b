"""What the cluster GEMM really hands CuTe, read back from a trace (no compile, no GPU).

``kernel_facts(cluster)`` traces ``kernels/hopper_gemm_cluster``'s kernel with the DSL's dry-run
switch on (``layouts.host_trace.dry_run``: the IR is generated, nothing is compiled) and spies,
with ``unittest.mock``, on the three CuTe calls that carry the multicast: every TMA load copy
and its ``mcast_mask``, the layout each mask was built from (``cute.make_layout_image_mask``),
and ``PipelineTmaAsync.create`` (the full barrier's bytes, the empty barrier's arrivals). Tests
and notebook 05 hold these facts against the CPU planner (``cutecourse.models.multicast``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from unittest import mock

import cutlass.cute as cute
import cutlass.pipeline as pipeline

from .errors import ShapeError
from .kernels.hopper_gemm_cluster import compile_target
from .layouts import parse_layout, run_on_host
from .layouts.host_trace import dry_run
from .models.gemm_plan import TILE_K


@dataclass
class KernelFacts:
    """The multicast parameters one ``ClusterHopperGemm`` passes to CuTe, for every rank."""

    cluster: tuple[int, int]
    tile: tuple[int, int]
    masks: dict[int, dict[str, int]] = field(default_factory=dict)  # rank -> {"A": m, "B": m}
    tx_count: int = 0  # the full barrier's expected bytes per stage
    empty_arrivals: int = 0  # the empty barrier's arrival count per stage
    multicast_copies: dict[str, int] = field(default_factory=dict)  # operand -> copy call sites
    plain_copies: dict[str, int] = field(default_factory=dict)


def kernel_facts(cluster=(2, 1), tile=(128, 256), variant: str = "prefetch") -> KernelFacts:
    """Trace the kernel for ``cluster`` and record what it hands CuTe.

    Every TMA load copy is recorded with its ``mcast_mask``; a mask that came from
    ``cute.make_layout_image_mask`` is traced back to the layout and mode it was built from and
    evaluated here, with CuTe, for every rank of the cluster (the kernel evaluates it for its own
    rank at run time, from the same layout). ``PipelineTmaAsync.create`` is recorded for the
    full barrier's ``tx_count`` and the empty barrier's arrival count.
    """
    if tile[0] == tile[1]:
        raise ShapeError(f"tile {tile}: kernel_facts tells A's loads from B's by their size",
                         "use a tile whose M and N differ, e.g. (128, 256)")
    jit_fn, args = compile_target(variant=variant, tile=tuple(tile), cluster=tuple(cluster))
    a_elems, b_elems = tile[0] * TILE_K, tile[1] * TILE_K
    built: dict[int, tuple[str, int]] = {}  # id(mask value) -> (layout text, mode)
    copies: list[tuple[str, object]] = []
    created: dict = {}
    real_mask, real_copy, real_create = (cute.make_layout_image_mask, cute.copy,
                                         pipeline.PipelineTmaAsync.create)

    def image_mask(layout, coord, mode, **kw):
        out = real_mask(layout, coord, mode, **kw)
        built[id(out)] = (str(layout), mode)
        return out

    def copy(atom, src, dst, **kw):
        if "mcast_mask" in kw and kw.get("tma_bar_ptr") is not None:
            size = cute.size(dst)
            operand = "A" if size == a_elems else "B" if size == b_elems else "?"
            copies.append((operand, built.get(id(kw["mcast_mask"]), kw["mcast_mask"])))
        return real_copy(atom, src, dst, **kw)

    def create(**kw):
        created.update(kw)
        return real_create(**kw)

    with mock.patch.object(cute, "make_layout_image_mask", image_mask), \
            mock.patch.object(cute, "copy", copy), \
            mock.patch.object(pipeline.PipelineTmaAsync, "create", staticmethod(create)), \
            dry_run():
        cute.compile(jit_fn, *args)

    cm, cn = cluster
    facts = KernelFacts((cm, cn), tuple(tile))
    sources: dict[str, tuple[str, int] | None] = {}
    for operand, mask in copies:
        is_mc = isinstance(mask, tuple)
        bucket = facts.multicast_copies if is_mc else facts.plain_copies
        bucket[operand] = bucket.get(operand, 0) + 1
        sources[operand] = mask if is_mc else None
    shapes = {op: parse_layout(src[0]) for op, src in sources.items() if src is not None}

    def evaluate():
        out = {}
        for op, (shape, stride) in shapes.items():
            lay = cute.make_layout(shape, stride=stride)
            mode = sources[op][1]
            out[op] = [int(real_mask(lay, lay.get_flat_coord(r), mode)) for r in range(cm * cn)]
        return out

    evaluated = run_on_host(evaluate) if shapes else {}
    for r in range(cm * cn):
        # an operand loaded without multicast lands in this CTA only: mask = its own bit
        facts.masks[r] = {op: evaluated[op][r] if op in evaluated else 1 << r for op in "AB"}
    facts.tx_count = int(created["tx_count"])
    facts.empty_arrivals = int(created["consumer_group"].size)
    return facts
