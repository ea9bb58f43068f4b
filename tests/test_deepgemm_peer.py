"""benchmarks/deepgemm_peer.py and its modules on the CPU: DeepGEMM's packing of the course's
quantized groups, the course rows through the public launcher, the plan, the run and its summary on
stand-in rows, and a crash in the probe child costing only DeepGEMM's rows. The kit's tools:
test_deepgemm_kit.py."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tools"))

import deepgemm_build  # noqa: E402
import deepgemm_call  # noqa: E402
import deepgemm_peer  # noqa: E402
import deepgemm_probe  # noqa: E402

torch = pytest.importorskip("torch")


def _groups(rows, n=256, k=384):
    from cutecourse.kernels import grouped

    torch.manual_seed(1)
    return grouped.quantize_fp8([torch.randn(m, k) for m in rows], [torch.randn(n, k) for _ in rows])


def test_packing_computes_each_groups_product():
    from cutecourse.models import blockwise_fp8 as fp8b

    rows = [256, 128, 384]
    qA, SA, qB, SB = _groups(rows)
    a, sfa, b, sfb, m_indices = deepgemm_call.deepgemm_inputs(qA, SA, qB, SB, rows)
    assert a.shape == (768, 384) and sfa.shape == (768, 3) and b.shape == (3, 256, 384) and sfb.shape == (3, 2, 3)
    assert m_indices.dtype == torch.int32 and m_indices.tolist() == [0] * 256 + [1] * 128 + [2] * 384
    ref = torch.cat([fp8b.scaled_mm_reference(*q) for q in zip(qA, SA, qB, SB)])
    out = deepgemm_call.emulate_deepgemm(a, sfa, b, sfb, m_indices)
    assert (out - ref).abs().max() / ref.abs().max() < 1e-5
    # the check can fail: rows given to the wrong group
    wrong = deepgemm_call.emulate_deepgemm(a, sfa, b, sfb, m_indices.flip(0))
    assert (wrong - ref).abs().max() / ref.abs().max() > 1e-1


@pytest.mark.parametrize("label", ["course fp8", "course fp8 128x192 2x1"])
def test_course_rows_pass_every_argument_check_of_the_public_launcher(label):
    """The course's rows go through ``grouped.launcher_fp8`` in its current operand order: on the
    CPU every dtype, shape and scale check passes and the first refusal is the missing GPU."""
    from cutecourse.errors import CourseError, DeviceError

    rows = [256, 128]
    qA, SA, qB, SB = _groups(rows)
    Cs = [torch.empty(m, 256, dtype=torch.bfloat16) for m in rows]
    with pytest.raises(DeviceError, match="launches a Hopper"):
        deepgemm_peer.course_launcher(qA, SA, qB, SB, Cs, deepgemm_peer.peers.COURSE_FP8[label])
    # the checks are real: A's scales given for B's are refused before the GPU is asked for
    with pytest.raises(CourseError) as refused:
        deepgemm_peer.course_launcher(qA, SB, qB, SA, Cs, deepgemm_peer.peers.COURSE_FP8[label])
    assert not isinstance(refused.value, DeviceError) and "sa" in str(refused.value)


def test_cpu_check_prints_the_plan(capsys):
    assert deepgemm_peer.cpu_check(deepgemm_peer.SHAPES) == 0
    out = capsys.readouterr().out
    assert "CPU_CHECK ok" in out and all(name in out for name in deepgemm_peer.SHAPES)
    assert len(deepgemm_peer.SHAPES) == 4


def test_summary_ratios_to_the_best_peer():
    from cutecourse import bench

    rows = [bench.Row(deepgemm_peer.DEEPGEMM, 1.0, [1.0]), bench.Row(deepgemm_peer.COURSE, 1.0, [1.0]),
            bench.Row(deepgemm_peer.TWIN, 1.0, [1.0])]
    for r, t in zip(rows, (1100.0, 990.0, 1000.0)):
        r.tflops = t
    res = bench.BenchResult("t", bench.Work(flops=1), deepgemm_peer.TWIN, rows, {}, {})
    s = deepgemm_peer.summary({"dg x": res})["dg x"]
    assert s["best peer"] == deepgemm_peer.DEEPGEMM
    assert s["ratio to best peer"][deepgemm_peer.COURSE] == pytest.approx(0.9)
    assert s["course / peer"][deepgemm_peer.COURSE][deepgemm_peer.TWIN] == pytest.approx(0.99)
    assert list(s["course / peer"]) == [deepgemm_peer.COURSE]


def test_without_deepgemm_the_reason_says_how_to_build_it(monkeypatch, tmp_path):
    monkeypatch.setattr(deepgemm_build, "DEST", tmp_path / "deepgemm")
    monkeypatch.setattr(sys, "path", list(sys.path))
    for key in ("CUDA_HOME", "DG_JIT_CACHE_DIR", "DG_PRINT_CONFIGS", "DG_JIT_PTXAS_VERBOSE", "DG_JIT_DUMP_SASS"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setitem(sys.modules, "deep_gemm", None)  # as if not built
    dg, why = deepgemm_call.import_deepgemm()
    assert dg is None and "deepgemm_kit.py build" in why


class QuietMonitor:
    """``bench.GpuMonitor`` without a GPU: no clocks, no power."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def window(self, name):
        return self

    def summary(self, name):
        return None, None


