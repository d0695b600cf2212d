#!/usr/bin/env bash
# PyTorch DDP step time, nodecomm hook and plain DDP on the nodecomm torch.distributed backend
# against DDP's own gloo allreduce, side by side on one simulated cluster: 2 nodes x 2 ranks,
# 1 Gbit/s links (docs/PERFORMANCE.md, "PyTorch DDP: nodecomm hook vs gloo"). Runs gloo,
# nodecomm (hook), nodecomm with bf16 wire compression, gloo with torch's fp16_compress_hook,
# no gradient exchange at all (the compute floor), and, when the backend is built, plain DDP on
# it (--backend nodecomm, f32 and bf16) REPS times, interleaved, and prints each summary and
# the ratios of mean step times.
#   bash docs/perf/pytorch-ddp.sh [BUILD_DIR] [REPS] [-- EXTRA ARGS for pytorch_ddp.py]
# Needs root (--netsim) and python3-torch for /usr/bin/python3.
set -euo pipefail
BUILD=${1:-build}
REPS=${2:-2}
shift $(( $# < 2 ? $# : 2 ))
[ "${1:-}" = "--" ] && shift
EXTRA=("$@")
HERE=$(cd "$(dirname "$0")/../.." && pwd)
export PYTHONPATH="$BUILD/python${PYTHONPATH:+:$PYTHONPATH}"
L=("$BUILD/bin/nodecomm-launch" --timeout 600 --netsim 1gbit --nodes 2 --ranks-per-node 2)
# 3 warm-up steps: the hook registers DDP's buckets in steps 0 and 1 (before and after DDP
# rebuilds them), the backend moves them into shared memory on their second allreduce (step 2).
ARGS=(--steps 20 --warmup 3 --batch 8 --quiet "${EXTRA[@]}")

# mean_step_ms of one run, its summary line echoed to stderr.
run() {
  local line
  line=$("${L[@]}" -- /usr/bin/python3 "$HERE/examples/pytorch_ddp.py" "${ARGS[@]}" "$@" 2>&1 |
         grep '^summary:' || true)
  [ -n "$line" ] || { echo "pytorch-ddp.sh: run '$*' printed no summary" >&2; exit 1; }
  echo "$line" >&2
  sed -E 's/.*mean_step_ms=([0-9.]+).*/\1/' <<<"$line"
}

BACKEND=no
if /usr/bin/python3 -c "import nodecomm.torch as t, sys; sys.exit(0 if t.backend_available() else 1)"; then
  BACKEND=yes
else
  echo "# the nodecomm torch backend is not built: no backend columns"
fi
echo "# $(date -u +%F) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); args: ${ARGS[*]}"
for rep in $(seq "$REPS"); do
  echo "# repetition $rep"
  gloo=$(run --reference gloo)
  nc=$(run)
  nc_bf16=$(run --compress bf16)
  gloo_fp16=$(run --reference gloo --gloo-compress fp16)
  floor=$(run --reference none)
  awk -v g="$gloo" -v n="$nc" -v b="$nc_bf16" -v h="$gloo_fp16" -v f="$floor" 'BEGIN {
    printf "ratio gloo/nodecomm %.2f   gloo/nodecomm+bf16 %.2f   gloo+fp16/nodecomm+bf16 %.2f   (step ms: gloo %.1f, nodecomm %.1f, nodecomm+bf16 %.1f, gloo+fp16 %.1f, no exchange %.1f)\n", g / n, g / b, h / b, g, n, b, h, f }'
  if [ "$BACKEND" = yes ]; then
    pg=$(run --backend nodecomm)
    pg_bf16=$(run --backend nodecomm --compress bf16)
    awk -v g="$gloo" -v n="$nc" -v b="$nc_bf16" -v p="$pg" -v q="$pg_bf16" 'BEGIN {
      printf "backend: ratio gloo/backend %.2f   hook/backend %.2f   hook+bf16/backend+bf16 %.2f   (step ms: backend %.1f, backend+bf16 %.1f)\n", g / p, n / p, b / q, p, q }'
  fi
done
