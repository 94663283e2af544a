#!/usr/bin/env bash
# The statistics' cost on the GPU (issue #6), this tree against another source tree in the same
# run. From the repository root on the GPU machine, after `source .device/setup.sh`:
#     OLD=build/old_src STAGE=build bash docs/benchmarks/tools/stats_gpu.sh      (builds both)
#     STAGE=measure bash docs/benchmarks/tools/stats_gpu.sh                       (overhead, bench)
#     STAGE=overhead | breakdown | tests (TEST_K: a -k expression)
# Installs go to build/emul_new and build/emul_old (kept between calls on a warm machine).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.." || exit 1
OUT=${OUT:-/tmp/stats-out}
mkdir -p "$OUT"
ROOT=$PWD
failed=0
# shellcheck source=docs/benchmarks/tools/step.sh
source docs/benchmarks/tools/step.sh
install() {  # install SRC TARGET
    rm -rf "$2"
    (cd "$1" && CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation \
        --no-deps --target "$2" . -C cmake.define.EMULINALG_CUDA_GEMM=ON \
        -C build-dir="$2-build")
}
overhead() {  # overhead TARGET LABEL
    (cd /tmp && PYTHONPATH="$1:$PYTHONPATH" python3 "$ROOT/docs/benchmarks/tools/overhead.py" --backend cupy \
        -N 8192 --repeat 5 --phi "${PHI:-1}" --out "$OUT/overhead_$2.jsonl")
}
bench() {  # bench TARGET LABEL DTYPE
    (cd /tmp && PYTHONPATH="$1:$PYTHONPATH" python3 -m emulinalg bench --backend cupy \
        --shape square --sizes 8192 --dtype "$3" --phi 0.5,1,2 --repeat 5 --warmup 1 \
        --case-seconds 3 --ref-rows 8 --ref-cols 128 --strategy eager --seed 0 --quiet \
        --out "$OUT/bench_$2.jsonl" --append)
}
gputests() {
    (cd /tmp && PYTHONPATH="$ROOT/build/emul_new:$PYTHONPATH" python3 -m pytest -q -x \
        -p no:cacheprovider "$ROOT/tests/backends/gpu" -m gpu "$@")
}
export OUT ROOT PHI
export -f install overhead bench gputests
: >>"$OUT/summary.txt"
case "${STAGE:-all}" in
build)
    step build_new 400 install . "$ROOT/build/emul_new"
    [ -n "${OLD:-}" ] && step build_old 400 install "$OLD" "$ROOT/build/emul_old"
    ;;
measure)
    for i in 1 2; do
        step overhead_new_$i 200 overhead "$ROOT/build/emul_new" new
        [ -d build/emul_old ] && step overhead_old_$i 200 overhead "$ROOT/build/emul_old" old
    done
    for dt in float64 float32; do
        step bench_new_$dt 200 bench "$ROOT/build/emul_new" new $dt
        [ -d build/emul_old ] && step bench_old_$dt 200 bench "$ROOT/build/emul_old" old $dt
    done
    ;;
overhead)  # the statistics' share only (no bench)
    for i in 1 2; do
        step overhead_new_$i 200 overhead "$ROOT/build/emul_new" new
        [ -d build/emul_old ] && step overhead_old_$i 200 overhead "$ROOT/build/emul_old" old
    done
    ;;
breakdown)  # kernel by kernel, float64 and float32 operands
    for dt in ${BD_DTYPES:-float64}; do
        step breakdown_$dt 200 bash -c "cd /tmp && PYTHONPATH=$ROOT/build/emul_new:\$PYTHONPATH \
            python3 $ROOT/docs/benchmarks/tools/stats_breakdown.py -N 8192 --dtype $dt \
            | tee -a $OUT/breakdown.jsonl"
    done
    ;;
tests)
    step gpu_tests "${TEST_LIMIT:-500}" gputests ${TEST_K:+-k "$TEST_K"}
    ;;
esac
cat "$OUT/summary.txt"
exit "$failed"
