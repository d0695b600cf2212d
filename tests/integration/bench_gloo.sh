#!/usr/bin/env bash
# nodecomm-bench --backend gloo under nodecomm-launch --backend gloo: every collective Gloo
# has, every element checked against the bench's independent reference (--check), on an
# uneven layout (3 nodes of 3, 1 and 2 ranks), out of place and in place, odd sizes; dtypes
# and reductions on allreduce and reduce_scatter; a split communicator; --batch and the
# training-step workload, which post to Gloo's worker thread. Skips (77) where Gloo is missing.
# Usage: bench_gloo.sh BIN
set -u
BIN=$1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

WORK=$(mktemp -d /tmp/nodecomm-bench-gloo.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

if "$BIN/nodecomm-bench" --backend gloo --op allreduce --sizes 8 2>&1 | grep -q "built without Gloo"; then
  echo "SKIP: nodecomm-bench was built without Gloo (libgloo-dev)"
  exit 77
fi

SIZES=4,28,1000,16396
# run NAME LAYOUT-ARGS... -- CASE...: one launch in which every rank runs nodecomm-bench once per
# CASE (a string of bench arguments), in order, each case with its own Gloo rendezvous directory.
# One launch per layout keeps mpirun's start-up cost (seconds where host names resolve slowly)
# out of each case. Every case must exit 0 (--check fails on any wrong element), show the gloo
# backend, and print rows whose #wrong is 0 (N/A for barrier).
run() {
  local name=$1
  shift
  local layout=()
  while [ "$1" != "--" ]; do layout+=("$1"); shift; done
  shift
  local cases=$#
  # shellcheck disable=SC2016 # expanded by the ranks' shell
  if ! "$BIN/nodecomm-launch" --timeout 120 --backend gloo "${layout[@]}" -- bash -c '
      set -e
      bench=$1
      shift
      i=0
      for c in "$@"; do
        i=$((i + 1))
        [ "$NODECOMM_WORLD_RANK_HINT" != 0 ] || echo "### case $i: $c"
        # shellcheck disable=SC2086 # a case is a list of arguments
        NODECOMM_GLOO_STORE=$NODECOMM_GLOO_STORE/case$i "$bench" $c
      done' run-cases "$BIN/nodecomm-bench" "$@" >"$WORK/$name.out" 2>&1; then
    fail "$name: exit status non-zero:"
    tail -n 20 "$WORK/$name.out"
    return
  fi
  local tables rows bad
  tables=$(grep -c "backend gloo" "$WORK/$name.out")
  rows=$(grep -Ec "^ +[0-9]+ +[0-9]+ " "$WORK/$name.out")
  bad=$(awk '/^ +[0-9]+ +[0-9]+ / && $NF != 0 && $NF != "N/A"' "$WORK/$name.out")
  if [ "$tables" -ne "$cases" ] || [ -n "$bad" ]; then
    fail "$name: $tables gloo tables for $cases cases, wrong elements: $bad"
    return
  fi
  pass "$name: $cases cases, $rows sizes checked"
}

start=$(date +%s)
L312=(--nodes 3 --ranks-per-node 3,1,2)
cases=()
for op in allreduce reduce broadcast reduce_scatter allgather gather scatter alltoall \
  allgatherv alltoallv barrier; do
  cases+=("--op $op --root 4 --check --sizes $SIZES --iters 2 --warmup 1")
done
run out-of-place "${L312[@]}" -- "${cases[@]}"
cases=()
for op in allreduce reduce broadcast reduce_scatter allgather gather scatter; do
  cases+=("--op $op --root 2 --inplace --check --sizes $SIZES --iters 1 --warmup 0")
done
run inplace "${L312[@]}" -- "${cases[@]}"
dtypes=("f64 prod" "f16 sum" "bf16 max" "i8 min" "i64 sum" "f32 avg")
cases=()
for case in "${dtypes[@]}"; do
  set -- $case
  cases+=("--op allreduce --dtype $1 --redop $2 --check --sizes $SIZES --iters 1 --warmup 0")
done
cases+=("--op allreduce --comm split:3 --check --sizes $SIZES --iters 1 --warmup 0")
cases+=("--op alltoallv --comm split:2 --check --sizes $SIZES --iters 1 --warmup 0")
run dtypes-splits "${L312[@]}" -- "${cases[@]}"
cases=()
for case in "${dtypes[@]}"; do
  set -- $case
  cases+=("--op reduce_scatter --dtype $1 --redop $2 --check --sizes $SIZES --iters 1 --warmup 0")
done
cases+=("--op allgather --sizes 4K --batch 20 --check --iters 2 --warmup 1")
run reduce_scatter-dtypes-batch --nodes 2 --ranks-per-node 2 -- "${cases[@]}"
run one-rank --nodes 1 --ranks-per-node 1 -- \
  "--op reduce_scatter --check --sizes $SIZES --iters 1 --warmup 0"

# The training-step workload: a record with the gloo backend and a positive step time (ms).
if "$BIN/nodecomm-launch" --timeout 60 --backend gloo --nodes 2 --ranks-per-node 2 -- \
  "$BIN/nodecomm-bench" --workload resnet50 --scale 0.01 --compute-ms 5 --steps 2 --warmup 1 \
  --json "$WORK/wl.json" >"$WORK/wl.out" 2>&1 &&
  grep -q '"backend":"gloo"' "$WORK/wl.json" &&
  awk -v v="$(grep -o '"t_step":[0-9.e+-]*' "$WORK/wl.json" | head -n 1 | cut -d: -f2)" \
    'BEGIN { exit !(v > 0) }'; then
  pass "workload: $(grep -o '"t_step":[^,]*' "$WORK/wl.json" | head -n 1) ms"
else
  fail "workload: $(tail -n 20 "$WORK/wl.out"; cat "$WORK/wl.json" 2>/dev/null)"
fi

echo "bench_gloo: $failures failure(s) in $(($(date +%s) - start)) s"
[ "$failures" -eq 0 ]
