"""DeepGEMM driven from the course's data: its m-grouped contiguous layout, an emulation of what it
computes (checked on the CPU), its timed call, its import with the environment its JIT needs, and
what its JIT compiled (template arguments, SASS) for the result's provenance.

DeepGEMM comes from ``tools/deepgemm_kit.py build`` (in ``deepgemm_build.DEST``).
"""

from __future__ import annotations

import os
import re
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

import deepgemm_build  # noqa: E402

#: The bound a DeepGEMM or course FP8 row is checked with against ``scaled_mm_reference`` (the
#: course's FP8 tests' bound).
MAX_REL_ERR = 1e-2


def deepgemm_inputs(qA, SA, qB, SB, rows):
    """DeepGEMM's m-grouped contiguous layout of the course's quantized groups: (a, sfa, b, sfb,
    m_indices). ``a`` (sum M, K) e4m3 and ``sfa`` (sum M, K/128) fp32, row-major (DeepGEMM's sm90
    path makes sfa MN-major and TMA-aligned itself: ``deepgemm_call`` does that once, ahead);
    ``b`` (G, N, K), ``sfb`` (G, N/128, K/128) fp32; ``m_indices`` (sum M,) int32, the group of
    each row (every group here is a multiple of 128 rows, DeepGEMM's alignment)."""
    import torch

    e4m3 = torch.float8_e4m3fn  # joined as bytes: not every torch concatenates float8 tensors
    a = torch.cat([q.view(torch.uint8) for q in qA]).view(e4m3)
    sfa = torch.cat([s.contiguous() for s in SA])
    b = torch.stack([q.view(torch.uint8) for q in qB]).view(e4m3)
    sfb = torch.stack([s.contiguous() for s in SB])
    m_indices = torch.repeat_interleave(torch.arange(len(rows), dtype=torch.int32),
                                        torch.tensor(rows)).to(a.device)
    return a, sfa, b, sfb, m_indices


def emulate_deepgemm(a, sfa, b, sfb, m_indices):
    """What DeepGEMM computes from ``deepgemm_inputs``, in plain torch (fp32, per k-block):
    each row times its group's weight. On the CPU this checks the packing, not DeepGEMM."""
    import torch

    k = a.shape[1]
    ablk = a.float().reshape(a.shape[0], -1, 128) * sfa[:, :, None]
    out = torch.empty(a.shape[0], b.shape[1])
    for g in range(b.shape[0]):
        sel = m_indices == g
        wq = b[g].float().reshape(b.shape[1] // 128, 128, k // 128, 128)
        w = (wq * sfb[g][:, None, :, None]).reshape(b.shape[1], k)
        out[sel] = ablk[sel].reshape(int(sel.sum()), k) @ w.T
    return out


def deepgemm_call(dg, a, sfa, b, sfb, m_indices, d):
    """``fn()`` launching DeepGEMM's grouped kernel into ``d``; A's scales are put in the layout
    its sm90 kernel reads here, once, so the timed call transforms nothing."""
    sfa_tma = dg.get_mn_major_tma_aligned_tensor(sfa)
    if dg.get_mn_major_tma_aligned_tensor(sfa_tma).data_ptr() != sfa_tma.data_ptr():
        raise RuntimeError("DeepGEMM copies A's scales on every call: the timing would include that copy")
    return lambda: dg.m_grouped_fp8_gemm_nt_contiguous((a, sfa_tma), (b, sfb), d, m_indices, recipe=(1, 128, 128))


def import_deepgemm():
    """(module, "") or (None, why not): DeepGEMM as ``tools/deepgemm_kit.py build`` left it,
    with the environment its JIT needs (CUDA home, a writable cache)."""
    env = deepgemm_build.env_for(deepgemm_build.DEST)
    for key in ("CUDA_HOME", "DG_JIT_CACHE_DIR"):
        os.environ.setdefault(key, env[key])
    os.environ.setdefault("DG_PRINT_CONFIGS", "1")  # the tile, cluster and stages it picks, in the log
    os.environ.setdefault("DG_JIT_PTXAS_VERBOSE", "1")  # registers and spills of each kernel, in the log
    if (Path(os.environ["CUDA_HOME"]) / "bin" / "cuobjdump").exists():  # DeepGEMM asserts it works
        os.environ.setdefault("DG_JIT_DUMP_SASS", "1")  # kept beside each cubin; save_sass archives them
    if str(deepgemm_build.DEST) not in sys.path:
        sys.path.insert(0, str(deepgemm_build.DEST))
    try:
        import deep_gemm
    except Exception as e:  # noqa: BLE001  (not built, or built for another torch: reported)
        return None, (f"import deep_gemm failed: {type(e).__name__}: {str(e).strip()[:200]}; build it with "
                      "`python tools/deepgemm_kit.py build` on this machine")
    return deep_gemm, ""


def deepgemm_kernels() -> dict[str, str]:
    """DeepGEMM's compiled grouped kernels (its JIT cache): folder -> the template arguments it
    instantiated (major of B's scales, M/N/K compiled in, groups, BLOCK_M/N/K, swizzles, stages,
    TMA and math threads, multicast and on A, SMs, GEMM type, output type, epilogue)."""
    cache = Path(os.environ.get("DG_JIT_CACHE_DIR", "/nonexistent")) / "cache"
    out = {}
    for d in sorted(cache.glob("kernel.sm90_m_grouped_fp8_gemm_contiguous_1d2d.*")):
        code = (d / "kernel.cu").read_text() if (d / "kernel.cu").exists() else ""
        args = re.search(r"sm90_fp8_gemm_1d2d_impl<(.*?)>\)", code, re.S)
        out[d.name] = " ".join(args.group(1).split()) if args else "?"
    return out


def save_sass(out_dir: str) -> Path | None:
    """The SASS of DeepGEMM's grouped kernels (``DG_JIT_DUMP_SASS``) in one archive under ``out_dir``:
    the instruction schedule to set beside the course kernel's."""
    cache = Path(os.environ.get("DG_JIT_CACHE_DIR", "/nonexistent")) / "cache"
    sass = sorted(cache.glob("kernel.sm90_m_grouped_fp8_gemm_contiguous_1d2d.*/kernel.sass"))
    if not sass:
        return None
    path = Path(out_dir) / "deepgemm_sass.tar.xz"
    with tarfile.open(path, "w:xz") as t:
        for f in sass:
            t.add(f, arcname=f"{f.parent.name}.sass")
    return path
