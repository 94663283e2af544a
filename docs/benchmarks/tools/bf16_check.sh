#!/usr/bin/env bash
# Build emulinalg's AMX module on the AMX host, run the AMX tests of the BF16 schedules and of
# the INT8 path, then benchmark the BF16 schedules (BF16x3, BF16xN) and the default levels on
# the amx backend beside numpy (OpenBLAS) and torch (MKL/oneDNN) on the same inputs.
#
# Run from the repository root, after `source .device/setup.sh`:
#     BENCH_SIZES=2048,4096,8192 bash docs/benchmarks/tools/bf16_check.sh
# Logs and records under "$OUT": build.log, tests.log, bench-*.log, bf16_*.jsonl, summary.txt.
# Knobs: BENCH_SIZES (default 2048,4096), BENCH_F64 / BENCH_F32 (methods, comma-separated; ""
# skips that dtype), BENCH_REPEAT (default 3), SKIP_TESTS=1, BENCH_PHI (default 1).
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../../.." || exit 1
OUT=${OUT:-/tmp/bf16-check-out}
mkdir -p "$OUT"
SITE=/tmp/emulinalg-site
THREADS=$(( $(nproc) < 16 ? $(nproc) : 16 ))
BENCH_SIZES=${BENCH_SIZES:-2048,4096}
BENCH_F64=${BENCH_F64-"BF16xN(6,6),BF16xN(6,10),BF16xN(6,15),BF16xN(6,21),float64"}
BENCH_F32=${BENCH_F32-"BF16x3(),float32"}
BENCH_REPEAT=${BENCH_REPEAT:-3}
BENCH_PHI=${BENCH_PHI:-1}
failed=0

# shellcheck source=docs/benchmarks/tools/step.sh
source docs/benchmarks/tools/step.sh

build() {
    [ -n "${SKIP_BUILD:-}" ] && [ -d "$SITE/emulinalg" ] && return 0
    rm -rf "$SITE"
    python3 -m pip install --no-build-isolation --no-deps --target "$SITE" . \
        -C cmake.define.EMULINALG_CUDA=OFF -C build-dir=/tmp/emulinalg-build
}

bench() {  # bench DTYPE METHODS
    [ -n "$2" ] || return 0
    OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS \
        python3 -m emulinalg bench --backend amx --sizes "$BENCH_SIZES" --shape square \
        --dtype "$1" --precision "$2" --phi "$BENCH_PHI" --repeat "$BENCH_REPEAT" --warmup 1 \
        --case-seconds 20 --ref-rows 4 --ref-cols 64 --torch --quiet \
        --out "$OUT/bf16_$1.jsonl" --append
}

export OUT SITE THREADS BENCH_SIZES BENCH_REPEAT BENCH_PHI
export -f build bench
: >"$OUT/summary.txt"
step build 400 build || { echo "build failed; see $OUT/build.log"; exit 1; }
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
lscpu | grep -E '^(Model name|CPU\(s\)|L2|L3)' > "$OUT/env.log"
if [ -z "${SKIP_TESTS:-}" ]; then
    step tests 240 python3 -m pytest --run-slow -q tests/algorithm/test_bf16.py tests/backends/amx \
        -m amx -rs -p no:cacheprovider --durations=5
fi
step bench-f64 "${BENCH_LIMIT:-300}" bench float64 "$BENCH_F64"
step bench-f32 "${BENCH_LIMIT:-300}" bench float32 "$BENCH_F32"
echo "== summary"
cat "$OUT/summary.txt"
exit "$failed"
