#!/usr/bin/env bash
# Isolation with a real second uid. Starts a nodecommd as root (loopback transport, its own
# runtime directory), then, as the system user nodecomm-test (created here if missing):
#  1. attaches to a job of its own and checks that its segment is a sealed memfd with no name
#     in /dev/shm, and that another user (nobody) cannot open it through the client's
#     /proc/PID/fd entry; then runs real allreduces (setpriv);
#  2. tries to join a job that root's ranks started: refused with NC_ERR_PERMISSION and
#     "job 'J' belongs to uid 0; uid N may not join it" (runuser), after which root's job
#     forms and completes with exact results, and the daemon is still running.
# It also checks the documented modes: runtime directory 0711, socket 0666, lock file 0600.
#   second_uid.sh BIN_DIR
# Exit status 77 (CTest skip) when not root or when useradd, runuser or setpriv is missing.
set -euo pipefail

BIN=${1:?usage: second_uid.sh BIN_DIR}
USER_NAME=nodecomm-test

if [ "$(id -u)" -ne 0 ]; then
  echo "second_uid: skipped: needs root (to create $USER_NAME and switch to it)"
  exit 77
fi
for tool in useradd runuser setpriv stat; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "second_uid: skipped: $tool is missing"
    exit 77
  fi
done
if ! getent passwd "$USER_NAME" >/dev/null; then
  useradd -r -M -d /nonexistent -s /usr/sbin/nologin "$USER_NAME"
  echo "second_uid: created system user $USER_NAME"
fi
uid=$(id -u "$USER_NAME")
gid=$(id -g "$USER_NAME")

fail() {
  echo "second_uid: FAILED: $*" >&2
  [ -f "${work:-}/daemon.log" ] && sed 's/^/[nodecommd] /' "$work/daemon.log" >&2
  exit 1
}

work=$(mktemp -d /tmp/nodecomm-uid.XXXXXX)
chmod 0755 "$work"
mkdir "$work/user"
chown "$uid:$gid" "$work/user"
rt="$work/rt"
daemon_pid=""
cleanup() {
  stop_standalone_daemon
  rm -rf "$work"
}
trap cleanup EXIT
source "$(dirname "$0")/standalone_daemon.sh"
source "$(dirname "$0")/other_uid_copy.sh"
# The other uid runs copies: the checkout may be out of its reach (root's 0700 home).
copy_for_other_uid "$work/prog" "$BIN/hostile_client" "$BIN/allreduce_check" ||
  fail "cannot copy the client programs to $work/prog"
UBIN="$work/prog/bin"
instance="uidtest.$$"
start_standalone_daemon "$rt" "$instance" --log-level debug

# The runtime directory and socket permissions documented in docs/TROUBLESHOOTING.md.
[ "$(stat -c %a "$rt")" = 711 ] || fail "runtime dir $rt is mode $(stat -c %a "$rt"), not 711"
[ "$(stat -c '%a %F' "$rt/nodecommd.sock")" = "666 socket" ] ||
  fail "socket is $(stat -c '%a %F' "$rt/nodecommd.sock"), not a 666 socket"
[ "$(stat -c %a "$rt/nodecommd.lock")" = 600 ] || fail "lock file is not 600"
echo "second_uid: runtime dir 0711, socket 0666, lock 0600 (owner $(stat -c %U "$rt"))"

client_env=(env NODECOMM_RUNTIME_DIR="$rt" NODECOMM_TIMEOUT_SEC=20)
user_env=("${client_env[@]}" LD_LIBRARY_PATH="$work/prog/lib")
run_timeout() { timeout --kill-after=5 30 "$@"; }

# 1. The other uid's own job: its segment is a sealed memfd with no name in /dev/shm, and no
#    third user can reach it through the client's descriptor.
hold="$work/user/hold"
run_timeout runuser -u "$USER_NAME" -- "${user_env[@]}" NODECOMM_JOB=userjob \
  NODECOMM_LOCAL_RANK=0 NODECOMM_LOCAL_SIZE=1 "$UBIN/hostile_client" segment-perms "$hold" &
perms_pid=$!
for _ in $(seq 200); do [ -f "$hold" ] && break; sleep 0.1; done
[ -f "$hold" ] || fail "the segment-perms client never reported its segment"
seg=$(cat "$hold")
left=$(ls /dev/shm | grep -F "nodecomm.$instance." | grep -vE '\.(counters|trace)$' || true)
[ -z "$left" ] || fail "segment names in /dev/shm: $left"
id nobody >/dev/null 2>&1 || fail "there is no user nobody to try the segment as a third uid"
if third=$(runuser -u nobody -- cat "$seg" 2>&1 >/dev/null); then
  fail "user nobody could read $USER_NAME's segment through $seg"
fi
[[ $third == *"Permission denied"* ]] ||
  fail "user nobody's attempt to read $seg failed otherwise: $third"
