#!/usr/bin/env bash
# Files and identities (issue 16, point 7), each done for real against nodecommd and
# libnodecomm, with a second uid (nodecomm-test) and a supplementary group
# (nodecomm-test-grp), both created here if missing:
#  1. runtime directories that are not safe are refused with a named error: owned by another
#     uid, writable by others, a symbolic link, under a parent others may write in; a fresh one
#     is created 0711;
#  2. a symbolic link planted at the lock file, the ready file or the trace buffer is refused
#     and its target is never written;
#  3. a fake "daemon" listening as another uid gets nothing from a client: NC_ERR_PERMISSION
#     naming the uid found and expected, before the hello (the listener counts 0 bytes); a
#     NODECOMM_DAEMON_UID that does not match a real daemon is refused alike, and one that
#     matches is accepted;
#  4. --allow-groups admits a uid by a supplementary group (SO_PEERGROUPS), and refuses it
#     without that group;
#  5. a job name with an escape sequence and a newline shows escaped in the daemon's log and
#     in nodecommctl's output, never raw;
#  6. the counters segment is 0600 (0640 with the admin-group), and another user's nodecommctl
#     is told it may not read it.
# After each, the daemon is alive and a later job's results are exact.
#   files_identities.sh BIN_DIR
# Exit status 77 (CTest skip) when not root or when a tool it needs is missing.
set -euo pipefail

BIN=${1:?usage: files_identities.sh BIN_DIR}
USER_NAME=nodecomm-test
GROUP_NAME=nodecomm-test-grp

if [ "$(id -u)" -ne 0 ]; then
  echo "files_identities: skipped: needs root (to switch uids and plant files)"
  exit 77
fi
for tool in useradd groupadd runuser setpriv stat python3; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "files_identities: skipped: $tool is missing"
    exit 77
  fi
done
getent passwd "$USER_NAME" >/dev/null || useradd -r -M -d /nonexistent -s /usr/sbin/nologin "$USER_NAME"
getent group "$GROUP_NAME" >/dev/null || groupadd -r "$GROUP_NAME"
uid=$(id -u "$USER_NAME")
gid=$(id -g "$USER_NAME")
grp=$(getent group "$GROUP_NAME" | cut -d: -f3)

fail() {
  echo "files_identities: FAILED: $*" >&2
  [ -f "${work:-}/daemon.log" ] && sed 's/^/[nodecommd] /' "$work/daemon.log" >&2
  exit 1
}

work=$(mktemp -d /tmp/nodecomm-files.XXXXXX)
chmod 0755 "$work"
daemon_pid=""
cleanup() {
  stop_standalone_daemon
  rm -f /dev/shm/nodecomm.files*."$$".trace
  rm -rf "$work"
}
trap cleanup EXIT
source "$(dirname "$0")/standalone_daemon.sh"
# The other uid runs copies: the checkout may be in root's 0700 home (other_uid_copy.sh).
source "$(dirname "$0")/other_uid_copy.sh"
copy_for_other_uid "$work/other" "$BIN/nodecommctl" "$BIN/hostile_client" "$BIN/allreduce_check" ||
  fail "cannot copy the programs for $USER_NAME"
OBIN=$work/other/bin
run_timeout() { timeout --kill-after=5 30 "$@"; }
client_env=(env NODECOMM_TIMEOUT_SEC=20)

# A daemon that must refuse to start: its exit status is not 0 and its log holds `words`.
expect_refused_start() {
  local rt=$1 words=$2 out
  if out=$(timeout 20 "$BIN/nodecommd" --config none --transport loopback \
    --instance "files-refused.$$" --runtime-dir "$rt" --cores none 2>&1); then
    fail "nodecommd started in $rt; expected: $words"
  fi
  [[ $out == *"$words"* ]] || fail "nodecommd in $rt failed otherwise: $out (expected: $words)"
  echo "files_identities: refused as expected: $(grep -m1 -o "$words.*" <<<"$out")"
}

# A job that must complete with exact results on the daemon at `rt`.
exact_job() {
  local rt=$1 job=$2
  run_timeout "${client_env[@]}" NODECOMM_RUNTIME_DIR="$rt" NODECOMM_JOB="$job" \
    NODECOMM_LOCAL_RANK=0 NODECOMM_LOCAL_SIZE=1 "$BIN/allreduce_check" --counts 1,7,4099 \
    --dtypes f32,i64 >"$work/$job.log" 2>&1 || { cat "$work/$job.log" >&2; fail "job $job failed"; }
  kill -0 "$daemon_pid" 2>/dev/null || fail "nodecommd died"
}

