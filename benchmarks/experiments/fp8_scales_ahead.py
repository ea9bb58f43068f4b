"""Issue 24: does the FP8 kernel wait for its scales? Load them two k-tiles ahead instead of one.

    python benchmarks/experiments/fp8_scales_ahead.py --cpu-check          # compile, count, no GPU
    python benchmarks/experiments/fp8_scales_ahead.py [--rounds 3] [--problems "..."] [--tag _x]

The course's FP8 kernel (``hopper_grouped_gemm_fp8``) loads k-tile k + 1's scales from global
memory just before it issues k + 1's wgmmas, and the compiler computes ``sa * sb`` for k + 1 just
before it issues k + 2's: about one k-tile after the loads. Nsight Compute's samples per SASS
instruction (``experiment_grouped_fp8_ncu_source.json``) put 4.5% of all stall samples at that
FMUL, the largest single instruction outside the barrier waits. If the loads sometimes take longer
than a k-tile, the FMUL holds back the next wgmmas.

``StagedScales`` is that kernel with one change to its ``mainloop``: each part's three scales (sa
of the thread's two rows, sb of the tile's columns) are loaded into staging registers two k-tiles
before their promotion and moved over when their k-tile is issued; the loads of the last k-tiles
are clamped to the last one. (Copying the course kernel's 64-entry ``sa`` tensors instead made the
compiler lose that they hold two values: 136 FMULs and 222 spill stores.) Everything else (roles,
ring, promotion, epilogue) is the course kernel's.

The GPU run first checks the variant against ``blockwise_fp8.scaled_mm_reference`` on ragged
groups (``fp8_variants.RAGGED``: 1 to 9 k-tiles, both ends of the pair loop), then times it
beside the course kernel with ``grouped_peers.py``'s protocol and peers (rows "course fp8 2x1", "... staged").
Writes ``grouped_peers<tag>.json`` (default ``_scales_ahead``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ (grouped_peers)

import cutecourse  # noqa: E402  (fixes the DSL's architecture before cutlass loads)
import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
from cutlass.cute.nvgpu import warpgroup  # noqa: E402

from cutecourse.kernels import grouped, grouped_targets  # noqa: E402
from cutecourse.kernels import hopper_grouped_gemm_fp8 as fp8  # noqa: E402
from cutecourse.kernels.hopper_gemm_persistent import PRODUCER_WARPGROUPS  # noqa: E402
from cutecourse.kernels.hopper_grouped_gemm_fp8 import _group_scales, _issue  # noqa: E402

ROW = "course fp8 2x1 staged"


class StagedScales(fp8.BlockScaledGroupedHopperGemm):
    """The course's FP8 kernel, its scales loaded two k-tiles before their promotion."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.config = ("scales_two_ahead", *self.config)

    @cute.jit
    def mainloop(self, ring, mma, read, release, groups, tile):
        sfa, sfb, m_rows, n_blocks = _group_scales(groups, tile.group, tile.k_end)
        tidx, _, _ = cute.arch.thread_idx()
        thr = mma.tiled_mma.get_slice(tidx - 128 * PRODUCER_WARPGROUPS)
        rows = thr.partition_C(cute.make_identity_tensor(self.tile_mn))
        # A thread's accumulators lie on two rows: value i on rows[0] when (i // 2) % 2 == 0, else
        # on rows[2] (eight rows further: the m64nNk32 C fragment's (2, 2, N/8) values).
        first = tile.tile_m * self.tile_mn[0]
        r0 = cutlass.min(first + rows[0][0], m_rows - 1)
        r1 = cutlass.min(first + rows[2][0], m_rows - 1)
        bn = cutlass.min(tile.tile_n, n_blocks - 1)
        part0 = cute.make_rmem_tensor(mma.acc.shape, self.acc_dtype)
        part1 = cute.make_rmem_tensor(mma.acc.shape, self.acc_dtype)
        tiled_mma, tCrA, tCrB, acc, k_tiles = mma.tiled_mma, mma.tCrA, mma.tCrB, mma.acc, tile.k_end
        last = k_tiles - 1
        acc.fill(0.0)
        # (sa[r0], sa[r1], sb) per k-tile: x0 for the even part in use, y1 for the odd one staged, ...
        x0a, x0b, x0s = sfa[(r0, 0)], sfa[(r1, 0)], sfb[(bn, 0)]
        k1 = cutlass.min(1, last)
        y1a, y1b, y1s = sfa[(r0, k1)], sfa[(r1, k1)], sfb[(bn, k1)]
        k2 = cutlass.min(2, last)
        y0a, y0b, y0s = sfa[(r0, k2)], sfa[(r1, k2)], sfb[(bn, k2)]
        x1a, x1b, x1s = y1a, y1b, y1s
        tiled_mma = _issue(ring, read, tiled_mma, tCrA, tCrB, part0)
        read.advance()
        for pair in cutlass.range((k_tiles - 1) // 2, unroll=1):
            k = 2 * pair
            x1a, x1b, x1s = y1a, y1b, y1s  # k + 1's, loaded two k-tiles ago
            k3 = cutlass.min(k + 3, last)
            y1a, y1b, y1s = sfa[(r0, k3)], sfa[(r1, k3)], sfb[(bn, k3)]
            tiled_mma = _issue(ring, read, tiled_mma, tCrA, tCrB, part1)
            read.advance()
            warpgroup.wait_group(1)
            _promote2(ring, release, acc, part0, x0a * x0s, x0b * x0s)
            release.advance()
            x0a, x0b, x0s = y0a, y0b, y0s  # k + 2's
            k4 = cutlass.min(k + 4, last)
            y0a, y0b, y0s = sfa[(r0, k4)], sfa[(r1, k4)], sfb[(bn, k4)]
            tiled_mma = _issue(ring, read, tiled_mma, tCrA, tCrB, part0)
            read.advance()
            warpgroup.wait_group(1)
            _promote2(ring, release, acc, part1, x1a * x1s, x1b * x1s)
            release.advance()
        if k_tiles % 2 == 0:
            x1a, x1b, x1s = y1a, y1b, y1s
            tiled_mma = _issue(ring, read, tiled_mma, tCrA, tCrB, part1)
            read.advance()
            warpgroup.wait_group(1)
            _promote2(ring, release, acc, part0, x0a * x0s, x0b * x0s)
            release.advance()
            warpgroup.wait_group(0)
            _promote2(ring, release, acc, part1, x1a * x1s, x1b * x1s)
            release.advance()
        else:
            warpgroup.wait_group(0)
            _promote2(ring, release, acc, part0, x0a * x0s, x0b * x0s)
            release.advance()
        return read, release


@cute.jit
def _promote2(ring, release, acc, part, s0, s1):
    """``_promote`` with the two rows' scale products given: value i takes s1 when (i // 2) % 2."""
    ring.consumer_release(release)
    for i in cutlass.range_constexpr(cute.size(part)):
        acc[i] = acc[i] + part[i] * (s1 if (i // 2) % 2 else s0)


_course_fp8_kernel = grouped.fp8_kernel


def fp8_kernel(*args, staged: bool = False, **config):
    """``grouped.fp8_kernel``, or with ``staged=True`` the same configuration as ``StagedScales``."""
    base = _course_fp8_kernel(*args, **config)
    if not staged:
        return base
    return StagedScales(base.tile_mn, base.cluster_mn, base.sms, group_m=base.group_m)


def install() -> None:
    """Route the launchers through :func:`fp8_kernel` and add the benchmark row (the GPU run only:
    the CPU check compiles :func:`target`, which calls :func:`fp8_kernel` itself)."""
    import grouped_peers as gp

    grouped.fp8_kernel = fp8_kernel
    gp.COURSE_FP8[ROW] = dict(cluster=(2, 1), staged=True)


def target(staged: bool = True):
    """(kernel, fake_args) for ``cutecourse.inspect.compile_report("fp8_scales_ahead:target")``."""
    from cutecourse.kernels.group_walk import OPERANDS

    kernel = fp8_kernel((128, 128), (2, 1), 132, staged=staged)
    return kernel, grouped_targets._hopper_arguments(kernel, "float8_e4m3fn", "bfloat16", len(OPERANDS))


def cpu_check() -> dict:
    """Compile both for sm_90a (no GPU); print registers, spills, global loads and wgmmas, and
    return the two reports (False: the course kernel, True: the staged variant)."""
    from fp8_variants import compile_variant

    reports = {}
    for staged in (False, True):
        r = reports[staged] = compile_variant("fp8_scales_ahead:target", staged=staged)
        print(f"staged={staged}: registers {r.registers}, spills {r.spill_bytes} B, "
              f"global loads {r.ptx.count('ld.global')}, wgmma {r.ptx.count('wgmma.mma_async')}", flush=True)
    return reports


def gpu_check() -> float:
    """The variant against the reference on ragged groups (``fp8_variants.RAGGED``), 2x1 and 1x1;
    returns the worst relative error."""
    from fp8_variants import ragged_check

    return ragged_check(staged=True)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--cpu-check", action="store_true")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--problems", default="dg 4x8192 n4096 k7168,dg 8x4096 n4096 k7168,"
                                         "down 8x4096 n4096 k14336,dg 4x8192 n7168 k2048")
    p.add_argument("--out", default=None)
    p.add_argument("--tag", default="_scales_ahead")
    args = p.parse_args()
    if args.cpu_check:
        cpu_check()
        return 0
    install()
    import grouped_peers as gp
    from cutecourse import bench

    cutecourse.modes.require_gpu("sm_90a")
    worst = gpu_check()
    print(f"staged scales against the reference, ragged groups: worst {worst:.2e}", flush=True)
    if not worst < 1e-2:
        raise SystemExit("the staged variant is wrong: not timed")
    only = {"course fp8 2x1", ROW, *gp.TORCH_FP8[:2]}
    out = args.out or str(bench.RESULTS_DIR)
    results = gp.run(args.rounds, args.problems.split(","), only,
                     save=lambda r: bench.save_set(f"grouped_peers{args.tag}", r, out))
    for name, res in results.items():
        base, staged = res.row("course fp8 2x1").tflops, res.row(ROW).tflops
        print(f"{name:30} staged / course {staged / base:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
