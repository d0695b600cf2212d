#!/usr/bin/env bash
# Issue 16, point 3: backing a large segment must not stall the daemon's loop for long enough
# that its peers declare it lost. Two nodes of one rank; node 0's rank asks for a 1.5 GiB
# arena (about a second of fallocate here, were it done at once), with --peer-timeout-sec 0.5.
# The daemon backs the segment 64 MiB per loop turn between heartbeats: no daemon may report
# a lost node, and both ranks' allreduces must be exact.
#   segment_no_stall.sh BIN_DIR
set -uo pipefail
BIN=${1:?usage: segment_no_stall.sh BIN_DIR}
out=$(NODECOMM_TIMEOUT_SEC=30 "$BIN/nodecomm-launch" --timeout 90 --nodes 2 --ranks-per-node 1 \
  --daemon-arg=--peer-timeout-sec=0.5 -- sh -c 'if [ "$NODECOMM_NODE" = 0 ]; then
      export NODECOMM_ARENA_BYTES=1536M; fi; exec "$0" --counts 1,4099,65536 --dtypes f32,i64' \
  "$BIN/allreduce_check" 2>&1)
rc=$?
if [ "$rc" -ne 0 ] || grep -q "sent no heartbeat\|node [0-9]* lost" <<<"$out" ||
  [ "$(grep -c ' 0 wrong elements' <<<"$out")" -ne 2 ]; then
  printf '%s\n' "$out" >&2
  echo "segment_no_stall: FAILED (exit $rc): a 1.5 GiB segment stalled a daemon or the job" >&2
  exit 1
fi
grep "allreduce runs" <<<"$out"
echo "segment_no_stall: a 1.5 GiB segment was backed without a peer timing out (0.5 s)"
