#!/usr/bin/env bash
# nodecommctl against a live job: a 2x2 nodecomm-bench (4 MiB allreduces, until killed) under
# nodecomm-launch, whose daemons are instances launch-<pid>-node0 and -node1. While it runs:
#  1. list, status, clients, ops and counters (--json) parse and show the job (and the bench's
#     8-byte sync counted as completed inside a scheduling round, sched_eager);
#  2. `set chunk-size 64K` on node 0 mid-job: both daemons adopt it at their next scheduling
#     round (agreed-chunk-size), and the ring's slices per allreduce (ring_slices /
#     ring_allreduces over an interval) grow, while every allreduce still completes; and
#     `set latency-bytes` (the model's switch, small-bytes auto) reaches node 1 the same way;
#  3. set is refused for another uid (nobody) with exit 1 and "permission denied", but allowed
#     for a member of the admin-group (a second, loopback daemon with --admin-group nogroup);
#     refused for a bad value or a restart-only key with exit 1 naming them; usage errors exit 2;
#  4. metrics passes check_metrics.py (Prometheus text format);
#  5. trace start/stop writes Chrome trace-event JSON whose operations are the allreduces that
#     ran in between.
#   ctl_live.sh BIN_DIR
set -uo pipefail

BIN=${1:?usage: ctl_live.sh BIN_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
CTL=$BIN/nodecommctl
TEST_NAME=ctl_live
source "$(dirname "$0")/check_helpers.sh"

work=$(mktemp -d /tmp/nc-ctl.XXXXXX)
# The bench runs until it is killed. --sched-chunk-size=4M keeps every scheduled unit large
# enough that the ring cuts it into several slices, whatever the link speed.
"$BIN/nodecomm-launch" --timeout 200 --nodes 2 --ranks-per-node 2 --daemon-arg=--config=none \
  --daemon-arg=--sched-chunk-size=4M -- \
  "$BIN/nodecomm-bench" --op allreduce --sizes 4M --iters 100000000 --warmup 0 \
  >"$work/launch.log" 2>&1 &
lp=$!
cleanup() {
  kill -TERM "$lp" 2>/dev/null
  wait "$lp" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
I0=launch-$lp-node0
I1=launch-$lp-node1

running=0
for _ in $(seq 300); do
  n=$("$CTL" status --instance "$I1" --json 2>/dev/null | json 'd["ops_completed"]' 2>/dev/null)
  if [ -n "$n" ] && [ "$n" -gt 5 ]; then
    running=1
    break
  fi
  kill -0 "$lp" 2>/dev/null || break
  sleep 0.2
done
if [ "$running" -ne 1 ]; then
  fail "the job did not start: $(tail -20 "$work/launch.log")"
  exit 1
fi
pass "job running on $I0 and $I1"

# 1. The read-only views.
"$CTL" list --json >"$work/list.json" || fail "list exit $?"
[ "$(json "sorted(i['instance'] for i in d if i.get('job') == 'launch-$lp' and i['state'] == 'running')" <"$work/list.json")" = "['$I0', '$I1']" ] &&
  pass "list shows both daemons running the job" || fail "list: $(cat "$work/list.json")"
grep -q "^$I0 .*running" <<<"$("$CTL" list)" && pass "list (text)" || fail "list text: $("$CTL" list)"

"$CTL" status --instance "$I0" --json >"$work/status.json" || fail "status exit $?"
[ "$(json '(d["state"], d["job"]["state"], d["job"]["world_size"], d["job"]["node_count"], d["job"]["attached"], d["clients"])' <"$work/status.json")" = "('running', 'running', 4, 2, 2, 2)" ] &&
  pass "status: running job, 4 ranks on 2 nodes, 2 attached here" || fail "status: $(cat "$work/status.json")"
grep -q "^job .*'launch-$lp' running: 4 ranks on 2 nodes" <<<"$("$CTL" status --instance "$I0")" &&
  pass "status (text)" || fail "status text: $("$CTL" status --instance "$I0")"
[ "$(json 'd["heartbeat_age_s"] < 2 and d["last_progress_age_s"] < 2' <"$work/status.json")" = True ] &&
  pass "heartbeat and last progress are recent" || fail "liveness: $(cat "$work/status.json")"

"$CTL" clients --instance "$I1" --json >"$work/clients.json" || fail "clients exit $?"
[ "$(json 'sorted((c["local_rank"], c["world_rank"]) for c in d["clients"] if c["in_job"])' <"$work/clients.json")" = "[(0, 2), (1, 3)]" ] &&
  pass "clients on node 1: local ranks 0,1 = world ranks 2,3" || fail "clients: $(cat "$work/clients.json")"
[ "$(json 'all(c["ops_completed"] > 0 and c["state"] == "joined" and c["last_seen_age_s"] < 5 for c in d["clients"] if c["in_job"])' <"$work/clients.json")" = True ] &&
  pass "clients joined, completing operations, seen recently" || fail "clients: $(cat "$work/clients.json")"

"$CTL" ops --instance "$I0" --json >"$work/ops.json" || fail "ops exit $?"
[ "$(json 'd["job"] == "launch-'"$lp"'" and d["total"] >= len(d["ops"]) and all(o["collective"] == "allreduce" and o["bytes"] == 4194304 for o in d["ops"])' <"$work/ops.json")" = True ] &&
  pass "ops: $(json 'd["total"]' <"$work/ops.json") allreduce(s) of 4 MiB in flight" || fail "ops: $(cat "$work/ops.json")"
"$CTL" ops --instance "$I0" >/dev/null && pass "ops (text)" || fail "ops text"

"$CTL" counters --instance "$I0" --json >"$work/counters.json" || fail "counters exit $?"
[ "$(json 'd["collectives"]["allreduce"]["ops"] > 0 and d["collectives"]["allreduce"]["errors"] == 0 and d["totals"]["ring_allreduces"] > 0' <"$work/counters.json")" = True ] &&
  pass "counters: allreduces completed, none failed, ring in use" || fail "counters: $(cat "$work/counters.json")"
# The bench's 8-byte sync before its timed loop is small enough to ride in a scheduling round.
[ "$(json 'd["totals"]["sched_eager"] > 0' <"$work/counters.json")" = True ] &&
  pass "counters: the 8-byte sync completed inside a scheduling round (sched_eager)" ||
  fail "counters: no sched_eager: $(cat "$work/counters.json")"

# Two instances run and neither is 'default' (unless the node runs the service): a command
# without --instance is a usage error naming both.
if [ "$("$CTL" list --json | json 'any(i["instance"] == "default" and i["state"] == "running" for i in d)')" = False ]; then
  err=$(env -u NODECOMM_INSTANCE "$CTL" status 2>&1)
  rc=$?
  [ "$rc" -eq 2 ] && [[ $err == *"$I0"* ]] && [[ $err == *"$I1"* ]] && [[ $err == *--instance* ]] &&
    pass "status without --instance among several: exit 2 naming them" || fail "status among several: exit $rc: $err"
fi
"$CTL" --json --instance "$I1" ops >/dev/null && pass "options before the command (ops)" ||
  fail "--json --instance before ops"

# 2. Slices per ring allreduce before and after `set chunk-size 64K`.
ratio() { # prints ring_slices/ring_allreduces over a 2 s interval, and the chunk sizes
  "$CTL" counters --instance "$1" --watch 2 --count 2 --json | tail -1 |
    json '"%.2f %s %s" % (d["rates_per_s"]["ring_slices"] / max(d["rates_per_s"]["ring_allreduces"], 1e-9), d["chunk_size"], d["agreed_chunk_size"])'
}
read -r before chunk_before agreed_before <<<"$(ratio "$I0")"
[ "$chunk_before" = 512K ] && [ "$agreed_before" = 512K ] && pass "chunk-size 512K before" ||
  fail "chunk-size before: $chunk_before / $agreed_before"
out=$("$CTL" set chunk-size 64K --instance "$I0" 2>&1) && pass "set chunk-size 64K: $out" ||
  fail "set chunk-size: $out"
sleep 1
read -r after chunk_after agreed_after <<<"$(ratio "$I0")"
node1_agreed=$("$CTL" get agreed-chunk-size --instance "$I1")
[ "$chunk_after" = 64K ] && [ "$agreed_after" = 64K ] && [ "$node1_agreed" = 64K ] &&
  pass "chunk-size 64K on node 0, agreed 64K on both nodes" ||
  fail "after set: node 0 $chunk_after / $agreed_after, node 1 agreed $node1_agreed"
echo "ctl_live: ring slices per allreduce: $before with 512K, $after with 64K"
python3 -c "import sys; sys.exit(0 if float('$after') >= 2 * float('$before') else 1)" &&
  pass "slices per ring allreduce grew from $before to $after" ||
  fail "slices per ring allreduce did not grow: $before -> $after"
[ "$("$CTL" get chunk-size --instance "$I1")" = 512K ] && pass "node 1's own setting is unchanged" ||
  fail "node 1's chunk-size changed"
[ "$("$CTL" counters --instance "$I0" --json | json 'd["collectives"]["allreduce"]["errors"]')" = 0 ] &&
  pass "no allreduce failed across the change" || fail "allreduces failed after the change"
grep -qx "chunk-size = 64K" <<<"$("$CTL" get --instance "$I0")" && pass "get (all settings)" || fail "get"
# The model's switch (small-bytes auto) follows node 0's latency-bytes on both nodes.
[ "$("$CTL" get small-bytes --instance "$I1")" = auto ] && pass "small-bytes auto by default" ||
  fail "small-bytes is not auto by default"
"$CTL" set latency-bytes 32K --instance "$I0" >/dev/null && sleep 1 &&
  [ "$("$CTL" get agreed-latency-bytes --instance "$I1")" = 32K ] &&
  pass "set latency-bytes 32K on node 0, agreed on node 1" || fail "latency-bytes not agreed"
out=$("$CTL" set small-bytes auto --instance "$I0" 2>&1) && pass "set small-bytes auto: $out" ||
  fail "set small-bytes auto: $out"
# Holding for urgent operations up to the model's node count (kHoldMaxNodes), settable live.
[ "$("$CTL" get sched-hold-max-nodes --instance "$I1")" = 128 ] &&
  pass "sched-hold-max-nodes 128 by default" ||
  fail "sched-hold-max-nodes is not 128 by default"
"$CTL" set sched-hold-max-nodes 1 --instance "$I0" >/dev/null &&
  [ "$("$CTL" get sched-hold-max-nodes --instance "$I0")" = 1 ] &&
  pass "set sched-hold-max-nodes 1" || fail "set sched-hold-max-nodes"
[ "$("$CTL" get sched-hold-stream-us --instance "$I1")" = 2000 ] &&
  "$CTL" set sched-hold-stream-us 0 --instance "$I0" >/dev/null &&
  [ "$("$CTL" get sched-hold-stream-us --instance "$I0")" = 0 ] &&
  pass "sched-hold-stream-us 2000 by default, set to 0" || fail "sched-hold-stream-us"

# 3. Refusals and usage errors.
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null; then
  rt=$(json 'd["runtime_dir"]' <"$work/status.json")
  chmod o+x "$(dirname "$rt")"  # the launcher's mkdtemp directory, so nobody reaches the socket
  # nobody runs a copy of nodecommctl: the checkout may be out of its reach (root's 0700 home).
  source "$HERE/../integration/other_uid_copy.sh"
  chmod 0755 "$work"
  copy_for_other_uid "$work/other" "$CTL" || fail "cannot copy nodecommctl to $work/other"
  OCTL=$work/other/bin/nodecommctl
  err=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$OCTL" set chunk-size 128K --instance "$I0" 2>&1 >/dev/null)
  rc=$?
  # Refused before it reaches the daemon: nodecommctl finds the socket in the counters, which
  # uid 65534 may not read (0600).
  [ "$rc" -eq 1 ] && grep -q "^nodecommctl: permission denied reading /dev/shm/nodecomm.$I0.counters" <<<"$err" &&
    pass "set refused for uid 65534: $err" || fail "set as nobody: exit $rc: $err"
  [ "$("$CTL" get chunk-size --instance "$I0")" = 64K ] && pass "the refused set changed nothing" ||
    fail "the refused set changed chunk-size"
  # The counters name other users' jobs: 0600 without an admin-group (issue 16, point 7).
  err=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$OCTL" status --instance "$I0" 2>&1 >/dev/null)
  [ $? -eq 1 ] && grep -q "permission denied reading /dev/shm/nodecomm.$I0.counters" <<<"$err" &&
    pass "status refused for uid 65534 (counters are 0600): $err" || fail "status as nobody: $err"
  # admin-group: a member (primary group, or supplementary via SO_PEERGROUPS) may set.
  if getent group nogroup >/dev/null; then
    gid=$(getent group nogroup | cut -d: -f3)
    chmod 0755 "$work"
    "$BIN/nodecommd" --config none --transport loopback --instance "ctl-admin-$$" \
      --runtime-dir "$work/admin-rt" --cores none --idle backoff --admin-group nogroup \
      >"$work/admin.log" 2>&1 &
    admin_pid=$!
    for _ in $(seq 100); do [ -f "$work/admin-rt/nodecommd.ready" ] && break; sleep 0.1; done
    as_member() { setpriv --reuid=65534 --regid=0 --groups="$gid" "$OCTL" "$@" --instance "ctl-admin-$$"; }
    as_other() { setpriv --reuid=65534 --regid=0 --clear-groups "$OCTL" "$@" --instance "ctl-admin-$$"; }
    as_member set log-level debug >/dev/null && pass "admin-group member (supplementary group) may set" ||
      fail "admin-group member refused"
    as_member status >/dev/null && pass "admin-group member may read the counters (0640)" ||
      fail "admin-group member cannot read the counters"
    err=$(as_other set log-level info 2>&1)
    [ $? -eq 1 ] && grep -q "permission denied reading /dev/shm/nodecomm.ctl-admin-$$.counters" <<<"$err" &&
      pass "non-member refused (cannot read the 0640 counters)" || fail "non-member: $err"
    kill -TERM "$admin_pid"
    wait "$admin_pid"
  fi
else
  echo "ctl_live: skipped the second-uid check (needs root and setpriv)"
fi
err=$("$CTL" set chunk-size 12Q --instance "$I0" 2>&1)
rc=$?
[ "$rc" -eq 1 ] && grep -q "chunk-size: bad value '12Q': expected a size" <<<"$err" &&
  pass "bad value refused: $err" || fail "bad value: exit $rc: $err"
err=$("$CTL" set lanes 8 --instance "$I0" 2>&1)
rc=$?
[ "$rc" -eq 1 ] && grep -q "needs a restart" <<<"$err" && pass "restart-only key refused" ||
  fail "lanes: exit $rc: $err"
err=$("$CTL" set chunk-size 2>&1)
rc=$?
[ "$rc" -eq 2 ] && [ "$(echo "$err" | wc -l)" -eq 1 ] && grep -q "^nodecommctl: " <<<"$err" &&
  pass "usage error exits 2 with one line" || fail "usage: exit $rc: $err"
err=$("$CTL" status --instance no-such-instance 2>&1)
rc=$?
[ "$rc" -eq 1 ] && grep -q "^nodecommctl: instance 'no-such-instance' is not running" <<<"$err" &&
  pass "missing daemon exits 1" || fail "missing daemon: exit $rc: $err"

# 4. Prometheus text format.
"$CTL" metrics --instance "$I0" >"$work/metrics.txt" || fail "metrics exit $?"
python3 "$HERE/check_metrics.py" <"$work/metrics.txt" && pass "metrics pass the format check" ||
  fail "metrics format"
grep -q "^nodecomm_op_latency_seconds_bucket{instance=\"$I0\",node=\"0\",collective=\"allreduce\",le=\"+Inf\"}" \
  "$work/metrics.txt" && pass "allreduce latency histogram exported" || fail "no latency histogram"
"$CTL" metrics --all | python3 "$HERE/check_metrics.py" >/dev/null && pass "metrics --all" ||
  fail "metrics --all"

# 5. A trace of about 2 s.
ops_before=$("$CTL" status --instance "$I0" --json | json 'd["ops_completed"]')
"$CTL" trace start --instance "$I0" && pass "trace start" || fail "trace start"
err=$("$CTL" trace start --instance "$I0" 2>&1)
[ $? -eq 1 ] && grep -q "already being recorded" <<<"$err" && pass "a second trace start is refused" ||
  fail "second trace start: $err"
sleep 2
"$CTL" trace stop "$work/trace.json" --instance "$I0" && pass "trace stop" || fail "trace stop"
ops_after=$("$CTL" status --instance "$I0" --json | json 'd["ops_completed"]')
python3 - "$work/trace.json" "$ops_before" "$ops_after" <<'EOF' && pass "trace matches the run" || fail "trace"
import json, sys
d = json.load(open(sys.argv[1]))
before, after = int(sys.argv[2]), int(sys.argv[3])
events = d["traceEvents"]
ops = [e for e in events if e.get("cat") == "operation"]
units = [e for e in events if e.get("cat") in ("chunk", "fused", "whole")]
assert all(e["ph"] in ("X", "M") for e in events), "unexpected phases"
assert all(e["dur"] >= 0 and isinstance(e["ts"], (int, float)) for e in ops + units)
assert ops, "no operations traced"
assert all(e["name"].startswith("allreduce") and e["args"]["bytes"] == 4194304 and
           e["args"]["status"] == "ok" and e["args"]["comm"] == 0 for e in ops), ops[:3]
seqs = [e["args"]["seq"] for e in ops]
assert len(set(seqs)) == len(seqs), "an operation traced twice"
assert max(seqs) - min(seqs) + 1 == len(seqs), "operations missing in the middle"
# Every traced operation completed between the two status reads; most of those were traced
# (the reads and the start/stop requests take a little of the interval).
assert len(ops) <= after - before and len(ops) >= (after - before) // 4, (len(ops), before, after)
assert units and all(u["args"]["seq"] in set(seqs) | set(range(min(seqs) - 64, max(seqs) + 64)) for u in units)
print(f"ctl_live: trace: {len(ops)} operations (seq {min(seqs)}..{max(seqs)}), {len(units)} transfers; "
      f"{after - before} completed meanwhile")
EOF

kill -0 "$lp" 2>/dev/null && pass "the job is still running" || fail "the job ended early: $(tail -20 "$work/launch.log")"
finish_checks
