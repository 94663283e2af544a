#!/usr/bin/env bash
# Dask layer on the GPU (issue #5) and, with AMX_REST=1, the graded suite's AMX cases not yet in
# docs/benchmarks/xeon-amx-16c/graded_suite.jsonl (issue #6). Run from the repository root after
# `source .device/setup.sh`; logs and records under $OUT.
#   1. N = 32768 float64, cupy chunks 8192 x 32768 (K whole), operands held on the GPU: the graph
#      beside one in-core emulated call and cuBLAS on the same matrices (records: dask_h200.jsonl)
#   2. N = 65536 float64, chunks 8192 x 16384, operands generated chunk by chunk on the GPU (64 GB
#      of operands; the in-core emulation of the whole would need ~4x that): out of core
#   3. N = 32768 with K in 4 blocks (double-double sums of the K-block partials)
set -o pipefail
OUT=${OUT:-/tmp/dask-gpu-out}
mkdir -p "$OUT"
t0=$SECONDS
REPO=$(pwd)
timeout 300 python3 -m pip install -v --no-build-isolation --no-deps --target /tmp/emul . \
    ${BUILD_ARGS:--C cmake.define.EMULINALG_CUDA_GEMM=ON} >"$OUT/build.log" 2>&1
echo "build rc=$? $((SECONDS - t0)) s"
export PYTHONPATH=/tmp/emul:$PYTHONPATH
cd /tmp  # the installed package (with its extensions), not the source tree
OOC="python3 -m emulinalg.examples.out_of_core --cupy --threads 1 --out $OUT/dask_h200.jsonl"
timeout 240 $OOC --shape 32768,32768,32768 --chunks 8192,32768,8192 --native whole --persist \
    --incore --warmup 1 --repeat 3 --rows 16 --cols 128 2>&1 | tee "$OUT/dask_32768.log"
echo "32768 done $((SECONDS - t0)) s"
timeout 200 $OOC --shape 65536,65536,65536 --chunks 8192,16384,8192 --rows 8 --cols 64 \
    2>&1 | tee "$OUT/dask_65536.log"
echo "65536 done $((SECONDS - t0)) s"
timeout 120 $OOC --shape 32768,32768,32768 --chunks 8192,8192,8192 --persist --warmup 1 --repeat 2 \
    --rows 16 --cols 128 2>&1 | tee "$OUT/dask_32768_kblocks.log"
echo "32768 K-blocks done $((SECONDS - t0)) s"
if [ -n "${AMX_REST:-}" ]; then
    cases=$(python3 - "$REPO" <<'PY'
import json, sys
from emulinalg.harness import catalogue
done = {json.loads(l)["case"] for l in open(sys.argv[1] + "/docs/benchmarks/xeon-amx-16c/graded_suite.jsonl")}
print(" ".join(f"--case {c.name}" for c in catalogue.cases() if c.name not in done))
PY
)
    timeout "${AMX_S:-280}" python3 -m emulinalg grade --backend amx --out "$OUT/amx_rest.jsonl" \
        $cases 2>&1 | tail -n 40 | tee "$OUT/amx_rest.log"
fi
echo "total $((SECONDS - t0)) s"
