"""Notebook 08's models and pictures: the decode roofline's two ceilings, the kernel's view of its
int4 weights (every thread's conversion, bit for bit against torch's dequantization), the
measured points read from a result set, and the pictures drawn from them."""

import pytest
import torch

from cutecourse.bench import BenchResult, Row, Work
from cutecourse.models import decode_roofline as dr
from cutecourse.models import int4_threads
from cutecourse.quant import dequantize, quantize_int4, reorder


def test_the_bounds_are_bytes_and_flops():
    b = dr.bound(1, 8192, 8192)
    assert b.binds == "memory" and b.memory_us == pytest.approx((2 * 8192 * 8192 + 4 * 8192) / 4.8e12 * 1e6)
    int4 = dr.bound(1, 8192, 8192, bits=4, group=128)
    assert 3.8 < b.us / int4.us < 4.0  # the scales, x and y keep it under 4x
    big = dr.bound(4096, 8192, 8192)
    assert big.binds == "compute" and dr.bound(4096, 8192, 8192, bits=4).us == big.us  # int4 saves nothing
    assert dr.crossover(16) == pytest.approx(206.0, abs=0.1) and dr.crossover(4) == pytest.approx(51.5, abs=0.1)


def test_weight_bytes_count_the_scales():
    assert dr.weight_bytes(64, 256, bits=16) == 2 * 64 * 256
    assert dr.weight_bytes(64, 256, bits=4, group=128) == 64 * 256 // 2 + 2 * 64 * 2
    assert dr.weight_bytes(64, 256, bits=4, group=None) == 64 * 256 // 2 + 2 * 64


def test_conversions_grow_with_the_token_tiles():
    assert dr.conversions(1, 64, 64, 8) == 64 * 64
    assert dr.conversions(65, 64, 64, 64) == 2 * 64 * 64


@pytest.mark.parametrize("shape, group, zero_point, dtype", [
    ((192, 320), 64, True, torch.bfloat16), ((128, 448), 64, False, torch.bfloat16),
    ((64, 768), 256, True, torch.bfloat16), ((320, 128), None, False, torch.bfloat16),
    ((192, 320), 64, True, torch.float16), ((128, 448), None, False, torch.float16)])
def test_every_thread_s_conversion_is_dequantize_bit_for_bit(shape, group, zero_point, dtype):
    w = torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape))) * 0.03
    packed, scales, zeros = quantize_int4(w, group, zero_point=zero_point, dtype=dtype)
    mine = int4_threads.kernel_weights(packed, scales, zeros)
    assert mine.dtype == dtype
    assert torch.equal(mine.view(torch.int16), dequantize(packed, scales, zeros).view(torch.int16))


def test_a_wrong_reorder_would_show():
    """The model really reads the reorder: words swapped between two threads change W'."""
    w = torch.randn(64, 64, generator=torch.Generator().manual_seed(1))
    packed, scales, zeros = quantize_int4(w, 64)
    swapped = packed.clone()
    swapped[0, :4], swapped[0, 4:] = packed[0, 4:], packed[0, :4]  # threads 0 and 1
    assert not torch.equal(int4_threads.kernel_weights(swapped, scales, zeros), dequantize(packed, scales, zeros))


def test_thread_rows_are_the_fragment_s():
    for t in (0, 5, 37, 127):
        g, g8 = int4_threads.thread_rows(t)
        assert {reorder.fragment_coord(t, v)[0] for v in range(8)} == {g, g8}


def _result(m, n, k, us):
    rows = [Row(name, t, [t]) for name, t in us.items()]
    return BenchResult(f"M = {m}", Work(flops=2 * m * n * k), "cuBLAS bf16", rows, {"m": m, "n": n, "k": k})


def test_measured_points_are_read_per_shape_and_sorted_by_m():
    results = {"b": _result(16, 64, 64, {"cuBLAS bf16": 5.0, "course mixed_mm": 2.0}),
               "a": _result(1, 64, 64, {"cuBLAS bf16": 4.0, "course mixed_mm": 1.0}),
               "other": _result(1, 128, 64, {"cuBLAS bf16": 9.0})}
    got = dr.measured(results, 64, 64)
    assert got == {"cuBLAS bf16": [(1, 4.0), (16, 5.0)], "course mixed_mm": [(1, 1.0), (16, 2.0)]}


def test_the_pictures_state_their_point():
    import matplotlib

    matplotlib.use("Agg")
    from cutecourse.viz import mixed_input as vm

    fig = vm.draw_roofline(measured={"course mixed_mm": [(1, 9.0), (16, 9.5)]})
    assert "with the measured points" in fig.axes[0].get_title()
    assert "the model alone" in vm.draw_roofline().axes[0].get_title()
    assert "0x000F000F" in vm.draw_word().axes[0].get_title()
    reorder_fig = vm.draw_reorder()  # the block, slice 0 enlarged with value indices, the packed block
    assert "value index" in reorder_fig.axes[1].get_title() and "16 B" in reorder_fig.axes[2].get_title()
    assert len(vm.draw_ampere_tiles().axes) == 2