# 1. Unsafe runtime directories.
mkdir "$work/theirs"
chown "$uid:$gid" "$work/theirs"
expect_refused_start "$work/theirs" "unsafe runtime directory $work/theirs: owned by uid $uid, not by this daemon's uid 0"
mkdir -m 0777 "$work/open"
chmod 0777 "$work/open"
expect_refused_start "$work/open" "unsafe runtime directory $work/open: mode 0777 lets group or others write in it"
ln -s "$work/open" "$work/link"
expect_refused_start "$work/link" "unsafe runtime directory $work/link: it is a symbolic link"
expect_refused_start "$work/open/rt" "unsafe runtime directory $work/open/rt: its parent $work/open (mode 0777) is writable by group or others without the sticky bit"
[ ! -e "$work/open/rt" ] || fail "nodecommd created $work/open/rt under an unsafe parent"

# 2. Symbolic links planted at the lock file and the ready file (in a directory that is
#    otherwise safe, as if planted before a fix of its mode).
echo "precious" >"$work/victim"
for file in nodecommd.lock nodecommd.ready nodecommd.ready.tmp; do
  rt="$work/planted-$file"
  mkdir -m 0711 "$rt"
  ln -s "$work/victim" "$rt/$file"
  case $file in
    *.lock) what="lock file" ;;
    *) what="ready file" ;;
  esac
  expect_refused_start "$rt" "refusing $what $rt/$file: it is a symbolic link"
  [ "$(cat "$work/victim")" = precious ] || fail "nodecommd wrote through the symlink at $rt/$file"
done

# A safe start: the runtime directory is created 0711, the lock 0600.
rt="$work/rt"
instance="files.$$"
start_standalone_daemon "$rt" "$instance" --log-level debug
[ "$(stat -c '%a %u' "$rt")" = "711 0" ] || fail "runtime dir is $(stat -c '%a %u' "$rt"), not 711 0"
[ "$(stat -c %a "$rt/nodecommd.lock")" = 600 ] || fail "lock file is not 0600"
exact_job "$rt" first

# The trace buffer in /dev/shm: a planted symbolic link is refused, its target untouched.
trace="/dev/shm/nodecomm.$instance.trace"
ln -s "$work/victim" "$trace"
if out=$("$BIN/nodecommctl" trace start --instance "$instance" 2>&1); then
  fail "trace start followed a planted symlink: $out"
fi
[[ $out == *"refusing $trace: it is a symbolic link"* ]] || fail "trace start failed otherwise: $out"
[ "$(cat "$work/victim")" = precious ] || fail "the trace was written through the symlink"
rm -f "$trace"
echo "files_identities: trace start refused the planted symlink: $out"
"$BIN/nodecommctl" trace start --instance "$instance" >/dev/null || fail "trace start failed"
[ "$(stat -c '%a %u' "$trace")" = "600 0" ] || fail "trace buffer is $(stat -c '%a %u' "$trace")"
"$BIN/nodecommctl" trace stop "$work/trace.json" --instance "$instance" >/dev/null ||
  fail "trace stop failed"
exact_job "$rt" after-trace

# 6. Counters: 0600, and another user's nodecommctl is told why it cannot read them.
counters="/dev/shm/nodecomm.$instance.counters"
[ "$(stat -c '%a %u' "$counters")" = "600 0" ] || fail "counters are $(stat -c '%a %u' "$counters")"
if out=$(run_timeout runuser -u "$USER_NAME" -- env LD_LIBRARY_PATH="$work/other/lib" "$OBIN/nodecommctl" status --instance "$instance" 2>&1); then
  fail "$USER_NAME read the counters: $out"
fi
[[ $out == *"permission denied reading $counters"* ]] || fail "nodecommctl as $USER_NAME: $out"
echo "files_identities: counters 0600 root; $USER_NAME's nodecommctl: $out"

