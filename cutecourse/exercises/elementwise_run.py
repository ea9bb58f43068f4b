"""Run a learner's notebook-01 ``@cute.kernel`` on numbers, on the CPU: the CPU model of the
elementwise exercises (C = A + B, C = relu(A + B)).

The kernel body is ordinary Python over a few DSL names. Executed again with those names standing
for their plain meaning (numpy arrays for the tiles a ``.load()`` returns, ``np.where`` for
``cute.where``, ``np.maximum`` for ``cutlass.max``), every thread of the launch runs on fp16 numbers
and the checker sees what the compiled code computes: every element of C it writes, and whether A
and B stayed as they were. The problem is 5 rows x 472 columns: a grid of 5 x 59 tiles of (1, 8),
not square, so tile coordinates swapped, a row/column mix-up or a store to the neighbouring tile
show up as a wrong or out-of-range tile; 295 tiles take two blocks of 256 threads, so a kernel
that forgets the block index leaves tiles unwritten. The values differ in every row and column.

A mistake is a *finding* in the learner's terms (``KernelFinding``): an index outside the tensor,
a store into an input, the error their line raised on numbers. Only a DSL name the model does not
have (``NotModelled``) leaves the verdict to the PTX, and the checker says so.
"""

from __future__ import annotations

import ast
import inspect
import re
import types

import numpy as np

ROWS, COLS, V = 5, 472, 8  # C is 5 x 472 fp16: 5 x 59 tiles of (1, 8), one per thread
THREADS = 256  # the host function's block, before its launch sets it


class KernelFinding(Exception):
    """What the learner's kernel does wrong on the CPU model, in words for the learner."""


class NotModelled(Exception):
    """The kernel uses a DSL name this model does not run (the PTX judges it then)."""


def operands():
    """fp16 A and B (5 x 472) whose values differ per row and per column (small integers and
    halves: every sum is exact in fp16), with negative, zero and positive sums."""
    r, c = np.meshgrid(np.arange(ROWS), np.arange(COLS), indexing="ij")
    a = ((r * 7 + c * 3) % 13 - 6).astype(np.float16)
    b = (((r * 5 + c * 11) % 9 - 4) * 0.5 + r).astype(np.float16)
    return a, b


class Vec(np.ndarray):
    """A loaded tile (the DSL's TensorSSA): numpy arithmetic, plus ``.to(dtype)``."""

    def to(self, dtype):
        return np.asarray(self).astype(dtype).view(Vec)


def _vec(x):
    return np.asarray(x).view(Vec)


