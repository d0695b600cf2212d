#!/usr/bin/env bash
# Limits give clear errors: a standalone nodecommd (loopback) with --max-clients 2 and
# --max-arena 64M refuses a client that asks for a 4 MiB arena (NC_ERR_NO_MEMORY) and a third
# client while two are attached (NC_ERR_QUEUE_FULL), and, once those two are SIGKILLed, still serves the next job.
# (In-flight operations per client: errors_local_checks_1x2 and hostile_flood_1x3.)
#   limits.sh BIN_DIR
set -euo pipefail
BIN=${1:?usage: limits.sh BIN_DIR}

fail() {
  echo "limits: FAILED: $*" >&2
  [ -f "${work:-}/daemon.log" ] && sed 's/^/[nodecommd] /' "$work/daemon.log" >&2
  exit 1
}
work=$(mktemp -d /tmp/nodecomm-limits.XXXXXX)
rt="$work/rt"
daemon_pid=""
holders=()
cleanup() {
  for p in "${holders[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  stop_standalone_daemon
  rm -rf "$work"
}
trap cleanup EXIT
source "$(dirname "$0")/standalone_daemon.sh"
start_standalone_daemon "$rt" "limits.$$" --max-clients 2 --max-arena 64M --log-level debug
client_env=(env NODECOMM_RUNTIME_DIR="$rt" NODECOMM_TIMEOUT_SEC=20)
run_timeout() { timeout --kill-after=5 30 "$@"; }

# 1. An arena over --max-arena.
run_timeout "${client_env[@]}" NODECOMM_JOB=big NODECOMM_LOCAL_RANK=0 NODECOMM_LOCAL_SIZE=1 \
  NODECOMM_ARENA_BYTES=128M "$BIN/hostile_client" join no-memory "this daemon allows at most" ||
  fail "a 128 MiB arena was not refused with NC_ERR_NO_MEMORY"

# 2. Two ranks of a 3-rank job attach and wait for the third; a client of another job is then
# one too many.
for r in 0 1; do
  "${client_env[@]}" NODECOMM_JOB=waiting NODECOMM_LOCAL_RANK=$r NODECOMM_LOCAL_SIZE=3 \
    NODECOMM_ARENA_BYTES=256K "$BIN/allreduce_check" --counts 7 --dtypes f32 \
    >"$work/holder$r.log" 2>&1 &
  holders+=($!)
done
for _ in $(seq 100); do
  [ "$(grep -c "attached (pid" "$work/daemon.log" || true)" -ge 2 ] && break
  sleep 0.1
done
run_timeout "${client_env[@]}" NODECOMM_JOB=third NODECOMM_LOCAL_RANK=0 NODECOMM_LOCAL_SIZE=1 \
  NODECOMM_ARENA_BYTES=256K "$BIN/hostile_client" join queue-full "already serves 2 clients" ||
  fail "a third client was not refused with NC_ERR_QUEUE_FULL"

# 3. The waiting ranks are SIGKILLed; the daemon drops them and serves the next job exactly.
for p in "${holders[@]}"; do kill -KILL "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
holders=()
ok=""
for _ in $(seq 50); do
  if run_timeout "${client_env[@]}" NODECOMM_JOB=after NODECOMM_LOCAL_RANK=0 \
      NODECOMM_LOCAL_SIZE=1 "$BIN/allreduce_check" --counts 7,4099 --dtypes f32,i64 \
      >"$work/after.log" 2>&1; then
    ok=1
    break
  fi
  sleep 0.2  # the daemon may not have seen the killed ranks' sockets close yet
done
[ -n "$ok" ] || { cat "$work/after.log" >&2; fail "the next job failed"; }
kill -0 "$daemon_pid" || fail "nodecommd died"
echo "limits: --max-arena and --max-clients refused with clear errors; the daemon served on"
