"""Experiment: the same GEMMs from two revisions of the course, timed in one run.

    git archive <commit> cutecourse | tar -x -C .before     # the earlier revision's package
    python benchmarks/experiments/revision_compare.py --before .before [--rounds 8]

A refactor that changes the generated code (``tools/ptx_fingerprints.py --explain`` lists the
instructions that differ) must show that the kernels run as fast as before. This script imports
the earlier revision's package from ``--before`` under another name, checks each kernel of both
revisions against torch.matmul, and times them in the same interleaved rounds (the sustained
protocol of ``benchmarks/gemm.py``, fp16 8192^3, small-integer data). The rows come in pairs,
``<kernel> now`` and ``<kernel> before``; ``bench.paired_ratio`` compares each pair round by round.
Writes ``experiment_revision_compare.json``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/

import cutecourse  # noqa: E402  (sets the DSL's arch before cutlass is imported)
from cutecourse import bench  # noqa: E402
from cutecourse.kernels import hopper_gemm as hg  # noqa: E402

import gemm  # noqa: E402  (benchmarks/gemm.py: data and protocol)

N = 8192
#: (row name, launcher keywords) of the one-CTA-per-tile kernel: the configurations whose PTX the
#: refactor changed (the CTA's tile index is read from %ctaid instead of %clusterid).
KERNELS = [("prefetch 128x256", dict(tile=(128, 256), variant="prefetch")),
           ("compiler 128x256", dict(tile=(128, 256), variant="compiler")),
           ("prefetch 128x128", dict(tile=(128, 128), variant="prefetch"))]


def import_before(root: str):
    """The earlier revision's ``cutecourse.kernels.hopper_gemm``, imported as ``cutecourse_before``."""
    init = Path(root) / "cutecourse" / "__init__.py"
    if not init.exists():
        raise SystemExit(f"{init} is missing: run `git archive <commit> cutecourse | tar -x -C {root}`")
    spec = importlib.util.spec_from_file_location("cutecourse_before", init,
                                                  submodule_search_locations=[str(init.parent)])
    pkg = importlib.util.module_from_spec(spec)
    sys.modules["cutecourse_before"] = pkg
    spec.loader.exec_module(pkg)
    return importlib.import_module("cutecourse_before.kernels.hopper_gemm")


def main() -> int:
    import torch

    p = argparse.ArgumentParser()
    p.add_argument("--before", required=True, help="directory holding the earlier revision's cutecourse/")
    p.add_argument("--out", default=str(bench.RESULTS_DIR))
    p.add_argument("--rounds", type=int, default=8)
    args = p.parse_args()
    cutecourse.modes.require_gpu("sm_90a")
    before = import_before(args.before)

    a, b = gemm.operands("ints", N, torch.float16)
    c = torch.empty(N, N, device="cuda", dtype=torch.float16)
    ref = torch.matmul(a, b.T)
    cases = [bench.Case("torch.matmul", lambda: torch.matmul(a, b.T, out=c))]
    for name, kw in KERNELS:
        for label, module in (("now", hg), ("before", before)):
            fn = module.launcher(a, b, c, **kw)
            cases.append(bench.checked_case(f"{name} {label}", fn, c, ref, max_rel_err=1e-2))
    print(f"all {len(cases) - 1} kernels match torch.matmul", flush=True)
    with bench.GpuMonitor() as monitor:
        res = bench.compare(f"GEMM fp16 {N}^3, ints, sustained: this revision vs {args.before}", cases,
                            bench.Work(flops=2 * N ** 3), baseline="torch.matmul", monitor=monitor,
                            progress=False, **{**gemm.PROTOCOLS["sustained"], "rounds": args.rounds},
                            params={"before": args.before, "kernels": [k for k, _ in KERNELS]})
    print(res.table(), flush=True)
    for name, _ in KERNELS:
        print(bench.paired_ratio(res, f"{name} now", f"{name} before"), flush=True)
    print(f"wrote {res.save('experiment_revision_compare', args.out)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
