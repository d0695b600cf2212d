#!/usr/bin/env bash
# Command-line contracts: exit codes, one-line errors, the launcher's failure and timeout
# behaviour, nothing left behind, and no MPI in libnodecomm.
set -u
BIN=$1
LIB=$2
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

expect_exit() {  # expected-code description command...
  local want=$1 what=$2; shift 2
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" -eq "$want" ]; then pass "$what (exit $rc)"; else fail "$what: exit $rc, wanted $want; output: $out"; fi
  LAST_OUTPUT=$out
}

expect_exit 2 "nodecommd rejects an unknown flag" "$BIN/nodecommd" --no-such-flag
[ "$(printf '%s\n' "$LAST_OUTPUT" | wc -l)" -eq 1 ] && pass "nodecommd bad flag error is one line" || fail "nodecommd bad flag printed: $LAST_OUTPUT"
expect_exit 2 "nodecommd rejects a non-power-of-two ring" "$BIN/nodecommd" --ring-capacity 100
expect_exit 0 "nodecommd --help" "$BIN/nodecommd" --help
expect_exit 2 "nodecomm-launch rejects an unknown flag" "$BIN/nodecomm-launch" --bogus
expect_exit 2 "nodecomm-bench rejects an unknown flag" "$BIN/nodecomm-bench" --bogus
expect_exit 2 "nodecomm-bench rejects an unknown dtype" "$BIN/nodecomm-bench" --dtype q7

# nodecomm-bench --link-rate: tc's spellings in bytes per second, anything else exit 2 in one
# line; NODECOMM_LINK_RATE and NODECOMM_BACKEND are defaults checked as strictly.
for rate in 1gbitz -1gbit +1gbit 0 0.0gbit 1bit 1e 0x10gbit inf ' 1gbit' '' bit 1gbit/s 1..5gbit; do
  expect_exit 2 "nodecomm-bench rejects --link-rate '$rate'" "$BIN/nodecomm-bench" --link-rate "$rate"
  [ "$(printf '%s\n' "$LAST_OUTPUT" | wc -l)" -eq 1 ] || fail "--link-rate '$rate' error is not one line: $LAST_OUTPUT"
done
expect_exit 2 "nodecomm-bench rejects NODECOMM_LINK_RATE=fast" env NODECOMM_LINK_RATE=fast "$BIN/nodecomm-bench"
expect_exit 2 "nodecomm-bench rejects NODECOMM_BACKEND=nccl" env NODECOMM_BACKEND=nccl "$BIN/nodecomm-bench"
MPIRUN=(mpirun --oversubscribe --bind-to none --timeout 60 --mca btl self,vader,tcp)
[ "$(id -u)" -eq 0 ] && MPIRUN+=(--allow-run-as-root)
JSON=/tmp/nc-bench-json.$$
# The MPI backend by NODECOMM_BACKEND, with the launcher's node count (2 simulated nodes).
for pair in 1gbit:125000000 500mbit:62500000 10GBit:1250000000 100mbps:100000000 \
            2.5gbit:312500000 .5gbit:62500000 1e9:125000000 1kibps:1024 8000000:1000000; do
  rate=${pair%%:*} want=${pair#*:}
  expect_exit 0 "--link-rate $rate under mpirun" env NODECOMM_BACKEND=mpi NODECOMM_NODES=2 \
    "${MPIRUN[@]}" -np 4 -x NODECOMM_BACKEND -x NODECOMM_NODES "$BIN/nodecomm-bench" \
    --sizes 64K,1M --iters 2 --warmup 1 --link-rate "$rate" --json "$JSON"
  case "$LAST_OUTPUT" in *"backend mpi, 4 ranks (2 nodes x 2)"*) ;; *) fail "NODECOMM_BACKEND/NODECOMM_NODES not used: $LAST_OUTPUT" ;; esac
  grep -q "\"link_bytes_per_s\":$want\.0," "$JSON" && pass "--link-rate $rate is $want bytes/s" ||
    fail "--link-rate $rate: wanted $want bytes/s in $(cat "$JSON")"
done
line=$(printf '%s\n' "$LAST_OUTPUT" | grep '^# linkeff')
if printf '%s\n' "$line" | grep -Eq '^# linkeff +65536:[0-9]+\.[0-9]{3} +1048576:[0-9]+\.[0-9]{3}$'; then
  pass "# linkeff line: $line"
else
  fail "no # linkeff line of both sizes: $LAST_OUTPUT"
fi
# linkeff = algbw x 2(N-1)/N / link rate; N = 2 nodes here, rate 1e6 bytes/s, algbw in 1e9 bytes/s.
bad=$(sed -E 's/.*"algbw_gbs":([^,]*),.*"linkeff":([^,}]*).*/\1 \2/' "$JSON" |
  awk '{ want = $1 * 1e9 * 2 * (2 - 1) / 2 / 1e6; if ($2 == "null" || ($2 - want) ^ 2 > (1e-6 * want) ^ 2) print }')
[ -z "$bad" ] && [ "$(grep -c '"linkeff":[0-9]' "$JSON")" -eq 2 ] && pass "JSON linkeff = algbw x 2(N-1)/N / rate" ||
  fail "JSON linkeff: $(cat "$JSON")"
