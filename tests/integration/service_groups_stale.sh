#!/usr/bin/env bash
# A group left by one daemon while its peer still sends in it must not disturb the next group
# of the same daemons (daemon/mpi/comm_retirement.hpp). Two MPI singletons ("nodes",
# service_groups_check) joined through a rendezvous server form job X; node 1 leaves it
# mid-run (as a daemon whose ranks of X died), while node 0 goes on sending in X (its rounds,
# heartbeats) until its liveness check finds node 1 gone. Node 1 must receive and drop those
# late messages in X's retired communicators, and then both must run job Y exact. Freed at
# once instead, X's context ids went to later groups with node 0's late messages in them, whose
# sequence numbers then stalled the heartbeats or data of another job on the same daemons for
# good (service_jobs, 2026-12-07). Whether a freed id is taken by a communicator that carries
# enough messages to stall depends on the order of creations: comm_retirement_2 shows the
# stall itself, deterministically, with two plain MPI processes.
#   service_groups_stale.sh CHECK_BINARY
# Exit 77 (skipped) without ompi-server or the check program.
set -uo pipefail
source "$(dirname "$0")/service_groups_lib.sh"
service_groups_begin service_groups_stale "$1"
service_groups_server

node() {  # node LABEL JOB...: starts a node in the background; its pid is in $last
  local label=$1
  shift
  local args=()
  for job in "$@"; do args+=(--job "$job"); done
  timeout 60 "$CHECK" --uri "$DIR/uri" --name "$label" --peer-timeout 2 \
    --start-file "$DIR/start" "${args[@]}" >"$DIR/$label.log" 2>"$DIR/$label.err" &
  last=$!
  pids+=("$last")
}

# KEY:NODE:NODES:ROUNDS[:DELAY_S[:CANCEL_S[:LEAVE_S]]]; rounds are about 30 ms apart, heartbeats
# 100 ms. X: node 1 leaves 2.5 s after forming; node 0 finds it gone 2 s later. Y: from 7 s.
node n0 X:0:2:1000000 Y:0:2:100:7
n0=$last
node n1 X:1:2:1000000:0:-1:2.5 Y:1:2:100:7
n1=$last
for label in n0 n1; do
  for _ in $(seq 300); do grep -q READY "$DIR/$label.log" 2>/dev/null && break; sleep 0.1; done
  grep -q READY "$DIR/$label.log" || fail "$label did not join the rendezvous within 30 s"
done
touch "$DIR/start"
for pid in "$n0" "$n1"; do
  wait "$pid" || fail "node process $pid exited with status $?"
done

grep -q "LEFT X" "$DIR/n1.log" || fail "node 1 did not leave job X"
grep -q "ERROR X: .*node 1 lost" "$DIR/n0.log" || fail "node 0 did not find node 1 gone from X"
for label in n0 n1; do
  grep -q "DONE Y exact rounds 100" "$DIR/$label.log" || fail "job Y not exact on $label"
done
if grep -q "ERROR Y" "$DIR/n0.log" "$DIR/n1.log"; then fail "job Y failed"; fi
# Node 0's messages after node 1 left X were received and dropped by node 1, in X's retired
# communicators, which were then freed.
late=$(grep -ho "after [0-9]* late message" "$DIR/n1.err" | awk '{ n += $2 } END { print n + 0 }')
[ "$late" -gt 0 ] || fail "node 1 dropped no late message of X (its log: $(cat "$DIR/n1.err"))"
echo "service_groups_stale: passed; node 1 dropped $late late message(s) of X"
grep -h "FORMED\|LEFT\|ERROR\|DONE" "$DIR"/n0.log "$DIR"/n1.log
exit 0
