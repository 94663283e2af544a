#!/usr/bin/env bash
# On the AMX host (the GPU machine's CPU), numpy arrays on their default backend (amx): build
# the AMX module, the default plans beside numpy.matmul (docs/benchmarks/tools/amx_default_plans.py), the demo,
# the whole test suite but the GPU tests (one pytest per file), then the benchmark records of the
# levels and the BF16 schedules beside numpy and torch. From the repository root after
# `source .device/setup.sh`; logs under $OUT.
#     STEPS="build plans demo tests" bash docs/benchmarks/tools/amx_default_check.sh
#     STEPS="build bench complex" BENCH_SIZES=2048,4096,8192 bash docs/benchmarks/tools/amx_default_check.sh
#     STEPS="build stages" bash docs/benchmarks/tools/amx_default_check.sh   (host_stages.py)
# (build is skipped when an install from an earlier call on a warm machine is there.)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.." || exit 1
OUT=${OUT:-/tmp/amx-default-out}
mkdir -p "$OUT"
SITE=/tmp/emulinalg-site
ROOT=$PWD
THREADS=$(( $(nproc) < 16 ? $(nproc) : 16 ))
STEPS=${STEPS:-build plans demo tests}
failed=0
# shellcheck source=docs/benchmarks/tools/step.sh
source docs/benchmarks/tools/step.sh

build() {
    [ -d "$SITE/emulinalg" ] && { echo "reusing $SITE"; return 0; }
    python3 -m pip install --no-build-isolation --no-deps --target "$SITE" . \
        -C cmake.define.EMULINALG_CUDA=OFF -C build-dir=/tmp/emulinalg-build
}
plans() {
    (cd /tmp && OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS python3 \
        "$ROOT/docs/benchmarks/tools/amx_default_plans.py" --sizes "${PLAN_SIZES:-2048,4096,8192}" \
        --dtype "${PLAN_DTYPES:-float64,float32,complex128,complex64}" \
        --out "$OUT/default_plans.jsonl")
}
demo() { (cd /tmp && python3 -m emulinalg demo); }
tests() {  # one pytest per test file, WORKERS at a time (pytest-xdist cannot: object-
    # parametrized test ids differ between its workers); a summary line per file
    local f i=0 rc=0
    for f in "$ROOT"/tests/*/test_*.py "$ROOT"/tests/*/*/test_*.py; do
        (cd /tmp && OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=1 python3 -m pytest --run-slow -q \
            -p no:cacheprovider -m "not gpu and not cuda" "$f" >"$OUT/t_$(basename "$f" .py).txt" \
            2>&1) &
        i=$((i + 1))
        [ $((i % ${WORKERS:-12})) -eq 0 ] && wait
    done
    wait
    for f in "$OUT"/t_*.txt; do
        echo "$(basename "$f" .txt): $(tail -n 1 "$f")"
        grep -q -E "(failed|error)" <(tail -n 1 "$f") && rc=1
    done
    grep -h -E "^(FAILED|ERROR)" "$OUT"/t_*.txt
    cat "$OUT"/t_*.txt >"$OUT/all_tests.log" && rm -f "$OUT"/t_*.txt
    return $rc
}
bench() {  # bench DTYPE METHODS
    OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS \
        python3 -m emulinalg bench --backend amx --sizes "${BENCH_SIZES:-2048,4096,8192}" \
        --shape square --dtype "$1" --precision "$2" --phi 1 --repeat "${BENCH_REPEAT:-3}" \
        --warmup 1 --case-seconds 20 --ref-rows 4 --ref-cols 64 --torch --quiet \
        --out "$OUT/levels_$1.jsonl" --append
}
stages() {  # the residue panels and the CRT alone, explicit AVX-512 and portable loops
    OMP_NUM_THREADS=$THREADS python3 "$ROOT/docs/benchmarks/tools/host_stages.py" \
        --sizes "${STAGE_SIZES:-4096,8192}" --cases float64:16,float32:8,complex128:16 \
        --repeat 3 --build "${BUILD_LABEL:-}" --out "$OUT/host_stages.jsonl"
}
export OUT SITE ROOT THREADS
export -f build plans demo tests bench stages
: >"$OUT/summary.txt"
for s in $STEPS; do
    case $s in
    build) step build 300 build || { echo "build failed"; exit 1; } ;;
    plans) step plans 120 plans ;;
    demo) step demo 150 demo ;;
    tests) step tests "${TEST_S:-330}" tests ;;
    bench) step bench-f64 "${BENCH_S:-300}" bench float64 "${BENCH_F64:-float64,BF16xN(6,6)}"
           step bench-f32 "${BENCH_S:-300}" bench float32 "${BENCH_F32:-float32,BF16x3()}" ;;
    stages) step stages "${STAGES_S:-240}" stages ;;
    complex) step bench-c128 "${BENCH_S:-300}" bench complex128 float64
             step bench-c64 "${BENCH_S:-300}" bench complex64 float32 ;;
    esac
    [ "$s" = build ] && export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
done
echo "== summary"
cat "$OUT/summary.txt"
exit "$failed"
