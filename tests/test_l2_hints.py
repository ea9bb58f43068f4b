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
    assert cls(l2_hints=list(A_FIRST)).l2_hints == A_FIRST  # as JSON arguments spell a pair
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
        L2_HINT_PAIRS = {**sm90.L2_HINT_PAIRS, "only_in_this_test": (sm90.EVICT_LAST, sm90.EVICT_LAST)}

    assert OwnPairs(l2_hints="only_in_this_test").l2_hints == (sm90.EVICT_LAST, sm90.EVICT_LAST)
    with pytest.raises(CourseError, match="only_in_this_test"):
        hp.PersistentHopperGemm(l2_hints="only_in_this_test")


def test_every_pair_of_the_table_is_two_known_policies():
    """A pair added to ``sm90.L2_HINT_PAIRS`` names A's and B's policy, each a createpolicy
    constant the course defines (the compile test below puts each pair in the PTX)."""
    for name, pair in sm90.L2_HINT_PAIRS.items():
        assert len(pair) == 2 and set(pair) <= {sm90.EVICT_FIRST, sm90.EVICT_LAST}, name


@pytest.mark.parametrize("name", list(sm90.L2_HINT_PAIRS))
@pytest.mark.parametrize("target", ["cutecourse.kernels.hopper_gemm_persistent:compile_target",
                                    "cutecourse.kernels.grouped_targets:hopper"])
def test_a_named_pair_puts_its_policies_in_the_persistent_and_grouped_ptx(target, name):
    from cutecourse.inspect import compile_report

    pair = sm90.L2_HINT_PAIRS[name]
    hinted = compile_report(target, l2_hints=name)
    assert set(pair) <= _policies(hinted.ptx) and "L2::cache_hint" in hinted.ptx
    assert hinted.spill_bytes == 0
    assert not set(pair) & _policies(compile_report(target).ptx)


_GPU_CHECK = """
import json, sys, torch
from cutecourse.kernels import grouped, int4_dequantize
from cutecourse.kernels import hopper_gemm_persistent as hp
from cutecourse.quant import quantize_int4
from cutecourse.quant.int4 import dequantize

out = []
for hints in json.loads(sys.argv[1]):
    torch.manual_seed(0)
    a, b = torch.randn(1000, 4104, device="cuda").half(), torch.randn(520, 4104, device="cuda").half()
    ref = a.float() @ b.float().T
    c = hp.gemm(a, b, l2_hints=hints)
    dense = float((c.float() - ref).abs().max() / ref.abs().max())
    cs = grouped.grouped_gemm([a[:300], a[300:]], [b, b[:256]], l2_hints=hints)
    group = max(float((x.float() - r).abs().max() / r.abs().max()) for x, r in zip(cs, (ref[:300], ref[300:, :256])))
    out.append([hints, dense, group])
packed, scales, zeros = (t.cuda() for t in quantize_int4(torch.randn(256, 512), 64, zero_point=True))
w = int4_dequantize.ENTRY.gemm(packed, scales, zeros)
out.append(["dequantize", bool(torch.equal(w.cpu(), dequantize(packed.cpu(), scales.cpu(), zeros.cpu())))])
print("RESULT", json.dumps(out))
"""


@pytest.mark.gpu
def test_named_hints_keep_the_results_on_the_gpu(run_gpu_script):
    """An eviction policy changes what L2 keeps, never a value: the persistent and grouped kernels
    with ``l2_hints`` match fp32 torch as without; and int4_dequantize's ``gemm`` is W' bit for bit."""
    results = run_gpu_script(_GPU_CHECK, [None, "a_first", "b_first"])
    assert all(dense < 2e-2 and group < 2e-2 for _, dense, group in results[:-1]), results
    assert results[-1] == ["dequantize", True], results
