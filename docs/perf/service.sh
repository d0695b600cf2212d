#!/usr/bin/env bash
# The persistent service on a simulated cluster at 1 Gbit/s (docs/PERFORMANCE.md, "The
# service"), one daemon per node as `nodecomm-launch --service up` runs them:
#   share      two bandwidth-bound jobs on the same 2 nodes, weights 1:1 and then 3:1 (the
#              daemons run --job-weights '*=3', the jobs ask with NODECOMM_JOB_WEIGHT), after
#              each job alone. Each job's algbw is taken over the window where both jobs' timed
#              loops overlap (nodecomm-bench --timeline, tools/timeline-share), and printed
#              as its share of the two (A / (A + B)) and as a fraction of its own algbw alone.
#   single     one job, 2 nodes x 2 ranks, allreduce 16 and 64 MiB: link efficiency through the
#              service against per-job daemons (nodecomm-launch without --service), interleaved.
#   formation  a new 4-node job (1 rank per node) on a 4-node service cluster: from the last
#              rank's start to its first collective complete on every rank; per-job daemons'
#              launch beside it, from the launcher's start.
#   bash docs/perf/service.sh [BUILD_DIR] [share|single|formation|all] [REPS]
# Needs root (--netsim) and ompi-server (package openmpi-bin).
set -euo pipefail
BUILD=${1:-build}
WHAT=${2:-all}
REPS=${3:-3}
LAUNCH=$BUILD/bin/nodecomm-launch
BENCH=$BUILD/bin/nodecomm-bench
NAME=perfsvc$$
HERE=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/nodecomm-perfsvc.XXXXXX)
chmod 0755 "$work"
cleanup() {
  [ -d "/tmp/nodecomm-cluster.$NAME" ] &&
    timeout 60 "$LAUNCH" --service down --cluster "$NAME" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
die() {
  echo "service.sh: $*" >&2
  for f in "$work"/*.out; do [ -f "$f" ] && tail -n 20 "$f" | sed "s|^|[$(basename "$f")] |" >&2; done
  exit 1
}
up() {  # up NODES [DAEMON-ARG...]
  local nodes=$1
  shift
  local args=()
  for a in "$@"; do args+=("--daemon-arg=$a"); done
  timeout 120 "$LAUNCH" --service up --nodes "$nodes" --cluster "$NAME" --netsim 1gbit \
    --daemon-arg=--config=none "${args[@]}" >"$work/up.out" 2>&1 || die "--service up failed"
}
down() { timeout 60 "$LAUNCH" --service down --cluster "$NAME" >/dev/null 2>&1 || true; }
# attach OUT [ENV=VALUE...] :: LAUNCH-ARGS... -- PROGRAM...: in the background.
attach() {
  local out=$1
  shift
  local envs=()
  while [ "$1" != :: ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" timeout --kill-after=5 600 "$LAUNCH" --attach --cluster "$NAME" \
    --timeout 590 "$@" >"$work/$out.out" 2>&1 &
}
SHARE_SIZE=32M
SHARE_ITERS=${SHARE_ITERS:-40}
bench_args() {  # bench_args TIMELINE
  echo "$BENCH --sizes $SHARE_SIZE --iters $SHARE_ITERS --warmup 2 --timeline $1"
}
share() {
  up 2 --job-weights=*=3
  local rep
  for rep in $(seq "$REPS"); do
    local tag=s$rep
    attach "${tag}solo-a" NODECOMM_JOB_WEIGHT=1 :: --job "${tag}sa" --nodes 2 \
      --ranks-per-node 1 -- $(bench_args "$work/${tag}solo-a.tl")
    wait $! || die "job A alone failed"
    attach "${tag}solo-b" NODECOMM_JOB_WEIGHT=1 :: --job "${tag}sb" --nodes 2 \
      --ranks-per-node 1 -- $(bench_args "$work/${tag}solo-b.tl")
    wait $! || die "job B alone failed"
    local wa wb
    for weights in 1:1 3:1; do
      wa=${weights%:*}
      wb=${weights#*:}
      attach "${tag}a$wa" NODECOMM_JOB_WEIGHT="$wa" :: --job "${tag}a$wa" --nodes 2 \
        --ranks-per-node 1 -- $(bench_args "$work/${tag}a$wa.tl")
      local a=$!
      attach "${tag}b$wa" NODECOMM_JOB_WEIGHT="$wb" :: --job "${tag}b$wa" --nodes 2 \
        --ranks-per-node 1 -- $(bench_args "$work/${tag}b$wa.tl")
      local b=$!
      wait "$a" || die "job A ($weights) failed"
      wait "$b" || die "job B ($weights) failed"
      echo "share $weights rep $rep: $("$HERE/tools/timeline-share" "$work/${tag}a$wa.tl" \
        "$work/${tag}b$wa.tl" --alone "$work/${tag}solo-a.tl" "$work/${tag}solo-b.tl")"
    done
  done
  down
}

linkeff() {  # linkeff OUT: "16M:0.81 64M:0.85" from nodecomm-bench's footer
  sed -n 's/^# linkeff //p' "$work/$1.out" | tail -n 1
}
single() {
  local args=(--sizes 16M,64M --link-rate 1gbit)
  local rep
  for rep in $(seq "$REPS"); do
    timeout 600 "$LAUNCH" --timeout 590 --netsim 1gbit --nodes 2 --ranks-per-node 2 -- \
      "$BENCH" "${args[@]}" >"$work/perjob$rep.out" 2>&1 || die "per-job daemons' run failed"
    up 2
    attach "service$rep" :: --job "single$rep" --nodes 2 --ranks-per-node 2 -- \
      "$BENCH" "${args[@]}"
    wait $! || die "the service's run failed"
    down
    echo "single rep $rep: linkeff per-job daemons $(linkeff "perjob$rep")   service $(linkeff "service$rep")"
  done
}

formation() {
  up 4
  local rep
  for rep in $(seq "$REPS"); do
    local t0
    t0=$(date +%s.%N)
    attach "form$rep" :: --job "form$rep" --nodes 4 --ranks-per-node 1 -- \
      "$BENCH" --sizes 8 --iters 1 --warmup 0 --timeline "$work/form$rep.tl"
    wait $! || die "4-node job $rep failed"
    awk -v t0="$t0" '/^# started/ { printf "formation rep '"$rep"': service, 4 nodes: %.3f s from the last rank'"'"'s start to its first collective done, %.3f s from the launcher'"'"'s\n", $5 - $3, $5 - t0 }' \
      "$work/form$rep.tl"
  done
  down
  for rep in $(seq "$REPS"); do
    local t0
    t0=$(date +%s.%N)
    timeout 300 "$LAUNCH" --timeout 290 --netsim 1gbit --nodes 4 --ranks-per-node 1 -- \
      "$BENCH" --sizes 8 --iters 1 --warmup 0 --timeline "$work/pj$rep.tl" \
      >"$work/pj$rep.out" 2>&1 || die "per-job daemons' 4-node run failed"
    awk -v t0="$t0" '/^# started/ { printf "formation rep '"$rep"': per-job daemons, 4 nodes: %.3f s from the last rank'"'"'s start, %.3f s from the launcher'"'"'s\n", $5 - $3, $5 - t0 }' \
      "$work/pj$rep.tl"
  done
}

echo "# $(date -u +%F) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null)"
case $WHAT in
  share) share ;;
  single) single ;;
  formation) formation ;;
  all) share; single; formation ;;
  *) die "unknown part $WHAT (share, single, formation or all)" ;;
esac
