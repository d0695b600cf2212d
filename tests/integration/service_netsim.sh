#!/usr/bin/env bash
# nodecomm-launch --service up --netsim: the cluster's daemons run one per network namespace
# behind TBF-shaped links, ompi-server in the switch namespace where every host reaches it, and
# the namespaces stay until --service down.
#  1. up --nodes 2 --netsim 1gbit: the probe line, each daemon inside its host's namespace,
#     ompi-server inside the switch's, its URI on the simulated subnet only;
#  2. a job attached to node 1 is exact and gets NODECOMM_LINK_RATE=1gbit;
#  3. restart-node 1 starts the daemon inside the namespace again;
#  4. a multi-node job on nodes 0 and 1: exact once the daemons form groups; until then it must
#     fail fast with the daemon's refusal, and the test says it skipped that part;
#  5. down: no namespace, process, state directory or /dev/shm file left.
# Exits 77 (skipped) without root, network namespaces or ompi-server.
#   service_netsim.sh BIN_DIR
set -uo pipefail

BIN=${1:?usage: service_netsim.sh BIN_DIR}
LAUNCH=$BIN/nodecomm-launch
NAME=svcnet$$
DIR=/tmp/nodecomm-cluster.$NAME
REFUSAL="multi-node service jobs are not built yet"
export PATH=$PATH:/usr/sbin:/sbin
skip() {
  echo "SKIP: $*"
  exit 77
}

command -v ompi-server >/dev/null || skip "ompi-server is not installed (package openmpi-bin)"
source "$(dirname "$0")/netsim_probe.sh"
if why=$(netsim_unavailable); then skip "$why"; fi

work=$(mktemp -d /tmp/nodecomm-svcnet.XXXXXX)
failures=0
pass() { echo "ok: $*"; }
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
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

# in_netns PID NAMESPACE: the process runs in that named network namespace.
in_netns() {
  [ "$(stat -L -c %i "/proc/$1/ns/net" 2>/dev/null)" = "$(stat -L -c %i "/run/netns/$2" 2>/dev/null)" ]
}
state() { python3 -c "import json; s=json.load(open('$DIR/state.json')); print($1)"; }

# 1. Up.
timeout 120 "$LAUNCH" --service up --cluster "$NAME" --nodes 2 --netsim 1gbit \
  --daemon-arg=--config=none --daemon-arg=--idle=backoff --daemon-arg=--client-timeout-sec=30 \
  >"$work/up.out" 2>"$work/up.err" ||
  die "--service up --netsim exited $?: $(cat "$work/up.out" "$work/up.err")"
cat "$work/up.out" "$work/up.err"
grep -Eq "^netsim: 2 hosts, link 1gbit, probe [0-9.]+ Mbit/s$" "$work/up.err" &&
  pass "probe line printed" || fail "no probe line"
for i in 0 1; do
  pid=$(state "s['node_list'][$i]['pid']")
  in_netns "$pid" "ncs-$NAME-h$i" && pass "node $i's daemon (pid $pid) runs in ncs-$NAME-h$i" ||
    fail "node $i's daemon (pid $pid) is not in namespace ncs-$NAME-h$i"
done
server=$(state "s['ompi_server']['pid']")
in_netns "$server" "ncs-$NAME-sw" && pass "ompi-server runs in the switch namespace" ||
  fail "ompi-server (pid $server) is not in ncs-$NAME-sw"
uri=$(cat "$DIR/rendezvous.uri")
addrs=$(printf '%s\n' "$uri" | grep -Eo 'tcp6?://[^;]*')
[ -n "$addrs" ] && ! grep -Eqv '^tcp://10\.[0-9]+\.[0-9]+\.254:' <<<"$addrs" &&
  pass "ompi-server's URI names the switch's address only ($addrs)" || fail "URI: $uri"
grep -q "^$NAME netsim: link 1gbit, namespaces ncs-$NAME-sw, ncs-$NAME-h0, ncs-$NAME-h1$" <<<"$(timeout 30 "$LAUNCH" --service status --cluster "$NAME")" &&
  pass "status names the link and namespaces" || fail "status: $(timeout 30 "$LAUNCH" --service status --cluster "$NAME")"

