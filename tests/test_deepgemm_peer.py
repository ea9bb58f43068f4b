"""benchmarks/deepgemm_peer.py and tools/deepgemm_kit.py on the CPU: DeepGEMM's packing of the
course's quantized groups, the include closure that decides what the kit carries, the packed kit's
manifest (skipped when ``.deepgemm/`` is not packed), and the build's refusal without a kit."""

import re
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tools"))

import deepgemm_kit  # noqa: E402
import deepgemm_peer  # noqa: E402

torch = pytest.importorskip("torch")


def _groups(rows, n=256, k=384):
    from cutecourse.kernels import grouped

    torch.manual_seed(1)
    return grouped.quantize_fp8([torch.randn(m, k) for m in rows], [torch.randn(n, k) for _ in rows])


def test_packing_computes_each_groups_product():
    from cutecourse.models import blockwise_fp8 as fp8b

    rows = [256, 128, 384]
    qA, SA, qB, SB = _groups(rows)
    a, sfa, b, sfb, m_indices = deepgemm_peer.deepgemm_inputs(qA, SA, qB, SB, rows)
    assert a.shape == (768, 384) and sfa.shape == (768, 3) and b.shape == (3, 256, 384) and sfb.shape == (3, 2, 3)
    assert m_indices.dtype == torch.int32 and m_indices.tolist() == [0] * 256 + [1] * 128 + [2] * 384
    ref = torch.cat([fp8b.scaled_mm_reference(*q) for q in zip(qA, SA, qB, SB)])
    out = deepgemm_peer.emulate_deepgemm(a, sfa, b, sfb, m_indices)
    assert (out - ref).abs().max() / ref.abs().max() < 1e-5
    # the check can fail: rows given to the wrong group
    wrong = deepgemm_peer.emulate_deepgemm(a, sfa, b, sfb, m_indices.flip(0))
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


def test_include_closure_follows_includes_transitively():
    libs = {"cutlass": {"cute/a.hpp": b'#include "b.hpp"\n', "cute/b.hpp": b"#if 0\n#include <cutlass/c.h>\n#endif\n",
                        "cutlass/c.h": b"#include <cuda_runtime.h>\n", "cute/unused.hpp": b""},
            "fmt": {"fmt/format.h": b'#include "base.h"\n', "fmt/base.h": b""}}
    roots = {"csrc/x.cpp": b"#include <cute/a.hpp>\n  #  include <fmt/format.h>\n#include <torch/python.h>\n"}
    got = deepgemm_kit.include_closure(roots, libs)
    assert got == {"cutlass": {"cute/a.hpp", "cute/b.hpp", "cutlass/c.h"}, "fmt": {"fmt/format.h", "fmt/base.h"}}


def test_build_without_a_kit_says_how_to_make_one(tmp_path, capsys):
    assert deepgemm_kit.build(tmp_path / "none.tar.xz", tmp_path / "deepgemm", 1) == 1
    out = capsys.readouterr().out
    assert "DEEPGEMM_BUILD failed" in out and "deepgemm_kit.py pack" in out


