#!/usr/bin/env bash
# Issue 16, point 3: memory pressure is a refusal, not a crash. Runs a nodecommd (loopback
# transport, own runtime directory) inside a memory cgroup (v1) of its own with a 384 MiB
# limit, and a two-rank job on it whose local rank 1 first asks for a 1 GiB arena:
#  A. with the cgroup's OOM killer on (the default): refused before any page is asked for
#     (NC_ERR_NO_MEMORY, "no memory for local rank 1's ... memory cgroup ... limit free");
#  B. with the OOM killer off: the daemon's fallocate gets ENOMEM from the kernel, refused
#     with NC_ERR_NO_MEMORY and "fallocate: Cannot allocate memory".
# Each time rank 0 (attached before) and a retried rank 1 with a normal arena then run exact
# allreduces; the daemon is alive, was never OOM-killed, and serves a later job. The refusal
# must come within seconds.
#   hostile_memory.sh BIN_DIR
# Exit status 77 (CTest skip) without root or a writable cgroup v1 memory hierarchy.
set -euo pipefail

BIN=${1:?usage: hostile_memory.sh BIN_DIR}
LIMIT=$((384 << 20))

if [ "$(id -u)" -ne 0 ]; then
  echo "hostile_memory: skipped: needs root (to create a memory cgroup)"
  exit 77
fi
cg_path=$(awk -F: '$2 == "memory" { print $3 }' /proc/self/cgroup)
cg_root=/sys/fs/cgroup/memory
if [ -z "$cg_path" ] || [ ! -d "$cg_root${cg_path%/}" ]; then
  echo "hostile_memory: skipped: no writable cgroup v1 memory hierarchy at $cg_root"
  exit 77
fi
cg="$cg_root${cg_path%/}/nodecomm-memtest.$$"
if ! mkdir "$cg" 2>/dev/null || ! echo "$LIMIT" >"$cg/memory.limit_in_bytes" 2>/dev/null; then
  rmdir "$cg" 2>/dev/null || true
  echo "hostile_memory: skipped: cannot create a memory cgroup with a limit under $cg_root$cg_path"
  exit 77
fi

