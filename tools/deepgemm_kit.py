"""DeepGEMM as a measured peer: pack its sources here, build it on the GPU machine.

    python tools/deepgemm_kit.py pack  [--kit .deepgemm/deepgemm_kit.tar.xz]       # here, no network
    python tools/deepgemm_kit.py build [--kit ...] [--dest /tmp/deepgemm] [--jobs 16]  # on the H100
    python tools/deepgemm_kit.py diagnose [--dest ...] [--steps import,...]          # on the H100, after build
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

``diagnose`` (on the GPU machine, after ``build``) walks DeepGEMM's first use one step at a time,
each in its own process with a timeout and DeepGEMM's JIT tracing on: the toolchain facts, the
import, a tensor through its binding without the JIT, its JIT's first kernel (alone, then beside
the CuTe DSL), one tiny grouped FP8 GEMM against an emulation. A crash kills only its step and
prints its native stack (a signal handler compiled there, loaded before torch: the machine has no
gdb); the JIT's own output is unbuffered, its cache folder listed after each JIT step, and the
environment the steps see printed first. The last line, ``DEEPGEMM_DIAG ok|failed: first failing
step ...``, says where it breaks.
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


#: The setup script ``build`` writes into the unpacked kit and runs there (``{cutlass}``, ``{fmt}``:
#: the include roots; doubled braces are the script's own).
#: * ``-std=c++20``, not DeepGEMM's C++17: recent torch headers refuse anything older (ATen/ATen.h).
#: * ``-D_GLIBCXX_USE_CXX11_ABI``: DeepGEMM's setup.py passes torch's value; std::string and
#:   std::list change layout with it, and torch's signatures carry both.
#: * No ``-DPYBIND11_COMPILER_TYPE/STDLIB/BUILD_ABI``: torch's cpp_extension adds them itself when
#:   torch exports them (``diagnose`` prints torch's values; the torch 2.11 build line had none).
#: * -O2 -g0: host code only (argument checks, launches); no debug info halves the compile time.
#: * Absolute include paths: ninja compiles from a build folder, where relative ones miss.
#: * rpath: torch's CUDA libraries (its wheels') first, then the toolkit's, so that the extension
#:   binds the same libcudart/libnvrtc/libcublasLt that torch has loaded, even when imported alone.
#: * ``-lstdc++`` named, and ``--exclude-libs,ALL``: the GPU machine's ``g++`` (a wrapper around
#:   ``g++-real``) linked libstdc++ statically, by every sign: its extension had no ``NEEDED
#:   libstdc++.so.6``, which a ``-static-libstdc++`` link reproduces here exactly. That private copy's
#:   exported data (locale facet ids, the classic locale) is then bound to the copy torch loaded,
#:   a newer one, while its functions stay its own (Python links with ``-Bsymbolic-functions``):
#:   the first ``std::regex`` or stream in DeepGEMM's JIT (its include hasher) mixes the two. Here
#:   that reproduced as ``std::bad_cast`` from the JIT's first call; there it was a SIGSEGV. Naming
#:   ``-lstdc++`` before the driver's own binds the shared library torch uses; ``--exclude-libs``
#:   keeps any archive's symbols private if a wrapper still adds one.
BUILD_SCRIPT = """
import json, torch
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension, CUDA_HOME
from pathlib import Path
abi_flags = [f'-D_GLIBCXX_USE_CXX11_ABI={{int(torch._C._GLIBCXX_USE_CXX11_ABI)}}']
flags = ['-std=c++20', '-O2', '-g0', '-fPIC', '-Wno-psabi', '-Wno-deprecated-declarations', *abi_flags]
torch_libs = sorted(map(str, Path(torch.__file__).parent.parent.glob('nvidia/cu*/lib')))
rpath = [*torch_libs, str(Path(torch.__file__).parent / 'lib'), f'{{CUDA_HOME}}/lib64']
print('DEEPGEMM_BUILD_FLAGS', json.dumps({{'torch': torch.__version__, 'cuda': torch.version.cuda,
      'cxx_flags': flags, 'rpath': rpath}}), flush=True)
