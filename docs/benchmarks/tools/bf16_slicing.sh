#!/usr/bin/env bash
# Old vs new BF16 slicing (issue #9: bf16_pack, the split of A and B into BF16 tile panels) on
# the AMX host, beside numpy's and torch's DGEMM in the same run. Builds two source trees,
# OLD_SRC into /tmp/amxsite-old and NEW_SRC (default: this repository) into /tmp/amxsite, runs
# the new build's BF16 tests (real tiles included), then alternates old, new, old, new (ROUNDS
# rounds, so that the host's drift hits both alike), at each size of BENCH_SIZES:
#   - bf16_pack alone, 6 slices 'fixed' (BF16xN), median of 5 calls after one more, each call's
#     panels released before the next (what a repeated product does);
#   - python -m emulinalg bench --backend amx --precision "BF16xN(6,6)" --torch: the median time,
#     the stage times (slicing, products, reconstruction, other) of one more call, numpy's
#     DGEMM (the "native" record) and torch's (torch_seconds) on the same inputs.
# OLD_SRC empty or unset: the new build alone. Run from the repository root after
# `source .device/setup.sh`, e.g. with the new tree carried in .amxnew:
#     OLD_SRC=$PWD NEW_SRC=$PWD/.amxnew bash .amxnew/docs/benchmarks/tools/bf16_slicing.sh
# Writes 8 files under $OUT: build-old.log, build-new.log, tests.log, pack.log, bench.log,
# bench_old.jsonl, bench_new.jsonl, summary.txt (the table). Knobs: BENCH_SIZES (default 8192),
# ROUNDS (default 2), BENCH_REPEAT (default 3), SKIP_TESTS=1.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../../.." || exit 1
ROOT=$PWD
OUT=${OUT:-/tmp/bf16-slicing-out}
mkdir -p "$OUT"
NEW_SRC=$(cd "${NEW_SRC:-$PWD}" && pwd)
OLD_SRC=${OLD_SRC:-}  # empty: the new build alone
SIZES=${BENCH_SIZES:-8192}
T=$(($(nproc) < 16 ? $(nproc) : 16))
export OMP_NUM_THREADS=$T OPENBLAS_NUM_THREADS=$T MKL_NUM_THREADS=$T CMAKE_BUILD_PARALLEL_LEVEL=$T

build() { # build SRC SITE LOG
    rm -rf "$2" "$2-build"
    python3 -m pip install --no-build-isolation --no-deps --target "$2" "$1" \
        -C cmake.define.EMULINALG_CUDA=OFF -C build-dir="$2-build" >"$3" 2>&1
}
pack() { # pack SITE LABEL N
    (cd /tmp && PYTHONPATH="$1${PYTHONPATH:+:$PYTHONPATH}" \
        python3 "$ROOT/docs/benchmarks/tools/bf16_pack_time.py" "$2" "$3") 2>&1 | tee -a "$OUT/pack.log"
}
bench() { # bench SITE LABEL
    (cd /tmp && PYTHONPATH="$1${PYTHONPATH:+:$PYTHONPATH}" python3 -m emulinalg bench \
        --backend amx --sizes "$SIZES" --shape square --dtype float64 --precision "BF16xN(6,6)" \
        --phi 1 --repeat "${BENCH_REPEAT:-3}" --warmup 1 --case-seconds 60 --ref-rows 4 \
        --ref-cols 64 --torch --quiet --out "$OUT/bench_$2.jsonl" --append) >>"$OUT/bench.log" 2>&1
}

: >"$OUT/pack.log"
: >"$OUT/bench.log"
rm -f "$OUT"/bench_old.jsonl "$OUT"/bench_new.jsonl
if [ -n "$OLD_SRC" ]; then
    build "$OLD_SRC" /tmp/amxsite-old "$OUT/build-old.log" || { echo "old build failed"; exit 1; }
fi
build "$NEW_SRC" /tmp/amxsite "$OUT/build-new.log" || { echo "new build failed"; exit 1; }
if [ -z "${SKIP_TESTS:-}" ]; then
    (cd /tmp && PYTHONPATH="/tmp/amxsite${PYTHONPATH:+:$PYTHONPATH}" timeout 300 python3 -m pytest \
        -q -p no:cacheprovider --run-slow -rs "$NEW_SRC/tests/algorithm/test_bf16.py") \
        >"$OUT/tests.log" 2>&1
    echo "tests (new build, tests/algorithm/test_bf16.py): rc=$?, $(tail -n 1 "$OUT/tests.log")"
fi
for round in $(seq "${ROUNDS:-2}"); do
    for v in ${OLD_SRC:+old} new; do
        site=/tmp/amxsite
        [ "$v" = old ] && site=/tmp/amxsite-old
        for n in ${SIZES//,/ }; do pack "$site" "$v" "$n"; done
        bench "$site" "$v" || echo "bench $v round $round failed: see bench.log"
    done
done
python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import json, sys
out = sys.argv[1]
print("code N     method          seconds  numpy   torch   x torch  slicing  products  other")
for label in ("old", "new"):
    try:
        recs = [json.loads(x) for x in open(f"{out}/bench_{label}.jsonl")]
    except OSError:
        continue
    for r in recs:
        if r.get("method") == "native":
            continue
        st, ts = r.get("stages", {}), r.get("torch_seconds") or float("nan")
        print(f"{label:4} {r['n']!s:5} {r['method'][:14]:14} {r['seconds']:7.3f} "
              f"{r.get('native_seconds') or float('nan'):7.3f} {ts:7.3f} {ts / r['seconds']:7.2f}  "
              f"{st.get('slicing', 0):7.3f}  {st.get('products', 0):7.3f}  "
              f"{st.get('other', 0) + st.get('reconstruction', 0):6.3f}")
PY
grep -h "^pack" "$OUT/pack.log" | tee -a "$OUT/summary.txt"
