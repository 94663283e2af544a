#!/usr/bin/env bash
# On a machine with two GPUs (issue #5): a dask scheduler and one worker process per GPU
# (CUDA_VISIBLE_DEVICES pins each), then the out-of-core example on them with cupy chunks.
# Run from the repository root after `source .device/setup.sh` and an install into /tmp/emul;
# logs and records under $OUT. Chunks move between the workers over TCP (host copies).
set -o pipefail
OUT=${OUT:-/tmp/dask-2gpu-out}
mkdir -p "$OUT"
export PYTHONPATH=/tmp/emul:$PYTHONPATH
cd /tmp
python3 -m distributed.cli.dask_scheduler --host 127.0.0.1 --port 8786 --no-dashboard \
    >"$OUT/scheduler.log" 2>&1 &
sleep 3
for g in 0 1; do
    CUDA_VISIBLE_DEVICES=$g python3 -m distributed.cli.dask_worker tcp://127.0.0.1:8786 \
        --nthreads 1 --memory-limit 0 --no-dashboard --name "gpu$g" >"$OUT/worker$g.log" 2>&1 &
done
sleep 10
timeout "${DASK2_S:-200}" python3 -m emulinalg.examples.out_of_core --cupy \
    --scheduler tcp://127.0.0.1:8786 --shape ${SHAPE:-32768,32768,32768} \
    --chunks ${CHUNKS:-8192,32768,8192} --persist --warmup 1 --repeat 2 --rows 16 --cols 128 \
    --out "$OUT/dask_h200x2.jsonl" 2>&1 | tee "$OUT/dask_2gpu.log"
grep -h -i -E "error|warn" "$OUT"/worker*.log | head -20
kill %1 %2 %3 2>/dev/null
