"""Fingerprint the PTX of every GEMM configuration the course compiles (sm_90a, no GPU).

A refactor of the kernels must not change what the compiler makes, or must say why. This tool
compiles each configuration in one process and writes, per configuration, the SHA-256 of its PTX
(and, with ``--keep DIR``, the PTX itself for diffing). Compare two runs with ``--compare``:

    python tools/ptx_fingerprints.py --out before.json --keep /tmp/ptx-before
    ... change the code ...
    python tools/ptx_fingerprints.py --out after.json --keep /tmp/ptx-after --compare before.json

Kernel entry names are normalised (``.entry NAME`` and calls to it), since they spell the Python
class and module the kernel came from, not what it does. ``--explain`` (with ``--compare`` and
both runs' ``--keep`` directories) prints, for each configuration that differs, the instructions
that differ once virtual register numbers are ignored: a renumbering is no change. A new
variant's configurations join the committed file with ``--update tools/ptx_fingerprints.json
--only REGEX``.

The configurations come from the kernels' own tables: every dense GEMM of ``kernels/registry.py``
(at least its defaults, ``NAME/default``, for one this file names no configurations of), every
one-CTA mainloop of ``hopper_gemm.all_variants()`` (``VARIANTS`` and ``DEMO_VARIANTS``; on one CTA
and on the 2x1 and 1x2 clusters of ``hopper_gemm_cluster.CLUSTERS``; the teaching ``VARIANTS`` on every cluster
shape too), the persistent kernels' ``CLUSTERS``, every FP8 grouped kernel of
``grouped.FP8_KERNELS`` (on each of its ``TILES``), and the grouped and mixed-input GEMMs' compile
targets. A new variant in one of those tables is fingerprinted without an edit here.

Configurations named ``blackwell/...`` are compiled for sm_100a. The DSL reads its architecture
once per process, so the tool compiles them in a child process of its own (``--arch sm_100a``).
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import importlib
import json
import os
import re
import sys
import tempfile
import time

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cutecourse.kernels import registry  # noqa: E402  (the dense GEMMs by name)

#: name -> compile target of every dense GEMM the registry lists
DENSE = {name: registry.target(name) for name in registry.DENSE}
ONE, CLUSTER, PERSISTENT, PINGPONG, STREAMK, DIRECT_STORE = (
    DENSE[n] for n in ("one", "cluster", "persistent", "pingpong", "streamk", "directstore"))
GROUPED = "cutecourse.kernels.grouped_targets:hopper"
GROUPED_FP8 = "cutecourse.kernels.grouped_targets:hopper_fp8"
BLACKWELL = "cutecourse.kernels.grouped_targets:blackwell"
MIXED = "cutecourse.kernels.mixed_input:compile_target"
ARCHS = ("sm_90a", "sm_100a")


def arch_of(name: str) -> str:
    """The architecture a configuration is compiled for."""
    return "sm_100a" if name.startswith("blackwell/") else "sm_90a"


def configurations() -> dict[str, tuple[str, dict]]:
    """name -> (compile target, its keyword arguments): every configuration the course builds."""
    from cutecourse.kernels import grouped, hopper_gemm, hopper_gemm_cluster, hopper_gemm_persistent

    # the one-CTA mainloops (the teaching ones and notebook 04's demonstrations), on one CTA and
    # on the clusters along one dimension; the teaching ones also on every cluster shape below
    mainloops, teaching = list(hopper_gemm.all_variants()), list(hopper_gemm.VARIANTS)
    multicast = [c for c in hopper_gemm_cluster.CLUSTERS if c != (1, 1)]
    lines = [c for c in multicast if 1 in c]  # 2x1, 1x2
    out = {}
    for variant in mainloops:
        for tile in ((128, 128), (128, 256)):
            out[f"one/{variant}/{tile[0]}x{tile[1]}/1x1"] = (ONE, dict(variant=variant, tile=list(tile)))
            for cluster in lines:
                out[f"one/{variant}/{tile[0]}x{tile[1]}/{cluster[0]}x{cluster[1]}"] = (
                    CLUSTER, dict(variant=variant, tile=list(tile), cluster=list(cluster)))
    for p in (1, 2, 3):
        out[f"one/compiler/128x256/1x1/P={p}"] = (ONE, dict(variant="compiler", prefetch_stages=p))
    out["one/prefetch/128x128/1x1/S=3"] = (ONE, dict(tile=[128, 128], stages=3))
    out["one/prefetch/128x256/1x1/bf16"] = (ONE, dict(in_dtype="bfloat16", out_dtype="bfloat16"))
    out["one/prefetch/128x256/1x1/fp32out"] = (ONE, dict(out_dtype="float32"))
    for variant in teaching:
        for cluster in multicast:
            out[f"cluster/{variant}/128x256/{cluster[0]}x{cluster[1]}"] = (
                CLUSTER, dict(variant=variant, cluster=list(cluster)))
    out["cluster/prefetch/128x128/2x1"] = (CLUSTER, dict(tile=[128, 128], cluster=[2, 1]))
    for hints in ("a_first", "b_first"):
        out[f"cluster/prefetch/128x256/2x1/{hints}"] = (CLUSTER, dict(cluster=[2, 1], l2_hints=hints))
    for tile in ((128, 128), (128, 256)):
        for cluster in hopper_gemm_persistent.CLUSTERS:
            out[f"persistent/static/{tile[0]}x{tile[1]}/{cluster[0]}x{cluster[1]}"] = (
                PERSISTENT, dict(tile=list(tile), cluster=list(cluster)))
        out[f"persistent/dynamic/{tile[0]}x{tile[1]}/1x1"] = (
            PERSISTENT, dict(tile=list(tile), scheduler="dynamic"))
    out["persistent/static/128x256/1x1/G=8"] = (PERSISTENT, dict(group_m=8))
    out["persistent/static/128x256/1x1/S=3"] = (PERSISTENT, dict(stages=3))
    out["persistent/static/128x256/1x1/fp32out"] = (PERSISTENT, dict(out_dtype="float32"))
    out["persistent/static/128x256/2x1/bf16"] = (
        PERSISTENT, dict(cluster=[2, 1], in_dtype="bfloat16", out_dtype="bfloat16"))
    out["persistent/static/128x256/1x1/pdl"] = (PERSISTENT, dict(pdl=True))
    out["persistent/static/256x128/1x2/bf16"] = (
        PERSISTENT, dict(tile=[256, 128], cluster=[1, 2], in_dtype="bfloat16", out_dtype="bfloat16"))
    # a named L2 hint pair (sm90.L2_HINT_PAIRS) in the persistent family, as in the cluster kernel
    out["persistent/static/128x256/1x1/a_first"] = (PERSISTENT, dict(l2_hints="a_first"))
    out["grouped/128x256/1x1/a_first"] = (GROUPED, dict(l2_hints="a_first"))
    out["pingpong/64x256/1x1/pdl"] = (PINGPONG, dict(pdl=True))
    out["pingpong/128x128/1x1"] = (PINGPONG, dict(tile=[128, 128]))
    out["streamk/128x256/1x1"] = (STREAMK, {})
    out["streamk/128x256/2x1/pdl"] = (STREAMK, dict(cluster=[2, 1], pdl=True))
    out["directstore/128x256/1x1"] = (DIRECT_STORE, {})
    out["pingpong/64x256/1x1/dynamic"] = (PINGPONG, dict(scheduler="dynamic"))
    for cluster in ((1, 1), (2, 1)):
        out[f"pingpong/64x256/{cluster[0]}x{cluster[1]}"] = (PINGPONG, dict(cluster=list(cluster)))
    # every FP8 kernel class of grouped.FP8_KERNELS, on each tile it takes, at the two clusters its
    # launchers choose between (grouped.fp8_cluster)
    for variant, cls in grouped.FP8_KERNELS.items():
        for tile in cls.TILES:
            for cluster in ((1, 1), grouped.CLUSTER):
                out[f"grouped/fp8/{variant}/{tile[0]}x{tile[1]}/{cluster[0]}x{cluster[1]}"] = (
                    GROUPED_FP8, dict(variant=variant, tile=list(tile), cluster=list(cluster)))
    for tile in ((128, 128), (128, 256)):
        for cluster in hopper_gemm_persistent.CLUSTERS:
            out[f"grouped/{tile[0]}x{tile[1]}/{cluster[0]}x{cluster[1]}"] = (
                GROUPED, dict(tile=list(tile), cluster=list(cluster)))
    out["grouped/128x256/1x1/bf16"] = (GROUPED, dict(in_dtype="bfloat16", out_dtype="bfloat16"))
    for fmt, tile, cluster in (("nvfp4", (128, 128), (1, 1)), ("nvfp4", (128, 256), (1, 1)),
                               ("mxfp8", (128, 128), (1, 1)), ("nvfp4", (128, 128), (2, 1)),
                               ("mxfp8", (128, 128), (1, 2)), ("nvfp4", (128, 128), (2, 2))):
        out[f"blackwell/{fmt}/{tile[0]}x{tile[1]}/{cluster[0]}x{cluster[1]}"] = (
            BLACKWELL, dict(fmt=fmt, tile=list(tile), cluster=list(cluster)))
    out["blackwell/mxfp8/128x128/1x1/bf16"] = (BLACKWELL, dict(fmt="mxfp8", out_dtype="bfloat16"))
    # the mixed-input GEMM (int4 weights, bf16 activations): batch tiles, warpgroups, split-K, zeros
    for tile_m in (8, 16, 64):
        for wg in (1, 2):
            out[f"mixed/{tile_m}/wg{wg}"] = (MIXED, dict(tile_m=tile_m, warpgroups=wg))
    out["mixed/8/wg2/split"] = (MIXED, dict(tile_m=8, warpgroups=2, split_k=True))
    out["mixed/16/wg1/g64/zp"] = (MIXED, dict(tile_m=16, group_size=64, zero_point=True))
    # ... and with fp16 activations
    out["mixed/16/wg1/fp16"] = (MIXED, dict(tile_m=16, dtype="float16"))
    out["mixed/8/wg2/split/g64/zp/fp16"] = (
        MIXED, dict(tile_m=8, warpgroups=2, split_k=True, group_size=64, zero_point=True, dtype="float16"))
    # a dense GEMM of the registry this file names no configuration of: its defaults
    for name, target in DENSE.items():
        if not any(t == target for t, _ in out.values()):
            out[f"{name}/default"] = (target, {})
    return out


_ENTRY = re.compile(r"(\.entry|\.func|call(?:\.uni)?\s*\(?[^,]*,?)\s+([A-Za-z_$][\w$]*)")


def normalise(ptx: str) -> str:
    """PTX without comments and with kernel names replaced by their order of appearance."""
    names: dict[str, str] = {}
    for m in re.finditer(r"\.entry\s+([A-Za-z_$][\w$]*)", ptx):
        names.setdefault(m.group(1), f"kernel{len(names)}")
    lines = []
    for line in ptx.splitlines():
        line = line.split("//")[0].rstrip()
        if not line:
            continue
        for old, new in names.items():
            line = line.replace(old, new)
        lines.append(line)
    return "\n".join(lines) + "\n"


def compile_ptx(target: str, params: dict) -> str:
    import cutlass.cute as cute
    from cutlass.cutlass_dsl import CuTeDSL

    mod, fn = target.split(":")
    jit_fn, args, *rest = getattr(importlib.import_module(mod), fn)(**params)
    env = CuTeDSL._get_dsl().envar
    with tempfile.TemporaryDirectory() as dump:
        saved = (env.keep_ptx, env.dump_dir)
        env.keep_ptx, env.dump_dir = True, dump
        try:
            compiled = cute.compile(jit_fn, *args, **(rest[0] if rest else {}))
        finally:
            env.keep_ptx, env.dump_dir = saved
    return compiled.artifacts.PTX


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON file: configuration -> sha256 of its PTX")
    ap.add_argument("--keep", help="directory to write each configuration's normalised PTX into")
    ap.add_argument("--compare", help="an earlier --out file: list the configurations that differ")
    ap.add_argument("--only", help="regular expression: compile only matching configurations")
    ap.add_argument("--explain", metavar="BEFORE_DIR",
                    help="the --keep directory of the --compare run: summarise each difference")
    ap.add_argument("--update", metavar="FILE",
                    help="merge this run's fingerprints into FILE (tools/ptx_fingerprints.json), "
                         "e.g. with --only for the configurations of a new variant")
    ap.add_argument("--arch", choices=ARCHS, help=argparse.SUPPRESS)  # the child process's
    opts = ap.parse_args()
    os.environ["CUTE_DSL_DISABLE_FILE_CACHING"] = "1"
    arch = opts.arch or ARCHS[0]
    os.environ["CUTE_DSL_ARCH"] = arch  # before the DSL is imported
    hashes, t0 = {}, time.time()
    if not opts.arch:  # the other architectures first, each in a child process
        for other in ARCHS[1:]:
            hashes.update(_child(other, opts))
    for name, (target, params) in configurations().items():
        if opts.only and not re.search(opts.only, name) or arch_of(name) != arch:
            continue
        try:
            ptx = normalise(compile_ptx(target, params))
        except Exception as exc:  # a configuration that no longer compiles is a finding too
            hashes[name] = f"error: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__}"
            print(f"{name}: {hashes[name]}", flush=True)
            continue
        hashes[name] = hashlib.sha256(ptx.encode()).hexdigest()
        if opts.keep:
            os.makedirs(opts.keep, exist_ok=True)
            with open(os.path.join(opts.keep, name.replace("/", "_") + ".ptx"), "w") as f:
                f.write(ptx)
        print(f"{name}: {hashes[name][:16]}", flush=True)
    with open(opts.out, "w") as f:
        json.dump(hashes, f, indent=1, sort_keys=True)
    print(f"{len(hashes)} configurations in {time.time() - t0:.0f} s")
    if opts.arch:
        return 0
    if opts.update:
        with open(opts.update) as f:
            merged = {**json.load(f), **hashes}
        with open(opts.update, "w") as f:
            json.dump(merged, f, indent=1, sort_keys=True)
        print(f"{opts.update}: {len(hashes)} of its {len(merged)} configurations written")
    if opts.compare:
        with open(opts.compare) as f:
            before = json.load(f)
        differ = [n for n in hashes if n in before and before[n] != hashes[n]]
        missing = [] if opts.only else [n for n in before if n not in hashes]
        new = [n for n in hashes if n not in before]
        print(f"identical: {len(hashes) - len(differ) - len(new)}; differ: {differ or 'none'}; "
              f"new: {new or 'none'}; not compiled now: {missing or 'none'}")
        if opts.explain and opts.keep:
            for name in differ:
                print(f"{name}:\n" + explain(os.path.join(opts.explain, name.replace("/", "_") + ".ptx"),
                                              os.path.join(opts.keep, name.replace("/", "_") + ".ptx")))
        return 1 if differ else 0
    return 0


def _child(arch: str, opts) -> dict:
    """Fingerprints of ``arch``'s configurations, compiled by a child process."""
    if not any(arch_of(n) == arch and not (opts.only and not re.search(opts.only, n))
               for n in configurations()):
        return {}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "child.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--arch", arch, "--out", out]
        cmd += ["--only", opts.only] if opts.only else []
        cmd += ["--keep", opts.keep] if opts.keep else []
        subprocess.run(cmd, check=True)
        with open(out) as f:
            return json.load(f)


def explain(before_path: str, after_path: str) -> str:
    """The instructions only one side has, with register numbers (and declarations) ignored."""
    import collections

    def instructions(path):
        with open(path) as f:
            text = re.sub(r"%(r|rd|p|f|fd|rs|h|hh)\d+", r"%\1", f.read())
        return collections.Counter(ln.strip() for ln in text.splitlines()
                                   if ln.strip() and not ln.strip().startswith(".reg"))

    a, b = instructions(before_path), instructions(after_path)
    lines = [f"  - {n}x {ins}" for ins, n in sorted((a - b).items())]
    lines += [f"  + {n}x {ins}" for ins, n in sorted((b - a).items())]
    return "\n".join(lines) or "  (only register numbers differ)"


if __name__ == "__main__":
    sys.exit(main())