fail() {
  echo "hostile_memory: FAILED: $*" >&2
  for log in "${work:-/nonexistent}"/*.log; do
    [ -f "$log" ] && sed "s|^|[$(basename "$log")] |" "$log" >&2
  done
  [ -n "${cg:-}" ] && grep -H . "$cg/memory.oom_control" "$cg/memory.usage_in_bytes" >&2
  exit 1
}

work=$(mktemp -d /tmp/nodecomm-mem.XXXXXX)
rt="$work/rt"
daemon_pid=""
cleanup() {
  stop_standalone_daemon
  rm -rf "$work"
  # The cgroup can go once its processes have.
  for _ in $(seq 50); do rmdir "$cg" 2>/dev/null && break; sleep 0.1; done
}
trap cleanup EXIT
source "$(dirname "$0")/standalone_daemon.sh"

# The daemon, and only it, in the cgroup: a shell that moves itself there and then execs it.
BIN_REAL=$BIN
mkdir "$work/bin"
cat >"$work/bin/nodecommd" <<EOF
#!/bin/sh
echo \$\$ > "$cg/cgroup.procs" || exit 97
exec "$BIN_REAL/nodecommd" "\$@"
EOF
chmod +x "$work/bin/nodecommd"
BIN="$work/bin" start_standalone_daemon "$rt" "memtest.$$" --log-level debug
grep -qx "$daemon_pid" "$cg/cgroup.procs" || fail "nodecommd (pid $daemon_pid) is not in $cg"
echo "hostile_memory: nodecommd pid $daemon_pid in $cg, limit $LIMIT bytes," \
  "using $(cat "$cg/memory.usage_in_bytes")"

client_env=(env NODECOMM_RUNTIME_DIR="$rt" NODECOMM_TIMEOUT_SEC=20)
run_timeout() { timeout --kill-after=5 40 "$@"; }

# One round: rank 0 attaches with a small arena, rank 1 asks for 1 GiB (refused with WORDS,
# timed), then rank 1 again with a small arena; both check their allreduces.
round() {
  local job=$1 words=$2
  run_timeout "${client_env[@]}" NODECOMM_JOB="$job" NODECOMM_LOCAL_RANK=0 NODECOMM_LOCAL_SIZE=2 \
    NODECOMM_ARENA_BYTES=16M "$BIN_REAL/allreduce_check" --counts 1,7,4099,65536 \
    --dtypes f32,i64 >"$work/$job.rank0.log" 2>&1 &
  local rank0=$!
  for _ in $(seq 200); do
    grep -q "job $job: local rank 0 attached" "$work/daemon.log" && break
    sleep 0.1
  done
  grep -q "job $job: local rank 0 attached" "$work/daemon.log" || fail "$job: rank 0 never attached"
  local started=$(date +%s%N)
  run_timeout "${client_env[@]}" NODECOMM_JOB="$job" NODECOMM_LOCAL_RANK=1 NODECOMM_LOCAL_SIZE=2 \
    NODECOMM_ARENA_BYTES=1G "$BIN_REAL/hostile_client" join no-memory "$words" ||
    fail "$job: a 1 GiB arena was not refused with NC_ERR_NO_MEMORY and '$words'"
  local refused_ms=$((($(date +%s%N) - started) / 1000000))
  # Generous for a loaded machine: in B the daemon backs chunks until the limit bites (its loop
  # stays responsive meanwhile; segment_no_stall checks that).
  [ "$refused_ms" -lt 5000 ] || fail "$job: the refusal took $refused_ms ms"
  kill -0 "$daemon_pid" 2>/dev/null || fail "$job: nodecommd died"
  run_timeout "${client_env[@]}" NODECOMM_JOB="$job" NODECOMM_LOCAL_RANK=1 NODECOMM_LOCAL_SIZE=2 \
    NODECOMM_ARENA_BYTES=16M "$BIN_REAL/allreduce_check" --counts 1,7,4099,65536 \
    --dtypes f32,i64 >"$work/$job.rank1.log" 2>&1 ||
    { cat "$work/$job.rank1.log" >&2; fail "$job: rank 1 with a 16 MiB arena failed"; }
  wait "$rank0" || { cat "$work/$job.rank0.log" >&2; fail "$job: rank 0 failed"; }
  echo "hostile_memory: $job: 1 GiB refused in $refused_ms ms; both ranks' allreduces exact"
}

# A. The OOM killer on: the daemon must not ask the kernel for what the cgroup cannot hold.
round memjobA "memory cgroup"
grep -q "no memory for local rank 1's" "$work/daemon.log" || fail "the refusal is not in the log"
# B. The OOM killer off: the kernel answers fallocate with ENOMEM.
echo 1 >"$cg/memory.oom_control"
round memjobB "fallocate: Cannot allocate memory"
echo 0 >"$cg/memory.oom_control"

# A later job, one rank, on the same daemon.
run_timeout "${client_env[@]}" NODECOMM_JOB=later NODECOMM_LOCAL_RANK=0 NODECOMM_LOCAL_SIZE=1 \
  "$BIN_REAL/allreduce_check" --counts 1,4099 --dtypes f32 >"$work/later.log" 2>&1 ||
  { cat "$work/later.log" >&2; fail "a later job failed"; }
kill -0 "$daemon_pid" 2>/dev/null || fail "nodecommd died"
kills=$(awk '$1 == "oom_kill" { print $2 }' "$cg/memory.oom_control")
[ "${kills:-0}" -eq 0 ] || fail "the cgroup's OOM killer ran $kills time(s)"
echo "hostile_memory: nodecommd alive, never OOM-killed; a later job exact;" \
  "peak usage $(cat "$cg/memory.max_usage_in_bytes") of $LIMIT bytes"
