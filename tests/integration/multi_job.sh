#!/usr/bin/env bash
# Several jobs at once on one nodecommd (loopback transport, as the system service runs it),
# each with every result checked (nodecomm-bench --soak: mixed collectives, dtypes, sizes,
# communicators and buffers):
#  1. job A (root, 2 ranks) and job B (3 ranks, as the system user nodecomm-test when this runs
#     as root) run at once; job C (2 ranks, collectives_check) starts while they run and is
#     exact;
#  2. one rank of A is SIGKILLed: A's other rank fails within 5 s with an error naming the
#     lost rank; B carries on, exact, and no iteration of B takes more than 1 s;
#  3. after that, job D runs exact on the same daemon, which is still up.
#   multi_job.sh BIN_DIR
set -euo pipefail

BIN=${1:?usage: multi_job.sh BIN_DIR}
USER_NAME=nodecomm-test

fail() {
  echo "multi_job: FAILED: $*" >&2
  for f in "$work"/*.out; do [ -f "$f" ] && sed "s|^|[$(basename "$f")] |" "$f" >&2; done
  [ -f "${work:-}/daemon.log" ] && tail -n 60 "$work/daemon.log" | sed 's/^/[nodecommd] /' >&2
  exit 1
}

work=$(mktemp -d /tmp/nodecomm-multijob.XXXXXX)
chmod 0755 "$work"
rt="$work/rt"
daemon_pid=""
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  stop_standalone_daemon
  rm -rf "$work"
}
trap cleanup EXIT
source "$(dirname "$0")/standalone_daemon.sh"
source "$(dirname "$0")/other_uid_copy.sh"

# Job B runs as another uid where this runs as root and can switch to one.
as_other=()
BBIN="$BIN"
B_LIB=()
if [ "$(id -u)" -eq 0 ] && command -v runuser >/dev/null && command -v useradd >/dev/null; then
  getent passwd "$USER_NAME" >/dev/null ||
    useradd -r -M -d /nonexistent -s /usr/sbin/nologin "$USER_NAME"
  copy_for_other_uid "$work/prog" "$BIN/nodecomm-bench" || fail "cannot copy nodecomm-bench"
  as_other=(runuser -u "$USER_NAME" --)
  BBIN="$work/prog/bin"
  B_LIB=(LD_LIBRARY_PATH="$work/prog/lib")
  echo "multi_job: job B runs as $USER_NAME (uid $(id -u "$USER_NAME"))"
else
  echo "multi_job: job B runs as this uid (needs root, runuser and useradd for another)"
fi

start_standalone_daemon "$rt" "multijob.$$" --log-level info
base_env=(env NODECOMM_RUNTIME_DIR="$rt" NODECOMM_TIMEOUT_SEC=30 NODECOMM_IDLE=backoff)
soak=(--soak-no-memory-check --soak-max-bytes 256K)

# start_rank OUT JOB RANK SIZE PROGRAM ARGS...: one rank in the background, its pid in pids.
start_rank() {
  local out=$1 job=$2 rank=$3 size=$4
  shift 4
  timeout --kill-after=5 90 "${base_env[@]}" NODECOMM_JOB="$job" NODECOMM_LOCAL_RANK="$rank" \
    NODECOMM_LOCAL_SIZE="$size" "$@" >"$work/$out.out" 2>&1 &
  pids+=($!)
}

# 1. A and B at once, then C while they run.
start_rank a0 jobA 0 2 "$BIN/nodecomm-bench" --soak 40 "${soak[@]}"
a0=$!
start_rank a1 jobA 1 2 "$BIN/nodecomm-bench" --soak 40 "${soak[@]}"
a1=$!
b=()
for r in 0 1 2; do
  start_rank "b$r" jobB "$r" 3 "${as_other[@]}" "${base_env[@]}" "${B_LIB[@]}" \
    "$BBIN/nodecomm-bench" --soak 12 "${soak[@]}"
  b+=($!)
done
sleep 2
c=()
for r in 0 1; do
  start_rank "c$r" jobC "$r" 2 "$BIN/collectives_check" --counts 1,7,1000
  c+=($!)
done
for p in "${c[@]}"; do wait "$p" || fail "job C (started while A and B ran) was not exact"; done
grep -q "0 wrong" "$work/c0.out" || fail "job C printed no result"
echo "multi_job: job C, started while A and B ran: $(grep -m1 'collectives_check rank 0' "$work/c0.out")"

# 2. Kill one rank of A: its other rank hears of it, B does not.
kill -0 "$a1" 2>/dev/null || fail "job A's rank 1 ended before it could be killed"
pkill -KILL -P "$a1"  # the rank, not the timeout that runs it
killed=$(date +%s.%N)
if wait "$a0"; then fail "job A's rank 0 succeeded although its rank 1 was killed"; fi
took=$(awk -v a="$(date +%s.%N)" -v b="$killed" 'BEGIN { printf "%.3f", a - b }')
echo "multi_job: job A's rank 0 failed $took s after its rank 1 was killed"
awk -v x="$took" 'BEGIN { exit !(x < 5) }' || fail "job A's rank 0 took $took s to fail (limit 5 s)"
grep -Eq "rank 1|local rank 1" "$work/a0.out" || fail "job A's error does not name rank 1"
echo "multi_job: job A's error: $(grep -m1 -E 'rank 1' "$work/a0.out")"
for p in "${b[@]}"; do wait "$p" || fail "job B failed or was not exact after A lost a rank"; done
grep -q "wrong elements (all ranks): 0" "$work/b0.out" || fail "job B printed no clean soak line"
longest=$(sed -n 's/.*longest iteration \([0-9.]*\) ms.*/\1/p' "$work/b0.out")
[ -n "$longest" ] || fail "job B printed no longest iteration"
echo "multi_job: job B: $(grep -m1 'iterations' "$work/b0.out" | sed 's/^# //'); longest" \
  "iteration $longest ms"
awk -v x="$longest" 'BEGIN { exit !(x < 1000) }' || fail "an iteration of job B took $longest ms (limit 1 s)"

# 3. A new job afterwards, on the same daemon.
d=()
for r in 0 1; do
  start_rank "d$r" jobD "$r" 2 "$BIN/collectives_check" --counts 1,7,1000
  d+=($!)
done
for p in "${d[@]}"; do wait "$p" || fail "job D (after A's failure) was not exact"; done
kill -0 "$daemon_pid" 2>/dev/null || fail "nodecommd is gone"
echo "multi_job: job D exact afterwards; nodecommd still up"
echo "multi_job: passed"
