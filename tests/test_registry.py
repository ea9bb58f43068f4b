"""``kernels/registry.py``: every dense GEMM it lists is reached the same way, by name or by module."""

import importlib

import pytest

from cutecourse.errors import CourseError
from cutecourse.kernels import registry


@pytest.mark.parametrize("name", sorted(registry.DENSE))
def test_every_dense_module_names_its_entrys_verbs_alike(name):
    """``compile_target``, ``validate``, ``launcher``, ``gemm``: the same four names in every module
    of ``registry.DENSE``, each its ``ENTRY``'s verb (the names notebook 06 uses, ``gemm_persistent``
    ..., stand beside), and ``registry.entry(name)`` is that ``ENTRY``."""
    module = importlib.import_module(f"cutecourse.kernels.{registry.DENSE[name]}")
    assert registry.entry(name) is module.ENTRY
    assert registry.target(name) == f"{module.__name__}:compile_target"
    for verb in ("compile_target", "validate", "launcher", "gemm"):
        assert getattr(module, verb) == getattr(module.ENTRY, verb), (name, verb)


def test_an_unknown_name_lists_the_known_ones():
    with pytest.raises(CourseError, match="persistent"):
        registry.entry("persistant")
