#!/usr/bin/env bash
# One call on the GPU machine: build with the fused kernels, the gpu tests, the INT8 ceiling
# (docs/benchmarks/tools/gpu_ceiling.py) and the float64 level at N = 16384 end to end. From the repo
# root after `source .device/setup.sh`; logs under $OUT. SKIP_TESTS=1 / SKIP_BENCH=1 skip parts.
set -uo pipefail
OUT=${OUT:-/tmp/ceiling-out}
mkdir -p "$OUT"
ROOT=$PWD
t0=$SECONDS
source "$ROOT/tools/device/build_fused.sh"
if [ -z "${SKIP_TESTS:-}" ]; then
    (cd /tmp && timeout "${TEST_S:-240}" python3 -m pytest -q -x -p no:cacheprovider \
        "$ROOT/tests/backends/gpu" -m gpu) >"$OUT/tests.log" 2>&1
    echo "tests rc=$? $((SECONDS - t0)) s: $(tail -n 1 "$OUT/tests.log")"
fi
(cd docs/benchmarks/tools && timeout 200 python3 gpu_ceiling.py --out "$OUT/ceiling.jsonl" \
    --sizes "${SIZES:-8192,16384}" --repeat "${REPEAT:-10}") 2>&1 | tee "$OUT/ceiling.log"
echo "ceiling $((SECONDS - t0)) s"
if [ -z "${SKIP_BENCH:-}" ]; then
    (cd /tmp && timeout "${BENCH_S:-150}" python3 -m emulinalg bench --backend cupy \
        --shape square --sizes 16384 --dtype "${BENCH_DTYPE:-float64}" --phi "${BENCH_PHI:-1}" \
        --repeat 5 --warmup 1 --case-seconds 3 --ref-rows 8 --ref-cols 128 --strategy eager \
        --seed 0 --quiet --out "$OUT/records_16384.jsonl") >"$OUT/bench.log" 2>&1
    echo "bench rc=$? $((SECONDS - t0)) s"
    tail -n 5 "$OUT/bench.log"
fi
echo "total $((SECONDS - t0)) s"
