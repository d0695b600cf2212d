#!/usr/bin/env bash
# Multi-node jobs on a simulated cluster of persistent service daemons (issue 19's "done
# when"): nodecomm-launch --service up --nodes 3, at 1 Gbit/s (--netsim) where this runs as
# root and network namespaces can be made, else on loopback.
#  1. job A on nodes 0-1 (2 ranks each) and job B on nodes 1-2 (1 and 3 ranks, as the system
#     user nodecomm-test when root) run the collectives check at once; a third job C (nodes 0
#     and 2) starts while they run; all exact;
#  2. A and B soak (every result checked); one rank of A is SIGKILLed: A fails within 5 s
#     naming the lost rank; B stays exact and no iteration of B takes over 1 s; then a new job
#     on nodes 0-1 is exact; nodecommctl counters on node 1 then shows the groups it left
#     kept (comms_retired) and, within 30 s, all of them freed;
#  3. a job on nodes 1-2 and one on nodes 0-1 soak; node 2's daemon is SIGKILLed: the job on
#     nodes 1-2 fails within 5 s naming the lost node, the one on nodes 0-1 stays exact; node
#     2's daemon is restarted as systemd would, and within 10 s a job across nodes 0-2 is exact.
# Exits 77 (skipped) without ompi-server.
#   service_jobs.sh BIN_DIR
set -uo pipefail

BIN=${1:?usage: service_jobs.sh BIN_DIR}
LAUNCH=$BIN/nodecomm-launch
NAME=svcjobs$$
USER_NAME=nodecomm-test

command -v ompi-server >/dev/null || {
  echo "SKIP: ompi-server is not installed (Open MPI's rendezvous server, package openmpi-bin)"
  exit 77
}

work=$(mktemp -d /tmp/nodecomm-svcjobs.XXXXXX)
chmod 0755 "$work"
fail() {
  echo "service_jobs: FAILED: $*" >&2
  for f in "$work"/*.out /tmp/nodecomm-cluster."$NAME"/*.log; do
    [ -f "$f" ] && tail -n 25 "$f" | sed "s|^|[$(basename "$f")] |" >&2
  done
  exit 1
}
cleanup() {
  [ -d "/tmp/nodecomm-cluster.$NAME" ] &&
    timeout 60 "$LAUNCH" --service down --cluster "$NAME" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
source "$(dirname "$0")/other_uid_copy.sh"

# Simulated 1 Gbit/s links where this machine allows them, else loopback.
source "$(dirname "$0")/netsim_probe.sh"
netsim=(--netsim 1gbit)
if netsim_unavailable >/dev/null; then netsim=(); fi
# Job B as another uid where this runs as root.
as_other=()
OBIN="$BIN"
if [ "$(id -u)" -eq 0 ] && command -v runuser >/dev/null && command -v useradd >/dev/null; then
  getent passwd "$USER_NAME" >/dev/null ||
    useradd -r -M -d /nonexistent -s /usr/sbin/nologin "$USER_NAME"
  copy_for_other_uid "$work/prog" "$BIN/nodecomm-launch" "$BIN/nodecomm-bench" \
    "$BIN/collectives_check" || fail "cannot copy the programs for $USER_NAME"
  as_other=(runuser -u "$USER_NAME" -- env LD_LIBRARY_PATH="$work/prog/lib")
  OBIN="$work/prog/bin"
fi
echo "service_jobs: cluster of 3 ${netsim[*]:-on loopback}; job B as ${as_other:+$USER_NAME}"

timeout 120 "$LAUNCH" --service up --nodes 3 --cluster "$NAME" "${netsim[@]}" \
  --daemon-arg=--config=none >"$work/up.out" 2>&1 || fail "--service up failed"

# attach OUT BINDIR [RUNNER...] :: LAUNCH-ARGS... -- PROGRAM...: one job in the background,
# its launcher's pid in $! (RUNNER may hold a "--" itself: runuser's).
attach() {
  local out=$1 bin=$2
  shift 2
  local runner=()
  while [ "$1" != :: ]; do runner+=("$1"); shift; done
  shift
  timeout --kill-after=5 150 "${runner[@]}" "$bin/nodecomm-launch" --attach --cluster "$NAME" \
    --timeout 120 "$@" >"$work/$out.out" 2>&1 &
}
# rank_pid JOB NODE LOCAL: the pid of that rank (from its environment).
rank_pid() {
  local p
  for p in $(pgrep -f nodecomm-bench); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null |
      grep -qx "NODECOMM_JOB=$1" || continue
    grep -qx "NODECOMM_NODE=$2" < <(tr '\0' '\n' <"/proc/$p/environ") || continue
    grep -qx "NODECOMM_LOCAL_RANK=$3" < <(tr '\0' '\n' <"/proc/$p/environ") && echo "$p" && return
  done
}
# soak BINDIR SECONDS [STOP]: a soak's command; with STOP it also ends once $work/STOP exists
# (the job beside a failure ends a second after the failure has been checked).
soak() {
  echo "$1/nodecomm-bench" --soak "$2" --soak-no-memory-check --soak-max-bytes 1M \
    ${3:+--soak-stop-file "$work/$3"}
}
longest_ok() {
  local v
  v=$(sed -n 's/.*longest iteration \([0-9.]*\) ms.*/\1/p' "$work/$1.out" | head -n 1)
  [ -n "$v" ] || fail "$1 printed no longest iteration"
  echo "service_jobs: $1: longest iteration $v ms"
  awk -v x="$v" 'BEGIN { exit !(x < 1000) }' || fail "an iteration of $1 took $v ms (limit 1 s)"
}
elapsed_since() { awk -v a="$(date +%s.%N)" -v b="$1" 'BEGIN { printf "%.3f", a - b }'; }

