"""Every op of ``epilogue_op.py`` computes what it says: the tests "Adding an epilogue op" in
docs/DEVELOPING.md sends a contributor to (``tests/test_kernel_tables.py`` compiles each op in every
kernel). They walk the module's classes, so an op added there is tested as it is:

- on the CPU, its torch ``reference`` reads each operand where the operand's kind says (a "row"
  operand: row m of C, a "col" one: column n), and in every dense kernel the clamp of
  ``epilogue_op.clamped`` reaches the op's loads (an op that reads a "row" operand at ``n`` leaves
  the clamp of ``m`` dead, and its index unclamped: it fails here);
- on a Hopper GPU (``-m gpu``), the persistent GEMM with the op, on a C of partial tiles, against
  ``reference``: what the op's ``apply`` really computes.
"""

import inspect
import textwrap

import cutlass
import pytest
import torch

from cutecourse.inspect import compile_here
from cutecourse.kernels import epilogue_op, gemm_launch, registry

#: Every op class of epilogue_op.py (the identity ``EpilogueOp`` itself aside).
OPS = sorted(name for name, v in vars(epilogue_op).items()
             if inspect.isclass(v) and issubclass(v, epilogue_op.EpilogueOp) and v is not epilogue_op.EpilogueOp)
#: Those that read a "col" or "row" operand: their indices are clamped where a tile pads C.
INDEXED = [op for op in OPS if any(o.kind != "scalar" for o in epilogue_op.described(getattr(epilogue_op, op)()))]


def _operands(op, m, n, device="cpu"):
    """Random tensors for ``op``'s operands, of their dtypes and lengths, positive (so that an op
    such as a ReLU after them passes every change through)."""
    out = []
    for o in epilogue_op.described(op):
        t = torch.rand(o.length(m, n), device=device) + 0.5
        out.append(t.to(getattr(torch, o.dtype)) if o.dtype != "int32" else (t * 4).to(torch.int32))
    return out


def test_the_module_has_ops():
    assert {"Relu", "AddBias"} <= set(OPS) and "AddBias" in INDEXED


@pytest.mark.parametrize("op", OPS)
def test_an_ops_reference_reads_each_operand_where_its_kind_says(op):
    """Change one element of an operand: the reference changes in that row ("row"), that column
    ("col") or anywhere ("scalar"), and nowhere else. An op without its own ``reference`` fails."""
    cls = getattr(epilogue_op, op)
    owner = next(k for k in cls.__mro__ if "apply" in vars(k))
    assert owner is epilogue_op.EpilogueOp or "reference" in vars(owner), \
        f"{op} overrides apply but not reference: give it the torch reference of what apply computes"
    m, n = 5, 7
    c = torch.rand(m, n) + 0.5
    operands = _operands(cls(), m, n)
    base = cls().reference(c, *operands)
    assert base.shape == (m, n) and base.dtype == torch.float32, (op, base.shape, base.dtype)
    for i, o in enumerate(epilogue_op.described(cls())):
        j = o.length(m, n) - 2 if o.length(m, n) > 1 else 0
        changed = [t.clone() for t in operands]
        changed[i][j] = changed[i][j] * 3 + 1
        where = (cls().reference(c, *changed) != base).nonzero().tolist()
        assert where, (op, o.name, "the reference does not read it")
        if o.kind == "row":
            assert {r for r, _ in where} == {j}, (op, o.name, "a 'row' operand is read at row m", where)
        elif o.kind == "col":
            assert {col for _, col in where} == {j}, (op, o.name, "a 'col' operand is read at column n", where)


def _compiled(name, op):
    """(min.s32, ld.global) of the dense kernel ``name`` with ``op``, compiled here for sm_90a."""
    kernel = registry.entry(name).kernel(epilogue_op=op)
    r = compile_here(kernel, *gemm_launch.Entry(type(kernel)).fake_arguments(kernel))
    assert r.spill_bytes == 0, (name, op)
    return r.ptx.count("min.s32"), r.ptx.count("ld.global")


def _clamped_but(kind):
    """``epilogue_op.clamped`` less the clamp of the index a ``kind`` operand is read at."""
    def clamped(op, m, n, operands):
        for o, t in zip(epilogue_op.described(op), operands):
            if o.kind == "col" != kind:
                n = cutlass.min(n, t.shape[0] - 1)
            elif o.kind == "row" != kind:
                m = cutlass.min(m, t.shape[0] - 1)
        return m, n
    return clamped


