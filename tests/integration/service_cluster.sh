#!/usr/bin/env bash
# nodecomm-launch --service and --attach: a simulated cluster of persistent service daemons
# (nodecommd --transport service, and ompi-server) that outlives the launcher, and jobs that
# attach to it.
#  1. --service up --nodes 3: one line per node, the state file, and a second `up` refused;
#  2. three one-node jobs at once: A on node 0, then while it runs B on node 1 (as the system
#     user nodecomm-test when this runs as root) and C on node 0 beside A; every result exact;
#  3. --service status: every node alive; a job that times out leaves the cluster up;
#  4. --service restart-node 2: a new daemon with a new pid, and a job on node 2 exact;
#  5. a multi-node job (nodes 0 and 1): exact once the daemons form groups; until then it must
#     fail fast with the daemon's refusal, and the test says it skipped that part;
#  6. --service down: no process, no state directory, no /dev/shm file of the cluster left;
#     a second `down` refused.
# Exits 77 (skipped) without ompi-server.
#   service_cluster.sh BIN_DIR
set -uo pipefail

BIN=${1:?usage: service_cluster.sh BIN_DIR}
LAUNCH=$BIN/nodecomm-launch
NAME=svctest$$
DIR=/tmp/nodecomm-cluster.$NAME
USER_NAME=nodecomm-test
REFUSAL="multi-node service jobs are not built yet"

command -v ompi-server >/dev/null || {
  echo "SKIP: ompi-server is not installed (Open MPI's rendezvous server, package openmpi-bin)"
  exit 77
}