# 3a. NODECOMM_DAEMON_UID pins the daemon's uid: a mismatch is refused before the hello.
run_timeout "${client_env[@]}" NODECOMM_RUNTIME_DIR="$rt" NODECOMM_DAEMON_UID="$uid" \
  NODECOMM_JOB=pinned NODECOMM_LOCAL_RANK=0 NODECOMM_LOCAL_SIZE=1 "$BIN/hostile_client" join \
  permission "refusing nodecommd at $rt/nodecommd.sock: it runs as uid 0 (pid $daemon_pid), but this process accepts only uid $uid (NODECOMM_DAEMON_UID)" ||
  fail "a NODECOMM_DAEMON_UID mismatch was not refused"
grep -q "job pinned" "$work/daemon.log" && fail "the daemon saw the refused client's hello"
NODECOMM_DAEMON_UID=root exact_job "$rt" pinned-ok

# 3b. A fake daemon run by another uid, at a path the client was pointed to.
mkdir "$work/fake"
chown "$uid:$gid" "$work/fake"
cat >"$work/fake.py" <<'EOF'
import os, socket, sys
path, report = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.bind(path)
os.chmod(path, 0o666)
s.listen(4)
open(report + ".ready", "w").close()
s.settimeout(30)
c, _ = s.accept()
c.settimeout(5)
total = 0
try:
    while True:
        data = c.recv(65536)
        if not data:
            break
        total += len(data)
except socket.timeout:
    pass
with open(report, "w") as f:
    f.write(str(total))
EOF
runuser -u "$USER_NAME" -- timeout 40 python3 "$work/fake.py" "$work/fake/nodecommd.sock" \
  "$work/fake/received" &
fake_pid=$!
for _ in $(seq 100); do [ -e "$work/fake/received.ready" ] && break; sleep 0.1; done
[ -e "$work/fake/received.ready" ] || fail "the fake daemon did not start"
run_timeout "${client_env[@]}" NODECOMM_RUNTIME_DIR="$work/fake" NODECOMM_JOB=fooled \
  NODECOMM_LOCAL_RANK=0 NODECOMM_LOCAL_SIZE=1 "$BIN/hostile_client" join permission \
  "refusing nodecommd at $work/fake/nodecommd.sock: it runs as uid $uid" ||
  fail "the client did not refuse a daemon socket served by uid $uid"
wait "$fake_pid" || fail "the fake daemon failed"
[ "$(cat "$work/fake/received")" = 0 ] ||
  fail "the client sent $(cat "$work/fake/received") bytes to the fake daemon"
echo "files_identities: a listener run as uid $uid got 0 bytes; the client said NC_ERR_PERMISSION"

# 5. A job name with a terminal escape sequence and a newline (a forged log line).
evil=$'evil\e[31mRED\nnodecommd[forged] error: fake'
run_timeout "${client_env[@]}" NODECOMM_RUNTIME_DIR="$rt" NODECOMM_JOB="$evil" \
  NODECOMM_LOCAL_RANK=0 NODECOMM_LOCAL_SIZE=2 "$BIN/allreduce_check" --counts 1,7,4099 \
  --dtypes f32 >"$work/evil0.log" 2>&1 &
evil0=$!
shown='evil\x1b[31mRED\x0anodecommd[forged] error: fake'
for _ in $(seq 100); do
  grep -qF "job $shown: local rank 0 attached" "$work/daemon.log" && break
  sleep 0.1
done
grep -qF "job $shown: local rank 0 attached" "$work/daemon.log" ||
  fail "the daemon log does not show the job name escaped"
for _ in $(seq 50); do
  status=$("$BIN/nodecommctl" status --instance "$instance")
  [[ $status == *"$shown"* ]] && break
  sleep 0.1
done
[[ $status == *"$shown"* ]] || fail "nodecommctl status does not show the escaped name: $status"
# A rank refused from that job gets a message that quotes the job's name escaped.
run_timeout "${client_env[@]}" NODECOMM_RUNTIME_DIR="$rt" NODECOMM_JOB="$evil" \
  NODECOMM_LOCAL_RANK=0 NODECOMM_LOCAL_SIZE=1 "$BIN/hostile_client" join invalid \
  "job '$shown' has 2 local ranks on this node, but local rank 0 says 1" >"$work/other.log" ||
  fail "the refusal did not quote the job name escaped: $(cat "$work/other.log")"
"$BIN/nodecommctl" status --instance "$instance" --json | python3 -c 'import json,sys; json.load(sys.stdin)' ||
  fail "nodecommctl status --json is not valid JSON with that job name"
