"""The one child-process runner (cutecourse/child.py): a spec in, a result file and a clean log
out, a hang stopped and said, the DSL's compile settings set; and the one nvidia-smi probe."""

import os

from cutecourse import child, torch_build

ECHO = """import json, os, sys
spec = json.load(sys.stdin)
print("\\x1b[31mred\\x1b[0m", os.environ.get("CUTE_DSL_ARCH"), os.environ.get("SEEN"), sys.argv[1:])
print("to stderr", file=sys.stderr)
with open(spec["out"], "w") as f:
    json.dump({"twice": spec["n"] * 2}, f)
"""


def test_a_child_gets_its_spec_and_environment_and_hands_back_its_result(tmp_path):
    out = str(tmp_path / "result.json")
    run = child.run_child(None, {"n": 21, "out": out}, timeout=60, env={"SEEN": "yes"}, source=ECHO,
                          argv=["a", 1], dsl=("sm_100a", str(tmp_path), False), result_file=out)
    assert run.ok and not run.hang and run.returncode == 0
    assert run.result == {"twice": 42}
    assert "red sm_100a yes ['a', '1']" in run.log and "\x1b" not in run.log  # colours stripped
    assert "to stderr" in run.stderr and "to stderr" not in run.stdout


def test_a_child_runs_this_checkout_as_a_module():
    run = child.run_child("cutecourse.child", timeout=60)
    assert run.ok, run.log
    run = child.run_child(None, source="import cutecourse, sys; print(cutecourse.__file__)", timeout=60)
    assert run.stdout.strip() == os.path.join(child.ROOT, "cutecourse", "__init__.py")


def test_a_child_that_does_not_finish_is_a_hang_not_an_exception():
    run = child.run_child(None, source="import time; print('started', flush=True); time.sleep(30)",
                          timeout=3)
    assert run.hang and not run.ok and run.returncode is None and run.result is None


def test_a_failing_child_keeps_its_exit_code_and_message():
    run = child.run_child(None, source="raise SystemExit('no GPU here')", timeout=60)
    assert not run.ok and not run.hang and run.returncode == 1 and "no GPU here" in run.stderr


def test_the_dsl_environment_keeps_what_the_compile_report_reads():
    env = child.dsl_environment("sm_90a", "/tmp/dump", sass=True)
    assert env["CUTE_DSL_ARCH"] == "sm_90a" and env["CUTE_DSL_DUMP_DIR"] == "/tmp/dump"
    assert env["CUTE_DSL_KEEP"] == "ptx,cubin,sass" and env["CUTE_DSL_DISABLE_FILE_CACHING"] == "1"
    assert "warnings" in env["CUTE_DSL_COMPILER_OPT"]  # "pipelining skipped" needs it


def test_nvidia_smi_without_a_driver_is_none(monkeypatch):
    monkeypatch.setattr(torch_build.shutil, "which", lambda name: None)
    assert torch_build.nvidia_smi("name,driver_version") is None


def test_nvidia_smi_that_fails_is_an_empty_list(monkeypatch, tmp_path):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'No devices were found'\nexit 6\n")
    fake.chmod(0o755)
    monkeypatch.setattr(torch_build.shutil, "which", lambda name: str(fake))
    assert torch_build.nvidia_smi("driver_version") == []
    fake.write_text("#!/bin/sh\necho \"$1 $2\"\n")
    assert torch_build.nvidia_smi("driver_version", units=False) == [
        "--query-gpu=driver_version --format=csv,noheader,nounits"]