@pytest.fixture
def stand_in_shapes(monkeypatch):
    """Each shape's cases as stand-ins (the course rows and cuBLAS's twin, 100 us each, no
    DeepGEMM row of their own); returns {shape: the DeepGEMM module the shape was given}."""
    from cutecourse import bench

    seen = {}

    def fake_cases(name, dg, cases, errors, notes, course_rows):
        seen[name] = dg
        cases.extend(bench.Case(label, lambda: None) for label in (*course_rows, deepgemm_peer.TWIN))
        return 2 * 1024 * 256 * 512, [512, 512], 256, 512

    monkeypatch.setattr(deepgemm_peer, "shape_cases", fake_cases)
    monkeypatch.setattr(bench, "time_us", lambda case, *a, **k: [100.0] * 2)
    monkeypatch.setattr(bench, "GpuMonitor", QuietMonitor)
    return seen


def test_run_times_every_row_and_saves_a_result_set(monkeypatch, tmp_path):
    """``run``, ``summary`` and ``save`` on stand-in cases (no GPU): what the H100 run writes."""
    from cutecourse import bench

    speeds = {deepgemm_peer.DEEPGEMM: 500.0, deepgemm_peer.COURSE: 550.0, deepgemm_peer.TWIN: 520.0}

    def fake_cases(name, dg, cases, errors, notes, course_rows):
        if name == deepgemm_peer.SHAPES[2]:
            raise RuntimeError("out of memory")  # one shape failing: the others still count
        cases.extend(bench.Case(label, lambda: None) for label in (deepgemm_peer.DEEPGEMM, *course_rows,
                                                                   deepgemm_peer.TWIN))
        errors.update({c.name: 1e-3 for c in cases})
        return 2 * 1024 * 256 * 512, [512, 512], 256, 512

    monkeypatch.setattr(deepgemm_peer, "shape_cases", fake_cases)
    monkeypatch.setattr(bench, "time_us", lambda case, *a, **k: [speeds[case.name]] * 2)
    monkeypatch.setattr(bench, "GpuMonitor", QuietMonitor)
    results, notes = deepgemm_peer.run(deepgemm_peer.SHAPES[:3], deepgemm_peer.SMOKE, object(), "")
    assert "out of memory" in notes[deepgemm_peer.SHAPES[2]]["failed"] and deepgemm_peer.SHAPES[2] not in results
    table = deepgemm_peer.summary(results)
    first = table[deepgemm_peer.SHAPES[0]]
    assert first["best peer"] == deepgemm_peer.DEEPGEMM  # 500 us is the faster peer
    assert first["course / peer"][deepgemm_peer.COURSE][deepgemm_peer.TWIN] == pytest.approx(520 / 550, abs=1e-3)
    [path] = deepgemm_peer.save(results, {"summary": table}, [tmp_path])
    loaded = bench.load_set(deepgemm_peer.RESULT, tmp_path)
    assert list(loaded) == deepgemm_peer.SHAPES[:2] and path.name == f"{deepgemm_peer.RESULT}.json"
    assert loaded[deepgemm_peer.SHAPES[0]].baseline == deepgemm_peer.TWIN


