#!/usr/bin/env bash
# The control socket cannot be abused and per-client state is bounded (issue 16, points 4, 5).
# Standalone nodecommd (loopback transport), driven by hostile_control:
#  A. short deadlines (--hello-timeout-sec 1 --map-timeout-sec 1 --attach-timeout-sec 2):
#     a connection that never says hello, a client that never maps its segment, and a job whose
#     second rank never comes are each dropped with NC_ERR_TIMEOUT and a message naming the
#     deadline; a connection that sends wake-ups without a hello is dropped and told why, and a
#     job attaches and computes exactly while such a flooder reconnects as fast as it can.
#  B. --max-clients 6 --max-clients-per-uid 3 --hello-timeout-sec 60: root holds 3 idle
#     connections; root's next one is refused at once naming --max-clients-per-uid (through the
#     library), so are 20 more; meanwhile a job of a second uid (nodecomm-test, when root can
#     switch to it and reach the binaries) attaches and computes exactly. Then a raw rank posts
#     4096 + 20000 allreduces ahead of its peer (the default --max-in-flight 4096): seq 4097 fails
#     with NC_ERR_QUEUE_FULL naming rank, comm, seq and the cap, every other operation on the
#     communicator fails with it, the daemon's resident memory grows by less than 64 MiB, and
#     a later job is exact.
#   hostile_control.sh BIN_DIR
set -euo pipefail
BIN=${1:?usage: hostile_control.sh BIN_DIR}

fail() {
  echo "hostile_control: FAILED: $*" >&2
  [ -f "${work:-}/daemon.log" ] && tail -n 60 "$work/daemon.log" | sed 's/^/[nodecommd] /' >&2
  exit 1
}
work=$(mktemp -d /tmp/nodecomm-control.XXXXXX)
chmod 0755 "$work"
rt="$work/rt"
daemon_pid=""
holder=""
cleanup() {
  [ -n "$holder" ] && kill -KILL "$holder" 2>/dev/null || true
  stop_standalone_daemon
  rm -rf "$work"
}
trap cleanup EXIT
source "$(dirname "$0")/standalone_daemon.sh"
client_env=(env NODECOMM_RUNTIME_DIR="$rt" NODECOMM_TIMEOUT_SEC=20)
run_timeout() { timeout --kill-after=5 60 "$@"; }
alive() { kill -0 "$daemon_pid" 2>/dev/null || fail "nodecommd died ($1)"; }
exact_job() {  # exact_job NAME: a one-rank job must run exactly
  run_timeout "${client_env[@]}" NODECOMM_JOB="$1" NODECOMM_LOCAL_RANK=0 NODECOMM_LOCAL_SIZE=1 \
    "$BIN/allreduce_check" --counts 7,4099 --dtypes f32,i64 >"$work/$1.log" 2>&1 ||
    { cat "$work/$1.log" >&2; fail "job $1 failed"; }
}

# --- A. deadlines ---------------------------------------------------------------------------
start_standalone_daemon "$rt" "control-a.$$" --hello-timeout-sec 1 --map-timeout-sec 1 \
  --attach-timeout-sec 2 --log-level debug
run_timeout "${client_env[@]}" "$BIN/hostile_control" silent ||
  fail "a connection that never said hello was not dropped at the hello deadline"
run_timeout "${client_env[@]}" NODECOMM_JOB=nomap "$BIN/hostile_control" no-map ||
  fail "a client that never mapped was not dropped at the mapping deadline"
run_timeout "${client_env[@]}" NODECOMM_JOB=nopeer NODECOMM_LOCAL_RANK=0 NODECOMM_LOCAL_SIZE=2 \
  "$BIN/hostile_control" no-peer || fail "a job that never formed was not failed at the deadline"
run_timeout "${client_env[@]}" "$BIN/hostile_control" wake-flood 0.5 ||
  fail "wake-ups without a hello were not refused"
# While a flooder reconnects and sends wake-ups as fast as it can (connections are paced, the
# rest wait in the kernel's backlog), a real job still attaches and computes exactly.
"${client_env[@]}" "$BIN/hostile_control" wake-flood 4 >"$work/flood.log" 2>&1 &
flooder=$!
sleep 0.5
exact_job during-flood
wait "$flooder" || { cat "$work/flood.log" >&2; fail "the flooder was not told why it was dropped"; }
echo "hostile_control: a job attached and was exact beside a flooder ($(sed -n 's/.*wake-flood: \([^:]*\):.*/\1/p' "$work/flood.log"))"
alive "after the deadline checks"
exact_job after-deadlines
stop_standalone_daemon

