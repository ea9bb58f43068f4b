"""The harness's arithmetic, files and pictures (timing itself runs on the GPU machine)."""

import json

import pytest

from cutecourse import bench


def _result():
    rows = [bench.Row("torch.add", 100.0, [99.0, 100.0, 101.0], gbps=3000.0, ratio=1.0),
            bench.Row("mine", 90.0, [90.0, 90.0, 91.0], gbps=3333.3, ratio=1.111)]
    return bench.BenchResult("add", bench.Work(bytes=300_000_000), "torch.add", rows,
                             {"n": 1}, {"device": "test GPU", "date": "2026-01-01T00:00:00"})


def test_round_trip_through_json(tmp_path):
    path = _result().save("x", tmp_path)
    data = json.loads(path.read_text())
    assert data["unit"] == "GB/s" and data["rows"][1]["name"] == "mine"
    back = bench.load("x", tmp_path)
    assert back.row("mine").us == 90.0 and back.environment["device"] == "test GPU"


def test_table_plot_and_spread():
    r = _result()
    assert "1.111x" in r.table() and "test GPU" in r.table()
    assert r.row("torch.add").spread == pytest.approx(0.02)
    ax = r.plot()
    assert ax.get_xlabel() == "GB/s" and len(ax.patches) == 2
    with pytest.raises(KeyError, match="rows are"):
        r.row("nope")


def test_missing_result_says_how_to_make_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="benchmark script on a GPU"):
        bench.load("never_measured", tmp_path)


def test_compare_refuses_a_missing_baseline():
    with pytest.raises(ValueError, match="baseline"):
        bench.compare("t", [bench.Case("a", lambda: None)], bench.Work(bytes=1), "torch.add")


def test_committed_results_record_device_and_versions():
    files = sorted(bench.RESULTS_DIR.glob("*.json"))
    assert files, "no committed benchmark results"
    for f in files:
        d = json.loads(f.read_text())
        for name, res in (d["set"].items() if "set" in d else [("", d)]):  # a result set: each member
            env = res["environment"]
            assert env.get("device") and env.get("date") and env.get("nvidia-cutlass-dsl"), (f.name, name)


def test_readme_table_comes_from_the_result_files():
    import subprocess
    import sys

    root = bench.RESULTS_DIR.parent.parent
    out = subprocess.run([sys.executable, str(root / "benchmarks" / "readme_table.py"), "--check"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout


def test_cold_l2_sets_cover_twice_the_cache():
    made = []
    sets = bench.cold_l2_sets(lambda: made.append(1) or (len(made),), bytes_per_set=20 << 20, l2=50 << 20)
    assert len(sets) * (20 << 20) > 2 * (50 << 20) and sets[0] == (1,) and len(made) == len(sets)
    assert len(bench.cold_l2_sets(lambda: (), bytes_per_set=1 << 30, l2=50 << 20)) == 2


def test_checked_case_poisons_runs_and_compares():
    import torch

    ref = torch.arange(12.0).view(3, 4)
    out = torch.empty(3, 4)
    case = bench.checked_case("copy", lambda: out.copy_(ref), out, ref)
    assert case.name == "copy" and torch.equal(out, ref)
    with pytest.raises(AssertionError, match="half: max relative error"):
        bench.checked_case("half", lambda: out[:2].copy_(ref[:2]), out, ref)  # last row stays NaN
    bench.checked_case("close", lambda: out.copy_(ref * 1.001), out, ref, max_rel_err=1e-2)


def test_benchmark_scripts_import_without_running_and_say_what_they_measure():
    """Every script in benchmarks/ and benchmarks/experiments/ imports (nothing runs: the work
    is behind ``if __name__ == "__main__"``), opens with a docstring that says what it measures,
    and has a ``main`` to run; benchmarks/README.md names each of them. A module the scripts share
    (no ``__main__`` block: ``row_checks.py``) needs the docstring and the README's word only."""
    import importlib.util

    root = bench.RESULTS_DIR.parent
    readme = (root / "README.md").read_text()
    scripts = sorted(root.glob("*.py")) + sorted((root / "experiments").glob("*.py"))
    assert len(scripts) >= 15
    for path in scripts:
        spec = importlib.util.spec_from_file_location(f"bench_script_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert module.__doc__ and len(module.__doc__.split()) >= 10, f"{path.name}: no docstring"
        if 'if __name__ == "__main__":' in path.read_text():
            assert callable(getattr(module, "main", None)), f"{path.name}: no main()"
        assert f"`{path.name}`" in readme, f"benchmarks/README.md does not list {path.name}"


def test_interleaved_rounds_rotate_the_order_and_keep_ratios_per_round(monkeypatch):
    calls = []
    times = {"base": [10.0, 10.0, 12.0], "fast": [5.0, 5.0, 5.0]}  # the GPU slows in round 3
    warmups = []

    def fake_time_us(case, warmup, iterations, repeats):
        if iterations == 3:  # settle_s's estimate of the launch time
            return [100.0]
        warmups.append(warmup)
        calls.append(case.name)
        rnd = sum(1 for c in calls if c == case.name) - 1
        return [times[case.name][rnd]] * repeats

    monkeypatch.setattr(bench, "time_us", fake_time_us)
    cases = [bench.Case("base", None), bench.Case("fast", None)]
    res = bench.compare("t", cases, bench.Work(flops=10**6), "base", rounds=3, progress=False,
                        settle_s=0.01)
    assert min(warmups) == 100  # 0.01 s of 100 us launches before each timing
    assert calls[:2] == ["base", "fast"]  # round 1 in the given order, then shuffled
    assert sorted(calls[2:4]) == sorted(calls[4:6]) == ["base", "fast"]  # each case once per round
    fast = res.row("fast")
    assert fast.round_ratios == [2.0, 2.0, 2.4]
    assert fast.ratio == pytest.approx(2.0)  # medians: 10 us vs 5 us
    assert "3 interleaved rounds" in res.params["timing"]
    assert "ratio per round" in res.table() and "2.000-2.400" in res.table()


def test_gpu_monitor_attributes_samples_to_the_case_that_was_running():
    mon = bench.GpuMonitor()
    mon.samples = [(1.0, 1980, 300.0), (2.0, 1500, 690.0), (3.0, 1400, 700.0), (5.0, 1980, 200.0)]
    mon.windows = {"a": [(0.5, 1.5)], "b": [(1.8, 3.2)]}
    assert mon.summary("a") == (1980, 300.0)
    assert mon.summary("b") == (1450, 695.0)
    assert mon.summary("never ran") == (None, None)
    with mon.window("c"):
        pass
    assert len(mon.windows["c"]) == 1


def test_result_files_without_the_new_fields_still_load(tmp_path):
    d = _result().to_dict()
    for row in d["rows"]:
        for key in ("round_ratios", "sm_mhz", "power_w"):
            row.pop(key)
    (tmp_path / "old.json").write_text(json.dumps(d))
    assert bench.load("old", tmp_path).row("mine").round_ratios == []


def test_result_sets_round_trip(tmp_path):
    res = bench.BenchResult("t", bench.Work(flops=2), "base", [bench.Row("base", 1.0, [1.0])])
    bench.save_set("some_set", {"small": res, "large": res}, tmp_path)
    back = bench.load_set("some_set", tmp_path)
    assert list(back) == ["small", "large"] and back["large"].rows[0].name == "base"
    with pytest.raises(FileNotFoundError, match="run the benchmark"):
        bench.load_set("missing", tmp_path)
