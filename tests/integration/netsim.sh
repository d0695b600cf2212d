#!/usr/bin/env bash
# nodecomm-launch --netsim: a 2-node allreduce over a simulated 1 Gbit/s network with each
# backend, and SIGTERM to the launcher mid-run with each backend. After every launch, nothing it
# made may be left: no network namespace, veth or bridge, no agent script or hostfile, no
# runtime or Open MPI session directory, no process. Exits 77 (CTest's SKIP_RETURN_CODE) where
# the machine cannot host network namespaces.
set -u
BIN=$1
SKIP=77
export PATH=$PATH:/usr/sbin:/sbin
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }
skip() { echo "SKIP: $*"; exit $SKIP; }

source "$(dirname "$0")/netsim_probe.sh"
if why=$(netsim_unavailable); then skip "$why"; fi

LINKS_BEFORE=$(ip -o link show type veth; ip -o link show type bridge)
WORK=$(mktemp -d /tmp/nodecomm-netsim-test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# check_clean LAUNCHER_PID WHAT LOG: everything that launch made is gone.
check_clean() {
  local lp=$1 what=$2 log=$3 left path
  left=$(ip netns list | grep -E "^nc${lp}(sw|h[0-9]+)( |$)")
  [ -z "$left" ] && pass "$what: no namespace left" || fail "$what: namespaces left: $left"
  left=$(diff <(echo "$LINKS_BEFORE") <(ip -o link show type veth; ip -o link show type bridge) | grep '^>')
  [ -z "$left" ] && pass "$what: no veth or bridge left" || fail "$what: links left: $left"
  for path in $(sed -n 's/.*agent \([^,]*\), hostfile \([^ ]*\)$/\1 \2/p' "$log") \
              $(sed -n 's/.*runtime dirs under \([^ ]*\)$/\1/p' "$log"); do
    [ -e "$path" ] && fail "$what: $path left" || pass "$what: $path removed"
  done
  grep -q "agent .*netsim-agent.sh" "$log" || fail "$what: no agent path in the verbose log"
  left=$(ls -d /tmp/ompi.nc"${lp}"h* 2>/dev/null)
  [ -z "$left" ] && pass "$what: no Open MPI session dir left" || fail "$what: left: $left"
  left=$(pgrep -af "nc${lp}(sw|h[0-9])|launch-${lp}-node" 2>/dev/null)
  [ -z "$left" ] && pass "$what: no process left" || fail "$what: processes left: $left"
}

# A 2-node allreduce, every element checked, with each backend.
run_bench() {  # backend
  local backend=$1 log=$WORK/bench-$1.log start rc lp
  start=$(date +%s)
  "$BIN/nodecomm-launch" --verbose --backend "$backend" --nodes 2 --ranks-per-node 1 \
    --netsim 1gbit --timeout 60 -- \
    "$BIN/nodecomm-bench" --backend "$backend" --op allreduce --sizes 8,1M --check --iters 3 \
    --warmup 1 >"$WORK/bench-$backend.out" 2>"$log" &
  lp=$!
  wait $lp; rc=$?
  if [ "$rc" -eq 0 ]; then
    pass "$backend backend under --netsim 1gbit exits 0 ($(($(date +%s) - start)) s)"
  else
    fail "$backend backend under --netsim exit $rc: $(cat "$log" "$WORK/bench-$backend.out")"
  fi
  grep -E "^netsim: 2 hosts, link 1gbit, probe [0-9.]+ Mbit/s$" "$log" &&
    pass "$backend: probe line printed" || fail "$backend: no probe line in: $(cat "$log")"
  grep -q "backend $backend" "$WORK/bench-$backend.out" &&
    pass "$backend: the bench ran on the $backend backend" || fail "$backend: bench output: $(cat "$WORK/bench-$backend.out")"
  grep -Eq "^ +1048576 .* 0$" "$WORK/bench-$backend.out" &&
    pass "$backend: 1M allreduce checked, 0 wrong" || fail "$backend: no clean 1M row"
  grep -q -- "--mca btl_tcp_flags send,inplace,need-ack,need-csum" "$log" &&
    pass "$backend: mpirun got the TCP flags" || fail "$backend: mpirun command lacks btl_tcp_flags"
  check_clean $lp "$backend run" "$log"
}

# SIGTERM once every rank is running: exit 143 and nothing left. The ranks record the
# environment the launcher gave them.
run_sigterm() {  # backend
  local backend=$1 log=$WORK/term-$1.log out=$WORK/env-$1 rc lp i
  mkdir -p "$out"
  "$BIN/nodecomm-launch" --verbose --backend "$backend" --nodes 2 --ranks-per-node 2 \
    --netsim 1gbit --timeout 60 -- \
    sh -c 'echo "$NODECOMM_BACKEND $NODECOMM_LINK_RATE $NODECOMM_NODE $NODECOMM_LOCAL_RANK" >"$0/$NODECOMM_NODE.$NODECOMM_LOCAL_RANK"; exec sleep 100' \
    "$out" >"$log" 2>&1 &
  lp=$!
  for i in $(seq 1 200); do
    [ "$(ls "$out" | wc -l)" -ge 4 ] && break
    sleep 0.1
  done
  kill -TERM $lp
  wait $lp; rc=$?
  [ "$rc" -eq 143 ] && pass "$backend: SIGTERM mid-run exits 143" || fail "$backend: SIGTERM exit $rc: $(cat "$log")"
  local want got
  for i in 0.0 0.1 1.0 1.1; do
    want="$backend 1gbit ${i%.*} ${i#*.}"
    got=$(cat "$out/$i" 2>/dev/null)
    [ "$got" = "$want" ] && pass "$backend: rank $i environment '$got'" || fail "$backend: rank $i environment '$got', wanted '$want'"
  done
  check_clean $lp "$backend SIGTERM" "$log"
}

start=$(date +%s)
run_bench nodecomm
run_bench mpi
run_bench gloo
run_sigterm nodecomm
run_sigterm mpi
echo "netsim: $failures failure(s) in $(($(date +%s) - start)) s"
[ "$failures" -eq 0 ]
