#!/usr/bin/env bash
# nodecommctl and a daemon serving two jobs at once (counters layout 3). A loopback nodecommd
# of its own runs job a (2 ranks) and job b (1 rank), each a nodecomm-bench --soak. While both
# run:
#  1. `jobs` lists a and b: running, 2/2 and 1/1 ranks attached, node 0/1, world sizes 2 and 1,
#     this uid as owner, operations completed; `jobs --json` parses;
#  2. `clients --job a` shows a's two ranks and nothing else; `ops --job b` answers with b's
#     operations only;
#  3. `status` has one job line per job, the first in the single-job format; `--job b` keeps b's;
#  4. `metrics` has series for job="a" and job="b" and passes check_metrics.py; `--job b` keeps b's;
#  5. `--job nosuch` fails (exit 1) naming a and b; --job on a command without it is a usage
#     error (exit 2);
#  6. options before and after the command give the same answer; --runtime-dir finds the
#     instance, and so does no option at all when it is the only instance running;
#  7. `trace stop --job b` keeps b's events only (and a `--job nosuch` leaves the trace running).
# Then both jobs finish exact.
#   ctl_jobs.sh BIN_DIR
set -uo pipefail

BIN=${1:?usage: ctl_jobs.sh BIN_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
CTL=$BIN/nodecommctl
TEST_NAME=ctl_jobs
source "$HERE/check_helpers.sh"

work=$(mktemp -d /tmp/nc-ctl-jobs.XXXXXX)
rt=$work/rt
instance=ctl-jobs-$$
daemon_pid=""
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  stop_standalone_daemon
  rm -rf "$work"
}
trap cleanup EXIT
source "$HERE/../integration/standalone_daemon.sh"

start_standalone_daemon "$rt" "$instance"
[ -f "$rt/nodecommd.ready" ] || {
  fail "no daemon: $(tail -20 "$work/daemon.log")"
  exit 1
}

# start_rank JOB RANK SIZE: one soak rank in the background (at most 90 s), its pid in pids.
# The checks below take 15-30 s on a loaded 2-core machine; both jobs run up to 45 s, and end
# early once the checks are done and touch the stop file.
start_rank() {
  timeout --kill-after=5 90 env NODECOMM_RUNTIME_DIR="$rt" NODECOMM_JOB="$1" \
    NODECOMM_LOCAL_RANK="$2" NODECOMM_LOCAL_SIZE="$3" NODECOMM_IDLE=backoff \
    NODECOMM_TIMEOUT_SEC=30 "$BIN/nodecomm-bench" --soak 45 --soak-no-memory-check \
    --soak-max-bytes 256K --soak-stop-file "$work/stop" >"$work/$1$2.log" 2>&1 &
  pids+=($!)
}
# a first, so that it is the oldest job (status names the oldest); b's one rank would
# otherwise often form before a's two.
start_rank a 0 2
start_rank a 1 2
for _ in $(seq 300); do grep -q "job a formed" "$work/daemon.log" && break; sleep 0.1; done
grep -q "job a formed" "$work/daemon.log" || fail "job a did not form within 30 s"
start_rank b 0 1

ctl() { "$CTL" "$@" --instance "$instance"; }
uid=$(id -u)
running=0
for _ in $(seq 200); do
  if ctl jobs --json >"$work/jobs.json" 2>"$work/jobs.err" &&
    [ "$(json 'sorted((j["name"], j["state"], j["attached"], j["local_size"], j["ops_completed"] > 0) for j in d["jobs"])' <"$work/jobs.json")" = "[('a', 'running', 2, 2, True), ('b', 'running', 1, 1, True)]" ]; then
    running=1
    break
  fi
  sleep 0.1
done
if [ "$running" -ne 1 ]; then
  fail "jobs a and b did not both run: $(cat "$work/jobs.json" 2>/dev/null) (nodecommctl jobs said on stderr: $(cat "$work/jobs.err" 2>/dev/null)) $(tail -n 5 "$work"/*.log)"
  exit 1
fi
pass "jobs a (2 ranks) and b (1 rank) running at once"

