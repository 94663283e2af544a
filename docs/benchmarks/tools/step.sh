# Sourced by the device scripts: step NAME LIMIT_S CMD... runs CMD (a command or an exported
# function) with a time limit, tees its output to $OUT/NAME.log, appends "NAME: rc=.., .. s" to
# $OUT/summary.txt and sets failed=1 when it fails.
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
