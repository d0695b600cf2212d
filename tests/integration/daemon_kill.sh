#!/usr/bin/env bash
# The last node's daemon is SIGKILLed mid-job (error_paths daemon-kill). Its ranks must get
# NC_ERR_DAEMON_LOST, every other node's ranks NC_ERR_PEER_LOST naming the lost node (from
# the daemons' heartbeats), all within 5 s; the launcher reports the dead daemon (exit 1).
#   daemon_kill.sh BIN_DIR NODES RANKS_PER_NODE
set -uo pipefail
BIN=$1
NODES=$2
RANKS=$3
out=$(NODECOMM_TIMEOUT_SEC=30 "$BIN/nodecomm-launch" --timeout 60 --nodes "$NODES" \
      --ranks-per-node "$RANKS" -- "$BIN/error_paths" daemon-kill 2>&1)
status=$?
echo "$out" | grep -E "error_paths|nodecomm-launch:|lost" || true
if [ "$status" -ne 1 ]; then
  echo "daemon_kill: launcher exit status $status, expected 1 (a daemon died)"; exit 1
fi
if ! grep -q "nodecomm-launch: the daemon of node $((NODES - 1)) (pid [0-9]*) died" <<<"$out"; then
  echo "daemon_kill: the launcher did not report the dead daemon"; exit 1
fi
want=$((NODES * RANKS))
told=$(echo "$out" | grep -c "saw the expected errors")
if [ "$told" -ne "$want" ]; then
  echo "daemon_kill: $told of $want ranks got the expected error within 5 s"; exit 1
fi
echo "daemon_kill: all $want ranks were told within 5 s"