# --- B. per-uid cap, another uid, in-flight cap ---------------------------------------------
start_standalone_daemon "$rt" "control-b.$$" --max-clients 6 --max-clients-per-uid 3 \
  --hello-timeout-sec 60
hold="$work/hold"
"${client_env[@]}" "$BIN/hostile_control" hold 3 "$hold" >"$work/hold.log" 2>&1 &
holder=$!
for _ in $(seq 100); do [ -f "$hold" ] && break; sleep 0.1; done
[ -f "$hold" ] || { cat "$work/hold.log" >&2; fail "could not hold 3 idle connections"; }
run_timeout "${client_env[@]}" NODECOMM_JOB=capped NODECOMM_LOCAL_RANK=0 NODECOMM_LOCAL_SIZE=1 \
  "$BIN/hostile_client" join queue-full "--max-clients-per-uid 3" ||
  fail "root's 4th connection was not refused naming --max-clients-per-uid"
for _ in $(seq 20); do
  "${client_env[@]}" NODECOMM_JOB=capped NODECOMM_LOCAL_RANK=0 NODECOMM_LOCAL_SIZE=1 \
    NODECOMM_TIMEOUT_SEC=5 "$BIN/hostile_client" join queue-full "--max-clients-per-uid" \
    >/dev/null 2>&1 || fail "a further connection of root was not refused"
done
echo "hostile_control: root holds 3 idle connections; its next 21 were refused (per-uid cap)"

user=nodecomm-test
if [ "$(id -u)" -eq 0 ] && command -v runuser >/dev/null && command -v useradd >/dev/null; then
  getent passwd "$user" >/dev/null || useradd -r -M -d /nonexistent -s /usr/sbin/nologin "$user"
fi
# The other uid runs a copy: the checkout may be in root's 0700 home (other_uid_copy.sh).
source "$(dirname "$0")/other_uid_copy.sh"
if [ "$(id -u)" -eq 0 ] && getent passwd "$user" >/dev/null &&
    copy_for_other_uid "$work/other" "$BIN/allreduce_check" &&
    runuser -u "$user" -- test -x "$work/other/bin/allreduce_check" 2>/dev/null; then
  pids=()
  for r in 0 1; do
    timeout --kill-after=5 60 runuser -u "$user" -- "${client_env[@]}" NODECOMM_JOB=other \
      NODECOMM_LOCAL_RANK=$r NODECOMM_LOCAL_SIZE=2 LD_LIBRARY_PATH="$work/other/lib" \
      "$work/other/bin/allreduce_check" --counts 7,4099 \
      --dtypes f32,i64 >"$work/other$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do
    wait "$p" || { cat "$work"/other*.log >&2; fail "uid $user's job failed beside root's idle connections"; }
  done
  echo "hostile_control: uid $user's 2-rank job attached and was exact beside root's held connections"
else
  echo "hostile_control: second-uid part skipped (needs root, runuser and binaries $user can reach)"
fi
rm -f "$hold"
wait "$holder" || fail "the holder lost a connection it should have kept"
holder=""
alive "after the per-uid cap"

rss() { awk '/^VmRSS:/ {print $2}' "/proc/$daemon_pid/status"; }
exact_job warm-up
before=$(rss)
run_timeout "${client_env[@]}" NODECOMM_JOB=ahead "$BIN/hostile_control" ahead 4096 20000 ||
  fail "a rank posting past --max-in-flight was not refused as expected"
after=$(rss)
echo "hostile_control: daemon resident memory ${before} KiB before, ${after} KiB after 24096 posts"
if grep -q __asan_init "$BIN/nodecommd"; then  # g++ or clang, shared or static runtime
  # ASan's quarantine keeps freed memory by design; leaks are LeakSanitizer's to find.
  echo "hostile_control: (ASan build: resident memory not bounded here)"
else
  [ $((after - before)) -lt 65536 ] || fail "the daemon grew by $((after - before)) KiB"
fi
alive "after the in-flight cap"
exact_job after-ahead
echo "hostile_control: deadlines, per-uid cap, wake-ups and the in-flight cap all held; the daemon served on"