work=$(mktemp -d /tmp/nodecomm-svctest.XXXXXX)
chmod 0755 "$work"
failures=0
pass() { echo "ok: $*"; }
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
# A failure after which nothing else can be checked: the EXIT trap still cleans up.
die() {
  fail "$*"
  for f in "$work"/*.out "$DIR"/*.log; do
    [ -f "$f" ] && tail -n 20 "$f" | sed "s|^|[$(basename "$f")] |"
  done
  exit 1
}
cleanup() {
  if [ -d "$DIR" ]; then
    timeout 60 "$LAUNCH" --service down --cluster "$NAME" >/dev/null 2>&1 ||
      echo "cleanup: --service down --cluster $NAME failed"
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# attach OUT SECONDS ARGS... -- PROGRAM...: one attached job, bounded twice (the launcher's
# --timeout SECONDS, and timeout).
attach() {
  local out=$1 seconds=$2
  shift 2
  timeout --kill-after=5 $((seconds + 30)) "$LAUNCH" --attach --cluster "$NAME" \
    --timeout "$seconds" "$@" >"$work/$out.out" 2>&1
}

# 1. Up.
# A generous client heartbeat timeout: on a machine others load, a rank can be starved of CPU
# for seconds, and what this test checks does not depend on how fast a lost rank is noticed.
timeout 90 "$LAUNCH" --service up --cluster "$NAME" --nodes 3 --daemon-arg=--config=none \
  --daemon-arg=--idle=backoff --daemon-arg=--client-timeout-sec=30 >"$work/up.out" 2>"$work/up.err" ||
  die "--service up exited $?: $(cat "$work/up.out" "$work/up.err")"
cat "$work/up.out"
[ "$(grep -Ec "^$NAME node [0-2]: pid [0-9]+, instance $NAME-node[0-2], runtime dir $DIR/node[0-2]$" \
  "$work/up.out")" = 3 ] && pass "up printed one line per node" || fail "up output: $(cat "$work/up.out")"
[ "$(stat -c %a "$DIR")" = 755 ] && pass "state directory is 0755" || fail "mode of $DIR: $(stat -c %a "$DIR")"
python3 -c "import json,sys; s=json.load(open('$DIR/state.json')); sys.exit(not (s['nodes']==3 and len(s['node_list'])==3 and s['ompi_server']['pid']>0))" &&
  pass "state.json names 3 nodes and ompi-server" || fail "state.json: $(cat "$DIR/state.json")"
mapfile -t pids < <(sed -n 's/.* node [0-9]: pid \([0-9]*\),.*/\1/p' "$work/up.out")
server_pid=$(python3 -c "import json; print(json.load(open('$DIR/state.json'))['ompi_server']['pid'])")
for p in "${pids[@]}" "$server_pid"; do
  kill -0 "$p" 2>/dev/null || fail "pid $p from up is not running after the launcher exited"
done
out=$(timeout 30 "$LAUNCH" --service up --cluster "$NAME" --nodes 1 2>&1)
rc=$?
[ "$rc" = 1 ] && grep -q "cluster '$NAME' is already up" <<<"$out" &&
  pass "a second up is refused, naming the cluster" || fail "second up: exit $rc: $out"

# 2. Three one-node jobs at once: A and C on node 0, B on node 1.
as_other=()
B_BIN=$BIN
if [ "$(id -u)" -eq 0 ] && command -v runuser >/dev/null && command -v useradd >/dev/null; then
  getent passwd "$USER_NAME" >/dev/null ||
    useradd -r -M -d /nonexistent -s /usr/sbin/nologin "$USER_NAME"
  source "$(dirname "$0")/other_uid_copy.sh"
  copy_for_other_uid "$work/prog" "$LAUNCH" "$BIN/nodecomm-bench" || die "cannot copy programs"
  as_other=(runuser -u "$USER_NAME" -- env LD_LIBRARY_PATH="$work/prog/lib")
  B_BIN=$work/prog/bin
  echo "job B runs as $USER_NAME (uid $(id -u "$USER_NAME"))"
else
  echo "job B runs as this uid (needs root, runuser and useradd for another)"
fi
# A runs long enough for B and C to start while it runs; they start once A's job has formed.
start=$(date +%s)
attach a 90 --nodes 1 --ranks-per-node 2 --on-nodes 0 --job jobA -- \
  "$BIN/nodecomm-bench" --op allreduce --sizes 8,4096,1M,16M --check --iters 40 --warmup 2 &
a=$!
for _ in $(seq 300); do
  grep -q "job jobA formed" "$DIR/node0.log" && break
  kill -0 $a 2>/dev/null || break
  sleep 0.1
done
grep -q "job jobA formed" "$DIR/node0.log" || fail "job A did not form within 30 s: $(cat "$work/a.out")"
timeout --kill-after=5 120 "${as_other[@]}" "$B_BIN/nodecomm-launch" --attach --cluster "$NAME" \
  --timeout 90 --nodes 1 --ranks-per-node 2 --on-nodes 1 -- \
  "$B_BIN/nodecomm-bench" --op allreduce --sizes 8,4096,1M --check --iters 3 --warmup 1 \
  >"$work/b.out" 2>&1 &
b=$!
attach c 90 --nodes 1 --ranks-per-node 3 --on-nodes 0 --job jobC -- \
  "$BIN/collectives_check" --counts 1,7,1000 &
c=$!
wait $a && [ "$(grep -Ec '^ +(8|4096|1048576|16777216) .* 0$' "$work/a.out")" = 4 ] &&
  pass "job A (node 0) exact" || fail "job A: $(tail -n 8 "$work/a.out")"
wait $b && [ "$(grep -Ec '^ +(8|4096|1048576) .* 0$' "$work/b.out")" = 3 ] &&
  pass "job B (node 1${as_other:+, as $USER_NAME}) exact" || fail "job B: $(tail -n 8 "$work/b.out")"
wait $c && grep -q "collectives_check rank 0/3: .* 0 wrong" "$work/c.out" &&
  pass "job C (node 0, beside A) exact" || fail "job C: $(tail -n 5 "$work/c.out")"
echo "jobs A, B and C took $(($(date +%s) - start)) s together"
# Node 0's daemon served A and C at once: C formed before A ended.
c_formed=$(grep -n "job jobC formed" "$DIR/node0.log" | cut -d: -f1)
a_ended=$(grep -n "job jobA ended" "$DIR/node0.log" | cut -d: -f1)
[ -n "$c_formed" ] && [ -n "$a_ended" ] && [ "$c_formed" -lt "$a_ended" ] &&
  pass "node 0 served jobs A and C at once" ||
  fail "jobs A and C did not overlap on node 0: $(grep -E 'jobA|jobC' "$DIR/node0.log")"

# 3. Status, and a job that times out: its ranks go, the daemons stay.
out=$(timeout 30 "$LAUNCH" --service status --cluster "$NAME")
rc=$?
echo "$out"
[ "$rc" = 0 ] && [ "$(printf '%s\n' "$out" | grep -Ec "^$NAME node [0-2]: pid [0-9]+ alive,")" = 3 ] &&
  grep -Eq "^$NAME rendezvous: ompi-server pid $server_pid alive" <<<"$out" &&
  pass "status: 3 nodes and ompi-server alive" || fail "status exit $rc: $out"
attach timeout 2 --nodes 1 --ranks-per-node 1 --on-nodes 1 -- sleep 100
rc=$?
[ "$rc" = 124 ] && pass "an attached job that times out exits 124" || fail "timeout job: exit $rc: $(cat "$work/timeout.out")"
for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || fail "daemon pid $p is gone after a job timed out"; done

# 4. Restart node 2 as systemd's Restart=on-failure would after a crash.
old=${pids[2]}
out=$(timeout 60 "$LAUNCH" --service restart-node 2 --cluster "$NAME" 2>&1)
rc=$?
new=$(printf '%s\n' "$out" | sed -n "s/^$NAME node 2: pid \([0-9]*\),.*/\1/p")
if [ "$rc" = 0 ] && [ -n "$new" ] && [ "$new" != "$old" ] && ! kill -0 "$old" 2>/dev/null &&
   kill -0 "$new" 2>/dev/null; then
  pass "restart-node 2: pid $old killed, pid $new running"
else
  fail "restart-node 2: exit $rc, old pid $old, new pid '${new}': $out"
fi
pids+=("$new")
grep -Eq "^$NAME node 2: pid $new alive," <<<"$(timeout 30 "$LAUNCH" --service status --cluster "$NAME")" &&
  pass "status shows the restarted node 2 alive" || fail "status after restart-node"
attach d 90 --nodes 1 --ranks-per-node 2 --on-nodes 2 -- "$BIN/collectives_check" --counts 1,7,1000 &&
  grep -q "collectives_check rank 0/2: .* 0 wrong" "$work/d.out" &&
  pass "job D on the restarted node 2 exact" || fail "job D: $(tail -n 5 "$work/d.out")"

# 5. A multi-node job on nodes 0 and 1.
start=$(date +%s.%N)
attach multi 90 --nodes 2 --ranks-per-node 2 --on-nodes 0,1 -- \
  "$BIN/collectives_check" --counts 1,7,1000
rc=$?
took=$(printf '%.2f' "$(awk -v a="$(date +%s.%N)" -v b="$start" 'BEGIN { printf "%.3f", a - b }')")
if grep -q "$REFUSAL" "$work/multi.out"; then
  [ "$rc" = 1 ] && awk -v x="$took" 'BEGIN { exit !(x < 20) }' &&
    pass "multi-node attach fails fast (${took} s) with the daemon's refusal" ||
    fail "multi-node attach: exit $rc after $took s: $(cat "$work/multi.out")"
  echo "multi-node attach: skipped (group formation not built)"
else
  [ "$rc" = 0 ] && grep -q "collectives_check rank 0/4: .* 0 wrong" "$work/multi.out" &&
    pass "multi-node job on nodes 0,1 exact (${took} s)" ||
    fail "multi-node attach: exit $rc: $(tail -n 8 "$work/multi.out")"
fi
for p in "${pids[@]:0:2}" "$new"; do kill -0 "$p" 2>/dev/null || fail "daemon pid $p is gone after the multi-node job"; done

# 6. Down: nothing left.
out=$(timeout 60 "$LAUNCH" --service down --cluster "$NAME" 2>&1)
rc=$?
echo "$out"
[ "$rc" = 0 ] && grep -q "^$NAME down: 3 daemons stopped, ompi-server stopped" <<<"$out" &&
  pass "down stopped 3 daemons and ompi-server" || fail "down: exit $rc: $out"
# Gone means reaped too (by whoever inherited them): a few moments at most.
for _ in $(seq 50); do
  left=""
  for p in "${pids[@]}" "$server_pid"; do [ -e "/proc/$p" ] && left+=" $p"; done
  [ -z "$left" ] && break
  sleep 0.1
done
[ -z "$left" ] && pass "no daemon or ompi-server process left" || fail "processes left:$left ($(ps -o pid,stat,comm -p "${left// /,}" 2>&1 | tail -n +2))"
left=$(pgrep -af "nodecomm-cluster\.$NAME" || true)
[ -z "$left" ] && pass "no process names the cluster" || fail "processes naming the cluster: $left"
[ ! -e "$DIR" ] && pass "state directory removed" || fail "$DIR left: $(ls -la "$DIR")"
left=$(ls /dev/shm | grep -F "nodecomm.$NAME-" || true)
[ -z "$left" ] && pass "no /dev/shm file of the cluster left" || fail "/dev/shm left: $left"
out=$(timeout 30 "$LAUNCH" --service down --cluster "$NAME" 2>&1)
rc=$?
[ "$rc" = 1 ] && grep -q "no simulated cluster '$NAME' is up" <<<"$out" &&
  pass "down on no cluster is refused" || fail "second down: exit $rc: $out"

echo "service_cluster: $failures failure(s)"
[ "$failures" -eq 0 ]
