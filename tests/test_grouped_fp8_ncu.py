"""Issue 24's Nsight Compute experiment (``benchmarks/experiments/grouped_fp8_ncu.py``): how it
reads ncu's output, on canned text in both CSV layouts (the run itself needs an H100 and ncu)."""

import importlib.util
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "experiments" / "grouped_fp8_ncu.py"


@pytest.fixture(scope="module")
def ncu():
    spec = importlib.util.spec_from_file_location("grouped_fp8_ncu", PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


INFO = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
        '"Grid Size","Device","CC"')
METRICS = ["gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second",
           "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
           "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
           "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",
           "smsp__average_warps_issue_stalled_selected_per_issue_active.ratio",
           "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio", "dram__bytes_read.sum"]
UNITS = ["nsecond", "cycle/second", "%", "ratio", "ratio", "ratio", "ratio", "byte"]
#: ID, kernel, then METRICS' values: marker, the course kernel, marker, a small kernel and the twin
KERNELS = [
    ("0", "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>>",
     ["1,536", "1.6e9", "0", "0.1", "0", "1", "0", "0"]),
    ("1", "kernel_cutlass_kernel_BlockScaledGroupedHopperGemm_0",
     ["1,000,000", "1500000000", "71.5", "0.45", "1.2", "1", "0.8", "512,000,000"]),
    ("2", "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>>",
     ["1,480", "1.6e9", "0", "0.1", "0", "1", "0", "0"]),
    ("3", "void at::native::tiny_kernel", ["2,000", "1.6e9", "0", "0", "0", "1", "0", "100"]),
    ("4", "cutlass::device_kernel<f8f8bf16_rowwise>",
     ["800,000", "1500000000", "90", "0.2", "0.1", "1", "0", "600"]),
]
CHILD = 'CHILD{"profiled": ["course fp8 1x1", "dense twin _scaled_mm rowwise"], "errors": {}, "notes": {}}\n'


def _q(values):
    return ",".join(f'"{v}"' for v in values)


def raw_page() -> str:
    """``--csv --page raw``: a column per metric, a units row, a row per kernel."""
    lines = ["==PROF== Connected to process 7", CHILD.strip(), INFO + "," + _q(METRICS),
             _q([""] * 11 + UNITS)]
    lines += [_q([kid, "7", "python3", "h", name, "1", "7", "(384, 1, 1)", "(1, 1, 132)", "0", "9.0", *vals])
              for kid, name, vals in KERNELS]
    return "\n".join(lines) + "\n==PROF== Disconnected from process 7\n"


def details_page() -> str:
    """``--csv`` (details): a row per metric."""
    lines = [INFO + ',"Section Name","Metric Name","Metric Unit","Metric Value"']
    for kid, name, vals in KERNELS:
        lines += [_q([kid, "7", "python3", "h", name, "1", "7", "(384, 1, 1)", "(1, 1, 132)", "0", "9.0",
                      "Command line profiler metrics", m, u, v]) for m, u, v in zip(METRICS, UNITS, vals)]
    return "\n".join(lines) + "\n"


def test_both_csv_layouts_give_the_same_kernels(ncu):
    raw, details = ncu.ncu_records(raw_page()), ncu.ncu_records(details_page())
    assert [r["kernel"] for r in raw] == [k[1] for k in KERNELS]
    assert raw == details
    assert raw[1]["gpu__time_duration.sum"] == 1_000_000.0 and raw[1]["dram__bytes_read.sum"] == 512e6
    assert ncu.ncu_records("==ERROR== ERR_NVGPUCTRPERM: no permission") == []


def test_cases_split_at_the_markers_and_summarized(ncu):
    cases = ncu.split_cases(ncu.ncu_records(raw_page()), ["course fp8 1x1", "dense twin _scaled_mm rowwise"])
    assert [len(v) for v in cases.values()] == [1, 2]
    row = ncu.summarize(cases["course fp8 1x1"], flops=1e12)
    assert row["us"] == 1000.0 and row["sm_mhz"] == 1500.0 and row["tflops"] == 1000.0
    # 1e12 flops in 1000 us at 1500 MHz on 132 SMs: 5051 per SM cycle, 0.617 of 8192
    assert row["flops_per_sm_cycle"] == 5051 and row["of_fp8_peak"] == pytest.approx(0.617, abs=1e-3)
    assert row["tensor_pct"] == 71.5 and row["dram_read_mb"] == 512.0
    assert list(row["stalls"]) == ["wait", "barrier", "long_scoreboard"]  # "selected" is not a stall
    twin = ncu.summarize(cases["dense twin _scaled_mm rowwise"], flops=1e12)
    assert twin["kernel"].startswith("cutlass::device_kernel")
    assert twin["other_kernels"] == ["void at::native::tiny_kernel"]
    text = ncu.table([{"case": "course fp8 1x1", "clock": "none", **row},
                      {"case": "broken", "clock": "base", **ncu.summarize([], 1.0)}])
    assert "course fp8 1x1" in text and "wait 1.20" in text and "ERROR no kernel" in text
    with pytest.raises(ValueError, match="2 profiled ranges"):
        ncu.split_cases(ncu.ncu_records(raw_page()), ["one case"])