# 1. jobs
[ "$(json '(d["instance"], d["total"], [(j["uid"], j["node_index"], j["node_count"], j["world_size"]) for j in sorted(d["jobs"], key=lambda j: j["name"])])' <"$work/jobs.json")" = "('$instance', 2, [($uid, 0, 1, 2), ($uid, 0, 1, 1)])" ] &&
  pass "jobs --json: owner uid $uid, node 0/1, world sizes 2 and 1" || fail "jobs --json: $(cat "$work/jobs.json")"
ctl jobs >"$work/jobs.txt" || fail "jobs exit $?"
grep -Eq "^a +running +$uid +2/2 +0/1 +2 +[0-9]+ +[1-9][0-9]* " "$work/jobs.txt" &&
  grep -Eq "^b +running +$uid +1/1 +0/1 +1 +[0-9]+ +[1-9][0-9]* " "$work/jobs.txt" &&
  [ "$(wc -l <"$work/jobs.txt")" -eq 3 ] && pass "jobs (text)" || fail "jobs text: $(cat "$work/jobs.txt")"
cat "$work/jobs.txt"

# 2. clients --job a, ops --job b
ctl clients --job a --json >"$work/clients.json" || fail "clients --job a exit $?"
[ "$(json 'sorted((c["local_rank"], c["job"], c["in_job"], c["state"]) for c in d["clients"]), d["total"], d["job"]' <"$work/clients.json")" = "([(0, 'a', True, 'joined'), (1, 'a', True, 'joined')], 2, 'a')" ] &&
  pass "clients --job a: a's local ranks 0 and 1 only" || fail "clients --job a: $(cat "$work/clients.json")"
ctl clients --job a | tail -n +2 >"$work/clients.txt"
[ "$(wc -l <"$work/clients.txt")" -eq 2 ] && [ "$(grep -c ' a$' "$work/clients.txt")" -eq 2 ] &&
  pass "clients --job a (text): two rows of job a" || fail "clients --job a text: $(cat "$work/clients.txt")"
[ "$(ctl clients --json | json 'sorted(c["job"] for c in d["clients"] if c["in_job"])')" = "['a', 'a', 'b']" ] &&
  pass "clients: every client names its job" || fail "clients: $(ctl clients --json)"
ctl ops --job b --json >"$work/ops.json" || fail "ops --job b exit $?"
[ "$(json 'd["job"] == "b" and all(o["job"] == "b" for o in d["ops"]) and d["total"] >= len(d["ops"])' <"$work/ops.json")" = True ] &&
  pass "ops --job b: b's operations only ($(json 'd["total"]' <"$work/ops.json") in flight)" || fail "ops --job b: $(cat "$work/ops.json")"
ctl ops --job b >/dev/null && pass "ops --job b (text)" || fail "ops --job b text"

# 3. status
ctl status >"$work/status.txt" || fail "status exit $?"
[ "$(grep -c '^job ' "$work/status.txt")" -eq 2 ] &&
  grep -q "^job        'a' running: 2 ranks on 1 nodes; this is node 0, ranks 0..1 (2/2 attached), [0-9]* communicator(s), [0-9]* ops posted$" "$work/status.txt" &&
  grep -q "^job        'b' running: 1 ranks on 1 nodes" "$work/status.txt" &&
  pass "status: a job line each, a's first" || fail "status: $(cat "$work/status.txt")"
[ "$(ctl status --json | json '(d["job"]["name"], sorted(j["name"] for j in d["jobs"]))')" = "('a', ['a', 'b'])" ] &&
  pass "status --json: job (the oldest) and jobs" || fail "status --json: $(ctl status --json)"
[ "$(ctl status --job b | grep -c "^job ")" -eq 1 ] && grep -q "^job        'b' running" <<<"$(ctl status --job b)" &&
  pass "status --job b: b's line only" || fail "status --job b: $(ctl status --job b)"

# 4. metrics
ctl metrics >"$work/metrics.txt" || fail "metrics exit $?"
python3 "$HERE/check_metrics.py" <"$work/metrics.txt" && pass "metrics pass the format check" ||
  fail "metrics format"
grep -q "^nodecomm_job_world_size{instance=\"$instance\",node=\"0\",job=\"a\"} 2$" "$work/metrics.txt" &&
  grep -q "^nodecomm_job_world_size{instance=\"$instance\",node=\"0\",job=\"b\"} 1$" "$work/metrics.txt" &&
  grep -Eq "^nodecomm_job_ops_completed_total\{.*,job=\"b\"\} [1-9]" "$work/metrics.txt" &&
  pass "metrics: job=\"a\" and job=\"b\" series" || fail "metrics: $(grep job "$work/metrics.txt")"
