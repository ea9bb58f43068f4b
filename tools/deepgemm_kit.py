"""DeepGEMM as a measured peer: pack its sources here, build it on the GPU machine.

    python tools/deepgemm_kit.py pack  [--kit .deepgemm/deepgemm_kit.tar.xz]       # here, no network
    python tools/deepgemm_kit.py build [--kit ...] [--dest /tmp/deepgemm] [--jobs 16]  # on the H100
    python tools/deepgemm_kit.py list  [--kit ...]                                   # the manifest

``pack`` reads three git mirrors (``fetch`` puts them under ``/work/.mirror``; ``--mirrors`` points
elsewhere): deepseek-ai/DeepGEMM at ``DEEPGEMM_COMMIT``, and the two submodules its build needs at
the commits DeepGEMM pins them to, NVIDIA/cutlass and fmtlib/fmt. DeepGEMM's own files go in whole
(its C++ host sources and its ``deep_gemm`` package, whose ``include/deep_gemm`` headers the JIT
reads and hashes); of CUTLASS and fmt only the headers reachable by ``#include`` from DeepGEMM's
sources go in (every ``#include`` line counts, whatever ``#if`` guards it, so the set is a superset
of what any build path needs). The CUTLASS headers land where DeepGEMM's installed package keeps
them, ``deep_gemm/include/{cute,cutlass}``: its JIT compiles kernels with ``-I deep_gemm/include``.

``build`` (on the GPU machine: nvcc and torch there) unpacks the kit into ``--dest``, compiles the
torch extension ``deep_gemm._C`` from ``csrc/python_api.cpp`` in place (what DeepGEMM's
``setup.py build_ext`` does, without its wheel-download and stub steps), and imports the package
in a fresh process. It prints one ``DEEPGEMM_BUILD ok|failed: ...`` line; ``env.sh`` in ``--dest``
holds the variables a later process needs (``benchmarks/deepgemm_peer.py`` sets them itself).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KIT = ROOT / ".deepgemm" / "deepgemm_kit.tar.xz"
DEST = Path("/tmp/deepgemm")
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


def _say(ok: bool, msg: str) -> int:
    print(f"DEEPGEMM_BUILD {'ok' if ok else 'failed'}: {msg}", flush=True)
    return 0 if ok else 1


def env_for(dest: Path) -> dict[str, str]:
    """What DeepGEMM's JIT needs in the environment: the CUDA toolkit (nvcc, cuobjdump), a cache
    directory that this machine may write, and the package on the path."""
    cuda = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    return {"CUDA_HOME": cuda, "DG_JIT_CACHE_DIR": str(dest.parent / "deepgemm_jit"),
            "PYTHONPATH": os.pathsep.join(p for p in (str(dest), os.environ.get("PYTHONPATH", "")) if p)}


def build(kit: Path, dest: Path, jobs: int) -> int:
    import shutil

    if not kit.exists():
        return _say(False, f"no kit at {kit}: run `python tools/deepgemm_kit.py pack` on the CPU machine and carry "
                           f"{kit.parent.name}")
    env = env_for(dest)
    nvcc = Path(env["CUDA_HOME"]) / "bin" / "nvcc"
    if not nvcc.exists():
        return _say(False, f"no nvcc at {nvcc}: set CUDA_HOME to the CUDA toolkit")
    t0 = time.perf_counter()
    if _built(kit, dest):  # a second call on a machine still warm: the same kit, already compiled
        print(f"deep_gemm already built from this kit in {dest}", flush=True)
        return _import_check(dest, env, 0.0)
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(kit) as t:
        t.extractall(dest.parent, filter="data")
    if dest.name != "deepgemm":
        (dest.parent / "deepgemm").rename(dest)
    missing = [p for p in REQUIRED if not (dest / p).exists()]
    if missing:
        return _say(False, f"the kit lacks {missing}: re-pack it")
    # The extension: one C++ translation unit (host code; DeepGEMM's kernels are compiled at run time).
    # C++20, not DeepGEMM's C++17: recent torch headers refuse anything older (ATen/ATen.h).
    # Absolute include paths: ninja compiles from a build folder, where relative ones miss.
    # -O2 -g0: host code only (argument checks, launches); no debug info halves the compile time.
    setup = dest / "build_ext.py"
    setup.write_text(f"""
