#!/usr/bin/env bash
# Service daemons' job groups with real processes (daemon/mpi/job_groups_mpi.cpp): three MPI
# singletons ("nodes", service_groups_check) joined through a rendezvous server (ompi-server)
# form groups per job on demand, run checked allreduces and point-to-point rings in them, and:
#   (a) job A on nodes 0-1 (its node 0 arriving last) and job B on nodes 1-2 form and run at
#       once, both exact;
#   (b) node 2 is SIGKILLed mid-B: node 1's job A goes on, exact; its job B fails from the
#       liveness checks within 5 s, naming the lost node and its pid;
#   (c) node 2 restarted joins the survivors in a new 3-node job C (node 0 arriving last),
#       exact; job E, whose node 0 died with node 2 while forming it, forms again with the
#       restarted node 2 past the dead node 0's stale names; and job A's key, reused once A
#       ended, forms again.
#   service_groups.sh CHECK_BINARY
# Exit 77 (skipped) without ompi-server or the check program.
set -uo pipefail
source "$(dirname "$0")/service_groups_lib.sh"
service_groups_begin service_groups "$1"
service_groups_server

node() {  # node LABEL JOB...: starts a node in the background; its pid is in $last
  local label=$1
  shift
  local args=()
  for job in "$@"; do args+=(--job "$job"); done
  timeout 90 "$CHECK" --uri "$DIR/uri" --name "$label" --peer-timeout 2 "${args[@]}" \
    >"$DIR/$label.log" 2>"$DIR/$label.err" &
  last=$!
  pids+=("$last")
}
wait_for() {  # wait_for FILE PATTERN SECONDS
  for _ in $(seq $(($3 * 10))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}

# KEY:NODE:NODES:ROUNDS[:DELAY_S]; rounds are about 30 ms apart.
node n0 A:0:2:300:1.5 C:0:3:40:12 E:1:2:40:9 A:0:2:40:18
n0=$last
node n1 A:1:2:300 B:0:2:100000 C:1:3:40:7 A:1:2:40:18
n1=$last
node n2 B:1:2:100000 E:0:2:40
n2=$last

wait_for "$DIR/n1.log" "FORMED B" 30 || fail "job B did not form within 30 s"
wait_for "$DIR/n1.log" "FORMED A" 30 || fail "job A did not form within 30 s"
wait_for "$DIR/n2.log" "READY" 30 || fail "node 2 did not start"
sleep 1  # B and A run a while; node 2's job E waits as node 0 for a joiner
# The node itself, not the timeout that runs it.
n2_pid=$(awk '/ READY pid / { print $5 }' "$DIR/n2.log")
pids+=("$n2_pid")
kill -9 "$n2_pid"
killed_at=$(date +%s.%N)
wait "$n2" 2>/dev/null  # its timeout, which reports the kill
sleep 1
node n2b C:2:3:40 E:0:2:40
n2b=$last

for pid in "$n0" "$n1" "$n2b"; do
  wait "$pid" || fail "node process $pid exited with status $?"
done

# (a) both jobs exact, at once.
grep -q "FORMED A node 0/2" "$DIR/n0.log" || fail "job A did not form on node 0"
[ "$(grep -c 'DONE A exact' "$DIR/n0.log")" -eq 2 ] || fail "job A (twice) not exact on node 0"
[ "$(grep -c 'DONE A exact' "$DIR/n1.log")" -eq 2 ] || fail "job A (twice) not exact on node 1"
# (b) B fails on node 1 from liveness within 5 s of the kill, naming the node and its pid,
# while A goes on after that.
b_line=$(grep "ERROR B:" "$DIR/n1.log") || fail "job B on node 1 got no error"
grep -q "node 1 lost: its daemon (pid $n2_pid on" <<<"$b_line" ||
  fail "job B's error does not name node 1 and pid $n2_pid: $b_line"
b_at=${b_line%% *}
after=$(awk -v a="$b_at" -v k="$killed_at" 'BEGIN { print a - k }')
awk -v d="$after" 'BEGIN { exit !(d >= 0 && d <= 5) }' ||
  fail "job B's error came $after s after the kill"
a_done=$(grep "DONE A exact" "$DIR/n1.log" | head -1)
awk -v a="${a_done%% *}" -v b="$b_at" 'BEGIN { exit !(a > b) }' ||
  fail "job A ended before job B failed: nothing showed A going on"
# (c) the restarted node joins C and E; A's key formed again.
for label in n0 n1 n2b; do
  grep -q "DONE C exact" "$DIR/$label.log" || fail "job C not exact on $label"
done
for label in n0 n2b; do
  grep -q "DONE E exact" "$DIR/$label.log" || fail "job E not exact on $label"
done
if grep -q "ERROR" "$DIR/n0.log" "$DIR/n2b.log"; then fail "unexpected errors"; fi

echo "service_groups: all checks passed"
grep -h "FORMED\|ERROR" "$DIR"/n0.log "$DIR"/n1.log "$DIR"/n2b.log
grep -h "trying the next" "$DIR"/*.err | sed 's/^/stale: /' | head -3
exit 0