@pytest.mark.skipif(not deepgemm_kit.KIT.exists(), reason="kit not packed: python tools/deepgemm_kit.py pack")
def test_packed_kit_holds_what_the_build_and_the_jit_include():
    m = deepgemm_kit.manifest(deepgemm_kit.KIT)
    assert m["deepgemm"].startswith(deepgemm_kit.DEEPGEMM_COMMIT)
    assert m["cutlass"] == deepgemm_kit.CUTLASS_COMMIT and m["fmt"] == deepgemm_kit.FMT_COMMIT
    assert not [p for p in deepgemm_kit.REQUIRED if p not in m["files"]]
    assert deepgemm_kit.KIT.stat().st_size < 3 * 2**20  # it travels beside the DSL kit, under 64 MiB
    with tarfile.open(deepgemm_kit.KIT) as t:
        names = {n[len("deepgemm/"):] for n in t.getnames()}
        assert names == set(m["files"])
        # every <cute/...>, <cutlass/...>, <fmt/...> and <deep_gemm/...> a packed file includes is packed
        roots = {"cute": deepgemm_kit.CUTLASS_DIR, "cutlass": deepgemm_kit.CUTLASS_DIR,
                 "deep_gemm": deepgemm_kit.CUTLASS_DIR, "fmt": deepgemm_kit.FMT_DIR}
        missing = set()
        for name in names:
            if not name.endswith((".h", ".hpp", ".cuh", ".cpp")):
                continue
            body = t.extractfile(f"deepgemm/{name}").read()
            for inc in re.findall(rb'^\s*#\s*include\s*<((cute|cutlass|fmt|deep_gemm)/[^>]+)>', body, re.M):
                path, top = inc[0].decode(), inc[1].decode()
                if f"{roots[top]}/{path}" not in names:
                    missing.add(path)
    assert not missing, sorted(missing)[:10]
    assert "csrc/python_api.cpp" in names and not any(n.startswith("tests/") for n in names)


@pytest.mark.skipif(not (deepgemm_kit.MIRRORS / deepgemm_kit.REPOS["deepgemm"] / "repo").exists(),
                    reason="no git mirror of DeepGEMM here (the fetch tool makes one)")
def test_pack_from_the_mirrors_is_reproducible(tmp_path):
    first = deepgemm_kit.pack(tmp_path / "a.tar.xz", deepgemm_kit.MIRRORS)
    deepgemm_kit.pack(tmp_path / "b.tar.xz", deepgemm_kit.MIRRORS)
    assert (tmp_path / "a.tar.xz").read_bytes() == (tmp_path / "b.tar.xz").read_bytes()
    assert first["cutlass_headers"] > 50 and first["fmt_headers"] >= 2
    with tarfile.open(tmp_path / "a.tar.xz") as t:
        assert b"sm90_fp8_gemm_1d2d_impl" in t.extractfile(
            "deepgemm/deep_gemm/include/deep_gemm/impls/sm90_fp8_gemm_1d2d.cuh").read()


