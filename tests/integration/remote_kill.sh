#!/usr/bin/env bash
# The last rank dies mid-job: it SIGKILLs itself (error_paths remote-kill), or stops itself
# with SIGSTOP and is SIGKILLed 8 s later (error_paths wedged: its heartbeat stops). The
# launcher then reports that rank's death (exit 1), and every other rank, on both nodes, must
# have been told NC_ERR_PEER_LOST naming it within 5 s: three "saw the expected errors" lines.
#   remote_kill.sh BIN_DIR [remote-kill|wedged]
set -uo pipefail
BIN=$1
MODE=${2:-remote-kill}
out=$(NODECOMM_TIMEOUT_SEC=30 "$BIN/nodecomm-launch" --timeout 60 --nodes 2 --ranks-per-node 2 \
      -- "$BIN/error_paths" "$MODE" 2>&1)
status=$?
echo "$out" | grep -E "error_paths|nodecomm-launch:" || true
if [ "$status" -ne 1 ]; then
  echo "remote_kill: launcher exit status $status, expected 1 (one rank killed)"; exit 1
fi
told=$(echo "$out" | grep -c "saw the expected errors")
if [ "$told" -ne 3 ]; then
  echo "remote_kill: $told of 3 surviving ranks saw NC_ERR_PEER_LOST naming rank 3 within 5 s"
  exit 1
fi
echo "remote_kill: all 3 surviving ranks were told within 5 s"