echo "second_uid: the segment is a memfd ($seg), no name in /dev/shm; nobody cannot open it"
rm -f "$hold"
wait "$perms_pid" || fail "segment-perms client failed"
# Real allreduces as the other uid, through libnodecomm (setpriv this time).
run_timeout setpriv --reuid="$uid" --regid="$gid" --clear-groups -- "${user_env[@]}" \
  NODECOMM_JOB=userjob2 NODECOMM_LOCAL_RANK=0 NODECOMM_LOCAL_SIZE=1 \
  "$UBIN/allreduce_check" --counts 1,7,4099 --dtypes f32,i64 >"$work/user_allreduce.log" 2>&1 ||
  { cat "$work/user_allreduce.log" >&2; fail "allreduce_check as $USER_NAME failed"; }
echo "second_uid: $USER_NAME ran its own job on root's daemon"

# 2. Root's job: the other uid may not join it.
run_timeout "${client_env[@]}" NODECOMM_JOB=rootjob NODECOMM_LOCAL_RANK=0 NODECOMM_LOCAL_SIZE=2 \
  "$BIN/allreduce_check" --counts 1,7,4099 --dtypes f32,i32 >"$work/root0.log" 2>&1 &
root0=$!
for _ in $(seq 200); do
  grep -q "job rootjob: local rank 0 attached" "$work/daemon.log" && break
  sleep 0.1
done
grep -q "job rootjob: local rank 0 attached" "$work/daemon.log" ||
  fail "root's local rank 0 never attached"
run_timeout runuser -u "$USER_NAME" -- "${user_env[@]}" NODECOMM_JOB=rootjob \
  NODECOMM_LOCAL_RANK=1 NODECOMM_LOCAL_SIZE=2 "$UBIN/hostile_client" join permission \
  "job 'rootjob' belongs to uid 0; uid $uid may not join it" ||
  fail "$USER_NAME was not refused with the expected permission error"
grep -q "refused: job 'rootjob' belongs to uid 0; uid $uid may not join it" "$work/daemon.log" ||
  fail "the daemon log does not record the refusal"
# The refused uid took nothing from the job: root's second rank completes it.
run_timeout "${client_env[@]}" NODECOMM_JOB=rootjob NODECOMM_LOCAL_RANK=1 NODECOMM_LOCAL_SIZE=2 \
  "$BIN/allreduce_check" --counts 1,7,4099 --dtypes f32,i32 >"$work/root1.log" 2>&1 ||
  { cat "$work/root1.log" >&2; fail "root's rank 1 failed"; }
wait "$root0" || { cat "$work/root0.log" >&2; fail "root's rank 0 failed"; }
kill -0 "$daemon_pid" 2>/dev/null || fail "nodecommd died"

# A socket that an administrator narrowed to its group: the other uid is told so at once
# (NC_ERR_PERMISSION), not after the 10 s a missing daemon gets.
chmod 0660 "$rt/nodecommd.sock"
started=$(date +%s%N)
run_timeout runuser -u "$USER_NAME" -- "${user_env[@]}" NODECOMM_JOB=narrowjob \
  NODECOMM_LOCAL_RANK=0 NODECOMM_LOCAL_SIZE=1 "$UBIN/hostile_client" join permission \
  "permission denied on nodecommd's socket $rt/nodecommd.sock for uid $uid" ||
  fail "$USER_NAME was not told that the 0660 socket shuts it out"
waited_ms=$(( ($(date +%s%N) - started) / 1000000 ))
[ "$waited_ms" -lt 3000 ] || fail "the permission error took $waited_ms ms; expected it at once"
chmod 0666 "$rt/nodecommd.sock"
echo "second_uid: a 0660 socket refuses $USER_NAME with NC_ERR_PERMISSION in $waited_ms ms"

# 3. A daemon that allows the other uid (--allow-uids, by name): it joins root's job and both
#    ranks get exact results.
stop_standalone_daemon
rm -rf "$rt"
start_standalone_daemon "$rt" "$instance" --log-level debug --allow-uids "$USER_NAME"
run_timeout "${client_env[@]}" NODECOMM_JOB=sharedjob NODECOMM_LOCAL_RANK=0 NODECOMM_LOCAL_SIZE=2 \
  "$BIN/allreduce_check" --counts 1,7,4099 --dtypes f32,i32 >"$work/shared0.log" 2>&1 &
shared0=$!
for _ in $(seq 200); do
  grep -q "job sharedjob: local rank 0 attached" "$work/daemon.log" && break
  sleep 0.1
done
run_timeout runuser -u "$USER_NAME" -- "${user_env[@]}" NODECOMM_JOB=sharedjob \
  NODECOMM_LOCAL_RANK=1 NODECOMM_LOCAL_SIZE=2 "$UBIN/allreduce_check" --counts 1,7,4099 \
  --dtypes f32,i32 >"$work/shared1.log" 2>&1 ||
  { cat "$work/shared1.log" >&2; fail "the allowed uid's rank failed"; }
wait "$shared0" || { cat "$work/shared0.log" >&2; fail "root's rank failed next to the allowed uid"; }
echo "second_uid: $USER_NAME was refused; root's job then ran with exact results; daemon alive;"
echo "second_uid: with --allow-uids $USER_NAME it joined root's job, exact results on both"
