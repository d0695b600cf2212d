#!/usr/bin/env bash
# nodecomm-bench's training-step simulation, --batch and the priority probe on 2 nodes x 2
# ranks, with both backends: each run must succeed and its --json record must carry the
# documented fields with sane values. Usage: bench_workload.sh BIN workload|batch-probe
set -u
BIN=$1
WHAT=$2
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

WORK=$(mktemp -d /tmp/nodecomm-bench-workload.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# field FILE NAME [LINE]: the value of "NAME" in line LINE (default 1) of a JSON Lines file.
field() {
  sed -n "${3:-1}p" "$1" | grep -o "\"$2\":[^,}]*" | head -n 1 | cut -d: -f2- | tr -d '"'
}
# check FILE NAME AWK-CONDITION-ON-v [LINE]
check() {
  local v
  v=$(field "$1" "$2" "${4:-1}")
  if [ -z "$v" ]; then
    fail "$(basename "$1"): no field $2"
  elif awk -v v="$v" "BEGIN { exit !($3) }" </dev/null; then
    pass "$(basename "$1"): $2 = $v"
  else
    fail "$(basename "$1"): $2 = $v, expected $3"
  fi
}
# launch NAME LAUNCH-ARGS... -- BENCH-ARGS...: one run, its output kept in $WORK/NAME.out.
launch() {
  local name=$1
  shift
  if "$BIN/nodecomm-launch" --timeout 60 "$@" >"$WORK/$name.out" 2>&1; then
    pass "$name ran"
    return 0
  fi
  fail "$name failed:"
  tail -n 20 "$WORK/$name.out"
  return 1
}

# check_overlap FILE: overlap_efficiency is (t_compute + t_comm - t_step) / min(t_compute,
# t_comm) of the same record. Its value has no fixed lower bound: one slow step on an
# oversubscribed machine (a 106 ms median step against 12 ms of compute and communication, once
# in CI) makes it as negative as it likes, so the test checks the definition, not a range.
check_overlap() {
  local f=$1 v c m s
  v=$(field "$f" overlap_efficiency)
  c=$(field "$f" t_compute)
  m=$(field "$f" t_comm)
  s=$(field "$f" t_step)
  if awk -v v="$v" -v c="$c" -v m="$m" -v s="$s" 'BEGIN {
       least = c < m ? c : m; want = (c + m - s) / least; d = v - want
       exit !(v != "" && least > 0 && v < 10 && (d < 0 ? -d : d) <= 1e-6 * (1 + (want < 0 ? -want : want)))
     }' </dev/null; then
    pass "$(basename "$f"): overlap_efficiency = $v, from its times"
  else
    fail "$(basename "$f"): overlap_efficiency = $v, expected (t_compute $c + t_comm $m - t_step $s) / min, below 10"
  fi
}

workload_fields() {  # FILE BACKEND
  local f=$1
  check "$f" mode 'v == "workload"'
  check "$f" backend "v == \"$2\""
  check "$f" nodes 'v == 2'
  check "$f" ranks_per_node 'v == 2'
  check "$f" steps 'v == 3'
  check "$f" tensors 'v == 161'
  check "$f" scale 'v == 0.01'
  check "$f" compress 'v == "none"'
  # The default compute of --scale 0.01: 255571 elements x 4 bytes / 125 MB/s = 8.2 ms.
  check "$f" compute_ms 'v > 8.1 && v < 8.3'
  check "$f" t_compute 'v > 7.5 && v < 40'
  check "$f" t_comm 'v > 0 && v < 5000'
  check "$f" t_step 'v > 7.5 && v < 5000'
  check_overlap "$f"
  check "$f" first_layer_ready_us 'v > 0 && v < 5e6'
  check "$f" t_step_one_node 'v > 7.5 && v < 5000'
  check "$f" scaling_efficiency 'v > 0 && v < 100'
  grep -q '^t_step(ms) ' "$WORK/$(basename "$f" .json).out" && pass "table printed" ||
    fail "no t_step line in the table of $f"
}

