"""Compile the course's Blackwell grouped block-scaled GEMM and NVIDIA's CuTeDSL example for the
same configuration (sm_100a, on the CPU) and print what each became, side by side.

    .venv/bin/python tools/compare_blackwell_example.py PATH/TO/grouped_blockscaled_gemm.py \\
        --fmt nvfp4 --tile 128,128 --cluster 1,1

PATH is NVIDIA's ``examples/python/CuTeDSL/cute/blackwell/kernel/blockscaled_grouped_gemm/
grouped_blockscaled_gemm.py`` (class ``Sm100GroupedBlockScaledGemmKernel``) from a checkout of
NVIDIA/cutlass; it is loaded from there, never copied into this repository. Each side compiles in
its own process (the DSL's architecture is fixed at import) with the same compiler options
(``cutecourse.inspect.COMPILER_OPT``), so registers and instruction counts are comparable.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: (label, regex or cutecourse.inspect.PTX_FEATURES name)
FEATURES = [
    ("NVFP4 MMA (mxf4nvf4.block16)", "NVFP4 MMA"),
    ("MXFP8 MMA (mxf8f6f4.block32)", "MXFP8 MMA"),
    ("2-CTA MMA", r"^tcgen05\.mma\.cta_group::2"),
    ("tcgen05.cp (SF smem->TMEM)", "tcgen05.cp"),
    ("tcgen05.alloc", "tcgen05.alloc"),
    ("tcgen05.dealloc", "tcgen05.dealloc"),
    ("tcgen05.ld", "tcgen05.ld"),
    ("tcgen05.wait::ld", "tcgen05.wait::ld"),
    ("tcgen05.commit", r"^tcgen05\.commit\."),
    ("tcgen05.commit multicast", "tcgen05.commit multicast"),
    ("tensormap.replace", "tensormap.replace"),
    ("  .global_address", r"^tensormap\.replace\.tile\.global_address"),
    ("  .global_dim", r"^tensormap\.replace\.tile\.global_dim"),
    ("  .global_stride", r"^tensormap\.replace\.tile\.global_stride"),
    ("tensormap.cp_fenceproxy (release)", "tensormap release"),
    ("fence.proxy.tensormap (acquire)", "tensormap acquire"),
    ("prefetch.tensormap", r"^prefetch\.tensormap"),
    ("TMA loads", "TMA loads"),
    ("TMA multicast loads", "TMA multicast loads"),
    ("TMA stores", "TMA stores"),
    ("mbarrier.init", r"^mbarrier\.init"),
    ("mbarrier.try_wait", "mbarrier waits"),
    ("mbarrier.arrive.expect_tx", r"^mbarrier\.arrive\.expect_tx"),
    ("bar.sync / barrier", r"^(bar\.sync|barrier\.sync)"),
    ("warp search (shfl.up, vote)", r"^(shfl\.sync\.up|vote\.sync\.ballot)"),
    ("setmaxnreg", "setmaxnreg"),
]


def _nvidia_target(path: str, fmt: str, tile, cluster, sms: int = 148, groups: int = 4):
    """NVIDIA's kernel object and fake arguments, as its own ``run()`` would pass them, minus the
    GPU: symbolic (M, K, L) K-major A/B, N-major C, 1-D SF, static metadata arrays."""
    import importlib.util

    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    spec = importlib.util.spec_from_file_location("nvidia_grouped_blockscaled", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    data, sf, vec = {"nvfp4": (cutlass.Float4E2M1FN, cutlass.Float8E4M3FN, 16),
                     "mxfp8": (cutlass.Float8E4M3FN, cutlass.Float8E8M0FNU, 32)}[fmt]
    per_16b = 128 // data.width
    sym64 = lambda d: cute.sym_int64(divisibility=d)  # noqa: E731
    m, n, k, l = cute.sym_int(), cute.sym_int(), cute.sym_int(divisibility=per_16b), cute.sym_int()
    a = make_fake_tensor(data, (m, k, l), (sym64(per_16b), 1, sym64(per_16b)), assumed_align=16)
    b = make_fake_tensor(data, (n, k, l), (sym64(per_16b), 1, sym64(per_16b)), assumed_align=16)
    c = make_fake_tensor(cutlass.Float16, (m, cute.sym_int(divisibility=8), l), (sym64(8), 1, sym64(8)),
                         assumed_align=16)
    sfa = make_fake_tensor(sf, (cute.sym_int(),), (1,), assumed_align=16)
    sfb = make_fake_tensor(sf, (cute.sym_int(),), (1,), assumed_align=16)
    i32, i64 = cutlass.Int32, cutlass.Int64
    clusters = sms // (cluster[0] * cluster[1])  # HardwareInfo needs a driver: passed in
    kernel = mod.Sm100GroupedBlockScaledGemmKernel(vec, tuple(tile), tuple(cluster))
    args = (a, b, c, sfa, sfb, groups,
            make_fake_tensor(i32, (groups, 4), (4, 1), assumed_align=16),
            make_fake_tensor(i32, (groups, 3, 2), (6, 2, 1), assumed_align=16),
            make_fake_tensor(i64, (groups, 3), (3, 1), assumed_align=16),
            make_fake_tensor(i64, (groups, 2), (2, 1), assumed_align=16),
            clusters, make_fake_tensor(i64, (sms, 5, 16), (80, 16, 1), assumed_align=16),
            clusters, make_fake_stream())
    return kernel, args


def _worker(side: str, path: str, fmt: str, tile, cluster) -> dict:
    """Compile one side in this (fresh) process; return its numbers."""
    t0 = time.perf_counter()
    os.environ["CUTE_DSL_ARCH"] = "sm_100a"
    os.environ["CUTE_DSL_DISABLE_FILE_CACHING"] = "1"
    sys.path.insert(0, ROOT)
    from cutecourse import inspect

    if side == "course":
        from cutecourse.kernels import grouped_targets

        kernel, args = grouped_targets.blackwell(fmt=fmt, tile=tile, cluster=cluster)
    else:
        kernel, args = _nvidia_target(path, fmt, tile, cluster)
    t1 = time.perf_counter()
    report = inspect.compile_here(kernel, *args, name=side)
    storage = getattr(kernel, "shared_storage", None)
    return {
        "counts": {label: report.count(rx) for label, rx in FEATURES},
        "ptx_instructions": len(report.instructions("ptx")),
        "registers": report.registers,
        "spill_bytes": report.spill_bytes,
        "smem_dynamic": storage.size_in_bytes() if storage is not None else None,
        "compile_s": round(report.seconds, 2),
        "setup_s": round(t1 - t0, 2),
        "W0014": sum("W0014" in line for line in report.log.splitlines()),
    }


def compare(path: str, fmt: str = "nvfp4", tile=(128, 128), cluster=(1, 1)) -> dict:
    """{"course": {...}, "nvidia": {...}}: each side compiled in a fresh process."""
    out = {}
    for side in ("course", "nvidia"):
        spec = json.dumps({"side": side, "path": path, "fmt": fmt, "tile": list(tile),
                           "cluster": list(cluster)})
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", spec],
                              capture_output=True, text=True, cwd=ROOT)
        if proc.returncode != 0:
            raise SystemExit(f"{side} did not compile:\n{proc.stderr[-3000:]}")
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        res["process_s"] = round(time.perf_counter() - t0, 1)
        out[side] = res
    return out


def table(res: dict) -> str:
    c, n = res["course"], res["nvidia"]
    rows = ["| feature | course | NVIDIA |", "|---|---|---|"]
    rows += [f"| {label} | {c['counts'][label]} | {n['counts'][label]} |" for label, _ in FEATURES]
    for key in ("ptx_instructions", "registers", "spill_bytes", "smem_dynamic", "W0014",
                "compile_s", "process_s"):
        rows.append(f"| {key} | {c[key]} | {n[key]} |")
    return "\n".join(rows)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("example", nargs="?", help="path to NVIDIA's grouped_blockscaled_gemm.py")
    ap.add_argument("--fmt", default="nvfp4", choices=("nvfp4", "mxfp8"))
    ap.add_argument("--tile", default="128,128")
    ap.add_argument("--cluster", default="1,1")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        spec = json.loads(args.worker)
        print(json.dumps(_worker(spec["side"], spec["path"], spec["fmt"], tuple(spec["tile"]),
                                 tuple(spec["cluster"]))))
        return
    if not args.example or not os.path.isfile(args.example):
        ap.error("give the path of NVIDIA's grouped_blockscaled_gemm.py (from a NVIDIA/cutlass checkout)")
    tile = tuple(int(x) for x in args.tile.split(","))
    cluster = tuple(int(x) for x in args.cluster.split(","))
    res = compare(os.path.abspath(args.example), args.fmt, tile, cluster)
    if args.json:
        print(json.dumps(res, indent=1))
    else:
        print(f"{args.fmt} tile {tile} cluster {cluster}, sm_100a, same compiler options both sides")
        print(table(res))


if __name__ == "__main__":
    main()
