"""Every tile order of the kernels' scheduler tables (each kernel class's ``SCHEDULERS``: the dense
persistent kernels' ``tile_scheduler.SCHEDULERS``, stream-K's, the grouped kernels' in
``group_walk``), the FP8 grouped kernel classes by name (``grouped.FP8_KERNELS``), and every op of
``epilogue_op.py``, in the kernels that take it: the tests "Adding a scheduler" and "Adding an
epilogue op" in docs/DEVELOPING.md send a contributor to. They walk the package's own tables, so
a class added to them is tested here as it is, with no edit of this file: its order on the CPU
(every C tile exactly once), then a compile for sm_90a (sm_100a for the Blackwell kernel) of each
kernel that takes it, by name, on the CPU.
"""

import inspect
import re

import pytest

from cutecourse.errors import CourseError
from cutecourse.inspect import compile_report
from cutecourse.kernels import epilogue_op, group_walk, grouped, registry, tile_scheduler

GROUPED = "cutecourse.kernels.grouped_targets"


# -- the tile orders ----------------------------------------------------------------------------------
def _takes_a_scheduler(entry, params) -> bool:
    return hasattr(type(entry.kernel(**params)), "SCHEDULERS")


#: Every entry whose kernel takes ``scheduler=``: label -> (entry, compile target, arch, keywords).
#: The dense GEMMs of the registry (those with a scheduler), the grouped bf16 GEMM, each FP8 class,
#: the Blackwell GEMM.
SCHEDULED = {label: spec for label, spec in {
    **{f"dense/{name}": (registry.entry(name), registry.target(name), "sm_90a", {}) for name in registry.DENSE},
    "grouped/bf16": (grouped.HOPPER, f"{GROUPED}:hopper", "sm_90a", {}),
    **{f"grouped/fp8-{v}": (grouped.FP8, f"{GROUPED}:hopper_fp8", "sm_90a", dict(variant=v))
       for v in grouped.FP8_KERNELS},
    "grouped/blackwell": (grouped.BLACKWELL, f"{GROUPED}:blackwell", "sm_100a", {}),
}.items() if _takes_a_scheduler(spec[0], spec[3])}


def _table(label):
    entry, _, _, params = SCHEDULED[label]
    return type(entry.kernel(**params)).SCHEDULERS


#: (kernel, name) for every name of every such kernel's table.
NAMED = [(label, name) for label in SCHEDULED for name in _table(label)]
#: Every tile order of those tables, once: (its table's module : name) -> class.
ORDERS = {f"{cls.__module__.rsplit('.', 1)[-1]}:{name}": cls
          for label in SCHEDULED for name, cls in _table(label).items()}


def test_every_scheduler_family_has_a_table():
    """The dense persistent kernels, stream-K and every grouped kernel take names; the one-CTA
    and cluster kernels have no scheduler (they order tiles by ``group_m`` alone)."""
    assert {"dense/persistent", "dense/pingpong", "dense/directstore", "dense/streamk", "grouped/bf16",
            "grouped/blackwell"} | {f"grouped/fp8-{v}" for v in grouped.FP8_KERNELS} == set(SCHEDULED)
    assert {"tile_scheduler:static", "tile_scheduler:dynamic", "stream_k_scheduler:static",
            "group_walk:static"} <= set(ORDERS)


def _scheduler(cls, clusters_m, clusters_n, cluster_mn=(1, 1), in_cluster=(0, 0)):
    """A scheduler of class ``cls`` for a grid of cluster tiles, built as the kernels build it
    (``cls(**fields)``) for the CTA at ``in_cluster`` in its cluster of ``cluster_mn`` CTAs: the
    fields of the walk by name, any other field of its ``Params`` its default or None (the kernel's
    tensors, e.g. the dynamic scheduler's queue: no order reads them)."""
    dense = dict(first=0, stride=1, clusters_m=clusters_m, clusters_n=clusters_n, total=clusters_m * clusters_n,
                 k_tiles=4, group_m=2, cluster_mn=cluster_mn, in_cluster=in_cluster)
    return cls(**{f: dense.get(f, cls.Params._field_defaults.get(f)) for f in cls.Params._fields})