# Through the daemons, with the rate from NODECOMM_LINK_RATE: defined on 2 nodes, not on 1.
expect_exit 0 "linkeff through nodecomm on 2 nodes" env NODECOMM_LINK_RATE=1gbit "$BIN/nodecomm-launch" \
  --timeout 60 --nodes 2 --ranks-per-node 1 -- "$BIN/nodecomm-bench" --sizes 1M --iters 2 --json "$JSON"
printf '%s\n' "$LAST_OUTPUT" | grep -Eq '^# linkeff +1048576:[0-9]+\.[0-9]{3}$' && grep -q '"nodes":2,.*"linkeff":[0-9]' "$JSON" &&
  pass "nodecomm backend reports linkeff" || fail "nodecomm linkeff: $LAST_OUTPUT $(cat "$JSON")"
expect_exit 0 "no linkeff on 1 node" env NODECOMM_LINK_RATE=1gbit "$BIN/nodecomm-launch" \
  --timeout 60 --nodes 1 --ranks-per-node 2 -- "$BIN/nodecomm-bench" --sizes 1M --iters 2 --json "$JSON"
! printf '%s\n' "$LAST_OUTPUT" | grep -q '^# linkeff' && grep -q '"linkeff":null' "$JSON" &&
  pass "linkeff omitted on 1 node" || fail "1-node linkeff: $LAST_OUTPUT $(cat "$JSON")"
rm -f "$JSON"

if ldd "$LIB/libnodecomm.so" | grep -qi mpi; then fail "libnodecomm links MPI: $(ldd "$LIB/libnodecomm.so" | grep -i mpi)"; else pass "libnodecomm does not link MPI"; fi

# A failing rank: non-zero exit, and the launcher names the rank and its status.
expect_exit 1 "launcher reports a failing rank" "$BIN/nodecomm-launch" --timeout 60 --nodes 2 --ranks-per-node 1 -- \
  sh -c 'if [ "$NODECOMM_NODE" = 1 ]; then exit 3; fi'
case "$LAST_OUTPUT" in *"rank 1"*"status 3"*) pass "failure message names rank 1 and status 3" ;; *) fail "failure message: $LAST_OUTPUT" ;; esac

# mpirun runs the daemons with --enable-recovery and exits 0 whatever they exit with, so a
# sanitizer's report at a daemon's exit (a leak) must fail the launch from their output.
WRAP=/tmp/nc-sanitized-daemon.$$
printf '#!/bin/sh\n"%s" "$@"\necho "==1==ERROR: LeakSanitizer: detected memory leaks" >&2\nexit 0\n' \
  "$BIN/nodecommd" >"$WRAP" && chmod +x "$WRAP"
expect_exit 1 "launcher fails on a sanitizer report in a daemon's output" "$BIN/nodecomm-launch" \
  --timeout 60 --nodes 2 --ranks-per-node 1 --daemon "$WRAP" -- true
case "$LAST_OUTPUT" in *"sanitizer reported an error in a daemon"*) pass "and says so" ;; *) fail "sanitizer report message: $LAST_OUTPUT" ;; esac
rm -f "$WRAP"

# The timeout kills everything and leaves nothing behind.
start=$(date +%s)
"$BIN/nodecomm-launch" --timeout 5 --nodes 2 --ranks-per-node 1 -- sleep 100 >/tmp/nc-timeout.$$ 2>&1 &
lpid=$!
wait $lpid; rc=$?
took=$(( $(date +%s) - start ))
[ "$rc" -eq 124 ] && pass "timeout exits 124" || fail "timeout exit $rc: $(cat /tmp/nc-timeout.$$)"
[ "$took" -le 20 ] && pass "timeout took ${took}s" || fail "timeout took ${took}s"
sleep 1
left=$(pgrep -f "launch-$lpid-node" || true)
[ -z "$left" ] && pass "no daemon left after timeout" || fail "processes left: $left"
shm=$(ls /dev/shm | grep "nodecomm.launch-$lpid-" || true)
[ -z "$shm" ] && pass "no segment left after timeout" || fail "segments left: $shm"
ls -d /tmp/nodecomm-launch.* 2>/dev/null | while read -r d; do
  [ -f "$d/node0/nodecommd.ready" ] && grep -q "launch-$lpid-" "$d/node0/nodecommd.ready" && echo "FAIL: runtime dir $d left"
done
rm -f /tmp/nc-timeout.$$

# A clean run leaves nothing behind either.
"$BIN/nodecomm-launch" --timeout 60 --nodes 2 --ranks-per-node 2 -- true &
lpid=$!
wait $lpid; rc=$?
[ "$rc" -eq 0 ] && pass "clean run exits 0" || fail "clean run exit $rc"
shm=$(ls /dev/shm | grep "nodecomm.launch-$lpid-" || true)
[ -z "$shm" ] && pass "no segment left after a clean run" || fail "segments left: $shm"

echo "cli_contracts: $failures failure(s)"
[ "$failures" -eq 0 ]
