#!/usr/bin/env bash
# One command: install dependencies, build, and run the demo: a simulated cluster of 2 nodes
# with 2 training ranks each doing real, checked allreduces through nodecommd, then Open MPI
# and Gloo on the same 4 ranks as baselines, and one table of the three side by side; then a
# simulated training step (ResNet-50's gradients, compute as sleep) on each of the three, to
# show how much of the communication hides behind compute.
#   bash tools/demo.sh                 # extra arguments go to every nodecomm-bench run
# As root, where network namespaces can be made, the nodes are joined by simulated 1 Gbit/s
# links (nodecomm-launch --netsim; DEMO_NETSIM=RATE picks another rate, DEMO_NETSIM=none none),
# and the table adds each system's link efficiency.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
BUILD_DIR=${BUILD_DIR:-build}
# Ninja for a new build directory, as tools/test.sh (the two share it).
command -v ninja >/dev/null 2>&1 && export CMAKE_GENERATOR=${CMAKE_GENERATOR:-Ninja}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" --target nodecommd nodecomm-launch nodecomm-bench
BIN=$BUILD_DIR/bin
WORK=$(mktemp -d /tmp/nodecomm-demo.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# Simulated links only where they can be made: root, and everything the launcher needs tried
# once in a throw-away namespace (as tests/integration/netsim.sh does; some containers let a
# namespace be added but not entered).
netsim=${DEMO_NETSIM:-}
if [ -z "$netsim" ]; then
  netsim=none
  probe=ncdemoprobe$$
  if [ "$(id -u)" -eq 0 ] && command -v tc >/dev/null &&
    { ip netns add $probe && ip -n $probe link set lo up && ip -n $probe link add br0 type bridge &&
      ip -n $probe link add name va type veth peer name vb &&
      tc -n $probe qdisc add dev va root tbf rate 1gbit burst 256kb latency 5ms; } >/dev/null 2>&1; then
    netsim=1gbit
  fi
  ip netns delete $probe >/dev/null 2>&1 || true
fi
LAUNCH=("$BIN/nodecomm-launch" --timeout 300 --nodes 2 --ranks-per-node 2)
where="on this machine's loopback and shared memory (no simulated links)"
if [ "$netsim" != none ]; then
  LAUNCH+=(--netsim "$netsim")
  where="over simulated $netsim links (one network namespace per node)"
fi
BENCH=(--op allreduce --check --min-bytes 8 --max-bytes 16M --factor 4)

run() {  # SYSTEM TITLE [BENCH-ARGS...]
  local system=$1 title=$2
  shift 2
  echo "== $title: 2 nodes x 2 ranks $where"
  "${LAUNCH[@]}" --backend "$system" -- "$BIN/nodecomm-bench" --backend "$system" "${BENCH[@]}" \
    --json "$WORK/$system.json" "$@"
  echo
}
run nodecomm "nodecomm, through one nodecommd per node" "$@"
run mpi "baseline: Open MPI's MPI_Allreduce directly among the 4 ranks" "$@"
run gloo "baseline: Gloo's allreduce (TCP) among the 4 ranks, as PyTorch's gloo backend" "$@"

# value FILE SIZE KEY: a field of the JSON Lines record of one size.
value() {
  awk -v s="$2" -v k="$3" '
    index($0, "\"size\":" s ",") {
      if (match($0, "\"" k "\":[^,}]*")) { v = substr($0, RSTART, RLENGTH); sub(/^"[^"]*":/, "", v); print v }
    }' "$1"
}
echo "== side by side: allreduce f32, 2 nodes x 2 ranks $where; every element checked"
metric=busbw_gbs
title="busbw (GB/s)"
if [ "$netsim" != none ]; then
  metric=linkeff
  title="link efficiency (share of each node's $netsim link)"
fi
echo "   time per call (us), and $title; ratios above 1: nodecomm is faster"
printf '%10s  %11s %11s %11s  %9s %9s %9s  %10s %10s\n' size "nodecomm" "Open MPI" "Gloo" \
  "nodecomm" "Open MPI" "Gloo" "vs OpenMPI" "vs Gloo"
for size in $(grep -o '"size":[0-9]*' "$WORK/nodecomm.json" | cut -d: -f2); do
  n=$(value "$WORK/nodecomm.json" "$size" time_us)
  m=$(value "$WORK/mpi.json" "$size" time_us)
  g=$(value "$WORK/gloo.json" "$size" time_us)
  awk -v s="$size" -v n="$n" -v m="$m" -v g="$g" \
    -v en="$(value "$WORK/nodecomm.json" "$size" $metric)" \
    -v em="$(value "$WORK/mpi.json" "$size" $metric)" \
    -v eg="$(value "$WORK/gloo.json" "$size" $metric)" 'BEGIN {
      printf "%10d  %11.1f %11.1f %11.1f  %9.3f %9.3f %9.3f  %9.2fx %9.2fx\n",
        s, n, m, g, en, em, eg, m / n, g / n }'
done

# The training step: each rank computes layer by layer (sleeping, as a host thread does while
# its accelerator computes) and posts each layer's gradient allreduce as soon as it is ready.
STEP=(--workload resnet50 --scale "${DEMO_SCALE:-0.1}" --steps 5 --warmup 1)
for system in nodecomm mpi gloo; do
  "${LAUNCH[@]}" --backend "$system" -- "$BIN/nodecomm-bench" --backend "$system" "${STEP[@]}" \
    --json "$WORK/$system.step.json" >"$WORK/$system.step.txt" 2>&1 ||
    { cat "$WORK/$system.step.txt"; exit 1; }
done
field() { grep -o "\"$2\":[^,}]*" "$1" | head -1 | cut -d: -f2; }
echo
echo "== training step: ResNet-50 gradients (scale ${DEMO_SCALE:-0.1}), 2 nodes x 2 ranks $where"
echo "   compute only, communication only, and the real step that overlaps them (ms, median);"
echo "   overlap 1.0: all communication hidden behind compute; ratios above 1: nodecomm is faster"
printf '%10s  %10s %10s %10s  %8s  %10s\n' system compute comm step overlap "step ratio"
n_step=$(field "$WORK/nodecomm.step.json" t_step)
for system in nodecomm mpi gloo; do
  f=$WORK/$system.step.json
  awk -v s="$system" -v c="$(field "$f" t_compute)" -v m="$(field "$f" t_comm)" \
    -v t="$(field "$f" t_step)" -v o="$(field "$f" overlap_efficiency)" -v n="$n_step" 'BEGIN {
      name = s == "mpi" ? "Open MPI" : (s == "gloo" ? "Gloo" : s)
      ov = o == "null" || o == "" ? "n/a" : sprintf("%.2f", o)
      printf "%10s  %10.1f %10.1f %10.1f  %8s  %9.2fx\n", name, c, m, t, ov, t / n }'
done