# 2. A job on node 1.
timeout 90 "$LAUNCH" --attach --cluster "$NAME" --timeout 60 --nodes 1 --ranks-per-node 2 \
  --on-nodes 1 -- "$BIN/nodecomm-bench" --op allreduce --sizes 8,1M --check --iters 3 \
  --warmup 1 >"$work/job.out" 2>&1 &&
  [ "$(grep -Ec '^ +(8|1048576) .* 0$' "$work/job.out")" = 2 ] &&
  grep -q "link rate 1gbit" "$work/job.out" &&
  pass "job on node 1 exact, with NODECOMM_LINK_RATE=1gbit" || fail "job: $(cat "$work/job.out")"

# 3. Restart node 1: inside its namespace again.
old=$(state "s['node_list'][1]['pid']")
timeout 60 "$LAUNCH" --service restart-node 1 --cluster "$NAME" >"$work/restart.out" 2>&1 ||
  fail "restart-node 1: $(cat "$work/restart.out")"
new=$(state "s['node_list'][1]['pid']")
[ "$new" != "$old" ] && in_netns "$new" "ncs-$NAME-h1" &&
  pass "restart-node 1: pid $new runs in ncs-$NAME-h1" || fail "restarted node 1 (pid $new, was $old)"

# 4. A multi-node job.
start=$(date +%s.%N)
timeout 90 "$LAUNCH" --attach --cluster "$NAME" --timeout 60 --nodes 2 --ranks-per-node 1 -- \
  "$BIN/nodecomm-bench" --op allreduce --sizes 8,1M --check --iters 3 --warmup 1 \
  >"$work/multi.out" 2>&1
rc=$?
took=$(printf '%.2f' "$(awk -v a="$(date +%s.%N)" -v b="$start" 'BEGIN { printf "%.3f", a - b }')")
if grep -q "$REFUSAL" "$work/multi.out"; then
  [ "$rc" = 1 ] && awk -v x="$took" 'BEGIN { exit !(x < 20) }' &&
    pass "multi-node attach fails fast (${took} s) with the daemon's refusal" ||
    fail "multi-node attach: exit $rc after $took s: $(cat "$work/multi.out")"
  echo "multi-node attach: skipped (group formation not built)"
else
  [ "$rc" = 0 ] && [ "$(grep -Ec '^ +(8|1048576) .* 0$' "$work/multi.out")" = 2 ] &&
    pass "multi-node job over the simulated network exact (${took} s)" ||
    fail "multi-node attach: exit $rc: $(tail -n 8 "$work/multi.out")"
fi

# 5. Down.
pids=$(state "' '.join(str(n['pid']) for n in s['node_list'])")
timeout 60 "$LAUNCH" --service down --cluster "$NAME" >"$work/down.out" 2>&1 &&
  grep -q "^$NAME down: 2 daemons stopped, ompi-server stopped, 3 namespaces removed$" "$work/down.out" &&
  pass "down: $(cat "$work/down.out")" || fail "down: $(cat "$work/down.out")"
left=$(ip netns list | grep -E "^ncs-$NAME-" || true)
[ -z "$left" ] && pass "no namespace left" || fail "namespaces left: $left"
for _ in $(seq 50); do
  left=""
  for p in $pids $old $server; do [ -e "/proc/$p" ] && left+=" $p"; done
  [ -z "$left" ] && break
  sleep 0.1
done
[ -z "$left" ] && pass "no daemon or ompi-server process left" || fail "processes left:$left"
[ ! -e "$DIR" ] && pass "state directory removed" || fail "$DIR left"
left=$(ls /dev/shm | grep -F "nodecomm.$NAME-" || true)
[ -z "$left" ] && pass "no /dev/shm file left" || fail "/dev/shm left: $left"
left=$(ls -d /tmp/ompi.ncs-"$NAME"-* 2>/dev/null || true)
[ -z "$left" ] && pass "no Open MPI session directory of the hosts left" || fail "left: $left"

echo "service_netsim: $failures failure(s)"
[ "$failures" -eq 0 ]
