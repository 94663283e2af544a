#!/usr/bin/env bash
# The graded suite on one backend in parallel workers, one per dtype (``grade --case``), merged
# in the suite's case order into one JSON-lines file and its markdown table. From the repo root
# after `source .device/setup.sh` and an install on PYTHONPATH; logs and results under $OUT.
#     BACKEND=amx THREADS=4 GRADE_S=480 bash tools/device/grade_split.sh
set -uo pipefail
OUT=${OUT:-/tmp/grade-split-out}
BACKEND=${BACKEND:-amx}
THREADS=${THREADS:-4}
mkdir -p "$OUT"
t0=$SECONDS
for dt in float64 float32 complex128 complex64; do
    (cd /tmp && EMULINALG_AMX=$([ "$BACKEND" = amx ] && echo 1 || echo 0) \
        OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS \
        timeout "${GRADE_S:-480}" python3 -m emulinalg grade --backend "$BACKEND" \
        ${QUICK:+--quick} --case="-$dt-" --out "$OUT/grade_${BACKEND}_$dt.jsonl" -q) >"$OUT/grade_${BACKEND}_$dt.log" 2>&1 &
done
wait
echo "workers done $((SECONDS - t0)) s"
python3 - "$OUT" "$BACKEND" "${QUICK:-}" <<'PY'
import json, pathlib, sys
from emulinalg.harness import catalogue, suite
out, backend = pathlib.Path(sys.argv[1]), sys.argv[2]
recs = {}
for f in sorted(out.glob(f"grade_{backend}_*.jsonl")):
    for line in f.read_text().splitlines():
        r = json.loads(line)
        recs[r["case"]] = r
order = [c.name for c in catalogue.cases(quick=bool(sys.argv[3]))]
merged = [recs[n] for n in order if n in recs]
(out / f"graded_suite_{backend}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in merged))
(out / f"graded_suite_{backend}.md").write_text(suite.markdown_table(merged))
print(f"{len(merged)} of {len(order)} cases;", suite.summary(merged))
missing = [n for n in order if n not in recs]
print("not run:", missing[:20], "..." if len(missing) > 20 else "")
PY
