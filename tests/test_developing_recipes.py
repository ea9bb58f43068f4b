"""docs/DEVELOPING.md's recipes work as written: each diff of "Adding a one-CTA mainloop",
"Adding a scheduler", "Adding a grouped tile order", "Adding an epilogue op" and "Adding a
mixed-input variant" is applied to a copy of the package (``developing_page.apply``), and the
copy compiles what the page says it then compiles, for sm_90a, with the page's own names
(``variant="eager_release"``, ``scheduler="columns"``, ``scheduler="column_major"`` in the grouped
bf16 GEMM, ``epilogue_op="RowScale"``, ``variant="no_store"``); "Adding an exercise" (its
checker's diff, its three cells in the solution notebook) is applied to a copy too, and the test
the page shows passes there. A page
whose diff no longer applies fails here, naming its section. A page test: run it on an unedited
tree when the page changes (a tree that followed a recipe already holds its diff). The page's
scheduler and op are also compiled here on their own (the scheduler's order, the op's bf16 loads),
and its table of epilogue-schedule hooks is checked against the kernels' signatures.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from developing_page import ROOT, add_exercise, apply, diffs, scratch_package, section

RECIPES = ("Adding a one-CTA mainloop", "Adding a scheduler", "Adding a grouped tile order", "Adding an epilogue op",
           "Adding a mixed-input variant")


@pytest.mark.parametrize("title", RECIPES)
def test_each_kernel_recipe_is_a_diff_of_one_file(title):
    assert [path for path, _ in diffs(title)] == [{
        "Adding a one-CTA mainloop": "cutecourse/kernels/hopper_gemm.py",
        "Adding a scheduler": "cutecourse/kernels/tile_scheduler.py",
        "Adding a grouped tile order": "cutecourse/kernels/group_walk.py",
        "Adding an epilogue op": "cutecourse/kernels/epilogue_op.py",
        "Adding a mixed-input variant": "cutecourse/kernels/mixed_variants.py"}[title]]


@pytest.mark.parametrize("title", RECIPES + ("Adding an exercise",))
def test_a_recipe_sends_its_reader_to_the_tests_of_their_class_not_of_the_page(title):
    """This file re-applies the page's diffs: on a tree that followed a recipe it cannot, so no
    recipe tells its reader to run it; each names the tests that compile the reader's class."""
    text = section(title)
    assert "test_developing_recipes" not in text, title
    assert "tests/test_" in text, title


def added_class(title: str, module):
    """The one class the section's diff adds, defined from the diff's ``+`` lines in a copy of
    ``module``'s namespace (as the diff would put it there), up to the table line that names it."""
    added = [ln[1:] for _, hunks in diffs(title) for _, lines in hunks for ln in lines if ln.startswith("+")]
    table = next((i for i, ln in enumerate(added) if re.match(r"[A-Z_]+ = ", ln)), len(added))
    code = "\n".join(added[:table])
    namespace = dict(vars(module))
    exec(compile(code, "docs/DEVELOPING.md", "exec"), namespace)  # noqa: S102  (the page's own code)
    new = [v for k, v in namespace.items() if isinstance(v, type) and k not in vars(module)]
    assert len(new) == 1, (title, new)
    return new[0]


def test_the_pages_scheduler_changes_the_tile_order_of_the_loops():
    from cutecourse.inspect import compile_here
    from cutecourse.kernels import gemm_launch, tile_scheduler
    from cutecourse.kernels.hopper_gemm_persistent import PersistentHopperGemm

    columns = added_class("Adding a scheduler", tile_scheduler)
    fields = dict(first=0, stride=1, clusters_m=3, clusters_n=2, total=6, k_tiles=1, group_m=16,
                  cluster_mn=(1, 1), in_cluster=(0, 0))
    order = [columns(**fields).tile_of(w) for w in range(6)]  # on Python ints
    assert order == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]  # column by column
    banded, column = (compile_here(k, *gemm_launch.Entry(type(k)).fake_arguments(k)) for k in (
        PersistentHopperGemm(), PersistentHopperGemm(scheduler=columns)))
    # the same loops (the scheduler is carried through both roles' loops) ...
    for what in ("wgmma", "TMA loads", "TMA stores", "mbarrier waits"):
        assert column.count(what) == banded.count(what), what
    # ... with the band arithmetic (a min per item, GROUP_M rows) gone
    assert column.ptx != banded.ptx and column.ptx.count("min.s32") < banded.ptx.count("min.s32")


