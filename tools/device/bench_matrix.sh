#!/usr/bin/env bash
# Issue #24's records from the project's benchmark command on the GPU machine (bash, repo root,
# after `source .device/setup.sh`, $OUT set): the fused build and GEMMul8's in parallel, then
# `python -m emulinalg bench --backend cupy` per dtype of one group: the dtype's level under
# "eager" with GEMMul8 beside it (--gemmul8: the level's count and the fewest matching native's
# bits), cuBLAS before and after each group, the zero-overhead bound; then the same level under
# the default strategy ("performant", which may take cuBLAS), appended. Within a time budget.
#
#   bash tools/device/bench_matrix.sh GROUP [SECONDS]
#
# Groups (one device call each): 16384 (float64 and float32 at N = 16384, φ 0.5 1 2 4), 8192 and
# 4096 (all four dtypes), complex (complex128 and complex64 at 16384, φ 1).
set -u
group=$1
budget=${2:-520}
t0=$SECONDS
phis=0.5,1,2,4
case $group in
  16384) dtypes="float64 float32"; n=16384 ;;
  8192 | 4096) dtypes="float64 float32 complex128 complex64"; n=$group ;;
  complex) dtypes="complex128 complex64"; n=16384; phis=1 ;;
  *) echo "unknown group $group"; exit 2 ;;
esac
source tools/device/build_with_gemmul8.sh
out="$OUT/bench_$group.jsonl"
for d in $dtypes; do
  level=float64; case $d in float32 | complex64) level=float32 ;; esac
  for strategy in eager performant; do
    left=$((budget - SECONDS + t0))
    [ "$left" -gt 30 ] || { echo "budget spent before $d $strategy"; break 2; }
    g8=(); [ "$strategy" = eager ] && g8=(--gemmul8 /tmp/g8/libg8drv.so)
    PYTHONPATH=.device/peers:$PYTHONPATH timeout "$left" python3 -m emulinalg bench \
        --backend cupy --shape square --sizes "$n" --dtype "$d" --phi "$phis" \
        --precision "$level" --strategy "$strategy" --repeat 5 --ref-rows 16 --ref-cols 256 \
        "${g8[@]}" --out "$out" --append -q >> "$OUT/bench_$group.log" 2>&1
    echo "bench $d $strategy rc=$? $((SECONDS - t0)) s"
  done
done
