"""The ``gpu`` / ``no_gpu`` markers skip by themselves (tests/conftest.py): checked on fake test
items against a fake machine, so it runs anywhere."""

import types

import pytest

import conftest


class Item:
    def __init__(self, *marks):
        self.marks, self.added = list(marks), []

    def iter_markers(self, name):
        return (m for m in self.marks if m.name == name)

    def add_marker(self, mark):
        self.added.append(mark.mark)


def _machine(monkeypatch, runs):
    """A machine that runs kernels for the targets in ``runs``."""
    monkeypatch.setattr(conftest.cutecourse.modes, "mode_for", lambda t: types.SimpleNamespace(
        target=t, run=t in runs, reason=f"{t} {'runs' if t in runs else 'does not run'} here"))


def _skipped(items):
    return [bool(i.added) for i in items]


def test_gpu_marker_skips_where_the_target_does_not_run(monkeypatch):
    g = pytest.mark.gpu
    items = [Item(g.mark), Item(g("sm_100a").mark), Item(g("any").mark),
             Item(g.mark, g("sm_100a").mark), Item(g("sm_90a", "sm_100a").mark), Item()]
    _machine(monkeypatch, runs={"sm_90a", "any"})  # an H100
    conftest.pytest_collection_modifyitems(None, items)
    assert _skipped(items) == [False, True, False, True, False, False]
    assert "needs a GPU for sm_100a" in items[1].added[0].kwargs["reason"]


def test_no_gpu_marker_is_the_mirror_image(monkeypatch):
    items = [Item(pytest.mark.no_gpu.mark), Item(pytest.mark.no_gpu("any").mark)]
    _machine(monkeypatch, runs=set())  # no GPU: both compile-only checks run
    conftest.pytest_collection_modifyitems(None, items)
    assert _skipped(items) == [False, False]
    _machine(monkeypatch, runs={"sm_90a", "any"})
    conftest.pytest_collection_modifyitems(None, items)
    assert _skipped(items) == [True, True]
    assert "compile-only path" in items[0].added[0].kwargs["reason"]
