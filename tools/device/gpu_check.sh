#!/usr/bin/env bash
# On the GPU machine, from the repo root (the device tool's working copy):
#   source .device/setup.sh; bash tools/device/gpu_check.sh
# Builds and installs emulinalg, runs the gpu tests and a quick timing; logs go to $OUT.
set -uo pipefail
out="${OUT:-/tmp/out}"
mkdir -p "$out"
start=$SECONDS
python3 -m pip install --no-build-isolation --no-deps --target /tmp/emul . >"$out/build.log" 2>&1
echo "build rc=$? in $((SECONDS - start)) s"
tail -n 3 "$out/build.log"
export PYTHONPATH="/tmp/emul:${PYTHONPATH:-}"
python3 -m emulinalg info 2>&1 | tee "$out/info.log"
python3 -m pytest -q tests/test_gpu.py -rs -x -p no:cacheprovider 2>&1 | tee "$out/gpu_tests.log"
python3 tools/device/gpu_smoke.py 2>&1 | tee "$out/gpu_smoke.log"
if [ -d .gpuref ]; then
  python3 tools/device/gpu_records.py "$out/h200_records.jsonl" 2>&1 | tee "$out/gpu_records.log"
fi
