"""environment.yml and pyproject.toml describe one environment; the DSL release is pinned."""

import re
import tomllib
from pathlib import Path

import cutecourse

ROOT = Path(__file__).resolve().parent.parent


def _name(req: str) -> str:
    return re.split(r"[<>=!\[ ]", req.strip(), maxsplit=1)[0].lower()


def _pyproject_requirements() -> dict[str, str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(data["dependencies"])
    for extra in data["optional-dependencies"].values():
        reqs += extra
    return {_name(r): r.replace(" ", "") for r in reqs}


def _conda_pip_requirements() -> dict[str, str]:
    lines = (ROOT / "environment.yml").read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.strip() == "- pip:")
    reqs = [ln.strip()[2:] for ln in lines[start + 1:] if ln.strip().startswith("- ")]
    return {_name(r): r.replace(" ", "") for r in reqs if not r.startswith("-e")}


def test_same_packages_and_versions():
    assert _pyproject_requirements() == _conda_pip_requirements()


def test_dsl_is_pinned_to_the_taught_release():
    reqs = _pyproject_requirements()
    assert reqs["nvidia-cutlass-dsl"] == f"nvidia-cutlass-dsl=={cutecourse.DSL_VERSION}"
    import cutlass

    assert cutlass.__version__ == cutecourse.DSL_VERSION
    assert cutecourse.DSL_VERSION in (ROOT / "README.md").read_text()


def test_gpu_build_dir_is_ignored():
    assert ".gpu/" in (ROOT / ".gitignore").read_text().split()