class Tiled:
    """``zipped_divide(t, (1, 8))`` of a row-major (5, 472) tensor: ``((1, 8), (5, 59))``. Indexing
    checks the tile coordinate and records, per thread, which tiles the thread read and wrote."""

    def __init__(self, name: str, arr, log: dict):
        self.name, self.arr, self.log = name, arr, log
        self.shape = ((1, V), (ROWS, COLS // V))

    def _tile(self, idx, writing: bool = False):
        if not (isinstance(idx, tuple) and len(idx) == 2 and isinstance(idx[1], tuple)
                and len(idx[1]) == 2):
            raise KernelFinding(f"your kernel indexes {self.name} with {idx!r}: a tile is "
                                f"{self.name}[(None, (mi, ni))], mode 1 being (row, tile in the row)")
        inner, (mi, ni) = idx
        mi, ni = int(mi), int(ni)
        rows, tiles = self.shape[1]
        if not (0 <= mi < rows and 0 <= ni < tiles):
            raise KernelFinding(self._outside(mi, ni, writing))
        if inner is None:
            cols = slice(ni * V, ni * V + V)
        else:
            j = inner[1] if isinstance(inner, tuple) else inner
            if isinstance(inner, tuple) and int(inner[0]) != 0 or not 0 <= int(j) < V:
                raise KernelFinding(f"your kernel reads element {inner!r} of a (1, 8) tile of {self.name}")
            cols = ni * V + int(j)
        return (mi, ni), (mi, cols)

    def _outside(self, mi: int, ni: int, writing: bool) -> str:
        rows, tiles = self.shape[1]
        thread = self.log["thread"]
        msg = (f"thread {thread} {'stores into' if writing else 'reads'} tile ({mi}, {ni}) of "
               f"{self.name}, outside its {rows} x {tiles} tiles (CPU model: {ROWS} x {COLS} fp16, "
               f"{rows} rows of {tiles} tiles of 8)")
        read = sorted(f"{n}'s tile {min(ts)}" for (t, k, n), ts in self.log["tiles"].items()
                      if t == thread and k == "read")
        if thread >= rows * tiles:
            return (msg + f": thread {thread} has no tile, there are {rows * tiles} tiles for "
                    f"{self.log['grid'] * self.log['bdim']} threads. Keep the guard if i < m * n_tiles")
        if writing and read:
            return msg + f"; it read {' and '.join(read)}: store into the tile it read, the same (mi, ni)"
        if mi >= rows and ni < rows:
            return (msg + f". Are the tile coordinates swapped? The first is the row mi < {rows}, "
                    f"the second the tile in the row ni < {tiles}: g{self.name}[(None, (mi, ni))]")
        return msg + f": the first coordinate is the row (< {rows}), the second the tile in the row (< {tiles})"

    def _note(self, kind: str, tile) -> None:
        self.log["tiles"].setdefault((self.log["thread"], kind, self.name), set()).add(tile)

    def __getitem__(self, idx):
        try:
            tile, where = self._tile(idx)
        except KernelFinding:
            if isinstance(idx, tuple) and idx and idx[0] is None:
                return _OutsideView(self, idx)  # a load says "reads", a store "stores into"
            raise
        if isinstance(where[1], slice):
            return _TileView(self, tile, where)
        self._note("read", tile)
        return self.arr[where]

    def __setitem__(self, idx, x):
        tile, where = self._tile(idx, writing=True)
        self._note("write", tile)
        self.arr[where] = np.asarray(x).astype(self.arr.dtype)


class _TileView:
    """One thread's (1, 8) tile: ``.load()``, ``.store(x)``, and its elements."""

    def __init__(self, parent: Tiled, tile, where):
        self.parent, self.tile, self.where = parent, tile, where

    def load(self):
        self.parent._note("read", self.tile)
        return _vec(self.parent.arr[self.where].copy())

    def store(self, x):
        self.parent._note("write", self.tile)
        self.parent.arr[self.where] = np.asarray(x).astype(self.parent.arr.dtype)

    def _element(self, j):
        j = j[-1] if isinstance(j, tuple) else j
        return (self.where[0], self.where[1].start + int(j))

    def __getitem__(self, j):
        self.parent._note("read", self.tile)
        return self.parent.arr[self._element(j)]

    def __setitem__(self, j, x):
        self.parent._note("write", self.tile)
        self.parent.arr[self._element(j)] = x


class _OutsideView:
    """A tile slice whose coordinate is outside the tensor: the load or store names it."""

    def __init__(self, parent: Tiled, idx):
        self.parent, self.idx = parent, idx

    def load(self):
        self.parent._tile(self.idx)

    def store(self, x):
        self.parent._tile(self.idx, writing=True)

    def __getitem__(self, j):
        return self.load()

    def __setitem__(self, j, x):
        self.store(x)


class _Shim(types.SimpleNamespace):
    def __getattr__(self, name):
        raise NotModelled(name)


def _size(t, mode=None):
    """``cute.size``: the number of elements of ``t``'s shape (of mode 1 with ``mode=[1]``)."""
    shape = t.shape[1] if mode in ([1], (1,), 1) else t.shape
    return int(np.prod(_flatten(shape)))


def _flatten(shape):
    if isinstance(shape, tuple):
        return [x for s in shape for x in _flatten(s)]
    return [int(shape)]


def _segments(code):
    """(kernel segment, host segment) of the learner's code, either None if not found: the host
    is the function given to the checker, the kernel the function its ``.launch`` call names
    (from the learner's cells, or the module the host's globals name)."""
    from .learner_code import segment_of

    host = next((sg for sg in code.segments if sg.name == getattr(code.objects[0], "__name__", "")),
                code.segments[-1])
    name = launched(host)
    if name is None:
        return None, host
    kernel = next((sg for sg in code.segments if sg.name == name), None)
    if kernel is None:
        host_fn = inspect.unwrap(code.objects[0])
        free = dict(zip(getattr(getattr(host_fn, "__code__", None), "co_freevars", ()),
                        getattr(host_fn, "__closure__", None) or ()))  # a kernel the host closes over
        try:
            value = free[name].cell_contents if name in free else code.globals[name]
            kernel = segment_of(value)
        except (KeyError, OSError, TypeError, ValueError):
            kernel = None
    return kernel, host


def launched(host) -> str | None:
    """The name the host function launches: ``name(...).launch(...)``."""
    called = re.search(r"(\w+)\s*\([^()]*\)\s*\.launch\b", host.text)
    return called.group(1) if called else None


def unanswered(code) -> bool:
    """The kernel still holds the exercise's ``...`` (or a ``raise NotImplementedError``)."""
    seg, _ = _segments(code)
    if seg is None:
        return False
    for node in ast.walk(ast.parse(seg.text)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and node.value.value is Ellipsis:
            return True
        if isinstance(node, ast.Raise) and "NotImplementedError" in ast.unparse(node):
            return True
    return False


def _undecorated(seg):
    """(code object, function name) of a segment's function without its DSL decorator, at the
    cell's line numbers (so an error names the learner's line)."""
    tree = ast.parse(seg.text)
    fn = next(node for node in tree.body if isinstance(node, ast.FunctionDef))
    fn.decorator_list = []
    ast.increment_lineno(tree, seg.first - 1)
    return compile(tree, seg.filename, "exec"), fn.name


class Matrix:
    """A (5, 472) tensor as the host function receives it; indexed (row, column) if a kernel gets
    it undivided."""

    def __init__(self, name: str, arr, log: dict):
        self.name, self.arr, self.log = name, arr, log
        self.shape = arr.shape

    def _where(self, idx, writing=False):
        r, col = (int(x) for x in idx)
        if not (0 <= r < ROWS and 0 <= col < COLS):
            raise KernelFinding(f"thread {self.log['thread']} {'stores into' if writing else 'reads'} "
                                f"{self.name}[{r}, {col}], outside its {ROWS} x {COLS} elements (CPU model)")
        self.log["tiles"].setdefault((self.log["thread"], "write" if writing else "read", self.name),
                                     set()).add((r, col // V))
        return r, col

    def __getitem__(self, idx):
        return self.arr[self._where(idx)]

    def __setitem__(self, idx, x):
        self.arr[self._where(idx, writing=True)] = x


def _zipped_divide(t, tiler):
    if tuple(int(x) for x in tiler) != (1, V):
        raise NotModelled(f"zipped_divide by {tuple(tiler)}")
    return Tiled(t.name, t.arr, t.log)


def on_cpu(names: dict, kseg, hseg, log: dict):
    """The learner's host function, defined in ``names`` (with the CPU stand-ins), whose launch
    runs the kernel once per thread of every block; ``log`` tells the stand-ins who runs."""
    (kcode, kname), (hcode, hname) = _undecorated(kseg), _undecorated(hseg)
    exec(kcode, names)  # noqa: S102  (the learner's kernel)
    exec(hcode, names)  # noqa: S102  (the learner's host function)
    kernel_fn = names[kname]

    class Launch:
        def __init__(self, *args):
            self.args = args

        def launch(self, grid, block, **_):
            log["grid"], log["bdim"] = int(grid[0]), int(block[0])
            for log["block"] in range(log["grid"]):
                for t in range(log["bdim"]):
                    log["thread"] = log["block"] * log["bdim"] + t
                    kernel_fn(*self.args)

    names[kname] = names[launched(hseg)] = Launch  # `kernel(gA, gB, gC).launch(...)` runs it
    return names[hname]


def run(code):
    """Run the host function's launch, every thread of it, over A, B (:func:`operands`) and C
    (NaN at first). Returns (a, b, c, log) after the run: ``log["tiles"]`` maps (thread,
    "read"/"write", operand) to the tiles touched. Raises KernelFinding, NotModelled or
    NotImplementedError."""
    from .learner_code import reason

    kseg, hseg = _segments(code)
    if kseg is None or hseg is None:
        raise NotModelled("a kernel outside your cells")
    a0, b0 = operands()
    a, b, c = a0.copy(), b0.copy(), np.full((ROWS, COLS), np.nan, np.float16)
    log = {"thread": 0, "tiles": {}, "block": 0, "bdim": THREADS, "grid": 1}
    arch = _Shim(thread_idx=lambda: (log["thread"] - log["block"] * log["bdim"], 0, 0),
                 block_idx=lambda: (log["block"], 0, 0), block_dim=lambda: (log["bdim"], 1, 1),
                 grid_dim=lambda: (log["grid"], 1, 1))
    cute = _Shim(Tensor=object, TensorSSA=Vec, arch=arch, size=_size, zipped_divide=_zipped_divide,
                 where=lambda cond, x, y: _vec(np.where(cond, x, y)),
                 full_like=lambda x, val, *_, **__: _vec(np.full_like(x, val)),
                 zeros_like=lambda x, *_, **__: _vec(np.zeros_like(x)))
    cutlass = _Shim(range_constexpr=range, range=lambda *a, **_: range(*a), const_expr=lambda x: x,
                    Float16=np.float16, Float32=np.float32, Int32=int,
                    max=lambda x, y: _vec(np.maximum(x, y)), min=lambda x, y: _vec(np.minimum(x, y)))
    names = {**code.globals, "cute": cute, "cutlass": cutlass}
    try:
        host_fn = on_cpu(names, kseg, hseg, log)
        with np.errstate(all="ignore"):
            host_fn(Matrix("A", a, log), Matrix("B", b, log), Matrix("C", c, log))
    except (KernelFinding, NotModelled, NotImplementedError):
        raise
    except Exception as exc:  # the learner's line failed on numbers: a finding, at that line
        where = code.locate(exc)
        at = f" at {code.describe(*where)}" if where else ""
        why = reason(exc)
        for fake, real in (("'Tiled' object", "a divided tensor (gA, gB, gC)"),
                           ("'Vec' object", "a loaded tile (TensorSSA)"), ("'Matrix' object", "a tensor")):
            why = why.replace(fake, real)
        raise KernelFinding(f"your kernel fails on the CPU model (thread {log['thread']} of a "
                            f"{ROWS} x {COLS} problem){at}: {why}") from None
    return a, b, c, log


def _tiles(log, kind: str, name: str) -> dict:
    return {t: tiles for (t, k, n), tiles in log["tiles"].items() if k == kind and n == name}


def _cols(tile) -> str:
    return f"columns {tile[1] * V}-{tile[1] * V + V - 1} of row {tile[0]}"


def verdict(code, want_fn, guesses, what: str) -> str | None:
    """Run the kernel on the CPU model; None if it writes ``want_fn(a, b)`` to every element of C
    and leaves A and B as they were, else what it does wrong, in the learner's terms. ``guesses``:
    [(function of (a, b), why)], typical wrong results. Raises NotModelled."""
    a0, b0 = operands()
    a, b, c, log = run(code)
    size = f"CPU model, {ROWS} x {COLS} fp16, {ROWS} x {COLS // V} tiles"
    for name, arr, arr0 in (("A", a, a0), ("B", b, b0)):
        writes = _tiles(log, "write", name)
        if writes or not np.array_equal(arr, arr0):
            t, tiles = next(iter(writes.items())) if writes else (None, {None})
            never = " C is never written." if np.isnan(c).all() else ""
            by = f" (thread {t} writes {name}'s tile {min(tiles)})" if t is not None else ""
            return (f"your kernel stores into {name}{by}, an input that must stay as it was: "
                    f"store the result into C's tile, gC[(None, (mi, ni))].{never} ({size})")
    reads_a, reads_b, writes_c = (_tiles(log, k, n) for k, n in
                                  (("read", "A"), ("read", "B"), ("write", "C")))
    for t in sorted(set(reads_a) & set(reads_b)):
        if reads_a[t] != reads_b[t]:
            return (f"thread {t} adds A's tile {min(reads_a[t])} to B's tile {min(reads_b[t])}: "
                    f"both loads take the thread's own tile (mi, ni) ({size})")
    for t in sorted(writes_c):
        got = writes_c[t]
        for name, reads in (("A", reads_a), ("B", reads_b)):
            if t in reads and reads[t] != got:
                src, dst = min(reads[t]), min(got)
                near = (" (the neighbouring tile)" if src[0] == dst[0] and abs(src[1] - dst[1]) == 1
                        else "")
                return (f"thread {t} reads {name}'s tile {src} ({_cols(src)}) and stores into C's "
                        f"tile {dst}{near}: store into the tile it read, gC[(None, (mi, ni))] with "
                        f"the same (mi, ni) as the loads ({size})")
    unwritten = np.argwhere(np.isnan(c))
    if len(unwritten):
        r, col = (int(x) for x in unwritten[0])
        tile = (r, col // V)
        return (f"{len(unwritten)} of {c.size} elements of C are never written, the first C[{r}, {col}] "
                f"in tile {tile} ({_cols(tile)}): every tile (mi, ni) of C, for i < m * n_tiles, needs "
                f"one thread that stores it, and i = bidx * bdim + tidx numbers the threads of "
                f"every block ({size})")
    want = want_fn(a0, b0)
    if np.array_equal(c, want):
        return None
    with np.errstate(all="ignore"):
        for fn, why in guesses:
            if np.array_equal(c, np.asarray(fn(a0, b0)).astype(np.float16)):
                return f"{why} (on numbers: {size}, every element of C compared with {what})"
    r, col = (int(x) for x in np.argwhere(c != want)[0])
    return (f"on numbers ({size}), {int((c != want).sum())} of {c.size} elements of C differ from "
            f"{what}; the first C[{r}, {col}] is {c[r, col]} where A = {a0[r, col]}, B = {b0[r, col]} "
            f"give {want[r, col]}")


def checked(what: str) -> str:
    """The pass message's account of the CPU run."""
    return (f"numbers checked on the CPU model: all {ROWS * COLS} elements of C equal {what} "
            f"({ROWS} x {COLS} fp16, every thread of the launch), A and B untouched")