setup(name='deep_gemm', ext_modules=[CUDAExtension(
    'deep_gemm._C', ['csrc/python_api.cpp'],
    include_dirs=[f'{{CUDA_HOME}}/include', f'{{CUDA_HOME}}/include/cccl', '{cutlass}', '{fmt}'],
    libraries=['cudart', 'nvrtc', 'stdc++'], library_dirs=[f'{{CUDA_HOME}}/lib64'], extra_compile_args=flags,
    extra_link_args=['-Wl,--exclude-libs,ALL', *[f'-Wl,-rpath,{{d}}' for d in rpath]])],
    cmdclass={{'build_ext': BuildExtension}}, script_args=['build_ext', '--inplace'])
"""


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
    if _built(kit, dest):  # a second call on a machine still warm: the same kit and recipe, already compiled
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
    # The extension: one C++ translation unit (host code; DeepGEMM's kernels are compiled at run time),
    # built by torch's own CUDAExtension + BuildExtension so that the compiler, include paths and
    # link line are the ones torch gives every extension. On top of them, what torch's cpp_extension
    # no longer adds but torch's binaries were built with (``abi_flags``), and DeepGEMM's own flags.
    setup = dest / "build_ext.py"
    setup.write_text(BUILD_SCRIPT.format(cutlass=dest / CUTLASS_DIR, fmt=dest / FMT_DIR))
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
    """Whether ``dest`` holds an extension compiled from this very kit by this very recipe."""
    try:
        return (any(dest.glob("deep_gemm/_C*.so")) and json.loads((dest / "MANIFEST.json").read_text()) == manifest(kit)
                and (dest / "build_ext.py").read_text() == BUILD_SCRIPT.format(cutlass=dest / CUTLASS_DIR,
                                                                               fmt=dest / FMT_DIR))
    except (OSError, ValueError, KeyError):
        return False


def libstdcxx_link(so: Path) -> str:
    """How the shared object ``so`` holds the C++ library: "shared" (``NEEDED libstdc++.so.6``: the
    copy torch uses), "private copy" (none needed, yet it exports the library's own functions, as a
    plain ``-static-libstdc++`` link leaves them: the crash), "hidden or none" (a static copy whose
    symbols ``--exclude-libs`` hid, safe, or no C++ library) or "unknown" (no readelf here)."""
    import shutil

    if not shutil.which("readelf"):
        return "unknown"
    dyn = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True).stdout
    if "[libstdc++.so" in dyn:
        return "shared"
    syms = subprocess.run(["readelf", "--dyn-syms", "-W", str(so)], capture_output=True, text=True).stdout
    # std::locale's constructor: defined only in libstdc++ itself, never a template left in a user's object
    own = any(" FUNC " in line and " UND " not in line and "_ZNSt6localeC" in line for line in syms.splitlines())
    return "private copy" if own else "hidden or none"


def _import_check(dest: Path, env: dict, t_build: float) -> int:
    """``import deep_gemm`` in a fresh process (it initializes on the GPU), then ``env.sh``."""
    check = subprocess.run([sys.executable, "-c", "import deep_gemm, torch; print(deep_gemm.__version__, "
                            "deep_gemm.get_num_sms(), torch.cuda.get_device_name())"],
                           capture_output=True, text=True, env={**os.environ, **env})
    if check.returncode:
        print((check.stdout + check.stderr)[-3000:], flush=True)
        return _say(False, "built, but `import deep_gemm` failed (above)")
    (dest / "env.sh").write_text("".join(f"export {k}={v}\n" for k, v in env.items()))
    so = next(dest.glob("deep_gemm/_C*.so"))
    link = libstdcxx_link(so)
    if link == "private copy":  # the JIT's first std::regex would mix two C++ libraries (BUILD_SCRIPT)
        return _say(False, f"{so.name} carries its own copy of libstdc++ (the compiler {os.environ.get('CXX', 'c++')} "
                           "links it statically despite -lstdc++); DeepGEMM's JIT would crash: build with a g++ "
                           "that links libstdc++.so.6 (CXX=/path/to/g++)")
    return _say(True, f"deep_gemm {check.stdout.strip()} in {dest} ({t_build:.0f} s; libstdc++: {link}); "
                      f"source {dest / 'env.sh'}")


# --- diagnose: each step of DeepGEMM's first use in its own process, so that a crash names its step ---

#: (name, what it exercises, Python source). Each runs in a fresh ``python -X faulthandler`` with
#: ``env_for(dest)`` plus DeepGEMM's JIT tracing (``DG_JIT_DEBUG``: code, nvcc command, cubin load,
#: launch) and the crash handler (``CRASH_HANDLER_C``); the text ``{dest}`` and ``{root}`` is
#: replaced by the paths. Exit status 3 means "skipped" (printed why).
DIAG_STEPS = (
    ("toolchain", "torch, CUDA, compiler, driver and the extension's link facts (no deep_gemm)", r"""
