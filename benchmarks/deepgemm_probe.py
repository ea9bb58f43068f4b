"""DeepGEMM's first calls in a child process, before anything is timed.

    python benchmarks/deepgemm_probe.py --shapes "dg 4x8192 n4096 k7168,..."   # the child's side

``benchmarks/deepgemm_peer.py`` runs this first: the same imports, inputs and first calls as its
timed rows, on every shape, DeepGEMM's JIT filling the shared cache. A crash there (a segmentation
fault in its extension, say) costs only DeepGEMM's rows, noted with how the child died and on
which shape; the parent then loads DeepGEMM only for the shapes the child checked.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tools"))

from cutecourse.kernels import grouped  # noqa: E402
from cutecourse.models import blockwise_fp8 as fp8b  # noqa: E402

import deepgemm_build  # noqa: E402
import grouped_peers as peers  # noqa: E402
from deepgemm_call import MAX_REL_ERR, deepgemm_call, deepgemm_inputs, import_deepgemm  # noqa: E402
from deepgemm_crash import crash_handler, describe_exit, install_crash_handler  # noqa: E402
from row_checks import rel_err  # noqa: E402

PROBE = "DEEPGEMM_PROBE"


def probe_child(shapes) -> int:
    """In the child: DeepGEMM's first calls on each shape's inputs, checked
    as the timed row will be; one ``DEEPGEMM_PROBE {json}`` line per shape."""
    install_crash_handler()  # a crash in DeepGEMM then prints its native stack
    import torch

    dg, why_not = import_deepgemm()
    torch.manual_seed(0)
    for name in shapes:
        t0 = time.perf_counter()
        print(f"{name}: DeepGEMM's first calls", flush=True)
        if dg is None:
            print(PROBE, json.dumps({"shape": name, "why": why_not}), flush=True)
            continue
        d = None
        try:
            rows, n, _k, _kind, x, w, offs, _c = peers.problem_data(name)
            starts = [0] + offs.tolist()[:-1]
            qA, SA, qB, SB = grouped.quantize_fp8([x[s:s + m] for s, m in zip(starts, rows)], list(w))
            ref8 = torch.cat([fp8b.scaled_mm_reference(*q) for q in zip(qA, SA, qB, SB)])
            a, sfa, b, sfb, m_indices = deepgemm_inputs(qA, SA, qB, SB, rows)
            d = torch.empty(a.shape[0], n, device="cuda", dtype=torch.bfloat16)
            deepgemm_call(dg, a, sfa, b, sfb, m_indices, d)()
            torch.cuda.synchronize()
            err = rel_err(d, ref8)
            why = "" if err <= MAX_REL_ERR else f"wrong: relative error {err:.3g} > {MAX_REL_ERR}"
        except Exception as e:  # noqa: BLE001  (reported to the parent, which leaves DeepGEMM out here)
            why = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:240]}"
        print(PROBE, json.dumps({"shape": name, "why": why, "s": round(time.perf_counter() - t0, 1)}), flush=True)
        del d
        torch.cuda.empty_cache()
    return 0


def probe_deepgemm(shapes, timeout: float, log_dirs=(), cmd=None) -> dict[str, str]:
    """Run ``probe_child`` in a fresh process (or ``cmd``, in tests); shape -> "" where DeepGEMM ran
    and checked there, else why not (its error, or how the child died and on which shape). The
    child's output is echoed and kept as ``deepgemm_probe.log`` in ``log_dirs``."""
    env = dict(os.environ)
    if cmd is None:
        handler, _ = crash_handler(deepgemm_build.DEST.parent / "deepgemm_diag")
        if handler is not None:
            env["DG_DIAG_CRASH_HANDLER"] = str(handler)
    cmd = cmd or [sys.executable, "-X", "faulthandler", str(Path(__file__).resolve()), "--shapes", ",".join(shapes)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                              env=env)
        rc, out = proc.returncode, proc.stdout
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        rc = None
    for d in log_dirs:
        (Path(d) / "deepgemm_probe.log").write_text(out)
    found = {}
    for line in out.splitlines():
        if line.startswith(PROBE + " "):
            entry = json.loads(line[len(PROBE) + 1:])
            found[entry["shape"]] = entry["why"]
        elif line.strip():
            print(f"  | {line[:300]}", flush=True)
    how = "timed out after %.0f s" % timeout if rc is None else describe_exit(rc)
    result, first = {}, True
    for name in shapes:
        if name in found:
            result[name] = found[name]
        else:  # the child died on this shape (the first one missing) or never reached it
            tail = " | ".join(line for line in out.strip().splitlines()[-3:])[-300:]
            result[name] = (f"DeepGEMM's probe process {how} on this shape (last output: {tail})" if first
                            else f"not probed: DeepGEMM's probe process {how} on an earlier shape")
            first = False
    print(f"DeepGEMM probe ({time.perf_counter() - t0:.0f} s, child {how}): "
          + "; ".join(f"{k}: {v or 'ok'}" for k, v in result.items()), flush=True)
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", required=True, help="comma-separated names of grouped_peers.PROBLEMS")
    return probe_child([s.strip() for s in p.parse_args().shapes.split(",")])


if __name__ == "__main__":
    raise SystemExit(main())