def test_child_line_and_known_metrics(ncu):
    assert ncu._child_info(raw_page())["profiled"] == ["course fp8 1x1", "dense twin _scaled_mm rowwise"]
    listing = ("Device GH100 (GH100)\n------------------\nMetric Name                Metric Description\n"
               "dram__bytes_read           # of bytes read from DRAM\n"
               "sm__pipe_tensor_op_gmma_cycles_active   # of cycles where the GMMA pipe was active\n")
    assert ncu.known_metrics(listing) == {"dram__bytes_read", "sm__pipe_tensor_op_gmma_cycles_active"}


def test_ncu_commands(ncu):
    raw = ncu.ncu_command("ncu", "base", ["dram__bytes_read.sum"], ["--child"])
    assert raw[raw.index("--clock-control") + 1] == "base" and raw[raw.index("--page") + 1] == "raw"
    assert "WarpStateStats" in raw and raw[raw.index("--metrics") + 1] == "dram__bytes_read.sum"
    assert raw[-2:] == [str(PATH), "--child"] and "--profile-from-start" in raw
    # the stall-sampling run profiles one case (an earlier slice passed "--kernels" twice: exit 2)
    assert ncu.child_program("p", ["course fp8 2x1"]) == ["--child", "--problem", "p", "--kernels", "course fp8 2x1"]
    source = ncu.ncu_command("ncu", "none", (), ["--child"], source=True)
    assert "SourceCounters" in source and source[source.index("--page") + 1] == "source"
    assert "--metrics" not in source


def test_stall_samples_by_instruction_class(ncu):
    head = '"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)"'
    marker = [head, '"0x10","MOV R1, c[0x0][0x28]","3","3"']
    gemm = [head, '"0x100","QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR20], RZ, !UPT","10","5"',
            '"0x110","WARPGROUP.DEPBAR.LE gsb0, 0x1","40","40"', '"0x120","FFMA R169, R88, R208, R169","30","20"',
            '"0x130","@P0 BAR.SYNC.DEFER_BLOCKING R204, 0x100","15","15"',
            '"0x140","IADD3 R1, R2, R3, RZ","5","1"']
    text = "==PROF== Connected\n" + "\n".join(marker) + "\n\n" + "\n".join(gemm) + "\n"
    out = ncu.source_stalls(text, top=2)
    assert out["samples"] == 100.0
    assert out["by_class"] == {"WARPGROUP": 0.4, "FFMA": 0.3, "BAR": 0.15, "QGMMA": 0.1, "other": 0.05}
    assert out["top"] == [["WARPGROUP.DEPBAR.LE gsb0, 0x1", 0.4], ["FFMA R169, R88, R208, R169", 0.3]]
    assert "error" in ncu.source_stalls("==ERROR== the section is not available")


def test_a_failed_ncu_run_becomes_an_error_row(ncu, monkeypatch):
    import subprocess

    class Done:
        stdout, stderr = "==ERROR== ERR_NVGPUCTRPERM: no permission to access the counters\n", ""

    monkeypatch.setattr(subprocess, "run", lambda *a, **k: Done())
    rows, info = ncu.profile(["ncu"], "base", 1.0)
    assert info == {} and rows[0]["clock"] == "base" and "ERR_NVGPUCTRPERM" in rows[0]["error"]

    class Ok:
        stdout, stderr = raw_page(), ""

    monkeypatch.setattr(subprocess, "run", lambda *a, **k: Ok())
    rows, info = ncu.profile(["ncu"], "none", 1e12)
    assert [r["case"] for r in rows] == info["profiled"] and rows[0]["tflops"] == 1000.0
