"""DeepGEMM built on the GPU machine from the kit: its torch extension, then an import check.

``build`` (on the GPU machine: nvcc and torch there) unpacks the kit into ``--dest``, compiles the
torch extension ``deep_gemm._C`` from ``csrc/python_api.cpp`` in place (what DeepGEMM's
``setup.py build_ext`` does, without its wheel-download and stub steps), and imports the package
in a fresh process. It prints one ``DEEPGEMM_BUILD ok|failed: ...`` line; ``env.sh`` in ``--dest``
holds the variables a later process needs (``benchmarks/deepgemm_peer.py`` sets them itself).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from deepgemm_pack import CUTLASS_DIR, FMT_DIR, REQUIRED, manifest

#: Where ``build`` unpacks and compiles the kit, and where the benchmarks look for DeepGEMM.
DEST = Path("/tmp/deepgemm")


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
