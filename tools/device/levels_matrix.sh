#!/usr/bin/env bash
# Issue #24's records matrix on the GPU machine (bash, repo root, after `source .device/setup.sh`,
# $OUT set): the fused build and GEMMul8's in parallel, then gemmul8_levels.py (the level under
# "eager" and the default strategy, GEMMul8 at the level's count and one below, cuBLAS before
# and after, the zero-overhead bound) over one group of rows, within a time budget in seconds.
#
#   bash tools/device/levels_matrix.sh GROUP [SECONDS]
#
# Groups (one device call each): 16384 (real dtypes at N = 16384, φ 0.5 1 2 4), 8192 (all four
# dtypes at 8192), 4096 (all four at 4096), complex (complex128 and complex64 at 16384, φ 1).
set -u
group=$1
budget=${2:-520}
t0=$SECONDS
rows=()
case $group in
  16384) for d in float64 float32; do for p in 0.5 1 2 4; do rows+=("$d:$p:16384"); done; done ;;
  8192 | 4096) for d in float64 float32 complex128 complex64; do for p in 0.5 1 2 4; do rows+=("$d:$p:$group"); done; done ;;
  complex) rows=("complex128:1:16384" "complex64:1:16384") ;;
  *) echo "unknown group $group"; exit 2 ;;
esac
source tools/device/build_with_gemmul8.sh
spec=$(IFS=,; echo "${rows[*]}")
left=$((budget - SECONDS + t0))
PYTHONPATH=tools/device:.device/peers:$PYTHONPATH timeout "$left" python3 tools/device/gemmul8_levels.py \
    --default --out "$OUT/levels_$group.jsonl" --rows "$spec" > "$OUT/levels_$group.log" 2>&1
echo "levels $group rc=$? $((SECONDS - t0)) s"
