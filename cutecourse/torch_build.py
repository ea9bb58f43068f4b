"""Which build of the pinned torch a machine should install, decided from its NVIDIA driver.

PyPI's Linux torch wheel *is* a CUDA build (CUDA 13 for torch 2.13): on a laptop without a GPU
pip downloads it and its NVIDIA libraries (gigabytes) for nothing, and on a GPU server whose
driver is older than CUDA 13 needs, torch installs fine and then sees no GPU. pip cannot tell
the two apart; this module can, from one fact: the driver version (``nvidia-smi``), or none.

* no driver: PyTorch's CPU build, from its CPU index (a fifth of the download);
* a driver that runs CUDA 13 (>= 580): PyPI's build, as pip would pick it anyway;
* an older driver that runs CUDA 12 (>= 525, CUDA's minor-version compatibility): the CUDA 12.8
  build from PyTorch's index;
* a driver older still: no CUDA build of this torch runs on it; the CPU build, and the fix (update
  the driver).

``./course.sh`` runs this file as a script on standard input (``python - < cutecourse/torch_build.py``:
standard library only, no package import, so before ``.venv`` has anything in it, and without the
script's folder shadowing the standard library's ``inspect``); ``CUTECOURSE_TORCH_INDEX``
overrides the choice (an index URL, or ``pypi`` for the default index). Where the chosen index cannot be reached (a firewall that lets
only PyPI through), ``course.sh`` falls back to the default index and says what that costs.
``cutecourse.check`` uses :func:`needed_driver` to name the real fix when torch sees no GPU.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass

TORCH_VERSION = "2.13.0"  # keep in step with course.sh's TORCH_VERSION
PYTORCH_INDEX = "https://download.pytorch.org/whl"
#: CUDA major version -> the oldest Linux driver that runs its builds (NVIDIA's CUDA release
#: notes: 13.x needs R580, 12.x R525 through minor-version compatibility).
MIN_DRIVER = {"13": (580, 65), "12": (525, 60)}
#: The CUDA build PyPI serves for the pinned torch, and the older one PyTorch's index serves.
PYPI_CUDA = "13"
OLDER_CUDA_INDEX = f"{PYTORCH_INDEX}/cu128"

# Download sizes measured on 2026-11-26 (PyPI's simple API; the CPU wheel in a local wheel folder):
CPU_WHEEL_MB = 183  # torch-2.13.0+cpu, cp311, x86-64; 667 MB installed
CUDA_WHEEL_MB = 502  # torch-2.13.0 from PyPI, cp311, x86-64, before its NVIDIA libraries


@dataclass(frozen=True)
class Choice:
    """Where to get torch: ``index`` is an index URL, or None for the default index (PyPI)."""

    index: str | None
    build: str  # "cpu", "cu13", "cu128"
    note: str  # one or two sentences for the learner: what and why


def parse_driver(text: str | None) -> tuple[int, int] | None:
    """``"570.86.15"`` -> (570, 86); None for no or unreadable text."""
    m = re.match(r"\s*(\d+)\.(\d+)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def needed_driver(cuda: str | None) -> tuple[int, int] | None:
    """The oldest driver a torch built for CUDA ``cuda`` ("13.0", "12.8") runs on."""
    return MIN_DRIVER.get((cuda or "").split(".")[0])


def choose(driver: str | None, machine: str = "x86_64", system: str = "Linux",
           override: str | None = None) -> Choice:
    """The torch build for a machine whose NVIDIA driver is ``driver`` (None: no driver)."""
    if override:
        if override.lower() in ("pypi", "default"):
            return Choice(None, "default", "CUTECOURSE_TORCH_INDEX=pypi: torch from your default index")
        return Choice(override, "override", f"CUTECOURSE_TORCH_INDEX: torch from {override}")
    if system != "Linux":
        return Choice(None, "default", f"{system} is not a Linux machine: torch from your default index")
    d = parse_driver(driver)
    if d is None:
        return Choice(f"{PYTORCH_INDEX}/cpu", "cpu",
                      f"no NVIDIA driver: the CPU build of torch {TORCH_VERSION} "
                      f"(about {CPU_WHEEL_MB} MB to download instead of gigabytes)")
    if d >= MIN_DRIVER[PYPI_CUDA]:
        return Choice(None, "cu13", f"NVIDIA driver {driver.strip()}: the CUDA {PYPI_CUDA} build "
                      f"of torch {TORCH_VERSION} from PyPI")
    need13 = ".".join(map(str, MIN_DRIVER[PYPI_CUDA]))
    if d >= MIN_DRIVER["12"]:
        return Choice(OLDER_CUDA_INDEX, "cu128",
                      f"NVIDIA driver {driver.strip()} is older than CUDA {PYPI_CUDA} needs "
                      f"({need13}): the CUDA 12.8 build of torch {TORCH_VERSION}, which this driver runs")
    return Choice(f"{PYTORCH_INDEX}/cpu", "cpu",
                  f"NVIDIA driver {driver.strip()} is older than any CUDA build of torch "
                  f"{TORCH_VERSION} runs on (525.60 for CUDA 12, {need13} for CUDA 13): the CPU "
                  "build, so the course compiles and inspects; update the driver to run kernels")


def nvidia_smi(query: str, units: bool = True, timeout: float = 20.0) -> list[str] | None:
    """``nvidia-smi --query-gpu=query`` as CSV lines, one per GPU: None where nvidia-smi is not
    installed, [] where it fails or does not answer within ``timeout`` (a wedged driver). The
    course's one probe of the driver (``check`` and ``bench`` ask it too)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    fmt = "--format=csv,noheader" + ("" if units else ",nounits")
    try:
        out = subprocess.run([exe, f"--query-gpu={query}", fmt], capture_output=True, text=True,
                             timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [ln.strip() for ln in out.stdout.splitlines() if ln.strip()] if out.returncode == 0 else []


def driver_version() -> str | None:
    """The NVIDIA driver's version, from nvidia-smi or /proc; None where there is none."""
    lines = nvidia_smi("driver_version")
    if lines:
        return lines[0].split()[0]
    try:
        with open("/proc/driver/nvidia/version") as f:
            m = re.search(r"Kernel Module\s+(\d+\.\d+(?:\.\d+)?)", f.read())
            return m.group(1) if m else None
    except OSError:
        return None


def reachable(url: str, timeout: float = 5.0) -> bool:
    """Whether ``url`` answers within ``timeout`` seconds, name lookup included (a socket timeout
    does not cover DNS, so the request runs in a thread that is abandoned at the deadline)."""
    answered: list[bool] = []

    def ask() -> None:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
                answered.append(True)
        except urllib.error.HTTPError:  # the server answered (a HEAD it refuses still answers)
            answered.append(True)
        except Exception:
            pass

    t = threading.Thread(target=ask, daemon=True)
    t.start()
    t.join(timeout)
    return bool(answered)


def unreachable_note(choice: Choice) -> str:
    """What the fallback to the default index gets when ``choice.index`` cannot be reached.

    For a driver of 525-579 that is worse than a big download: PyPI's build is CUDA 13's, which
    such a driver cannot run, so torch would install and then see no GPU."""
    note = (f"{choice.note}; but {choice.index} cannot be reached from here, so torch=={TORCH_VERSION} "
            "comes from your default index instead (on Linux x86-64 PyPI's is the CUDA build: "
            f"about {CUDA_WHEEL_MB} MB plus its NVIDIA libraries, several GB)")
    if choice.build == "cu128":
        need = ".".join(map(str, MIN_DRIVER[PYPI_CUDA]))
        note += (f". WARNING: that build is CUDA {PYPI_CUDA}'s, which needs driver {need} or newer: "
                 "with this driver torch will see no GPU (the course then compiles and inspects "
                 "only). Update the driver, or point at a mirror of the cu128 index")
    return note + ". To choose: CUTECOURSE_TORCH_INDEX=<index URL> ./course.sh setup --force"


def main(argv: list[str] | None = None) -> int:
    """Print two lines for course.sh: the index URL to install torch from (empty: the default
    index) and the note to show. The chosen index is probed; unreachable, line one is empty and
    the note says what the fallback gets."""
    import platform

    choice = choose(driver_version(), platform.machine(), platform.system(),
                    os.environ.get("CUTECOURSE_TORCH_INDEX"))
    index, note = choice.index, choice.note
    if index and not reachable(index.rstrip("/") + "/torch/"):
        note = unreachable_note(choice)
        index = None
    print(index or "")
    print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
