"""Run a learner's mainloop, as written, on the CPU pipeline model (``models/pipeline``).

A mainloop hook of the course GEMM (``mainloop(self, ring, loads, mma, k_tiles,
is_producer)``) is CuTe DSL code, but its *control* is plain Python: a loop over k-tiles, pipeline
states that advance, ``ring.consumer_wait(cons)``, ``sm90.issue_mma(mma, cons.index)``,
``warpgroup.wait_group(1)``, ``ring.consumer_release(...)``, ``self.load(ring, loads, prod)``.
The model (:class:`~cutecourse.models.pipeline.PipelineModel`) has the same calls, written as
generators that *yield* where the hardware would block. So :func:`replay` takes the hook's source,

* strips its decorators and turns every blocking call (``producer_acquire``, ``consumer_wait``,
  ``wait_group``) into ``yield from`` that call, keeping the learner's line numbers;
* runs it with the DSL names swapped for the model's: ``cutlass.range`` is ``range``,
  ``pipeline.make_pipeline_state`` the model's state, ``ring`` the model's barriers, ``sm90.issue_mma``
  a wgmma on the stage the learner names, ``self.load`` a TMA load (skipped where its one-element ``pred`` is False),
  ``cute.make_rmem_tensor`` a list; ``is_producer`` is True by default (the course kernel is
  not warp-specialized: warp 0 issues loads and MMAs); ``is_producer=False`` runs the program
  of the other warps, which must issue no load;
* returns the model's :class:`~cutecourse.models.pipeline.Trace`: ``deadlock`` (which wait, on which
  barrier, and why nothing will arrive) and ``hazards`` (a stage released while its wgmmas still
  read it, a wgmma on a stage whose bytes have not landed), with two more lists for messages:
  ``trace.wait_stages`` and ``trace.release_stages``, the stage index of each ``consumer_wait``
  and ``consumer_release`` in program order (all the same index: a state that never advances),
  and ``trace.wait_states`` / ``trace.acquire_states``, the ``(count, index, phase)`` passed to
  each ``consumer_wait`` / ``producer_acquire``; ``trace.calls``, every pipeline call in program
  order as ``(op, argument, (file, line) of the call)`` (a state's ``(count, index, phase)``, the stage of an MMA, the depth
  of a ``wait_group``), which ``replay_compare`` holds against the course kernel's.
"""

from __future__ import annotations

import ast
import builtins
import sys
import types

from ..models import pipeline as pm
from .learner_code import segment_of

BLOCKING = ("producer_acquire", "consumer_wait", "wait_group")


class _Blocking(ast.NodeTransformer):
    """Every blocking call, and every call of a helper method (``self.<helper>(...)``, itself
    made a generator), becomes ``yield from`` that call, wherever it stands."""

    def __init__(self, helpers=()):
        self.helpers = set(helpers)

    def visit_Call(self, node: ast.Call):
        self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Attribute) and (f.attr in BLOCKING or (
                f.attr in self.helpers and isinstance(f.value, ast.Name) and f.value.id == "self")):
            return ast.copy_location(ast.YieldFrom(node), node)
        return node


def _self_calls(tree) -> set[str]:
    """The names of the methods a function calls on ``self``."""
    return {n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
            and n.func.value.id == "self"}


class _Namespace(types.SimpleNamespace):
    pass


def _cutlass():
    def rng(*args, **_):
        return builtins.range(*(int(a) for a in args))

    return _Namespace(range=rng, range_constexpr=rng, range_dynamic=rng, min=min, max=max,
                      Int32=int, Int64=int, Boolean=bool, const_expr=lambda x: x)


def _pipeline():
    return _Namespace(
        make_pipeline_state=lambda user, stages: pm.make_pipeline_state(user, stages),
        PipelineUserType=_Namespace(Producer="producer", Consumer="consumer"),
        PipelineState=lambda stages, count, index, phase: pm.PipelineState(
            int(stages), int(count), int(index), int(phase)))


def _site() -> tuple[str, int]:
    """(file, line) of the code that made the pipeline call being logged: the learner's line."""
    frame = sys._getframe(2)
    return frame.f_code.co_filename, frame.f_lineno


def _as_tuple(state) -> tuple[int, int, int]:
    return (int(state.count), int(state.index), int(state.phase))


class _Ring:
    """``PipelineTmaAsync``'s calls on the model; remembers which k-tile each stage was waited for."""

    def __init__(self, model: pm.PipelineModel):
        self.model, self.waited, self.mmas = model, {}, 0
        self.wait_stages, self.release_stages = [], []
        self.wait_states, self.acquire_states = [], []  # (count, index, phase) as passed
        self.calls = []  # (op, argument) in program order: the learner's loop, step by step

    def producer_acquire(self, state, *_, **__):
        self.acquire_states.append(_as_tuple(state))
        self.calls.append(("producer_acquire", _as_tuple(state), _site()))
        self.model.producer = state
        return self.model.producer_acquire(state)

    def producer_commit(self, state):
        self.model.producer_commit(state)

    def consumer_wait(self, state, *_, **__):
        self.model.consumer = state
        self.waited[state.index] = state.count
        self.wait_stages.append(int(state.index))
        self.wait_states.append(_as_tuple(state))
        self.calls.append(("consumer_wait", _as_tuple(state), _site()))
        return self.model.consumer_wait(state)

    def consumer_release(self, state):
        self.release_stages.append(int(state.index))
        self.calls.append(("consumer_release", _as_tuple(state), _site()))
        self.model.consumer_release(state)

    def producer_get_barrier(self, state):
        return None


