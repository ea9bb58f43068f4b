"""Run a learner's notebook-02 TV kernel on numbers, on the CPU: the CPU model of Exercise 3.

The host function builds a TV layout (``make_ordered_layout``, ``make_layout_tv``), divides
A, B, C into tiles (``zipped_divide``) and launches one block per tile; the kernel takes its
block's tile, composes it with the TV layout and slices its thread's values. Those are layout
operations on compile-time constants, so the model evaluates them with CuTe's own algebra
(``cutecourse.layouts.make_layout_tv``, which asks CuTe on the host) and holds numpy arrays for
the tensors: every thread of every block runs, and the checker sees every element of C it
wrote, which elements each thread read and wrote, and whether A and B stayed untouched. The
problem is 32 x 512 fp16: 2 x 2 tiles of (16, 256), values different in every row and column.
"""

from __future__ import annotations

import ast

import numpy as np

from .elementwise_run import KernelFinding, NotModelled, Vec, _flatten, _Shim, _vec, on_cpu

ROWS, COLS = 32, 512


def operands():
    """fp16 A and B (32 x 512), small integers: every product is exact in fp16."""
    r, c = np.meshgrid(np.arange(ROWS), np.arange(COLS), indexing="ij")
    a = ((r * 3 + c * 7) % 9 - 4).astype(np.float16)
    b = ((r * 5 + c * 2) % 7 - 3 + (r % 2) * 0.5).astype(np.float16)
    return a, b


class _Layout:
    """A flat layout the host built: shape and stride (ints)."""

    def __init__(self, shape, stride):
        self.shape, self.stride = tuple(shape), tuple(stride)

    def text(self) -> str:
        return f"({','.join(map(str, self.shape))}):({','.join(map(str, self.stride))})"


def _ordered(shape, order=None):
    """``cute.make_ordered_layout``: the mode with the smallest ``order`` is contiguous."""
    shape = tuple(int(s) for s in shape)
    order = tuple(order) if order is not None else tuple(range(len(shape)))
    stride, step = [0] * len(shape), 1
    for mode in sorted(range(len(shape)), key=lambda i: order[i]):
        stride[mode], step = step, step * shape[mode]
    return _Layout(shape, stride)


class _TV:
    """The TV layout: (thread, value) -> (m, n) of the tile, from CuTe on the host."""

    def __init__(self, table):
        self.table = table
        self.shape = (table.threads, table.values)


def _make_layout_tv(thr, val):
    from .. import layouts

    if not (isinstance(thr, _Layout) and isinstance(val, _Layout)):
        raise NotModelled("make_layout_tv of layouts the model did not build")
    table = layouts.make_layout_tv(thr.text(), val.text())
    return tuple(table.tiler), _TV(table)


class _Tensor:
    """A (32, 512) tensor as the host receives it; ``zipped_divide`` by the tile."""

    def __init__(self, name, arr, log):
        self.name, self.arr, self.log = name, arr, log
        self.shape = arr.shape


