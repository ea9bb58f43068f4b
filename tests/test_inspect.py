"""Compile for either arch on a CPU, read what came out; errors say what to do."""

import pytest

from cutecourse import errors, inspect
from cutecourse.kernels import elementwise as ew

TARGET = "cutecourse.kernels.elementwise:compile_target"


def test_both_archs_in_one_process():
    h = inspect.compile_report(TARGET, arch="sm_90a", m=128, n=128)
    b = inspect.compile_report(TARGET, arch="sm_100a", m=128, n=128)
    assert ".target sm_90a" in h.ptx and ".target sm_100a" in b.ptx
    assert h.registers and h.registers > 0 and h.spill_bytes == 0
    assert inspect.compile_report(TARGET, arch="sm_90a", m=128, n=128) is h  # cached


def test_report_reading_tools():
    r = inspect.compile_report(TARGET, m=128, n=128)
    assert r.histogram("ptx")["ld.global.v4.b32"] == 2
    rows = r.excerpt("vector global loads", context=1)
    assert sum(hit for hit, _ in rows) == 2 and any(not hit for hit, _ in rows)
    s = r.summary()
    assert s["vector global loads"] == 2 and s["arch"] == "sm_90a"
    assert "vector global loads=2" in repr(r)


def test_compile_here_uses_this_process_and_restores_the_dsl_settings():
    from cutlass.cutlass_dsl import CuTeDSL

    env = CuTeDSL._get_dsl().envar
    before = (env.keep_ptx, env.keep_cubin, env.keep_sass, env.dump_dir)
    fn, args, kw = ew.compile_target(m=64, n=64)
    r = inspect.compile_here(fn, *args, **kw)
    assert r.ptx and r.count("vector global loads") == 2 and r.registers
    assert (env.keep_ptx, env.keep_cubin, env.keep_sass, env.dump_dir) == before


def test_compile_errors_are_short_and_keep_the_log():
    with pytest.raises(errors.CompileError) as e:
        inspect.compile_report("cutecourse.kernels.elementwise:compile_target", n=100)  # 100 % 8
    assert "did not compile" in e.value.what and e.value.log


def test_bad_target_and_arch():
    with pytest.raises(ValueError, match="arch must be one of"):
        inspect.compile_report(TARGET, arch="sm_80")
    with pytest.raises(errors.CompileError):
        inspect.compile_report("cutecourse.kernels.elementwise:no_such_target")


def test_ptxas_remarks_parser():
    log = ("ptxas info    : Compiling entry function 'k' for 'sm_90a'\n"
           "ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
           "ptxas info    : Used 168 registers, used 1 barriers, 1024 bytes smem\n")
    (k,) = inspect.parse_ptxas_remarks(log)
    assert (k.registers, k.spill_stores, k.spill_loads, k.smem_static) == (168, 4, 4, 1024)
