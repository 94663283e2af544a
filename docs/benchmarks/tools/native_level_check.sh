#!/usr/bin/env bash
# Issue #22 on the GPU + AMX machine, from the repo root after `source .device/setup.sh`:
# build with the fused kernels, the GPU/AMX tests (PARTS=tests), the levels' records at the
# issue's sizes with cuBLAS beside them (PARTS=bench), the default plans timed beside cuBLAS
# (PARTS=plans), where a level's time goes
# (PARTS=overhead), the graded suite (PARTS=grade-cupy, grade-amx). Logs and records under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/native-level-out}
PARTS=${PARTS:-tests,amx-tests,bench}
mkdir -p "$OUT"
ROOT=$PWD
t0=$SECONDS
has() { [[ ",$PARTS," == *",$1,"* ]]; }
source "$ROOT/tools/device/build_fused.sh"
if has tests; then
    (cd /tmp && timeout "${TEST_S:-330}" python3 -m pytest -q -p no:cacheprovider \
        "$ROOT/tests/backends/gpu" -m gpu) >"$OUT/tests_gpu.log" 2>&1
    echo "gpu tests rc=$? $((SECONDS - t0)) s: $(tail -n 1 "$OUT/tests_gpu.log")"
fi
if has dask-gpu; then
    (cd /tmp && timeout "${DASK_TEST_S:-120}" python3 -m pytest -q -p no:cacheprovider \
        "$ROOT/tests/backends/dask" -m gpu) >"$OUT/tests_dask_gpu.log" 2>&1
    echo "dask gpu tests rc=$? $((SECONDS - t0)) s: $(tail -n 1 "$OUT/tests_dask_gpu.log")"
fi
if has amx-tests; then
    (cd /tmp && timeout "${AMX_TEST_S:-150}" python3 -m pytest --run-slow -q -p no:cacheprovider \
        "$ROOT/tests/backends/amx") >"$OUT/tests_amx.log" 2>&1
    echo "amx tests rc=$? $((SECONDS - t0)) s: $(tail -n 1 "$OUT/tests_amx.log")"
fi
bench() {  # name, then bench options
    local name=$1
    shift
    (cd /tmp && timeout "${BENCH_S:-120}" python3 -m emulinalg bench --backend cupy --shape square \
        --repeat 5 --warmup 1 --case-seconds 3 --ref-rows 16 --ref-cols 256 --ref-workers 8 \
        --seed 0 --quiet --out "$OUT/records.jsonl" --append "$@") >"$OUT/bench_$name.log" 2>&1
    echo "bench $name rc=$? $((SECONDS - t0)) s"
}
if has plans; then
    (cd /tmp && timeout 200 python3 "$ROOT/docs/benchmarks/tools/default_plans.py" \
        --out "$OUT/default_plans.jsonl") >"$OUT/default_plans.log" 2>&1
    echo "default plans rc=$? $((SECONDS - t0)) s"
fi
if has bench; then
    bench f64 --sizes 16384 --dtype float64 --phi 0.5,1,2 --precision float64 --strategy eager
    bench f32 --sizes 16384 --dtype float32 --phi 0.5,1 --precision float32 --strategy eager
    bench c128 --sizes 8192 --dtype complex128 --phi 1 --precision float64 --strategy eager
fi
if has overhead; then
    (cd /tmp && timeout 240 python3 "$ROOT/docs/benchmarks/tools/level_overhead.py" \
        --out "$OUT/level_overhead.jsonl" ${PROFILE:+--profile}) >"$OUT/level_overhead.log" 2>&1
    echo "level overhead rc=$? $((SECONDS - t0)) s"
    tail -n 4 "$OUT/level_overhead.log"
fi
if has grade-cupy; then
    (cd /tmp && timeout "${GRADE_S:-420}" python3 -m emulinalg grade --backend cupy \
        --out "$OUT/graded_suite_cupy.jsonl" --table "$OUT/graded_suite_cupy.md" -q) \
        >"$OUT/grade_cupy.log" 2>&1
    echo "grade cupy rc=$? $((SECONDS - t0)) s: $(tail -n 2 "$OUT/grade_cupy.log" | tr '\n' ' ')"
fi
if has grade-amx; then
    (cd /tmp && EMULINALG_AMX=1 timeout "${GRADE_S:-420}" python3 -m emulinalg grade \
        --backend amx --out "$OUT/graded_suite_amx.jsonl" --table "$OUT/graded_suite_amx.md" -q) \
        >"$OUT/grade_amx.log" 2>&1
    echo "grade amx rc=$? $((SECONDS - t0)) s: $(tail -n 2 "$OUT/grade_amx.log" | tr '\n' ' ')"
fi
echo "total $((SECONDS - t0)) s"
