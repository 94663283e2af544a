#!/usr/bin/env bash
# Build emulinalg with its AMX kernels on the AMX machine, check them, and measure them.
#
# Run from the repository root, after `source .device/setup.sh`:
#     bash docs/benchmarks/tools/amx_check.sh
# Everything is logged under "$OUT" (default /tmp/amx-check-out): env.log, build.log (+ the
# per-file compile times of ninja_log.txt), objdump.log, peak.log + amx_peak.jsonl (the register
# ceiling, docs/benchmarks/tools/amx_peak.cpp), info.log, tests.log, sweep.log + amx_sweep.jsonl (the
# blocking sweep, docs/benchmarks/tools/amx_gemm_sweep.py; its winners once more with threads bound to cores:
# sweep-bind.log + amx_sweep_bind.jsonl), amx_bench.jsonl (+ bench-t1.log, bench-tN.log: the standard benchmark with
# the default blocking, torch and numpy beside) and summary.txt (rc and seconds per step).
# Takes about 6 minutes (at most ~10 if every step runs into its time limit); AMX_SWEEP_BUDGET
# (seconds, default 120) sets the sweep's share.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../../.." || exit 1
OUT=${OUT:-/tmp/amx-check-out}
mkdir -p "$OUT"
SITE=/tmp/emulinalg-site    # the package installed by this script (--target: no system install)
BUILD=/tmp/emulinalg-build  # kept, so objdump can name the object file of gemm_amx.cpp
THREADS=$(( $(nproc) < 16 ? $(nproc) : 16 ))
AMX_SWEEP_BUDGET=${AMX_SWEEP_BUDGET:-120}
failed=0

# shellcheck source=docs/benchmarks/tools/step.sh
source docs/benchmarks/tools/step.sh

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
    objdump -d "$so" | grep -o -w -E 'ldtilecfg|tilerelease|tilezero|tileloadd|tileloaddt1|tilestored|tdpbssd|tdpbf16ps' | sort | uniq -c
    echo "tile instructions per object file (only gemm_amx.cpp.o may have any):"
    for o in $(find "$BUILD" -name '*.cpp.o'); do
        echo "  $(basename "$o"): $(objdump -d "$o" | grep -c -w -E 'tileloadd|tileloaddt1|tdpbssd|tdpbf16ps')"
    done
    echo "the register blocks (tile loads, dot products, stores) in $obj:"
    objdump -d --no-show-raw-insn "$obj" | grep -E 'tileloadd|tdpbssd|tdpbf16ps|tilestored|tilezero' | head -40
}

# The register ceiling: back-to-back tile dot products on resident tiles, 1 and $THREADS threads.
peak() {
    set -o pipefail
    g++ -O2 -fopenmp -mamx-tile -mamx-int8 -mamx-bf16 docs/benchmarks/tools/amx_peak.cpp -o /tmp/amx_peak &&
        /tmp/amx_peak 1 "$THREADS" | tee "$OUT/amx_peak.jsonl"
}

info() {
    python3 -m emulinalg info
    python3 -c 'from emulinalg import _amx; print("_amx:", _amx.__file__); print("available:", _amx.available(), repr(_amx.reason())); print("features:", _amx.features())'
}

# Greedy descent over the blocking knobs at (1 thread, N = 4096) and ($THREADS, 8192), then the
# defaults and both winners for INT8 and BF16 at N = 4096/8192 on 1 and $THREADS threads.
sweep() {
    OMP_NUM_THREADS=$THREADS python3 docs/benchmarks/tools/amx_gemm_sweep.py \
        --descent "1:4096,$THREADS:8192" --threads "1,$THREADS" --sizes 4096,8192 \
        --peak "$OUT/amx_peak.jsonl" --budget "$AMX_SWEEP_BUDGET" --out "$OUT/amx_sweep.jsonl"
}

# The winners (and the defaults) again with OpenMP threads bound to cores.
sweep_bind() {
    OMP_NUM_THREADS=$THREADS OMP_PROC_BIND=close OMP_PLACES=cores python3 docs/benchmarks/tools/amx_gemm_sweep.py \
        --descent "" --threads "$THREADS" --sizes 8192 --ops s8s8s32,bf16bf16f32 \
        --best-from "$OUT/amx_sweep.jsonl" --peak "$OUT/amx_peak.jsonl" --budget 40 \
        --out "$OUT/amx_sweep_bind.jsonl"
}

bench() {
    local t=$1 maxrun=$2
    OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t MKL_NUM_THREADS=$t \
        python3 docs/benchmarks/tools/amx_bench.py --threads "$t" --sizes 2048,4096,8192 \
        --budget 1 --max-run "$maxrun" --peak "$OUT/amx_peak.jsonl" --out "$OUT/amx_bench.jsonl"
}

export OUT SITE BUILD THREADS AMX_SWEEP_BUDGET
export -f env_info build objdump_evidence peak info sweep sweep_bind bench
: >"$OUT/summary.txt"
step env 60 env_info
step build 300 build || { echo "build failed; see $OUT/build.log"; exit 1; }
cp "$BUILD/.ninja_log" "$OUT/ninja_log.txt" 2>/dev/null || true
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
step objdump 60 objdump_evidence
step peak 60 peak
step info 60 info
step tests 150 python3 -m pytest -q tests/backends/amx --run-slow -rs -p no:cacheprovider \
    --durations=8
step sweep $((AMX_SWEEP_BUDGET + 40)) sweep
step sweep-bind 70 sweep_bind
step bench-t1 90 bench 1 5
step "bench-t$THREADS" 50 bench "$THREADS" 4
echo "== summary"
cat "$OUT/summary.txt"
exit "$failed"