if [ "$WHAT" = workload ]; then
  TINY=(--workload resnet50 --scale 0.01 --steps 3 --warmup 1)
  launch wl-nodecomm --nodes 2 --ranks-per-node 2 -- "$BIN/nodecomm-bench" "${TINY[@]}" \
    --priority-policy direct --fusion on --json "$WORK/wl-nodecomm.json" &&
    workload_fields "$WORK/wl-nodecomm.json" nodecomm &&
    check "$WORK/wl-nodecomm.json" priority_policy 'v == "direct"' &&
    check "$WORK/wl-nodecomm.json" fusion 'v == "on"'
  launch wl-mpi --backend mpi --nodes 2 --ranks-per-node 2 -- "$BIN/nodecomm-bench" \
    --backend mpi "${TINY[@]}" --json "$WORK/wl-mpi.json" &&
    workload_fields "$WORK/wl-mpi.json" mpi

  # A FILE with more tensors than a client may have in flight (256): the bench completes the
  # oldest and posts again. Times as given: 300 x 20 us = 6 ms per step.
  {
    echo "# name elements compute_us"
    for i in $(seq 1 300); do echo "t$i $((i * 7 + 1)) 20"; done
  } >"$WORK/model.txt"
  launch wl-file --nodes 2 --ranks-per-node 2 -- "$BIN/nodecomm-bench" --workload \
    "$WORK/model.txt" --steps 2 --warmup 1 --json "$WORK/wl-file.json" &&
    check "$WORK/wl-file.json" tensors 'v == 300' &&
    check "$WORK/wl-file.json" compute_ms 'v > 5.99 && v < 6.01' &&
    check "$WORK/wl-file.json" t_step 'v > 5'
elif [ "$WHAT" = batch-probe ]; then
  # 300 operations of 4 KiB in flight (more than the 256 a client may have: the bench waits
  # for the oldest and posts again), every element of one run checked.
  launch batch-nodecomm --nodes 2 --ranks-per-node 2 -- "$BIN/nodecomm-bench" --op allreduce \
    --sizes 4K,64K --batch 300 --iters 2 --warmup 1 --check --json "$WORK/batch-nodecomm.json" &&
    for line in 1 2; do
      check "$WORK/batch-nodecomm.json" batch 'v == 300' $line
      check "$WORK/batch-nodecomm.json" wrong 'v == 0' $line
      check "$WORK/batch-nodecomm.json" time_us 'v > 0 && v < 1e6' $line
      check "$WORK/batch-nodecomm.json" median_us 'v > 0 && v < 1e6' $line
    done
  grep -q '^# batch 300: ' "$WORK/batch-nodecomm.out" && pass "batch note" || fail "no batch note"
  launch batch-mpi --backend mpi --nodes 2 --ranks-per-node 2 -- "$BIN/nodecomm-bench" \
    --backend mpi --op allreduce --sizes 4K --batch 50 --iters 2 --warmup 1 --check \
    --json "$WORK/batch-mpi.json" &&
    check "$WORK/batch-mpi.json" batch 'v == 50' &&
    check "$WORK/batch-mpi.json" wrong 'v == 0'

  for backend in nodecomm mpi; do
    launch probe-$backend --backend $backend --nodes 2 --ranks-per-node 2 -- \
      "$BIN/nodecomm-bench" --backend $backend --priority-probe --probe-big 4M \
      --probe-small 4K --iters 3 --warmup 1 --json "$WORK/probe-$backend.json" &&
      check "$WORK/probe-$backend.json" mode 'v == "priority_probe"' &&
      check "$WORK/probe-$backend.json" probe_big_bytes 'v == 4194304' &&
      check "$WORK/probe-$backend.json" probe_unloaded_us 'v > 0 && v < 5e6' &&
      check "$WORK/probe-$backend.json" probe_loaded_us 'v > 0 && v < 5e6' &&
      check "$WORK/probe-$backend.json" probe_big_us 'v > 5000 && v < 5e7'
  done
else
  fail "unknown test '$WHAT' (workload or batch-probe)"
fi

if [ $failures -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all checks passed"