def _mma(ring: _Ring):
    def issue_mma(_mma, stage):
        stage = int(stage)
        ring.calls.append(("issue_mma", stage, _site()))
        # the k-tile this stage was waited for; without a wait, the k-tile the loop is at
        k = ring.waited.pop(stage, ring.mmas)
        ring.mmas += 1
        ring.model.wgmma(pm.PipelineState(ring.model.stages, k, stage, 0))
        ring.model.commit_group()

    return issue_mma


def _size(shape) -> int:
    n = 1
    for d in (shape if isinstance(shape, tuple) else (shape,)):
        n *= _size(d) if isinstance(d, tuple) else int(d)
    return n


def _generator(fn, helpers=()) -> types.FunctionType:
    seg = segment_of(fn)
    tree = ast.parse(seg.text)
    fdef = tree.body[0]
    fdef.decorator_list = []
    fdef.body.append(ast.parse("if False:\n    yield").body[0])  # always a generator
    tree = ast.fix_missing_locations(_Blocking(helpers).visit(tree))
    ast.increment_lineno(tree, seg.first - 1)
    return compile(tree, seg.filename, "exec"), fdef.name


#: methods of the kernel a mainloop calls that are not replayed from their source
NOT_HELPERS = ("load",)


def _helpers(owner, fn) -> dict:
    """{name: function} of the methods of ``owner`` that ``fn`` calls on ``self``, and those
    they call, found through the class's MRO (the learner's override first)."""
    found, todo = {}, [fn]
    while todo:
        tree = ast.parse(segment_of(todo.pop()).text)
        for name in sorted(_self_calls(tree)):
            if name in found or name in NOT_HELPERS or owner is None:
                continue
            attr = getattr(owner, name, None)
            real = getattr(getattr(attr, "__func__", attr), "__wrapped__", attr)
            if isinstance(real, types.FunctionType):
                found[name] = attr
                todo.append(attr)
    return found


def _entering(gen_fn, name: str, calls: list):
    """A helper's generator that first notes ``("enter", name)`` in the call log."""
    def run(self, *args, **kwargs):
        calls.append(("enter", name, None))
        return (yield from gen_fn(self, *args, **kwargs))

    return run


def replay(hook, stages: int = 4, k_tiles: int = 8, names: dict | None = None,
           is_producer: bool = True, method: str = "mainloop") -> pm.Trace:
    """Run the mainloop ``hook`` on the model; return the Trace.

    ``hook``: a function or method, or a kernel class, whose ``method`` is run; the methods it
    calls on ``self`` (the parts of ``exercises.kernel_parts``, a learner's override of one) are
    replayed from their source too. ``names``: more globals to swap. Exceptions in the learner's
    code propagate with its own file and lines.
    """
    owner = hook if isinstance(hook, type) else None
    fn = getattr(hook, method) if owner is not None else hook
    fn = getattr(fn, "__func__", fn)
    model = pm.PipelineModel(stages)
    ring = _Ring(model)
    def wait_group(n):
        ring.calls.append(("wait_group", int(n), _site()))
        return model.wait_group(n)

    wg = _Namespace(wait_group=wait_group, fence=lambda: None, commit_group=model.commit_group)
    cute = _Namespace(make_rmem_tensor=lambda shape, dtype: [None] * _size(shape))
    swapped = dict(cutlass=_cutlass(), pipeline=_pipeline(), warpgroup=wg, cute=cute,
                   sm90=_Namespace(issue_mma=_mma(ring)), **(names or {}))
    helpers = _helpers(owner, fn)

    def program_of(f):
        f = getattr(f, "__func__", f)
        code, name = _generator(f, helpers)
        real = getattr(f, "__wrapped__", f)
        fn_globals = dict(getattr(real, "__globals__", {}))
        fn_globals.update(swapped)
        exec(code, fn_globals)  # noqa: S102  (the learner's own function, re-compiled)
        return fn_globals[name]

    program = program_of(fn)

    def load(_ring, _loads, state, pred=None, **_):
        if pred is not None and not pred[0]:  # a predicated copy this warp does not issue
            return
        ring.calls.append(("tma_load", _as_tuple(state), _site()))
        model.tma_load(state)

    me = _Namespace(stages=stages, prefetch=max(1, stages - 2), load=load)
    for hname, h in helpers.items():
        setattr(me, hname, types.MethodType(_entering(program_of(h), hname, ring.calls), me))
    trace = pm.Trace(fn.__name__, stages, k_tiles, 0)
    trace = model.run(program(me, ring, None, None, k_tiles, is_producer), trace)
    trace.wait_stages, trace.release_stages = ring.wait_stages, ring.release_stages
    trace.wait_states, trace.acquire_states = ring.wait_states, ring.acquire_states
    trace.calls = ring.calls
    return trace
