#!/usr/bin/env bash
# The training-step comparisons of docs/PERFORMANCE.md ("Overlap, priorities, fusion and
# compression"), side by side on one simulated 2 x 2 cluster at 1 Gbit/s:
#   bash docs/perf/training-step.sh [BUILD_DIR]
set -euo pipefail
B=${1:-build}/bin
L="$B/nodecomm-launch --nodes 2 --ranks-per-node 2 --netsim 1gbit --timeout 300"
run() { echo "## $*"; "$@" 2>&1 | grep -vE '^\[mpirun\]|^netsim:|^#\s*$' | grep -E '^[a-z_]+\(|^[a-z_]+ |^ +[0-9]|linkeff  ' || true; }
for rep in 1 2; do
  echo "# repetition $rep"
  run $L -- $B/nodecomm-bench --workload resnet50 --scale 0.1 --steps 10 --warmup 2
  run $L --backend mpi -- $B/nodecomm-bench --backend mpi --workload resnet50 --scale 0.1 --steps 10 --warmup 2
  run $L -- $B/nodecomm-bench --priority-probe --priority-policy none --iters 5
  run $L -- $B/nodecomm-bench --priority-probe --priority-policy direct --iters 9
  run $L --daemon-arg=--sched-target-us=1000 -- $B/nodecomm-bench --priority-probe --priority-policy direct --iters 9
  run $L -- $B/nodecomm-bench --sizes 4K --batch 1000 --iters 5 --warmup 1 --fusion on
  run $L -- $B/nodecomm-bench --sizes 4K --batch 1000 --iters 5 --warmup 1 --fusion off
  run $L --backend mpi -- $B/nodecomm-bench --backend mpi --sizes 4K --batch 1000 --iters 5 --warmup 1
  run $L -- $B/nodecomm-bench --sizes 64M --iters 5 --warmup 1 --compress none
  run $L -- $B/nodecomm-bench --sizes 64M --iters 5 --warmup 1 --compress bf16
  run $L -- $B/nodecomm-bench --sizes 64M --iters 5 --warmup 1 --compress int8
done