def _ctas_tiles(cls, clusters_m, clusters_n, cluster_mn):
    """Every CTA tile the walk gives, over the work items 0 .. total - 1 and every CTA of a cluster:
    ``tile_of`` on Python ints (the kernel runs the same arithmetic on Int32). A group walk's
    ``tile_of`` gives the cluster tile inside a group; its ``work_tile`` adds the CTA's place, as here."""
    cm, cn = cluster_mn
    tiles = []
    for place in [(i, j) for i in range(cm) for j in range(cn)]:
        s = _scheduler(cls, clusters_m, clusters_n, cluster_mn, place)
        for w in range(clusters_m * clusters_n):
            if issubclass(cls, group_walk.GroupScheduler):
                m, n = (int(i) for i in s.tile_of(w, clusters_m, clusters_n))
                tiles.append((m * cm + place[0], n * cn + place[1]))
            else:
                tiles.append(tuple(int(i) for i in s.tile_of(w)))
    return tiles


def _clusters(cls):
    """The clusters a scheduler serves: 1x1 only if it says why not (``PER_CTA``), else 2x1 and 1x2 too."""
    return [(1, 1)] if getattr(cls, "PER_CTA", None) else [(1, 1), (2, 1), (1, 2)]


@pytest.mark.parametrize("order", sorted(ORDERS))
@pytest.mark.parametrize("clusters_m,clusters_n", [(3, 2), (7, 5), (1, 4), (16, 3)])
def test_a_schedulers_order_visits_every_tile_once(order, clusters_m, clusters_n):
    """On 1x1, 2x1 and 1x2 clusters: the tiles of all the cluster's CTAs over the walk are C's
    tiles (the grid's, or one group's), each once. An order that ignores the CTA's place in its
    cluster gives every CTA of a cluster the same tile, and fails here."""
    cls = ORDERS[order]
    for cluster_mn in _clusters(cls):
        tiles = _ctas_tiles(cls, clusters_m, clusters_n, cluster_mn)
        rows, cols = clusters_m * cluster_mn[0], clusters_n * cluster_mn[1]
        assert sorted(tiles) == [(m, n) for m in range(rows) for n in range(cols)], (order, cluster_mn, tiles)


