#!/usr/bin/env bash
# A stalled operation seen through nodecommctl. error_paths stall on 1x3: ranks 0 and 1 post an
# allreduce at once, rank 2 only 4 s later. With --stall-sec 1 and --op-timeout-sec 3, between
# 1 s and 3 s `nodecommctl ops` must show the operation stalled and missing local rank 2
# (world rank 2), and `status` a stall report; then it times out (the test's own check).
#   ctl_stall.sh BIN_DIR
set -uo pipefail

BIN=${1:?usage: ctl_stall.sh BIN_DIR}
CTL=$BIN/nodecommctl
TEST_NAME=ctl_stall
source "$(dirname "$0")/check_helpers.sh"

work=$(mktemp -d /tmp/nc-ctl-stall.XXXXXX)
"$BIN/nodecomm-launch" --timeout 60 --nodes 1 --ranks-per-node 3 --daemon-arg=--config=none \
  --daemon-arg=--stall-sec=1 --daemon-arg=--op-timeout-sec=3 -- "$BIN/error_paths" stall \
  >"$work/launch.log" 2>&1 &
lp=$!
trap 'kill -TERM "$lp" 2>/dev/null; wait "$lp" 2>/dev/null; rm -rf "$work"' EXIT
I0=launch-$lp-node0

seen=0
for _ in $(seq 300); do
  if "$CTL" ops --instance "$I0" --json >"$work/ops.json" 2>/dev/null &&
    [ "$(json 'any(o["stalled"] and o["missing_local_ranks"] == [2] and o["missing_world_ranks"] == [2] and o["arrived"] == 2 for o in d["ops"])' <"$work/ops.json")" = True ]; then
    seen=1
    break
  fi
  kill -0 "$lp" 2>/dev/null || break
  sleep 0.1
done
if [ "$seen" -eq 1 ]; then
  pass "ops --json: the allreduce is stalled, waiting for local rank 2 (world rank 2)"
  "$CTL" ops --instance "$I0" | tee "$work/ops.txt"
  grep -q "allreduce .* yes .*local ranks 2 (world 2)" "$work/ops.txt" &&
    pass "ops (text) names the missing rank" || fail "ops text: $(cat "$work/ops.txt")"
  stalls=0
  for _ in $(seq 30); do
    stalls=$("$CTL" status --instance "$I0" --json 2>/dev/null | json 'd["stalls_reported"]' 2>/dev/null || echo 0)
    [ "${stalls:-0}" -ge 1 ] && break
    sleep 0.1
  done
  [ "${stalls:-0}" -ge 1 ] && pass "status counts the stall report ($stalls)" || fail "no stall counted"
  # Options before the command, and no --instance with one instance running (this one, unless
  # the node runs the 'default' service, which is then the one chosen).
  [ "$("$CTL" --instance "$I0" --json status | json 'd["instance"]')" = "$I0" ] &&
    pass "options before the command: --instance $I0 --json status" || fail "--instance before status"
  if [ "$("$CTL" list --json | json 'sum(i["state"] == "running" and i["instance"] != "'"$I0"'" for i in d)')" = 0 ]; then
    [ "$(env -u NODECOMM_INSTANCE "$CTL" status --json | json 'd["instance"]')" = "$I0" ] &&
      pass "status without --instance picks the only instance running" ||
      fail "status without --instance: $(env -u NODECOMM_INSTANCE "$CTL" status 2>&1 | head -1)"
  fi
  grep -q '^nodecomm_ops_stalled{.*} [1-9]' <<<"$("$CTL" metrics --instance "$I0")" &&
    pass "metrics: nodecomm_ops_stalled > 0" || echo "ctl_stall: (the operation timed out before metrics ran)"
else
  fail "no stalled operation missing rank 2 seen: $(cat "$work/ops.json" 2>/dev/null)"
fi
wait "$lp"
rc=$?
[ "$rc" -eq 0 ] && pass "error_paths stall passed (the timeout named rank 2)" ||
  fail "error_paths stall exit $rc: $(tail -20 "$work/launch.log")"
finish_checks