run_timeout "${client_env[@]}" NODECOMM_RUNTIME_DIR="$rt" NODECOMM_JOB="$evil" \
  NODECOMM_LOCAL_RANK=1 NODECOMM_LOCAL_SIZE=2 "$BIN/allreduce_check" --counts 1,7,4099 \
  --dtypes f32 >"$work/evil1.log" 2>&1 || { cat "$work/evil1.log" >&2; fail "evil rank 1 failed"; }
wait "$evil0" || { cat "$work/evil0.log" >&2; fail "evil rank 0 failed"; }
if grep -q $'\e' "$work/daemon.log"; then fail "an escape character reached the daemon log"; fi
if grep -q '^nodecommd\[forged\]' "$work/daemon.log"; then fail "a forged line reached the log"; fi
echo "files_identities: the job name shows as '$shown' in the log and in nodecommctl"
exact_job "$rt" after-evil

# 4. --allow-groups by a supplementary group (SO_PEERGROUPS), with the admin-group reading
#    the counters (0640).
stop_standalone_daemon
start_standalone_daemon "$rt" "$instance" --log-level debug --allow-groups "$GROUP_NAME" \
  --admin-group "$GROUP_NAME"
[ "$(stat -c '%a %u %g' "$counters")" = "640 0 $grp" ] ||
  fail "counters with an admin-group are $(stat -c '%a %u %g' "$counters"), not 640 0 $grp"
run_timeout setpriv --reuid="$uid" --regid="$gid" --groups="$grp" -- env LD_LIBRARY_PATH="$work/other/lib" "$OBIN/nodecommctl" status \
  --instance "$instance" >/dev/null || fail "a member of the admin-group cannot read the counters"
for with_group in no yes; do
  job="groupjob-$with_group"
  run_timeout "${client_env[@]}" NODECOMM_RUNTIME_DIR="$rt" NODECOMM_JOB="$job" \
    NODECOMM_LOCAL_RANK=0 NODECOMM_LOCAL_SIZE=2 "$BIN/allreduce_check" --counts 1,7,4099 \
    --dtypes f32,i32 >"$work/$job.0.log" 2>&1 &
  rank0=$!
  for _ in $(seq 200); do
    grep -q "job $job: local rank 0 attached" "$work/daemon.log" && break
    sleep 0.1
  done
  if [ "$with_group" = no ]; then
    run_timeout setpriv --reuid="$uid" --regid="$gid" --clear-groups -- "${client_env[@]}" \
      NODECOMM_RUNTIME_DIR="$rt" NODECOMM_JOB="$job" NODECOMM_LOCAL_RANK=1 NODECOMM_LOCAL_SIZE=2 \
      LD_LIBRARY_PATH="$work/other/lib" "$OBIN/hostile_client" join permission "job '$job' belongs to uid 0; uid $uid may not join it" ||
      fail "uid $uid without $GROUP_NAME was not refused"
    run_timeout "${client_env[@]}" NODECOMM_RUNTIME_DIR="$rt" NODECOMM_JOB="$job" \
      NODECOMM_LOCAL_RANK=1 NODECOMM_LOCAL_SIZE=2 "$BIN/allreduce_check" --counts 1,7,4099 \
      --dtypes f32,i32 >"$work/$job.1.log" 2>&1 || fail "root's rank 1 failed"
  else
    run_timeout setpriv --reuid="$uid" --regid="$gid" --groups="$grp" -- "${client_env[@]}" \
      NODECOMM_RUNTIME_DIR="$rt" NODECOMM_JOB="$job" NODECOMM_LOCAL_RANK=1 NODECOMM_LOCAL_SIZE=2 \
      LD_LIBRARY_PATH="$work/other/lib" "$OBIN/allreduce_check" --counts 1,7,4099 --dtypes f32,i32 >"$work/$job.1.log" 2>&1 ||
      { cat "$work/$job.1.log" >&2; fail "uid $uid with supplementary group $GROUP_NAME failed"; }
  fi
  wait "$rank0" || { cat "$work/$job.0.log" >&2; fail "root's rank 0 of $job failed"; }
done
echo "files_identities: --allow-groups $GROUP_NAME admits uid $uid by its supplementary group only"
exact_job "$rt" last
echo "files_identities: passed"
