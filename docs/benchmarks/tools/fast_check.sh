#!/usr/bin/env bash
# GPU fast path (src_cuda/ kernels: residues, CRT, statistics hooks) + statistics overhead +
# AMX register ceiling, one call. Run from the repository root after `source .device/setup.sh`;
# logs under $OUT. SKIP_TESTS=1 skips tests/backends/gpu/test_gpu_*.py, SKIP_PERF=1 the
# timings; PYTEST_K selects tests (e.g. PYTEST_K=statistics), FAST_ARGS goes to gpu_fast.py.
set -o pipefail
OUT=${OUT:-/tmp/fast-check-out}
mkdir -p "$OUT"
t0=$SECONDS
# REUSE=1 keeps an install from an earlier call on a still-warm machine; BUILD_ARGS replaces
# the default build options (e.g. "-C cmake.define.EMULINALG_CUDA_GEMM=ON" for src_cuda/).
if [ -n "${REUSE:-}" ] && [ -d /tmp/emul/emulinalg ]; then
    echo "build: reusing /tmp/emul"
else
    timeout 300 python3 -m pip install -v --no-build-isolation --no-deps --target /tmp/emul . \
        ${BUILD_ARGS:--C cmake.define.EMULINALG_CUDA=OFF} >"$OUT/build.log" 2>&1
    echo "build rc=$? $((SECONDS - t0)) s"
    grep -E "emulinalg:|rror" "$OUT/build.log" | head -20
fi
export PYTHONPATH=/tmp/emul:$PYTHONPATH
if [ -n "${AMX_PEAK:-}" ] && g++ -O2 -fopenmp -mamx-tile -mamx-int8 -mamx-bf16 \
    docs/benchmarks/tools/amx_peak.cpp -o /tmp/amx_peak; then
    /tmp/amx_peak 1 2 4 8 16 | tee "$OUT/amx_peak.jsonl"
fi
if [ -z "${SKIP_TESTS:-}" ]; then
    timeout "${TEST_S:-300}" python3 -m pytest tests/backends/gpu/test_gpu_*.py -x -q -rs \
        -p no:cacheprovider ${PYTEST_K:+-k "$PYTEST_K"} 2>&1 | tee "$OUT/gpu_tests.log" | tail -n 25
    echo "tests $((SECONDS - t0)) s"
fi
if [ -z "${SKIP_PERF:-}" ]; then
    timeout 150 python3 docs/benchmarks/tools/gpu_fast.py ${FAST_ARGS:-} --out "$OUT/gpu_fast.jsonl" 2>&1 \
        | tee "$OUT/gpu_fast.log"
    timeout 120 python3 docs/benchmarks/tools/overhead.py --backend cupy -N 8192 --repeat 3 \
        --out "$OUT/overhead.jsonl" 2>&1 | tee "$OUT/overhead.log"
fi
echo "total $((SECONDS - t0)) s"
