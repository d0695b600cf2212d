#!/usr/bin/env bash
# init_process_group("nodecomm") under torchrun's environment: a one-node service cluster,
# then 3 ranks started with the variables torchrun sets (RANK, LOCAL_RANK, WORLD_SIZE,
# LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RUN_ID) and only the
# daemon's NODECOMM_RUNTIME_DIR. (Debian's torchrun itself, torch 1.13 on Python 3.11, stops
# before starting workers: AttributeError in elastic's to_map.)
#   torch_backend_env.sh BIN_DIR PYTHON SCRIPT
set -uo pipefail
BIN=$1 PYTHON=$2 SCRIPT=$3
CLUSTER=torchenv$$
trap '"$BIN/nodecomm-launch" --service down --cluster "$CLUSTER" >/dev/null 2>&1' EXIT
"$BIN/nodecomm-launch" --service up --nodes 1 --cluster "$CLUSTER" || exit 1
PORT=$("$PYTHON" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
pids=()
for r in 0 1 2; do
  env -u NODECOMM_JOB -u NODECOMM_LOCAL_RANK -u NODECOMM_LOCAL_SIZE -u NODECOMM_NODE \
      -u NODECOMM_NODES NODECOMM_RUNTIME_DIR="/tmp/nodecomm-cluster.$CLUSTER/node0" \
      RANK=$r LOCAL_RANK=$r WORLD_SIZE=3 LOCAL_WORLD_SIZE=3 GROUP_RANK=0 \
      MASTER_ADDR=127.0.0.1 MASTER_PORT="$PORT" TORCHELASTIC_RUN_ID="torchenv-$$" \
      timeout 90 "$PYTHON" "$SCRIPT" &
  pids+=($!)
done
failed=0
for p in "${pids[@]}"; do
  wait "$p"; status=$?
  [ "$status" -eq 77 ] && exit 77
  [ "$status" -eq 0 ] || failed=$((failed + 1))
done
[ "$failed" -eq 0 ] && echo "torch_backend_env: 3 ranks ok" || echo "torch_backend_env: $failed rank(s) failed"
[ "$failed" -eq 0 ]
