#!/usr/bin/env bash
# Build emulinalg with its AMX kernels on the AMX machine, check them, and measure them.
#
# Run from the repository root, after `source .device/setup.sh`:
#     bash tools/device/amx_check.sh
# Everything is logged under "$OUT" (default /tmp/amx-check-out): env.log, build.log (+ the
# per-file compile times of ninja_log.txt), objdump.log, info.log, tests.log,
# amx_bench.jsonl (+ bench-t1.log, bench-tN.log) and summary.txt (rc and seconds per step).
# Takes about 5-7 minutes; each step has its own time limit.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
OUT=${OUT:-/tmp/amx-check-out}
mkdir -p "$OUT"
SITE=/tmp/emulinalg-site    # the package installed by this script (--target: no system install)
BUILD=/tmp/emulinalg-build  # kept, so objdump can name the object file of gemm_amx.cpp
THREADS=$(( $(nproc) < 16 ? $(nproc) : 16 ))
failed=0

# step NAME LIMIT_S CMD...: run CMD (a command or one of the functions below, exported) with a
# time limit, tee its output to $OUT/NAME.log.
step() {
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    echo "== $name"
    timeout "$limit" bash -c '"$@"' _ "$@" 2>&1 | tee "$OUT/$name.log"
    local rc=${PIPESTATUS[0]}
    echo "$name: rc=$rc, $((SECONDS - t0)) s" | tee -a "$OUT/summary.txt"
    [ "$rc" -eq 0 ] || failed=1
    return "$rc"
}

env_info() {
    uname -a
    echo "nproc: $(nproc), benchmark threads: $THREADS"
    lscpu | grep -E '^(Model name|Socket|Core|Thread|CPU\(s\)|L2|L3|NUMA node\(s\))'
    echo "AMX flags: $(grep -o -w -E 'amx_[a-z0-9]+' /proc/cpuinfo | sort -u | tr '\n' ' ')"
    g++ --version | head -1
    cmake --version | head -1
    python3 --version
    python3 -c 'import numpy, pybind11; print("numpy", numpy.__version__, "pybind11", pybind11.__version__)'
    python3 -c 'import torch; print("torch", torch.__version__, torch.backends.mkldnn.is_available())' || true
    git log -1 --oneline 2>/dev/null || true
}

build() {
    rm -rf "$SITE" "$BUILD"
    time python3 -m pip install --no-build-isolation --no-deps --target "$SITE" -v . \
        -C build-dir="$BUILD" -C cmake.define.EMULINALG_CUDA=OFF
}

objdump_evidence() {
    local so obj
    so=$(ls "$SITE"/emulinalg/_amx*.so)
    obj=$(find "$BUILD" -name 'gemm_amx.cpp.o' | head -1)
    echo "tile instructions in $so:"
    objdump -d "$so" | grep -o -w -E 'ldtilecfg|tilerelease|tilezero|tileloadd|tilestored|tdpbssd|tdpbf16ps' | sort | uniq -c
    echo "tile instructions per object file (only gemm_amx.cpp.o may have any):"
    for o in $(find "$BUILD" -name '*.cpp.o'); do
        echo "  $(basename "$o"): $(objdump -d "$o" | grep -c -w -E 'tileloadd|tdpbssd|tdpbf16ps')"
    done
    echo "the register blocks (tile loads, dot products, stores) in $obj:"
    objdump -d --no-show-raw-insn "$obj" | grep -E 'tileloadd|tdpbssd|tdpbf16ps|tilestored|tilezero' | head -40
}

info() {
    python3 -m emulinalg info
    python3 -c 'from emulinalg import _amx; print("_amx:", _amx.__file__); print("available:", _amx.available(), repr(_amx.reason())); print("features:", _amx.features())'
}

bench() {
    local t=$1
    OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t MKL_NUM_THREADS=$t \
        python3 tools/amx_bench.py --threads "$t" --sizes 1024,2048,4096,8192 \
        --budget 2 --max-run 8 --out "$OUT/amx_bench.jsonl"
}

export OUT SITE BUILD THREADS
export -f env_info build objdump_evidence info bench
: >"$OUT/summary.txt"
step env 60 env_info
step build 300 build || { echo "build failed; see $OUT/build.log"; exit 1; }
cp "$BUILD/.ninja_log" "$OUT/ninja_log.txt" 2>/dev/null || true
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
step objdump 60 objdump_evidence
step info 60 info
step tests 240 python3 -m pytest -q tests/test_amx.py -rs -p no:cacheprovider
step bench-t1 150 bench 1
step "bench-t$THREADS" 100 bench "$THREADS"
echo "== summary"
cat "$OUT/summary.txt"
exit "$failed"
