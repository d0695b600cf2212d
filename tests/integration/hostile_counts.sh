#!/usr/bin/env bash
# The reported attack, against one standalone nodecommd (loopback) that several jobs share,
# started with --max-staging-per-job 6M:
#   1. a one-rank job exchanges 4 MiB of a known pattern with alltoallv (exact);
#   2. a one-rank job posts alltoallv receiving 1M elements while sending 1: NC_ERR_MISMATCH
#      naming the counts, and none of job 1's bytes in its receive buffer;
#   3. a two-rank job's 4 MiB-per-rank allgather (8 MiB of staging) fails with
#      NC_ERR_NO_MEMORY naming the cap; the job's next operations are exact;
#   4. a later job is exact and the daemon is still running;
#   5. on a second daemon whose address space cannot hold a job's staging (ulimit -v), the
#      allocation failure fails that operation with NC_ERR_NO_MEMORY and nothing else.
#   hostile_counts.sh BIN_DIR
set -euo pipefail
BIN=${1:?usage: hostile_counts.sh BIN_DIR}

fail() {
  echo "hostile_counts: FAILED: $*" >&2
  [ -f "${work:-}/daemon.log" ] && sed 's/^/[nodecommd] /' "$work/daemon.log" >&2
  exit 1
}
work=$(mktemp -d /tmp/nodecomm-counts.XXXXXX)
rt="$work/rt"
daemon_pid=""
cleanup() {
  stop_standalone_daemon
  rm -rf "$work"
}
trap cleanup EXIT
source "$(dirname "$0")/standalone_daemon.sh"
start_standalone_daemon "$rt" "counts.$$" --max-staging-per-job 6M
client_env=(env NODECOMM_RUNTIME_DIR="$rt" NODECOMM_TIMEOUT_SEC=20 NODECOMM_ARENA_BYTES=32M)
one_rank() {
  local job=$1
  shift
  timeout --kill-after=5 60 "${client_env[@]}" NODECOMM_JOB="$job" NODECOMM_LOCAL_RANK=0 \
    NODECOMM_LOCAL_SIZE=1 "$@"
}

one_rank earlier "$BIN/hostile_counts" pattern || fail "the earlier job's alltoallv"
one_rank attacker "$BIN/hostile_counts" attack || fail "the attack was not refused cleanly"
pids=()
for r in 0 1; do
  timeout --kill-after=5 60 "${client_env[@]}" NODECOMM_JOB=capped NODECOMM_LOCAL_RANK=$r \
    NODECOMM_LOCAL_SIZE=2 HOSTILE_COUNTS_CAP_MIB=4 "$BIN/hostile_counts" cap \
    >"$work/cap$r.log" 2>&1 &
  pids+=($!)
done
for i in 0 1; do
  wait "${pids[$i]}" || { cat "$work/cap$i.log" >&2; fail "the capped job, rank $i"; }
done
one_rank later "$BIN/hostile_counts" pattern || fail "a later job"
kill -0 "$daemon_pid" || fail "nodecommd died"
grep -q "mismatched counts on comm 0: alltoallv seq 1: rank 0 sends 1 elements" "$work/daemon.log" ||
  fail "the daemon's log does not name the mismatch"
stop_standalone_daemon

# ASan reserves terabytes of address space for its shadow memory, so a sanitized daemon cannot
# start under ulimit -v at all; step 5 runs in the Release suite only.
# (The runtime's symbols are in the binary whether it is linked statically, as clang does, or
# dynamically, as g++ does; grep -q on a pipe would race ldd under pipefail.)
if grep -q __asan_init "$BIN/nodecommd"; then
  echo "hostile_counts: the attack got NC_ERR_MISMATCH and no stale bytes; the staging cap" \
    "failed one operation; step 5 (ulimit -v) skipped under ASan"
  exit 0
fi
# 5. Memory the kernel refuses: a daemon whose address space (ulimit -v, about 780 MiB) holds
# two 320 MiB arenas but not the 200 MiB of staging that a 100 MiB-per-rank allgather needs.
# The allocation fails, that operation alone fails with NC_ERR_NO_MEMORY, the daemon lives.
rt2="$work/rt2"
(ulimit -v 800000 && exec "$BIN/nodecommd" --config none --transport loopback   --instance "counts2.$$" --runtime-dir "$rt2" --cores none --idle backoff)   >"$work/daemon.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 200); do
  [ -f "$rt2/nodecommd.ready" ] && break
  kill -0 "$daemon_pid" 2>/dev/null || fail "nodecommd under ulimit -v exited at start"
  sleep 0.1
done
pids=()
for r in 0 1; do
  timeout --kill-after=5 60 env NODECOMM_RUNTIME_DIR="$rt2" NODECOMM_TIMEOUT_SEC=20     NODECOMM_ARENA_BYTES=320M NODECOMM_JOB=unbacked NODECOMM_LOCAL_RANK=$r NODECOMM_LOCAL_SIZE=2     HOSTILE_COUNTS_CAP_MIB=100 "$BIN/hostile_counts" cap >"$work/unbacked$r.log" 2>&1 &
  pids+=($!)
done
for i in 0 1; do
  wait "${pids[$i]}" || { cat "$work/unbacked$i.log" >&2; fail "the unbacked job, rank $i"; }
done
grep -q "cannot allocate 209715200 bytes of staging memory" "$work/daemon.log" ||
  fail "the staging allocation did not fail as the test meant it to"
kill -0 "$daemon_pid" || fail "nodecommd under ulimit -v died"
echo "hostile_counts: the attack got NC_ERR_MISMATCH and no stale bytes; the staging cap and" \
  "an unbacked allocation each failed one operation; the daemons served on exactly"
