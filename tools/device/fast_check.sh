#!/usr/bin/env bash
# GPU fast path (backends/cuda kernels) + statistics overhead + AMX register ceiling, one call.
# Run from the repository root after `source .device/setup.sh`; logs under $OUT.
set -o pipefail
OUT=${OUT:-/tmp/fast-check-out}
mkdir -p "$OUT"
t0=$SECONDS
python3 -m pip install --no-build-isolation --no-deps --target /tmp/emul . \
    -C cmake.define.EMULINALG_CUDA=OFF >"$OUT/build.log" 2>&1
echo "build rc=$? $((SECONDS - t0)) s"
export PYTHONPATH=/tmp/emul:$PYTHONPATH
if g++ -O2 -fopenmp -mamx-tile -mamx-int8 -mamx-bf16 tools/device/amx_peak.cpp -o /tmp/amx_peak; then
    /tmp/amx_peak 1 2 4 8 16 | tee "$OUT/amx_peak.jsonl"
fi
timeout "${TEST_S:-300}" python3 -m pytest tests/test_gpu.py -x -q -rs -p no:cacheprovider \
    ${PYTEST_K:+-k "$PYTEST_K"} 2>&1 | tee "$OUT/gpu_tests.log" | tail -n 25
echo "tests $((SECONDS - t0)) s"
timeout 150 python3 tools/device/gpu_fast.py ${FAST_ARGS:-} --out "$OUT/gpu_fast.jsonl" 2>&1 \
    | tee "$OUT/gpu_fast.log"
timeout 120 python3 tools/overhead.py --backend cupy -N 8192 --repeat 3 \
    --out "$OUT/overhead.jsonl" 2>&1 | tee "$OUT/overhead.log"
echo "total $((SECONDS - t0)) s"
