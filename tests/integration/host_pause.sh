#!/usr/bin/env bash
# A host that pauses as a whole (a VM stopped by its hypervisor, a machine starved for
# seconds) must not make its daemons declare each other, or their clients, lost: the pause is
# no peer's silence (daemon/net/peer_silence.hpp). Two nodes of one rank soak for 10 s; 3 s
# in, every process of the job (launcher, mpirun, daemons, ranks) is stopped for 4 s, more
# than --peer-timeout-sec and --client-timeout-sec (3 s), and continued. No daemon may report
# a lost node or client, and every soak result must be exact.
#   host_pause.sh BIN_DIR
set -uo pipefail
BIN=${1:?usage: host_pause.sh BIN_DIR}
OUT=$(mktemp /tmp/nodecomm-host-pause.XXXXXX)
trap 'rm -f "$OUT"' EXIT
"$BIN/nodecomm-launch" --timeout 90 --nodes 2 --ranks-per-node 1 -- \
  "$BIN/nodecomm-bench" --soak 10 >"$OUT" 2>&1 &
launch=$!

descendants() {  # every process below $1, parents first
  local child
  for child in $(pgrep -P "$1"); do
    echo "$child"
    descendants "$child"
  done
}

sleep 3
pids=("$launch" $(descendants "$launch"))
kill -STOP "${pids[@]}" 2>/dev/null
sleep 4
kill -CONT "${pids[@]}" 2>/dev/null
wait "$launch"
rc=$?
if [ "$rc" -ne 0 ] || grep -q "sent no heartbeat\|node [0-9]* lost" "$OUT" ||
  ! grep -q "wrong elements (all ranks): 0" "$OUT"; then
  cat "$OUT" >&2
  echo "host_pause: FAILED (exit $rc): a 4 s pause of the whole job lost a node or a client" >&2
  exit 1
fi
grep "longest iteration" "$OUT"
echo "host_pause: ${#pids[@]} processes stopped for 4 s; no node or client was declared lost"