def test_the_pages_op_compiles_with_a_bf16_row_operand():
    import torch

    from cutecourse.errors import ShapeError
    from cutecourse.inspect import compile_here
    from cutecourse.kernels import epilogue_op, gemm_launch, registry
    from cutecourse.kernels.hopper_gemm_persistent import PersistentHopperGemm

    op = added_class("Adding an epilogue op", epilogue_op)()
    assert epilogue_op.described(op) == (epilogue_op.Operand("scale", "bfloat16", "row"),)
    kernel = PersistentHopperGemm(epilogue_op=op)
    r = compile_here(kernel, *gemm_launch.Entry(type(kernel)).fake_arguments(kernel))
    assert r.ptx.count("ld.global.b16") >= 1 and r.ptx.count("cvt.f32.bf16") >= 1 and r.spill_bytes == 0
    # and its launcher wants M bf16 values
    a, c = torch.zeros(256, 64).half(), torch.zeros(256, 128).half()
    with pytest.raises(ShapeError, match=r"per row of C \(M = 256\)"):
        registry.entry("persistent").launcher(a, a[:128], c, epilogue_op=op,
                                              epilogue_args=(torch.zeros(128).bfloat16(),))


#: What the copy does once the recipes are in: the names the page gives, then one compile each.
CHECK = """
from cutecourse.inspect import compile_report
from cutecourse.kernels import group_walk, hopper_gemm as hg, hopper_gemm_cluster as hc, mixed_variants, registry
from cutecourse.kernels.epilogue_op import RowScale
from cutecourse.kernels.tile_scheduler import SCHEDULERS, ColumnMajorScheduler

eager = hg.variant_class("eager_release")
assert eager is hg.EagerReleaseHopperGemm and "eager_release" in hg.all_variants()
assert isinstance(hc.ENTRY.kernel(cluster=(2, 1), variant="eager_release"), eager)
assert SCHEDULERS["columns"] is ColumnMajorScheduler
assert group_walk.SCHEDULERS["column_major"] is group_walk.ColumnMajorGroups
assert mixed_variants.variant_class("no_store") is mixed_variants.NoStoreMixedGemm
import torch
from cutecourse.kernels.epilogue_op import AddBias
c = torch.ones(2, 3)  # each op keeps its own reference: the op went in after AddBias's last method
assert torch.equal(RowScale().reference(c, torch.tensor([2.0, 3.0]).bfloat16()), torch.tensor([[2.0] * 3, [3.0] * 3]))
assert torch.equal(AddBias().reference(c, torch.tensor([1.0, 2.0, 3.0])), torch.tensor([[2.0, 3.0, 4.0]] * 2))
for target, params in [("cutecourse.kernels.hopper_gemm:compile_target", dict(variant="eager_release")),
                       (registry.target("persistent"), dict(scheduler="columns", epilogue_op="RowScale")),
                       ("cutecourse.kernels.grouped_targets:hopper", dict(scheduler="column_major")),
                       ("cutecourse.kernels.mixed_input:compile_target", dict(tile_m=16, variant="no_store"))]:
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
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(root), str(test)]
    run = subprocess.run(command, env=env, cwd=root, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0 and "4 passed" in run.stdout, run.stdout[-3000:] + run.stderr[-2000:]
    # each of the checker's parts catches a mistake of the page's test: without the objection, the
    # consume that issues no wgmma is not named (the CPU model replays barriers, not tensor cores)
    checker = root / "cutecourse" / "exercises" / "nb03.py"
    text = checker.read_text()
    assert text.count("objections=(_multiplies,)") == 1
    checker.write_text(text.replace("objections=(_multiplies,)", "objections=()"))
    run = subprocess.run(command + ["-k", "never"], env=env, cwd=root, capture_output=True, text=True, timeout=900)
    assert run.returncode != 0 and "1 failed" in run.stdout, run.stdout[-3000:] + run.stderr[-2000:]


def test_the_epilogue_schedule_table_gives_each_familys_hook_signatures():
    """The page's table of make_epilogue / store_tile / finish_stores / tile_origin per family is the code's."""
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
        cells = [c.strip() for c in row.split("|")][:4]
        for hook, cell in zip(("make_epilogue", "store_tile", "finish_stores", "tile_origin"), cells, strict=True):
            params = [p.name if p.default is inspect.Parameter.empty else f"{p.name}={p.default}"
                      for p in list(inspect.signature(getattr(cls, hook)).parameters.values())[1:]]
            assert cell.startswith(f"`({', '.join(params)})`"), (name, hook, cell, params)


def test_the_mixed_input_store_tile_is_the_pages():
    """The page's one epilogue hook of the mixed-input kernel, beside the table, is the code's."""
    import inspect

    from cutecourse.kernels.hopper_mixed_gemm import HopperMixedGemm

    text = " ".join((ROOT / "docs" / "DEVELOPING.md").read_text().split())
    params = ", ".join(list(inspect.signature(HopperMixedGemm.store_tile).parameters)[1:])
    assert f"(`HopperMixedGemm`) has only `store_tile({params})`" in text, params
