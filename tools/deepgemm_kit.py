"""DeepGEMM as a measured peer: pack its sources here, build it on the GPU machine.

    python tools/deepgemm_kit.py pack  [--kit .deepgemm/deepgemm_kit.tar.xz]       # here, no network
    python tools/deepgemm_kit.py build [--kit ...] [--dest /tmp/deepgemm] [--jobs 16]  # on the H100
    python tools/deepgemm_kit.py diagnose [--dest ...] [--steps import,...]          # on the H100, after build
    python tools/deepgemm_kit.py list  [--kit ...]                                   # the manifest

``pack`` (``deepgemm_pack.py``) carries DeepGEMM's sources and the CUTLASS and fmt headers they
include; ``build`` (``deepgemm_build.py``) compiles its torch extension on the GPU machine;
``diagnose`` (``deepgemm_diagnose.py``) walks its first use one step per process, a crash
printing its native stack (``deepgemm_crash.py``). Each module's docstring says how.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from deepgemm_build import DEST, build
from deepgemm_diagnose import DIAG_STEPS, diagnose
from deepgemm_pack import KIT, MIRRORS, manifest, pack


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
        if not args.kit.exists():
            raise SystemExit(f"no kit at {args.kit}: python tools/deepgemm_kit.py pack")
        m = manifest(args.kit)
        print(json.dumps({k: v for k, v in m.items() if k != "files"}, indent=1), f"\n{len(m['files'])} files")
        return 0
    if args.action == "diagnose":
        return diagnose(args.dest, args.timeout, [x.strip() for x in args.steps.split(",")] if args.steps else None)
    return build(args.kit, args.dest, args.jobs)


if __name__ == "__main__":
    raise SystemExit(main())
