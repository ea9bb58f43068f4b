"""Every tile order of ``tile_scheduler.SCHEDULERS`` and every op of ``epilogue_op.py``, in the
kernels that take it: the tests "Adding a scheduler" and "Adding an epilogue op" in
docs/DEVELOPING.md send a contributor to. They walk the package's own tables, so a class added to
them is tested here as it is, with no edit of this file: its order on the CPU (every C tile
exactly once), then a compile for sm_90a (sm_100a for the Blackwell kernel) of each kernel that
takes it, on the CPU.
"""

import inspect

import pytest

from cutecourse.errors import CourseError
from cutecourse.inspect import compile_report
from cutecourse.kernels import epilogue_op, registry, tile_scheduler

#: The dense persistent GEMMs that take ``scheduler=`` by name (stream-K takes its own class).
BY_NAME = ("persistent", "pingpong", "directstore")


# -- the tile orders ----------------------------------------------------------------------------------
def _scheduler(cls, clusters_m, clusters_n, cluster_mn=(1, 1)):
    """A scheduler of class ``cls`` for a grid of cluster tiles, built as the kernels build it
    (``cls(**fields)``): the fields of the walk by name, any other field of its ``Params`` its
    default or None (the kernel's tensors, e.g. the dynamic scheduler's queue: no order reads them)."""
    dense = dict(first=0, stride=1, clusters_m=clusters_m, clusters_n=clusters_n,
                 total=clusters_m * clusters_n, k_tiles=4, group_m=2, cluster_mn=cluster_mn, in_cluster=(0, 0))
    assert set(dense) <= set(tile_scheduler.DenseParams._fields)
    return cls(**{f: dense.get(f, cls.Params._field_defaults.get(f)) for f in cls.Params._fields})


@pytest.mark.parametrize("name", sorted(tile_scheduler.SCHEDULERS))
@pytest.mark.parametrize("clusters_m,clusters_n", [(3, 2), (7, 5), (1, 4), (16, 3)])
def test_a_schedulers_order_visits_every_tile_once(name, clusters_m, clusters_n):
    """``tile_of`` on Python ints (the kernel runs the same arithmetic on Int32): the work items
    0 .. total - 1 are the grid's C tiles, each once."""
    s = _scheduler(tile_scheduler.SCHEDULERS[name], clusters_m, clusters_n)
    tiles = [tuple(int(i) for i in s.tile_of(w)) for w in range(clusters_m * clusters_n)]
    assert sorted(tiles) == [(m, n) for m in range(clusters_m) for n in range(clusters_n)], (name, tiles)


@pytest.mark.parametrize("name", sorted(tile_scheduler.SCHEDULERS))
@pytest.mark.parametrize("kernel", BY_NAME)
def test_a_scheduler_compiles_in_every_kernel_that_takes_it(name, kernel):
    """The same loops as the static order (the scheduler is carried through every role's loop):
    the same MMAs and TMA traffic, no spills."""
    r = compile_report(registry.target(kernel), arch="sm_90a", scheduler=name)
    static = compile_report(registry.target(kernel), arch="sm_90a", scheduler="static")
    for what in ("wgmma", "TMA loads", "TMA stores"):
        assert r.count(what) == static.count(what), (name, kernel, what)
    assert r.spill_bytes == 0, (name, kernel)


# -- the epilogue ops ---------------------------------------------------------------------------------
#: Every op class of epilogue_op.py (the identity ``EpilogueOp`` itself aside).
OPS = sorted(name for name, v in vars(epilogue_op).items()
             if inspect.isclass(v) and issubclass(v, epilogue_op.EpilogueOp) and v is not epilogue_op.EpilogueOp)

#: Every kernel that takes ``epilogue_op=``: (compile target, arch, keywords, grouped?).
KERNELS = {
    **{f"dense/{name}": (registry.target(name), "sm_90a", {}, False) for name in registry.DENSE},
    "grouped/bf16": ("cutecourse.kernels.grouped_targets:hopper", "sm_90a", {}, True),
    "grouped/fp8-parts1": ("cutecourse.kernels.grouped_targets:hopper_fp8", "sm_90a", dict(parts=1), True),
    "grouped/fp8-parts2": ("cutecourse.kernels.grouped_targets:hopper_fp8", "sm_90a", dict(parts=2), True),
    "grouped/blackwell": ("cutecourse.kernels.grouped_targets:blackwell", "sm_100a", {}, True),
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
