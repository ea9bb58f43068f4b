#!/usr/bin/env bash
# Issue 24's H100 session (docs/notes/grouped_speed.md), 7-9.5 minutes, everything under $OUT:
#   1. the FP8 variants' correctness on the GPU (tests/test_hopper_grouped_gemm_fp8.py, variants)
#   2. Nsight Compute: the course's FP8 kernels, the candidates and cuBLAS's dense twin, at the
#      GPU's own clock and at the base clock, plus the stall samples per instruction of the default
#   3. the benchmark: every course row against torch on four problems, 3 interleaved rounds
# Each step has its own time limit (150 + 200 + 220 s), so that a hang or a failure costs that step
# only, and steps 2 and 3 save their JSON as they go. If step 1 fails, steps 2 and 3 time today's
# kernels only (the benchmark never times a row that fails its check, either).
#   OUT=/root/out PYTHON=python bash benchmarks/experiments/grouped_speed_session.sh
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-out}
PY=${PYTHON:-python}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
TODAY="course fp8 1x1,course fp8 2x1"
CANDIDATES="course fp8 1part 2x1,course fp8 1part done 2x1,course fp8 128x192 2x1,course fp8 128x192 done 2x1"
CANDIDATES="$CANDIDATES,course fp8 128x192 free 2x1,course fp8 128x256 2x1"
BF16="course bf16 1x1,course bf16 2x1,course bf16 128x128 1x1,course bf16 128x128 2x1"
TWIN="dense twin _scaled_mm rowwise"
# in order of interest: the results are saved after each problem
PROBLEMS="dg 8x4096 n4096 k7168,moe 128 n1536 k2048,dg 4x8192 n7168 k2048,down 8x4096 n4096 k14336"

start=$(date +%s)
step() { echo "== $1 ($(( $(date +%s) - start )) s)" | tee -a "$OUT/session.txt"; }

step "1. variants on the GPU"
if timeout 150 "$PY" -m pytest -q -x -p no:cacheprovider tests/test_hopper_grouped_gemm_fp8.py \
    -k variants_match > "$OUT/1_variant_tests.txt" 2>&1 && grep -q "1 passed" "$OUT/1_variant_tests.txt"; then
  FP8="$TODAY,$CANDIDATES"
  NCU="$TODAY,course fp8 128x192 2x1,course fp8 128x256 2x1,$TWIN"
else
  echo "variant tests failed: timing today's kernels only" | tee -a "$OUT/session.txt"
  FP8="$TODAY"
  NCU="$TODAY,$TWIN"
fi
tail -3 "$OUT/1_variant_tests.txt" | tee -a "$OUT/session.txt"

step "2. Nsight Compute"
timeout 200 "$PY" benchmarks/experiments/grouped_fp8_ncu.py --clock both --source "course fp8 2x1" \
  --kernels "$NCU" --out "$OUT" > "$OUT/2_ncu.txt" 2>&1
echo "exit $?" | tee -a "$OUT/session.txt"

step "3. benchmark"
timeout 220 "$PY" benchmarks/grouped_peers.py --rounds 3 --problems "$PROBLEMS" --kernels "$FP8,$BF16" \
  --out "$OUT" --tag _variants > "$OUT/3_peers.txt" 2>&1
echo "exit $?" | tee -a "$OUT/session.txt"
step "done"