import json, shutil, subprocess, sys, torch
from pathlib import Path
from torch.utils.cpp_extension import CUDA_HOME
def first(cmd, last=False):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
        return (out[-1] if last else out[0]) if out else '?'
    except (OSError, subprocess.SubprocessError) as e:
        return f'{type(e).__name__}: {e}'
info = dict(python=sys.version.split()[0], torch=torch.__version__, torch_cuda=torch.version.cuda,
            torch_cxx11_abi=torch._C._GLIBCXX_USE_CXX11_ABI,
            torch_pybind11={n: getattr(torch._C, f'_PYBIND11_{n}', None) for n in ('COMPILER_TYPE', 'STDLIB', 'BUILD_ABI')},
            gpu=torch.cuda.get_device_name(), capability=torch.cuda.get_device_capability(),
            driver=first(['nvidia-smi', '--query-gpu=driver_version', '--format=csv,noheader']),
            cuda_home=CUDA_HOME, nvcc=first([f'{CUDA_HOME}/bin/nvcc', '--version'], last=True),
            cxx=first([__import__('os').environ.get('CXX', 'c++'), '--version']))
print(json.dumps(info, indent=1))
for line in (Path('{dest}') / 'build.log').read_text().splitlines() if (Path('{dest}') / 'build.log').exists() else []:
    if line.startswith('DEEPGEMM_BUILD_FLAGS'):
        print(line)
sys.path.insert(0, '{root}/tools')
import deepgemm_kit
for so in Path('{dest}', 'deep_gemm').glob('_C*.so'):
    if shutil.which('readelf'):
        print('\n'.join(l.strip() for l in subprocess.run(['readelf', '-d', str(so)], capture_output=True,
              text=True).stdout.splitlines() if 'NEEDED' in l or 'PATH' in l))
    print('libstdc++ in the extension:', deepgemm_kit.libstdcxx_link(so))
for cxx in dict.fromkeys(c for c in (os.environ.get('CXX'), 'c++', 'g++') if c):
    path = shutil.which(cxx)
    head = Path(path).read_bytes()[:3000] if path else b''
    if head.startswith(b'#!'):  # a wrapper: the flags it adds to every link
        print(f'{cxx}: {path} is a script:', head.decode(errors='replace'), sep='\n')
    elif path:
        print(f'{cxx}: {path} -> {os.path.realpath(path)}')
"""),
    ("import", "import deep_gemm (its init), get_num_sms (cudaGetDeviceProperties, cuBLASLt), the libraries mapped", r"""
