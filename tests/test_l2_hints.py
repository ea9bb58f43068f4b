"""L2 hints are one keyword in both kernel families: ``l2_hints=`` takes a name of the class's
``L2_HINT_PAIRS`` (``sm90``'s table, looked up by ``configured.named`` as ``scheduler=`` is), in
the cluster kernel and in every persistent kernel (grouped and FP8 inherit it); the default is
no hints, whose code is the code of no keyword (the PTX fingerprints hold that)."""

from __future__ import annotations

import re

import pytest

from cutecourse.errors import CourseError
from cutecourse.kernels import configured, grouped, sm90
from cutecourse.kernels import hopper_gemm_cluster as hc
from cutecourse.kernels import hopper_gemm_persistent as hp
from cutecourse.kernels.hopper_grouped_gemm_fp8 import BlockScaledGroupedHopperGemm

A_FIRST = sm90.L2_HINT_PAIRS["a_first"]


def _policies(ptx: str) -> set[int]:
    return {int(x) for x in re.findall(r"mov\.b64\s+%rd\d+, (\d+)", ptx)}


@pytest.mark.parametrize("cls", [hc.ClusterHopperGemm, hp.PersistentHopperGemm,
                                 grouped.HOPPER.build, BlockScaledGroupedHopperGemm])
def test_a_name_is_the_pair_of_the_one_table(cls):
    kernel = cls(l2_hints="a_first")
    assert kernel.l2_hints == A_FIRST == kernel.arguments["l2_hints"]
    assert cls(l2_hints=A_FIRST).key() == kernel.key()  # the key holds what the name stands for
    assert cls().l2_hints is None and cls().load_policies() == (None, None)
    assert configured.NAMED["l2_hints"] == "L2_HINT_PAIRS" and cls.L2_HINT_PAIRS is sm90.L2_HINT_PAIRS


@pytest.mark.parametrize("cls", [hc.ClusterHopperGemm, hp.PersistentHopperGemm, grouped.HOPPER.build])
def test_an_unknown_name_or_value_lists_the_names(cls):
    with pytest.raises(CourseError, match="l2_hints='evict'") as err:
        cls(l2_hints="evict")
    assert "'a_first', 'b_first'" in err.value.fix and "L2_HINT_PAIRS" in err.value.fix
    with pytest.raises(CourseError, match="l2_hints=3") as err:
        cls(l2_hints=3)
    assert "'a_first', 'b_first'" in err.value.fix


def test_a_new_pair_is_an_entry_of_a_class_table():
    class OwnPairs(hp.PersistentHopperGemm):
        L2_HINT_PAIRS = {**sm90.L2_HINT_PAIRS, "both_last": (sm90.EVICT_LAST, sm90.EVICT_LAST)}

    assert OwnPairs(l2_hints="both_last").l2_hints == (sm90.EVICT_LAST, sm90.EVICT_LAST)
    with pytest.raises(CourseError, match="both_last"):
        hp.PersistentHopperGemm(l2_hints="both_last")


@pytest.mark.parametrize("target", ["cutecourse.kernels.hopper_gemm_persistent:compile_target",
                                    "cutecourse.kernels.grouped_targets:hopper"])
def test_a_named_pair_puts_its_policies_in_the_persistent_and_grouped_ptx(target):
    from cutecourse.inspect import compile_report

    hinted = compile_report(target, l2_hints="a_first")
    assert set(A_FIRST) <= _policies(hinted.ptx) and "L2::cache_hint" in hinted.ptx
    assert hinted.spill_bytes == 0
    assert not set(A_FIRST) & _policies(compile_report(target).ptx)
