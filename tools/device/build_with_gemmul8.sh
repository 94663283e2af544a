# Sourced by the device scripts that put GEMMul8 beside the levels (bash, repo root, $OUT and
# $t0 set): GEMMul8's library (.device/peers/build.sh, into /tmp/g8) built in the background
# while build_fused.sh installs the project, then both waited for; the peer's log in
# $OUT/g8build.log.
(bash .device/peers/build.sh > "$OUT/g8build.log" 2>&1; echo "g8 build rc=$? $((SECONDS - t0)) s" >> "$OUT/g8build.log") &
source tools/device/build_fused.sh
wait
tail -n 1 "$OUT/g8build.log"