def test_the_roofline_picture_agrees_with_the_table_beside_it():
    """The title's ratio is the bounds' at M = 1 (3.9x on 8192 x 8192, as the notebook's table
    prints), the M* labels sit at the top of the axes (clear of the x axis), and each measured
    case is drawn in its own colour."""
    import matplotlib

    matplotlib.use("Agg")
    from cutecourse.viz import mixed_input as vm

    ratio = dr.bound(1, 8192, 8192).us / dr.bound(1, 8192, 8192, bits=4).us
    ax = vm.draw_roofline(8192, 8192).axes[0]
    assert f"int4 {ratio:.1f}x lower" in ax.get_title() and f"{ratio:.1f}" == "3.9"
    labels = [t for t in ax.texts if "M* =" in t.get_text()]
    assert len(labels) == 2 and all(t.get_position()[1] > 0.9 for t in labels)
    measured = {name: [(1, 10.0 + i), (16, 11.0 + i)] for i, name in enumerate(vm.CASE_COLORS)}
    ax = vm.draw_roofline(measured=measured).axes[0]
    drawn = {line.get_label(): line.get_color() for line in ax.lines if line.get_label().startswith("measured")}
    assert drawn == {f"measured: {name}": color for name, color in vm.CASE_COLORS.items()}


def test_speedups_are_over_the_baseline_at_its_own_m():
    points = {"cuBLAS bf16": [(1, 30.0), (16, 32.0)], "course mixed_mm": [(1, 10.0), (16, 16.0), (64, 20.0)],
              "torch tinygemm int4": [(16, 8.0)]}
    got = dr.speedups(points)
    assert got == {"cuBLAS bf16": {1: 1.0, 16: 1.0}, "course mixed_mm": {1: 3.0, 16: 2.0},
                   "torch tinygemm int4": {16: 4.0}}
    assert dr.speedups({"course mixed_mm": [(1, 10.0)]}) == {"course mixed_mm": {}}


def test_the_read_reference_is_tabled_only_where_bytes_bind():
    """The plain read of the int4 bytes (no GEMM) is a reference for a memory-bound GEMM only: past
    M = 64 its "speed-up" would be a reduction racing a GEMM, so it is left out there. It is
    tabled as a reference, not as a floor: the GEMM's own loads read faster."""
    ms = (1, 64, 128, 4096)
    points = {"cuBLAS bf16": [(m, 30.0 + m) for m in ms], dr.FLOOR: [(m, 8.0) for m in ms],
              "course mixed_mm": [(m, 10.0 + m) for m in ms]}
    got = dr.speedups(points)
    assert dr.FLOOR not in got
    assert sorted(got[dr.READ_REFERENCE]) == [1, 64] and got[dr.READ_REFERENCE][64] == 94.0 / 8.0
    assert sorted(got["course mixed_mm"]) == list(ms)


def test_the_notebook_draws_and_tables_a_stored_measurement(monkeypatch, capsys):
    """Notebook 08's two cells that read benchmarks/results/mixed_input.json, run on a result set
    as benchmarks/mixed_input.py writes it: the three cases are drawn on the roofline and tabled
    as speed-ups; without the file, each says that no measurement is stored."""
    import json
    import re

    import matplotlib

    matplotlib.use("Agg")
    from cutecourse import bench
    from cutecourse.viz import mixed_input as vm

    from pathlib import Path

    cells = ["".join(c["source"]) for c in json.loads(
        (Path(__file__).resolve().parents[1] / "notebooks" / "08_mixed_input_gemm.ipynb").read_text())["cells"] if c["cell_type"] == "code"]
    roofline = next(c for c in cells if 'bench.load_set("mixed_input")' in c)
    table = next(c for c in cells if "dr.speedups(" in c)
    cases = {"cuBLAS bf16": 30.0, "torch tinygemm int4": 12.0, "course mixed_mm": 15.0,
             "course mixed_mm tile_m=64": 14.0}  # a --variant row: tabled, not drawn
    stored = {f"8192 x 8192, M = {m}": _result(m, 8192, 8192, {c: t * (1 + m / 64) for c, t in cases.items()})
              for m in (1, 16, 256)}
    drawn = {}
    monkeypatch.setattr(bench, "load_set", lambda name: stored)
    monkeypatch.setattr(vm, "draw_roofline", lambda *a, measured=None, **k: drawn.update(measured or {}))
    ns = {"bench": bench, "dr": dr, "vm": vm, "n": 8192, "k": 8192}
    exec(roofline, ns)  # noqa: S102
    exec(table, ns)  # noqa: S102
    out = capsys.readouterr().out
    assert set(drawn) == set(vm.CASE_COLORS) and [m for m, _ in drawn["course mixed_mm"]] == [1, 16, 256]
    assert "W 8192 x 8192, speed-up over cuBLAS bf16" in out and "No measurement" not in out
    assert re.search(r"torch tinygemm int4 +2\.50 +2\.50 +2\.50\n", out) and "course mixed_mm tile_m=64" in out
    assert "28672" not in out  # shapes the run left out print nothing

    def missing(name):
        raise FileNotFoundError(name)

    monkeypatch.setattr(bench, "load_set", missing)
    exec(roofline, ns)  # noqa: S102
    exec(table, ns)  # noqa: S102
    assert capsys.readouterr().out.count("No measurement is stored") == 2