import deep_gemm as dg
print('deep_gemm', dg.__version__, 'SMs', dg.get_num_sms(), 'mk alignment', dg.get_mk_alignment_for_contiguous_layout())
keys = ('libcudart', 'libnvrtc', 'libcublasLt', 'libstdc++', 'libcuda.so', 'libc10.so', 'deep_gemm')
libs = sorted({l.split()[-1] for l in open('/proc/self/maps') if len(l.split()) > 5 and any(k in l for k in keys)})
print('\n'.join(libs))
for k in ('libcudart', 'libnvrtc', 'libcublasLt', 'libstdc++'):
    if len([l for l in libs if k + '.so' in l]) > 1:
        print(f'WARNING: two copies of {k} mapped')
"""),
    ("tensor-no-jit", "a torch tensor through DeepGEMM's binding without its JIT (already aligned; torch's copy path)", r"""
import deep_gemm as dg
print('tma aligned size of 100 fp32:', dg.get_tma_aligned_size(100, 4))
x = torch.randn(128, 4, device='cuda')
t = torch.empty_strided((128, 4), (1, 128), device='cuda').copy_(x)
r = dg.get_mn_major_tma_aligned_tensor(t)
assert r.data_ptr() == t.data_ptr(), 'an aligned tensor was copied'
src = torch.randn(128, 8, device='cuda')[:, ::2]
r = dg.get_mn_major_tma_aligned_tensor(src)
torch.cuda.synchronize()
assert torch.equal(r, src) and r.stride() == (1, 128), (r.stride(), (r - src).abs().max())
print('ok: aligned input returned as is; strided input copied MN-major', r.stride())
"""),
    ("jit-transpose", "get_mn_major_tma_aligned_tensor on a tiny contiguous tensor: nvcc JIT, cubin load, launch", r"""
import deep_gemm as dg
x = torch.randn(256, 4, device='cuda')
r = dg.get_mn_major_tma_aligned_tensor(x)
torch.cuda.synchronize()
assert torch.equal(r, x) and r.stride() == (1, 256), (r.stride(), (r - x).abs().max())
print('ok: transposed by the JIT kernel', r.stride())
"""),
    ("jit-after-course", "the same after importing the CuTe DSL and the course (as deepgemm_peer.py does)", r"""
sys.path.insert(0, '{root}')
try:
    import cutlass.cute
    from cutecourse.kernels import grouped
except Exception as e:
    print(f'SKIP: the course does not import here ({type(e).__name__}: {e}); source .gpu/activate.sh first')
    raise SystemExit(3)
import deep_gemm as dg
x = torch.randn(384, 8, device='cuda')
r = dg.get_mn_major_tma_aligned_tensor(x)
torch.cuda.synchronize()
assert torch.equal(r, x) and r.stride() == (1, 384), (r.stride(), (r - x).abs().max())
print('ok: transposed by the JIT kernel beside the CuTe DSL', r.stride())
"""),
    ("grouped-gemm", "one tiny m_grouped_fp8_gemm_nt_contiguous (2 groups x 128 rows, N 256, K 512) against an fp32 emulation", r"""