def test_an_order_that_ignores_the_ctas_place_in_its_cluster_fails_the_walk():
    """The control of the test above: column-major cluster tiles, every CTA of a cluster given
    the cluster's first tile."""

    class Columns(tile_scheduler.StaticScheduler):
        def tile_of(self, work):
            return ((work % self.clusters_m) * self.cluster_mn[0], (work // self.clusters_m) * self.cluster_mn[1])

    assert sorted(_ctas_tiles(Columns, 3, 2, (1, 1))) == [(m, n) for m in range(3) for n in range(2)]
    tiles = _ctas_tiles(Columns, 3, 2, (2, 1))
    assert len(set(tiles)) == 6 < len(tiles) == 12  # each tile twice, half of C never


@pytest.mark.parametrize("kernel,name", NAMED)
def test_a_scheduler_compiles_in_every_kernel_that_takes_it(kernel, name):
    """By name, through the kernel's entry (as a launcher, ``compile_report`` or a notebook pass it).
    The family's default order is the kernel built with no ``scheduler=`` (the same key: the same
    code); another one keeps the default's loops (the scheduler is carried through every role's
    loop): the same MMAs, TMA traffic and tensor-map rewrites, no spills."""
    entry, target, arch, params = SCHEDULED[kernel]
    chosen, default = entry.kernel(scheduler=name, **params), entry.kernel(**params)
    assert chosen.Scheduler is _table(kernel)[name]
    if chosen.Scheduler is default.Scheduler:
        assert chosen.key() == default.key()
        return
    r = compile_report(target, arch=arch, scheduler=name, **params)
    base = compile_report(target, arch=arch, **params)
    for what in ("wgmma", "tcgen05", "TMA loads", "TMA stores", "tensormap.replace"):
        assert r.count(what) == base.count(what), (name, kernel, what)
    assert r.spill_bytes == 0, (name, kernel)


def _names(module):
    """The names of ``module.SCHEDULERS`` as a refusal lists them (whatever names the table holds)."""
    return re.escape(", ".join(repr(name) for name in module.SCHEDULERS))


def test_a_name_added_to_a_familys_table_reaches_every_kernel_of_the_family(monkeypatch):
    """One table per family: a grouped order named in ``group_walk.SCHEDULERS`` is taken by name by
    the Hopper bf16, every FP8 and the Blackwell kernel; a name of another family's table is
    refused, with the names that fit."""

    class RowByRow(group_walk.GroupScheduler):
        def tile_of(self, item, rows, cols):
            return item // cols, item % cols

    monkeypatch.setitem(group_walk.SCHEDULERS, "rows", RowByRow)
    grouped_kernels = [label for label in SCHEDULED if label.startswith("grouped/")]
    for label in grouped_kernels:
        entry, _, _, params = SCHEDULED[label]
        assert entry.kernel(scheduler="rows", **params).Scheduler is RowByRow, label
        with pytest.raises(CourseError, match=r"(?s)scheduler='dynamic' is not a name .*" + _names(group_walk)):
            entry.kernel(scheduler="dynamic", **params)
    with pytest.raises(CourseError, match=r"(?s)'rows' is not a name PersistentHopperGemm takes.*"
                       + _names(tile_scheduler)):
        registry.entry("persistent").kernel(scheduler="rows")
    assert "rows" not in tile_scheduler.SCHEDULERS


# -- the FP8 kernel classes --------------------------------------------------------------------------
def test_the_fp8_classes_are_picked_by_name_and_parts_spells_two_of_them():
    """``variant=`` names a class of ``grouped.FP8_KERNELS`` (the one way a class is picked by an
    argument, as the one-CTA kernel's); ``parts=1|2`` is another spelling of "onepart"/"twopart"."""
    assert set(grouped.FP8_PARTS.values()) <= set(grouped.FP8_KERNELS)
    for name, cls in grouped.FP8_KERNELS.items():
        assert type(grouped.FP8.kernel(variant=name)) is cls
    for parts, name in grouped.FP8_PARTS.items():
        assert type(grouped.FP8.kernel(parts=parts)) is grouped.FP8_KERNELS[name]
        assert type(grouped.fp8_kernel(variant=name, parts=parts, sms=132)) is grouped.FP8_KERNELS[name]
    assert type(grouped.FP8.kernel()) is grouped.FP8_KERNELS["onepart"]  # the default
    with pytest.raises(CourseError, match="variant= one of 'onepart', 'twopart'"):
        grouped.FP8.kernel(variant="threepart")
    with pytest.raises(CourseError, match="parts=2 is variant='twopart'"):
        grouped.FP8.kernel(variant="onepart", parts=2)


# -- the epilogue ops ---------------------------------------------------------------------------------
#: Every op class of epilogue_op.py (the identity ``EpilogueOp`` itself aside).
OPS = sorted(name for name, v in vars(epilogue_op).items()
             if inspect.isclass(v) and issubclass(v, epilogue_op.EpilogueOp) and v is not epilogue_op.EpilogueOp)

#: Every kernel that takes ``epilogue_op=``: (compile target, arch, keywords, grouped?).
KERNELS = {
    **{f"dense/{name}": (registry.target(name), "sm_90a", {}, False) for name in registry.DENSE},
    "grouped/bf16": (f"{GROUPED}:hopper", "sm_90a", {}, True),
    **{f"grouped/fp8-{v}": (f"{GROUPED}:hopper_fp8", "sm_90a", dict(variant=v), True) for v in grouped.FP8_KERNELS},
    "grouped/blackwell": (f"{GROUPED}:blackwell", "sm_100a", {}, True),
    "mixed": ("cutecourse.kernels.mixed_input:compile_target", "sm_90a", dict(tile_m=16), False),
    "mixed/split": ("cutecourse.kernels.mixed_input:compile_target", "sm_90a", dict(tile_m=8, split_k=True), False),
}


def test_the_op_table_is_the_modules_classes():
    assert {"Relu", "AddBias"} <= set(OPS)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_an_op_compiles_in_every_kernel_that_takes_it(op, kernel):
    """Built with no arguments (an op's keywords need defaults here); a grouped kernel refuses a
    per-row operand (``grouped_launch.refuse_row_operands``), with the message a caller gets."""
    target, arch, params, is_grouped = KERNELS[kernel]
    try:
        getattr(epilogue_op, op)()
    except TypeError as e:
        pytest.fail(f"{op}() cannot be built without arguments ({e}): give its keywords defaults")
    if is_grouped and any(o.kind == "row" for o in epilogue_op.described(getattr(epilogue_op, op)())):
        with pytest.raises(CourseError, match="grouped GEMM"):
            compile_report(target, arch=arch, epilogue_op=op, **params)
        return
    r = compile_report(target, arch=arch, epilogue_op=op, **params)
    assert r.spill_bytes == 0, (op, kernel)