def test_without_deepgemm_the_reason_says_how_to_build_it(monkeypatch, tmp_path):
    monkeypatch.setattr(deepgemm_kit, "DEST", tmp_path / "deepgemm")
    monkeypatch.setattr(sys, "path", list(sys.path))
    for key in ("CUDA_HOME", "DG_JIT_CACHE_DIR", "DG_PRINT_CONFIGS", "DG_JIT_PTXAS_VERBOSE", "DG_JIT_DUMP_SASS"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setitem(sys.modules, "deep_gemm", None)  # as if not built
    dg, why = deepgemm_peer.import_deepgemm()
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
    out = deepgemm_peer.probe_deepgemm(["a", "b", "c"], 60, [tmp_path], cmd=[sys.executable, "-c", crash])
    assert out["a"] == ""
    assert "killed by SIGSEGV on this shape" in out["b"] and "b: first call" in out["b"]
    assert out["c"].startswith("not probed")
    assert "b: first call" in (tmp_path / "deepgemm_probe.log").read_text()
    assert "child killed by SIGSEGV" in capsys.readouterr().out


def test_diagnose_names_the_first_step_that_crashes_and_runs_the_rest(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OUT", str(tmp_path))
    (tmp_path / "deepgemm" / "deep_gemm").mkdir(parents=True)
    (tmp_path / "deepgemm" / "deep_gemm" / "_C.so").write_bytes(b"")
    table = (("fine", "a step that works", "print('fine here')"),
             ("crash", "a step that dies", "import ctypes; print('about to crash', flush=True); ctypes.string_at(0)"),
             ("skipped", "a step that cannot run here", "print('SKIP: no course'); raise SystemExit(3)"),
             ("after", "a step after the crash", "print('still ran')"))
    assert deepgemm_kit.diagnose(tmp_path / "deepgemm", 60, table=table) == 1
    out = capsys.readouterr().out
    assert "DIAG fine: ok" in out and "DIAG crash: FAILED (killed by SIGSEGV)" in out and "about to crash" in out
    assert "DIAG skipped: skipped" in out and "DIAG after: ok" in out and "still ran" in out
    assert out.strip().splitlines()[-1] == "DEEPGEMM_DIAG failed: first failing step crash (FAILED (killed by SIGSEGV))"
    assert "DIAG environment of every step:" in out and "DG_JIT_CACHE_DIR=" in out
    assert "about to crash" in (tmp_path / "deepgemm_diag_crash.log").read_text()  # each step's whole output
    assert [n for n, _, _ in deepgemm_kit.DIAG_STEPS] == ["toolchain", "import", "tensor-no-jit", "jit-transpose",
                                                         "jit-after-course", "grouped-gemm"]


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


needs_cc = pytest.mark.skipif(not all(__import__("shutil").which(t) for t in ("cc", "g++", "readelf", "nm")),
                              reason="needs cc, g++, readelf and nm")


@needs_cc
def test_a_native_crash_prints_its_stack_with_the_static_functions_named(tmp_path, monkeypatch, capsys):
    """The crash handler on a real fault inside a ``static`` C function of an object under the kit's
    folder (as DeepGEMM's are): the fault address, the stack, the function named from ``nm``; and
    C ``printf`` output written just before the crash is not lost in a buffer."""
    import subprocess

    monkeypatch.delenv("OUT", raising=False)
    dest = tmp_path / "deepgemm"
    (dest / "deep_gemm").mkdir(parents=True)
    (dest / "deep_gemm" / "_C.so").write_bytes(b"")
    (tmp_path / "faulty.c").write_text(
        "#include <stdio.h>\n"
        "static int __attribute__((noinline)) read_through_null(volatile int *p) { return *p + 1; }\n"
        "int faulty_entry(void) { printf(\"printf before the fault\\n\"); return read_through_null(0); }\n")
    lib = dest / "libfaulty.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O0", "-o", str(lib), str(tmp_path / "faulty.c")], check=True)
    table = (("native", "a fault in C", f"import ctypes; ctypes.CDLL({str(lib)!r}).faulty_entry()"),)
    assert deepgemm_kit.diagnose(dest, 60, table=table) == 1
    out = capsys.readouterr().out
    assert "DIAG crash handler: built with" in out
    assert "printf before the fault" in out
    assert "DGCRASH signal 11" in out and "fault address (nil)" in out
    named = [line for line in out.splitlines() if "libfaulty.so(+0x" in line]
    assert named and "= read_through_null+0x" in named[0]  # the innermost frame of the library, by name
    assert "DIAG native: FAILED (killed by SIGSEGV)" in out  # handed on: the process still dies of it


@needs_cc
def test_libstdcxx_link_tells_a_shared_library_from_an_exported_private_copy(tmp_path):
    """The build's check on the extension: linked against libstdc++.so.6, carrying its own exported
    copy (``-static-libstdc++``, what crashed DeepGEMM's JIT), or a copy kept private."""
    import subprocess

    (tmp_path / "x.cpp").write_text("#include <sstream>\n#include <string>\n"
                                    "std::string show(int i) { std::ostringstream o; o << i; return o.str(); }\n")
    kinds = {"shared": [], "private copy": ["-static-libstdc++"],
             "hidden or none": ["-static-libstdc++", "-Wl,--exclude-libs,ALL"]}
    for want, flags in kinds.items():
        so = tmp_path / f"lib{len(flags)}.so"
        subprocess.run(["g++", "-shared", "-fPIC", "-o", str(so), str(tmp_path / "x.cpp"), *flags], check=True)
        assert deepgemm_kit.libstdcxx_link(so) == want, flags


def test_the_build_binds_the_shared_cxx_library():
    """The recipe names libstdc++ and hides any archive's symbols (``BUILD_SCRIPT``'s comment says why)."""
    script = deepgemm_kit.BUILD_SCRIPT.format(cutlass="/c", fmt="/f")
    assert "'stdc++'" in script and "-Wl,--exclude-libs,ALL" in script
    compile(script, "build_ext.py", "exec")
