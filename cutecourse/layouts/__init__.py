"""CuTe layouts evaluated by CuTe itself, on the CPU, as tables a picture can be drawn from.

API (what notebooks 01/02 and ``cutecourse.viz`` use)::

    from cutecourse import layouts
    t = layouts.evaluate("((2,2),(3,4)):((1,6),(2,12))")  # text, as CuTe prints a layout
    t = layouts.evaluate((4, 8), (8, 1))                   # shape, stride (stride optional:
    t = layouts.evaluate("(4,8)")                          #   then compact column-major, as CuTe)
    t.layout          # '((2,2),(3,4)):((1,6),(2,12))'  CuTe's own printout of the layout
    t.shape, t.stride # nested tuples of ints
    t.coords[i]       # the natural coordinate of flat index i (mode 0 fastest)
    t.offsets[i]      # CuTe's layout(coords[i])
    t.offset(((1, 0), (2, 1)))  # one coordinate (bounds-checked)
    t.grid()          # numpy array: row = mode 0, column = mode 1 (modes 1.. folded)
    t.cell(r, c)      # (coordinate, flat index, offset) of one cell of that grid
    print(t.text())   # the grid as text, like CuTe's print_layout
    layouts.composition(a, b)          layouts.logical_divide(a, tiler)
    layouts.zipped_divide(a, tiler)    layouts.tiled_divide(a, tiler)
    layouts.slice_(a, (None, 1))       layouts.make_layout_tv(thr, val) -> TVTable
    layouts.evaluate(L)  # inside your own @cute.jit function, with a cute.Layout you built
    layouts.run_on_host(fn)  # run fn() inside a host-side @cute.jit trace, return its result
    layouts.trace(my_jit_fn, *args)  # trace your own @cute.jit function (its prints) without
                                     # compiling it: the way to print layouts on any machine

Anything a layout, a tiler or a coordinate can be is accepted in text form or as tuples; bad
input raises :class:`cutecourse.errors.LayoutError` saying what is wrong and what to try.

How CuTe evaluates a layout on a machine without a GPU
------------------------------------------------------
A ``@cute.jit`` function is Python that the DSL *traces*: it runs the body once, and every
CuTe operation it meets becomes an operation of CuTe's MLIR dialect. When a layout's shape and
stride are compile-time constants (plain Python ints) CuTe folds those operations while
tracing: ``L((1, 2))`` returns a Python ``int``, ``cute.zipped_divide(L, (2, 2))`` returns a
layout whose printout is already the answer. So one trace of one host function that builds a
layout and applies it to every coordinate gives the whole table, computed by CuTe's own
algebra. Nothing has to run on a GPU, and nothing even has to be compiled: the trace is all
we need, so the trace runs with the DSL's "dry run" switch on (the ``CUTE_DSL_DRYRUN``
setting: generate the IR, skip compilation). That also keeps these tables independent of
the artifact settings ``cutecourse`` chooses for kernels (``CUTE_DSL_KEEP``). One trace per
layout (about 60 µs per coordinate), and results are cached per layout.

Where things are: ``int_tuple`` (pure-Python IntTuple arithmetic), ``parse`` (the text form and
its error messages), ``host_trace`` (the one host-side trace), ``table`` (:class:`LayoutTable`,
:func:`evaluate`), ``ops`` (composition, the divides, slicing), ``tv`` (:class:`TVTable`,
:func:`make_layout_tv`). Everything public is importable from ``cutecourse.layouts`` itself.
"""

from ..errors import LayoutError
from .host_trace import dry_run, in_jit, run_on_host, trace
from .int_tuple import (IntTuple, compact_col_major, congruent, crd2idx, flatten, idx2crd,
                        inner_product, python_offsets, size, to_text)
from .ops import (DIVIDES, composition, logical_divide, parse_slice, parse_tiler, run_op, slice_,
                  tiled_divide, tiler_text, zipped_divide)
from .parse import check_layout, parse_int_tuple, parse_layout
from .table import MAX_COORDS, LayoutTable, evaluate, layout_args, tabulate
from .tv import TVTable, make_layout_tv

__all__ = ["DIVIDES", "IntTuple", "LayoutError", "LayoutTable", "MAX_COORDS", "TVTable",
           "check_layout", "compact_col_major", "composition", "congruent", "crd2idx", "dry_run",
           "evaluate", "flatten", "idx2crd", "in_jit", "inner_product", "layout_args",
           "logical_divide", "make_layout_tv", "parse_int_tuple", "parse_layout", "parse_slice",
           "parse_tiler", "python_offsets", "run_on_host", "run_op", "size", "slice_", "tabulate",
           "tiled_divide", "tiler_text", "to_text", "trace", "zipped_divide"]