def _dead_clamps(name, op, monkeypatch):
    """The kinds of ``op``'s operands whose clamp the kernel ``name`` does not need (switched off,
    the same PTX's count of ``min``: no index ``apply`` reads goes through it), after checking that
    the op adds loads to the kernel."""
    mins, loads = _compiled(name, op)
    assert loads > _compiled(name, None)[1], (name, op, "the op reads no operand")
    dead = []
    for kind in sorted({o.kind for o in epilogue_op.described(op)} - {"scalar"}):
        with monkeypatch.context() as mp:
            mp.setattr(epilogue_op, "clamped", _clamped_but(kind))
            if _compiled(name, op)[0] >= mins:
                dead.append(kind)
    return dead


@pytest.mark.parametrize("op", INDEXED)
@pytest.mark.parametrize("name", list(registry.DENSE))
def test_an_op_reads_its_operands_at_clamped_coordinates(name, op, monkeypatch):
    """A tile that pads C still runs the op on its padded rows and columns (their values are not
    stored): each index the op reads an operand at is clamped to the operand's last element first,
    so an M or N that is not a multiple of the tile never reads past it. For each kind of operand
    the op reads, the kernel's loads go through that clamp: without it the kernel has fewer ``min``."""
    assert _dead_clamps(name, getattr(epilogue_op, op)(), monkeypatch) == [], (name, op)


class _RowScaleAtN(epilogue_op.EpilogueOp):
    """A "row" operand read at the column: the mistake the two tests above exist to catch."""

    operands = (epilogue_op.Operand("scale", "bfloat16", "row"),)

    def apply(self, x, m, n, scale):
        return x * scale[n].to(cutlass.Float32)


def test_an_operand_read_at_the_wrong_index_is_caught_on_the_cpu(monkeypatch):
    """Its clamp of ``m`` is dead code (apply never reads ``m``), and ``n`` reaches the loads
    unclamped: the clamp test's verdict."""
    assert _dead_clamps("persistent", _RowScaleAtN(), monkeypatch) == ["row"]


# -- on an H100 -------------------------------------------------------------------------------------
_GPU_CHECK = textwrap.dedent("""
    import json, sys, torch
    import cutlass
    from cutecourse.kernels import epilogue_op, registry

    class RowScaleAtN(epilogue_op.EpilogueOp):  # wrong on purpose: scale[n] for scale[m]
        operands = (epilogue_op.Operand("scale", "bfloat16", "row"),)

        def apply(self, x, m, n, scale):
            return x * scale[n].to(cutlass.Float32)

        def reference(self, c, scale):
            return c * scale.float()[:, None]

    torch.manual_seed(0)
    out = []
    for name, m, n, k in json.loads(sys.argv[1]):
        op = RowScaleAtN() if name == "RowScaleAtN" else getattr(epilogue_op, name)()
        a, b = torch.randn(m, k, device="cuda").half(), torch.randn(n, k, device="cuda").half()
        args = []
        for o in epilogue_op.described(op):
            t = torch.rand(o.length(m, n), device="cuda") + 0.5
            args.append(t.to(getattr(torch, o.dtype)) if o.dtype != "int32" else (t * 4).to(torch.int32))
        c = torch.full((m, n), float("nan"), device="cuda")
        registry.entry("persistent").launcher(a, b, c, epilogue_op=op, epilogue_args=tuple(args))()
        torch.cuda.synchronize()
        ref = op.reference(a.float() @ b.float().T, *args)
        out.append([name, ((c - ref).abs().max() / ref.abs().max()).item()])
    print("RESULT" + json.dumps(out))
""")


@pytest.mark.gpu
def test_every_op_computes_its_reference_in_the_persistent_gemm(run_gpu_script):
    """M = 300, N = 264: partial tiles in both directions (128 x 256 tiles), fp32 C. The op that
    reads a "row" operand at ``n`` is far from its reference (the test's own control)."""
    results = dict(run_gpu_script(_GPU_CHECK, [[op, 300, 264, 200] for op in OPS + ["RowScaleAtN"]]))
    bad = {op: err for op, err in results.items() if op != "RowScaleAtN" and not err < 1e-3}
    assert not bad, bad
    assert results["RowScaleAtN"] > 1e-2, results