import torch
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension, CUDA_HOME
from pathlib import Path
flags = ['-std=c++20', '-O2', '-g0', '-fPIC', '-Wno-psabi', '-Wno-deprecated-declarations']
# where libcudart/libnvrtc are found at import: the toolkit's, else the ones torch's wheels carry
libs = [f'{{CUDA_HOME}}/lib64', *map(str, Path(torch.__file__).parent.parent.glob('nvidia/cu*/lib'))]
setup(name='deep_gemm', ext_modules=[CUDAExtension(
    'deep_gemm._C', ['csrc/python_api.cpp'],
    include_dirs=[f'{{CUDA_HOME}}/include', f'{{CUDA_HOME}}/include/cccl', '{dest / CUTLASS_DIR}', '{dest / FMT_DIR}'],
    libraries=['cudart', 'nvrtc'], library_dirs=[f'{{CUDA_HOME}}/lib64'], extra_compile_args=flags,
    extra_link_args=[f'-Wl,-rpath,{{d}}' for d in libs])],
    cmdclass={{'build_ext': BuildExtension}}, script_args=['build_ext', '--inplace'])
""")
    print(f"compiling deep_gemm._C in {dest} (one C++ file, about a minute)", flush=True)
    proc = subprocess.run([sys.executable, setup.name], cwd=dest, capture_output=True, text=True,
                          env={**os.environ, **env, "MAX_JOBS": str(jobs)})
    (dest / "build.log").write_text(proc.stdout + proc.stderr)
    if os.environ.get("OUT"):  # the device tool brings back what is under $OUT
        (Path(os.environ["OUT"]) / "deepgemm_build.log").write_text(proc.stdout + proc.stderr)
    t_build = time.perf_counter() - t0
    if proc.returncode:
        errors = [line for line in (proc.stdout + proc.stderr).splitlines() if "error" in line.lower()]
        print("\n".join(errors[:20] or (proc.stdout + proc.stderr).splitlines()[-30:]), flush=True)
        return _say(False, f"the extension did not compile ({t_build:.0f} s); whole log in {dest / 'build.log'}")
    return _import_check(dest, env, t_build)


def _built(kit: Path, dest: Path) -> bool:
    """Whether ``dest`` holds an extension compiled from this very kit."""
    try:
        return any(dest.glob("deep_gemm/_C*.so")) and json.loads((dest / "MANIFEST.json").read_text()) == manifest(kit)
    except (OSError, ValueError, KeyError):
        return False


def _import_check(dest: Path, env: dict, t_build: float) -> int:
    """``import deep_gemm`` in a fresh process (it initializes on the GPU), then ``env.sh``."""
    check = subprocess.run([sys.executable, "-c", "import deep_gemm, torch; print(deep_gemm.__version__, "
                            "deep_gemm.get_num_sms(), torch.cuda.get_device_name())"],
                           capture_output=True, text=True, env={**os.environ, **env})
    if check.returncode:
        print((check.stdout + check.stderr)[-3000:], flush=True)
        return _say(False, "built, but `import deep_gemm` failed (above)")
    (dest / "env.sh").write_text("".join(f"export {k}={v}\n" for k, v in env.items()))
    return _say(True, f"deep_gemm {check.stdout.strip()} in {dest} ({t_build:.0f} s); source {dest / 'env.sh'}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("action", choices=("pack", "build", "list"))
    p.add_argument("--kit", type=Path, default=KIT)
    p.add_argument("--mirrors", type=Path, default=MIRRORS)
    p.add_argument("--dest", type=Path, default=DEST)
    p.add_argument("--jobs", type=int, default=16)
    args = p.parse_args()
    if args.action == "pack":
        pack(args.kit, args.mirrors)
        return 0
    if args.action == "list":
        m = manifest(args.kit)
        print(json.dumps({k: v for k, v in m.items() if k != "files"}, indent=1), f"\n{len(m['files'])} files")
        return 0
    return build(args.kit, args.dest, args.jobs)


if __name__ == "__main__":
    raise SystemExit(main())
