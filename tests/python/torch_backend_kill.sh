#!/usr/bin/env bash
# Plain DDP on the nodecomm backend, 2 nodes x 2 ranks; the last rank SIGKILLs itself at step 3.
# The launcher then reports that death (exit 1), and each of the 3 others must print "ok:"
# (its backward raised within 5 s, naming the dead rank).
#   torch_backend_kill.sh BIN_DIR PYTHON SCRIPT
set -uo pipefail
BIN=$1 PYTHON=$2 SCRIPT=$3
T=$(mktemp -d /tmp/nodecomm-torch-kill.XXXXXX)
trap 'rm -rf "$T"' EXIT
out=$("$BIN/nodecomm-launch" --timeout 90 --nodes 2 --ranks-per-node 2 -- \
      "$PYTHON" "$SCRIPT" "$T" 2>&1)
status=$?
echo "$out" | grep -E "^(ok|FAIL|skip)|nodecomm-launch:" || true
if grep -q "^skip:" <<<"$out"; then exit 77; fi
if [ "$status" -ne 1 ]; then
  echo "torch_backend_kill: launcher exit status $status, expected 1 (one rank killed)"; exit 1
fi
# Count ranks, not lines: two ranks' long lines can arrive joined on one.
told=$(echo "$out" | grep -o "ok: rank [0-9]* raised" | sort -u | wc -l)
if [ "$told" -ne 3 ]; then
  echo "torch_backend_kill: $told of 3 surviving ranks raised within 5 s naming the dead rank"
  exit 1
fi
echo "torch_backend_kill: all 3 surviving ranks raised within 5 s, naming the dead rank"
