"""DeepGEMM's first use, one step per process, so that a crash names its step.

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

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from deepgemm_build import env_for
from deepgemm_crash import crash_handler, describe_exit, symbolize
from deepgemm_pack import ROOT

def _transpose(rows: int, cols: int, where: str) -> str:
    """A step's source: DeepGEMM's JIT transposes a contiguous (rows, cols) tensor MN-major."""
    return f"""
import deep_gemm as dg
x = torch.randn({rows}, {cols}, device='cuda')
r = dg.get_mn_major_tma_aligned_tensor(x)
torch.cuda.synchronize()
assert torch.equal(r, x) and r.stride() == (1, {rows}), (r.stride(), (r - x).abs().max())
print('ok: transposed by the JIT kernel{where}', r.stride())
"""


#: (name, what it exercises, Python source). Each runs in a fresh ``python -X faulthandler`` with
#: ``env_for(dest)`` plus DeepGEMM's JIT tracing (``DG_JIT_DEBUG``: code, nvcc command, cubin load,
#: launch) and the crash handler (``deepgemm_crash.CRASH_HANDLER_C``); the text ``{dest}`` and ``{root}`` is
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
import deepgemm_build
for so in Path('{dest}', 'deep_gemm').glob('_C*.so'):
    if shutil.which('readelf'):
        print('\n'.join(l.strip() for l in subprocess.run(['readelf', '-d', str(so)], capture_output=True,
              text=True).stdout.splitlines() if 'NEEDED' in l or 'PATH' in l))
    print('libstdc++ in the extension:', deepgemm_build.libstdcxx_link(so))
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
    ("jit-transpose", "get_mn_major_tma_aligned_tensor on a tiny contiguous tensor: nvcc JIT, cubin load, launch",
     _transpose(256, 4, "")),
    ("jit-after-course", "the same after importing the CuTe DSL and the course (as deepgemm_peer.py does)", r"""
sys.path.insert(0, '{root}')
try:
    import cutlass.cute
    from cutecourse.kernels import grouped
except Exception as e:
    print(f'SKIP: the course does not import here ({type(e).__name__}: {e}); source .gpu/activate.sh first')
    raise SystemExit(3)
""" + _transpose(384, 8, " beside the CuTe DSL")),
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
        status = "ok" if rc == 0 else "skipped" if rc == 3 else "timed out" if rc is None else f"FAILED ({describe_exit(rc)})"
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
