#!/usr/bin/env bash
# Two bandwidth-bound jobs sharing one link through the service daemons (issue 19, fair share):
# a 2-node service cluster at 1 Gbit/s (nodecomm-launch --service up --netsim 1gbit) whose
# daemons run --job-weights '*=3'; jobs A and B (1 rank per node each) run 16 MiB allreduces at
# once, checked, asking for weights 1 and 1, then 3 and 1 (NODECOMM_JOB_WEIGHT). Over the
# window where both timed loops overlap (nodecomm-bench --timeline, tools/timeline-share), A's
# share of the two must be 0.5 ± 0.1, then 0.75 ± 0.1.
# Exits 77 (skipped) without ompi-server or where links cannot be simulated: on loopback the
# link is not what the jobs share.
#   service_share.sh BIN_DIR
set -uo pipefail
BIN=${1:?usage: service_share.sh BIN_DIR}
LAUNCH=$BIN/nodecomm-launch
SHARE=$(cd "$(dirname "$0")/../.." && pwd)/tools/timeline-share
NAME=svcshare$$
skip() {
  echo "SKIP: $*"
  exit 77
}
command -v ompi-server >/dev/null || skip "ompi-server is not installed (package openmpi-bin)"
source "$(dirname "$0")/netsim_probe.sh"
if why=$(netsim_unavailable); then skip "$why"; fi

work=$(mktemp -d /tmp/nodecomm-svcshare.XXXXXX)
chmod 0755 "$work"
fail() {
  echo "service_share: FAILED: $*" >&2
  for f in "$work"/*.out /tmp/nodecomm-cluster."$NAME"/*.log; do
    [ -f "$f" ] && tail -n 20 "$f" | sed "s|^|[$(basename "$f")] |" >&2
  done
  exit 1
}
cleanup() {
  [ -d "/tmp/nodecomm-cluster.$NAME" ] &&
    timeout 60 "$LAUNCH" --service down --cluster "$NAME" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

timeout 120 "$LAUNCH" --service up --nodes 2 --cluster "$NAME" --netsim 1gbit \
  --daemon-arg=--config=none "--daemon-arg=--job-weights=*=3" >"$work/up.out" 2>&1 ||
  fail "--service up failed"

# job LABEL WEIGHT: one job in the background, its launcher's pid in $!.
job() {
  NODECOMM_JOB_WEIGHT=$2 timeout --kill-after=5 150 "$LAUNCH" --attach --cluster "$NAME" \
    --timeout 120 --job "$1" --nodes 2 --ranks-per-node 1 -- "$BIN/nodecomm-bench" \
    --sizes 16M --iters 24 --warmup 1 --check --timeline "$work/$1.tl" >"$work/$1.out" 2>&1 &
}
for weights in 1:1 3:1; do
  wa=${weights%:*}
  wb=${weights#*:}
  job "a$wa" "$wa"
  a=$!
  job "b$wa" "$wb"
  b=$!
  wait "$a" || fail "job A (weights $weights) failed or was not exact"
  wait "$b" || fail "job B (weights $weights) failed or was not exact"
  line=$("$SHARE" "$work/a$wa.tl" "$work/b$wa.tl") || fail "weights $weights: $line"
  echo "service_share: weights $weights: $line"
  share=$("$SHARE" --json "$work/a$wa.tl" "$work/b$wa.tl" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["share"][0])')
  want=$(awk -v a="$wa" -v b="$wb" 'BEGIN { print a / (a + b) }')
  awk -v s="$share" -v w="$want" 'BEGIN { exit !(s >= w - 0.1 && s <= w + 0.1) }' ||
    fail "weights $weights: job A's share is $share, not $want ± 0.1"
done
timeout 60 "$LAUNCH" --service down --cluster "$NAME" >/dev/null 2>&1 || fail "--service down failed"
echo "service_share: passed"