ctl metrics --job b >"$work/metrics_b.txt" || fail "metrics --job b exit $?"
! grep -q 'job="a"' "$work/metrics_b.txt" && grep -q 'job="b"' "$work/metrics_b.txt" &&
  pass "metrics --job b: b's series only" || fail "metrics --job b: $(grep job "$work/metrics_b.txt")"

# 5. --job that names no job; --job where it does not belong
for cmd in jobs status clients ops metrics; do
  err=$(ctl "$cmd" --job nosuch 2>&1)
  rc=$?
  [ "$rc" -eq 1 ] && [[ $err == "nodecommctl: instance '$instance' serves no job 'nosuch'; its jobs: 'a', 'b'" ]] ||
    fail "$cmd --job nosuch: exit $rc: $err"
done
pass "--job nosuch: exit 1 naming a and b ($err)"
for args in "counters --job a" "--job a counters"; do
  # shellcheck disable=SC2086 # the words of $args
  err=$("$CTL" $args --instance "$instance" 2>&1)
  rc=$?
  [ "$rc" -eq 2 ] && [[ $err == "nodecommctl: --job: counters does not take it "* ]] ||
    fail "$args: exit $rc: $err"
done
pass "--job on counters, before or after it: usage error ($err)"

# 6. Options before and after the command, and without --instance
after=$("$CTL" clients --instance "$instance" --job a --json | json 'sorted(c["client_id"] for c in d["clients"])')
before=$("$CTL" --instance "$instance" --job a --json clients | json 'sorted(c["client_id"] for c in d["clients"])')
[ -n "$after" ] && [ "$before" = "$after" ] && pass "options before and after the command ($after)" ||
  fail "options before ($before) and after ($after) the command differ"
[ "$("$CTL" --json jobs --runtime-dir "$rt" | json 'd["instance"]')" = "$instance" ] &&
  pass "--runtime-dir finds the instance" || fail "--runtime-dir"
if [ "$("$CTL" list --json | json 'sum(i["state"] == "running" and i["instance"] != "'"$instance"'" for i in d)')" = 0 ]; then
  [ "$(env -u NODECOMM_INSTANCE "$CTL" jobs --json | json 'd["instance"]')" = "$instance" ] &&
    [ "$(env -u NODECOMM_INSTANCE "$CTL" --job b status --json | json 'd["job"]["name"]')" = b ] &&
    pass "no --instance: the only instance running" ||
    fail "no --instance: $(env -u NODECOMM_INSTANCE "$CTL" jobs 2>&1 | head -1)"
else
  echo "ctl_jobs: skipped the check without --instance (another instance runs)"
fi

# 7. A trace of job b
ctl trace start >/dev/null && pass "trace start" || fail "trace start"
sleep 1
err=$(ctl trace stop --job nosuch "$work/none.json" 2>&1)
rc=$?
[ "$rc" -eq 1 ] && [[ $err == *"has no job 'nosuch'; its jobs: 'a', 'b'"* ]] &&
  [ "$(ctl status --json | json 'd["tracing"]')" = True ] &&
  pass "trace stop --job nosuch: exit 1, the trace goes on" || fail "trace stop --job nosuch: exit $rc: $err"
ctl trace stop --job b "$work/trace.json" && pass "trace stop --job b" || fail "trace stop --job b"
python3 - "$work/trace.json" <<'EOF' && pass "the trace holds b's operations only" || fail "trace: $(head -c 600 "$work/trace.json")"
import json, sys
events = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X"]
assert events, "no events"
assert all(e["args"]["job"] == "b" for e in events), {e["args"]["job"] for e in events}
print(f"ctl_jobs: trace: {len(events)} events of job b")
EOF

# Both jobs finish, every result exact.
touch "$work/stop"
for p in "${pids[@]}"; do
  wait "$p" || fail "a rank failed (exit $?): $(tail -n 5 "$work"/*.log)"
done
pids=()
pass "jobs a and b finished"
finish_checks
