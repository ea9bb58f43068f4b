"""DeepGEMM's kit: its sources and the headers they include, packed here from git mirrors.

``pack`` reads three git mirrors (``fetch`` puts them under ``/work/.mirror``; ``--mirrors`` points
elsewhere): deepseek-ai/DeepGEMM at ``DEEPGEMM_COMMIT``, and the two submodules its build needs at
the commits DeepGEMM pins them to, NVIDIA/cutlass and fmtlib/fmt. DeepGEMM's own files go in whole
(its C++ host sources and its ``deep_gemm`` package, whose ``include/deep_gemm`` headers the JIT
reads and hashes); of CUTLASS and fmt only the headers reachable by ``#include`` from DeepGEMM's
sources go in (every ``#include`` line counts, whatever ``#if`` guards it, so the set is a superset
of what any build path needs). The CUTLASS headers land where DeepGEMM's installed package keeps
them, ``deep_gemm/include/{cute,cutlass}``: its JIT compiles kernels with ``-I deep_gemm/include``.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KIT = ROOT / ".deepgemm" / "deepgemm_kit.tar.xz"
MIRRORS = Path("/work/.mirror")
#: DeepGEMM's HEAD when it was read for the course (``../shared/reviews/deepgemm.md``); the
#: submodule commits are the ones that tree pins (``git ls-tree HEAD third-party/``).
DEEPGEMM_COMMIT = "54e2261"
CUTLASS_COMMIT = "f3fde58372d33e9a5650ba7b80fc48b3b49d40c8"
FMT_COMMIT = "553ec11ec06fbe0beebfbb45f9dc3c9eabd83d28"
REPOS = {"deepgemm": "deepseek-ai+DeepGEMM", "cutlass": "NVIDIA+cutlass", "fmt": "fmtlib+fmt"}
#: Where each repository's headers sit inside the kit (the include roots of the build).
CUTLASS_DIR = "deep_gemm/include"  # cute/ and cutlass/ next to deep_gemm/, as DeepGEMM installs them
FMT_DIR = "third-party/fmt/include"
#: Files the build cannot do without: the test checks that the packed kit has each of them.
REQUIRED = (
    "csrc/python_api.cpp",
    "deep_gemm/__init__.py",
    "deep_gemm/include/deep_gemm/impls/sm90_fp8_gemm_1d2d.cuh",
    "deep_gemm/include/cute/tensor.hpp",
    "deep_gemm/include/cutlass/cutlass.h",
    "third-party/fmt/include/fmt/format.h",
    "MANIFEST.json",
)
INCLUDE = re.compile(rb'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)


def _git(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", "--git-dir", str(repo), *args], check=True, capture_output=True).stdout


def _mirror(mirrors: Path, key: str) -> Path:
    repo = mirrors / REPOS[key] / "repo"
    if not repo.exists():
        raise SystemExit(f"no mirror of {REPOS[key].replace('+', '/')} at {repo}: fetch it first "
                         f"(the fetch tool, github:{REPOS[key].replace('+', '/')}), or pass --mirrors")
    return repo


def _tree(repo: Path, commit: str, prefix: str = "") -> dict[str, bytes]:
    """path -> bytes of every blob under ``prefix`` at ``commit`` (one ``git archive``, read in memory)."""
    raw = _git(repo, "archive", "--format=tar", commit, *([prefix] if prefix else []))
    out = {}
    with tarfile.open(fileobj=io.BytesIO(raw)) as t:
        for m in t.getmembers():
            if m.isfile():
                out[m.name] = t.extractfile(m).read()
    return out


def include_closure(roots: dict[str, bytes], libraries: dict[str, dict[str, bytes]]) -> dict[str, set[str]]:
    """For each library (name -> {path relative to its include root: bytes}), the headers that
    ``roots`` (kit path -> bytes) reach through ``#include`` lines, transitively and whatever
    preprocessor branch they sit in. ``<x>`` and ``"x"`` are looked up in every library; a quoted
    name is first tried next to the including file. Names found nowhere (the C++ library, CUDA,
    torch) are skipped."""
    wanted: dict[str, set[str]] = {name: set() for name in libraries}
    queue = [(None, None, body) for body in roots.values()]
    while queue:
        lib, path, body = queue.pop()
        for inc in INCLUDE.findall(body):
            name = inc.decode()
            hits = []
            if lib is not None:  # relative to the including header first
                rel = os.path.normpath(os.path.join(os.path.dirname(path), name))
                if rel in libraries[lib]:
                    hits.append((lib, rel))
            if not hits:
                hits = [(n, name) for n, files in libraries.items() if name in files]
            for n, p in hits[:1]:
                if p not in wanted[n]:
                    wanted[n].add(p)
                    queue.append((n, p, libraries[n][p]))
    return wanted


def pack(kit: Path, mirrors: Path) -> dict:
    dg = _mirror(mirrors, "deepgemm")
    dg_commit = _git(dg, "rev-parse", DEEPGEMM_COMMIT).decode().strip()
    pinned = {line.split()[3].decode(): line.split()[2].decode()
              for line in _git(dg, "ls-tree", dg_commit, "third-party/").splitlines() if line.split()[1] == b"commit"}
    if pinned.get("third-party/cutlass") != CUTLASS_COMMIT or pinned.get("third-party/fmt") != FMT_COMMIT:
        raise SystemExit(f"DeepGEMM {dg_commit[:7]} pins {pinned}; update CUTLASS_COMMIT / FMT_COMMIT to match")
    files: dict[str, bytes] = {}
    for prefix in ("csrc/", "deep_gemm/", "LICENSE"):
        files.update(_tree(dg, dg_commit, prefix))
    files = {p: b for p, b in files.items() if not p.startswith("csrc/indexing/")}  # a standalone tool
    libs = {"cutlass": {p[len("include/"):]: b for p, b in _tree(_mirror(mirrors, "cutlass"), CUTLASS_COMMIT,
                                                                      "include/").items()},
            "fmt": {p[len("include/"):]: b for p, b in _tree(_mirror(mirrors, "fmt"), FMT_COMMIT, "include/").items()}}
    roots = {p: b for p, b in files.items() if p.endswith((".cpp", ".hpp", ".cuh", ".h", ".cu"))}
    wanted = include_closure(roots, libs)
    for p in sorted(wanted["cutlass"]):
        files[f"{CUTLASS_DIR}/{p}"] = libs["cutlass"][p]
    for p in sorted(wanted["fmt"]):
        files[f"{FMT_DIR}/{p}"] = libs["fmt"][p]
    cutlass_license = _git(_mirror(mirrors, "cutlass"), "show", f"{CUTLASS_COMMIT}:LICENSE.txt")
    files["third-party/cutlass.LICENSE.txt"] = cutlass_license
    files["third-party/fmt.LICENSE"] = _git(_mirror(mirrors, "fmt"), "show", f"{FMT_COMMIT}:LICENSE")
    manifest = {"deepgemm": dg_commit, "cutlass": CUTLASS_COMMIT, "fmt": FMT_COMMIT,
                "cutlass_headers": len(wanted["cutlass"]), "fmt_headers": len(wanted["fmt"]),
                "files": sorted([*files, "MANIFEST.json"])}
    files["MANIFEST.json"] = json.dumps(manifest, indent=1).encode()
    kit.parent.mkdir(parents=True, exist_ok=True)
    tmp = kit.with_suffix(".tmp")
    with tarfile.open(tmp, "w:xz", preset=9) as t:
        for p in sorted(files):
            info = tarfile.TarInfo(f"deepgemm/{p}")
            info.size, info.mode, info.mtime = len(files[p]), 0o644, 0
            t.addfile(info, io.BytesIO(files[p]))
    tmp.replace(kit)
    raw = sum(len(b) for b in files.values())
    print(f"wrote {kit}: {len(files)} files, {raw / 2**20:.1f} MiB unpacked, {kit.stat().st_size / 2**20:.2f} MiB "
          f"packed (DeepGEMM {dg_commit[:7]}, {len(wanted['cutlass'])} CUTLASS and {len(wanted['fmt'])} fmt headers)")
    return manifest


def manifest(kit: Path) -> dict:
    with tarfile.open(kit) as t:
        return json.load(t.extractfile("deepgemm/MANIFEST.json"))