# 1. A (nodes 0-1) and B (nodes 1-2) at once, C (nodes 0, 2) while they run.
attach A "$BIN" :: --job jobA --nodes 2 --ranks-per-node 2 --on-nodes 0,1 \
  -- "$BIN/collectives_check"
a=$!
attach B "$OBIN" "${as_other[@]}" :: --job jobB --nodes 2 --ranks-per-node 1,3 --on-nodes 1,2 \
  -- "$OBIN/collectives_check"
b=$!
sleep 1
attach C "$BIN" :: --job jobC --nodes 2 --ranks-per-node 1 --on-nodes 0,2 \
  -- "$BIN/collectives_check" --counts 1,1000
c=$!
if ! wait "$a"; then
  # Until the daemons form multi-node groups they refuse such jobs at once.
  if grep -q "multi-node service jobs are not built yet" "$work/A.out"; then
    echo "service_jobs: skipped: the service daemons do not form multi-node groups yet"
    exit 77
  fi
  fail "job A (nodes 0-1) was not exact"
fi
wait "$b" || fail "job B (nodes 1-2, another uid) was not exact"
wait "$c" || fail "job C (nodes 0 and 2, started while A and B ran) was not exact"
for j in A B C; do
  echo "service_jobs: job $j: $(grep -m1 'collectives_check rank 0' "$work/$j.out")"
done

# 2. A rank of a job is killed; the other job on its nodes carries on.
attach A2 "$BIN" :: --job jobA2 --nodes 2 --ranks-per-node 2 --on-nodes 0,1 -- $(soak "$BIN" 60)
a2=$!
attach B2 "$OBIN" "${as_other[@]}" :: --job jobB2 --nodes 2 --ranks-per-node 1,3 \
  --on-nodes 1,2 -- $(soak "$OBIN" 15 stopB2)
b2=$!
victim=""
for _ in $(seq 100); do
  victim=$(rank_pid jobA2 1 1)
  [ -n "$victim" ] && break
  sleep 0.1
done
[ -n "$victim" ] || fail "rank 3 of job A2 (node 1, local rank 1) never started"
sleep 4
kill -KILL "$victim"
killed=$(date +%s.%N)
if wait "$a2"; then fail "job A2 succeeded although its rank 3 was killed"; fi
took=$(elapsed_since "$killed")
echo "service_jobs: job A2 ended $took s after its rank 3 was killed"
# A surviving rank's own error (not the launcher's line about the rank it saw die) names it.
named='^nodecomm-bench: rank [0-2]: error: .*rank 3'
grep -Eq "$named" "$work/A2.out" || fail "no surviving rank of job A2 named rank 3 in its error"
echo "service_jobs: A2's error: $(grep -m1 -E "$named" "$work/A2.out" | cut -c1-240)"
awk -v x="$took" 'BEGIN { exit !(x < 8) }' || fail "job A2 took $took s to end (its ranks: 5 s)"
sleep 1
touch "$work/stopB2"
wait "$b2" || fail "job B2 failed or was not exact after A2 lost a rank"
grep -q "wrong elements (all ranks): 0" "$work/B2.out" || fail "job B2 printed no clean soak"
longest_ok B2
attach C2 "$BIN" :: --job jobC2 --nodes 2 --ranks-per-node 2 --on-nodes 0,1 \
  -- "$BIN/collectives_check" --counts 1,1000
