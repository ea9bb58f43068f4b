"""The multicast benchmark's results (benchmarks/multicast.py): the committed measurement reads
back through ``cutecourse.bench``, paired ratios give verdicts, the ncu CSV parses."""

from __future__ import annotations

from cutecourse.kernels import hopper_gemm_cluster as hc


def test_result_helpers_read_the_committed_measurement():
    from cutecourse import bench

    res = bench.load("multicast_fp16_8192")
    assert res.baseline == "cluster 1x1"
    assert {r.name for r in res.rows} >= {hc_name for hc_name in
                                          (f"cluster {a}x{b}" for a, b in hc.CLUSTERS)}
    text = bench.paired_ratio(res, "cluster 2x2")
    assert text.startswith("cluster 2x2 vs cluster 1x1: ") and "paired repeats" in text
    # every check the benchmark made before timing passed (it exits otherwise) and was recorded
    assert all(err < 1e-2 for err in res.params["max_rel_error"].values())


def test_paired_ratio_verdicts():
    from cutecourse import bench
    from cutecourse.bench import BenchResult, Row, Work

    def result(base, other):
        return BenchResult("t", Work(flops=1), "cluster 1x1",
                           [Row("cluster 1x1", 10.0, base), Row("x", 9.0, other)])

    assert "faster in 4 of 4" in bench.paired_ratio(result([10] * 4, [9] * 4), "x")
    assert "slower in 4 of 4" in bench.paired_ratio(result([9] * 4, [10] * 4), "x")
    assert "no consistent difference" in bench.paired_ratio(result([10, 9, 10, 9], [9, 10, 9, 10]), "x")


def test_benchmark_reads_ncu_csv():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "multicast.py"
    spec = importlib.util.spec_from_file_location("bench_multicast", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    text = ('==PROF== Connected to process 1\n'
            '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
            '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
            '"Metric Value"\n'
            '"0","1","python3","h","k","1","7","(256, 1, 1)","(64, 32, 1)","0","9.0","Command line '
            'profiler metrics","dram__bytes_read.sum","byte","1,234,567"\n'
            '"0","1","python3","h","k","1","7","(256, 1, 1)","(64, 32, 1)","0","9.0","Command line '
            'profiler metrics","lts__t_bytes.sum","byte","89"\n')
    assert mod.parse_ncu_csv(text) == {"dram__bytes_read.sum": 1234567.0, "lts__t_bytes.sum": 89.0}
    assert mod.parse_ncu_csv("==ERROR== ERR_NVGPUCTRPERM") == {}
