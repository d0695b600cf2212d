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

if ldd "$LIB/libnodecomm.so" | grep -qi mpi; then fail "libnodecomm links MPI: $(ldd "$LIB/libnodecomm.so" | grep -i mpi)"; else pass "libnodecomm does not link MPI"; fi

# A failing rank: non-zero exit, and the launcher names the rank and its status.
expect_exit 1 "launcher reports a failing rank" "$BIN/nodecomm-launch" --timeout 60 --nodes 2 --ranks-per-node 1 -- \
  sh -c 'if [ "$NODECOMM_NODE" = 1 ]; then exit 3; fi'
case "$LAST_OUTPUT" in *"rank 1"*"status 3"*) pass "failure message names rank 1 and status 3" ;; *) fail "failure message: $LAST_OUTPUT" ;; esac

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
