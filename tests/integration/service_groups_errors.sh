#!/usr/bin/env bash
# Service daemons' job groups (daemon/mpi/job_groups_mpi.cpp) when forming fails, with two MPI
# singletons (service_groups_check) and a rendezvous server (ompi-server):
#   (d) the two daemons disagree on the job's node count: both get an error naming both values;
#   (e) a joiner gives its formation up (cancel): node 0's fails, naming it;
#   (f) node 0 gives its formation up: the joiner's fails, saying so; the key then forms again;
#   (g) a URI file that is missing, or whose server is gone: a clear error before MPI_Init.
#   service_groups_errors.sh CHECK_BINARY
# Exit 77 (skipped) without ompi-server or the check program.
set -uo pipefail
source "$(dirname "$0")/service_groups_lib.sh"
service_groups_begin service_groups_errors "$1"
expect() {  # expect LABEL TEXT
  grep -qF -- "$2" "$DIR/$1.log" || fail "$1 did not print: $2"
}

# (g) first, without a server: nothing may reach MPI_Init.
out=$(timeout 30 "$CHECK" --uri "$DIR/missing.uri" --name g --job X:0:2:1 2>&1)
missing="rendezvous URI file $DIR/missing.uri: No such file or directory: start the rendezvous unit"
grep -qF "$missing" <<<"$out" ||
  fail "missing URI file: $out"
# The server itself, not under timeout: a SIGKILLed timeout leaves its child running.
ompi-server --no-daemonize -r "$DIR/dead.uri" >/dev/null 2>&1 &
server=$!
pids+=("$server")
for _ in $(seq 100); do [ -s "$DIR/dead.uri" ] && break; sleep 0.1; done
kill -9 "$server"
wait "$server" 2>/dev/null
out=$(timeout 30 "$CHECK" --uri "$DIR/dead.uri" --name g --job X:0:2:1 2>&1)
grep -qF "the rendezvous server in $DIR/dead.uri does not answer (tcp://" <<<"$out" ||
  fail "URI file of a dead server: $out"

service_groups_server

# KEY:NODE:NODES:ROUNDS[:DELAY_S[:CANCEL_S]]. F and G are 3-node jobs whose node 2 never comes.
# Delays count from one moment for both (the start file, made once both have joined the
# rendezvous): each counting from its own start, a slow join (seconds under ASan) put e1's
# 3-node G after e0 had already cancelled it, and e1 then waited for a node 0 that never came.
timeout 90 "$CHECK" --uri "$DIR/uri" --name e0 --start-file "$DIR/go" --job D:0:2:5 --job F:0:3:5 \
  --job G:0:3:5:0:3 --job G:0:2:5:8 >"$DIR/e0.log" 2>"$DIR/e0.err" &
e0=$!
pids+=("$e0")
timeout 90 "$CHECK" --uri "$DIR/uri" --name e1 --start-file "$DIR/go" --job D:1:3:5 \
  --job F:1:3:5:0:2 --job G:1:3:5 --job G:1:2:5:8 >"$DIR/e1.log" 2>"$DIR/e1.err" &
e1=$!
pids+=("$e1")
for _ in $(seq 600); do
  grep -q " READY " "$DIR/e0.log" && grep -q " READY " "$DIR/e1.log" && break
  sleep 0.1
done
touch "$DIR/go"
wait "$e0" || fail "e0 exited with status $?"
wait "$e1" || fail "e1 exited with status $?"

# (d)
expect e0 "ERROR D: job group D (node 0 of 2): node 1 says the job has 3 nodes, node 0 says 2"
expect e1 "ERROR D: job group D (node 1 of 3): node 0 says the job has 2 nodes, node 1 says 3"
# (e)
expect e1 "CANCELLED F"
expect e0 "ERROR F: job group F (node 0 of 3): node 1 gave up"
# (f) and the key again
expect e0 "CANCELLED G"
expect e1 "ERROR G: job group G (node 1 of 3): node 0 called the formation off: node 0 gave up"
expect e0 "DONE G exact"
expect e1 "DONE G exact"
echo "service_groups_errors: all checks passed"
grep -h "ERROR\|CANCELLED\|FORMED" "$DIR"/e0.log "$DIR"/e1.log
exit 0
