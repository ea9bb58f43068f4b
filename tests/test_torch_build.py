"""Which torch build a seat installs (``cutecourse.torch_build``), and the fix ``check`` names.

The choice is a pure function of the NVIDIA driver (or none) and the platform, so every case is
decided here without a GPU: no driver, a driver too old for any CUDA build, one too old for CUDA 13
but fine for CUDA 12, one fine for PyPI's CUDA 13 build; the override; and what ``course.sh``
is told when PyTorch's index cannot be reached.
"""

import types

import pytest

from cutecourse import check, torch_build
from cutecourse.torch_build import PYTORCH_INDEX, choose


def test_no_driver_gets_the_cpu_build():
    c = choose(None)
    assert c.index == f"{PYTORCH_INDEX}/cpu" and c.build == "cpu"
    assert "no NVIDIA driver" in c.note


def test_driver_too_old_for_any_cuda_build_gets_the_cpu_build_and_the_fix():
    c = choose("470.82.01")
    assert c.build == "cpu" and c.index.endswith("/cpu")
    assert "update the driver" in c.note and "470.82.01" in c.note


def test_driver_too_old_for_cuda_13_gets_the_cuda_12_build():
    c = choose("550.54.15")
    assert c.build == "cu128" and c.index == torch_build.OLDER_CUDA_INDEX
    assert "older than CUDA 13 needs" in c.note


def test_driver_fine_gets_pypis_cuda_13_build():
    for driver in ("580.65.06", "590.44.01"):
        c = choose(driver)
        assert c.index is None and c.build == "cu13", driver


def test_exact_boundaries():
    assert choose("580.64.99").build == "cu128"
    assert choose("525.60.13").build == "cu128"
    assert choose("525.59").build == "cpu"


def test_override_and_other_systems():
    assert choose("580.65.06", override="https://mirror.example/whl/cpu").index == "https://mirror.example/whl/cpu"
    assert choose(None, override="pypi").index is None
    assert choose(None, system="Darwin").index is None
    assert choose(None, machine="aarch64").build == "cpu"  # PyTorch's CPU index has aarch64 wheels


def test_parse_driver():
    assert torch_build.parse_driver("570.86.15\n") == (570, 86)
    assert torch_build.parse_driver("") is None and torch_build.parse_driver(None) is None
    assert torch_build.needed_driver("13.0") == (580, 65) and torch_build.needed_driver("12.8") == (525, 60)
    assert torch_build.needed_driver(None) is None


def test_unreachable_index_falls_back_with_a_note(monkeypatch, capsys):
    monkeypatch.setattr(torch_build, "driver_version", lambda: None)
    monkeypatch.delenv("CUTECOURSE_TORCH_INDEX", raising=False)
    monkeypatch.setattr(torch_build, "reachable", lambda url, timeout=5.0: False)
    torch_build.main([])
    index, note = capsys.readouterr().out.splitlines()
    assert index == ""
    assert "cannot be reached" in note and "CUTECOURSE_TORCH_INDEX" in note
    monkeypatch.setattr(torch_build, "reachable", lambda url, timeout=5.0: True)
    torch_build.main([])
    assert capsys.readouterr().out.splitlines()[0] == f"{PYTORCH_INDEX}/cpu"


def test_unreachable_cu128_index_warns_that_pypis_build_needs_a_newer_driver(monkeypatch, capsys):
    """A 525-579 driver behind a firewall: the fallback is PyPI's CUDA 13 build, which that driver
    cannot run; the note must say so before gigabytes are installed, not after."""
    monkeypatch.setattr(torch_build, "driver_version", lambda: "575.57.08")
    monkeypatch.delenv("CUTECOURSE_TORCH_INDEX", raising=False)
    monkeypatch.setattr(torch_build, "reachable", lambda url, timeout=5.0: False)
    torch_build.main([])
    index, note = capsys.readouterr().out.splitlines()
    assert index == ""
    assert "WARNING" in note and "580.65 or newer" in note and "see no GPU" in note
    # the same fallback without a driver costs a download, not the GPU: no such warning
    monkeypatch.setattr(torch_build, "driver_version", lambda: None)
    torch_build.main([])
    assert "WARNING" not in capsys.readouterr().out


def test_reachable_fails_fast_on_a_closed_port():
    assert torch_build.reachable("http://127.0.0.1:9/", timeout=2) is False


def _fake_torch(version, cuda):
    return types.SimpleNamespace(__version__=version, version=types.SimpleNamespace(cuda=cuda))


@pytest.mark.parametrize("version, cuda, driver, words", [
    ("2.13.0", "13.0", "550.54.15", ["needs NVIDIA driver 580.65", "update the driver",
                                      "CUTECOURSE_TORCH_INDEX=https://download.pytorch.org/whl/cu128"]),
    ("2.13.0", "13.0", "470.82.01", ["update the driver", "no CUDA build of the pinned torch"]),
    ("2.13.0+cpu", None, "580.65.06", ["CPU-only build", "./course.sh setup --force"]),
    ("2.13.0", "13.0", "580.65.06", ["CUDA_VISIBLE_DEVICES", "--gpus"]),
])
def test_check_names_the_real_fix_for_a_driver_build_mismatch(monkeypatch, version, cuda, driver, words):
    monkeypatch.setattr(check.importlib, "import_module", lambda name: _fake_torch(version, cuda))
    fix = check.mismatch_fix(driver)
    for w in words:
        assert w in fix, fix


def test_a_server_that_refuses_head_still_counts_as_reachable():
    import http.server
    import threading

    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)  # 501 to all
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert torch_build.reachable(f"http://127.0.0.1:{server.server_port}/whl/cpu/torch/", timeout=5)
    finally:
        server.shutdown()
