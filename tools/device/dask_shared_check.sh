#!/usr/bin/env bash
# The dask shared graph on cupy chunks against the double-double graph and dask's native product
# on one GPU (issue #27: whether cupy chunks can default to the shared graph, whose residues,
# block products and CRT run in backends/cupy/chunks.py). bash, repo root, after
# `source .device/setup.sh`, with $OUT set; about 6-8 minutes on a fresh machine.
#     OUT=$OUT bash tools/device/dask_shared_check.sh
t0=$SECONDS
source tools/device/build_fused.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/gpu.txt"
# the shared graph's cupy tests now take the chunk steps (bits against the in-core product)
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider \
    tests/backends/dask/test_dask_in_core_bits.py tests/backends/gpu/test_gpu_dask_cuda.py \
    2>&1 | tail -15 | tee "$OUT/tests.log"
echo "tests done $((SECONDS - t0)) s"
# the workers' compute time by task prefix: dd, shared, native
timeout 150 python3 docs/benchmarks/tools/dask_task_times.py --gpus --shape 16384,16384,16384 \
    --chunks 4096,16384,4096 --out "$OUT/dask_tasks.jsonl" 2>&1 | tail -45 | tee "$OUT/dask_tasks.log"
echo "task times done $((SECONDS - t0)) s"
# the multi-GPU demo on one GPU with the shared graph (the sixteenth session's dd: 1.444 s
# against dask's native 1.364 s at 32768)
EMULINALG_DASK_MODE=shared timeout 120 python3 -m emulinalg.examples.multi_gpu --gpus 1 \
    --repeat 3 --out "$OUT/dask_gpu1_shared.jsonl" 2>&1 | tail -20 | tee "$OUT/mgpu_shared.log"
echo "all done $((SECONDS - t0)) s"
