#!/usr/bin/env bash
# A rank on the last node SIGKILLs itself mid-job (error_paths remote-kill). The launcher then
# reports that rank's death (exit 1), and every other rank, on both nodes, must have been told
# NC_ERR_PEER_LOST naming it within 5 s: three "saw the expected errors" lines.
#   remote_kill.sh BIN_DIR
set -uo pipefail
BIN=$1
out=$(NODECOMM_TIMEOUT_SEC=30 "$BIN/nodecomm-launch" --timeout 60 --nodes 2 --ranks-per-node 2 \
      -- "$BIN/error_paths" remote-kill 2>&1)
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
