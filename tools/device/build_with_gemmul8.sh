# Sourced by the device scripts that put GEMMul8 beside the levels (bash, repo root, $OUT and
# $t0 set): GEMMul8's library (.device/peers/build.sh, into /tmp/g8) built in the background
# while build_fused.sh installs the project, then both waited for; the peer's log in
# $OUT/g8build.log. REUSE=1 keeps both builds of an earlier call in the same command.
if [ -n "${REUSE:-}" ] && [ -f /tmp/g8/libg8drv.so ]; then
    echo "g8 build: reusing /tmp/g8" > "$OUT/g8build.log"
else
    (bash .device/peers/build.sh > "$OUT/g8build.log" 2>&1; echo "g8 build rc=$? $((SECONDS - t0)) s" >> "$OUT/g8build.log") &
fi
source tools/device/build_fused.sh
wait
tail -n 1 "$OUT/g8build.log"