class _Divided:
    """``zipped_divide(t, (16, 256))``: ((16, 256), (2, 2)); ``g[((None, None), b)]`` is block
    b's tile (b flat, column-major over the tile grid, as CuTe counts it)."""

    def __init__(self, t: _Tensor, tiler):
        self.t, self.tiler = t, tuple(int(x) for x in tiler)
        if ROWS % self.tiler[0] or COLS % self.tiler[1]:
            raise NotModelled(f"a tile {self.tiler} that does not divide the problem")
        self.grid = (ROWS // self.tiler[0], COLS // self.tiler[1])
        self.shape = (self.tiler, self.grid)

    def __getitem__(self, idx):
        if not (isinstance(idx, tuple) and len(idx) == 2 and idx[0] in ((None, None), None)):
            raise NotModelled(f"{self.t.name} indexed as {idx!r}")
        b = idx[1]
        bm, bn = (int(b) % self.grid[0], int(b) // self.grid[0]) if not isinstance(b, tuple) else map(int, b)
        if not (0 <= bm < self.grid[0] and 0 <= bn < self.grid[1]):
            raise KernelFinding(f"block {self.t.log['block']} takes tile {idx[1]!r} of {self.t.name}, "
                                f"outside its {self.grid[0]} x {self.grid[1]} tiles (CPU model, "
                                f"{ROWS} x {COLS}): index the block's tile with bidx")
        return _Block(self.t, (bm * self.tiler[0], bn * self.tiler[1]), self.tiler)


class _Block:
    def __init__(self, t, origin, tiler):
        self.t, self.origin, self.tiler = t, origin, tiler
        self.shape = tiler


def _composition(block, tv):
    if not (isinstance(block, _Block) and isinstance(tv, _TV)):
        raise NotModelled("a composition of other than a block's tile with the TV layout")
    return _TVView(block, tv)


class _TVView:
    """A block's tile composed with the TV layout: ``[(tidx, None)]`` is one thread's values."""

    def __init__(self, block, tv):
        self.block, self.tv = block, tv
        self.shape = tv.shape

    def _values(self, idx):
        if not (isinstance(idx, tuple) and len(idx) == 2 and not isinstance(idx[0], tuple)):
            raise NotModelled(f"a TV view indexed as {idx!r}")
        t = int(idx[0])
        vs = range(self.tv.shape[1]) if idx[1] is None else [int(idx[1])]
        if not (0 <= t < self.tv.shape[0] and all(0 <= v < self.tv.shape[1] for v in vs)):
            raise KernelFinding(f"the TV layout has {self.tv.shape[0]} threads of {self.tv.shape[1]} "
                                f"values; you index (thread {t}, value {idx[1]})")
        (m0, n0), coords = self.block.origin, []
        for v in vs:
            m, n = self.tv.table.coord_of(t, v)
            coords.append((m0 + int(m), n0 + int(n)))
        return _Values(self.block.t, coords)

    def __getitem__(self, idx):
        vals = self._values(idx)
        return vals if idx[1] is None else vals.load()[0]

    def __setitem__(self, idx, x):
        self._values(idx).store(x)


class _Values:
    """One thread's values of a tensor: ``load()``, ``store(x)``."""

    def __init__(self, t, coords):
        self.t, self.coords = t, coords
        self.rows, self.cols = (np.array(x) for x in zip(*coords))
        self.shape = (len(coords),)

    def _note(self, kind):
        key = (self.t.log["thread"], kind, self.t.name)
        self.t.log["elements"].setdefault(key, set()).update(self.coords)

    def load(self):
        self._note("read")
        return _vec(self.t.arr[self.rows, self.cols].copy())

    def store(self, x):
        self._note("write")
        self.t.arr[self.rows, self.cols] = np.broadcast_to(np.asarray(x), self.rows.shape).astype(self.t.arr.dtype)


def unanswered(kernel_text: str) -> bool:
    """The kernel's body is still the exercise's ``pass`` / ``...`` after the index lines."""
    fn = next(n for n in ast.parse(kernel_text).body if isinstance(n, ast.FunctionDef))
    return any(isinstance(s, ast.Pass) or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
                                           and s.value.value is Ellipsis) for s in fn.body)


def run(code, kseg, hseg):
    """Run the host function's launch, every thread of every block; (a, b, c, log)."""
    from .learner_code import reason

    a0, b0 = operands()
    a, b, c = a0.copy(), b0.copy(), np.full((ROWS, COLS), np.nan, np.float16)
    log = {"thread": 0, "block": 0, "elements": {}, "bdim": 1}
    arch = _Shim(thread_idx=lambda: (log["thread"] - log["block"] * log["bdim"], 0, 0),
                 block_idx=lambda: (log["block"], 0, 0), block_dim=lambda: (log["bdim"], 1, 1))

    def size(x, mode=None):
        shape = x.shape[mode[0] if isinstance(mode, (list, tuple)) else mode] if mode is not None else x.shape
        return int(np.prod(_flatten(shape)))

    cute = _Shim(Tensor=object, Layout=object, TensorSSA=Vec, arch=arch, size=size,
                 make_ordered_layout=_ordered, make_layout_tv=_make_layout_tv,
                 zipped_divide=lambda t, tiler: _Divided(t, tiler), composition=_composition)
    cutlass = _Shim(range_constexpr=range, range=lambda *a, **_: range(*a), const_expr=lambda x: x,
                    Float16=np.float16, Float32=np.float32, Int32=int)
    names = {**code.globals, "cute": cute, "cutlass": cutlass}
    try:
        host_fn = on_cpu(names, kseg, hseg, log)
        with np.errstate(all="ignore"):
            host_fn(*(_Tensor(n, arr, log) for n, arr in (("A", a), ("B", b), ("C", c))))
    except (KernelFinding, NotModelled, NotImplementedError):
        raise
    except Exception as exc:  # the learner's line failed on numbers: a finding, at that line
        where = code.locate(exc)
        at = f" at {code.describe(*where)}" if where else ""
        raise KernelFinding(f"your kernel fails on the CPU model (thread {log['thread']}){at}: "
                            f"{reason(exc)}") from None
    return a, b, c, log


GUESSES = [(lambda a, b: a + b, "your kernel adds the values: C = A * B, thrA.load() * thrB.load()"),
           (lambda a, b: a * a, "your product uses A twice: multiply A's values by B's"),
           (lambda a, b: b * b, "your product uses B twice: multiply A's values by B's"),
           (lambda a, b: a, "your kernel copies A into C: multiply by B's values"),
           (lambda a, b: b, "your kernel copies B into C: multiply by A's values"),
           (lambda a, b: a - b, "your kernel subtracts: C = A * B")]


def verdict(code, kseg, hseg) -> str | None:
    """None if the kernel writes A * B to every element of C and leaves A and B untouched."""
    a0, b0 = operands()
    a, b, c, log = run(code, kseg, hseg)
    size = f"CPU model: {ROWS} x {COLS} fp16, 2 x 2 tiles of (16, 256), every thread of every block"
    for name, arr, arr0 in (("A", a, a0), ("B", b, b0)):
        if not np.array_equal(arr, arr0):
            return (f"your kernel writes into {name}, an input: store the product into C's values "
                    f"(thrC.store(...)) ({size})")
    elements = log["elements"]
    for (t, kind, name), cells in sorted(elements.items(), key=lambda kv: kv[0][0]):
        if kind != "write":
            continue
        for src in ("A", "B"):
            read = elements.get((t, "read", src))
            if read is not None and read != cells:
                who = f"block {t // log['bdim']}'s thread {t % log['bdim']}"
                return (f"{who} reads {src} at {len(read)} elements (the first {min(read)}) but "
                        f"stores into C at others (the first {min(cells)}): compose A, B and C's "
                        f"tiles with the same tv_layout and slice the same (tidx, None) ({size})")
    unwritten = np.argwhere(np.isnan(c))
    if len(unwritten):
        r, col = (int(x) for x in unwritten[0])
        return (f"{len(unwritten)} of {c.size} elements of C are never written, the first C[{r}, {col}] "
                f"(tile ({r // 16}, {col // 256})): each block takes its own tile, gC[((None, None), "
                f"bidx)], and each thread its own values, [(tidx, None)] ({size})")
    want = a0 * b0
    if np.array_equal(c, want):
        return None
    for fn, why in GUESSES:
        if np.array_equal(c, fn(a0, b0).astype(np.float16)):
            return f"{why} ({size})"
    r, col = (int(x) for x in np.argwhere(c != want)[0])
    return (f"{int((c != want).sum())} of {c.size} elements of C differ from A * B, the first "
            f"C[{r}, {col}] = {c[r, col]} where {a0[r, col]} * {b0[r, col]} = {want[r, col]} ({size})")


CHECKED = (f"numbers checked on the CPU model: all {ROWS * COLS} elements of C equal A * B "
           f"({ROWS} x {COLS} fp16, 2 x 2 blocks of 128 threads), A and B untouched")
