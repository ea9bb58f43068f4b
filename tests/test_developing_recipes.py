"""docs/DEVELOPING.md's recipes work as written: each diff of "Adding a one-CTA mainloop",
"Adding a scheduler" and "Adding an epilogue op" is applied to a copy of the package
(``developing_page.apply``), and the copy compiles what the page says it then compiles, for
sm_90a, with the page's own names (``variant="eager_release"``, ``scheduler="columns"``,
``epilogue_op="RowScale"``); "Adding an exercise" (its checker's diff, its three cells in the
solution notebook) is applied to a copy too, and the test the page shows passes there. A page
whose diff no longer applies fails here, naming its section. A page test: run it on an unedited
tree when the page changes (a tree that followed a recipe already holds its diff). The page's
table of epilogue-schedule hooks is checked against the kernels' signatures.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from developing_page import ROOT, add_exercise, apply, diffs, scratch_package, section

RECIPES = ("Adding a one-CTA mainloop", "Adding a scheduler", "Adding an epilogue op")


@pytest.mark.parametrize("title", RECIPES)
def test_each_kernel_recipe_is_a_diff_of_one_file(title):
    assert [path for path, _ in diffs(title)] == [{
        "Adding a one-CTA mainloop": "cutecourse/kernels/hopper_gemm.py",
        "Adding a scheduler": "cutecourse/kernels/tile_scheduler.py",
        "Adding an epilogue op": "cutecourse/kernels/epilogue_op.py"}[title]]


@pytest.mark.parametrize("title", RECIPES + ("Adding an exercise",))
def test_a_recipe_sends_its_reader_to_the_tests_of_their_class_not_of_the_page(title):
    """This file re-applies the page's diffs: on a tree that followed a recipe it cannot, so no
    recipe tells its reader to run it; each names the tests that compile the reader's class."""
    text = section(title)
    assert "test_developing_recipes" not in text, title
    assert "tests/test_" in text, title


#: What the copy does once the recipes are in: the names the page gives, then one compile each.
CHECK = """
from cutecourse.inspect import compile_report
from cutecourse.kernels import hopper_gemm as hg, hopper_gemm_cluster as hc, registry
from cutecourse.kernels.epilogue_op import RowScale
from cutecourse.kernels.tile_scheduler import SCHEDULERS, ColumnMajorScheduler

eager = hg.variant_class("eager_release")
assert eager is hg.EagerReleaseHopperGemm and "eager_release" in hg.all_variants()
assert isinstance(hc.ENTRY.kernel(cluster=(2, 1), variant="eager_release"), eager)
assert SCHEDULERS["columns"] is ColumnMajorScheduler
for target, params in [("cutecourse.kernels.hopper_gemm:compile_target", dict(variant="eager_release")),
                       (registry.target("persistent"), dict(scheduler="columns", epilogue_op="RowScale"))]:
    report = compile_report(target, arch="sm_90a", **params)
    assert report.count("wgmma") > 0 and not report.spill_bytes, (target, params, report)
print("recipes compile")
"""


def test_the_kernel_recipes_applied_to_a_copy_compile(tmp_path):
    root = scratch_package(tmp_path)
    for title in RECIPES:
        apply(title, root)
    env = {**os.environ, "PYTHONPATH": str(root), "CUTE_DSL_ARCH": "sm_90a"}
    run = subprocess.run([sys.executable, "-c", CHECK], env=env, cwd=root, capture_output=True, text=True,
                         timeout=900)
    assert run.returncode == 0 and "recipes compile" in run.stdout, run.stderr[-3000:]


def test_a_stale_recipe_names_its_section(tmp_path):
    root = scratch_package(tmp_path)
    (root / "cutecourse" / "kernels" / "epilogue_op.py").write_text("# nothing here\n")
    with pytest.raises(AssertionError, match="Adding an epilogue op"):
        apply("Adding an epilogue op", root)
    assert ROOT.exists()


def test_the_exercise_recipe_applied_to_a_copy_passes_the_test_it_shows(tmp_path):
    import shutil

    root = scratch_package(tmp_path)
    shutil.copytree(ROOT / "solutions", root / "solutions")
    (root / "tests").mkdir()
    shutil.copy(ROOT / "tests" / "solution_cells.py", root / "tests")
    assert [path for path, _ in diffs("Adding an exercise")] == ["cutecourse/exercises/nb03.py"]
    test = add_exercise(root)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "tests")]), "CUTE_DSL_ARCH": "sm_90a"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(root),
                          str(test)], env=env, cwd=root, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0 and "3 passed" in run.stdout, run.stdout[-3000:] + run.stderr[-2000:]


def test_the_epilogue_schedule_table_gives_each_familys_hook_signatures():
    """The page's table of make_epilogue / store_tile / finish_stores per family is the code's."""
    import inspect
    import re

    from cutecourse.kernels.blackwell_grouped_gemm import BlackwellGroupedBlockScaledGemm
    from cutecourse.kernels.hopper_gemm_kernel import HopperGemm
    from cutecourse.kernels.hopper_gemm_persistent import PersistentHopperGemm

    text = (ROOT / "docs" / "DEVELOPING.md").read_text()
    classes = {"HopperGemm": HopperGemm, "PersistentHopperGemm": PersistentHopperGemm,
               "BlackwellGroupedBlockScaledGemm": BlackwellGroupedBlockScaledGemm}
    seen = set()
    for row in re.findall(r"^\| [a-zA-Z-]+ \(`(\w+)`.*$", text, re.M):
        seen.add(row)
    assert seen == set(classes), seen
    for name, cls in classes.items():
        row = re.search(rf"^\| [a-zA-Z-]+ \(`{name}`[^|]*\|(.*)$", text, re.M).group(1)
        cells = [c.strip() for c in row.split("|")][:3]
        for hook, cell in zip(("make_epilogue", "store_tile", "finish_stores"), cells):
            params = [p.name if p.default is inspect.Parameter.empty else f"{p.name}={p.default}"
                      for p in list(inspect.signature(getattr(cls, hook)).parameters.values())[1:]]
            assert cell.startswith(f"`({', '.join(params)})`"), (name, hook, cell, params)
