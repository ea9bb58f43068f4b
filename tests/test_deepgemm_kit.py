"""tools/deepgemm_kit.py's modules on the CPU: the include closure that decides what the kit
carries, the packed kit's manifest (skipped when ``.deepgemm/`` is not packed) and its packing from
the mirrors, the build's refusal without a kit and its recipe, and ``diagnose`` on stand-in steps
(a crash named by its step, a native stack with its static functions named)."""

import re
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import deepgemm_build  # noqa: E402
import deepgemm_diagnose  # noqa: E402
import deepgemm_pack  # noqa: E402


def test_include_closure_follows_includes_transitively():
    libs = {"cutlass": {"cute/a.hpp": b'#include "b.hpp"\n', "cute/b.hpp": b"#if 0\n#include <cutlass/c.h>\n#endif\n",
                        "cutlass/c.h": b"#include <cuda_runtime.h>\n", "cute/unused.hpp": b""},
            "fmt": {"fmt/format.h": b'#include "base.h"\n', "fmt/base.h": b""}}
    roots = {"csrc/x.cpp": b"#include <cute/a.hpp>\n  #  include <fmt/format.h>\n#include <torch/python.h>\n"}
    got = deepgemm_pack.include_closure(roots, libs)
    assert got == {"cutlass": {"cute/a.hpp", "cute/b.hpp", "cutlass/c.h"}, "fmt": {"fmt/format.h", "fmt/base.h"}}


def test_build_without_a_kit_says_how_to_make_one(tmp_path, capsys):
    assert deepgemm_build.build(tmp_path / "none.tar.xz", tmp_path / "deepgemm", 1) == 1
    out = capsys.readouterr().out
    assert "DEEPGEMM_BUILD failed" in out and "deepgemm_kit.py pack" in out


@pytest.mark.skipif(not deepgemm_pack.KIT.exists(), reason="kit not packed: python tools/deepgemm_kit.py pack")
def test_packed_kit_holds_what_the_build_and_the_jit_include():
    m = deepgemm_pack.manifest(deepgemm_pack.KIT)
    assert m["deepgemm"].startswith(deepgemm_pack.DEEPGEMM_COMMIT)
    assert m["cutlass"] == deepgemm_pack.CUTLASS_COMMIT and m["fmt"] == deepgemm_pack.FMT_COMMIT
    assert not [p for p in deepgemm_pack.REQUIRED if p not in m["files"]]
    assert deepgemm_pack.KIT.stat().st_size < 3 * 2**20  # it travels beside the DSL kit, under 64 MiB
    with tarfile.open(deepgemm_pack.KIT) as t:
        names = {n[len("deepgemm/"):] for n in t.getnames()}
        assert names == set(m["files"])
        # every <cute/...>, <cutlass/...>, <fmt/...> and <deep_gemm/...> a packed file includes is packed
        roots = {"cute": deepgemm_pack.CUTLASS_DIR, "cutlass": deepgemm_pack.CUTLASS_DIR,
                 "deep_gemm": deepgemm_pack.CUTLASS_DIR, "fmt": deepgemm_pack.FMT_DIR}
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


@pytest.mark.skipif(not (deepgemm_pack.MIRRORS / deepgemm_pack.REPOS["deepgemm"] / "repo").exists(),
                    reason="no git mirror of DeepGEMM here (the fetch tool makes one)")
def test_pack_from_the_mirrors_is_reproducible(tmp_path):
    first = deepgemm_pack.pack(tmp_path / "a.tar.xz", deepgemm_pack.MIRRORS)
    deepgemm_pack.pack(tmp_path / "b.tar.xz", deepgemm_pack.MIRRORS)
    assert (tmp_path / "a.tar.xz").read_bytes() == (tmp_path / "b.tar.xz").read_bytes()
    assert first["cutlass_headers"] > 50 and first["fmt_headers"] >= 2
    with tarfile.open(tmp_path / "a.tar.xz") as t:
        assert b"sm90_fp8_gemm_1d2d_impl" in t.extractfile(
            "deepgemm/deep_gemm/include/deep_gemm/impls/sm90_fp8_gemm_1d2d.cuh").read()


def test_diagnose_names_the_first_step_that_crashes_and_runs_the_rest(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OUT", str(tmp_path))
    (tmp_path / "deepgemm" / "deep_gemm").mkdir(parents=True)
    (tmp_path / "deepgemm" / "deep_gemm" / "_C.so").write_bytes(b"")
    table = (("fine", "a step that works", "print('fine here')"),
             ("crash", "a step that dies", "import ctypes; print('about to crash', flush=True); ctypes.string_at(0)"),
             ("skipped", "a step that cannot run here", "print('SKIP: no course'); raise SystemExit(3)"),
             ("after", "a step after the crash", "print('still ran')"))
    assert deepgemm_diagnose.diagnose(tmp_path / "deepgemm", 60, table=table) == 1
    out = capsys.readouterr().out
    assert "DIAG fine: ok" in out and "DIAG crash: FAILED (killed by SIGSEGV)" in out and "about to crash" in out
    assert "DIAG skipped: skipped" in out and "DIAG after: ok" in out and "still ran" in out
    assert out.strip().splitlines()[-1] == "DEEPGEMM_DIAG failed: first failing step crash (FAILED (killed by SIGSEGV))"
    assert "DIAG environment of every step:" in out and "DG_JIT_CACHE_DIR=" in out
    assert "about to crash" in (tmp_path / "deepgemm_diag_crash.log").read_text()  # each step's whole output
    assert [n for n, _, _ in deepgemm_diagnose.DIAG_STEPS] == ["toolchain", "import", "tensor-no-jit", "jit-transpose",
                                                         "jit-after-course", "grouped-gemm"]


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
    assert deepgemm_diagnose.diagnose(dest, 60, table=table) == 1
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
        assert deepgemm_build.libstdcxx_link(so) == want, flags


def test_the_build_binds_the_shared_cxx_library():
    """The recipe names libstdc++ and hides any archive's symbols (``BUILD_SCRIPT``'s comment says why)."""
    script = deepgemm_build.BUILD_SCRIPT.format(cutlass="/c", fmt="/f")
    assert "'stdc++'" in script and "-Wl,--exclude-libs,ALL" in script
    compile(script, "build_ext.py", "exec")