def test_run_leaves_deepgemm_out_where_the_probe_failed_and_saves_each_shape(stand_in_shapes):
    seen, saved = stand_in_shapes, []
    dg, shapes = object(), deepgemm_peer.SHAPES[:2]
    _, notes = deepgemm_peer.run(shapes, deepgemm_peer.SMOKE, dg, "", skip={shapes[1]: "killed by SIGSEGV"},
                                 on_shape=lambda results, notes: saved.append(list(results)))
    assert seen == {shapes[0]: dg, shapes[1]: None}
    assert notes[shapes[1]][deepgemm_peer.DEEPGEMM] == "killed by SIGSEGV" and not notes[shapes[0]]
    assert saved == [[shapes[0]], list(shapes)]  # saved after every shape


def test_a_crash_in_the_probe_costs_only_deepgemms_rows(tmp_path, capsys):
    """A real child that checks one shape, then dies of a segmentation fault on the next."""
    ok = '{"shape": "a", "why": ""}'
    crash = f"print('DEEPGEMM_PROBE {ok}', flush=True); print('b: first call', flush=True); " \
            "import ctypes; ctypes.string_at(0)"
    out = deepgemm_probe.probe_deepgemm(["a", "b", "c"], 60, [tmp_path], cmd=[sys.executable, "-c", crash])
    assert out["a"] == ""
    assert "killed by SIGSEGV on this shape" in out["b"] and "b: first call" in out["b"]
    assert out["c"].startswith("not probed")
    assert "b: first call" in (tmp_path / "deepgemm_probe.log").read_text()
    assert "child killed by SIGSEGV" in capsys.readouterr().out


def test_main_after_a_crashed_probe_times_and_saves_the_other_rows(monkeypatch, tmp_path, capsys,
                                                                    stand_in_shapes):
    """The whole ``main`` on stand-ins: the probe child died on the second shape; DeepGEMM is loaded
    for the first shape only, every shape is timed and the result set is saved (no GPU here)."""
    import cutecourse
    from cutecourse import bench

    shapes = deepgemm_peer.SHAPES[:2]
    dg = type("dg", (), {"__version__": "stand-in"})()
    seen = stand_in_shapes
    monkeypatch.setattr(cutecourse.modes, "require_gpu", lambda target: None)
    monkeypatch.setattr(deepgemm_peer, "probe_deepgemm",
                        lambda s, timeout, logs: {shapes[0]: "", shapes[1]: "probe killed by SIGSEGV"})
    monkeypatch.setattr(deepgemm_peer, "import_deepgemm", lambda: (dg, ""))
    monkeypatch.setattr(deepgemm_peer, "provenance", lambda d: {"deep_gemm": d.__version__})
    monkeypatch.delenv("OUT", raising=False)
    monkeypatch.setattr(sys, "argv", ["deepgemm_peer.py", "--smoke", "--out", str(tmp_path), "--shapes", ",".join(shapes)])
    assert deepgemm_peer.main() == 1  # DeepGEMM is missing on one shape
    assert seen == {shapes[0]: dg, shapes[1]: None}
    loaded = bench.load_set(deepgemm_peer.RESULT, tmp_path)
    assert list(loaded) == list(shapes)
    import json

    body = json.loads((tmp_path / f"{deepgemm_peer.RESULT}.json").read_text())
    assert body["notes"][shapes[1]][deepgemm_peer.DEEPGEMM] == "probe killed by SIGSEGV"
    assert "partial" not in body  # the final save replaces the per-shape ones
    assert "DEEPGEMM_PEER incomplete" in capsys.readouterr().out