wait $! || fail "job C2 on nodes 0-1 after A2's failure was not exact"
echo "service_jobs: job C2 on nodes 0-1 exact after A2's failure"

# The groups a daemon left are kept (retired) until no late message arrived in them for twice
# the peer timeout (6 s here), then freed: nodecommctl counters shows them while kept, and
# what late messages it dropped (A2's, in most runs).
ctl_total() {  # NODE FIELD
  "$BIN/nodecommctl" --instance "$NAME-node$1" --json counters 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["totals"][sys.argv[1]])' "$2" 2>/dev/null
}
seen=
deadline=$(($(date +%s) + 10))
while [ "$(date +%s)" -lt "$deadline" ]; do
  r=$(ctl_total 1 comms_retired)
  [ "${r:-0}" -gt 0 ] && { seen=$r; break; }
  sleep 0.2
done
[ -n "$seen" ] || fail "nodecommctl counters on node 1 never showed C2's retired communicators"
left=$("$BIN/nodecommctl" --instance "$NAME-node1" status 2>&1 | grep '^left ')
[ -n "$left" ] || fail "nodecommctl status on node 1 has no 'left' line while groups are kept"
echo "service_jobs: node 1's status: $left"
deadline=$(($(date +%s) + 30))
while r=$(ctl_total 1 comms_retired) && [ "$r" != 0 ] && [ "$(date +%s)" -lt "$deadline" ]; do
  sleep 0.5
done
[ "$r" = 0 ] || fail "node 1 still kept $r retired communicator(s) 30 s after C2"
echo "service_jobs: node 1 kept $seen retired communicator(s) after C2, freed them all;" \
  "late messages dropped: $(ctl_total 1 late_messages_dropped)"

# 3. Node 2's daemon is killed; the job away from it carries on; node 2 rejoins.
attach D "$BIN" :: --job jobD --nodes 2 --ranks-per-node 2 --on-nodes 0,1 -- $(soak "$BIN" 15 stopD)
d=$!
attach E "$BIN" :: --job jobE --nodes 2 --ranks-per-node 1,2 --on-nodes 1,2 -- $(soak "$BIN" 60)
e=$!
sleep 4
node2=$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s["node_list"][2]["pid"])' \
  "/tmp/nodecomm-cluster.$NAME/state.json") || fail "cannot read node 2's pid from the state"
kill -KILL "$node2"
killed=$(date +%s.%N)
if wait "$e"; then fail "job E succeeded although node 2's daemon was killed"; fi
took=$(elapsed_since "$killed")
echo "service_jobs: job E (nodes 1-2) ended $took s after node 2's daemon was killed"
echo "service_jobs: E's error: $(grep -m1 -iE 'node|daemon' "$work/E.out" | cut -c1-240)"
awk -v x="$took" 'BEGIN { exit !(x < 8) }' || fail "job E took $took s to end (its ranks: 5 s)"
sleep 1
touch "$work/stopD"
wait "$d" || fail "job D (nodes 0-1) was disturbed by node 2's loss"
grep -q "wrong elements (all ranks): 0" "$work/D.out" || fail "job D printed no clean soak"
longest_ok D
restarted=$(date +%s.%N)
timeout 60 "$LAUNCH" --service restart-node 2 --cluster "$NAME" >"$work/restart.out" 2>&1 ||
  fail "--service restart-node 2 failed"
attach F "$BIN" :: --job jobF --nodes 3 --ranks-per-node 1,2,1 -- \
  "$BIN/collectives_check" --counts 1,1000
wait $! || fail "job F across nodes 0-2 after node 2's restart was not exact"
took=$(elapsed_since "$restarted")
echo "service_jobs: job F across nodes 0-2 exact, done $took s after node 2's restart began"
timeout 60 "$LAUNCH" --service down --cluster "$NAME" >/dev/null 2>&1 || fail "--service down failed"
echo "service_jobs: passed"