import deep_gemm as dg
torch.manual_seed(0)
G, M, N, K = 2, 128, 256, 512
e4m3 = torch.float8_e4m3fn
x = torch.randn(G * M, K, device='cuda').view(G * M, K // 128, 128)
sfa = x.abs().amax(-1).clamp(min=1e-4) / 448
a = (x / sfa[..., None]).to(e4m3).view(G * M, K)
w = torch.randn(G, N, K, device='cuda').view(G, N // 128, 128, K // 128, 128)
sfb = w.abs().amax((2, 4)).clamp(min=1e-4) / 448
b = (w / sfb[:, :, None, :, None]).to(e4m3).view(G, N, K)
m_indices = torch.arange(G, device='cuda', dtype=torch.int32).repeat_interleave(M)
deq_a = (a.float().view(G * M, K // 128, 128) * sfa[..., None]).view(G * M, K)
deq_b = (b.float().view(G, N // 128, 128, K // 128, 128) * sfb[:, :, None, :, None]).view(G, N, K)
ref = torch.cat([deq_a[g * M:(g + 1) * M] @ deq_b[g].T for g in range(G)])
d = torch.empty(G * M, N, device='cuda', dtype=torch.bfloat16)
sfa_t = dg.get_mn_major_tma_aligned_tensor(sfa)
dg.m_grouped_fp8_gemm_nt_contiguous((a, sfa_t), (b, sfb), d, m_indices, recipe=(1, 128, 128))
torch.cuda.synchronize()
err = ((d.float() - ref).abs().max() / ref.abs().max()).item()
print(f'relative error against the emulation: {err:.3g}')
assert err < 1e-2, 'DeepGEMM computed something else'
"""),
)


def _step_env(dest: Path) -> dict[str, str]:
    """The environment of each step: what ``deepgemm_peer.py`` runs DeepGEMM with (its JIT's cache,
    configs, ptxas report, SASS dump) plus the JIT's own tracing of every stage."""
    peer = {"DG_PRINT_CONFIGS": "1", "DG_JIT_PTXAS_VERBOSE": "1", "DG_JIT_DUMP_SASS": "1"}
    return {**peer, **os.environ, **env_for(dest), "DG_JIT_DEBUG": "1", "DG_JIT_PRINT_COMPILER_COMMAND": "1",
            "PYTHONFAULTHANDLER": "1", "PYTHONUNBUFFERED": "1"}


def _describe(rc: int) -> str:
    import signal

    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit status {rc}"


#: A fatal-signal handler for the steps, built with the machine's C compiler when ``diagnose`` starts
#: (there is no gdb there) and loaded with ctypes before torch. It makes C ``stdout`` unbuffered, so
#: that the JIT's own ``printf`` lines (its code, nvcc command, cubin load) reach the pipe before a
#: crash instead of dying in the buffer, and on SIGSEGV/SIGBUS/SIGILL/SIGFPE/SIGABRT writes the
#: faulting address, the instruction's object and offset, and glibc's ``backtrace`` of the native
#: stack; then it hands the signal to the handler it replaced (Python's faulthandler: the Python
#: stack), and the process dies of the same signal, so the exit status still says how.
CRASH_HANDLER_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

static char alt_stack[1 << 16];  /* a stack overflow leaves no room on the thread's own stack */
static struct sigaction previous[65];

static void say(const char *text) { ssize_t rc = write(2, text, strlen(text)); (void)rc; }

static void where(const char *what, void *addr) {
    char line[768];
    Dl_info info;
    if (dladdr(addr, &info) && info.dli_fname)
        snprintf(line, sizeof line, "%s %p: %s(%s+0x%lx)\n", what, addr, info.dli_fname,
                 info.dli_sname ? info.dli_sname : "",
                 (unsigned long)((char *)addr - (char *)(info.dli_sname ? info.dli_saddr : info.dli_fbase)));
    else
        snprintf(line, sizeof line, "%s %p: in no loaded object\n", what, addr);
    say(line);
}

static void on_fatal(int sig, siginfo_t *info, void *context) {
    char line[256];
    void *frames[64];
    fflush(stdout);  /* not async-signal-safe, but the process is dying and these lines matter */
    snprintf(line, sizeof line, "\nDGCRASH signal %d (%s), fault address %p\n", sig, strsignal(sig), info->si_addr);
    say(line);
#if defined(__x86_64__)
    where("DGCRASH instruction", (void *)((ucontext_t *)context)->uc_mcontext.gregs[REG_RIP]);
#endif
    say("DGCRASH native stack, innermost first:\n");
    backtrace_symbols_fd(frames, backtrace(frames, 64), 2);
    say("DGCRASH end\n");
    sigaction(sig, &previous[sig], NULL);
    if (info->si_code <= 0)  /* sent by raise or kill: send it again, to the previous handler */
        raise(sig);
    /* a fault: returning runs the faulting instruction again, and the previous handler gets it */
}

int dg_diag_install(void) {
    static const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
    struct sigaction action;
    stack_t stack;
    void *warm[2];
    setvbuf(stdout, NULL, _IONBF, 0);
    stack.ss_sp = alt_stack;
    stack.ss_size = sizeof alt_stack;
    stack.ss_flags = 0;
    sigaltstack(&stack, NULL);
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_fatal;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    for (unsigned i = 0; i < sizeof sigs / sizeof sigs[0]; ++i)
        sigaction(sigs[i], &action, &previous[sigs[i]]);
    backtrace(warm, 2);  /* its first call loads libgcc_s (malloc, dlopen): do that now, not in the handler */
    return 0;
}
"""

#: Run first in every step (started with ``-X faulthandler``): the crash handler on top of
#: faulthandler's, so that it sees the fault itself and then passes it on for the Python stack.
STEP_PRELUDE = """import os, sys
if os.environ.get('DG_DIAG_CRASH_HANDLER'):
    import ctypes
    ctypes.CDLL(os.environ['DG_DIAG_CRASH_HANDLER']).dg_diag_install()
sys.path.insert(0, {dest!r})
import torch
"""
#: The steps that go through DeepGEMM's JIT: the cache folder is listed after each.
JIT_STEPS = ("jit-transpose", "jit-after-course", "grouped-gemm")
#: What a step's environment is shown with (the variables DeepGEMM and its nvcc read).
ENV_KEYS = ("HOME", "CUDA_HOME", "CUDA_PATH", "PATH", "LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "CC", "CXX",
            "TMPDIR")


def install_crash_handler() -> bool:
    """In a process started with ``DG_DIAG_CRASH_HANDLER`` naming a built ``crash_handler``: load it
    (``deepgemm_peer.py``'s probe child does, so that its crash, too, comes with a native stack)."""
    lib = os.environ.get("DG_DIAG_CRASH_HANDLER")
    if not lib or not Path(lib).exists():
        return False
    import ctypes

    ctypes.CDLL(lib).dg_diag_install()
    return True


def crash_handler(work: Path) -> tuple[Path | None, str]:
    """(path, compiler) of ``CRASH_HANDLER_C`` built as a shared library in ``work``, or (None, why)."""
    import shutil

    work.mkdir(parents=True, exist_ok=True)
    src, lib = work / "dg_diag_crash.c", work / "libdg_diag_crash.so"
    src.write_text(CRASH_HANDLER_C)
    tried = []
    for cc in dict.fromkeys(c for c in (os.environ.get("CC"), "cc", "gcc", os.environ.get("CXX"), "g++") if c):
        if not shutil.which(cc):
            continue
        proc = subprocess.run([cc, "-x", "c", "-shared", "-fPIC", "-O1", "-o", str(lib), str(src)],
                              capture_output=True, text=True)
        if proc.returncode == 0:
            return lib, cc
        tried.append(f"{cc}: {(proc.stderr.strip().splitlines() or ['?'])[-1][:200]}")
    return None, "; ".join(tried) or "no C compiler on PATH"


def symbolize(lines: list[str], dest: Path) -> list[str]:
    """The crash handler's frames, with names: a frame of the extension (or of any object under
    ``dest``) given as ``obj(+0xOFFSET)`` gets the nearest symbol below from ``nm`` (DeepGEMM's
    functions are ``static``, so they are only in the symbol table); mangled names demangled."""
    import bisect
    import shutil

    frame = re.compile(r"^(?P<obj>/\S+?)\((?P<sym>[^()+]*)\+0x(?P<off>[0-9a-f]+)\)")
    tables: dict[str, tuple[list[int], list[str]]] = {}
    out = []
    for line in lines:
        text = line.split(": ", 1)[1] if line.startswith("DGCRASH instruction") else line
        m = frame.match(text)
        if m and not m["sym"] and m["obj"].startswith(str(dest)) and shutil.which("nm"):
            if m["obj"] not in tables:
                addrs, names = [], []
                nm = subprocess.run(["nm", "-n", "-C", "--defined-only", m["obj"]], capture_output=True, text=True)
                for entry in nm.stdout.splitlines():
                    parts = entry.split(" ", 2)
                    if len(parts) == 3 and parts[1].lower() in "tw":
                        addrs.append(int(parts[0], 16))
                        names.append(parts[2])
                tables[m["obj"]] = (addrs, names)
            addrs, names = tables[m["obj"]]
            i = bisect.bisect_right(addrs, int(m["off"], 16)) - 1
            if i >= 0:
                line += f"  = {names[i][:200]}+0x{int(m['off'], 16) - addrs[i]:x}"
        elif m and m["sym"].startswith("_Z") and shutil.which("c++filt"):
            line += "  = " + subprocess.run(["c++filt", m["sym"]], capture_output=True, text=True).stdout.strip()[:200]
        out.append(line)
    return out


def cache_listing(cache: Path, limit: int = 40) -> list[str]:
    """The files in DeepGEMM's JIT cache folder (sizes), and each compile folder that holds a
    ``kernel.cu`` but no ``kernel.cubin`` (nvcc did not finish there)."""
    if not cache.exists():
        return [f"{cache}: does not exist (the JIT never wrote its cache folder)"]
    files = sorted(p for p in cache.rglob("*") if p.is_file())
    out = [f"{cache}: {len(files)} files"]
    out += [f"  {p.relative_to(cache)} ({p.stat().st_size} B)" for p in files[:limit]]
    if len(files) > limit:
        out.append(f"  ... {len(files) - limit} more")
    for cu in cache.rglob("kernel.cu"):
        if not (cu.parent / "kernel.cubin").exists():
            out.append(f"  no cubin beside {cu.relative_to(cache)}: nvcc did not finish there")
    return out


def env_report(env: dict[str, str], dest: Path) -> list[str]:
    """What DeepGEMM's JIT will find: the variables it and nvcc read, the tools and folders at the
    paths it builds from them (``CUDA_HOME``/bin/nvcc and cuobjdump, the include root it is given as
    ``deep_gemm/include``, the cache folder it writes)."""
    out = [f"{k}={env[k]}" for k in ENV_KEYS if k in env] + [f"{k} unset" for k in ENV_KEYS if k not in env]
    out += [f"{k}={v}" for k, v in sorted(env.items()) if k.startswith("DG_")]
    cuda = Path(env.get("CUDA_HOME", "/usr/local/cuda"))
    cache = Path(env.get("DG_JIT_CACHE_DIR") or Path(env.get("HOME", "")) / ".deep_gemm")
    for what, path in (("nvcc", cuda / "bin" / "nvcc"), ("cuobjdump", cuda / "bin" / "cuobjdump"),
                       ("include root", dest / "deep_gemm" / "include" / "deep_gemm"),
                       ("cute headers", dest / "deep_gemm" / "include" / "cute"),
                       ("cutlass headers", dest / "deep_gemm" / "include" / "cutlass")):
        out.append(f"{what}: {path} {'present' if path.exists() else 'MISSING'}")
    try:
        cache.mkdir(parents=True, exist_ok=True)
        out.append(f"JIT cache {cache}: {'writable' if os.access(cache, os.W_OK) else 'NOT WRITABLE'}")
    except OSError as e:
        out.append(f"JIT cache {cache}: cannot be made ({e})")
    return out


def diagnose(dest: Path, timeout: float, steps: list[str] | None = None, table=DIAG_STEPS) -> int:
    """Run ``DIAG_STEPS`` (or the named ones) in order, each in its own process; print each one's
    outcome and output tail, then ``DEEPGEMM_DIAG ok`` or the first step that failed and how. Every
    step runs with ``CRASH_HANDLER_C`` loaded (a crash prints its native stack, the JIT's output is
    unbuffered); each JIT step is followed by the cache folder's listing; the environment comes
    first. A step's whole output goes to ``$OUT/deepgemm_diag_<step>.log`` when OUT is set."""
    log = []
    out_dir = Path(os.environ["OUT"]) if os.environ.get("OUT") else None

    def say(text: str = "") -> None:
        print(text, flush=True)
        log.append(text)

    if not any(dest.glob("deep_gemm/_C*.so")):
        say(f"DEEPGEMM_DIAG failed: no extension in {dest}: run `python tools/deepgemm_kit.py build` first")
        return 1
    env, first_failure, outcome = _step_env(dest), None, {}
    handler, how = crash_handler(dest.parent / "deepgemm_diag")
    if handler is not None:
        env["DG_DIAG_CRASH_HANDLER"] = str(handler)
    say(f"DIAG crash handler: {'built with ' + how if handler else 'NOT built (' + how + ')'}")
    say("DIAG environment of every step:")
    for line in env_report(env, dest):
        say(f"    {line}")
    cache = Path(env.get("DG_JIT_CACHE_DIR") or Path(env.get("HOME", "")) / ".deep_gemm")
    prelude = STEP_PRELUDE.format(dest=str(dest))
    for name, what, body in table:
        if steps and name not in steps:
            continue
        code = prelude + body.replace("{dest}", str(dest)).replace("{root}", str(ROOT))
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, "-X", "faulthandler", "-c", code], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, env=env, timeout=timeout, cwd=dest.parent)
            rc, out = proc.returncode, proc.stdout
        except subprocess.TimeoutExpired as e:
            rc, out = None, ((e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else
                             (e.stdout or "")) + f"\n(timed out after {timeout:.0f} s)"
        dt = time.perf_counter() - t0
        if out_dir is not None:
            (out_dir / f"deepgemm_diag_{name}.log").write_text(out)
        status = "ok" if rc == 0 else "skipped" if rc == 3 else "timed out" if rc is None else f"FAILED ({_describe(rc)})"
        outcome[name] = status
        say(f"DIAG {name}: {status} ({dt:.0f} s) - {what}")
        lines = out.strip().splitlines()
        crash_at = next((i for i, line in enumerate(lines) if line.startswith("DGCRASH signal")), len(lines))
        for line in lines[:crash_at][-(60 if rc not in (0, 3) else 25):]:
            say(f"    {line[:400]}")
        for line in symbolize(lines[crash_at:crash_at + 80], dest):
            say(f"    {line[:500]}")
        if name in JIT_STEPS:
            for line in cache_listing(cache):
                say(f"    cache: {line}")
        if rc not in (0, 3) and first_failure is None:
            first_failure = f"{name} ({status})"
    verdict = f"DEEPGEMM_DIAG {'ok' if first_failure is None else 'failed: first failing step ' + first_failure}"
    say(verdict)
    if out_dir is not None:  # the device tool brings back what is under $OUT
        (out_dir / "deepgemm_diagnose.log").write_text("\n".join(log) + "\n")
        (out_dir / "deepgemm_diagnose.json").write_text(json.dumps(outcome, indent=1))
    return 0 if first_failure is None else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("action", choices=("pack", "build", "diagnose", "list"))
    p.add_argument("--kit", type=Path, default=KIT)
    p.add_argument("--mirrors", type=Path, default=MIRRORS)
    p.add_argument("--dest", type=Path, default=DEST)
    p.add_argument("--jobs", type=int, default=16)
    p.add_argument("--timeout", type=float, default=150, help="diagnose: seconds each step may take")
    p.add_argument("--steps", help=f"diagnose: comma-separated, of {[n for n, _, _ in DIAG_STEPS]} (default: all)")
    args = p.parse_args()
    if args.action == "pack":
        pack(args.kit, args.mirrors)
        return 0
    if args.action == "list":
        m = manifest(args.kit)
        print(json.dumps({k: v for k, v in m.items() if k != "files"}, indent=1), f"\n{len(m['files'])} files")
        return 0
    if args.action == "diagnose":
        return diagnose(args.dest, args.timeout, [x.strip() for x in args.steps.split(",")] if args.steps else None)
    return build(args.kit, args.dest, args.jobs)


if __name__ == "__main__":
    raise SystemExit(main())
